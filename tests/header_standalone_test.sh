#!/usr/bin/env bash
# The public C ABI is three headers (include/kjit: kjit.h, kjit_batch.h, kjit_cache.h). Each must
# be self-contained: included alone, first, twice, or in any order with the others, every one
# declares the whole ABI, and compiles warning-free as strict C99 and as C++17. Each translation
# unit below uses a type, a macro and a function of each of the three headers; none is linked.
# The C++ companion include/kjit/kjit.hpp (header only, over the C ABI, not part of it) compiles
# alone and after kjit.h, warning-free as C++17 with this compiler and with the other of g++ and
# clang++ when it is installed, its templates instantiated.
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

cxx_headers=$(cd "$src/include/kjit" && ls -- *.hpp | sort | tr '\n' ' ')
[ "$cxx_headers" = "kjit.hpp " ] ||
    { echo "FAIL: include/kjit holds the C++ headers '$cxx_headers'; update this test (and the install and docs lists)"; exit 1; }
hpp_body='
#include <string>
enum class hpp_layout : short { row = 1 };
template <typename T> struct hpp_tile {};
std::string hpp_use(kjit_kernel *raw);
std::string hpp_use(kjit_kernel *raw) {
    const float x = 1.0f;
    kjit::Kernel kernel(raw);
    kjit::Kernel other(std::move(kernel));
    kjit::BatchResult result;
    std::string s = kjit::instantiate("k", kjit::type<hpp_tile<int>>, kjit::type_of(x), kjit::Type("__half"),
                                      64, 7u, -3l, 1ull, true, static_cast<short>(2), hpp_layout::row, "X");
    s += kjit::instantiate("k") + kjit::type_name<const float *>() + other.name() + std::to_string(result.count());
    try {
        s += kjit::compile("", "k") + kjit::compile_named("", "k").kernel_name + kjit::resolve_name("", "k");
        kjit::Kernel loaded = kjit::load_cached("", "k");
        loaded = kjit::compile_and_load("", "k");
        s += std::to_string(kjit::compile_batch({}).count());
    } catch (const kjit::Error &e) {
        s += e.what() + e.detail() + std::to_string(static_cast<int>(e.status()));
    }
    return s;
}
'
cxx_compilers=("$cxx")
case "$("$cxx" --version 2>/dev/null | head -n 1)" in
    *clang*) other=g++ ;;
    *) other=clang++ ;;
esac
if command -v "$other" >/dev/null 2>&1; then cxx_compilers+=("$other"); else echo "note: $other not found: kjit.hpp checked with $cxx only"; fi
for order in "kjit.hpp" "kjit.h kjit.hpp" "kjit.hpp kjit.h kjit.hpp"; do
    file="$work/tu-$n"
    n=$((n + 1))
    { for h in $order; do printf '#include <kjit/%s>\n' "$h"; done; printf '%s' "$hpp_body"; } > "$file.cpp"
    for compiler in "${cxx_compilers[@]}"; do
        if ! "$compiler" -std=c++17 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast \
                -Werror -I"$src/include" -c "$file.cpp" -o "$file.cpp.o" 2> "$file.err"; then
            echo "FAIL: C++17 ($compiler), includes: $order"; cat "$file.err"; failures=$((failures + 1))
        elif nm "$file.cpp.o" | grep -q ' U _Z.*kjit_'; then
            echo "FAIL: C++ ($compiler), includes: $order: a kjit_ function got C++ linkage"; failures=$((failures + 1))
        fi
    done
done
[ "$failures" -eq 0 ] || exit 1
echo "header standalone OK: ${#orders[@]} include orders of ${headers% }, each as C99 and C++17;" \
    "kjit.hpp in 3 orders with ${cxx_compilers[*]}"
