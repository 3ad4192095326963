// Cache copy: `kjit cache export` and `kjit cache import` (kjit_cache_export, kjit_cache_import).
// Whole entries copied from one cache folder into another, each verified first as `kjit cache
// verify` checks it, and written as a compile publishes one (a temp folder renamed into place,
// a fresh sidecar), with its variants file line. Nothing else is copied: no usage record, no
// lock, no NVRTC record, no temp folder, so an export is a seed cache ready to be baked into a
// container image or put on a read-only share (docs/cache-layout.md, "Seed caches"). Reads the
// source only. Builds on the inventory, verification and the cache entry.
#pragma once

#include "store/cache_verification.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <string>

namespace kjit::store::cache_copy {

struct CopyReport {
    std::uint64_t copied = 0;        // entries written whole into the destination
    std::uint64_t copied_bytes = 0;  // the bytes of their files
    std::uint64_t present = 0;       // sound entries the destination had already: left as they were
    std::uint64_t skipped = 0;       // entries of another arch than asked for
    // entries_checked: every entry looked at; entries_ok: those copied or present; findings:
    // those refused (damaged), each with why, none copied.
    cache_verification::VerifyReport refused;
};

// Copies the sound entries of the cache folder `from` (of arch `arch` only, unless it is empty)
// into the cache folder `to`, created (private) when missing. Both are checked as kjit_compile
// checks a cache folder: a source or destination someone else could have written is refused.
// Errors: invalid_argument (the same folder), io naming the folder and what is wrong (a source
// that does not exist, a destination that cannot be written).
Result<CopyReport> copy_entries(const std::string &from, const std::string &to, const std::string &arch);

}  // namespace kjit::store::cache_copy
