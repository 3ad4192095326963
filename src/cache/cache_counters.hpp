// The cache's process-wide counters (kjit_get_stats reads them; tests and the bench too),
// shared by the cache and its stores. Named as the kjit_stats fields they feed, where they feed
// one. Relaxed atomics: cheap, no lock.
#pragma once

#include <atomic>
#include <cstdint>

namespace kjit::cache {

struct Counters {
    std::atomic<std::uint64_t> compile_hits{0};
    // Of those, hits the hit memo answered from memory (hit_memo.hpp); not in kjit_stats yet.
    std::atomic<std::uint64_t> memo_answers{0};
    std::atomic<std::uint64_t> compile_misses{0};
    // Of those, misses refused a compile (never mode) that the hit memo refused from memory.
    std::atomic<std::uint64_t> memo_refusals{0};
    std::atomic<std::uint64_t> nvrtc_compiles{0};
    std::atomic<std::uint64_t> nvrtc_nanoseconds{0};      // wall time inside compile::compiler::compile
    std::atomic<std::uint64_t> nvjitlink_links{0};        // links run (requests with link inputs)
    std::atomic<std::uint64_t> nvjitlink_nanoseconds{0};  // their wall time (also in nvrtc_nanoseconds)
    std::atomic<std::uint64_t> entries_published{0};
    std::atomic<std::uint64_t> compile_shared_waits{0};  // callers that waited for another's compile
    std::atomic<std::uint64_t> entries_rebuilt{0};       // damaged or stale entries replaced
    // Files of deps.txt whose content a lookup read and hashed (their size or mtime differed
    // from the record, or they were young when recorded): a steady-state hit hashes none.
    std::atomic<std::uint64_t> dependency_hashes{0};
    // Files of deps.txt that a lookup stat'ed (a batch's FileMemo answers each file once).
    std::atomic<std::uint64_t> dependency_stats{0};
    // Lookups that skipped deps.txt: checked before in this process and nothing changed
    // since, as the header watch proved (dependency_watch.hpp).
    std::atomic<std::uint64_t> dependency_proofs{0};
    // Compiles that passed NVRTC a PCH folder, and how many of those were the first of their
    // header identity in this process (NVRTC makes the PCH there; later ones use it).
    std::atomic<std::uint64_t> pch_compiles{0};
    std::atomic<std::uint64_t> pch_identities{0};
    // Misses that found another process compiling their key (compile_lock.hpp), and those of
    // them that stopped waiting after the request's compile_wait and compiled too.
    std::atomic<std::uint64_t> compile_lock_waits{0};
    std::atomic<std::uint64_t> compile_lock_timeouts{0};
    // Seed caches (seed_store.hpp): local misses a seed's entry answered, and seed entries or
    // folders refused (damaged, another request's, untrusted).
    std::atomic<std::uint64_t> seed_hits{0};
    std::atomic<std::uint64_t> seed_rejections{0};
    std::atomic<int> compiles_in_flight{0};
    std::atomic<int> max_compiles_in_flight{0};
};

}  // namespace kjit::cache
