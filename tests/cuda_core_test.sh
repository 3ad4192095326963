#!/usr/bin/env bash
# kjit.cuda_core (python/kjit/cuda_core.py) against the real cuda-core from PyPI: runs
# python/tests/test_cuda_core.py in a venv that holds cuda-core and the cuda-bindings of the CUDA
# major libkjit was built against (the ctests python_cuda_core and, label `gpu`,
# python_cuda_core_gpu). The environment (KJIT_LIBRARY, KJIT_LIBCUDA, KJIT_TEST_GPU, ...) comes
# from ctest.
# Usage: cuda_core_test.sh SOURCE_DIR VENV_DIR PYTHON CUDA_MAJOR
#   VENV_DIR    a venv in the build tree: made (with --system-site-packages, for the system's
#               pytest) and filled from PyPI the first time, reused while it holds the pinned
#               requirements. A failed install is a failure, never a skip: the bridge would go
#               untested.
set -euo pipefail
src=$1 venv=$2 python=$3 major=$4
# cuda-core 1.x: tested with 1.0.0 and 1.2.2 (the module needs 0.6 or newer; the driver test
# double lacks an entry point that 0.6's Kernel.from_handle calls).
requirements=("cuda-core>=1.0,<2" "cuda-bindings==$major.*")
stamp=$venv/kjit-requirements

fail() { echo "FAIL: $*"; exit 1; }

have_requirements() {
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${requirements[*]}" ] &&
        "$venv/bin/python" -c 'import cuda.core, cuda.bindings' 2>/dev/null
}

install_requirements() {
    have_requirements && return 0
    # Only a venv (or nothing) is replaced: a wrong argument must not remove someone's folder.
    if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then fail "$venv exists and is not a Python venv"; fi
    echo "installing ${requirements[*]} from PyPI into $venv"
    rm -rf "$venv"
    "$python" -m venv --system-site-packages "$venv" ||
        fail "cannot make a venv in $venv (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${requirements[@]}" ||
        fail "cannot install ${requirements[*]} from PyPI into $venv"
    printf '%s' "${requirements[*]}" > "$stamp"
    have_requirements || fail "cuda.core does not import in $venv after the install"
}

[ -f "$src/python/tests/test_cuda_core.py" ] || fail "no $src/python/tests/test_cuda_core.py"
mkdir -p "$(dirname "$venv")"
# python_cuda_core and python_cuda_core_gpu share the venv: one installs it.
exec 9> "$venv.lock"
flock 9
install_requirements
flock -u 9
"$venv/bin/python" -c 'import cuda.core, cuda.bindings; print("cuda-core", cuda.core.__version__, "cuda-bindings", cuda.bindings.__version__)'
cd "$src"
# --basetemp: beside the venv (emptied at each run), not in TMPDIR; one per test, as both may run at once.
KJIT_TEST_REQUIRE_CUDA_CORE=1 exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
    --basetemp="$venv-tmp${KJIT_TEST_GPU:+-gpu}" python/tests/test_cuda_core.py
