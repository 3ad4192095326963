#!/usr/bin/env bash
# The kjit command end to end: every subcommand's output, --json, and exit codes (0; the
# kjit_status of a failure; 20 when verify finds damage; 64 for usage errors).
#   cli_test.sh KJIT_BINARY KJIT_WORKER
set -euo pipefail
KJIT=$(realpath "$1")  # absolute: some checks run it from other folders
WORKER=$(realpath "$2")  # libkjit's kjit-worker, which a gated copy of stands in for below
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kjit-cli-test.XXXXXX")
REDIS_PID=""
trap '[ -z "$REDIS_PID" ] || kill "$REDIS_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
C="$WORK/cache"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_rc RC CMD...: runs CMD, stdout to $WORK/out, stderr to $WORK/err; checks its status.
expect_rc() {
    local want=$1 rc=0
    shift
    "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
    if [ "$rc" != "$want" ]; then
        fail "'$*' exited $rc, expected $want; stdout: $(head -c 400 "$WORK/out"); stderr: $(head -c 400 "$WORK/err")"
    fi
}
# json_check PYTHON_EXPR: evaluates EXPR with `d` the JSON in $WORK/out.
json_check() {
    /usr/bin/env python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
        "$WORK/out" "$1" || fail "JSON check '$1' failed on: $(head -c 600 "$WORK/out")"
}
contains() { grep -qF -- "$1" "$2" || fail "'$1' not in $2: $(head -c 600 "$2")"; }

cat >"$WORK/k.cu" <<'CU'
template <int N> __global__ void scale(float *x) { x[threadIdx.x] *= N; }
template __global__ void scale<2>(float *);
template __global__ void scale<3>(float *);
extern "C" __global__ void plain(float *x) { x[0] = X; }
CU

# compile: plain output is the path, then the name.
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -- -DX=1
[ "$(sed -n 2p "$WORK/out")" = plain ] || fail "compile printed $(cat "$WORK/out")"
PLAIN=$(sed -n 1p "$WORK/out")
[ -f "$PLAIN" ] || fail "compile's path $PLAIN is no file"
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<3>' --arch sm_90 --cache-dir "$C" --json -- -DX=1
json_check 'd["name"] == "_Z5scaleILi3EEvPf" and d["keyword"] == "scale" and d["cubin"].endswith("/kernel.cubin")'
SCALE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cubin"])' "$WORK/out")
# Failures: status as exit code, message on stderr, JSON error object with --json.
expect_rc 3 "$KJIT" compile "$WORK/k.cu" -k scale --arch sm_90 --cache-dir "$C" -- -DX=1
contains ambiguous "$WORK/err"
expect_rc 6 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --json
json_check 'd["code"] == 6 and d["status"] == "compile error" and "X" in d["error"]'
# NVRTC's log points at the user's file, not at the cache's name for every source.
json_check '"k.cu(" in d["error"] and "source.cu" not in d["error"]'
expect_rc 1 "$KJIT" compile "$WORK/k.cu" -k plain --arch compute_90 --cache-dir "$C"
# libkjit's messages name the C fields; the command names its own options instead.
# An arch among the NVRTC options is named, with --arch or without (then it said "no target
# arch", as no GPU gave one).
expect_rc 1 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -- -arch=sm_80
contains "NVRTC option '-arch=sm_80' sets the target: pass the arch in --arch, not as an NVRTC option" "$WORK/err"
if grep -q "kjit_compile_options" "$WORK/err"; then fail "a C field name in: $(cat "$WORK/err")"; fi
# An option the command does not know is named, with the one it most likely is (issue 49: CLI11 said
# only "--keyword is required" for --keywrd), and an NVRTC option before -- says where it goes.
expect_rc 64 "$KJIT" compile "$WORK/k.cu" --keywrd plain --arch sm_90 --cache-dir "$C"
contains "unknown option '--keywrd' of kjit compile (did you mean --keyword?)" "$WORK/err"
expect_rc 64 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -std=c++17
contains "NVRTC options go after --, e.g. kjit compile FILE -k KEYWORD -- -std=c++17" "$WORK/err"
expect_rc 64 "$KJIT" cache stats --cache-dri "$C"
contains "unknown option '--cache-dri' of kjit cache stats (did you mean --cache-dir?)" "$WORK/err"

# A serving process refuses to compile (issue 48): --compile-mode never or KJIT_NO_COMPILE=1 makes a
# miss exit 15 naming the kernel, with no NVRTC run; a hit is a hit; warn compiles and says so.
expect_rc 15 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --compile-mode never -- -DX=41
contains "is not cached, and compiling is refused (by --compile-mode)" "$WORK/err"
contains "kernel 'plain'" "$WORK/err"
expect_rc 15 env KJIT_NO_COMPILE=1 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -- -DX=41
contains '$KJIT_NO_COMPILE=1' "$WORK/err"
expect_rc 0 env KJIT_NO_COMPILE=1 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -- -DX=1
expect_rc 0 env KJIT_NO_COMPILE=warn "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$WORK/warned" -- -DX=42
contains "which was not cached" "$WORK/err"
expect_rc 64 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --compile-mode sometimes
# Record a run, warm another cache from the record for two arches, serve it strict (issue 48): the
# record holds each request once; warm compiles each for each arch, then finds them all; a
# strict compile of each arch hits.
REC="$WORK/requests.jsonl"
expect_rc 0 env KJIT_RECORD="$REC" "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<2>' --arch sm_90 --cache-dir "$WORK/staging" -- -DX=1
expect_rc 0 env KJIT_RECORD="$REC" "$KJIT" compile "$WORK/k.cu" "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$WORK/staging" -- -DX=1
expect_rc 0 env KJIT_RECORD="$REC" "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<2>' --arch sm_90 --cache-dir "$WORK/staging" -- -DX=1
[ "$(wc -l < "$REC")" = 2 ] || fail "the record holds $(wc -l < "$REC") lines, not 2: $(cat "$REC")"
expect_rc 0 "$KJIT" warm "$REC" --arch sm_90 --arch sm_80 --cache-dir "$WORK/served"
contains "warmed 2 request(s) x 2 arch(es): 4 items, 4 compiled, 0 found" "$WORK/out"
expect_rc 0 "$KJIT" warm "$REC" --arch sm_90 --arch sm_80 --cache-dir "$WORK/served" --json
json_check 'd["compiled"] == 0 and d["found"] == 4 and d["failed"] == 0'
for arch in sm_90 sm_80; do
    expect_rc 0 env KJIT_NO_COMPILE=1 "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<2>' --arch "$arch" --cache-dir "$WORK/served" -- -DX=1
done
# Base folders (issue 47, since 0.12): --base-dir (repeatable) on compile and warm, and
# $KJIT_BASE_DIRS, reach libkjit; folders that hold nothing the kernel reads change no entry; an
# empty one is refused naming --base-dir, not the C field.
mkdir -p "$WORK/base-a" "$WORK/base-b"
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --base-dir "$WORK/base-a" \
    --base-dir "$WORK/base-b" -- -DX=1
[ "$(sed -n 1p "$WORK/out")" = "$PLAIN" ] || fail "--base-dir gave another entry: $(cat "$WORK/out")"
expect_rc 0 env KJIT_BASE_DIRS="$WORK/base-a:$WORK/base-b" "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 \
    --cache-dir "$C" --base-dir none -- -DX=1
[ "$(sed -n 1p "$WORK/out")" = "$PLAIN" ] || fail "--base-dir none gave another entry: $(cat "$WORK/out")"
expect_rc 1 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --base-dir "$WORK/base-a" --base-dir "" -- -DX=1
contains "--base-dir has an empty folder name" "$WORK/err"
if grep -q "base_dirs" "$WORK/err"; then fail "a C field name in: $(cat "$WORK/err")"; fi
expect_rc 0 "$KJIT" warm "$REC" --arch sm_90 --cache-dir "$WORK/served" --base-dir "$WORK/base-a" --json
json_check 'd["compiled"] == 0 and d["found"] == 2 and d["failed"] == 0'
printf 'not a request\n{"kjit_request":1,"id":"00' > "$WORK/torn.jsonl"
expect_rc 64 "$KJIT" warm "$WORK/torn.jsonl" --cache-dir "$WORK/served"
contains "no request in 1 record(s) (2 line(s) that are none)" "$WORK/err"

# An NVRTC output file that cannot be written is an error naming it (exit 5, KJIT_ERROR_IO), never
# NVRTC 13's abort (issue 45): a trace folder that does not exist; "-" with a program name in a
# folder that does not exist under the working directory; in a batch on worker processes.
expect_rc 5 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -- -DX=7 "-fdevice-time-trace=$WORK/no/such/t"
contains "$WORK/no/such/t.json" "$WORK/err"
pushd "$WORK" >/dev/null
expect_rc 5 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --program-name gen/k.cu -- -DX=8 -fdevice-time-trace=-
contains "gen/k.cu.json" "$WORK/err"
popd >/dev/null
cp "$WORK/k.cu" "$WORK/k2.cu"
expect_rc 5 "$KJIT" compile "$WORK/k.cu" "$WORK/k2.cu" -k plain --arch sm_90 --cache-dir "$C" -j 2 --workers processes -- -DX=9 "-fdevice-time-trace=$WORK/no/such/t"
contains "$WORK/no/such/t.json" "$WORK/err"
expect_rc 1 env -u KJIT_ARCH KJIT_LIBCUDA=/nonexistent/libcuda.so.1 "$KJIT" compile "$WORK/k.cu" -k plain --cache-dir "$C" -- --gpu-architecture=sm_80
contains "NVRTC option '--gpu-architecture=sm_80' sets the target: pass the arch in --arch" "$WORK/err"
if grep -q "no target arch" "$WORK/err"; then fail "the missing GPU named: $(cat "$WORK/err")"; fi
expect_rc 5 "$KJIT" compile "$WORK/missing.cu" -k plain --arch sm_90 --cache-dir "$C"
contains "missing.cu" "$WORK/err"
# A default cache folder $HOME cannot hold is named, with why and what to set (it named the
# parent whose mkdir failed).
expect_rc 5 env -u KJIT_CACHE_DIR -u XDG_CACHE_HOME HOME=/proc "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 -- -DX=1
contains "cannot create the cache folder '/proc/.cache/kjit': cannot create '/proc/.cache': " "$WORK/err"
contains "from \$HOME: set \$KJIT_CACHE_DIR to a folder you can write, or pass one in --cache-dir" "$WORK/err"
expect_rc 64 "$KJIT" compile "$WORK/k.cu" --arch sm_90
# A password on the command line is in /proc/PID/cmdline for every user to read: refused, naming
# the environment variable and password-file=, never echoing it (nor a piece cut at a blank).
for spec in 'redis://:Hunter2@127.0.0.1:1' 'redis://:Hunter2 X9@127.0.0.1:1' 'redis://127.0.0.1:1|read-only=true redis://u:Hunter2@h'; do
    expect_rc 1 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --remote-storage "$spec" -- -DX=1
    contains "KJIT_REMOTE_STORAGE" "$WORK/err"
    contains "password-file=" "$WORK/err"
    if grep -q "Hunter2\|X9" "$WORK/err" "$WORK/out"; then fail "the password shown: $(cat "$WORK/err")"; fi
done
expect_rc 1 "$KJIT" cache stats --remote-storage 'redis://:Hunter2@127.0.0.1:1' --cache-dir "$C"
contains "/proc/PID/cmdline" "$WORK/err"
# A malformed setting is said by libkjit (kjit_remote_check) before anything is compiled.
expect_rc 1 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" --remote-storage 'redis://127.0.0.1:1 lease=forever' -- -DX=1
contains "--remote-storage: " "$WORK/err"
contains "option lease='forever': 'forever' is not a duration" "$WORK/err"
# The same setting from the environment is taken (here: nothing listens, so it compiles locally).
KJIT_REMOTE_STORAGE='redis://:Hunter2@127.0.0.1:1 connect-timeout=50ms' expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$C" -- -DX=1
# Several files: one batch into a cache of its own, two lines per file in order (k.cu's entry
# has the single compile's key); a failing file is reported on stderr, the others still compile, and the exit
# status is the first failure's.
cat >"$WORK/k2.cu" <<'CU'
extern "C" __global__ void plain(float *x) { x[1] = X; }
CU
echo 'extern "C" __global__ void plain(float *x) { x[0] = undefined_in_cli_batch; }' >"$WORK/bad.cu"
BC="$WORK/batch-cache"
expect_rc 0 "$KJIT" compile "$WORK/k.cu" "$WORK/k2.cu" "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$BC" -j 2 -- -DX=1
[ "$(sed -n 1p "$WORK/out")" = "$BC${PLAIN#"$C"}" ] && [ "$(sed -n 5p "$WORK/out")" = "$BC${PLAIN#"$C"}" ] &&
    [ "$(sed -n 2p "$WORK/out")" = plain ] && [ "$(wc -l <"$WORK/out")" = 6 ] || fail "batch compile printed $(cat "$WORK/out")"
[ -f "$(sed -n 3p "$WORK/out")" ] && [ "$(sed -n 3p "$WORK/out")" != "$(sed -n 1p "$WORK/out")" ] ||
    fail "k2.cu's cubin: $(cat "$WORK/out")"
expect_rc 6 "$KJIT" compile "$WORK/k2.cu" "$WORK/bad.cu" "$WORK/missing.cu" -k plain --arch sm_90 --cache-dir "$BC" --json --no-pch -- -DX=1
json_check 'len(d) == 3 and d[0]["name"] == "plain" and d[1]["code"] == 6 and "undefined_in_cli_batch" in d[1]["error"] and d[2]["code"] == 5'
contains "bad.cu: compile error" "$WORK/err"
contains "missing.cu: I/O error" "$WORK/err"
# Several files stream: a file's two lines are printed once it and the files before it are done,
# not at the end. Ctrl-C stops the batch once the compiles under way finish: what finished is
# printed, then a summary, exit 130 (nothing was printed, on a Ctrl-C nothing at all). No timing
# in it: k.cu is a hit, reported before any compile starts; the misses compile on one worker
# process whose start waits for a gate the test opens only after the hit's lines have arrived
# and the interrupt was sent. (Python starts kjit with SIGINT at its default: a background job
# of a script ignores it, and kjit leaves an ignored SIGINT ignored.)
SC="$WORK/stream-cache"
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$SC" -- -DX=1
HIT=$(sed -n 1p "$WORK/out")
printf '#!/bin/sh\nwhile [ ! -e "%s" ]; do sleep 0.05; done\nexec "%s" "$@"\n' "$WORK/gate" "$WORKER" >"$WORK/gated-worker"
chmod +x "$WORK/gated-worker"
echo 'extern "C" __global__ void plain(float *x) { x[3] = X; }' >"$WORK/k3.cu"
KJIT_WORKER="$WORK/gated-worker" python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$KJIT" compile "$WORK/k.cu" "$WORK/k2.cu" "$WORK/k3.cu" -k plain --arch sm_90 \
    --cache-dir "$SC" -j 1 --workers processes -- -DX=1 >"$WORK/stream-out" 2>"$WORK/stream-err" &
KPID=$!
for _ in $(seq 1200); do [ "$(wc -l <"$WORK/stream-out")" -ge 2 ] && break; sleep 0.05; done
[ "$(sed -n 1p "$WORK/stream-out")" = "$HIT" ] && [ "$(sed -n 2p "$WORK/stream-out")" = plain ] ||
    fail "the hit's lines were not printed while the batch ran: $(cat "$WORK/stream-out" "$WORK/stream-err")"
kill -INT "$KPID"
touch "$WORK/gate"
rc=0
wait "$KPID" || rc=$?
[ "$rc" = 130 ] || fail "interrupted batch exited $rc, expected 130: $(cat "$WORK/stream-err")"
# k2.cu was compiling when interrupted: it finishes and is printed; k3.cu is cancelled, unless
# the worker took it up before the cancel (NVRTC cannot be stopped).
[ "$(sed -n 4p "$WORK/stream-out")" = plain ] && [ -f "$(sed -n 3p "$WORK/stream-out")" ] ||
    fail "k2.cu's lines after the interrupt: $(cat "$WORK/stream-out")"
contains "kjit: interrupted: stopping once the compiles under way finish" "$WORK/stream-err"
if grep -q "k3.cu" "$WORK/stream-err"; then
    contains "kjit: interrupted: 2 of 3 files finished (2 compiled or found, 0 failed); not compiled: $WORK/k3.cu" "$WORK/stream-err"
else
    contains "kjit: interrupted: 3 of 3 files finished (3 compiled or found, 0 failed)" "$WORK/stream-err"
fi
# Sources with #include compile with NVRTC's PCH, kept under $TMPDIR while the process runs and
# removed when it exits.
mkdir -p "$WORK/inc" "$WORK/tmp"
echo '#define SCALE 3' >"$WORK/inc/scale.h"
for i in 1 2; do
    printf '#include "scale.h"\nextern "C" __global__ void plain(float *x) { x[%d] = SCALE; }\n' "$i" >"$WORK/inc$i.cu"
done
expect_rc 0 env TMPDIR="$WORK/tmp" "$KJIT" compile "$WORK/inc1.cu" "$WORK/inc2.cu" -k plain --arch sm_90 --cache-dir "$BC" -I "$WORK/inc"
[ "$(wc -l <"$WORK/out")" = 4 ] || fail "compile with includes printed $(cat "$WORK/out")"
[ -z "$(ls -A "$WORK/tmp")" ] || fail "left in TMPDIR: $(ls -A "$WORK/tmp")"
# The source's folder is searched for its includes from any working directory, as nvcc does,
# and an edit of a header there is seen (own cache: the stats below count $C's entries).
HC="$WORK/header-cache"
mkdir -p "$WORK/proj/sub" "$WORK/proj/other"
for d in sub other; do
    printf '#include "cfg.h"\ntemplate <int V> __global__ void gemm(float *p) { p[0] = V; }\ntemplate __global__ void gemm<CFG>(float *);\n' \
        >"$WORK/proj/$d/gemm.cu"
done
echo '#define CFG 3' >"$WORK/proj/sub/cfg.h"
echo '#define CFG 4' >"$WORK/proj/other/cfg.h"
expect_name() { [ "$(sed -n 2p "$WORK/out")" = "$1" ] || fail "expected $1 after $2, got: $(cat "$WORK/out") $(head -c 400 "$WORK/err")"; }
expect_rc 0 env -C "$WORK/proj" "$KJIT" compile sub/gemm.cu -k gemm --arch sm_90 --cache-dir "$HC"
expect_name _Z4gemmILi3EEvPf "compile sub/gemm.cu"
echo '#define CFG 33' >"$WORK/proj/sub/cfg.h"
expect_rc 0 env -C "$WORK/proj" "$KJIT" compile sub/gemm.cu -k gemm --arch sm_90 --cache-dir "$HC"
expect_name _Z4gemmILi33EEvPf "an edit of sub/cfg.h"
expect_rc 0 env -C "$WORK/proj/sub" "$KJIT" compile gemm.cu -k gemm --arch sm_90 --cache-dir "$HC"
expect_name _Z4gemmILi33EEvPf "compile gemm.cu in sub/"
echo '#define CFG 333' >"$WORK/proj/sub/cfg.h"
expect_rc 0 env -C "$WORK/proj/sub" "$KJIT" compile gemm.cu -k gemm --arch sm_90 --cache-dir "$HC"
expect_name _Z4gemmILi333EEvPf "an edit of cfg.h, compiled in its folder"
# The NVRTC program is named after the file as given: NVRTC's log names it; --program-name names
# it otherwise, and is another entry.
printf '__global__ void gemm(float *p) { undeclared(); }\n' >"$WORK/proj/sub/broken.cu"
expect_rc 6 env -C "$WORK/proj" "$KJIT" compile sub/broken.cu -k gemm --arch sm_90 --cache-dir "$HC"
contains "sub/broken.cu(1): error" "$WORK/err"
expect_rc 0 env -C "$WORK/proj" "$KJIT" compile sub/gemm.cu -k gemm --arch sm_90 --cache-dir "$HC"
default_cubin=$(sed -n 1p "$WORK/out")
expect_rc 0 env -C "$WORK/proj" "$KJIT" compile sub/gemm.cu -k gemm --arch sm_90 --cache-dir "$HC" --program-name sub/gemm_module.cu
[ "$(sed -n 1p "$WORK/out")" != "$default_cubin" ] || fail "--program-name gave the entry of the default name"
expect_name _Z4gemmILi333EEvPf "--program-name sub/gemm_module.cu (its folder's cfg.h)"
# Two files of one batch, each with its own folder's cfg.h.
expect_rc 0 env -C "$WORK/proj" "$KJIT" compile sub/gemm.cu other/gemm.cu -k gemm --arch sm_90 --cache-dir "$HC" --json
json_check 'd[0]["name"] == "_Z4gemmILi333EEvPf" and d[1]["name"] == "_Z4gemmILi4EEvPf"'
# An unknown command is named, with the commands there are (it said "A subcommand is required").
expect_rc 64 "$KJIT" nosuch
contains "unknown command 'nosuch'; the commands are: resolve, compile, warm, cache" "$WORK/err"
expect_rc 64 "$KJIT" cache nosuch --cache-dir "$C"
contains "unknown command 'cache nosuch'; the cache commands are: stats, verify, prune, clear" "$WORK/err"
expect_rc 64 "$KJIT" --json nosuch
contains "unknown command 'nosuch'" "$WORK/err"
expect_rc 64 "$KJIT" cache
contains "kjit cache needs a command: stats, verify, prune, clear" "$WORK/err"
expect_rc 64 "$KJIT" cache prune --cache-dir "$C"
expect_rc 64 "$KJIT" cache prune --max-size lots --cache-dir "$C"
expect_rc 0 "$KJIT" --version
contains "kjit " "$WORK/out"
# The help stands alone: it names no documentation file, which an installed kjit (or the one in
# the Python wheel) may not have beside it, and says what the docs would: exit statuses, the
# environment, the remote setting's syntax.
for cmd in "" resolve compile cache "cache stats" "cache verify" "cache prune" "cache clear" "cache export" "cache import"; do
    # shellcheck disable=SC2086
    expect_rc 0 "$KJIT" $cmd --help
    if grep -qE 'docs/|\.md\b' "$WORK/out"; then fail "kjit $cmd --help points at a file: $(grep -E 'docs/|\.md' "$WORK/out")"; fi
done
expect_rc 0 "$KJIT" --help
for what in "Exit status" "usage error: unknown command" "interrupted (Ctrl-C)" KJIT_CACHE_DIR KJIT_ARCH KJIT_CACHE_MAX_SIZE KJIT_REMOTE_STORAGE KJIT_CACHE_SEED KJIT_BASE_DIRS KJIT_LOG_LEVEL; do
    contains "$what" "$WORK/out"
done
expect_rc 0 "$KJIT" compile --help
contains "redis+unix:PATH" "$WORK/out"
contains "password-file=PATH" "$WORK/out"

# resolve
expect_rc 0 "$KJIT" resolve "$PLAIN" plain
[ "$(cat "$WORK/out")" = plain ] || fail "resolve printed $(cat "$WORK/out")"
expect_rc 0 "$KJIT" resolve "$SCALE" scale --json
json_check 'd["name"] == "_Z5scaleILi3EEvPf"'
expect_rc 2 "$KJIT" resolve "$PLAIN" nosuch
expect_rc 1 "$KJIT" resolve "$PLAIN" 'bad keyword'
expect_rc 5 "$KJIT" resolve "$WORK/none.cubin" plain --json
json_check 'd["code"] == 5 and "none.cubin" in d["error"]'
echo "not an ELF" >"$WORK/bad.cubin"
expect_rc 4 "$KJIT" resolve "$WORK/bad.cubin" plain

# cache stats
expect_rc 0 "$KJIT" cache stats --cache-dir "$C" --json
json_check 'd["entries"] == 2 and d["bytes"] > 0 and d["by_arch"]["sm_90"]["entries"] == 2 and d["max_size"] is None'
# Sizes are disk space, as du counts it (not the files' sizes).
DU=$(du -sB1 --total "$C"/??/*/ | tail -n 1 | cut -f1)
json_check "d['bytes'] == $DU and d['by_arch']['sm_90']['bytes'] == $DU"
KJIT_CACHE_MAX_SIZE=2G expect_rc 0 "$KJIT" cache stats --cache-dir "$C" --json
json_check 'd["max_size"] == 2 * 1024**3'
KJIT_CACHE_DIR="$C" expect_rc 0 "$KJIT" cache stats
contains "entries        2" "$WORK/out"
contains "sm_90" "$WORK/out"

# cache stats --remote: a server that cannot be reached, or refuses us, is an I/O error (exit 5)
# naming it, the password never shown (it exited 0, the failure only in the text).
expect_rc 5 "$KJIT" cache stats --remote-storage 'redis://127.0.0.1:1 connect-timeout=200ms' --cache-dir "$C"
contains "server redis://127.0.0.1:1/0" "$WORK/out"
contains "kjit: I/O error: remote cache redis://127.0.0.1:1/0: cannot connect" "$WORK/err"
expect_rc 5 "$KJIT" cache stats --remote-storage 'redis://127.0.0.1:1 connect-timeout=200ms' --cache-dir "$C" --json
json_check '"redis://127.0.0.1:1/0" in d["remote"] and d["entries"] == 2'
if command -v redis-server >/dev/null; then
    # A server that wants a password: none given (its INFO answers NOAUTH), a wrong one (AUTH
    # refused), the right one. A Unix socket: no port to find.
    SOCK="$WORK/redis.sock"
    redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --requirepass Right5ecret --save '' \
        --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 600); do [ -S "$SOCK" ] && break; sleep 0.05; done
    [ -S "$SOCK" ] || fail "redis-server did not start: $(cat "$WORK/redis.log")"
    install -m 600 /dev/null "$WORK/wrong-pw" && echo 'Wr0ngGuess' >"$WORK/wrong-pw"
    install -m 600 /dev/null "$WORK/right-pw" && echo 'Right5ecret' >"$WORK/right-pw"
    KJIT_REMOTE_STORAGE="redis+unix:$SOCK" expect_rc 5 "$KJIT" cache stats --remote --cache-dir "$C"
    contains "kjit: I/O error: remote cache redis+unix:$SOCK?db=0: " "$WORK/err"
    contains "NOAUTH" "$WORK/err"
    KJIT_REMOTE_STORAGE="redis+unix:$SOCK password-file=$WORK/wrong-pw" expect_rc 5 "$KJIT" cache stats --remote --cache-dir "$C"
    contains "AUTH refused" "$WORK/err"
    if grep -q "Wr0ngGuess\|Right5ecret" "$WORK/err" "$WORK/out"; then fail "a password shown: $(cat "$WORK/err")"; fi
    KJIT_REMOTE_STORAGE="redis+unix:$SOCK password-file=$WORK/right-pw" expect_rc 0 "$KJIT" cache stats --remote --cache-dir "$C"
    contains "redis_version" "$WORK/out"
    # Three warming nodes (processes with caches of their own) sharing the cluster tier warm the
    # record at once: each of its 2 requests is compiled once among them (issue 48).
    warm_pids=()
    for n in 1 2 3; do
        KJIT_REMOTE_STORAGE="redis+unix:$SOCK password-file=$WORK/right-pw" "$KJIT" warm "$REC" --arch sm_75 \
            --cache-dir "$WORK/node$n" --json >"$WORK/warm$n.json" 2>"$WORK/warm$n.err" &
        warm_pids+=($!)
    done
    for pid in "${warm_pids[@]}"; do wait "$pid" || fail "a warming node failed: $(cat "$WORK"/warm*.err)"; done
    python3 - "$WORK"/warm1.json "$WORK"/warm2.json "$WORK"/warm3.json <<'PY' || fail "three warming nodes: $(cat "$WORK"/warm*.json)"
import json, sys
d = [json.load(open(f)) for f in sys.argv[1:]]
sys.exit(0 if sum(x["compiled"] for x in d) == 2 and sum(x["found"] for x in d) == 4 and
         not any(x["failed"] for x in d) else 1)
PY
    # Two nodes with different install prefixes share the tier: the second runs no NVRTC.
    mkdir -p "$WORK/redis-a/inc" "$WORK/redis-b/inc"
    printf '#include "tile.h"\ntemplate <int V> __global__ void gemm(float *p) { p[0] = V; }\ntemplate __global__ void gemm<CFG>(float *);\n' >"$WORK/tile.cu"
    echo '#define CFG 128' >"$WORK/redis-a/inc/tile.h"
    cp "$WORK/redis-a/inc/tile.h" "$WORK/redis-b/inc/tile.h"
    for node in a b; do
        KJIT_LOG_LEVEL=debug KJIT_REMOTE_STORAGE="redis+unix:$SOCK password-file=$WORK/right-pw" expect_rc 0 \
            "$KJIT" compile "$WORK/tile.cu" -k gemm --arch sm_90 --cache-dir "$WORK/redis-node-$node" \
            -- -I "$WORK/redis-$node/inc"
    done
    contains "remote hit" "$WORK/err"
    if grep -q "compiled " "$WORK/err"; then fail "NVRTC ran on the node under another prefix: $(cat "$WORK/err")"; fi
    kill "$REDIS_PID" && wait "$REDIS_PID" || true
    REDIS_PID=""
    # A managed server's user (docs/remote.md's writer ACL: no INFO, SCAN or DBSIZE), on TCP
    # (a user is named in a redis:// URL): the stats say what they cannot show, as warnings, and
    # are not a failure.
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --dir "$WORK" >"$WORK/redis-tcp.log" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 600); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.05; done
    redis-cli -p "$PORT" ACL SETUSER app on '>App5ecret' '~kjit:*' -@all +get +set +exists +pttl +pexpire +del +eval \
        >"$WORK/acl.out" 2>&1 && grep -q OK "$WORK/acl.out" || fail "redis-server on $PORT: $(cat "$WORK/acl.out" "$WORK/redis-tcp.log")"
    KJIT_REMOTE_STORAGE="redis://app:App5ecret@127.0.0.1:$PORT" expect_rc 0 "$KJIT" cache stats --remote --cache-dir "$C"
    contains "kjit: warning: remote cache redis://app:***@127.0.0.1:$PORT/0: INFO refused: NOPERM" "$WORK/err"
    contains "SCAN refused: NOPERM" "$WORK/err"
    contains "server redis://app:***@127.0.0.1:$PORT/0" "$WORK/out"
    if grep -q "App5ecret" "$WORK/err" "$WORK/out"; then fail "a password shown: $(cat "$WORK/err")"; fi
    kill "$REDIS_PID" && wait "$REDIS_PID" || true
    REDIS_PID=""
else
    echo "cli_test: no redis-server: the password cases of cache stats --remote are not checked"
fi

# cache verify: clean, then damaged (exit 20), then --fix, then clean again.
expect_rc 0 "$KJIT" cache verify --cache-dir "$C"
contains "2 entries checked, 2 ok" "$WORK/out"
: >"$PLAIN.name"
truncate -s 100 "$SCALE"
expect_rc 20 "$KJIT" cache verify --cache-dir "$C" --json
json_check 'sorted(f["damage"] for f in d["findings"]) == ["sidecar_damaged", "truncated_cubin"] and not d["clean"]'
expect_rc 0 "$KJIT" cache verify --cache-dir "$C" --fix
contains "2 fixed" "$WORK/out"
expect_rc 0 "$KJIT" cache verify --cache-dir "$C" --json
json_check 'd["clean"] and d["entries_ok"] == 1 and d["findings"] == []'
expect_rc 0 "$KJIT" resolve "$PLAIN" plain

# cache prune and clear. The entry is fresh (in use): prune spares it; once idle it goes.
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<2>' --arch sm_90 --cache-dir "$C" -- -DX=1
expect_rc 0 "$KJIT" cache prune --max-size 0 --cache-dir "$C" --json
json_check 'd["removed_entries"] == 0 and d["spared_in_use"] == 2'
touch -d '3 hours ago' "$(dirname "$PLAIN")"
# An age or a size that does not fit, or is not decimal, is a usage error that removes nothing
# (20000w wrapped around to a negative age and removed every entry).
expect_rc 64 "$KJIT" cache prune --older-than 20000w --cache-dir "$C"
contains "too large" "$WORK/err"
expect_rc 64 "$KJIT" cache prune --max-size 0x10 --cache-dir "$C"
contains "hexadecimal" "$WORK/err"
# A size with an unknown unit is not called hexadecimal (5X was).
expect_rc 64 "$KJIT" cache prune --max-size 5X --cache-dir "$C"
contains "--max-size: 5X: expected a size such as 500M or 5G (K, M, G, T)" "$WORK/err"
if grep -q hexadecimal "$WORK/err"; then fail "5X called hexadecimal: $(cat "$WORK/err")"; fi
expect_rc 0 "$KJIT" cache stats --cache-dir "$C" --json
json_check 'd["entries"] == 2'
# KJIT_CACHE_MAX_SIZE=0 means no limit, as in ccache.
KJIT_CACHE_MAX_SIZE=0 expect_rc 0 "$KJIT" cache stats --cache-dir "$C" --json
json_check 'd["max_size"] is None'
KJIT_CACHE_MAX_SIZE=0x10 expect_rc 1 "$KJIT" cache stats --cache-dir "$C"
contains "hexadecimal" "$WORK/err"
expect_rc 0 "$KJIT" cache prune --older-than 2h --cache-dir "$C" --json
json_check 'd["removed_entries"] == 1 and d["kept_entries"] == 1'
[ ! -e "$PLAIN" ] || fail "prune --older-than kept $PLAIN"
# A recency record in the future (a clock that was ahead) counts as now, and prune sets it to
# now so that it ages from there (it was never removed).
KEPT=$(ls -d "$C"/??/*/ | head -n 1)
touch -d 'next year' "$KEPT"
expect_rc 0 "$KJIT" cache prune --older-than 1s --cache-dir "$C" --json
json_check 'd["removed_entries"] == 0 and d["kept_entries"] == 1'
[ "$(stat -c %Y "$KEPT")" -le "$(date +%s)" ] || fail "prune left the recency record of $KEPT in the future"
expect_rc 0 "$KJIT" cache clear --cache-dir "$C"
contains "removed 1 entries" "$WORK/out"
expect_rc 0 "$KJIT" cache stats --cache-dir "$C" --json
json_check 'd["entries"] == 0'
# A cache folder that does not exist is an empty cache; one that cannot be read is an I/O error.
expect_rc 0 "$KJIT" cache stats --cache-dir "$WORK/nothing-here" --json
json_check 'd["entries"] == 0'
echo file >"$WORK/a-file"
expect_rc 5 "$KJIT" cache verify --cache-dir "$WORK/a-file"

# The folder is reported absolute, as kjit_cache_dir resolves it for the library: a relative
# --cache-dir against the working directory, and the default from $KJIT_CACHE_DIR.
expect_rc 0 env -C "$WORK" "$KJIT" cache stats --cache-dir ./cache/ --json
json_check "d['cache_dir'] == '$(cd "$WORK" && pwd -P)/cache'"
KJIT_CACHE_DIR="$C" expect_rc 0 "$KJIT" cache verify --json
json_check "d['cache_dir'] == '$C' and d['clean']"

# Seed caches: export writes whole entries only; a fresh cache compiles from a seed with no NVRTC
# run, through --seed or $KJIT_CACHE_SEED, and never writes it; import refuses damage, naming it.
# (Root ignores file modes, so the seed's checksum, not chmod, shows it was not written.)
S="$WORK/seed" W="$WORK/warm"
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 --cache-dir "$W" -- -DX=1
expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<3>' --arch sm_90 --cache-dir "$W" -- -DX=1
expect_rc 0 "$KJIT" cache export "$S" --cache-dir "$W" --json
json_check 'd["copied_entries"] == 2 and d["refused_entries"] == 0 and d["export_dir"].endswith("/seed")'
EXPORTED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["copied_entries"])' "$WORK/out")
extra=$(find "$S" -mindepth 1 \( -name '.*' -o -type f ! -name kernel.cubin ! -name kernel.cubin.name ! -name manifest.txt \
    ! -name source.cu ! -name deps.txt ! -name '*.variants' \) -print)
[ -z "$extra" ] || fail "export wrote more than entries: $extra"
expect_rc 0 "$KJIT" cache export "$S" --cache-dir "$W"
contains "exported 0 entries (0 B) to $S; $EXPORTED there already" "$WORK/out"
expect_rc 0 "$KJIT" cache export "$WORK/seed-sm80" --arch sm_80 --cache-dir "$W" --json
json_check "d['copied_entries'] == 0 and d['skipped_entries'] == $EXPORTED"
chmod -R a-w "$S"
seed_sum() { (cd "$S" && find . -printf '%p %m %s %T@\n' | sort && find . -type f -exec md5sum {} + | sort); }
before=$(seed_sum)
KJIT_LOG_LEVEL=debug expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k scale --name-expr 'scale<3>' --arch sm_90 \
    --cache-dir "$WORK/fresh" --seed "$WORK/no-such-seed" --seed "$S" -- -DX=1
[ "$(sed -n 2p "$WORK/out")" = _Z5scaleILi3EEvPf ] || fail "compile from a seed printed $(cat "$WORK/out")"
contains "seed hit" "$WORK/err"
contains "no-such-seed' is not there" "$WORK/err"
if grep -q "compiled " "$WORK/err"; then fail "NVRTC ran with the entry in the seed: $(grep "compiled " "$WORK/err")"; fi
KJIT_LOG_LEVEL=debug KJIT_CACHE_SEED="$S" expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 \
    --cache-dir "$WORK/fresh2" -- -DX=1
contains "seed hit" "$WORK/err"
if grep -q "compiled " "$WORK/err"; then fail "NVRTC ran with \$KJIT_CACHE_SEED's entry: $(grep "compiled " "$WORK/err")"; fi
KJIT_LOG_LEVEL=debug KJIT_CACHE_SEED="$S" expect_rc 0 "$KJIT" compile "$WORK/k.cu" -k plain --arch sm_90 \
    --cache-dir "$WORK/fresh3" --seed none -- -DX=1
contains "compiled " "$WORK/err"
[ "$(seed_sum)" = "$before" ] || fail "the seed was written"

# Caches that move with the install (issue 47): tile.h under A/inc compiled and exported; the same
# tile.h under B/inc, an empty cache and the seed: no NVRTC run. Another tile.h there compiles.
mkdir -p "$WORK/A/inc" "$WORK/B/inc"
echo '#define CFG 126' >"$WORK/A/inc/tile.h"
cp "$WORK/A/inc/tile.h" "$WORK/B/inc/tile.h"
printf '#include "tile.h"\ntemplate <int V> __global__ void gemm(float *p) { p[0] = V; }\ntemplate __global__ void gemm<CFG>(float *);\n' >"$WORK/tile.cu"
expect_rc 0 "$KJIT" compile "$WORK/tile.cu" -k gemm --arch sm_90 --cache-dir "$WORK/moved-a" -- -I "$WORK/A/inc"
expect_rc 0 "$KJIT" cache export "$WORK/moved-seed" --cache-dir "$WORK/moved-a"
KJIT_LOG_LEVEL=debug expect_rc 0 "$KJIT" compile "$WORK/tile.cu" -k gemm --arch sm_90 --cache-dir "$WORK/moved-b" \
    --seed "$WORK/moved-seed" -- -I "$WORK/B/inc"
contains "seed hit" "$WORK/err"
if grep -q "compiled " "$WORK/err"; then fail "NVRTC ran under another prefix with the seed: $(cat "$WORK/err")"; fi
[ "$(sed -n 2p "$WORK/out")" = _Z4gemmILi126EEvPf ] || fail "relocated compile printed $(cat "$WORK/out")"
echo '#define CFG 127' >"$WORK/B/inc/tile.h"
KJIT_LOG_LEVEL=debug expect_rc 0 "$KJIT" compile "$WORK/tile.cu" -k gemm --arch sm_90 --cache-dir "$WORK/moved-b" \
    --seed "$WORK/moved-seed" -- -I "$WORK/B/inc"
contains "compiled " "$WORK/err"
[ "$(sed -n 2p "$WORK/out")" = _Z4gemmILi127EEvPf ] || fail "an edited header under B printed $(cat "$WORK/out")"
# A record made under A with base folder A names "{base 0}/inc"; kjit warm under B with --base-dir B
# warms a cache that a strict run under B hits (with none given, warm says how many it needs).
echo '#define CFG 126' >"$WORK/B/inc/tile.h"
KJIT_RECORD="$WORK/moved.jsonl" expect_rc 0 "$KJIT" compile "$WORK/tile.cu" -k gemm --arch sm_90 \
    --cache-dir "$WORK/moved-stage" --base-dir "$WORK/A" -- -I "$WORK/A/inc" -lineinfo
contains '"{base 0}/inc"' "$WORK/moved.jsonl"
KJIT_BASE_DIRS= expect_rc 64 "$KJIT" warm "$WORK/moved.jsonl" --cache-dir "$WORK/moved-served"
contains "under 1 base folder(s)" "$WORK/err"
expect_rc 0 "$KJIT" warm "$WORK/moved.jsonl" --cache-dir "$WORK/moved-served" --base-dir "$WORK/B"
expect_rc 0 "$KJIT" compile "$WORK/tile.cu" -k gemm --arch sm_90 --cache-dir "$WORK/moved-served" \
    --compile-mode never --base-dir "$WORK/B" -- -I "$WORK/B/inc" -lineinfo
chmod -R u+w "$S"
# A damaged entry in the folder imported: the others are copied, it is refused and named (exit 20).
victim=$(find "$S" -name manifest.txt | head -n 1)
sed -i 's/^arch: sm_90$/arch: sm_80/' "$victim"
expect_rc 20 "$KJIT" cache import "$S" --cache-dir "$WORK/imported"
contains "bad_manifest" "$WORK/out"
contains "$(dirname "$victim")" "$WORK/out"
contains "imported $((EXPORTED - 1)) entries" "$WORK/out"
contains "1 refused (listed above)" "$WORK/out"
expect_rc 0 "$KJIT" cache verify --cache-dir "$WORK/imported"
expect_rc 5 "$KJIT" cache import "$WORK/no-such-seed" --cache-dir "$WORK/imported"
contains "no-such-seed' does not exist" "$WORK/err"

# Link-time kernels: --link FILE links the kernel with a device-function library through
# nvJitLink (here LTO-IR that NVRTC itself made, through python/tests/nvrtc_ltoir.py); the
# library's content is in the key (an edit is a miss, putting it back hits); a missing --link
# file is an I/O error naming it, a function no input defines nvJitLink's refusal (14) with its log.
LTOIR="$(dirname "$0")/../python/tests/nvrtc_ltoir.py"
L="$WORK/link-cache"
printf 'extern "C" __device__ int lib_value() { return 0x5EED1234; }\n' >"$WORK/lib.cu"
printf 'extern "C" __device__ int lib_value() { return 0x0BADF00D; }\n' >"$WORK/lib2.cu"
cat >"$WORK/use.cu" <<'CU'
extern "C" __device__ int lib_value();
extern "C" __global__ void use_lib(int *out) { *out = lib_value(); }
CU
python3 "$LTOIR" "$WORK/lib.ltoir" "$WORK/lib.cu" sm_90 || fail "NVRTC did not make lib.ltoir"
expect_rc 0 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir"
[ "$(sed -n 2p "$WORK/out")" = use_lib ] || fail "compile --link printed $(cat "$WORK/out")"
LINKED=$(sed -n 1p "$WORK/out")
[ -f "$LINKED" ] || fail "compile --link's path $LINKED is no file"
KJIT_LOG_LEVEL=debug expect_rc 0 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" \
    --link "$WORK/lib.ltoir" --json
json_check "d['cubin'] == '$LINKED' and d['name'] == 'use_lib'"
if grep -q "compiled " "$WORK/err"; then fail "NVRTC ran for a linked kernel in the cache: $(grep "compiled " "$WORK/err")"; fi
python3 "$LTOIR" "$WORK/lib.ltoir" "$WORK/lib2.cu" sm_90 || fail "NVRTC did not make the edited lib.ltoir"
expect_rc 0 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir"
[ "$(sed -n 1p "$WORK/out")" != "$LINKED" ] || fail "an edited --link file hit the entry linked with the old one"
python3 "$LTOIR" "$WORK/lib.ltoir" "$WORK/lib.cu" sm_90 || fail "NVRTC did not make lib.ltoir again"
expect_rc 0 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir"
[ "$(sed -n 1p "$WORK/out")" = "$LINKED" ] || fail "the --link file put back did not hit its entry: $(cat "$WORK/out")"
expect_rc 0 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir" \
    --link-option=-O3 --link-option -maxrregcount=128
[ "$(sed -n 1p "$WORK/out")" != "$LINKED" ] || fail "--link-option did not reach the key"
expect_rc 14 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir" \
    --link-option=-no-such-option
contains "no-such-option" "$WORK/err"
expect_rc 5 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/no-such.ltoir"
contains "$WORK/no-such.ltoir" "$WORK/err"
expect_rc 1 "$KJIT" compile "$WORK/use.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.cu"
contains "$WORK/lib.cu" "$WORK/err"
sed 's/lib_value/lib_other/g' "$WORK/use.cu" >"$WORK/other.cu"
expect_rc 14 "$KJIT" compile "$WORK/other.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir"
contains "lib_other" "$WORK/err"
contains "kjit: link failed: " "$WORK/err"
expect_rc 14 "$KJIT" compile "$WORK/other.cu" -k use_lib --arch sm_90 --cache-dir "$L" --link "$WORK/lib.ltoir" --json
json_check 'd["code"] == 14 and d["status"] == "link failed" and "lib_other" in d["error"]'
if grep -q "options.link\|kjit_compile_options" "$WORK/err"; then fail "a C field name in: $(cat "$WORK/err")"; fi

# The command links only libkjit.so: of libkjit's internals it carries the size units and the
# remote settings' parser alone (leaves: it refuses a password in --remote-storage by libkjit's
# own reading), with the Error/Result types they return and errno_text (the types' header-only
# parts are emitted out of line in sanitizer builds). It
# used to link the internal static library too, a second copy of libkjit in the process. Matched
# on mangled names: functions of namespace kjit start _ZN4kjit (or _ZNK4kjit), while standard
# templates instantiated over kjit's types (std::forward<kjit::Error>) do not.
if command -v nm >/dev/null; then
    others=$(nm --defined-only "$KJIT" | grep -E ' [TtWw] _ZNK?4kjit' |
        grep -vE ' _ZNK?4kjit(10size_units|6remote|10errno_text|5Error|6ResultI)' | c++filt || true)
    [ -z "$others" ] || fail "kjit carries libkjit's internals: $(echo "$others" | head -n 3)"
    readelf -d "$KJIT" | grep -q 'NEEDED.*libkjit\.so' || fail "kjit does not link libkjit.so"
fi

if [ "$failures" -gt 0 ]; then
    echo "cli_test: $failures failures"
    exit 1
fi
echo "cli_test: all checks passed"
