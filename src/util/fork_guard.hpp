// Fork guard: what a forked child keeps of libkjit's in-process state (docs/hardening.md#fork).
//
// A child forked from a multi-threaded process has one thread, the one that called fork(), and
// a copy of the parent's memory as it was at that instant: a lock another thread held stays held
// for ever, a compile or load "in flight" has no thread to finish it, and the CUDA driver's state
// does not carry over at all. Python's multiprocessing forks like that by default on Linux.
//
// So every module that keeps process-wide state makes it anew in the child, from a
// pthread_atfork child handler that runs in the child's only thread before fork() returns
// there. Chosen over prepare handlers that take every lock so that the child gets a consistent
// copy, because:
//  - the child must forget most of that state anyway: in-flight compiles and loaded CUDA
//    libraries are the parent's;
//  - a prepare handler makes fork() wait for whoever holds a lock, and the logger's lock is held
//    across a write to stderr, which blocks for as long as nobody reads a full pipe;
//  - taking a dozen locks on every fork fixes one order among them for every code path, a
//    deadlock waiting for the next path that takes two in another order.
// A handler constructs each object anew in place (renew) without destroying the old one or
// reading what it held, since another thread of the parent may have been half-way through
// changing it: whatever it held is leaked in the child, bounded by what the parent had.
//
// One exception: NVRTC holds a lock of its own inside a compile, which libkjit cannot renew,
// so fork() waits (boundedly) for the NVRTC calls in flight in this process (compiler.hpp).
//
// Handlers are registered while libkjit loads (a namespace-scope initializer in the module that
// owns the state), before any thread can use the state, so no fork comes between the state's
// making and its handler. Every piece of process-wide state is listed below (State, and
// kPieces in fork_guard.cpp: its owner, what it holds, what a child does with it), and a handler
// is registered under its piece's name: one place tells a reader, and a test, what a forked
// child keeps (tests/util/fork_guard_test.cpp checks that each piece that must have a handler has
// exactly one, and that the pieces kept as they are have none). Lazily made singletons are published with a
// compare-and-swap (lazy) rather than a function-local static, whose once-guard a thread of the parent could hold at
// the fork (making the object: the driver's takes dlopen and cuInit) and the child wait on for ever.
//
// Not covered: a process made with clone() or vfork() (no fork handlers run; vfork must exec at
// once anyway) or glibc's _Fork(); and the instant between a call that opens a descriptor and
// its registration (cache_inventory's lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>

namespace kjit::fork_guard {

// Every piece of process-wide state in libkjit, by the module that owns it. kPieces
// (fork_guard.cpp) says for each what it holds and what a forked child does with it.
enum class State : unsigned {
    // Renewed, forgotten or closed in the child by a handler its owner registers:
    generation,         // util/fork_guard.cpp
    logger,             // util/log.cpp
    removers_lock,      // util/filesystem.cpp
    group_membership,   // util/folder_trust.cpp
    sidecar_sweep,      // cubin/sidecar.cpp
    entry_pins,         // store/cache_entry.cpp
    eviction_throttle,  // store/cache_eviction.cpp
    nvrtc_open,         // compile/nvrtc_library.cpp
    nvrtc_gate,         // compile/compiler.cpp (prepare, parent and child handlers)
    nvrtc_records,      // compile/nvrtc_probe.cpp
    nvjitlink_open,     // compile/nvjitlink_library.cpp
    nvjitlink_records,  // compile/nvjitlink_probe.cpp
    link_inputs,        // compile/linker.cpp
    pch_root,           // compile/pch_folders.cpp
    driver,             // load/driver.cpp
    resolver_memo,      // resolve/name_resolver.cpp
    loaded_libraries,   // load/kernel_loader.cpp
    header_watch,       // key/dependency_watch.cpp
    remote_tiers,       // storage/remote/tier.cpp
    host_lookups,       // storage/remote/redis_client.cpp
    tls_contexts,       // storage/remote/tls_session.cpp
    request_record,     // api/request_record.cpp
    cache_flights,      // cache/cache.cpp
    pch_prices,         // cache/pch_price.cpp
    // Kept as they are, on purpose (no handler):
    api_counters,        // api/c_api_support.cpp
    nvrtc_table,         // compile/nvrtc_library.cpp
    nvrtc_identity,      // compile/nvrtc_probe.cpp
    nvjitlink_table,     // compile/nvjitlink_library.cpp
    nvjitlink_identity,  // compile/nvjitlink_probe.cpp
    tls_library,         // storage/remote/tls_session.cpp
    per_thread,          // thread_local state (only the forking thread's copy reaches the child)
    count
};

// One row of the list.
struct Piece {
    State state;
    const char *owner;     // the file that holds it
    const char *holds;     // what it is
    const char *in_child;  // what a forked child does with it
    bool has_handler;      // false: kept as it is, on purpose
};
// The whole list, one row per State, in its order.
const Piece (&pieces() noexcept)[static_cast<unsigned>(State::count)];

// How many handlers were registered for `state` (a test: one for a piece with a handler, none
// for a piece kept as it is).
unsigned handlers_registered(State state) noexcept;

// 0 in the process that loaded libkjit, one more in each forked child (a grandchild: 2).
// Objects that belong to a process (a loaded CUDA library) record it, to tell a parent's.
std::uint64_t generation() noexcept;

// Registers `reset`, the handler of `state`, to run in every child forked from now on
// (pthread_atfork's child handler): in the child's only thread, before fork() returns there, in
// registration order. A handler renews state in place; it must not log (the logger may not be
// renewed yet) nor wait for anything. Returns false when the registration failed (no memory),
// said on stderr.
bool at_fork_child(State state, void (*reset)()) noexcept;

// pthread_atfork with all three handlers, for state that must be quiet at the fork itself (the
// compiler's NVRTC gate: fork waits there for the NVRTC calls in flight). Same rules.
bool at_fork(State state, void (*prepare)(), void (*parent)(), void (*child)()) noexcept;

// Constructs `object` anew in place, leaking what the old one held (see above).
template <typename T>
void renew(T &object) noexcept {
    ::new (static_cast<void *>(std::addressof(object))) T();
}

// The object in `slot`, made by `make()` (returning a new T*) on first use, without a lock or a
// once-guard: threads that race each make one; one is published, the others are deleted. The
// object is never freed (usable during exit). `make` must be safe to run more than once at a
// time and to throw away.
template <typename T, typename Make>
T &lazy(std::atomic<T *> &slot, Make &&make) {
    if (T *existing = slot.load(std::memory_order_acquire)) return *existing;
    std::unique_ptr<T> fresh(make());
    T *expected = nullptr;
    if (slot.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel, std::memory_order_acquire)) {
        return *fresh.release();
    }
    return *expected;
}

}  // namespace kjit::fork_guard
