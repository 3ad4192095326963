#!/usr/bin/env bash
# The ABI check (docs/abi-policy.md): compares the built libkjit.so with the committed baseline
# abi/libkjit.abi using libabigail's abidiff, over the interfaces the public header declares
# (kjit_kernel is opaque and suppressed: abi/libkjit.abignore).
#
# Any difference fails. abidiff flags removed functions as incompatible (exit bit 8) and leaves
# type changes (a struct or enum laid out differently, a parameter changed) and additions to a
# person (bit 4); here a person decides by updating the baseline in the same commit, with the
# report in front of them, which is what --update is for. First the check proves it can fail:
# a copy of the baseline with a field of kjit_compile_options removed must be reported.
#
#   check_abi.sh LIBKJIT_SO SOURCE_DIR            check (ctest: abi_check)
#   check_abi.sh --update LIBKJIT_SO SOURCE_DIR   rewrite abi/libkjit.abi from LIBKJIT_SO
set -uo pipefail
update=0
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
lib=$1 src=$2
command -v abidiff >/dev/null || { echo "FAIL: abidiff not found (Debian: apt-get install abigail-tools)"; exit 1; }
baseline="$src/abi/libkjit.abi"
suppressions="$src/abi/libkjit.abignore"
if (( update )); then
    abidw --exported-interfaces-only --headers-dir "$src/include/kjit" --drop-private-types --no-corpus-path \
        --no-comp-dir-path --no-show-locs --no-elf-needed --suppressions "$suppressions" "$lib" > "$baseline.new" &&
        # A translation unit's path is as the compiler was given it: absolute, the checkout's.
        # The baseline names it from the source folder, so no machine's folder is recorded.
        sed -i "s|path='$src/|path='|" "$baseline.new" &&
        mv "$baseline.new" "$baseline" && echo "wrote $baseline"
    exit
fi
# Not --headers-dir2: against an XML baseline it makes abidiff treat the header's own types as
# private and filter their changes out (the self-check below caught it).
opts=(--exported-interfaces-only --suppressions "$suppressions" --no-show-locs)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# abidiff's exit status is a bit field: 1 error, 2 usage error, 4 ABI change, 8 incompatible.
# The broken baseline drops kjit_compile_options' last field (name_expression).
python3 - "$baseline" "$work/broken.abi" <<'PY' || { echo "FAIL: could not make the broken baseline"; exit 1; }
import re, sys
text = open(sys.argv[1]).read()
broken, n = re.subn(r"\s*<data-member access='public' layout-offset-in-bits='576'>\s*"
                    r"<var-decl name='name_expression'[^>]*/>\s*</data-member>", "", text)
if n != 1:
    sys.exit("no name_expression member at bit 576 in the baseline")
open(sys.argv[2], "w").write(broken)
PY
abidiff "${opts[@]}" "$work/broken.abi" "$lib" > "$work/broken.txt" 2>&1
rc=$?
if (( rc & 3 )) || (( (rc & 12) == 0 )); then
    echo "FAIL: abidiff did not report a field missing from kjit_compile_options (exit $rc):"
    cat "$work/broken.txt"; exit 1
fi

# --update reads which types are public from --headers-dir, the folder include/kjit: a header
# missing there (kjit_batch.h, kjit_cache.h) turns the structs only it defines into opaque
# declarations in the baseline, which abidiff does not report. So the folder's view of this build
# must define every kjit_ type the baseline defines.
abidw --exported-interfaces-only --headers-dir "$src/include/kjit" --drop-private-types --no-corpus-path \
    --no-comp-dir-path --no-show-locs --no-elf-needed --suppressions "$suppressions" "$lib" > "$work/now.abi" ||
    { echo "FAIL: abidw --headers-dir $src/include/kjit failed"; exit 1; }
python3 - "$baseline" "$work/now.abi" "$src/include/kjit" <<'PY' || exit 1
import re, sys
def defined(path):
    text = open(path).read()
    return {(m.group(1), m.group(2)) for m in re.finditer(r"<(class-decl|enum-decl|typedef-decl) name='(kjit_[^']+)'([^>]*)>", text)
            if "is-declaration-only='yes'" not in m.group(3)}
base, now = defined(sys.argv[1]), defined(sys.argv[2])
missing = sorted(f"{kind} {name}" for kind, name in base - now)
if missing:
    sys.exit(f"FAIL: with --headers-dir {sys.argv[3]}, abidw no longer defines: {', '.join(missing)} "
             "(is a public header missing from that folder?)")
print(f"headers: {sys.argv[3]} defines all {len(base)} kjit_ types of the baseline")
PY

abidiff "${opts[@]}" "$baseline" "$lib" > "$work/report.txt" 2>&1
rc=$?
if (( rc & 3 )); then echo "FAIL: abidiff failed (exit $rc):"; cat "$work/report.txt"; exit 1; fi
if (( rc != 0 )); then
    kind=$([ $((rc & 8)) -ne 0 ] && echo "an incompatible change" || echo "a change")
    echo "FAIL: $lib differs from abi/libkjit.abi by $kind (abidiff exit $rc):"
    cat "$work/report.txt"
    echo "If it is an addition docs/abi-policy.md allows (a new function in a new version node, an"
    echo "enumerator or struct field appended), update the baseline in the same commit:"
    echo "  tests/check_abi.sh --update $lib $src"
    exit 1
fi
echo "OK: $lib has the ABI of abi/libkjit.abi (self-check: a removed struct field is caught)"
