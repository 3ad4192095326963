#!/usr/bin/env bash
# ctest's guard against the bench rotting: a small generated cubin, a few iterations of every
# row, and the JSON checked for the expected name; then a quick kjit-bench-compile (2 kernels,
# 50 hits) and its JSON checked for completeness; then kjit-bench-load on 4 kernels through the
# driver test double. Usage: smoke_test.sh BENCH_BIN_DIR FAKE_LIBCUDA
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/kjit-make-bigcubin" "$work/small.cubin" --instances 40
"$bin/kjit-bench" --cubin "$work/small.cubin" --keyword gemm_fp8_kernel --iterations 200 \
    --scan-iterations 5 --pyelftools-repeats 1 --json "$work/out.json"
grep -q '_Z15gemm_fp8_kernelILi128ELi256ELi64EEvPfPKfS2_i' "$work/out.json"
ls "$work" | grep -q '\.tmp-' && { echo "temp file left behind"; exit 1; }
"$bin/kjit-bench-compile" --kernels 2 --hits 50 --json "$work/compile.json"
grep -q '"all_targets_met"' "$work/compile.json"
KJIT_LIBCUDA=$2 "$bin/kjit-bench-load" --cache "$work/load-cache" --kernels 4 --rounds 2 --json "$work/load.json"
grep -q '"id": "load_2t", "label": "[^"]*", "skipped": false' "$work/load.json"
echo "bench smoke test OK"
