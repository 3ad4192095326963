// Cache verification: `kjit cache verify` (and `--fix`) and kjit_cache_verify. Checks every entry
// of a cache folder (complete, manifest intact, cubin the bytes published with its kernel,
// sidecar agreeing) and finds what killed processes left behind; with fix, repairs what can be
// repaired and removes the rest, whole and atomically, under the cache lock. Builds on the
// inventory (cache_inventory.hpp); knows the entry layout, the sidecar module, the symbol
// scanner and the name matcher.
#pragma once

#include "util/status.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kjit::store::cache_verification {

// What is wrong with a path. The public kjit_cache_problem has the same values (checked at
// compile time in api/c_api_cache.cpp): one vocabulary, so values are only ever appended. (The sidecar
// store's FileProblem and the resolver's Rejection describe one sidecar file for a reader and
// stay finer; a verify finding folds them into sidecar_damaged with their text as detail.)
enum class Damage {
    misplaced = 0,           // an entry folder in the wrong shard, or not a folder
    missing_file = 1,        // manifest.txt, source.cu, kernel.cubin or deps.txt is missing
    bad_manifest = 2,        // manifest.txt unreadable, failing its check line, or not a manifest for this entry
    bad_cubin = 3,           // the cubin is not a CUDA ELF, not the bytes published, or lacks its kernel
    truncated_cubin = 4,     // the cubin's size differs from the one recorded at publish
    sidecar_missing = 5,     // no kernel.cubin.name
    sidecar_damaged = 6,     // unreadable, garbage, or no line for the entry's keyword
    sidecar_stale = 7,       // its line belongs to another version of the cubin
    sidecar_wrong_name = 8,  // its line names another kernel than the manifest
    stale_temp = 9,          // a temp folder or temp file left by a killed writer
    foreign = 10,            // the entry, its shard or a file in it is someone else's (folder_trust.hpp)
};
// Its name, as `kjit cache verify` prints it ("truncated_cubin"); "unknown" for another value.
const char *to_string(Damage damage);

struct Finding {
    std::string path;
    Damage damage;
    std::string detail;
    bool fixed = false;
    std::string action;  // with fix: "removed the entry", "rebuilt the sidecar", ...
};

struct VerifyReport {
    std::size_t entries_checked = 0;
    std::size_t entries_ok = 0;
    std::vector<Finding> findings;
    bool clean() const;  // nothing found, or everything found fixed
};

// Checks every entry: complete, its manifest passing its check line, its cubin a CUDA ELF of the
// recorded size and XXH3-128 holding the kernel its manifest names, its sidecar agreeing with
// the cubin and the manifest; and looks for stale temp folders and files. With `fix`: rebuilds
// damaged sidecars from the manifest's name (only from a manifest that passes its check, with
// the name found in the cubin's function symbols and passing the keyword rule),
// removes entries that cannot be repaired (the next kjit_compile rebuilds them) and sweeps
// stale temps, under the cache lock. Errors: io when the folder cannot be read.
Result<VerifyReport> verify(const std::string &cache_dir, bool fix);

// verify()'s check of the one entry folder `entry` of key `key`, less its sidecar (which a copy
// writes anew): what keeps it from serving (incomplete, manifest damaged or another key's, cubin
// not the bytes published or without its kernel), or nullopt when it is sound. Reads only.
std::optional<Finding> entry_damage(const std::string &entry, const std::string &key);

}  // namespace kjit::store::cache_verification
