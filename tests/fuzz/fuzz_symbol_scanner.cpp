// libFuzzer target: cubin bytes in, a name or a status out (symbol scanner + name matcher).
// The first byte picks a keyword, so the selector's ambiguous/not-found paths are exercised too.
#include "cubin/name_matcher.hpp"
#include "cubin/symbol_scanner.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    static const char *const kKeywords[] = {"gemm",      "gemm_fp16",    "tmpl",        "scale",           "c_kernel",
                                            "ops::norm", "plain_kernel", "tile_kernel", "gemm_fp8_kernel", "k"};
    if (size == 0) return 0;
    const char *keyword = kKeywords[data[0] % (sizeof kKeywords / sizeof *kKeywords)];
    auto table =
        kjit::cubin::SymbolTable::from_bytes(std::string(reinterpret_cast<const char *>(data + 1), size - 1), "fuzz");
    if (!table.ok()) {
        if (table.error().code != kjit::Errc::bad_cubin || table.error().message.empty()) std::abort();
        return 0;
    }
    std::vector<kjit::cubin::name_matcher::Candidate> candidates;
    for (const auto &f : table->functions()) {
        if (f.name.empty() || f.name.size() >= size) std::abort();
        candidates.push_back({f.name, f.is_entry});
    }
    auto chosen = kjit::cubin::name_matcher::select(candidates, keyword);
    if (chosen.ok()) {
        // What the selector picks must pass the validator it shares the rule with.
        if (!kjit::cubin::name_matcher::matches(*chosen, keyword)) std::abort();
    } else if (chosen.error().code != kjit::Errc::not_found && chosen.error().code != kjit::Errc::ambiguous) {
        std::abort();
    }
    return 0;
}
