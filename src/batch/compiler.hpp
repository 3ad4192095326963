// Batch compiler: many cache requests at once, for an autotuner's cold sweep
// (kjit_compile_batch). Every request is looked up on the calling thread before any worker
// starts, so hits never wait for a compile; identical requests are merged and compile once; the
// misses run on a pool of workers: threads of this process, where NVRTC's automatic precompiled
// header, which NVRTC ties to the process that made it, serves every item after the first; or,
// for header-heavy misses, which NVRTC compiles one at a time within a process, threads that
// each drive a worker process of their own (worker_pool.hpp). Progress is reported on the
// calling thread, one item at a time. Knows the cache and the worker pool.
#pragma once

#include "batch/worker_kind.hpp"
#include "cache/cache.hpp"
#include "util/status.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kjit::batch::compiler {

// Called once per finished item (a hit, a compile, a merged duplicate, a failure), on the
// thread that called compile(), never concurrently. Returns true to cancel the items not yet
// started. Items compiling when it cancels still finish and are reported.
using Progress =
    std::function<bool(std::size_t done, std::size_t total, std::size_t item, const Result<storage::Found> &result)>;

// When a compile uses NVRTC's automatic precompiled header (docs/batch.md).
enum class Pch {
    automatic,  // where at least 2 misses of one header identity (pch_texts) compile in one
                // process, those on one worker: a PCH's creation costs about one later use's
                // saving (kMinPchUses); as many as the prices recorded for the identity say
                // repay its making (none where using one was slower: cache::pch_price); a
                // header-free source has nothing to precompile (-pch cost it 10-15% on 2
                // workers); --pch among an item's options changes nothing
    on,
    off,
};

struct Options {
    unsigned workers = 1;  // workers at most; fewer are started when there are fewer misses
    // Threads or worker processes. Explicit processes without the helper (batch::worker_pool::
    // helper_path) fail every miss with its error; automatic ones then compile on threads.
    WorkerKind kind = WorkerKind::automatic;
    Pch pch = Pch::automatic;
    Progress progress;  // may be empty
    // How often, at most, the batch records again the use of every entry it handed out while
    // it runs (for other processes' eviction; docs/cache-layout.md). Tests set 0: at every report.
    std::int64_t recency_refresh_ns = 60'000'000'000;
};

// The most requests a batch takes (2^24). A count above it is no array a caller can hold (or
// would take hours to compile and gigabytes of results): the C ABI refuses it before reading
// any request.
constexpr std::size_t kMaxItems = std::size_t{1} << 24;

// One result per item, in order: the cached cubin's path and kernel name, or the item's error: the one it came
// with (items the caller could not turn into a request), the cache's, or Errc::cancelled for
// items not started after the progress callback asked to stop. Thread safe; batches and single
// compiles in other threads or processes may work on the same keys at once. If the progress
// callback throws, the workers finish what they started and the exception propagates.
std::vector<Result<storage::Found>> compile(std::vector<Result<key::Request>> items, const Options &options);

}  // namespace kjit::batch::compiler
