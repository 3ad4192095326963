#!/usr/bin/env bash
# Installs the build tree into a fresh prefix and builds tests/consumer against it both ways a
# user would: CMake (find_package(kjit 0.1 REQUIRED), kjit::kjit) and pkg-config, each in C and
# C++; runs all four. Also checks the installed layout (the SONAME links, the three headers and
# the C++ companion kjit.hpp, which a program built against the prefix alone then uses, the
# package files), that find_package refuses an incompatible version, and that nothing but the
# product is installed (libkjit.so's worker helper, lib/kjit-worker, is part of it).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR FAKE_LIBCUDA
set -euo pipefail
build=$1 src=$2 fake_libcuda=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"

fail() { echo "FAIL: $*"; exit 1; }
version=$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/kjit.pc")
[ -n "$version" ] || fail "kjit.pc has no Version"
real="$prefix/lib/libkjit.so.$version"
[ -f "$real" ] && [ ! -L "$real" ] || fail "no $real"
[ "$(readlink "$prefix/lib/libkjit.so.${version%%.*}")" = "libkjit.so.$version" ] || fail "libkjit.so.${version%%.*} is not a link to libkjit.so.$version"
[ "$(readlink "$prefix/lib/libkjit.so")" = "libkjit.so.${version%%.*}" ] || fail "libkjit.so is not a link to the SONAME"
soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libkjit.so.${version%%.*}" ] || fail "SONAME is $soname"
for f in bin/kjit lib/kjit-worker include/kjit/kjit.h include/kjit/kjit_batch.h include/kjit/kjit_cache.h include/kjit/kjit.hpp lib/cmake/kjit/kjitConfig.cmake lib/cmake/kjit/kjitConfigVersion.cmake \
         lib/cmake/kjit/kjitTargets.cmake lib/pkgconfig/kjit.pc; do
    [ -f "$prefix/$f" ] || fail "$f is not installed"
done
extra=$(cd "$prefix" && find . -type f -o -type l | sort | grep -v -E '^\./(bin/kjit|lib/kjit-worker|include/kjit/kjit((_batch|_cache)?\.h|\.hpp)|lib/libkjit\.so(\.[0-9.]+)?|lib/cmake/kjit/kjit(Config|ConfigVersion|Targets|Targets-[a-z]+)\.cmake|lib/pkgconfig/kjit\.pc)$' || true)
[ -z "$extra" ] || fail "installed beyond the product: $extra"

# CMake, C and C++.
cmake -S "$src/tests/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" ||
    { cat "$work/configure.log"; fail "the consumer does not configure against the install"; }
cmake --build "$work/cmake-build" > "$work/build.log" || { cat "$work/build.log"; fail "the consumer does not build"; }
"$work/cmake-build/consumer_c" "$work/cache-cmake-c"
KJIT_LIBCUDA="$fake_libcuda" "$work/cmake-build/consumer_cpp" "$work/cache-cmake-cpp"
# The library it ran is the installed one, not the build tree's.
# (ldd's output is captured first: grep -q exiting early would SIGPIPE ldd under pipefail.)
libs=$(ldd "$work/cmake-build/consumer_c")
case "$libs" in
    *"$prefix/lib/libkjit.so.${version%%.*}"*) ;;
    *) echo "$libs"; fail "consumer_c does not use the installed libkjit" ;;
esac
# An incompatible version request fails.
if cmake -S "$src/tests/consumer" -B "$work/cmake-bad" -DCMAKE_PREFIX_PATH="$prefix" \
        -DKJIT_REQUIRED_VERSION=99.0 > "$work/bad.log" 2>&1; then
    fail "find_package(kjit 99.0) succeeded against $version"
fi
grep -q "kjit" "$work/bad.log" || fail "find_package(kjit 99.0) failed without naming kjit"

# pkg-config, C and C++.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion kjit)" = "$version" ] || fail "pkg-config --modversion kjit"
flags=$(pkg-config --cflags --libs kjit)
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Wpedantic -Werror "$src/tests/consumer/consumer.c" $flags -Wl,-rpath,"$prefix/lib" -o "$work/pc_c"
# shellcheck disable=SC2086
c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror "$src/tests/consumer/consumer.cpp" $flags -Wl,-rpath,"$prefix/lib" -o "$work/pc_cpp"
"$work/pc_c" "$work/cache-pc-c"
# Each installed sub-header compiles alone, finding kjit.h beside itself, as C99 and C++17.
for h in kjit_batch.h kjit_cache.h; do
    printf '#include <kjit/%s>\nint kjit_use(void);\nint kjit_use(void) { return KJIT_VERSION_NUMBER; }\n' "$h" > "$work/alone.c"
    # shellcheck disable=SC2086
    cc -std=c99 -Wall -Wextra -Wpedantic -Werror $flags -c "$work/alone.c" -o "$work/alone.o" ||
        fail "the installed $h does not compile alone (C99)"
    # shellcheck disable=SC2086
    c++ -x c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror $flags -c "$work/alone.c" -o "$work/alone.o" ||
        fail "the installed $h does not compile alone (C++17)"
done
"$work/pc_cpp" "$work/cache-pc-cpp"
# The installed kjit.hpp: a name expression from C++ types, compiled and named through the
# installed library, with its throwing wrappers.
cat > "$work/hpp.cpp" <<'CPP'
#include <kjit/kjit.hpp>

#include <cstdio>

int main(int argc, char **argv) try {
    if (argc != 2) return 2;
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = argv[1];
    opts.arch = "sm_90";
    const std::string expression = kjit::instantiate("scale", kjit::type<float>, 5);
    opts.name_expression = expression.c_str();
    const kjit::Compiled c = kjit::compile_named(
        "template <typename T, int N> __global__ void scale(T *p) { p[threadIdx.x] *= N; }\n", "scale", &opts);
    std::printf("%s %s\n", expression.c_str(), c.kernel_name.c_str());
    return c.kernel_name == "_Z5scaleIfLi5EEvPT_" ? 0 : 1;
} catch (const kjit::Error &e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
}
CPP
# shellcheck disable=SC2086
c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror "$work/hpp.cpp" $flags -Wl,-rpath,"$prefix/lib" -o "$work/pc_hpp" ||
    fail "a program using the installed kjit.hpp does not build"
"$work/pc_hpp" "$work/cache-pc-hpp" > "$work/hpp.out" || fail "the kjit.hpp program failed: $(cat "$work/hpp.out")"
# The installed command finds the installed libkjit.so (its RPATH), not the build tree's.
cli_libs=$(ldd "$prefix/bin/kjit")
cli_kjit=$(printf '%s\n' "$cli_libs" | awk '$1 == "libkjit.so.'"${version%%.*}"'" { print $3 }')
[ -n "$cli_kjit" ] && [ "$(realpath "$cli_kjit")" = "$(realpath "$real")" ] ||
    fail "bin/kjit does not load $real: $cli_libs"
[ "$("$prefix/bin/kjit" --version)" = "kjit $version" ] || fail "bin/kjit --version: $("$prefix/bin/kjit" --version)"
"$prefix/bin/kjit" cache stats --cache-dir "$work/no-cache" --json > /dev/null || fail "bin/kjit cache stats failed"
# The installed library starts the installed worker helper, found beside itself: a batch on
# worker processes works from the prefix alone (explicit processes fail without the helper).
worker_libs=$(ldd "$prefix/lib/kjit-worker")
case "$worker_libs" in *"not found"*) fail "lib/kjit-worker misses libraries: $worker_libs" ;; esac
for i in 1 2; do
    printf '__global__ void gemm(float *p) { p[0] = %d; }\n' "$i" > "$work/w$i.cu"
done
"$prefix/bin/kjit" compile "$work/w1.cu" "$work/w2.cu" -k gemm --arch sm_90 --workers processes -j 2 \
    --cache-dir "$work/cache-workers" > "$work/workers.out" 2> "$work/workers.err" ||
    fail "a batch on the installed worker processes failed: $(cat "$work/workers.err")"
[ "$(grep -c 'kernel.cubin$' "$work/workers.out")" = 2 ] || fail "the worker batch printed: $(cat "$work/workers.out")"

echo "install test OK: libkjit $version and bin/kjit installed to a fresh prefix; CMake and pkg-config consumers, C and C++, built and ran"
