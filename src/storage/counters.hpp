// The stores' process-wide counters (kjit_get_stats reads them, through the cache's counters,
// which extend these: cache/cache_counters.hpp). Named as the kjit_stats fields they feed, where
// they feed one. Relaxed atomics: cheap, no lock.
#pragma once

#include <atomic>
#include <cstdint>

namespace kjit::storage {

struct Counters {
    std::atomic<std::uint64_t> entries_published{0};
    std::atomic<std::uint64_t> entries_rebuilt{0};  // damaged or stale entries replaced
    // Files of deps.txt whose content a lookup read and hashed (their size or mtime differed
    // from the record, or they were young when recorded): a steady-state hit hashes none.
    std::atomic<std::uint64_t> dependency_hashes{0};
    // Files of deps.txt that a lookup stat'ed (a batch's FileMemo answers each file once).
    std::atomic<std::uint64_t> dependency_stats{0};
    // Lookups that skipped deps.txt: checked before in this process and nothing changed
    // since, as the header watch proved (dependency_watch.hpp).
    std::atomic<std::uint64_t> dependency_proofs{0};
    // Misses that found another process compiling their key (compile_lock.hpp), and those of
    // them that stopped waiting after the request's compile_wait and compiled too.
    std::atomic<std::uint64_t> compile_lock_waits{0};
    std::atomic<std::uint64_t> compile_lock_timeouts{0};
    // Seed caches (seed_store.hpp): local misses a seed's entry answered, and seed entries or
    // folders refused (damaged, another request's, untrusted).
    std::atomic<std::uint64_t> seed_hits{0};
    std::atomic<std::uint64_t> seed_rejections{0};
};

}  // namespace kjit::storage
