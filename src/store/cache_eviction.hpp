// Cache eviction: removing entries from a cache folder by recency. `kjit cache prune` and
// `clear`, the size limit that kjit_compile enforces after a publish (throttled per process),
// making room when a publish finds the disk full, and the sweep of folders left in transit by
// killed processes. Builds on the inventory (cache_inventory.hpp) and its lock; the cache calls
// it after publishing.
//
// Concurrency: entries are removed whole and atomically (store::cache_entry::retire), never one that is
// in use (a recent recency record) unless the caller asks for it (clear), under the exclusive
// cache lock, so two removers never race each other; hits, loads and publishes take no lock.
#pragma once

#include "util/folder_trust.hpp"
#include "util/status.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace kjit::store::cache_eviction {

// Eviction after a publish brings the cache down to this share of the limit, so that it does
// not run again at the very next publish.
constexpr double kEvictionLowWater = 0.9;
// After a publish, the cache is re-measured at most this often per process unless what this
// process published since the last measurement may have crossed the limit.
constexpr std::int64_t kEvictionIntervalNs = 30'000'000'000;

struct PruneOptions {
    std::optional<std::uint64_t> max_bytes;     // remove least recently used entries down to this
    std::optional<std::int64_t> older_than_ns;  // remove entries not used for this long
    bool everything = false;                    // remove every entry (clear)
    bool spare_in_use = true;                   // false: in-use entries go too (clear)
};

struct PruneReport {
    std::size_t removed_entries = 0;
    std::uint64_t removed_bytes = 0;
    std::size_t spared_in_use = 0;       // would have gone, but in use (see store::cache_entry::kInUseWindowNs)
    std::size_t removed_in_transit = 0;  // stale .tmp-/.trash- folders swept
    // Variants files none of whose keys is left (written over a minute ago: a publish may be
    // listing a key the inventory did not see yet).
    std::size_t removed_variants = 0;
    std::size_t kept_entries = 0;
    std::uint64_t kept_bytes = 0;
};

// Removes entries by recency: those not used within older_than_ns, then the least recently
// used until the rest fit in max_bytes; sweeps stale folders in transit. Blocks on the cache
// lock. Errors: io.
Result<PruneReport> prune(const std::string &cache_dir, const PruneOptions &options);
// Removes every entry (in use or not) and every stale folder in transit; live publishes in
// other processes are left to finish. Blocks on the cache lock. Errors: io.
Result<PruneReport> clear(const std::string &cache_dir);

// After a publish, stale .tmp-/.trash- folders (left by killed processes, older than
// kStaleTempNs) are swept at most this often per process and cache folder.
constexpr std::int64_t kSweepIntervalNs = 600'000'000'000;

// Called by the cache after it published an entry of `entry_bytes`. Sweeps stale folders in
// transit when due (see kSweepIntervalNs; a listing of the shards, no entry is opened) and, under
// a limit of `max_bytes`, re-measures the cache when due (throttled, see kEvictionIntervalNs)
// and evicts least recently used entries down to kEvictionLowWater of the limit. Skips the work
// when another process holds the cache lock. Never fails the publish: problems are logged.
void after_publish(const std::string &cache_dir, std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes);
// The same for a cache folder its caller has just checked (`folder`: folder_trust, after the
// publish), which is not checked again.
void after_publish(const std::string &cache_dir, const folder_trust::CacheFolder &folder,
                   std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes);

struct Freed {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
};

// Called by the cache when a publish under a limit of `max_bytes` failed for lack of space
// (ENOSPC, EDQUOT), before it tries once more (eviction after publishes never runs on a full
// disk: the publish fails first). Measures the cache now and evicts least recently used
// entries not in use down to kEvictionLowWater of the limit or of the cache's size, whichever
// is smaller, and at least `needed_bytes` below its size: the disk is full, so room is made
// even in a cache within its limit. Does nothing when another process holds the cache lock (it
// is evicting or pruning). Never fails: problems are logged.
Freed make_room(const std::string &cache_dir, std::uint64_t max_bytes, std::uint64_t needed_bytes);

// after_publish keeps its throttle state (last sweep, last measurement seen, bytes published
// since) for at most this many cache folders per process, the least recently published-to
// forgotten first: forgetting costs one early sweep or measurement. For tests: how many it
// holds now.
constexpr std::size_t kMaxEvictionStates = 64;
std::size_t eviction_state_count();

// Process-wide counts of the eviction after publishes (for kjit_get_stats).
struct Counters {
    std::atomic<std::uint64_t> eviction_runs{0};  // measurements of the cache
    std::atomic<std::uint64_t> evicted_entries{0};
    std::atomic<std::uint64_t> evicted_bytes{0};
    std::atomic<std::uint64_t> swept_temp_folders{0};  // stale temp folders swept after publishes
};
Counters &counters();

}  // namespace kjit::store::cache_eviction
