#!/usr/bin/env bash
# The manylinux wheels (ctest python_wheel, label `wheel`): the x86_64 and the aarch64 wheel,
# built by scripts/build_wheel.sh (zig, glibc 2.28) into WORK_DIR/build (its venv, Debian's
# sources, the libraries and the CMake builds kept there, so that a rerun rebuilds only what
# changed), then checked as a user gets them:
#   - each file is kjit-<version>-py3-none-manylinux_2_<X>_<arch>.whl with X <= 28, and
#     `auditwheel show` names that tag; every binary is for its arch and stripped, asks glibc for
#     no symbol version above 2.28, needs no C++ runtime (zig's libc++ is linked in: no GLIBCXX_
#     or CXXABI_ version, no libstdc++ or libc++), takes memcpy from glibc (libkjit.so.0 its
#     other string functions too), not from zig's compiler_rt, and needs only libraries that
#     are in the wheel or are glibc's; libkjit.so.0, kjit-worker and bin/kjit have their RUNPATH;
#     libkjit.so.0 exports only the kjit_ ABI (tests/check_exports.sh);
#   - each holds the package with py.typed, libkjit.so.0, kjit-worker, the kjit command, the
#     libraries beside them (libelf, and hiredis and zstd for the cluster tier), and the license
#     of everything it carries in .dist-info/licenses/ (zig's libc++ and compiler_rt among them,
#     no GCC runtime); METADATA has the license expression, the classifiers and the [nvrtc]
#     extra of libkjit's NVRTC major; the console script `kjit` is declared;
#   - the x86_64 wheel: a fresh venv without system site packages installs it with --no-index
#     (no compiler); there, `kjit --version` runs from the venv's bin, and from / with nothing
#     set but HOME, PATH and KJIT_ARCH, the README's example (kjit.compile of a templated kernel
#     and its name) works with the toolkit's NVRTC, a compile error raises kjit.CompileError
#     carrying NVRTC's log, and `kjit compile` works, uses an nvidia-cuda-nvrtc wheel's NVRTC
#     when one is installed, and looks for the toolkit's last in /usr/local/cuda/lib64 (not in
#     the build machine's folder);
#   - the Python tests (python/tests) pass against the installed x86_64 package, from another
#     folder, with no KJIT_LIBRARY, LD_LIBRARY_PATH or PYTHONPATH.
# The aarch64 wheel runs under qemu in tests/wheel_aarch64_test.sh (same WORK_DIR/build).
# Needs PyPI and Debian's source index the first time (the build venv with zig; the sources).
# Usage: wheel_test.sh SOURCE_DIR WORK_DIR PYTHON FAKE_LIBCUDA CUDA_INCLUDE
set -euo pipefail
src=$1 work=$2 python=$3 libcuda=$4 cuda_include=$5
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
version=$(sed -n 's/^#define KJIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$src/include/kjit/kjit.h" | paste -sd.)
# The newest glibc symbol version a binary may ask for.
glibc_floor=28

# --- build (scripts/build_wheel.sh: its own checks of the tag, auditwheel's verdict and the
# binaries' glibc versions too)
declare -A wheels
for arch in x86_64 aarch64; do
    WHEEL_BUILD_DIR="$work/build" WHEEL_DIST_DIR="$work/dist" PYTHON="$python" \
        bash "$src/scripts/build_wheel.sh" --arch "$arch" 2>&1 | tee "$work/build_wheel_$arch.log"
    wheels[$arch]=$(sed -n 's/^build_wheel: wheel: //p' "$work/build_wheel_$arch.log")
    [ -f "${wheels[$arch]}" ] || fail "scripts/build_wheel.sh --arch $arch named no wheel"
done

# check_wheel ARCH WHEEL: what the file is, what it holds, what its binaries need.
check_wheel() {
    local arch=$1 wheel=$2 name x tag unpacked dist_info f id classifier metadata expression major
    local machine loader short needs newest minor needed imports
    case $arch in
        x86_64) machine='Advanced Micro Devices X86-64' loader=ld-linux-x86-64.so.2 ;;
        aarch64) machine=AArch64 loader=ld-linux-aarch64.so.1 ;;
    esac
    # --- the name, the tag and auditwheel's verdict
    name=${wheel##*/}
    [[ $name =~ ^kjit-${version//./\\.}-py3-none-manylinux_2_([0-9]+)_${arch}\.whl$ ]] ||
        fail "wheel name $name is not kjit-$version-py3-none-manylinux_2_X_$arch.whl"
    x=${BASH_REMATCH[1]}
    [ "$x" -le "$glibc_floor" ] || fail "$name needs glibc 2.$x; RHEL 8 has 2.$glibc_floor"
    tag=manylinux_2_${x}_$arch
    "$work/build/venv/bin/auditwheel" show "$wheel" >"$work/auditwheel-show-$arch.txt" || fail "auditwheel show $name failed"
    # auditwheel wraps its lines: join them before matching.
    tr '\n' ' ' <"$work/auditwheel-show-$arch.txt" | tr -s ' ' | grep -q "consistent with the following platform tag: \"$tag\"" ||
        fail "auditwheel show does not say $tag: $(cat "$work/auditwheel-show-$arch.txt")"
    echo "wheel: $name ($(stat -c %s "$wheel") bytes), auditwheel: $tag"

    # --- what the wheel holds
    unpacked="$work/unpacked-$arch"
    rm -rf "$unpacked"
    "$python" -m zipfile -e "$wheel" "$unpacked"
    dist_info="$unpacked/kjit-$version.dist-info"
    for f in kjit/__init__.py kjit/_cli.py kjit/_build.py kjit/py.typed kjit/libkjit.so.0 kjit/kjit-worker \
        kjit/bin/kjit kjit/libelf.so.1 kjit/libhiredis.so.0.14 kjit/libzstd.so.1 "${dist_info##*/}/licenses/LICENSE"; do
        [ -f "$unpacked/$f" ] || fail "the $arch wheel has no $f"
    done
    for f in elfutils-libelf zlib hiredis zstd xxhash fmt spdlog cli11 nlohmann-json llvm-libcxx zig GPL-2 GPL-3 LGPL-3; do
        [ -s "$dist_info/licenses/licenses/$f.txt" ] || fail "the $arch wheel has no license file licenses/$f.txt in .dist-info/licenses/"
    done
    [ ! -e "$dist_info/licenses/licenses/gcc-runtime-libstdcxx-libgcc.txt" ] ||
        fail "the $arch wheel carries the GCC runtime's license, but no GCC runtime"
    grep -qx 'kjit = kjit._cli:main' "$dist_info/entry_points.txt" || fail "no console script 'kjit = kjit._cli:main' in entry_points.txt"
    metadata="$dist_info/METADATA"
    expression=$(sed -n 's/^License-Expression: //p' "$metadata")
    for id in Apache-2.0 LGPL-3.0-or-later GPL-2.0-or-later Zlib BSD-3-Clause BSD-2-Clause MIT "Apache-2.0 WITH LLVM-exception"; do
        [[ $expression == *"$id"* ]] || fail "METADATA's License-Expression ($expression) does not name $id"
    done
    [[ $expression != *GCC-exception* ]] || fail "METADATA's License-Expression ($expression) names the GCC runtime, which the wheel no longer has"
    for classifier in "Typing :: Typed" "Environment :: GPU :: NVIDIA CUDA" "Operating System :: POSIX :: Linux" "Programming Language :: C++"; do
        grep -qx "Classifier: $classifier" "$metadata" || fail "METADATA has no classifier '$classifier'"
    done
    major=$(sed -n 's/^NVRTC_MAJOR = //p' "$unpacked/kjit/_build.py")
    grep -q "^Requires-Dist: nvidia-cuda-nvrtc<$((major + 1)),>=$major; extra == \"nvrtc\"" "$metadata" ||
        fail "METADATA's [nvrtc] extra does not ask for nvidia-cuda-nvrtc $major (libkjit's NVRTC major): $(grep nvidia "$metadata")"

    # --- the binaries: the arch, glibc 2.28 at most, no C++ runtime, only libraries carried or
    # glibc's (readelf reads every arch's ELF)
    system_libs=" libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 $loader "
    for f in "$unpacked"/kjit/*.so.* "$unpacked/kjit/kjit-worker" "$unpacked/kjit/bin/kjit"; do
        short=${f#"$unpacked/"}
        readelf -h "$f" | grep -q "Machine: *$machine\$" || fail "$short is not for $arch: $(readelf -h "$f" | grep Machine:)"
        ! readelf -S "$f" | grep -q ' \.symtab ' || fail "$short is not stripped (it has a .symtab)"
        needs=$(readelf -V -W "$f" | sed -n 's/.*Name: \([A-Z_]*_[0-9.]*\).*/\1/p' | sort -u)
        ! grep -qE '^(GLIBCXX|CXXABI)_' <<<"$needs" || fail "$short needs libstdc++: $(grep -E '^(GLIBCXX|CXXABI)_' <<<"$needs" | tr '\n' ' ')"
        newest=$(grep '^GLIBC_2\.' <<<"$needs" | sort -V | tail -n 1)
        minor=$(sed -n 's/^GLIBC_2\.\([0-9]*\).*/\1/p' <<<"${newest:-GLIBC_2.0}")
        [ "$minor" -le "$glibc_floor" ] || fail "$short needs $newest, above glibc 2.$glibc_floor: $(readelf -V -W "$f" | grep "$newest")"
        # glibc's memcpy, not zig compiler_rt's portable one (scripts/wheel/glibc_compat.c).
        imports=$(nm -D --undefined-only "$f")
        grep -q ' memcpy@GLIBC_' <<<"$imports" ||
            fail "$short does not take memcpy from glibc: zig's compiler_rt's is linked in (scripts/wheel/glibc_compat.c)"
        for needed in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            case "$system_libs" in *" $needed "*) continue ;; esac
            [ -f "$unpacked/kjit/$needed" ] || fail "$short needs $needed, which is neither in the $arch wheel nor glibc's"
        done
    done
    readelf -d "$unpacked/kjit/libkjit.so.0" | grep -q 'R.*PATH.*\[\$ORIGIN\]' || fail "$arch libkjit.so.0 has no RUNPATH \$ORIGIN"
    readelf -d "$unpacked/kjit/kjit-worker" | grep -q 'R.*PATH.*\[\$ORIGIN\]' || fail "$arch kjit-worker has no RUNPATH \$ORIGIN"
    readelf -d "$unpacked/kjit/bin/kjit" | grep -q 'R.*PATH.*\[\$ORIGIN/\.\.\]' || fail "$arch bin/kjit has no RUNPATH \$ORIGIN/.."
    imports=$(nm -D --undefined-only "$unpacked/kjit/libkjit.so.0")
    for f in memmove memset memcmp strlen; do
        grep -q " $f@GLIBC_" <<<"$imports" ||
            fail "$arch libkjit.so.0 does not take $f from glibc: zig's compiler_rt's is linked in (scripts/wheel/glibc_compat.c)"
    done
    bash "$src/tests/check_exports.sh" "$unpacked/kjit/libkjit.so.0" "$src"
    echo "wheel: $arch binaries stripped, need glibc 2.$glibc_floor at most, no C++ runtime; carried: $(cd "$unpacked/kjit" && ls lib*.so.* | tr '\n' ' ')"
}
for arch in x86_64 aarch64; do
    check_wheel "$arch" "${wheels[$arch]}"
done
wheel=${wheels[x86_64]}
unpacked="$work/unpacked-x86_64"
major=$(sed -n 's/^NVRTC_MAJOR = //p' "$unpacked/kjit/_build.py")

# --- a fresh venv, no system site packages, no index
fresh="$work/fresh"
rm -rf "$fresh"
"$python" -m venv "$fresh"
started=$(date +%s%N)
"$fresh/bin/pip" install -q --no-index --disable-pip-version-check "$wheel"
echo "wheel: installed into a fresh venv with --no-index in $((($(date +%s%N) - started) / 1000000)) ms"
[ "$("$fresh/bin/kjit" --version)" = "kjit $version" ] || fail "$fresh/bin/kjit --version says '$("$fresh/bin/kjit" --version 2>&1)'"
home="$work/home"
rm -rf "$home" "$work/kernel.cu"
mkdir -p "$home"
# Only the arch is set for kjit (HOME for the default cache folder, PATH for the command).
bare=(env -i HOME="$home" PATH="$fresh/bin:/usr/bin:/bin" KJIT_ARCH=sm_90)
cd /
[ "$("${bare[@]}" kjit --version)" = "kjit $version" ] || fail "'kjit --version' on PATH failed"
"${bare[@]}" python - "$fresh" <<'EOF' || fail "compile and resolve in the fresh venv failed (above)"
import os, sys
import kjit
assert kjit.__file__.startswith(sys.argv[1]), f"kjit imported from {kjit.__file__}"
source = "template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N; }\n"
cubin = kjit.compile(source, "scale", name_expression="scale<4>")
assert cubin.startswith(os.environ["HOME"]), f"cubin {cubin} is not in the default cache under $HOME"
name = kjit.resolve_name(cubin, "scale")
assert name == "_Z5scaleILi4EEvPf", name
try:
    kjit.compile("__global__ void broken(float *p) { p[0] = kjit_undeclared_name; }\n", "broken")
except kjit.CompileError as e:
    assert e.status == kjit.Status.ERROR_COMPILE, e.status
    assert "kjit_undeclared_name" in str(e) and "undefined" in str(e), f"no NVRTC log in: {e}"
else:
    raise SystemExit("no CompileError for a source with an error")
print(f"wheel: fresh venv: compiled and resolved {name}; a compile error raised CompileError with NVRTC's log")
EOF
# README.md's Python example (its first ```python block), as a reader pastes it after `pip
# install dist/kjit-*.whl`: compiled and named with no GPU; the load says it needs a driver.
"$python" - "$src/README.md" "$work/readme_example.py" <<'EOF'
import re, sys
blocks = re.findall(r"^```python\n(.*?)^```$", open(sys.argv[1]).read(), flags=re.S | re.M)
assert blocks, "README.md has no python block"
open(sys.argv[2], "w").write(blocks[0])
EOF
out=$("${bare[@]}" KJIT_LIBCUDA="$work/no-libcuda.so.1" python "$work/readme_example.py" 2>&1) ||
    fail "README.md's Python example failed in the fresh venv: $out"
[[ $out == *kernel.cubin\ _Z5scaleILi3EEvPf* && $out == *"not loaded:"* ]] ||
    fail "README.md's Python example printed: $out"
echo "wheel: README.md's Python example in the fresh venv: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
printf '%s\n' 'template <int N> __global__ void twice(float *p) { p[threadIdx.x] *= 2 * N; }' >"$work/kernel.cu"
out=$("${bare[@]}" kjit compile "$work/kernel.cu" -k twice --name-expr 'twice<3>') || fail "kjit compile failed: $out"
[ "$(sed -n 2p <<<"$out")" = "_Z5twiceILi3EEvPf" ] || fail "kjit compile printed: $out"
# An nvidia-cuda-nvrtc wheel's NVRTC (nvidia/cu<major>/lib) is the one the command uses: an
# unloadable one there fails its compile with an NVRTC error that names it.
site=$("$fresh/bin/python" -c 'import kjit, os; print(os.path.dirname(os.path.dirname(kjit.__file__)))')
mkdir -p "$site/nvidia/cu$major/lib"
echo "not a library" >"$site/nvidia/cu$major/lib/libnvrtc.so.$major"
status=0
out=$("${bare[@]}" kjit compile "$work/kernel.cu" -k twice --name-expr 'twice<5>' 2>&1) || status=$?
rm -rf "$site/nvidia"
[ "$status" = 7 ] && [[ $out == *"nvidia/cu$major/lib/libnvrtc.so.$major"* ]] ||
    fail "with nvidia/cu$major/lib/libnvrtc.so.$major in the venv, kjit compile did not try it (exit $status): $out"
echo "wheel: kjit --version, kjit compile and the nvidia-cuda-nvrtc wheel's NVRTC through the command: ok"
# The last folder the wheel's libkjit looks in for NVRTC is the toolkit installers' one
# (KJIT_NVRTC_RUNTIME_DIR), not the build machine's: in a private mount namespace with the
# loader's cache hidden and that folder emptied, the failed compile lists it.
if unshare -m true 2>/dev/null; then
    hide=
    [ -e /usr/local/cuda/lib64 ] && hide=$(readlink -f /usr/local/cuda/lib64)
    status=0
    # shellcheck disable=SC2016  # expanded by the inner sh
    out=$(unshare -m sh -c 'mount --bind /dev/null /etc/ld.so.cache && { [ -z "$1" ] || mount -t tmpfs none "$1"; } &&
        shift && exec "$@"' sh "$hide" "${bare[@]}" kjit compile "$work/kernel.cu" -k twice --name-expr 'twice<6>' 2>&1) ||
        status=$?
    [ "$status" = 7 ] && [[ $out == *'dlopen("/usr/local/cuda/lib64/libnvrtc.so.'* ]] ||
        fail "with no NVRTC to be found, kjit compile did not try /usr/local/cuda/lib64 (exit $status): $out"
    echo "wheel: libkjit looks for NVRTC last in /usr/local/cuda/lib64: ok"
else
    echo "wheel: not checked that libkjit looks for NVRTC last in /usr/local/cuda/lib64 (needs root for unshare -m)"
fi

# --- the Python tests against the installed package. Debian's pytest (python3-pytest) is seen
# through the system site packages; kjit comes only from the wheel.
venv="$work/venv-pytest"
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$wheel"
pkg=$(env -u PYTHONPATH "$venv/bin/python" -c 'import kjit, os; print(os.path.dirname(kjit.__file__))')
case "$pkg" in "$venv/"*) ;; *) fail "kjit imported from $pkg, not the venv" ;; esac
# An nvidia-cuda-nvrtc wheel's layout in the venv (nvidia/cu<major>/lib), holding a copy of the
# toolkit's NVRTC and builtins: the package must use it (the test reads /proc/self/maps).
site=$(dirname "$pkg")
toolkit=$(dirname "$(readlink -f "$(ldconfig -p | sed -n "s/.*libnvrtc.so.$major .*=> //p" | head -n 1)" 2>/dev/null || true)")
[ -f "$toolkit/libnvrtc.so.$major" ] || toolkit=/usr/local/cuda/lib64
mkdir -p "$site/nvidia/cu$major/lib"
cp "$toolkit/libnvrtc.so.$major" "$toolkit"/libnvrtc-builtins.so.* "$site/nvidia/cu$major/lib/"
env -u KJIT_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH -u KJIT_LIBNVRTC KJIT_TEST_INSTALLED=1 KJIT_LIBCUDA="$libcuda" \
    KJIT_TEST_CUDA_INCLUDE="$cuda_include" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp="$work/pytest-tmp" "$src/python/tests"
