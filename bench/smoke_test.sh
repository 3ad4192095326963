#!/usr/bin/env bash
# ctest's guard against the bench rotting: a small generated cubin, a few iterations of every
# row, and the JSON checked for the expected name. Usage: smoke_test.sh BENCH_BIN_DIR
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/kjit-make-bigcubin" "$work/small.cubin" --instances 40
"$bin/kjit-bench" --cubin "$work/small.cubin" --keyword gemm_fp8_kernel --iterations 200 \
    --scan-iterations 5 --pyelftools-repeats 1 --json "$work/out.json"
grep -q '_Z15gemm_fp8_kernelILi128ELi256ELi64EEvPfPKfS2_i' "$work/out.json"
ls "$work" | grep -q '\.tmp-' && { echo "temp file left behind"; exit 1; }
echo "bench smoke test OK"
