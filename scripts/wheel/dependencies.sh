#!/usr/bin/env bash
# The libraries the manylinux wheels carry, built from Debian 12's source packages with zig for
# one arch (scripts/build_wheel.sh runs it; docs/python.md, "The wheel"):
#
#   bash scripts/wheel/dependencies.sh SOURCES_DIR PREFIX ARCH
#
#   SOURCES_DIR  Debian's source packages of elfutils, hiredis, libzstd and zlib: downloaded
#                into SOURCES_DIR/download/ with apt-get (its own package lists in
#                SOURCES_DIR/apt/, from bookworm and bookworm-updates; the system's sources and
#                lists are left alone) and unpacked with their Debian patches by dpkg-source
#                into SOURCES_DIR/<package>/. apt-get checks each file against the signed
#                index, dpkg-source against the .dsc. Kept: a rerun needs no network.
#   PREFIX       the arch's folder, whose bin/ holds build_wheel.sh's zig wrappers (cc, c++,
#                ar, ranlib); the libraries go to PREFIX/lib, their headers to
#                PREFIX/include, their .pc files to PREFIX/lib/pkgconfig, the builds to
#                PREFIX/build/
#   ARCH         x86_64 or aarch64
#
# Built, each with its own build system, by zig's clang at -O2 (Debian's level), linked with
# lld, stripped when linked (-s) and refusing undefined symbols:
#   zlib      libz.a only (./configure --static, -fPIC), linked into libelf.so.1: not carried
#   elfutils  libelf only: ./configure with every optional part off (no NLS, debuginfod, bzip2,
#             lzma or zstd), then lib/libeu.a and libelf/libelf.so, nothing else; installed as
#             libelf.so.1 with libelf.h, gelf.h, nlist.h and the libelf.pc configure wrote
#   hiredis   libhiredis.so (its Makefile), installed as libhiredis.so.0.14 with the headers
#             its install rule copies and the hiredis.pc its Makefile writes
#   libzstd   lib/'s multithreaded libzstd.so (its Makefile's install-shared, install-includes
#             and install-pc), libzstd.so.1
# and libkjit_glibc_compat.a (scripts/wheel/glibc_compat.c: glibc functions above 2.28, and
# glibc's string functions instead of zig compiler_rt's),
# and, header-only, copied from the Debian packages the normal build uses (scripts/setup.sh
# installs them): fmt, spdlog, CLI11, nlohmann/json, xxHash (with a libxxhash.pc). A rerun
# rebuilds a library only when its source, this script or the wrappers changed (the stamp
# PREFIX/.stamp-<name>). Exits non-zero naming what failed.
set -euo pipefail

say() { printf 'dependencies: %s\n' "$*"; }
fail() { printf 'dependencies: error: %s\n' "$*" >&2; exit 1; }

[ $# -eq 3 ] || fail "usage: dependencies.sh SOURCES_DIR PREFIX ARCH"
sources=$(realpath -m "$1") prefix=$(realpath -m "$2") arch=$3
case "$arch" in x86_64 | aarch64) ;; *) fail "ARCH must be x86_64 or aarch64, not '$arch'" ;; esac
for tool in cc c++ ar ranlib; do
    [ -x "$prefix/bin/$tool" ] || fail "no $prefix/bin/$tool (scripts/build_wheel.sh writes the zig wrappers first)"
done
for tool in apt-get dpkg-source readelf make; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool not found (Debian: apt-get install apt dpkg-dev binutils make)"
done
jobs=$(nproc)
# The libraries' Makefiles read these from the environment: zstd's would put its objects in
# $BUILD_DIR (scripts/setup.sh exports the project's build tree there), and a caller's flags
# would join the ones below.
unset BUILD_DIR CFLAGS CXXFLAGS CPPFLAGS LDFLAGS LIBS PREFIX DESTDIR LIBDIR INCLUDEDIR
cc=$prefix/bin/cc cxx=$prefix/bin/c++ ar=$prefix/bin/ar ranlib=$prefix/bin/ranlib
# A library is rebuilt when its source, this recipe or the compiler (the wrappers name zig's
# version and the target) changed.
recipe=$(cat "${BASH_SOURCE[0]}" "$cc" "$cxx" | sha256sum | cut -c1-16)
mkdir -p "$sources" "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/build"

# --- Debian's source packages
packages=(elfutils hiredis libzstd zlib)
missing=()
for p in "${packages[@]}"; do
    [ -s "$sources/$p.version" ] && [ -d "$sources/$p" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$keyring" ] || fail "no $keyring to check Debian's index with (Debian: apt-get install debian-archive-keyring)"
    apt=$sources/apt
    mkdir -p "$apt/sources.list.d" "$apt/lists/partial" "$apt/cache/archives/partial" "$sources/download"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: %s\n' \
        "$keyring" >"$apt/sources.list.d/debian-src.sources"
    # Private lists, cache and sources: the system's apt state is neither read nor written.
    apt_options=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root")
    say "downloading Debian 12's source packages: ${missing[*]}"
    for p in "${missing[@]}"; do rm -f "$sources/download/${p}_"*; done
    apt-get "${apt_options[@]}" -q update >"$apt/update.log" 2>&1 ||
        fail "apt-get update of Debian's source index failed (needs deb.debian.org once): $(tail -n 3 "$apt/update.log")"
    (cd "$sources/download" && apt-get "${apt_options[@]}" -q source --download-only "${missing[@]}") >"$apt/source.log" 2>&1 ||
        fail "apt-get source --download-only ${missing[*]} failed: $(tail -n 3 "$apt/source.log")"
    for p in "${missing[@]}"; do
        dscs=("$sources/download/${p}_"*.dsc)
        dsc=${dscs[0]}
        [ ${#dscs[@]} -eq 1 ] && [ -f "$dsc" ] || fail "apt-get source gave not one ${p}_*.dsc in $sources/download: ${dscs[*]}"
        rm -rf "${sources:?}/$p" "$sources/$p.version"
        # Unpacked with Debian's patches applied; dpkg-source checks the archives against the
        # checksums in the .dsc, which apt-get checked against the signed index.
        dpkg-source -q -x "$dsc" "$sources/$p" >"$sources/$p.unpack.log" 2>&1 ||
            fail "dpkg-source -x $dsc failed: $(tail -n 3 "$sources/$p.unpack.log")"
        sed -n 's/^Version: //p' "$dsc" >"$sources/$p.version"
        # dpkg-source copies the upstream archive beside the tree it unpacks: kept once, in download/.
        rm -f "$sources/${p}_"*.orig.tar.*
    done
fi
version() { cat "$sources/$1.version"; }

# is_built NAME STAMP: true when NAME was built from the same STAMP (its source version, this
# recipe, the compiler).
is_built() { [ "$(cat "$prefix/.stamp-$1" 2>/dev/null)" = "$2" ]; }
built() { printf '%s\n' "$2" >"$prefix/.stamp-$1"; }
# check_arch FILE: the library is for ARCH (readelf reads any arch's ELF).
check_arch() {
    local machine
    machine=$(readelf -h "$1" | sed -n 's/^ *Machine: *//p')
    case "$arch:$machine" in
        x86_64:*X86-64* | aarch64:AArch64) ;;
        *) fail "$1 is for '$machine', not $arch" ;;
    esac
}
# Every library: -O2, stripped and no undefined symbol left when linked.
cflags=-O2
ldflags="-s -Wl,--no-undefined"

# --- zlib (for libelf: compressed ELF sections), static and position-independent
stamp="zlib $(version zlib) $recipe"
zlib=$prefix/build/zlib-install
if ! is_built zlib "$stamp"; then
    say "building zlib $(version zlib) (libz.a, for libelf)"
    rm -rf "$prefix/build/zlib" "$zlib"
    cp -a "$sources/zlib" "$prefix/build/zlib"
    (cd "$prefix/build/zlib" &&
        CC=$cc AR=$ar RANLIB=$ranlib CFLAGS="$cflags -fPIC" ./configure --static --prefix="$zlib" &&
        make -j"$jobs" libz.a && make install) >"$prefix/build/zlib.log" 2>&1 ||
        fail "zlib's build failed: the end of $prefix/build/zlib.log: $(tail -n 5 "$prefix/build/zlib.log")"
    check_arch "$prefix/build/zlib/adler32.o"
    built zlib "$stamp"
fi

# --- elfutils: libelf only
stamp="elfutils $(version elfutils) $recipe $(cat "$prefix/.stamp-zlib")"
if ! is_built elfutils "$stamp"; then
    say "building libelf of elfutils $(version elfutils)"
    build=$prefix/build/elfutils
    rm -rf "$build"
    mkdir -p "$build"
    # lld refuses a version script naming a symbol the library lacks (libelf.map names
    # elf_scncnt, which 0.188 no longer has; GNU ld ignores it): --undefined-version.
    (cd "$build" &&
        "$sources/elfutils/configure" --host="$arch-linux-gnu" --prefix="$prefix" --libdir="$prefix/lib" \
            CC="$cc" CXX="$cxx" AR="$ar" RANLIB="$ranlib" CFLAGS="$cflags" CPPFLAGS="-I$zlib/include" \
            LDFLAGS="-L$zlib/lib -Wl,--undefined-version -Wl,-z,defs -s" \
            --disable-nls --disable-debuginfod --disable-libdebuginfod --disable-dependency-tracking \
            --without-bzlib --without-lzma --without-zstd &&
        make -j"$jobs" -C lib libeu.a && make -j"$jobs" -C libelf libelf.so) >"$prefix/build/elfutils.log" 2>&1 ||
        fail "libelf's build failed: the end of $prefix/build/elfutils.log: $(tail -n 5 "$prefix/build/elfutils.log")"
    check_arch "$build/libelf/libelf.so"
    ! readelf -d "$build/libelf/libelf.so" | grep -q 'NEEDED.*libz\.so' || fail "libelf.so needs libz.so: zlib was not linked in"
    install -m 755 "$build/libelf/libelf.so" "$prefix/lib/libelf.so.1"
    ln -sfn libelf.so.1 "$prefix/lib/libelf.so"
    install -m 644 "$sources/elfutils/libelf/libelf.h" "$sources/elfutils/libelf/gelf.h" \
        "$sources/elfutils/libelf/nlist.h" "$prefix/include/"
    # zlib is inside libelf.so.1: no Requires.private on a zlib.pc.
    sed '/^Requires.private:/d' "$build/config/libelf.pc" >"$prefix/lib/pkgconfig/libelf.pc"
    built elfutils "$stamp"
fi

# build_copy NAME STEP: NAME (a Debian source package) built from a fresh copy of its source in
# $prefix/build/NAME, by the function STEP run there with its output in $prefix/build/NAME.log;
# skipped when built before from the same source, recipe and compiler.
build_copy() {
    local name=$1 step=$2 stamp
    stamp="$name $(version "$name") $recipe"
    is_built "$name" "$stamp" && return 0
    say "building $name $(version "$name")"
    build=$prefix/build/$name
    rm -rf "$build"
    cp -a "$sources/$name" "$build"
    (cd "$build" && "$step") >"$build.log" 2>&1 ||
        fail "$name's build failed: the end of $build.log: $(tail -n 5 "$build.log")"
    "${step}_install"
    built "$name" "$stamp"
}

# --- hiredis
# 0.14.1's reply functions table declares createArray(task, int) for a function taking a size_t:
# GCC (Debian's build) warns, clang 16 and newer refuse; warned here too.
hiredis_make() {
    env CC="$cc" OPTIMIZATION="$cflags" DEBUG_FLAGS= CFLAGS=-Wno-error=incompatible-function-pointer-types \
        LDFLAGS="$ldflags" make -j"$jobs" libhiredis.so &&
        make hiredis.pc PREFIX="$prefix" LIBRARY_PATH=lib INCLUDE_PATH=include/hiredis
}
hiredis_make_install() {
    local soname
    check_arch "$build/libhiredis.so"
    soname=$(readelf -d "$build/libhiredis.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    [ "$soname" = libhiredis.so.0.14 ] || fail "$build/libhiredis.so has SONAME '$soname', not libhiredis.so.0.14"
    install -m 755 "$build/libhiredis.so" "$prefix/lib/$soname"
    ln -sfn "$soname" "$prefix/lib/libhiredis.so"
    mkdir -p "$prefix/include/hiredis"
    (cd "$build" && install -m 644 hiredis.h async.h read.h sds.h alloc.h "$prefix/include/hiredis/")
    install -m 644 "$build/hiredis.pc" "$prefix/lib/pkgconfig/"
}
build_copy hiredis hiredis_make

# --- zstd's library
# CFLAGS and LDFLAGS in the environment, not on make's command line, where they would replace
# the Makefile's own additions (-fPIC -fvisibility=hidden, -shared).
libzstd_make() {
    env CC="$cc" AR="$ar" CFLAGS="$cflags" LDFLAGS="$ldflags" \
        make -j"$jobs" -C lib install-shared install-includes install-pc \
        PREFIX="$prefix" LIBDIR="$prefix/lib" INCLUDEDIR="$prefix/include"
}
libzstd_make_install() { check_arch "$prefix/lib/libzstd.so.1"; }
build_copy libzstd libzstd_make

# --- glibc's functions as the C++ binaries take them (scripts/wheel/glibc_compat.c: those above
# 2.28 that libkjit calls; glibc's string functions rather than zig compiler_rt's)
stamp="compat $(sha256sum "$(dirname "${BASH_SOURCE[0]}")/glibc_compat.c" | cut -c1-16) $recipe"
if ! is_built compat "$stamp"; then
    say "building libkjit_glibc_compat.a"
    build=$prefix/build/compat
    rm -rf "$build"
    mkdir -p "$build"
    "$cc" $cflags -fPIC -fno-builtin -Wall -Wextra -Werror -c "$(dirname "${BASH_SOURCE[0]}")/glibc_compat.c" -o "$build/glibc_compat.o" ||
        fail "scripts/wheel/glibc_compat.c did not compile (above)"
    check_arch "$build/glibc_compat.o"
    rm -f "$prefix/lib/libkjit_glibc_compat.a"
    "$ar" rcs "$prefix/lib/libkjit_glibc_compat.a" "$build/glibc_compat.o"
    built compat "$stamp"
fi

# --- the header-only libraries, from Debian's packages (those the normal build compiles in)
header_packages=(libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev libxxhash-dev)
versions=$(dpkg-query -W -f '${Package} ${Version}\n' "${header_packages[@]}" 2>/dev/null) ||
    fail "missing Debian packages among ${header_packages[*]} (scripts/setup.sh installs them)"
stamp="headers $(tr '\n' ' ' <<<"$versions")$recipe"
if ! is_built headers "$stamp"; then
    say "copying the header-only libraries: $(tr '\n' ',' <<<"$versions" | sed 's/,$//; s/,/, /g')"
    for d in fmt spdlog CLI nlohmann; do
        [ -d "/usr/include/$d" ] || fail "no /usr/include/$d (scripts/setup.sh installs the Debian packages)"
        rm -rf "${prefix:?}/include/$d"
        cp -a "/usr/include/$d" "$prefix/include/$d"
    done
    install -m 644 /usr/include/xxhash.h /usr/include/xxh3.h "$prefix/include/"
    xxhash_version=$(sed -n 's/^libxxhash-dev \([0-9.]*\).*/\1/p' <<<"$versions")
    # Compiled in (XXH_INLINE_ALL): the header only. ${prefix} and ${includedir} are pkg-config's.
    # shellcheck disable=SC2016
    printf 'prefix=%s\nincludedir=${prefix}/include\n\nName: xxhash\nDescription: xxHash, header-only (XXH_INLINE_ALL)\nVersion: %s\nCflags: -I${includedir}\n' \
        "$prefix" "$xxhash_version" >"$prefix/lib/pkgconfig/libxxhash.pc"
    built headers "$stamp"
fi
say "$arch: libelf $(version elfutils) (zlib $(version zlib) inside), hiredis $(version hiredis), libzstd $(version libzstd) in $prefix/lib"
