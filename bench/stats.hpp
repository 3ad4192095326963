// Summaries of timings for the bench: one Row per measured thing, as median and spread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace kjit_bench {

using Clock = std::chrono::steady_clock;

inline double elapsed_us(Clock::time_point t0, Clock::time_point t1) {
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// Times `body` once, in microseconds (steady_clock, CLOCK_MONOTONIC).
template <typename Body>
double time_once(Body &&body) {
    const auto t0 = Clock::now();
    body();
    return elapsed_us(t0, Clock::now());
}

// One row of the summary table: a summary of timings in microseconds, or why there is none.
struct Row {
    std::string id;     // stable key for --json, e.g. "sweep.hit_1t"
    std::string label;  // what was timed, for people
    bool skipped = false;
    std::string reason;  // why skipped
    long samples = 0;
    double median_us = 0, p10_us = 0, p90_us = 0;
};

// Linear interpolation between closest ranks (numpy's default); `v` sorted.
inline double percentile(const std::vector<double> &v, double q) {
    if (v.empty()) return std::nan("");
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return percentile(v, 0.5);
}

inline Row summarize(std::string id, std::string label, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    Row r;
    r.id = std::move(id);
    r.label = std::move(label);
    r.samples = static_cast<long>(us.size());
    r.median_us = percentile(us, 0.5);
    r.p10_us = percentile(us, 0.1);
    r.p90_us = percentile(us, 0.9);
    return r;
}

inline Row skipped_row(std::string id, std::string label, std::string reason) {
    Row r;
    r.id = std::move(id);
    r.label = std::move(label);
    r.skipped = true;
    r.reason = std::move(reason);
    return r;
}

}  // namespace kjit_bench
