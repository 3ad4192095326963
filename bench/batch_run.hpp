// One kjit_compile_batch run for the bench: the sources under one set of options, its progress
// line driven by the batch's own progress callback, timed as a whole.
#pragma once

#include "kjit/kjit.h"

#include <string>
#include <vector>

namespace kjit_bench {

struct BatchRun {
    std::vector<std::string> paths;  // each item's cubin, in request order
    double wall_us = 0;              // the kjit_compile_batch call
    double first_us = 0;             // until the first item was reported (hits come first)
};

// kjit_compile_batch of every source with `keyword` and `options`, `workers`, `pch` (a
// kjit_pch_mode) and `worker_kind` (a kjit_worker_kind). Throws BenchError naming the first
// item that failed.
BatchRun run_batch(const std::vector<std::string> &sources, const char *keyword, const kjit_compile_options &options,
                   unsigned workers, int pch, const std::string &phase, int worker_kind = KJIT_WORKERS_DEFAULT);
// The same with options of its own for each source (in-memory headers of its own, say).
BatchRun run_batch(const std::vector<std::string> &sources, const char *keyword,
                   const std::vector<kjit_compile_options> &options, unsigned workers, int pch,
                   const std::string &phase, int worker_kind = KJIT_WORKERS_DEFAULT);

// Drops NVRTC's precompiled headers held by this process (nvrtcSetPCHHeapSize frees its heap),
// so a batch pays the PCH's creation as in a fresh process. No compile may be running.
void forget_nvrtc_pch();

}  // namespace kjit_bench
