// Content hashes (XXH3 from xxHash): fast, well-kept, and stable across versions and machines,
// so a hash written to disk by one process can be checked by another.
#pragma once

#include "posix_file.hpp"
#include "status.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit {

std::uint64_t hash64(std::string_view bytes);

// Hash of a whole file's contents, read through a read-only mapping; `identity` receives the
// fstat of the file as hashed. Errc::io when it cannot be opened, mapped or is not a file.
Result<std::uint64_t> hash_file64(const std::string &path, FileIdentity *identity);

}  // namespace kjit
