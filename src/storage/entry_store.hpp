// Entry store: one tier the cache looks entries up in, behind one small interface, so that a
// new tier is a new file, not edits across the cache. The cache asks its stores in order; a hit
// anywhere is a cubin path on this machine, and a compile's result is published to every store,
// the local one first (its path is the answer). The cluster tier beside them
// (storage/remote/tier.hpp) is not one: its look-up also claims a lease that wraps the compile,
// held under the node's compile lock only, so the cache consults it at that one point of a miss
// (docs/architecture.md).
#pragma once

#include "key/cache_key.hpp"
#include "key/include_scanner.hpp"
#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kjit::storage {

// An entry that answers a request: its cubin's path on this machine, and the kernel's mangled
// name in it, as kjit_resolve_name gives it for the request's keyword (found by the same look-up
// that proved the entry, so a caller that wants both reads nothing twice).
struct Found {
    std::string cubin;
    std::string name;
    // The cubin file the look-up proved the name for (the hit memo compares it later); zero
    // when the answer comes from a compile or a store that does not say.
    FileIdentity cubin_identity{};
};

// What a miss that was refused a compile (key::CompileMode::never) saw, so that the hit memo
// can refuse its repeats without looking again (hit_memo.hpp): every path where an entry that
// answers the request would appear (its entry folder, or for a request that reads files its
// variants file and the entry of the files' state now; in the cache folder and in each seed),
// each with its identity then, or none where it was absent; and for a request that reads files,
// the header watch's generation that proves them as the refusal read them.
struct RefusalProof {
    std::vector<std::pair<std::string, std::optional<FileIdentity>>> places;
    std::optional<std::uint64_t> files_at;
};

// What one call (a kjit_compile; a batch's look-up, or its build of a miss) learns at its first
// step in a store and hands down to the later ones. The local store checks the cache folder
// (folder_trust: its owner, its parents, whether the caller can write it) once per call, and
// again only after creating it; before, each step of a miss checked it again (up to seven
// times). One thread uses a Call; it lives as long as the call.
struct Call {
    std::optional<Result<folder_trust::CacheFolder>> local_folder;
    // The seed caches had no entry for the call's request: a seed does not change during a call,
    // so the miss's second look (after the node's compile lock) skips them.
    bool seeds_missed = false;
    // Set by a refused miss whose repeats the hit memo may refuse (Cache::refuse_to_compile);
    // the call's caller hands it to the memo.
    std::optional<RefusalProof> refusal;
};

class EntryStore {
public:
    virtual ~EntryStore() = default;

    // For logs: "local", ...
    virtual const char *name() const = 0;

    // The entry that answers `keyed` (a hit: its cubin path and kernel name), else nullopt, with *why saying
    // why an entry that was there could not serve (empty when there was none). A request that
    // reads files is looked up by its source key (its variants). `memo`: the FileMemo of one
    // call (a batch's), so each dependency file is stat'ed once per call; or null. Errors: the
    // store refuses to serve the request (its folder or an entry belongs to someone untrusted):
    // the cache stops there, it never compiles over someone else's entry.
    virtual Result<std::optional<Found>> find(const key::KeyedRequest &keyed, Call &call,
                                              key::include_scanner::FileMemo *memo, std::string *why) = 0;

    // For a request that reads files: its entry `variant_key` (the state of
    // the files now), when that entry answers it, found without its variants file (built before,
    // but no longer listed); the store lists it again. Else nullopt. Errors as find().
    virtual Result<std::optional<Found>> find_variant(const key::KeyedRequest &keyed, Call &call,
                                                      const std::string &variant_key, std::string *why) = 0;

    // Stores the freshly compiled `entry` (keyed under entry.manifest.key) for `keyed`, and
    // returns its cubin path in this store (nullopt from a store that keeps no local copy).
    // Errors: io naming what could not be written.
    virtual Result<std::optional<std::string>> publish(const key::KeyedRequest &keyed, Call &call,
                                                       const store::cache_entry::NewEntry &entry) = 0;
};

}  // namespace kjit::storage
