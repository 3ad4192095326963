#!/usr/bin/env bash
# No function in the library's sources may be longer than 100 lines or have a cyclomatic
# complexity above 30, as lizard measures them (issue 33): past that a function does too many
# things to review or test one by one; split it into named steps.
# Usage: check_function_size.sh SOURCE_DIR VENV_DIR
#   SOURCE_DIR  the folder checked, with its subfolders (src/)
#   VENV_DIR    a Python venv in the build tree that holds lizard: made and filled from PyPI the
#               first time (lizard is not a Debian package), reused while it holds the pinned
#               version. No lizard is a failure, never a skip: the rule would go unchecked.
set -euo pipefail
src=$1 venv=$2
version=1.24.3  # pinned: another version may count differently
max_length=100 max_ccn=30
lizard=$venv/bin/lizard

fail() { echo "FAIL: $*"; exit 1; }

have_lizard() { [ "$("$lizard" --version 2>/dev/null)" = "$version" ]; }

install_lizard() {
    have_lizard && return 0
    # Only a venv (or nothing) is replaced: a wrong argument must not remove someone's folder.
    if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then fail "$venv exists and is not a Python venv"; fi
    echo "installing lizard $version from PyPI into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "cannot make a venv in $venv (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "lizard==$version" ||
        fail "cannot install lizard==$version from PyPI into $venv"
    have_lizard || fail "$lizard does not say it is version $version"
}

[ -d "$src" ] || fail "no folder $src"
mkdir -p "$(dirname "$venv")"
# Two runs sharing a build tree (ctest -j, two ctest commands) install it once.
exec 9> "$venv.lock"
flock 9
install_lizard
flock -u 9

set +e
report=$("$lizard" -l cpp -L "$max_length" -C "$max_ccn" "$src" 2>&1)
rc=$?
set -e
# A path lizard cannot read gives no warning and exit status 0: it must have read something.
analyzed=$(printf '%s\n' "$report" | sed -n 's/^\([0-9][0-9]*\) file analyzed\.$/\1/p')
[ "${analyzed:-0}" -gt 0 ] || { printf '%s\n' "$report" | tail -20; fail "lizard analyzed no file under $src"; }
if [ "$rc" -ne 0 ]; then
    echo "FAIL: functions over $max_length lines or above cyclomatic complexity $max_ccn (lizard $version);"
    echo "split each into named steps:"
    offenders=$("$lizard" -l cpp -L "$max_length" -C "$max_ccn" -w "$src" 2>&1) || true
    # lizard failing for another reason lists no function: show what it said.
    if [ -n "$offenders" ]; then printf '%s\n' "$offenders"; else printf '%s\n' "$report" | tail -20; fi
    exit 1
fi
echo "OK: $analyzed files under $src, no function over $max_length lines or above complexity $max_ccn"
