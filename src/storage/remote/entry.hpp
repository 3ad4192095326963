// Remote entry: one cache entry as one self-contained Redis value (docs/remote.md), never split
// over several keys (eviction would leave halves). Layout, every field length-prefixed:
//
//   "KJITRMT\n"  u32 envelope version (kEnvelopeVersion: 2; version 1 values are still read)
//   key (32 hex: echoed, so a value copied under another key is refused)
//   cache format, NVRTC identity, arch, producing host, creation time (Unix seconds)
//   version 2: u32 unpacked size, then one field: a zstd frame that unpacks to exactly that many
//     bytes, which are the two fields below (their lengths included), and nothing else
//   version 1: the two fields themselves, uncompressed:
//     manifest.txt as the producer published it (its own check line; the name record: keyword,
//       name expression, and the name the keyword rule or the lowering chose)
//     the cubin
//   XXH3-128 (32 hex) of everything before it: the bytes as sent (compressed, in version 2)
//
// The header stays uncompressed: a value made for another request is refused before anything
// is unpacked. Cubins are mostly ELF tables, padding and repeated instruction patterns: zstd
// makes an entry 3x (small kernels) to 9x (CUB kernels) smaller, and unpacks ~1 MB in ~0.6 ms.
//
// Every download is verified before anything of it is used: magic, version, key echo, every
// length, the checksum, what it was made for (format, NVRTC build, arch, keyword, name
// expression), the unpacked size (within max-entry-size, so that a small value cannot make a
// node allocate gigabytes: it is a zstd frame's whole size, checked before any allocation) and
// the frame (exactly that size, whole, nothing after it), the manifest's own check and its
// record of the cubin (size, XXH3-128), the ELF magic, and the name, chosen again from the
// cubin's symbols as a fresh compile's would be. The checksum stops corruption, not a hostile
// writer (docs/remote.md says what to do about one). Knows the cache entry's manifest and the
// name resolver; nothing of Redis.
#pragma once

#include "store/cache_entry.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::storage::remote {

// The version encode() writes; decode() reads it and every older one (1).
constexpr std::uint32_t kEnvelopeVersion = 2;

// How far an entry may unpack beyond max-entry-size: its manifest and field lengths beside a
// cubin of that size (the margin a reply has over it too, redis_client.cpp).
constexpr std::uint64_t kUnpackedMarginBytes = 1u << 20;

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
// store::cache_entry::format_manifest writes it) and `cubin`, made on `host` for `format`: a
// version 2 (compressed) envelope, or version 1 where zstd cannot compress (out of memory).
std::string encode(const store::cache_entry::Manifest &manifest, std::string_view cubin, int format,
                   const std::string &host);

// The entry in `value` (envelope version 1 or 2) when it is whole and made for `expected`.
// `max_entry_bytes` (the setting max-entry-size) bounds what it may unpack to: that plus
// kUnpackedMarginBytes. Errors: bad_cubin, saying what is wrong ("checksum mismatch", "made for
// key ...", "cut short", "unpacks to ... bytes, over max-entry-size", ...), for `where` (the
// Redis key, for messages).
Result<Entry> decode(std::string_view value, const Expected &expected, const std::string &where,
                     std::uint64_t max_entry_bytes);

// This machine's name, for the producer field and lease tokens ("unknown" when it has none).
std::string host_name();

}  // namespace kjit::storage::remote
