#include "util/fork_guard.hpp"

#include <pthread.h>

#include <cstdio>

namespace kjit::fork_guard {

namespace {

constexpr unsigned kCount = static_cast<unsigned>(State::count);

// The list (fork_guard.hpp): what each piece holds and what a child does with it.
constexpr Piece kPieces[kCount] = {
    {State::generation, "util/fork_guard.cpp", "the fork generation", "counts one more", true},
    {State::logger, "util/log.cpp", "the logger and its stderr sink's lock", "the sink's lock made anew", true},
    {State::removers_lock, "util/filesystem.cpp", "the descriptors of the removers' lock (.kjit-lock)",
     "closed: the lock is the parent's", true},
    {State::group_membership, "util/folder_trust.cpp", "the memo of group membership", "emptied", true},
    {State::sidecar_sweep, "cubin/sidecar.cpp", "when each folder's stale sidecar temps were swept", "emptied", true},
    {State::entry_pins, "store/cache_entry.cpp", "the entries pinned by running batches",
     "emptied: the parent's batches do not run in the child", true},
    {State::eviction_throttle, "store/cache_eviction.cpp", "when each cache was last swept and evicted", "emptied",
     true},
    {State::nvrtc_open, "compile/nvrtc_library.cpp", "the lock held while NVRTC is opened", "made anew", true},
    {State::nvrtc_gate, "compile/compiler.cpp", "the gate of NVRTC calls in flight",
     "fork waits for the calls in flight (120 s at most); the child's gate made anew, closed for good when a call "
     "was still inside",
     true},
    {State::nvrtc_records, "compile/nvrtc_probe.cpp", "the cache folders whose NVRTC record this process wrote",
     "emptied", true},
    {State::nvjitlink_open, "compile/nvjitlink_library.cpp", "the lock held while nvJitLink is opened", "made anew",
     true},
    {State::nvjitlink_records, "compile/nvjitlink_probe.cpp",
     "the cache folders whose nvJitLink record this process wrote", "emptied", true},
    {State::link_inputs, "compile/linker.cpp", "the link inputs this process read, and their lock",
     "made anew, emptied (the child reads them again)", true},
    {State::pch_root, "compile/pch_folders.cpp", "this process's PCH folder", "forgotten: the child makes its own",
     true},
    {State::driver, "load/driver.cpp", "the CUDA driver's entry points, after cuInit",
     "forgotten: the child opens the driver and calls cuInit again", true},
    {State::resolver_memo, "resolve/name_resolver.cpp", "the read-only memo of resolved names", "emptied", true},
    {State::loaded_libraries, "load/kernel_loader.cpp", "the registry of loaded CUDA libraries",
     "emptied: the parent's libraries are leaked, never unloaded", true},
    {State::header_watch, "key/dependency_watch.cpp", "the inotify descriptor and the headers it proves",
     "closed and emptied", true},
    {State::remote_tiers, "storage/remote/tier.cpp", "the lock of the registry of cluster tiers",
     "made anew (the tiers are kept; each thread's Redis connections are dropped at use by generation)", true},
    {State::host_lookups, "storage/remote/redis_client.cpp", "the host name lookups in flight on threads of their own",
     "forgotten (leaked): the child has none of their threads, and starts its own", true},
    {State::tls_contexts, "storage/remote/tls_session.cpp",
     "the TLS contexts (SSL_CTX) of rediss:// servers, their lock and their last session tickets",
     "forgotten (leaked): a thread of the parent may have held a lock of theirs; the child makes its own, and "
     "abandons the TLS sessions it inherited without freeing them",
     true},
    {State::request_record, "api/request_record.cpp", "the request record's lock, file and the lines it knows",
     "made anew for the same file, reopened at the child's first record (an flock is per open file)", true},
    {State::cache_flights, "cache/cache.cpp", "the single-flight table, the hit memo, the compiles in flight",
     "emptied: the parent's compiles do not run in the child", true},
    {State::pch_prices, "cache/pch_price.cpp", "the misses of each header identity asked about, the PCHs made",
     "forgotten: the child makes its own PCHs", true},
    {State::api_counters, "api/c_api_support.cpp", "the counters kjit_get_stats reads",
     "kept: the child's go on from them", false},
    {State::nvrtc_table, "compile/nvrtc_library.cpp", "the loaded NVRTC's entry points",
     "kept: the library stays mapped; its own lock is the gate's business", false},
    {State::nvrtc_identity, "compile/nvrtc_probe.cpp", "NVRTC's identity as a record proved it",
     "kept: the same library", false},
    {State::nvjitlink_table, "compile/nvjitlink_library.cpp", "the loaded nvJitLink's entry points",
     "kept: the library stays mapped", false},
    {State::nvjitlink_identity, "compile/nvjitlink_probe.cpp", "nvJitLink's identity as a record proved it",
     "kept: the same library", false},
    {State::tls_library, "storage/remote/tls_session.cpp", "the loaded libssl's entry points (rediss:// servers)",
     "kept: the library stays mapped", false},
    {State::per_thread, "util/folder_trust.cpp, storage/remote/redis_client.cpp, api/c_api_support.cpp",
     "thread_local memos, Redis connections (and their TLS sessions), error text",
     "only the forking thread's copy reaches the child; Redis connections are dropped at use by generation (a TLS "
     "session abandoned, not freed)",
     false},
};

constexpr bool in_order() {
    for (unsigned i = 0; i < kCount; ++i) {
        if (static_cast<unsigned>(kPieces[i].state) != i) return false;
    }
    return true;
}
static_assert(in_order(), "kPieces lists every State once, in its order");

// Zero-initialised before any initializer runs, so registrations while libkjit loads count.
std::atomic<unsigned> registered[kCount];

std::atomic<std::uint64_t> fork_generation{0};

void next_generation() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

// Registered while libkjit loads (the order among handlers does not matter: each renews its own).
[[maybe_unused]] const bool generation_registered = at_fork_child(State::generation, next_generation);

}  // namespace

std::uint64_t generation() noexcept { return fork_generation.load(std::memory_order_relaxed); }

const Piece (&pieces() noexcept)[kCount] { return kPieces; }

unsigned handlers_registered(State state) noexcept {
    return registered[static_cast<unsigned>(state)].load(std::memory_order_relaxed);
}

bool at_fork_child(State state, void (*reset)()) noexcept { return at_fork(state, nullptr, nullptr, reset); }

bool at_fork(State state, void (*prepare)(), void (*parent)(), void (*child)()) noexcept {
    registered[static_cast<unsigned>(state)].fetch_add(1, std::memory_order_relaxed);
    if (::pthread_atfork(prepare, parent, child) == 0) return true;
    // Not through the logger: this runs while libkjit loads, before the logger may exist.
    std::fputs("libkjit: pthread_atfork failed: a forked child may inherit locks held at the fork\n", stderr);
    return false;
}

}  // namespace kjit::fork_guard
