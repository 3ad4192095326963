#!/usr/bin/env bash
# The resolve benchmark, end to end (README quick start): installs what is missing, configures
# and builds build/, generates the big test cubin once, then times kjit_resolve_name, and then
# kjit_compile against raw NVRTC (kjit-bench-compile, with its defaults), and then a warm start of
# 300 cached kernels through kjit_load_cached (kjit-bench-load). Without a GPU the load rows go
# through the driver test double (tests/fake_driver/libcuda.so.1), and the table says so.
#
#   bash bench/run.sh [kjit-bench options, e.g. --iterations 50000]
#
# Environment: BUILD_DIR (default <repo>/build). The cubin is cached as
# $BUILD_DIR/bench-data/big.cubin; delete it to generate it again. Results are also written to
# $BUILD_DIR/bench-data/resolve.json, compile.json and load.json; the 300 kernels stay cached
# in $BUILD_DIR/bench-data/load-cache. Exits non-zero if any step fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_args=("$@")
set --   # setup.sh would otherwise see our arguments as extra cmake options
# shellcheck source=SCRIPTDIR/../scripts/setup.sh
source "$ROOT/scripts/setup.sh"   # sets BUILD_DIR (absolute) and KJIT_ROOT, or fails

echo "bench: building kjit-bench, kjit-bench-compile, kjit-bench-load, kjit-make-bigcubin and the driver test double"
cmake --build "$BUILD_DIR" -j"$(nproc)" --target kjit-bench kjit-bench-compile kjit-bench-load kjit-make-bigcubin fake_cuda

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

"$BUILD_DIR/bench/kjit-bench" --cubin "$CUBIN" --keyword gemm_fp8_kernel --json "$DATA/resolve.json" "${bench_args[@]}"

echo
echo "bench: timing kjit_compile against raw NVRTC"
"$BUILD_DIR/bench/kjit-bench-compile" --json "$DATA/compile.json"

echo
echo "bench: timing a warm start of 300 cached kernels (kjit_load_cached)"
if [ -z "${KJIT_LIBCUDA:-}" ] && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "bench: no GPU found: the load rows go through the driver test double, not a real driver"
    export KJIT_LIBCUDA="$BUILD_DIR/tests/fake_driver/libcuda.so.1"
fi
"$BUILD_DIR/bench/kjit-bench-load" --cache "$DATA/load-cache" --json "$DATA/load.json"
