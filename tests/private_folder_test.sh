#!/usr/bin/env bash
# Runs a test as if the clone lay in a folder other users cannot search (root's home is 0700, and
# so is a `mktemp -d` folder). In a mount namespace of its own, the source folder (and the build
# folder, when it is not inside it) becomes mode 0700 at its own path: a tmpfs of that mode is
# mounted over it and its entries are bound back in. Every path the build wrote into a binary
# (RUNPATH, KJIT_CLI) or into a test's environment (KJIT_LIBCUDA, TSAN_OPTIONS's suppressions)
# stays the same and works for root, and nothing in the tree is reachable by another user, as in
# such a clone; TMPDIR is a 0700 folder too (a tmpfs), as libpam-tmpdir makes it. The tests that
# run parts of themselves as other users must pass there: they copy what those users load or run
# into a folder under /tmp (tests/util/trust_test.cpp, Stage), and make what they share with
# them under /tmp, not $TMPDIR.
#
#   private_folder_test.sh SOURCE_DIR BUILD_DIR COMMAND [ARGS...]
#
# Exits with COMMAND's status, or 77 (ctest: skipped, with the reason) when not root, when no
# mount namespace can be made (a container without CAP_SYS_ADMIN), or when COMMAND skipped
# tests (a GoogleTest "[  SKIPPED ]": the multi-user cases did not run, so nothing was shown);
# fails when it ran no test at all.
set -euo pipefail

fail() {
    echo "private_folder_test: $*" >&2
    exit 1
}

# hide DIR ORIGINAL: DIR becomes a 0700 tmpfs holding DIR's entries, each bound back in from
# ORIGINAL (an empty folder, where DIR itself is bound first).
hide() {
    local dir=$1 original=$2 entry name
    mount --rbind "$dir" "$original"
    mount -t tmpfs -o mode=0700,size=1m kjit-private "$dir"
    shopt -s dotglob nullglob
    for entry in "$original"/*; do
        name=${entry##*/}
        if [ -L "$entry" ]; then
            cp -P "$entry" "$dir/$name"
            continue
        elif [ -d "$entry" ]; then
            mkdir "$dir/$name"
        else
            : >"$dir/$name"
        fi
        mount --rbind "$entry" "$dir/$name"
    done
    shopt -u dotglob nullglob
}

# Inside the namespace: --inside HOLDER SOURCE_DIR BUILD_DIR COMMAND [ARGS...]
inside() {
    local holder=$1 source=$2 build=$3 probe
    shift 3
    case "$build/" in
        "$source"/*) hide "$source" "$holder/source" ;;
        *)
            case "$source/" in
                "$build"/*) hide "$build" "$holder/build" ;;
                *) hide "$source" "$holder/source" && hide "$build" "$holder/build" ;;
            esac
            ;;
    esac
    # The set-up must be able to fail: root still sees the build, another user no longer does.
    probe="$build/CMakeCache.txt"
    [ -f "$probe" ] || fail "$probe is gone inside the namespace"
    if setpriv --reuid=65534 --regid=65534 --clear-groups -- test -e "$probe"; then
        fail "$probe is still reachable by another user inside the namespace"
    fi
    echo "private_folder_test: $source and $build are 0700 here (another user cannot reach $probe)"
    # And TMPDIR a private folder, as libpam-tmpdir makes it (/tmp/user/0, mode 0700): what a
    # test shares with another user must not be made under it.
    mount -t tmpfs -o mode=0700 kjit-private-tmp "$holder/tmp"
    export TMPDIR="$holder/tmp"
    cd "$PWD" # the working folder again, through the new mounts
    "$@" 2>&1 | tee "$holder/log"
}

if [ "${1:-}" = --inside ]; then
    shift
    inside "$@"
    exit
fi

[ "$#" -ge 3 ] || fail "usage: private_folder_test.sh SOURCE_DIR BUILD_DIR COMMAND [ARGS...]"
SOURCE="$(cd "$1" && pwd -P)" || fail "no source folder '$1'"
BUILD="$(cd "$2" && pwd -P)" || fail "no build folder '$2'"
shift 2
[ -f "$BUILD/CMakeCache.txt" ] || fail "'$BUILD' is not a build folder (no CMakeCache.txt)"
if [ "$SOURCE" = / ] || [ "$BUILD" = / ]; then
    fail "the source and build folders must not be /"
fi
if [ "$(id -u)" != 0 ]; then
    echo "skipped: not root (the tests that run as other users need root)"
    exit 77
fi
command -v setpriv >/dev/null || fail "setpriv not found (Debian: util-linux)"
if ! why=$(unshare --mount --propagation private true 2>&1); then
    echo "skipped: no mount namespace can be made here (unshare --mount: ${why:-failed})"
    exit 77
fi

HOLDER="$(mktemp -d /tmp/kjit-private-XXXXXX)"
mkdir "$HOLDER/source" "$HOLDER/build" "$HOLDER/tmp"
# rmdir, never rm -r: were a bind still mounted there, its files would be the clone's.
trap 'rm -f "$HOLDER/log"; rmdir "$HOLDER/source" "$HOLDER/build" "$HOLDER/tmp" "$HOLDER"' EXIT
status=0
unshare --mount --propagation private bash "${BASH_SOURCE[0]}" --inside "$HOLDER" "$SOURCE" "$BUILD" "$@" ||
    status=$?
if [ "$status" = 0 ] && grep -q '^\[==========\] Running 0 tests' "$HOLDER/log"; then
    fail "the command ran no test (a --gtest_filter that names none?)"
fi
if [ "$status" = 0 ] && grep -q '^\[  SKIPPED \]' "$HOLDER/log"; then
    echo "skipped: the command skipped tests (above), so it showed nothing here"
    exit 77
fi
exit "$status"
