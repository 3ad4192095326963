// Local store: the cache folder on this machine as an entry store (entry_store.hpp). Looks an
// entry up (its owner trusted, every file its compile may read unchanged, its cubin and sidecar
// intact), through its source key's variants file for a request that reads files; publishes
// entries (store::cache_entry::publish), making room under a size limit when the disk is full, and
// runs the throttled sweep and eviction after a publish (cache_maintenance). Knows the entry
// layout, the folder trust rules, the include scanner and the header watch, the name resolver.
#pragma once

#include "cache/cache_counters.hpp"
#include "cache/entry_store.hpp"
#include "store/compile_lock.hpp"

namespace kjit::cache {

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

}  // namespace kjit::cache
