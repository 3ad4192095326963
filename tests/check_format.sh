#!/usr/bin/env bash
# The format check (ctest: format, label `lint`): every C and C++ file of the project must be
# as clang-format leaves it with the committed .clang-format. Fails listing the files that
# differ, with the command that fixes each.
#
# clang-format 14 only. Versions format some constructs differently (and read .clang-format
# options differently), so a tree formatted by one fails the check of another; the style is
# defined as what clang-format 14 makes of .clang-format. Debian 12: apt-get install
# clang-format-14. Set CLANG_FORMAT to use a binary of that version elsewhere.
#
#   check_format.sh SOURCE_DIR
#
# Files: `git ls-files` when SOURCE_DIR is a git checkout (what is committed or staged), else a
# find that skips build folders (any folder with a CMakeCache.txt, build/, build-*/) and
# hidden folders. Extensions: .c .h .cpp .hpp .cu .cuh. Python is not checked here.
set -uo pipefail
src=${1:?usage: check_format.sh SOURCE_DIR}
cd "$src" || { echo "FAIL: cannot enter '$src'"; exit 1; }
[ -f .clang-format ] || { echo "FAIL: no .clang-format in '$src'"; exit 1; }

# Paths never checked (shell globs against the path from SOURCE_DIR; clang-format 14 has no
# ignore file): generated, vendored and fuzz-corpus files. None of today's C/C++ files is
# generated or vendored; list them here if any ever are.
excluded=(
    # The public headers are laid out by hand for their readers (doxygen comments aligned in
    # columns, `#  define` nesting) in ways clang-format 14 cannot keep; abidiff guards them.
    'include/kjit/*'
    'tests/fuzz/regressions/*'
    'tests/fuzz/corpus/*'
    'python/*'
)

# The binary: $CLANG_FORMAT, else clang-format-14, else clang-format if it is version 14.
cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
    for candidate in clang-format-14 clang-format; do
        if command -v "$candidate" >/dev/null 2>&1; then cf=$candidate; break; fi
    done
fi
if [ -z "$cf" ] || ! command -v "$cf" >/dev/null 2>&1; then
    echo "FAIL: clang-format 14 not found (Debian: apt-get install clang-format-14; or set CLANG_FORMAT)"
    exit 1
fi
version=$("$cf" --version 2>/dev/null)
if ! [[ $version =~ clang-format\ version\ 14\. ]]; then
    echo "FAIL: $cf is not clang-format 14 ($version); the style is defined by version 14 only,"
    echo "      other versions format differently (Debian: apt-get install clang-format-14; or set CLANG_FORMAT)"
    exit 1
fi

is_source() {
    case $1 in
        *.c | *.h | *.cpp | *.hpp | *.cu | *.cuh) ;;
        *) return 1 ;;
    esac
    local pattern
    for pattern in "${excluded[@]}"; do
        # shellcheck disable=SC2254
        case $1 in $pattern) return 1 ;; esac
    done
    return 0
}

files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
    while IFS= read -r -d '' f; do
        [ -f "$f" ] && is_source "$f" && files+=("$f")
    done < <(git ls-files -z)
else
    # Build folders hold generated sources (CMake's own checks, fetched dependencies).
    builds=()
    while IFS= read -r -d '' cache; do
        builds+=(-path "./$(dirname "${cache#./}")" -prune -o)
    done < <(find . -name CMakeCache.txt -not -path '*/.*' -print0)
    while IFS= read -r -d '' f; do
        f=${f#./}
        is_source "$f" && files+=("$f")
    done < <(find . "${builds[@]}" \( -name '.?*' -o -name build -o -name 'build-*' \) -prune -o -type f -print0)
fi
if [ "${#files[@]}" -eq 0 ]; then
    echo "FAIL: no C or C++ files found under '$src'"
    exit 1
fi

bad=()
for f in "${files[@]}"; do
    "$cf" --dry-run -Werror --ferror-limit=1 "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -ne 0 ]; then
    echo "FAIL: ${#bad[@]} of ${#files[@]} C/C++ files are not formatted as .clang-format says ($version):"
    for f in "${bad[@]}"; do echo "  $f"; done
    echo "Fix each with (from $PWD):"
    for f in "${bad[@]}"; do echo "  $cf -i $f"; done
    echo "First difference of ${bad[0]}:"
    "$cf" --dry-run --ferror-limit=1 "${bad[0]}" 2>&1 | head -n 5
    exit 1
fi
echo "OK: ${#files[@]} C/C++ files formatted as .clang-format says ($version)"
