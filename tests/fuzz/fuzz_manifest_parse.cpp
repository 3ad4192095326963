// libFuzzer target: manifest.txt bytes in (the parser `kjit cache verify` trusts to rebuild
// sidecars). It must never crash or read out of bounds, and whatever parses must survive
// format() -> parse() -> format() unchanged.
#include "cache_entry.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    auto m = kjit::cache_entry::parse_manifest(text, "fuzz");
    if (!m) {
        if (m.error().code != kjit::Errc::io || m.error().message.find("fuzz") == std::string::npos) std::abort();
        return 0;
    }
    if (m->keyword.empty() || m->name.empty() || m->key.empty()) std::abort();
    const std::string once = kjit::cache_entry::format_manifest(*m);
    auto again = kjit::cache_entry::parse_manifest(once, "fuzz");
    if (!again || kjit::cache_entry::format_manifest(*again) != once) std::abort();
    return 0;
}
