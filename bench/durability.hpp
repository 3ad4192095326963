// Misses against raw compiles with the disk quiet and busy, in each durability mode (issue 51,
// item 7): the link and sweep scenarios' cold / raw beside a process that keeps the disk busy.
//
// A miss publishes its entry; with KJIT_DURABILITY=entry it fsyncs the cubin and the entry folder
// first, and an fsync waits behind whatever else the disk has queued. On a quiet disk that is
// a few milliseconds against a compile of tens; beside a writer that keeps the disk's queue full
// (a checkpoint, a build, a log) each fsync waits for its turn. DiskBusy is that writer: a
// child process that writes and fdatasyncs a file in a loop, for the measured rows only.
#pragma once

#include "report.hpp"

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kjit_bench {

// A child process that keeps the disk of `folder` busy while this object lives: it rewrites
// 4 MiB blocks of a 64 MiB file there, each followed by fdatasync, in a loop. Stopped (SIGKILL,
// reaped) and its file removed by stop() or the destructor.
class DiskBusy {
public:
    explicit DiskBusy(const std::string &folder);
    ~DiskBusy();
    DiskBusy(const DiskBusy &) = delete;
    DiskBusy &operator=(const DiskBusy &) = delete;
    // Stops the child now; returns the fdatasyncs it made, counted through a pipe (a lower
    // bound once the pipe is full; also after a second call).
    long stop();

private:
    std::string file_;
    pid_t pid_ = -1;
    int pipe_ = -1;
    long rounds_ = 0;
};

// The durability modes and disk conditions measured, in report order.
extern const char *const kDurabilityModes[2];  // "none" (the default), "entry"
extern const char *const kDiskConditions[2];   // "quiet", "busy"

// A kjit_compile miss: its time, and of that the compiler's (NVRTC and nvJitLink, from
// kjit_get_stats), so that the rest (key, scan, publish and its fsyncs) is known to the us
// where the compile's own noise is milliseconds.
struct ColdMiss {
    double us = 0;
    double compiler_us = 0;
};

// One kernel: its raw compile's time, and a kjit_compile miss's into the empty cache `cache`.
struct DurabilityKernel {
    std::function<double(int kernel)> raw_us;
    std::function<ColdMiss(int kernel, const std::string &cache)> cold;
};

// Per condition and mode ("busy.entry"): each kernel's raw and cold time, cold / raw, and the
// cold miss's time outside the compiler.
struct DurabilityFigures {
    std::map<std::string, std::vector<double>> raw, cold, ratio, outside;
    std::map<std::string, long> busy_rounds;  // the busy writer's fdatasyncs, per mode
};

// For each condition and mode: `kernels` kernels, each raw and cold in turn (alternating which
// goes first), each mode into a new empty cache under `folder`, with KJIT_DURABILITY set to the
// mode (and put back after); a progress line labelled `what`.
DurabilityFigures run_durability(const std::string &folder, int kernels, const DurabilityKernel &k,
                                 const std::string &what);

// The section's rows ("<prefix>.<condition>_raw", "<prefix>.<condition>_<mode>" and
// "<prefix>.<condition>_<mode>_outside"), its notes, and
// the targets "<target_prefix>_busy_cold_over_raw" (the default mode, at most 1.05x) and
// "<target_prefix>_busy_entry_cold_over_raw" (KJIT_DURABILITY=entry, for comparison, the same goal).
void report_durability(Report &report, Section &s, const DurabilityFigures &f, const std::string &prefix,
                       const std::string &target_prefix, const std::string &what);

}  // namespace kjit_bench
