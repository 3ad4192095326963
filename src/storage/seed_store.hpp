// Seed store: read-only seed caches (key::Request::seed_dirs: kjit_compile_options::seed_dirs,
// $KJIT_CACHE_SEED) as an entry store, after the local cache and before the cluster tier. A
// seed is a cache folder of the same layout that this process never writes: a read-only mount,
// a folder baked into a container image (`kjit cache export`). docs/cache-layout.md, "Seed
// caches".
//
// A seed's entry passes the local store's own checks of an entry folder (check_entry, read-only:
// its owner trusted under the seed folder's rules, every header it recorded as it is here), then
// is verified as a downloaded entry is: its cubin and manifest read through one open folder, the
// manifest's check line, the cubin's size and XXH3-128 (store::cache_entry::read_published), the
// manifest made for this request, and the name chosen again from the cubin
// (resolve::recorded_name_problem). It is then published into the local cache, so that the next
// look-up is a local hit, and the answer is the local copy. Fails open: a seed folder that is
// missing is skipped (said at debug level), one the caller may not trust is skipped with a
// warning (once per folder per process), a damaged entry is refused with a warning and compiled
// (its bytes are left as they are); none of them fails a call.
#pragma once

#include "storage/counters.hpp"
#include "storage/entry_store.hpp"
#include "storage/local_store.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace kjit::storage {

class SeedStore final : public EntryStore {
public:
    SeedStore(LocalStore &local, Counters &counters) : local_(local), counters_(counters) {}

    const char *name() const override { return "seed"; }
    // The first seed (in order) holding an entry that answers `keyed`, published into the local
    // cache: its local path. nullopt when none does, when the request names no seed, or when
    // the local cache cannot take the copy (the miss then says why). Never an error.
    Result<std::optional<Found>> find(const key::KeyedRequest &keyed, Call &call, key::include_scanner::FileMemo *memo,
                                      std::string *why) override;
    // The same for the variant `variant_key` of a request that reads files, looked for by its key.
    Result<std::optional<Found>> find_variant(const key::KeyedRequest &keyed, Call &call,
                                              const std::string &variant_key, std::string *why) override;
    // Never written: nullopt.
    Result<std::optional<std::string>> publish(const key::KeyedRequest &, Call &,
                                               const store::cache_entry::NewEntry &) override {
        return std::optional<std::string>();
    }

    // In a forked child: the table of checked seed folders and its lock made anew.
    void renew_in_forked_child();

private:
    // The seed folder `dir` as its trust check found it, when it can be read from: checked at most
    // once a minute per process; a missing one said at debug level, a refused one warned about
    // once per folder per process (and counted as a rejection).
    std::optional<folder_trust::CacheFolder> usable(const std::string &dir);
    // One candidate entry folder of the seed `folder`: verified and published locally, or nullopt
    // (said why: a miss at debug level, a refusal at warning level, counted).
    std::optional<Found> take(const key::KeyedRequest &keyed, Call &call, const folder_trust::CacheFolder &folder,
                              const std::string &entry, const std::string &source_key,
                              key::include_scanner::FileMemo *memo);
    // The seeds of `keyed` in order, each usable one given to `try_seed(dir, folder)` until it
    // answers. Not `variant` (a look-up by the request's key): skipped when the call's first look
    // found nothing in them (Call::seeds_missed), which it then records.
    template <typename TrySeed>
    std::optional<Found> each_seed(const key::KeyedRequest &keyed, Call &call, bool variant, TrySeed &&try_seed);

    struct Checked {
        std::int64_t at_ns = 0;
        std::optional<folder_trust::CacheFolder> folder;  // none: missing or refused
        bool warned = false;
    };

    LocalStore &local_;
    Counters &counters_;
    std::mutex mutex_;
    std::map<std::string, Checked> checked_;  // by seed folder
};

}  // namespace kjit::storage
