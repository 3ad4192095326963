// Local store: the cache folder on this machine as an entry store (entry_store.hpp). Looks an
// entry up (its owner trusted, every file its compile may read unchanged, its cubin and sidecar
// intact), through its source key's variants file for a request that reads files; publishes
// entries (store::cache_entry::publish), making room under a size limit when the disk is full, and
// runs the throttled sweep and eviction after a publish (cache_eviction). Knows the entry
// layout, the folder trust rules, the include scanner and the header watch, the name resolver.
#pragma once

#include "storage/counters.hpp"
#include "storage/entry_store.hpp"
#include "store/compile_lock.hpp"

#include <string_view>
#include <vector>

namespace kjit::storage {

// What a look at one entry folder found: an entry that passed, none there, one that cannot
// serve (*why says why), or one owned by someone the folder's trust rules refuse (*why: the error).
enum class Lookup { hit, absent, unusable, foreign };

// What check_entry gives a reader that writes nothing (a seed's, seed_store.hpp).
struct ReadOnlyCheck {
    std::vector<key::include_scanner::Dependency> deps;  // deps.txt as checked (a request that reads files)
    bool files_changed = false;  // unusable only because a file it may read differs here: a plain miss
};

// What the checks of one request's entries in one cache folder work from.
struct EntryContext {
    const key::Request &request;
    const folder_trust::CacheFolder &folder;  // the cache folder (or seed) the entries are in
    Counters &counters;                       // counts the recorded files hashed and stat'ed
    key::include_scanner::FileMemo *memo;     // the call's FileMemo (a batch's), or null
};

// The checks of an entry folder `entry` of the cache `at.folder` describes, before its cubin is
// looked at, the same for the local cache and a seed (a cache folder read-only): a folder, not a
// link; it and its shard owned by someone the folder trusts; for a request that reads files,
// every file its compile may read as deps.txt records it (and, for a variant of `source_key`,
// deps.txt giving its key back). The local store's own (read_only null) records the entry's use,
// takes the header watch's proof or gives it one, and stores deps.txt again when its records
// were brought up to date. With `read_only`, nothing is written nor remembered, and it receives
// what was checked. Not a hit: `*why` says why.
Lookup check_entry(const EntryContext &at, const std::string &entry, std::string_view source_key, std::string *why,
                   ReadOnlyCheck *read_only = nullptr);

// Gives a new entry for `request` (one that reads files) the files that record what its compile
// may read: deps.txt from `deps`, files as they are where `request` stands (scanned here, or
// checked here), and origin.txt saying so when some are relative to a folder.
void record_dependencies(store::cache_entry::NewEntry &entry, const key::Request &request,
                         const std::vector<key::include_scanner::Dependency> &deps);

class LocalStore final : public EntryStore {
public:
    explicit LocalStore(Counters &counters) : counters_(counters) {}

    const char *name() const override { return "local"; }
    Result<std::optional<Found>> find(const key::KeyedRequest &keyed, Call &call, key::include_scanner::FileMemo *memo,
                                      std::string *why) override;
    Result<std::optional<Found>> find_variant(const key::KeyedRequest &keyed, Call &call,
                                              const std::string &variant_key, std::string *why) override;
    Result<std::optional<std::string>> publish(const key::KeyedRequest &keyed, Call &call,
                                               const store::cache_entry::NewEntry &entry) override;

    // Whether a miss of `keyed` can be published here, said before compiling: an error when the
    // cache folder is unusable or not writable by the caller (a cache others filled for us to
    // read serves hits only), naming the folder and what to do.
    Status can_publish(const key::KeyedRequest &keyed, Call &call);

    // The node-wide lock of `keyed`'s key (compile_lock.hpp), taken before a miss looks again and
    // compiles: another process compiling it is waited for (at most request.compile_wait), so it
    // is compiled once on the node. Creates the cache folder when missing (the lock file lives in
    // it). None for a cache this process cannot write (it publishes nothing, so it never locks),
    // or when the lock cannot be had; the caller compiles either way. Counts waits.
    std::optional<store::compile_lock::Held> lock_for_compile(const key::KeyedRequest &keyed, Call &call);

private:
    // The cache folder as `call` checked it, checking it at the call's first step. The call's
    // own: a step that creates the folder checks it again into it (lock_for_compile), and
    // publishing updates it when it creates the folder.
    static Result<folder_trust::CacheFolder> &folder(const key::KeyedRequest &keyed, Call &call);

    Counters &counters_;
};

}  // namespace kjit::storage
