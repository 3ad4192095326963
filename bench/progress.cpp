#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace kjit_bench {

namespace {
constexpr long long kRedrawNs = 100'000'000;
}

Progress::Progress(std::string phase, long total, std::string unit)
    : phase_(std::move(phase)), unit_(std::move(unit)), total_(total), tty_(::isatty(STDERR_FILENO) == 1),
      started_(std::chrono::steady_clock::now()) {
    if (!tty_) {
        std::fprintf(stderr, "%s: %ld %s...\n", phase_.c_str(), total_, unit_.c_str());
    } else {
        draw(0, false);
    }
}

Progress::~Progress() { finish(); }

void Progress::tick() {
    const long done = ++done_;
    if (!tty_) return;
    const long long now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started_).count();
    long long due = next_draw_ns_.load(std::memory_order_relaxed);
    if (now < due || !next_draw_ns_.compare_exchange_strong(due, now + kRedrawNs)) return;
    std::lock_guard<std::mutex> lock(draw_mutex_);
    if (!finished_) draw(done, false);
}

void Progress::finish() {
    std::lock_guard<std::mutex> lock(draw_mutex_);
    if (finished_) return;
    finished_ = true;
    draw(done_.load(), true);
}

void Progress::draw(long done, bool final) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    if (final) {
        std::fprintf(stderr, "%s%s: %ld %s in %.1f s%s\n", tty_ ? "\r" : "", phase_.c_str(), done, unit_.c_str(),
                     seconds, tty_ ? "\033[K" : "");
        return;
    }
    char left[64] = "";
    if (done > 0 && done < total_) {
        std::snprintf(left, sizeof left, ", about %.0f s left",
                      seconds / static_cast<double>(done) * static_cast<double>(total_ - done));
    }
    std::fprintf(stderr, "\r%s: %ld/%ld %s, %.1f s%s\033[K", phase_.c_str(), done, total_, unit_.c_str(), seconds,
                 left);
    std::fflush(stderr);
}

}  // namespace kjit_bench
