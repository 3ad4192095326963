#!/usr/bin/env bash
# The aarch64 manylinux wheel run as on an aarch64 machine, under qemu-user (ctest
# python_wheel_aarch64, label `wheel`): built by `scripts/build_wheel.sh --arch aarch64` into
# WORK_DIR/build (shared with tests/wheel_test.sh, which checks the file, its tag and its
# binaries: a rerun there is quick), then, with the aarch64 NVRTC of PyPI's nvidia-cuda-nvrtc
# wheel (of libkjit's NVRTC major, pip-downloaded once into WORK_DIR/aarch64-nvrtc/):
#   - both wheels are installed by pip for aarch64 into a folder (WORK_DIR/aarch64-site/), as
#     into an aarch64 environment's site-packages;
#   - a C program built for aarch64 against kjit.h and the wheel's libkjit.so.0 compiles a
#     templated kernel there (KJIT_LIBNVRTC: the wheel's NVRTC, as the Python package sets it)
#     and resolves its name (kjit_resolve_name), with NVRTC in its /proc/self/maps; a second
#     process gets the same cubin and name, and NVRTC is not in its maps (a hit never loads it);
#   - the aarch64 `kjit` command prints its version, compiles a templated kernel with the NVRTC
#     found through the loader's search (LD_LIBRARY_PATH), hits it again with compiling
#     refused, and resolves the cubin's name.
# Everything aarch64 runs under qemu-aarch64 with Debian's aarch64 loader and runtime
# (/usr/aarch64-linux-gnu, packages libc6-arm64-cross and libstdc++6-arm64-cross: NVRTC's
# builtins need libstdc++), from a bare environment. Installs qemu-user and those packages
# when missing (as root, or with sudo); where they cannot be installed, the test is skipped
# (exit 77) saying why. Needs PyPI the first time (the build venv, the NVRTC wheel).
# Usage: wheel_aarch64_test.sh SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
src=$1 work=$2 python=$3
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
mkdir -p "$work"
work=$(cd "$work" && pwd)

# --- qemu-user and the aarch64 loader, libc and C++ runtime
packages=(qemu-user libc6-arm64-cross libstdc++6-arm64-cross)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null ||
            skip "qemu-user cannot be installed: ${missing[*]} missing, and not root (Debian, as root: apt-get install ${packages[*]})"
        sudo=(sudo -n)
    fi
    echo "wheel_aarch64: installing ${missing[*]}"
    { "${sudo[@]}" apt-get update && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${missing[@]}"; } >"$work/apt-aarch64.log" 2>&1 ||
        skip "qemu-user cannot be installed: apt-get install ${missing[*]} failed: $(tail -n 3 "$work/apt-aarch64.log")"
fi
sysroot=/usr/aarch64-linux-gnu
command -v qemu-aarch64 >/dev/null 2>&1 || fail "qemu-user is installed but there is no qemu-aarch64"
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || fail "no $sysroot/lib/ld-linux-aarch64.so.1 (libc6-arm64-cross)"

# --- the wheel
WHEEL_BUILD_DIR="$work/build" WHEEL_DIST_DIR="$work/dist" PYTHON="$python" \
    bash "$src/scripts/build_wheel.sh" --arch aarch64 2>&1 | tee "$work/build_wheel_aarch64_test.log"
wheel=$(sed -n 's/^build_wheel: wheel: //p' "$work/build_wheel_aarch64_test.log")
[ -f "$wheel" ] || fail "scripts/build_wheel.sh --arch aarch64 named no wheel"
[[ ${wheel##*/} == *_aarch64.whl ]] || fail "${wheel##*/} is not an aarch64 wheel"
venv="$work/build/venv"
version=$(sed -n 's/^#define KJIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$src/include/kjit/kjit.h" | paste -sd.)

# --- NVRTC for aarch64, of libkjit's major, from PyPI (kept: a rerun needs no network)
major=$("$python" -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read("kjit/_build.py").decode().split("NVRTC_MAJOR = ")[1].split()[0])' "$wheel")
nvrtc_dir="$work/aarch64-nvrtc"
nvrtc_wheels=("$nvrtc_dir/nvidia_cuda_nvrtc-$major."*aarch64*.whl)
if [ ! -f "${nvrtc_wheels[0]}" ]; then
    mkdir -p "$nvrtc_dir"
    "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
        --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 -d "$nvrtc_dir" \
        "nvidia-cuda-nvrtc>=$major,<$((major + 1))" ||
        fail "pip download of the aarch64 nvidia-cuda-nvrtc $major wheel failed (PyPI needed once)"
    nvrtc_wheels=("$nvrtc_dir/nvidia_cuda_nvrtc-$major."*aarch64*.whl)
fi
[ -f "${nvrtc_wheels[0]}" ] || fail "no aarch64 nvidia-cuda-nvrtc $major wheel in $nvrtc_dir"
echo "wheel_aarch64: NVRTC from ${nvrtc_wheels[0]##*/}"

# --- both installed for aarch64 into a folder, as pip installs them into site-packages
site="$work/aarch64-site"
rm -rf "$site"
"$venv/bin/pip" install -q --disable-pip-version-check --no-index --no-deps --only-binary :all: \
    --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 --target "$site" "$wheel" "${nvrtc_wheels[0]}" ||
    fail "pip install --platform manylinux_2_28_aarch64 --target $site of the two wheels failed"
nvrtc_lib="$site/nvidia/cu$major/lib"
[ -f "$nvrtc_lib/libnvrtc.so.$major" ] || fail "the NVRTC wheel has no nvidia/cu$major/lib/libnvrtc.so.$major"
for f in kjit/libkjit.so.0 kjit/kjit-worker kjit/bin/kjit; do
    readelf -h "$site/$f" | grep -q 'Machine: *AArch64$' || fail "$f is not an aarch64 file"
done

home="$work/aarch64-home"
rm -rf "$home" "$work/aarch64-cache" "$work/aarch64-cli-cache"
mkdir -p "$home"
# A bare environment; the guest's own variables are given to qemu (-E), not to qemu itself.
run() { env -i HOME="$home" PATH=/usr/bin:/bin qemu-aarch64 -L "$sysroot" -E KJIT_ARCH=sm_90 "$@"; }

# --- a C program against the wheel's libkjit.so.0: compile, resolve, and a hit without NVRTC
cat >"$work/aarch64-driver.c" <<'EOF'
/* wheel_aarch64_test.sh: one kjit_compile of a templated kernel in CACHE_DIR, kjit_resolve_name
 * on its cubin, and whether NVRTC is mapped into this process afterwards. */
#include <kjit/kjit.h>
#include <stdio.h>
#include <string.h>

static void print_nvrtc(void) {
    char line[4096];
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL) {
        printf("nvrtc ?\n");
        return;
    }
    while (fgets(line, sizeof line, maps) != NULL) {
        char *path = strchr(line, '/');
        if (path != NULL && strstr(path, "/libnvrtc.so") != NULL) {
            printf("nvrtc %s", path);
            fclose(maps);
            return;
        }
    }
    fclose(maps);
    printf("nvrtc none\n");
}

int main(int argc, char **argv) {
    const char *source = "template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N; }\n";
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    char cubin[4096], name[512];
    kjit_status status;
    if (argc != 2) {
        fprintf(stderr, "usage: %s CACHE_DIR\n", argv[0]);
        return 2;
    }
    options.cache_dir = argv[1];
    options.name_expression = "scale<4>";
    status = kjit_compile(source, "scale", &options, cubin, sizeof cubin, NULL);
    if (status != KJIT_OK) {
        fprintf(stderr, "kjit_compile: %s: %s\n", kjit_status_string(status), kjit_last_error());
        return 1;
    }
    status = kjit_resolve_name(cubin, "scale", name, sizeof name, NULL);
    if (status != KJIT_OK) {
        fprintf(stderr, "kjit_resolve_name: %s: %s\n", kjit_status_string(status), kjit_last_error());
        return 1;
    }
    printf("version %s\ncubin %s\nname %s\n", kjit_version_string(), cubin, name);
    print_nvrtc();
    return 0;
}
EOF
# zig's clang for aarch64, as build_wheel.sh wrote it (its glibc 2.28 target).
"$work/build/aarch64/prefix/bin/cc" -O2 -I"$src/include" "$work/aarch64-driver.c" "$site/kjit/libkjit.so.0" \
    -Wl,-rpath,"$site/kjit" -o "$work/aarch64-driver" || fail "the aarch64 C program did not build (above)"
out1=$(run -E KJIT_LIBNVRTC="$nvrtc_lib/libnvrtc.so.$major" "$work/aarch64-driver" "$work/aarch64-cache" 2>&1) ||
    fail "the aarch64 program's compile failed: $out1"
echo "wheel_aarch64: first process: $(tr '\n' ' ' <<<"$out1")"
[ "$(sed -n 's/^version //p' <<<"$out1")" = "$version" ] || fail "libkjit.so.0 says another version than $version: $out1"
[ "$(sed -n 's/^name //p' <<<"$out1")" = _Z5scaleILi4EEvPf ] || fail "kjit_resolve_name did not give _Z5scaleILi4EEvPf: $out1"
[ "$(sed -n 's/^nvrtc //p' <<<"$out1")" = "$nvrtc_lib/libnvrtc.so.$major" ] ||
    fail "the compile did not map the aarch64 wheel's $nvrtc_lib/libnvrtc.so.$major: $out1"
cubin=$(sed -n 's/^cubin //p' <<<"$out1")
readelf -h "$cubin" | grep -q 'Machine: *NVIDIA CUDA architecture' || fail "$cubin is not a CUDA cubin"
out2=$(run -E KJIT_LIBNVRTC="$nvrtc_lib/libnvrtc.so.$major" "$work/aarch64-driver" "$work/aarch64-cache" 2>&1) ||
    fail "the aarch64 program's second compile (a hit) failed: $out2"
echo "wheel_aarch64: second process: $(tr '\n' ' ' <<<"$out2")"
[ "$(sed -n 's/^cubin //p' <<<"$out2")" = "$cubin" ] || fail "the second process got another cubin: $out2"
[ "$(sed -n 's/^name //p' <<<"$out2")" = _Z5scaleILi4EEvPf ] || fail "the second process resolved another name: $out2"
[ "$(sed -n 's/^nvrtc //p' <<<"$out2")" = none ] || fail "the second process (a hit) loaded NVRTC: $out2"

# --- the aarch64 kjit command
kjit=("$site/kjit/bin/kjit")
out=$(run "${kjit[@]}" --version 2>&1) || fail "kjit --version failed: $out"
[ "$out" = "kjit $version" ] || fail "kjit --version says '$out', not 'kjit $version'"
printf '%s\n' 'template <int N> __global__ void twice(float *p) { p[threadIdx.x] *= 2 * N; }' >"$work/aarch64-kernel.cu"
cli=(run -E LD_LIBRARY_PATH="$nvrtc_lib" "${kjit[@]}")
out=$("${cli[@]}" compile "$work/aarch64-kernel.cu" -k twice --name-expr 'twice<3>' --cache-dir "$work/aarch64-cli-cache" 2>&1) ||
    fail "kjit compile failed: $out"
[ "$(sed -n 2p <<<"$out")" = _Z5twiceILi3EEvPf ] || fail "kjit compile printed: $out"
cubin=$(sed -n 1p <<<"$out")
out=$("${cli[@]}" compile "$work/aarch64-kernel.cu" -k twice --name-expr 'twice<3>' --cache-dir "$work/aarch64-cli-cache" \
    --compile-mode never 2>&1) || fail "kjit compile --compile-mode never did not hit: $out"
[ "$(sed -n 1p <<<"$out")" = "$cubin" ] || fail "kjit compile --compile-mode never printed: $out"
out=$("${cli[@]}" resolve "$cubin" twice 2>&1) || fail "kjit resolve failed: $out"
[ "$out" = _Z5twiceILi3EEvPf ] || fail "kjit resolve printed: $out"
echo "wheel_aarch64: kjit --version, kjit compile (NVRTC through LD_LIBRARY_PATH), its hit and kjit resolve: ok"
echo "wheel_aarch64: all checks passed"
