// A progress line for long phases (the cold sweep takes minutes on 2 cores).
//
// On a terminal (stderr is a tty) it redraws one line, at most every 100 ms:
//   cold sweep, 1 thread: 123/300 kernels, 12.3 s, about 18 s left
// Elsewhere (CI logs, pipes) it prints only the phase's start and end, so logs stay short.
// tick() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace kjit_bench {

class Progress {
public:
    Progress(std::string phase, long total, std::string unit);
    ~Progress();  // finish() if not called
    Progress(const Progress &) = delete;
    Progress &operator=(const Progress &) = delete;

    void tick();
    // Ends the line: "<phase>: <total> <unit> in 12.3 s". Idempotent.
    void finish();

private:
    void draw(long done, bool final);

    std::string phase_, unit_;
    long total_;
    bool tty_;
    std::chrono::steady_clock::time_point started_;
    std::atomic<long> done_{0};
    std::mutex draw_mutex_;  // only taken when a redraw is due, never on every tick
    std::atomic<long long> next_draw_ns_{0};
    bool finished_ = false;
};

}  // namespace kjit_bench
