#!/usr/bin/env bash
# One owner of the environment (ctest: environment, label `lint`): every variable libkjit reads
# is in src/util/environment.cpp's list, read through it, and documented.
#   - no file of src/ or worker/ but src/util/environment.cpp calls getenv or secure_getenv, or
#     walks environ to read it (handing environ to a spawned process is not reading it);
#   - the list's names are the names docs/environment.md's table "Read by libkjit" gives (its
#     first column), no more and no fewer.
# Fails naming each difference, and the file and line of each stray read.
#
#   check_environment.sh SOURCE_DIR
set -uo pipefail
src=$(cd "${1:?usage: check_environment.sh SOURCE_DIR}" && pwd -P)
cd "$src" || exit 1
failed=0

# Reads outside the owner (comments aside).
stray=$(grep -rnE '\b(secure_)?getenv *\(|\benviron\b' src worker --include='*.cpp' --include='*.hpp' --include='*.c' |
    grep -v '^src/util/environment\.\(cpp\|hpp\):' |
    grep -vE '^[^:]+:[0-9]+: *//' |
    grep -vE 'extern char \*\*environ;|posix_spawnp?\(.*environ\)' || true)
if [ -n "$stray" ]; then
    echo "FAIL: the environment is read outside src/util/environment.cpp (name the variable there and use environment::get):"
    printf '  %s\n' "$stray"
    failed=1
fi

listed=$(grep -oE '^ *\{Variable::[a-z_0-9]+, "[A-Za-z_0-9]+"\},' src/util/environment.cpp | grep -oE '"[A-Za-z_0-9]+"' | tr -d '"' | sort -u)
[ -n "$listed" ] || { echo "FAIL: no variable list found in src/util/environment.cpp"; exit 1; }
documented=$(awk '/^## Read by libkjit/{f=1;next} /^## /{f=0} f' docs/environment.md |
    grep -oE '^\| `[A-Za-z_0-9]+`( *, *`[A-Za-z_0-9]+`)*' | grep -oE '[A-Za-z_0-9]+' | sort -u)
[ -n "$documented" ] || { echo "FAIL: no table under '## Read by libkjit' in docs/environment.md"; exit 1; }
only_listed=$(comm -23 <(printf '%s\n' "$listed") <(printf '%s\n' "$documented"))
only_documented=$(comm -13 <(printf '%s\n' "$listed") <(printf '%s\n' "$documented"))
if [ -n "$only_listed" ]; then
    echo "FAIL: read by libkjit (src/util/environment.cpp) but not in docs/environment.md's 'Read by libkjit' table:" $only_listed
    failed=1
fi
if [ -n "$only_documented" ]; then
    echo "FAIL: in docs/environment.md's 'Read by libkjit' table but not read by libkjit (src/util/environment.cpp):" $only_documented
    failed=1
fi
[ "$failed" -eq 0 ] && echo "environment: $(printf '%s\n' "$listed" | wc -l) variables, each read through src/util/environment.cpp and documented"
exit "$failed"
