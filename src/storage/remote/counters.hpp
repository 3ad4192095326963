// Counters: the cluster tier's process-wide figures (kjit_stats' remote_* fields), kept by the
// tier (tier.hpp) and by the backends (backend.hpp: a link's failures and timeouts).
#pragma once

#include <atomic>
#include <cstdint>

namespace kjit::storage::remote {

// Relaxed atomics.
struct Counters {
    std::atomic<std::uint64_t> hits{0};             // entries fetched, verified and published locally
    std::atomic<std::uint64_t> misses{0};           // look-ups that found no entry
    std::atomic<std::uint64_t> errors{0};           // failed round trips and refused commands
    std::atomic<std::uint64_t> timeouts{0};         // of the errors, timeouts
    std::atomic<std::uint64_t> corrupt{0};          // values that failed verification
    std::atomic<std::uint64_t> puts{0};             // entries stored
    std::atomic<std::uint64_t> bytes_in{0};         // value bytes fetched
    std::atomic<std::uint64_t> bytes_out{0};        // value bytes stored
    std::atomic<std::uint64_t> leases_owned{0};     // leases taken (this process compiled for the cluster)
    std::atomic<std::uint64_t> lease_waits{0};      // look-ups that waited on another node's lease
    std::atomic<std::uint64_t> lease_takeovers{0};  // ... and took the lease over when it vanished
    std::atomic<std::uint64_t> shared_failures{0};  // compile errors returned from another node's compile
};

// The process's counters (made at first use; thread safe).
Counters &counters();

}  // namespace kjit::storage::remote
