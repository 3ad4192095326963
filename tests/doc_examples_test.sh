#!/usr/bin/env bash
# Every C example in README.md and docs/*.md (each ```c block) compiles, warning-free, against
# this tree's header; one with a main() also links against this build's libkjit.so (and the
# toolkit's libcuda stub when it includes cuda.h). Examples are for pasting: one that does not
# build is a bug. Nothing is run (launching needs a GPU).
# Usage: doc_examples_test.sh SOURCE_DIR LIBKJIT_DIR CUDA_INCLUDE LIBCUDA_STUB
set -euo pipefail
src=$1 libdir=$2 cuda_include=$3 libcuda=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/kjit-doc-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 - "$src" "$work" <<'PY'
import pathlib, re, sys
src, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
count = 0
for md in [src / "README.md"] + sorted((src / "docs").glob("*.md")):
    blocks = re.findall(r"^```c\n(.*?)^```$", md.read_text(), flags=re.S | re.M)
    for i, block in enumerate(blocks, 1):
        (work / f"{md.stem}-{i}.c").write_text(block)
        count += 1
print(f"doc examples: {count} C blocks")
PY
failures=0
for example in "$work"/*.c; do
    name=${example##*/}
    if grep -q '^int main' "$example"; then
        libs=(-L"$libdir" -lkjit -Wl,-rpath,"$libdir")
        grep -q '#include <cuda.h>' "$example" && libs+=("$libcuda")
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
        echo "FAIL: $name (from ${name%-*}.md):"; cat "$work/errors"
        failures=$((failures + 1))
    fi
done
[ "$failures" -eq 0 ]
