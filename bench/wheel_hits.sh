#!/usr/bin/env bash
# The wheel's libkjit against the Debian build's on the hit path (issue 49: the zig build must not
# be slower): kjit_compile of one templated kernel on a warm cache, timed in C through each
# libkjit.so.0 in turn, with the hit memo (a repeat: the default) and without (KJIT_HIT_MEMO=0:
# every call looks the entry up in full on disk, docs/cache-layout.md). No GPU needed: a hit
# loads no cubin, and after the first compile no NVRTC either.
#
#   bash bench/wheel_hits.sh [WHEEL [LIBKJIT]]
#
#   WHEEL    the x86_64 wheel (default: dist/kjit-<version>-*_x86_64.whl of this tree's version;
#            bash scripts/build_wheel.sh makes it): its kjit/ folder is unpacked into a temporary
#            folder, libkjit.so.0 with the libraries it carries
#   LIBKJIT  the Debian build's library (default: $BUILD_DIR/src/libkjit.so.0, BUILD_DIR
#            defaulting to <repo>/build, which bench/run.sh and tests/run.sh build; its build
#            type is printed: those scripts build RelWithDebInfo, the wheel is Release)
#
# Environment: ROUNDS (default 7) processes per library and mode, alternating between the two
# libraries; CALLS (default 200000) memo hits timed per process, FULL_CALLS (default 20000) hits
# with KJIT_HIT_MEMO=0. Each process warms up first (one call, then 1000 untimed). Prints each
# library's median ns per call for both modes and the ratio wheel / Debian (below 1: the wheel
# is faster). Needs cc (the driver, which dlopens each library), the CUDA toolkit's NVRTC for
# the one compile that fills the cache, and python3 (to unpack the wheel). Exits non-zero if a
# step fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=${ROUNDS:-7} calls=${CALLS:-200000} full_calls=${FULL_CALLS:-20000}
fail() { printf 'wheel_hits: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'wheel_hits: %s\n' "$*"; }

version=$(sed -n 's/^#define KJIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$root/include/kjit/kjit.h" | paste -sd.)
wheel=${1:-}
if [ -z "$wheel" ]; then
    wheels=("$root/dist/kjit-$version-"*_x86_64.whl)
    wheel=${wheels[0]}
fi
[ -f "$wheel" ] || fail "no wheel '$wheel' (bash scripts/build_wheel.sh builds dist/kjit-$version-...-manylinux_2_28_x86_64.whl)"
build=${BUILD_DIR:-$root/build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
debian=${2:-$build/src/libkjit.so.0}
[ -f "$debian" ] || fail "no Debian-built library '$debian' (bash tests/run.sh or bench/run.sh builds it; or pass LIBKJIT)"
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$(dirname "$(dirname "$debian")")/CMakeCache.txt" 2>/dev/null || true)
command -v cc >/dev/null 2>&1 || fail "no cc (Debian: apt-get install gcc)"

work=$(mktemp -d "${TMPDIR:-/tmp}/kjit-wheel-hits.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m zipfile -e "$wheel" "$work/wheel" || fail "could not unpack $wheel"
zig_lib="$work/wheel/kjit/libkjit.so.0"
major=$(sed -n 's/^NVRTC_MAJOR = //p' "$work/wheel/kjit/_build.py")
# Both libraries compile the cache's one entry with the same NVRTC, the toolkit's.
nvrtc=${KJIT_LIBNVRTC:-/usr/local/cuda/lib64/libnvrtc.so.$major}
[ -f "$nvrtc" ] || fail "no NVRTC at $nvrtc (the CUDA toolkit's; or set KJIT_LIBNVRTC)"

cat >"$work/hits.c" <<'EOF'
/* bench/wheel_hits.sh: CALLS kjit_compile calls of one request through the libkjit.so.0 given
 * (dlopened), after a warm-up; prints the mean ns per call. */
#include <kjit/kjit.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    const char *source = "template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N; }\n";
    char cubin[4096];
    struct timespec start, end;
    if (argc != 4) {
        fprintf(stderr, "usage: %s LIBKJIT CACHE_DIR CALLS\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    __typeof__(&kjit_compile) compile = (__typeof__(&kjit_compile))dlsym(lib, "kjit_compile");
    __typeof__(&kjit_last_error) last_error = (__typeof__(&kjit_last_error))dlsym(lib, "kjit_last_error");
    if (compile == NULL || last_error == NULL) {
        fprintf(stderr, "%s: no kjit_compile or kjit_last_error\n", argv[1]);
        return 1;
    }
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = argv[2];
    options.arch = "sm_90";
    options.name_expression = "scale<4>";
    long calls = atol(argv[3]);
    for (long i = -1001; i < calls; i++) {
        if (i == 0) {
            clock_gettime(CLOCK_MONOTONIC, &start);
        }
        if (compile(source, "scale", &options, cubin, sizeof cubin, NULL) != KJIT_OK) {
            fprintf(stderr, "kjit_compile: %s\n", last_error());
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
    printf("%.1f\n", ns / (double)calls);
    return 0;
}
EOF
cc -O2 -std=gnu99 -Wall -Wextra -Werror -I"$root/include" "$work/hits.c" -o "$work/hits" -ldl || fail "the driver did not build (above)"

# run LIB MEMO CALLS: one process; prints ns per call.
run() {
    env KJIT_LIBNVRTC="$nvrtc" KJIT_HIT_MEMO="$2" "$work/hits" "$1" "$work/cache" "$3" ||
        fail "the hits through $1 failed (above)"
}
run "$debian" 1 1 >/dev/null # the one compile, then every call is a hit
run "$zig_lib" 1 1 >/dev/null
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A times
for ((round = 0; round < rounds; round++)); do
    for lib in debian zig; do
        path=$debian
        [ "$lib" = zig ] && path=$zig_lib
        times[$lib.memo]+="$(run "$path" 1 "$calls") "
        times[$lib.full]+="$(run "$path" 0 "$full_calls") "
    done
done
for key in debian.memo debian.full zig.memo zig.full; do
    read -r -a values <<<"${times[$key]}"
    times[$key]=$(printf '%s\n' "${values[@]}" | median)
done

say "Debian g++ ${build_type:+($build_type) }libkjit: $debian"
say "zig (glibc 2.28, Release) libkjit from ${wheel##*/}"
say "$rounds processes each, alternating; medians of the mean ns per call ($calls memo hits, $full_calls full hits per process)"
printf '%-28s %14s %28s\n' "" "memo hit (ns)" "full hit, KJIT_HIT_MEMO=0 (ns)"
printf '%-28s %14s %28s\n' "Debian g++" "${times[debian.memo]}" "${times[debian.full]}"
printf '%-28s %14s %28s\n' "zig 2.28 (the wheel)" "${times[zig.memo]}" "${times[zig.full]}"
printf '%-28s %14s %28s\n' "wheel / Debian" \
    "$(awk -v a="${times[zig.memo]}" -v b="${times[debian.memo]}" 'BEGIN { printf "%.2fx", a / b }')" \
    "$(awk -v a="${times[zig.full]}" -v b="${times[debian.full]}" 'BEGIN { printf "%.2fx", a / b }')"
