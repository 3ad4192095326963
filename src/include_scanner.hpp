// Include scanner: which files on disk can a compile read through its include paths? NVRTC
// reports no dependencies, so this follows `#include` directives itself, from the source and
// the in-memory headers through every header found, without evaluating conditionals: the
// result is a superset of what NVRTC reads, which can only cost a needless miss, never a stale
// hit. It also records the include-path candidates probed before the one found (they did not
// exist): creating one later would shadow the header, so it must give a miss too. A computed
// `#include MACRO` cannot be followed; then every file under the include paths is recorded.
// Knows the filesystem only.
#pragma once

#include "posix_file.hpp"
#include "status.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::include_scanner {

struct Dependency {
    std::string path;
    bool exists = true;  // false: a probed candidate that must stay absent
    std::uint64_t size = 0;
    std::int64_t mtime_sec = 0;
    std::uint32_t mtime_nsec = 0;
    std::uint64_t content_hash = 0;  // XXH3-64 of the file as read
    // Modified less than kRacyWindowNs before it was read: size and mtime cannot prove it
    // unchanged (an edit within the same timestamp tick keeps both), so every check hashes it.
    bool verify_content = false;
};


// Headers that compiling `source` may read from `include_paths`. Errc::io when a found header
// cannot be read.
Result<std::vector<Dependency>> scan(std::string_view source,
                                     const std::vector<std::pair<std::string, std::string>> &memory_headers,
                                     const std::vector<std::string> &include_paths);

// Whether every dependency is as recorded: absent ones still absent; present ones of the same
// size and mtime (and, for young ones, content), or else of the same content (a `touch` alone
// is not a change).
bool still_current(const std::vector<Dependency> &deps);

// After still_current() passed: clears verify_content on the headers that are no longer young
// (their content was just checked and their mtime is now outside the window). True if any
// changed, so the caller can store the list again and later hits stat only.
bool settle(std::vector<Dependency> &deps);

// Text form kept in a cache entry (`deps.txt`), and back; a malformed text is Errc::io.
std::string format(const std::vector<Dependency> &deps);
Result<std::vector<Dependency>> parse(std::string_view text);

}  // namespace kjit::include_scanner
