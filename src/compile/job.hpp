// Job: one NVRTC run as the cache asks for it (the NVRTC request and, when it uses
// NVRTC's automatic precompiled header, the header identity that picks the PCH folder), and the
// runner that carries it out. The cache builds the job and publishes what comes back; where it
// runs is the runner's business: in this process (run_here), or in a worker process
// (worker_pool.hpp sends it over worker_protocol, and kjit-worker calls run_here there). Knows
// the compiler and the PCH folders.
#pragma once

#include "compile/compiler.hpp"
#include "util/status.hpp"

#include <string>
#include <vector>

namespace kjit::compile {

struct Job {
    compile::compiler::Program request;  // without any PCH option
    // The header identity (pch_identity) when the compile uses libkjit's PCH, else empty.
    std::string pch_identity;
    // Passed with libkjit's PCH options (e.g. "--instantiate-templates-in-pch=true").
    std::vector<std::string> pch_options;
    // What is compiled, for messages (the cache key); a worker is not told it.
    std::string label;
};

struct JobOutcome {
    Result<compile::compiler::Output> output;
    bool used_pch = false;  // the compile passed -pch (its folder could be made)
    bool made_pch = false;  // ... and was the first of its identity in the process that ran it
};

// Runs `job` in this process: the PCH folder of its identity (made on first use; none when it
// cannot be made: a plain compile, said in the debug log), then compile::compiler::compile. Thread safe.
JobOutcome run_here(const Job &job);

// Where a job runs. run() is called by one thread at a time per runner.
class JobRunner {
public:
    virtual ~JobRunner() = default;
    virtual JobOutcome run(const Job &job) = 0;
};

}  // namespace kjit::compile
