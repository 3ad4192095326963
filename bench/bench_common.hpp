// Helpers shared by the bench programs: robust summaries of timings, and output.
#pragma once

#include <sys/statfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace kjit_bench {

using Clock = std::chrono::steady_clock;

// One row of a bench table: a summary of per-call timings in microseconds.
struct Row {
    std::string id;
    std::string label;
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

inline std::string folder_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

// The filesystem a folder is on, for the report (timings depend on it).
inline std::string filesystem_name(const std::string &folder) {
    struct statfs sf {};
    if (::statfs(folder.c_str(), &sf) != 0) return "unknown";
    const auto type = static_cast<unsigned long>(sf.f_type);
    switch (type) {
        case 0xEF53UL: return "ext2/3/4";
        case 0x01021994UL: return "tmpfs";
        case 0x794C7630UL: return "overlayfs";
        case 0x58465342UL: return "xfs";
        case 0x9123683EUL: return "btrfs";
        case 0x6969UL: return "nfs";
        case 0x65735546UL: return "fuse";
        case 0x2FC12FC1UL: return "zfs";
        default: break;
    }
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%lx", type);
    return hex;
}

inline std::string json_escape(const std::string &s) {
    std::string out;
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", u);
            out += esc;
        } else {
            out += c;
        }
    }
    return out;
}

}  // namespace kjit_bench
