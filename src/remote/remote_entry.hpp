// Remote entry: one cache entry as one self-contained Redis value (docs/remote.md), never split
// over several keys (eviction would leave halves). Layout, every field length-prefixed:
//
//   "KJITRMT\n"  u32 envelope version (kEnvelopeVersion)
//   key (32 hex: echoed, so a value copied under another key is refused)
//   cache format, NVRTC identity, arch, producing host, creation time (Unix seconds)
//   manifest.txt as the producer published it (its own check line; the name record: keyword,
//     name expression, and the name the keyword rule or the lowering chose)
//   the cubin
//   XXH3-128 (32 hex) of everything before it
//
// Every download is verified before anything of it is used: magic, version, key echo, every
// length, the checksum, what it was made for (format, NVRTC build, arch, keyword, name
// expression), the manifest's own check and its record of the cubin (size, XXH3-128), the ELF
// magic, and the name, chosen again from the cubin's symbols as a fresh compile's would be.
// The checksum stops corruption, not a hostile writer (docs/remote.md says what to do about
// one). Knows the cache entry's manifest and the name resolver; nothing of Redis.
#pragma once

#include "store/cache_entry.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::remote {

constexpr std::uint32_t kEnvelopeVersion = 1;

// What a value must have been made for to answer a request.
struct Expected {
    std::string key;
    int format = 0;
    std::string nvrtc_identity;
    std::string arch;
    std::string keyword;
    std::optional<std::string> name_expression;
};

// A verified entry: its manifest (parsed and checked), cubin, and where and when it was made.
struct Entry {
    store::cache_entry::Manifest manifest;
    std::string cubin;
    std::string producer;
    std::int64_t created = 0;
};

// The value for `manifest` (complete: cubin_bytes, cubin_hash and created filled in, as
// store::cache_entry::format_manifest writes it) and `cubin`, made on `host` for `format`.
std::string encode(const store::cache_entry::Manifest &manifest, std::string_view cubin, int format,
                   const std::string &host);

// The entry in `value` when it is whole and made for `expected`. Errors: bad_cubin, saying what
// is wrong ("checksum mismatch", "made for key ...", "cut short", ...), for `where` (the Redis
// key, for messages).
Result<Entry> decode(std::string_view value, const Expected &expected, const std::string &where);

// This machine's name, for the producer field and lease tokens ("unknown" when it has none).
std::string host_name();

}  // namespace kjit::remote
