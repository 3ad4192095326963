#include "util/fork_guard.hpp"

#include <pthread.h>

#include <cstdio>

namespace kjit::fork_guard {

namespace {

std::atomic<std::uint64_t> fork_generation{0};

void next_generation() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

// Registered while libkjit loads (the order among handlers does not matter: each renews its own).
[[maybe_unused]] const bool generation_registered = at_fork_child(next_generation);

}  // namespace

std::uint64_t generation() noexcept { return fork_generation.load(std::memory_order_relaxed); }

bool at_fork_child(void (*reset)()) noexcept { return at_fork(nullptr, nullptr, reset); }

bool at_fork(void (*prepare)(), void (*parent)(), void (*child)()) noexcept {
    if (::pthread_atfork(prepare, parent, child) == 0) return true;
    // Not through the logger: this runs while libkjit loads, before the logger may exist.
    std::fputs("libkjit: pthread_atfork failed: a forked child may inherit locks held at the fork\n", stderr);
    return false;
}

}  // namespace kjit::fork_guard
