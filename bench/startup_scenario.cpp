// Scenario 4: start-up of a fresh process that gets the sweep's N kernels ready to launch, the
// way an autotuned application starts: for each kernel kjit_compile (a hit on a warm cache),
// then kjit_load_cached, on one thread. Against the same process on an empty cache (N cold
// compiles), and one that only starts and exits. Wall time from spawn to exit; the warm and
// empty runs alternate, median of --startup-repeats; the cold one runs once. Without a usable
// driver the children resolve the name (kjit_resolve_name) instead of loading, and say so.
#include "scenarios.hpp"

#include "progress.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include "kjit/kjit.h"

#include <cstdio>

namespace kjit_bench {

int startup_child_main(const std::string &mode, const std::string &cache, int n, const std::string &arch) {
    if (mode == "nothing") return 0;
    if (mode != "load" && mode != "resolve") {
        std::fprintf(stderr, "kjit-bench --startup-child: unknown mode '%s'\n", mode.c_str());
        return 2;
    }
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = cache.c_str();
    opts.arch = arch.c_str();
    for (const GemmConfig &c : sweep_configs(n)) {
        char path[4096];
        const std::string source = sweep_source(c);
        kjit_status s = kjit_compile(source.c_str(), kSweepKeyword, &opts, path, sizeof path, nullptr);
        if (s == KJIT_OK && mode == "load") {
            kjit_kernel *kernel = nullptr;  // kept loaded, as an application would, until exit
            s = kjit_load_cached(path, kSweepKeyword, &kernel);
        } else if (s == KJIT_OK) {
            char name[512];
            s = kjit_resolve_name(path, kSweepKeyword, name, sizeof name, nullptr);
        }
        if (s != KJIT_OK) {
            std::fprintf(stderr, "kjit-bench --startup-child: %s: %s\n", kjit_status_string(s), kjit_last_error());
            return 1;
        }
    }
    return 0;
}

void run_startup(const BenchOptions &o, const SweepOutcome &sweep, Report &report) {
    if (sweep.warm_cache.empty()) fail("the start-up scenario needs the sweep's warm cache: run it with the sweep");
    const std::string self = self_executable();
    const std::string mode = sweep.driver_usable ? "load" : "resolve";
    const int n = o.kernels;
    auto child = [&](const std::string &m, const std::string &cache) {
        const ChildResult r = run_child({self, "--startup-child", m, cache, std::to_string(n), o.arch});
        if (!r.started || r.exit_status != 0) {
            fail("the start-up child (" + m + " on " + cache + ") failed, exit " + std::to_string(r.exit_status) +
                 ": " + r.err);
        }
        return r.wall_seconds * 1e6;
    };
    std::vector<double> nothing_us, warm_us;
    {
        Progress progress("startup: fresh processes, warm cache", o.startup_repeats, "runs");
        for (int i = 0; i < o.startup_repeats; ++i) {
            nothing_us.push_back(child("nothing", sweep.warm_cache));
            warm_us.push_back(child(mode, sweep.warm_cache));
            progress.tick();
        }
    }
    double cold_us = 0;
    {
        TempDir empty(o.work_dir, "startup-cold-");
        Progress progress("startup: a fresh process on an empty cache (" + std::to_string(n) + " compiles)", 1, "runs");
        cold_us = child(mode, empty.path());
        progress.tick();
    }
    const std::string ready = sweep.driver_usable ? "kjit_compile hits + kjit_load_cached"
                                                  : "kjit_compile hits + kjit_resolve_name (no driver)";
    Section &s = report.section("startup", "start-up: a fresh process gets " + std::to_string(n) +
                                               " kernels ready, 1 thread, spawn to exit");
    s.rows.push_back(summarize("startup.warm", "warm cache: " + ready, warm_us));
    s.rows.push_back(
        summarize("startup.cold", "empty cache: " + std::to_string(n) + " compiles, then the same", {cold_us}));
    s.rows.push_back(summarize("startup.nothing", "(ref) a process that only starts and exits", nothing_us));
    char note[256];
    std::snprintf(note, sizeof note, "cold / warm: %.0fx; warm minus the bare process: %s for %d kernels",
                  cold_us / median(warm_us), format_us(median(warm_us) - median(nothing_us)).c_str(), n);
    s.notes.push_back(note);
    if (!sweep.driver_usable) s.notes.push_back("no driver: " + sweep.driver_problem);
}

}  // namespace kjit_bench
