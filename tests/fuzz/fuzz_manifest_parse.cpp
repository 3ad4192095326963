// libFuzzer target: manifest.txt bytes in (the parser `kjit cache verify --fix`, the resolver's
// rescans of cache entries and loads trust). It must never crash or read out of bounds; what
// parses must carry a check line that covers all of its text, and survive format() -> parse()
// -> format() unchanged. Random bytes almost never carry a valid check line, so each input is
// also parsed "resealed" (its last check line replaced by a correct one): that reaches the
// line parser behind the check.
#include "store/cache_entry.hpp"
#include "util/hashing.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

void check_one(std::string_view text) {
    auto m = kjit::store::cache_entry::parse_manifest(text, "fuzz");
    if (!m) {
        if (m.error().code != kjit::Errc::io || m.error().message.find("fuzz") == std::string::npos) std::abort();
        return;
    }
    if (m->keyword.empty() || m->name.empty() || m->key.empty() || m->cubin_hash.size() != 32) std::abort();
    // What parses ends in "check: <XXH3-64 of the text before it>".
    const std::size_t check_at = text.rfind("check: ");
    char expected[40];
    std::snprintf(expected, sizeof expected, "check: %016" PRIx64 "\n", kjit::hash64(text.substr(0, check_at)));
    if (check_at == std::string_view::npos || text.substr(check_at) != expected) std::abort();
    const std::string once = kjit::store::cache_entry::format_manifest(*m);
    auto again = kjit::store::cache_entry::parse_manifest(once, "fuzz");
    if (!again || kjit::store::cache_entry::format_manifest(*again) != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    check_one(text);
    std::string resealed(text.substr(0, std::min(text.size(), text.rfind("check: "))));
    if (!resealed.empty() && resealed.back() != '\n') resealed += '\n';
    char check[40];
    std::snprintf(check, sizeof check, "check: %016" PRIx64 "\n", kjit::hash64(resealed));
    resealed += check;
    check_one(resealed);
    return 0;
}
