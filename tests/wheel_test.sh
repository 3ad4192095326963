#!/usr/bin/env bash
# The Python wheel (pyproject.toml): `pip wheel` of this source tree into a fresh venv, installed
# there, then checked as a user gets it: libkjit.so.0 and kjit-worker need only the C/C++
# runtime and the libraries the wheel carries beside them (libelf.so.1, and libhiredis.so.0.14
# where the cluster tier is built; RUNPATH $ORIGIN), and the Python tests pass
# against the installed package from another folder with nothing set (no KJIT_LIBRARY, no
# LD_LIBRARY_PATH, no PYTHONPATH). Needs PyPI for the build backend (scikit-build-core).
# Usage: wheel_test.sh SOURCE_DIR WORK_DIR PYTHON FAKE_LIBCUDA CUDA_INCLUDE
set -euo pipefail
src=$1 work=$2 python=$3 libcuda=$4 cuda_include=$5
mkdir -p "$work"
rm -rf "$work/venv" "$work/dist"
# The system's pytest (python3-pytest) is seen from the venv; kjit comes only from the wheel.
"$python" -m venv --system-site-packages "$work/venv"
# The CMake build is kept in WORK_DIR/build, so that a rerun rebuilds only what changed.
"$work/venv/bin/pip" wheel "$src" --no-deps -w "$work/dist" --config-settings=build-dir="$work/build" -q
wheels=("$work/dist"/kjit-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "FAIL: expected one wheel, found: ${wheels[*]}"; exit 1; }
echo "wheel: ${wheels[0]##*/}"
"$work/venv/bin/pip" install --no-deps -q "${wheels[0]}"
cd /  # not the source tree: `import kjit` must find the installed package
pkg=$(env -u PYTHONPATH "$work/venv/bin/python" -c 'import kjit, os; print(os.path.dirname(kjit.__file__))')
case "$pkg" in "$work/venv/"*) ;; *) echo "FAIL: kjit imported from $pkg, not the venv"; exit 1 ;; esac
allowed=" libstdc++.so.6 libgcc_s.so.1 libc.so.6 libm.so.6 ld-linux-x86-64.so.2 "
for f in libkjit.so.0 kjit-worker libelf.so.1; do
    [ -f "$pkg/$f" ] || { echo "FAIL: the wheel has no kjit/$f"; exit 1; }
done
for f in libkjit.so.0 kjit-worker; do
    for needed in $(readelf -d "$pkg/$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        case "$allowed" in *" $needed "*) continue ;; esac
        [ -f "$pkg/$needed" ] || { echo "FAIL: kjit/$f needs $needed, which the wheel does not carry"; exit 1; }
    done
done
readelf -d "$pkg/libkjit.so.0" | grep -q 'RUNPATH.*\[\$ORIGIN\]' || { echo "FAIL: libkjit.so.0 has no RUNPATH \$ORIGIN"; exit 1; }
echo "wheel: libkjit.so.0 and kjit-worker need only the C/C++ runtime and what the wheel carries: $(cd "$pkg" && ls lib*.so.* | grep -v libkjit | tr '\n' ' ')"
# An nvidia-cuda-nvrtc wheel's layout in the venv (nvidia/cu<major>/lib), holding a copy of the
# toolkit's NVRTC and builtins: the package must use it (the test reads /proc/self/maps).
major=$(sed -n 's/^NVRTC_MAJOR = //p' "$pkg/_build.py")
site=$(dirname "$pkg")
toolkit=$(dirname "$(readlink -f "$(ldconfig -p | sed -n "s/.*libnvrtc.so.$major .*=> //p" | head -n 1)" 2>/dev/null || true)")
[ -f "$toolkit/libnvrtc.so.$major" ] || toolkit=/usr/local/cuda/lib64
mkdir -p "$site/nvidia/cu$major/lib"
cp "$toolkit/libnvrtc.so.$major" "$toolkit"/libnvrtc-builtins.so.* "$site/nvidia/cu$major/lib/"
env -u KJIT_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH -u KJIT_LIBNVRTC KJIT_TEST_INSTALLED=1 KJIT_LIBCUDA="$libcuda" \
    KJIT_TEST_CUDA_INCLUDE="$cuda_include" PYTHONDONTWRITEBYTECODE=1 \
    "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/python/tests"
