#!/usr/bin/env bash
# Every C example in README.md and docs/*.md (each ```c block) compiles, warning-free, against
# this tree's header; one with a main() also links against this build's libkjit.so. Examples
# are for pasting: one that does not build is a bug.
#
# The programs of docs/*.md link nothing else (no -lcuda: the docs say no GPU is needed to try
# them, and a program linked with libcuda.so.1 exits before main where there is no driver), and
# each is run twice: with no driver (KJIT_LIBCUDA naming a file that does not exist), where it
# must still compile and resolve and exit 0, and with the driver test double
# (tests/fake_cuda, libcuda.so.1) standing in for every driver call it makes.
#
# README.md's programs are first examples that load what they compiled: each runs once, with
# the driver test double. Its Python blocks run too (against this build's libkjit.so, from this
# tree's python/, with the test double); those of docs/*.md are checked as Python syntax.
#
# The pages' links and `../` paths must be in the repository, and their example output must
# show no developer's machine.
# Usage: doc_examples_test.sh SOURCE_DIR LIBKJIT_DIR CUDA_INCLUDE RUN FAKE_LIBCUDA
# RUN: 1 to run the programs and README's Python, 0 to build only (a sanitizer build's libkjit
# cannot be loaded by a plain program; the plain build runs them).
set -euo pipefail
src=$1 libdir=$2 cuda_include=$3 run=$4 fake_libcuda=$5
work=$(mktemp -d "${TMPDIR:-/tmp}/kjit-doc-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 - "$src" "$work" <<'PY'
import pathlib, re, sys
src, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
count = 0
for md in [src / "README.md"] + sorted((src / "docs").glob("*.md")):
    text = md.read_text()
    blocks = re.findall(r"^```c\n(.*?)^```$", text, flags=re.S | re.M)
    for i, block in enumerate(blocks, 1):
        (work / f"{md.stem}-{i}.c").write_text(block)
        count += 1
    for i, block in enumerate(re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M), 1):
        (work / f"{md.stem}-{i}.py").write_text(block)
print(f"doc examples: {count} C blocks")
PY
# The pages point only at what the repository holds (a link, or a `../path` a reader would
# open). (That no page shows a developer's folder is tests/check_machine_paths.sh's, for every
# file of the tree.)
python3 - "$src" <<'PY' || exit 1
import pathlib, re, sys
src = pathlib.Path(sys.argv[1]).resolve()
problems = []
for md in [src / "README.md"] + sorted((src / "docs").glob("*.md")):
    text = md.read_text()
    targets = [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", text)]
    targets += [m.group(1) for m in re.finditer(r"`(\.\./[^`\s]+)`", text)]
    for target in targets:
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = (md.parent / target.split("#")[0]).resolve()
        if not path.exists() or src not in [path, *path.parents]:
            problems.append(f"{md.name}: '{target}' is not in the repository")
for p in problems:
    print(f"FAIL: {p}")
print(f"doc links: {len(problems)} problems")
sys.exit(1 if problems else 0)
PY
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run_example PROGRAM WHAT ENV...: runs it (a .py with python3) in a fresh cache with ENV,
# expecting exit 0.
run_example() {
    local program=$1 what=$2 rc=0 command=("$1")
    shift 2
    if [ "$run" != 1 ]; then
        echo "doc examples: ${program##*/} not run $what (a sanitizer build; the plain build runs it)"
        : >"$work/run.out"
        return
    fi
    [[ $program == *.py ]] && command=(python3 "$program")
    env KJIT_CACHE_DIR="$work/cache" KJIT_ARCH=sm_90 "$@" "${command[@]}" >"$work/run.out" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        fail "${program##*/} $what exited $rc: $(head -c 1500 "$work/run.out")"
    else
        echo "doc examples: ${program##*/} ran $what"
    fi
}

for example in "$work"/*.c; do
    name=${example##*/}
    if grep -q '^int main' "$example"; then
        libs=(-L"$libdir" -lkjit -Wl,-rpath,"$libdir")
        what="compiled and linked"
        out=(-o "$work/${name%.c}")
    else
        libs=()
        what="compiled"
        out=(-c -o "$work/${name%.c}.o")
    fi
    if cc -std=c11 -Wall -Wextra -Werror -I"$src/include" -I"$cuda_include" "$example" "${out[@]}" "${libs[@]}" \
        2>"$work/errors"; then
        echo "doc examples: $name $what"
    else
        fail "$name (from ${name%-*}.md): $(cat "$work/errors")"
        continue
    fi
    [ "$what" = "compiled and linked" ] || continue
    rm -rf "$work/cache"
    if [[ $name == README-* ]]; then
        run_example "$work/${name%.c}" "with the driver test double" KJIT_LIBCUDA="$fake_libcuda"
        [ "$run" != 1 ] || grep -q "^loaded " "$work/run.out" || fail "$name did not load: $(cat "$work/run.out")"
        # The README's no-GPU path: compiles and names, says loading needs a driver, exit 0.
        rm -rf "$work/cache"
        run_example "$work/${name%.c}" "without a driver" KJIT_LIBCUDA="$work/no-driver/libcuda.so.1"
        [ "$run" != 1 ] || grep -q "^not loaded: " "$work/run.out" || fail "$name without a driver: $(cat "$work/run.out")"
        continue
    fi
    run_example "$work/${name%.c}" "without a driver" KJIT_LIBCUDA="$work/no-driver/libcuda.so.1"
    if grep -q '#include <cuda.h>' "$example"; then
        run_example "$work/${name%.c}" "with the driver test double" KJIT_LIBCUDA="$fake_libcuda"
        [ "$run" != 1 ] || grep -q "launched" "$work/run.out" || fail "$name did not launch with the driver test double: $(cat "$work/run.out")"
    fi
done

# The Python blocks: README's run as they are; the others must be Python.
for example in "$work"/*.py; do
    [ -e "$example" ] || continue
    name=${example##*/}
    if [[ $name == README-* ]]; then
        rm -rf "$work/cache"
        run_example "$example" "with the driver test double" KJIT_LIBCUDA="$fake_libcuda" \
            KJIT_LIBRARY="$libdir/libkjit.so" PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1
        rm -rf "$work/cache"
        run_example "$example" "without a driver" KJIT_LIBCUDA="$work/no-driver/libcuda.so.1" \
            KJIT_LIBRARY="$libdir/libkjit.so" PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1
        [ "$run" != 1 ] || grep -q "^not loaded: " "$work/run.out" || fail "$name without a driver: $(cat "$work/run.out")"
    elif python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$example" 2>"$work/errors"; then
        echo "doc examples: $name is Python"
    else
        fail "$name (from ${name%-*}.md) is not Python: $(cat "$work/errors")"
    fi
done
[ "$failures" -eq 0 ]
