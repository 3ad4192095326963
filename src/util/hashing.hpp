// Content hashes (XXH3 from xxHash): fast, well-kept, and stable across versions and machines,
// so a hash written to disk by one process can be checked by another.
#pragma once

#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit {

std::uint64_t hash64(std::string_view bytes);
// hash64 of `first` followed by `second`, the same value, without joining them.
std::uint64_t hash64(std::string_view first, std::string_view second);

// A hash of file paths for the unordered maps keyed by them (the header watch's, a call's file
// memo): XXH3, several times quicker than std::hash on paths of tens of bytes.
struct PathHash {
    std::size_t operator()(const std::string &path) const noexcept { return static_cast<std::size_t>(hash64(path)); }
};

// XXH3-128 of `bytes` as 32 lowercase hex digits (high half first): the content hash a cache
// entry's manifest records for its cubin. 128 bits, because it stands for the whole cubin for
// as long as the entry lives and is compared against whatever bytes are on disk later.
std::string hash128_hex(std::string_view bytes);

// Hash of a whole file's contents, read into memory by read_whole_file (never mapped: a file
// rewritten in place meanwhile is read again or an error, not SIGBUS); `identity` receives the
// fstat of the file as hashed. Errc::io naming `path` when it cannot be opened or read, is not
// a regular file, or kept changing while it was read.
Result<std::uint64_t> hash_file64(const std::string &path, FileIdentity *identity);

}  // namespace kjit
