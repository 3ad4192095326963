#!/usr/bin/env bash
# Every C example in README.md and docs/*.md (each ```c block) compiles, warning-free, against
# this tree's header; one with a main() also links against this build's libkjit.so (and the
# toolkit's libcuda stub when it includes cuda.h). Examples are for pasting: one that does not
# build is a bug. Nothing is run (launching needs a GPU). The pages' links and `../` paths must
# be in the repository, and their example output must show no developer's machine.
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
# The pages point only at what the repository holds (a link, or a `../path` a reader would
# open), and example output shows no developer's machine (/work/..., /root/...).
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
    for block in re.findall(r"^```console\n(.*?)^```$", text, flags=re.S | re.M):
        for line in block.splitlines():
            if not line.startswith("$ ") and re.search(r"/work/|/root/|/home/(?!user/)", line):
                problems.append(f"{md.name}: example output shows a developer's path: {line.strip()}")
for p in problems:
    print(f"FAIL: {p}")
print(f"doc links and example paths: {len(problems)} problems")
sys.exit(1 if problems else 0)
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
