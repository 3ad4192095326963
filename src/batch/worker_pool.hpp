// Worker pool: the worker processes of a batch, as the calling process sees them. NVRTC runs
// header-heavy compiles one at a time inside a process, so a batch that should use more than one
// core compiles in worker processes: kjit-worker, a small helper installed beside libkjit.so
// (worker/main.cpp), each started with posix_spawn (never a fork of the host, which may hold
// locks or a CUDA context) and driven over a Unix socket (worker_protocol.hpp). A worker only
// runs NVRTC; keys, look-ups, locks, publishing, progress and cancellation stay in the calling
// process (cache.hpp, compiler.hpp). Knows the worker protocol and the compiler.
#pragma once

#include "compile/job.hpp"
#include "util/status.hpp"

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace kjit::batch::worker_pool {

// The helper's name, beside the library.
constexpr const char *kHelperName = "kjit-worker";

// The helper to start: $KJIT_WORKER when set, else kjit-worker in the folder of the file that
// holds this code (libkjit.so; an executable linking libkjit's objects statically: its own
// folder). Errc::not_found naming the path looked at and what to do when it is no executable
// file.
Result<std::string> helper_path();

// One worker process, driven by one thread at a time: a batch gives each of its worker threads
// one. Started on the first run(); it keeps NVRTC loaded and its automatic PCHs across jobs.
// Ends with this object (its socket closed, the process waited for), and with the thread that
// started it if that thread ends first, or with this process if it dies (PR_SET_PDEATHSIG).
class WorkerProcess final : public compile::JobRunner {
public:
    explicit WorkerProcess(std::string helper);
    WorkerProcess(const WorkerProcess &) = delete;
    WorkerProcess &operator=(const WorkerProcess &) = delete;
    // Closes the socket and waits for the worker to exit; after 5 s it is killed.
    ~WorkerProcess() override;

    // Runs `job` in the worker, starting one first when none runs. A worker that dies or breaks
    // the protocol during a job is replaced, and the job run once more on the fresh one; if that
    // one fails too, Errc::nvrtc saying how each ended (e.g. "killed by signal 11"). A worker
    // that cannot be started, says no hello within 30 s, speaks another protocol version or has
    // another NVRTC than this process (its cubins would be filed under this NVRTC's keys) fails
    // the job with that reason (Errc::io, not_found or nvrtc), and is not retried.
    compile::JobOutcome run(const compile::Job &job) override;

    // The running worker's pid, or 0 (tests).
    pid_t pid() const { return pid_; }

private:
    Status start();
    // Ends the worker (closing its socket first) and says how it ended.
    std::string stop();
    // One try of `job` on a running worker: its outcome, or why the worker failed.
    Result<compile::JobOutcome> exchange(const compile::Job &job);

    std::string helper_;
    std::string peer_;  // "kjit-worker (pid N)", for messages
    pid_t pid_ = 0;
    int fd_ = -1;
};

// Worker processes started by this process so far (tests, the bench).
std::uint64_t workers_started();

}  // namespace kjit::batch::worker_pool
