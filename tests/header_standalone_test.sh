#!/usr/bin/env bash
# The public C ABI is three headers (include/kjit: kjit.h, kjit_batch.h, kjit_cache.h). Each must
# be self-contained: included alone, first, twice, or in any order with the others, every one
# declares the whole ABI, and compiles warning-free as strict C99 and as C++17. Each translation
# unit below uses a type, a macro and a function of each of the three headers; none is linked.
# Usage: header_standalone_test.sh SOURCE_DIR C_COMPILER CXX_COMPILER
set -euo pipefail
src=$1 cc=$2 cxx=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/kjit-header-standalone.XXXXXX")
trap 'rm -rf "$work"' EXIT
headers=$(cd "$src/include/kjit" && ls -- *.h | sort | tr '\n' ' ')
[ "$headers" = "kjit.h kjit_batch.h kjit_cache.h " ] ||
    { echo "FAIL: include/kjit holds '$headers'; update this test (and the install, docs and ABI lists)"; exit 1; }
body='
typedef kjit_status (*compile_fn)(const char *, const char *, const kjit_compile_options *, char *, size_t, size_t *);
typedef kjit_status (*batch_fn)(const kjit_compile_request *const *, size_t, const kjit_batch_options *,
                                kjit_batch_result **);
typedef kjit_status (*verify_fn)(const char *, int, kjit_verify_report **);
int kjit_header_use(void);
int kjit_header_use(void) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    kjit_prune_report report = KJIT_PRUNE_REPORT_INIT;
    kjit_stats stats = KJIT_STATS_INIT;
    compile_fn compile = kjit_compile;
    batch_fn compile_batch = kjit_compile_batch;
    verify_fn verify = kjit_cache_verify;
    return (int)options.struct_size + (int)batch.struct_size + (int)report.struct_size + (int)stats.struct_size +
           (compile != NULL) + (compile_batch != NULL) + (verify != NULL) + KJIT_VERSION_NUMBER + KJIT_PCH_ON +
           KJIT_CACHE_STALE_TEMP;
}
'
orders=(
    "kjit.h" "kjit_batch.h" "kjit_cache.h"
    "kjit_batch.h kjit_cache.h" "kjit_cache.h kjit_batch.h"
    "kjit_batch.h kjit.h" "kjit_cache.h kjit.h" "kjit.h kjit_batch.h kjit_cache.h kjit.h"
)
failures=0 n=0
for order in "${orders[@]}"; do
    file="$work/tu-$n"
    n=$((n + 1))
    { for h in $order; do printf '#include <kjit/%s>\n' "$h"; done; printf '%s' "$body"; } > "$file.c"
    cp "$file.c" "$file.cpp"
    if ! "$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror -Wstrict-prototypes -I"$src/include" -c "$file.c" \
            -o "$file.c.o" 2> "$file.err"; then
        echo "FAIL: C99, includes: $order"; cat "$file.err"; failures=$((failures + 1))
    fi
    if ! "$cxx" -std=c++17 -Wall -Wextra -Wpedantic -Werror -I"$src/include" -c "$file.cpp" \
            -o "$file.cpp.o" 2> "$file.err"; then
        echo "FAIL: C++17, includes: $order"; cat "$file.err"; failures=$((failures + 1))
    fi
    # C++: the declarations have C linkage whatever header declared them.
    if [ -f "$file.cpp.o" ] && nm "$file.cpp.o" | grep -q ' U _Z.*kjit_'; then
        echo "FAIL: C++, includes: $order: a kjit_ function got C++ linkage"; failures=$((failures + 1))
    fi
done
[ "$failures" -eq 0 ] || exit 1
echo "header standalone OK: ${#orders[@]} include orders of ${headers% }, each as C99 and C++17"
