// The cache's process-wide counters (kjit_get_stats reads them; tests and the bench too): what
// the stores count (storage/counters.hpp), and what the cache counts above them. Named as the
// kjit_stats fields they feed, where they feed one. Relaxed atomics: cheap, no lock.
#pragma once

#include "storage/counters.hpp"

#include <atomic>
#include <cstdint>

namespace kjit::cache {

struct Counters : storage::Counters {
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
    std::atomic<std::uint64_t> compile_shared_waits{0};   // callers that waited for another's compile
    // Compiles that passed NVRTC a PCH folder, and how many of those were the first of their
    // header identity in this process (NVRTC makes the PCH there; later ones use it).
    std::atomic<std::uint64_t> pch_compiles{0};
    std::atomic<std::uint64_t> pch_identities{0};
    std::atomic<int> compiles_in_flight{0};
    std::atomic<int> max_compiles_in_flight{0};
};

}  // namespace kjit::cache
