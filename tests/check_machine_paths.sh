#!/usr/bin/env bash
# No path of a developer's machine in the project (ctest: machine_paths, label `lint`): every
# text file of the tree (`git ls-files` in a git checkout, else a find that skips build folders)
# is searched for the folders that exist only on a machine where libkjit was developed or built:
#
#   - the checkout's own absolute path and the build folder's (whatever machine runs the test);
#   - the top folder of this project's development machines (`work`, below), and a home other
#     than the example users the docs show (user, u under home);
#   - root's home, but root's own cache in the troubleshooting page's advice.
#
# A default that points at such a folder (a mirror, a build tree), an ABI baseline recording the
# checkout, or pasted output with build paths fails here, naming the file and line. What a user
# must provide is asked for by a script or a documented variable instead (e.g. KJIT_BENCH_SOURCES).
#
#   check_machine_paths.sh SOURCE_DIR [BUILD_DIR]
set -uo pipefail
src=$(cd "${1:?usage: check_machine_paths.sh SOURCE_DIR [BUILD_DIR]}" && pwd -P)
build=${2:-}
[ -n "$build" ] && build=$(cd "$build" 2>/dev/null && pwd -P)
cd "$src" || exit 1
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -d '' files < <(git ls-files -z)
else
    mapfile -d '' files < <(find . \( -name .git -o -name 'build*' -o -exec test -f '{}/CMakeCache.txt' \; \) -prune \
        -o -type f -print0)
fi
# Extended regular expressions; a match must start at a path boundary (not inside a relative
# path such as p1/<that folder>/inc).
# The folders are named here without their slashes, so that this script does not name a machine's
# folder itself.
boundary='(^|[^A-Za-z0-9_.])/'
patterns=("${boundary}work/" "${boundary}home/[A-Za-z0-9_.-]+/" "${boundary}root/")
literal=("$src/")
[ -n "$build" ] && literal+=("$build/")
allowed="/home/(user|u)/|KJIT_CACHE_DIR=/root[/]\\.cache/kjit"
found=0
for f in "${files[@]}"; do
    f=${f#./}
    [ -f "$f" ] || continue
    grep -Iq . "$f" 2>/dev/null || continue  # binary or empty
    hits=$( { grep -nE "$(IFS='|'; echo "${patterns[*]}")" "$f"; grep -nF "${literal[@]/#/-e}" "$f"; } 2>/dev/null |
        sort -u -t: -k1,1n | grep -vE "$allowed")
    if [ -n "$hits" ]; then
        while IFS= read -r line; do
            echo "FAIL: $f:${line%%:*}: a path of a developer's machine: ${line#*:}" | cut -c1-300
            found=$((found + 1))
        done <<< "$hits"
    fi
done
echo "machine paths: ${#files[@]} files searched, $found lines with a developer's path"
[ "$found" -eq 0 ]
