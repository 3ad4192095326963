#!/usr/bin/env bash
# Fetches the sources the bench compares libkjit with or compiles (bench/sources.txt: DeepGEMM,
# humming and CUTLASS for the real-clients scenario, jitify2 for the peers scenario), each at
# its pinned commit, and Warp's wheel (warp-lang, its Python code generator and headers, with
# NumPy, which it imports) at its pinned version and SHA-256, into a folder you name. Needs git,
# pip and a network; none of it becomes part of this project. Then run the bench with them:
#
#   bash scripts/get_bench_sources.sh DIR
#   KJIT_BENCH_SOURCES=DIR bash bench/run.sh
#
# Each repository lands in DIR/<owner>+<name>/repo as a bare repository holding the pinned commit
# only (a shallow fetch of that commit), with HEAD at it (and the branch bench/sources.txt names,
# e.g. jitify2); a wheel in DIR/pypi+<name>. One already there at its pin is left as it is.
# Exits non-zero when a fetch fails, naming what failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR=${1:?usage: get_bench_sources.sh DIR (the folder to fetch into)}
BASE_URL=${KJIT_BENCH_SOURCES_BASE_URL:-https://github.com}
command -v git >/dev/null || { echo "get_bench_sources: git not found (Debian: apt-get install git)" >&2; exit 1; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
# fetch_wheel NAME VERSION SHA256: a wheel from PyPI (pip download, with what it depends on, for
# this machine's Python) into DIR/pypi+NAME; fails unless NAME's wheel has the pinned SHA-256.
fetch_wheel() {
    local name=$1 version=$2 sha256=$3 dest="$DIR/pypi+$1" file
    file=$(pinned_wheel "$dest" "$name" "$version" "$sha256")
    if [ -n "$file" ]; then
        echo "get_bench_sources: $name $version already in $dest"
        return
    fi
    echo "get_bench_sources: $name $version (PyPI) -> $dest"
    mkdir -p "$dest"
    python3 -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$dest" "$name==$version" ||
        { echo "get_bench_sources: downloading $name $version failed" >&2; exit 1; }
    file=$(pinned_wheel "$dest" "$name" "$version" "$sha256")
    [ -n "$file" ] || { echo "get_bench_sources: no wheel of $name $version in $dest has the pinned SHA-256 $sha256" >&2; exit 1; }
}

# pinned_wheel DEST NAME VERSION SHA256: the wheel of NAME VERSION in DEST with that SHA-256, if any.
pinned_wheel() {
    local f
    for f in "$1/${2//-/_}-$3-"*.whl; do
        [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$4" ] && { echo "$f"; return; }
    done
    return 0
}

while read -r repo commit branch; do
    case "$repo" in ''|'#'*) continue ;; esac
    case "$repo" in pypi:*) fetch_wheel "${repo#pypi:}" "$commit" "$branch"; continue ;; esac
    dest="$DIR/${repo/\//+}/repo"
    if [ "$(git --git-dir="$dest" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null)" = "$commit" ]; then
        echo "get_bench_sources: $repo already at ${commit:0:12} in $dest"
        continue
    fi
    echo "get_bench_sources: $repo at ${commit:0:12} -> $dest"
    rm -rf "$dest"
    mkdir -p "$dest"
    git init -q --bare "$dest"
    git --git-dir="$dest" fetch -q --depth 1 "$BASE_URL/$repo.git" "$commit" ||
        { echo "get_bench_sources: fetching $repo $commit failed" >&2; exit 1; }
    name=${branch:-pinned}
    git --git-dir="$dest" update-ref "refs/heads/$name" "$commit"
    git --git-dir="$dest" symbolic-ref HEAD "refs/heads/$name"
done < "$ROOT/bench/sources.txt"
echo "get_bench_sources: done; run the bench with KJIT_BENCH_SOURCES=$DIR"
