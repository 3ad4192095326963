#!/usr/bin/env bash
# The whole bench, end to end (README quick start): installs what is missing, configures and
# builds build/, generates the 12,000-symbol test cubin once, then runs kjit-bench with its
# defaults: the tuning sweep of 300 GEMM-like kernels cold and warm with 1 and 2 threads,
# kjit_compile against raw NVRTC, resolve against the pyelftools loop, and start-up of a fresh
# process, the price of the trust checks against 0.3.0's libkjit (built once from git
# history), hits as kernel libraries ask for them (path and name, C and Python) against 0.7.0
# (built the same way) and jitify2's in-memory layer, real clients' kernels (DeepGEMM, humming)
# in batches, kjit.cuda_core against cuda.core's program cache, and header-heavy kernels over a CuTe/CUTLASS-shaped header tree the bench writes
# itself (hits against header-free kernels, a warm start of 300 in a fresh process, cold batches
# with and without PCH beside humming-style kernels, the edit/revert/touch cycle; `--only
# headers` runs it alone), one compile per key on the node, the Redis cluster tier against a
# redis-server on 127.0.0.1 that kjit-bench starts itself (scripts/setup.sh installs redis-server),
# and real clients' kernels (DeepGEMM, humming, Warp; bench/real_clients/prepare.py generates them
# from their pinned sources under $KJIT_BENCH_SOURCES when given) as batches and one at a time
# against sequential plain NVRTC,
# and caches that move with the install (a cache built under one prefix, exported, and a fresh node
# under another prefix with the seed: the header tree, and DeepGEMM without and with base_dirs,
# beside 0.10.0; `--only relocation` runs it alone), and serving without JIT (the real clients'
# kernels recorded in a staging run, `kjit warm` of the record against the batch of the same set,
# a strict run with KJIT_NO_COMPILE=1 and a strict miss's cost; `--only serving` runs it alone).
# Prints a summary table; writes bench.json and bench.png (the chart). Ends with
# `kjit cache stats` and `kjit cache verify` on the sweep's warm cache.
# Without a GPU the load rows go through the driver test double (tests/fake_driver/libcuda.so.1)
# and the script says so. docs/bench.md has a current table and chart.
#
#   bash bench/run.sh [kjit-bench options, e.g. --kernels 100 --only sweep]
#
# Environment: BUILD_DIR (default <repo>/build); KJIT_BENCH_SOURCES, the folder
# scripts/get_bench_sources.sh fills with the pinned sources of jitify2 and the real clients
# (unset: those rows are not run, and the bench says so). Everything goes to $BUILD_DIR/bench-data:
# big.cubin (delete it to generate it again), bench.json, bench.png (with its .dat and .gp
# files), sweep-cache/, the 300 kernels' warm cache, and header-tree/, the generated headers
# (written anew on each run). Exits non-zero if any step fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_args=("$@")
set --   # setup.sh would otherwise see our arguments as extra cmake options
# python3-venv: prepare.py runs Warp's code generator in a venv of its pinned wheel (with
# KJIT_BENCH_SOURCES), where python3 is Debian's.
export KJIT_EXTRA_PACKAGES="python3-venv ${KJIT_EXTRA_PACKAGES:-}"
# shellcheck source=SCRIPTDIR/../scripts/setup.sh
source "$ROOT/scripts/setup.sh"   # sets BUILD_DIR (absolute) and KJIT_ROOT, or fails

# The sources the bench reads beside libkjit (bench/sources.txt: jitify2, DeepGEMM, humming,
# CUTLASS, each at its pinned commit, and Warp's wheel), from $KJIT_BENCH_SOURCES: a folder that
# `bash scripts/get_bench_sources.sh DIR` fills. None of them is part of this project; without
# the folder the scenarios that need them say they are not run.
SOURCES="${KJIT_BENCH_SOURCES:-}"
if [ -n "$SOURCES" ]; then
    echo "bench: reading the pinned sources (bench/sources.txt) from KJIT_BENCH_SOURCES=$SOURCES"
else
    echo "bench: KJIT_BENCH_SOURCES is unset: the jitify2 rows and the real-clients scenario are not run" \
         "(bash scripts/get_bench_sources.sh DIR fetches their sources; then KJIT_BENCH_SOURCES=DIR)"
fi

# jitify2's in-memory layer, timed beside libkjit's repeats in the peers scenario: its header
# (NVIDIA/jitify at the commit bench/sources.txt pins on branch jitify2), extracted into the build
# tree from $KJIT_BENCH_SOURCES/NVIDIA+jitify/repo.
JITIFY_COMMIT=$(awk '$1 == "NVIDIA/jitify" { print $2 }' "$ROOT/bench/sources.txt")
JITIFY_REPO="$SOURCES/NVIDIA+jitify/repo"
if [ -n "$SOURCES" ] && git --git-dir="$JITIFY_REPO" cat-file -e "$JITIFY_COMMIT^{commit}" 2>/dev/null; then
    mkdir -p "$BUILD_DIR/jitify2"
    git --git-dir="$JITIFY_REPO" show "$JITIFY_COMMIT:jitify2.hpp" >"$BUILD_DIR/jitify2/jitify2.hpp"
    echo "$JITIFY_COMMIT" >"$BUILD_DIR/jitify2/COMMIT"
    echo "bench: jitify2.hpp of ${JITIFY_COMMIT:0:12} (from $JITIFY_REPO) for the peers scenario"
    cmake "$BUILD_DIR" -DKJIT_BENCH_JITIFY2_DIR="$BUILD_DIR/jitify2" >/dev/null
elif [ -n "$SOURCES" ]; then
    echo "bench: no NVIDIA/jitify at ${JITIFY_COMMIT:0:12} in $JITIFY_REPO: the jitify2 rows are not run"
fi

echo "bench: building kjit-bench, kjit-make-bigcubin and the driver test double"
cmake --build "$BUILD_DIR" -j"$(nproc)" --target kjit-bench kjit-make-bigcubin fake_cuda kjit_cli

DATA="$BUILD_DIR/bench-data"
CUBIN="$DATA/big.cubin"
mkdir -p "$DATA"
if [ ! -s "$CUBIN" ]; then
    echo "bench: generating $CUBIN (once; NVRTC compiles ~3,000 kernels, about a minute on 2 cores)"
    started=$(date +%s.%N)
    "$BUILD_DIR/bench/kjit-make-bigcubin" "$CUBIN"
    echo "bench: cubin generated in $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
else
    echo "bench: using the cached $CUBIN (delete it to generate it again)"
fi

# Earlier libkjits timed beside this one in the same run, each built once from git history into
# $BUILD_DIR/<folder> (about two minutes each on 2 cores; skipped, and said, where the history is
# absent, e.g. in a shallow clone): build_baseline COMMIT FOLDER WHAT. Succeeds when it is there.
build_baseline() {
    local commit=$1 folder="$BUILD_DIR/$2" what=$3
    if [ ! -f "$folder/build/src/libkjit.so.0" ]; then
        if ! git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null; then
            echo "bench: commit $commit ($what) is not in this clone's history: it is not timed"
            return 1
        fi
        echo "bench: building the libkjit of $what into $folder, once"
        rm -rf "$folder"
        mkdir -p "$folder/src"
        git -C "$ROOT" archive "$commit" | tar -x -C "$folder/src"
        cmake -S "$folder/src" -B "$folder/build" -DKJIT_BUILD_TESTS=OFF -DKJIT_BUILD_BENCH=OFF \
            -DKJIT_BUILD_CLI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$folder/configure.log"
        cmake --build "$folder/build" -j"$(nproc)" --target kjit >"$folder/build.log"
    fi
    [ -f "$folder/build/src/libkjit.so.0" ]
}
baseline_args=()
# The trust scenario: 0.3.0, the last release before the trust checks (issue 17).
if build_baseline 8fc1a124ffb11018db767bcdae6ece683c8b7121 baseline-0.3.0 "0.3.0 (the trust scenario's baseline)"; then
    baseline_args+=(--baseline-lib "$BUILD_DIR/baseline-0.3.0/build/src")
fi
# The peers scenario: 0.7.0, the release before issue 35's work on repeats (C fast path, epoll,
# Python prepared requests), with its own Python package. (Until issue 35 it was the code before
# the fast-hits work of issue 24, 0570364: docs/bench.md keeps that table.)
if build_baseline 87b81c35edba51a3cd88b95be7525afda49ff598 baseline-0.7.0 "0.7.0 (the peers scenario's baseline)"; then
    baseline_args+=(--before-lib "$BUILD_DIR/baseline-0.7.0/build/src"
                    --before-python "$BUILD_DIR/baseline-0.7.0/src/python")
fi
# The fleet scenario: 0.8.0, the release before issue 36's work on the cluster tier (server
# conditions, compressed values, seeds).
if build_baseline 9b67a21b2af6fe9a0ffec3b4a9fad1bdff65999e baseline-0.8.0 "0.8.0 (the fleet scenario's baseline)"; then
    baseline_args+=(--fleet-before-lib "$BUILD_DIR/baseline-0.8.0/build/src")
fi

# The relocation scenario: 0.10.0 (its last commit, before 0.11.0's strict mode), whose keys hold
# each include folder's absolute path: a node under another prefix compiles every kernel (issue 47).
if build_baseline d8c20ba78f96e1da47553885855d91c17cd1a860 baseline-0.10.0 "0.10.0 (the relocation scenario's baseline)"; then
    baseline_args+=(--relocation-before-lib "$BUILD_DIR/baseline-0.10.0/build/src")
fi

if [ -z "${KJIT_LIBCUDA:-}" ] && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "bench: no GPU found: the load rows go through the driver test double, not a real driver"
    export KJIT_LIBCUDA="$BUILD_DIR/tests/fake_driver/libcuda.so.1"
fi
# The real-clients scenario's kernels: DeepGEMM's, humming's and Warp's, generated with their own
# generators from the pinned DeepGEMM, humming, CUTLASS and warp-lang under $KJIT_BENCH_SOURCES
# (Warp's in a venv of its wheel and NumPy's, $BUILD_DIR/bench/real-clients/warp-venv), into
# $BUILD_DIR/bench/real-clients. Without them the scenario says it is skipped (and the relocation
# scenario, which reads the DeepGEMM set too, that its DeepGEMM part is not run).
# Alone: bash bench/run.sh --only real-clients
CLIENTS="$BUILD_DIR/bench/real-clients"
clients_rc=0
python3 "$ROOT/bench/real_clients/prepare.py" --out "$CLIENTS" || clients_rc=$?
if [ "$clients_rc" -eq 3 ]; then
    echo "bench: the real clients' sources are not there (above): the real-clients scenario is skipped"
elif [ "$clients_rc" -ne 0 ]; then
    echo "bench: bench/real_clients/prepare.py failed (exit $clients_rc)" >&2
    exit "$clients_rc"
fi
"$BUILD_DIR/bench/kjit-bench" --work-dir "$DATA" --cubin "$CUBIN" --json "$DATA/bench.json" \
    --clients "$CLIENTS" "${baseline_args[@]}" "${bench_args[@]}"

# kjit.cuda_core against cuda.core's program cache (the README's table, issue 35's 3x goal), with
# the venv of cuda-core from PyPI that `ctest -R python_cuda_core` makes; without it, said.
VENV="$BUILD_DIR/tests/cuda-core-venv"
if [ -x "$VENV/bin/python" ] && [ -z "${bench_args[*]}" ]; then
    echo "bench: kjit.cuda_core against cuda.core's program cache (bench/peers_cuda_core.py)"
    KJIT_LIBRARY="$BUILD_DIR/src/libkjit.so.0" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
        "$VENV/bin/python" "$ROOT/bench/peers_cuda_core.py" --runs 11 --repeats 2000 \
        --json "$DATA/peers_cuda_core.json"
elif [ -z "${bench_args[*]}" ]; then
    echo "bench: no cuda-core venv at $VENV (ctest -R python_cuda_core makes it): kjit.cuda_core" \
        "against cuda.core's cache is not run"
fi

# The sweep's warm cache as the kjit command sees it (docs/cli.md).
if [ -d "$DATA/sweep-cache" ]; then
    echo "bench: the sweep's cache: kjit cache stats, then kjit cache verify"
    "$BUILD_DIR/bin/kjit" cache stats --cache-dir "$DATA/sweep-cache"
    "$BUILD_DIR/bin/kjit" cache verify --cache-dir "$DATA/sweep-cache"
fi
