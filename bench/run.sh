#!/usr/bin/env bash
# The resolve benchmark, end to end (README quick start): installs what is missing, configures
# and builds build/, generates the big test cubin once, then times kjit_resolve_name, and then
# kjit_compile against raw NVRTC (kjit-bench-compile, with its defaults).
#
#   bash bench/run.sh [kjit-bench options, e.g. --iterations 50000]
#
# Environment: BUILD_DIR (default <repo>/build). The cubin is cached as
# $BUILD_DIR/bench-data/big.cubin; delete it to generate it again. Results are also written to
# $BUILD_DIR/bench-data/resolve.json and compile.json. Exits non-zero if any step fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_args=("$@")
set --   # setup.sh would otherwise see our arguments as extra cmake options
# shellcheck source=SCRIPTDIR/../scripts/setup.sh
source "$ROOT/scripts/setup.sh"   # sets BUILD_DIR (absolute) and KJIT_ROOT, or fails

echo "bench: building kjit-bench, kjit-bench-compile and kjit-make-bigcubin"
cmake --build "$BUILD_DIR" -j"$(nproc)" --target kjit-bench kjit-bench-compile kjit-make-bigcubin

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
