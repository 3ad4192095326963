// Scenario 8: one compile per key on the node (docs/cache-layout.md, "One compile per key on the
// node"). P processes (8) start at once on an empty cache and each asks for the same N sweep
// kernels (20) with kjit_compile, one thread each, as the processes of an 8-GPU node do at
// start-up. Two ways, alternating, each on a fresh cache: with the compile lock (the default),
// and with KJIT_COMPILE_WAIT=0 (no process waits for another: each compiles what it misses, as
// before the lock). Wall time from the first spawn to the last exit, and NVRTC runs summed over
// the processes (each reports its kjit_get_stats).
#include "scenarios.hpp"

#include "progress.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include "kjit/kjit.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace kjit_bench {

int node_child_main(const std::string &cache, int n, const std::string &arch, const std::string &wait_s) {
    ::setenv("KJIT_COMPILE_WAIT", wait_s.c_str(), 1);
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = cache.c_str();
    opts.arch = arch.c_str();
    for (const GemmConfig &c : sweep_configs(n)) {
        char path[4096];
        const std::string source = sweep_source(c);
        const kjit_status s = kjit_compile(source.c_str(), kSweepKeyword, &opts, path, sizeof path, nullptr);
        if (s != KJIT_OK) {
            std::fprintf(stderr, "kjit-bench --node-child: %s: %s\n", kjit_status_string(s), kjit_last_error());
            return 1;
        }
    }
    kjit_stats stats = KJIT_STATS_INIT;
    if (kjit_get_stats(&stats) != KJIT_OK) return 1;
    std::printf("%llu\n", static_cast<unsigned long long>(stats.nvrtc_compiles));
    return 0;
}

namespace {

struct NodeRun {
    double wall_us = 0;
    unsigned long long nvrtc_runs = 0;
};

// P children at once on a fresh cache, each with KJIT_COMPILE_WAIT=`wait_s`.
NodeRun run_node(const BenchOptions &o, const std::string &wait_s) {
    TempDir cache(o.work_dir, "node-");
    const std::string self = self_executable();
    std::vector<ChildResult> results(static_cast<std::size_t>(o.node_processes));
    std::vector<std::thread> threads;
    const auto started = Clock::now();
    for (std::size_t i = 0; i < results.size(); ++i) {
        threads.emplace_back([&, i] {
            results[i] =
                run_child({self, "--node-child", cache.path(), std::to_string(o.node_kernels), o.arch, wait_s});
        });
    }
    for (std::thread &t : threads) t.join();
    NodeRun run;
    run.wall_us = elapsed_us(started, Clock::now());
    for (const ChildResult &r : results) {
        if (!r.started || r.exit_status != 0)
            fail("a node child failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
        run.nvrtc_runs += std::strtoull(r.out.c_str(), nullptr, 10);
    }
    return run;
}

}  // namespace

void run_node(const BenchOptions &o, Report &report) {
    const int p = o.node_processes, n = o.node_kernels;
    std::vector<double> locked_us, unlocked_us;
    std::vector<double> locked_runs, unlocked_runs;
    {
        Progress progress("node: " + std::to_string(p) + " processes, the same " + std::to_string(n) +
                              " missing kernels",
                          o.node_repeats * 2, "runs");
        for (int i = 0; i < o.node_repeats; ++i) {
            const NodeRun unlocked = run_node(o, "0");
            progress.tick();
            const NodeRun locked = run_node(o, "600");
            progress.tick();
            unlocked_us.push_back(unlocked.wall_us);
            unlocked_runs.push_back(static_cast<double>(unlocked.nvrtc_runs));
            locked_us.push_back(locked.wall_us);
            locked_runs.push_back(static_cast<double>(locked.nvrtc_runs));
        }
    }
    Section &s = report.section("node", std::to_string(p) + " processes start at once and ask for the same " +
                                            std::to_string(n) + " missing kernels (kjit_compile, 1 thread each)");
    s.rows.push_back(summarize("node.locked", "with the compile lock: first spawn to last exit", locked_us));
    s.rows.push_back(summarize("node.unlocked", "KJIT_COMPILE_WAIT=0 (no waiting: as before the lock)", unlocked_us));
    char note[256];
    std::snprintf(note, sizeof note,
                  "NVRTC runs over all processes (median): %.0f with the lock, %.0f without, of %d "
                  "requests; wall without / with: %.2fx",
                  median(locked_runs), median(unlocked_runs), p * n, median(unlocked_us) / median(locked_us));
    s.notes.push_back(note);
    Target once{"node_nvrtc_runs_per_key", "node: NVRTC runs per key, " + std::to_string(p) + " processes at once", 1.0,
                true};
    once.value = median(locked_runs) / n;
    report.add_target(once);
}

}  // namespace kjit_bench
