// kjit-link-child: the link scenario's fresh process (link_scenario.cpp), which asks a warm cache
// for the link-time kernels with kjit_compile, one thread, and prints what its hits cost:
//
//   kjit-link-child CACHE LIBRARY ARCH KERNELS REPEATS
//
// Kernels 0 .. KERNELS-1 of bench/link_kernels.cpp, each linked with the LTO-IR file LIBRARY, in
// turn (each call a first hit: the process's first call pays libkjit's set-up, the others a hit
// of a key this process has not asked for), then REPEATS rounds of all of them (hits the
// in-process memo answers, after a stat of LIBRARY). Prints one line of "name=value" words: the
// first call's time, the median first hit of the others, the median memo hit (microseconds),
// its kjit_get_stats counters, and whether NVRTC or nvJitLink ended up mapped (a process that
// only hits loads neither). It links libkjit.so alone, as a kernel library does: the bench
// links NVRTC and nvJitLink itself, for its raw baseline.
#include "link_kernels.hpp"

#include "kjit/kjit.h"
#include "kjit/kjit_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Whether a library whose file name holds `stem` is mapped into this process.
bool mapped(const char *stem) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        if (line.find(stem) != std::string::npos) return true;
    }
    return false;
}

struct Kernel {
    std::vector<std::string> options;
    std::vector<const char *> option_ptrs;
};

}  // namespace

int main(int argc, char **argv) {
    const int kernels = argc == 6 ? std::atoi(argv[4]) : 0;
    const int repeats = argc == 6 ? std::atoi(argv[5]) : 0;
    if (kernels < 1 || kernels > kjit_bench::link_kernel_variants() || repeats < 1) {
        std::fprintf(stderr, "usage: kjit-link-child CACHE LIBRARY ARCH KERNELS(1-%d) REPEATS(>0)\n",
                     kjit_bench::link_kernel_variants());
        return 2;
    }
    const std::string source = kjit_bench::link_kernel_source();
    const char *inputs[] = {argv[2]};
    std::vector<Kernel> ks(static_cast<std::size_t>(kernels));
    for (int v = 0; v < kernels; ++v) {
        Kernel &k = ks[static_cast<std::size_t>(v)];
        k.options = kjit_bench::link_kernel_options(v);
        for (const std::string &o : k.options) k.option_ptrs.push_back(o.c_str());
    }
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = argv[1];
    opts.arch = argv[3];
    opts.link_inputs = inputs;
    opts.link_input_count = 1;
    auto call = [&](const Kernel &k) {
        opts.nvrtc_options = k.option_ptrs.data();
        opts.nvrtc_option_count = k.option_ptrs.size();
        char path[4096];
        const Clock::time_point t0 = Clock::now();
        const kjit_status s = kjit_compile(source.c_str(), kjit_bench::kLinkKeyword, &opts, path, sizeof path, nullptr);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (s != KJIT_OK) {
            std::fprintf(stderr, "kjit-link-child: %s: %s: %s\n", k.options.front().c_str(), kjit_status_string(s),
                         kjit_last_error());
            std::exit(1);
        }
        return us;
    };
    std::vector<double> first, memo;
    for (const Kernel &k : ks) first.push_back(call(k));
    for (int r = 0; r < repeats; ++r) {
        for (const Kernel &k : ks) memo.push_back(call(k));
    }
    kjit_stats st = KJIT_STATS_INIT;
    if (kjit_get_stats(&st) != KJIT_OK) {
        std::fprintf(stderr, "kjit-link-child: kjit_get_stats: %s\n", kjit_last_error());
        return 1;
    }
    const double kernel_first = kernels > 1 ? median(std::vector<double>(first.begin() + 1, first.end())) : first[0];
    using ull = unsigned long long;
    std::printf("process_first_us=%.2f kernel_first_us=%.2f memo_us=%.3f hits=%llu misses=%llu nvrtc=%llu "
                "nvjitlink=%llu nvrtc_mapped=%d nvjitlink_mapped=%d\n",
                first[0], kernel_first, median(memo), static_cast<ull>(st.compile_hits),
                static_cast<ull>(st.compile_misses), static_cast<ull>(st.nvrtc_compiles),
                static_cast<ull>(st.nvjitlink_links), mapped("libnvrtc") ? 1 : 0, mapped("libnvJitLink") ? 1 : 0);
    return 0;
}
