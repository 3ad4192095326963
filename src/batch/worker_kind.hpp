// What a batch's workers are and how many it may start: the batch part's own vocabulary, which
// the defaults (api/) settle from the environment and the C ABI maps from kjit_worker_kind. It
// lives here, not with the defaults, so that the batch compiler never includes api/ (an arrow
// that would point back up).
#pragma once

namespace kjit::batch::compiler {

// The most workers a batch starts, whatever is asked.
constexpr unsigned kMaxWorkers = 256;

// Where a batch's misses compile (docs/batch.md).
enum class WorkerKind {
    automatic,  // worker processes when more than one worker is asked for and a miss includes
                // headers (NVRTC runs those one at a time within a process), else threads
    threads,    // threads of the calling process
    processes,  // worker processes (kjit-worker, worker_pool.hpp)
};

}  // namespace kjit::batch::compiler
