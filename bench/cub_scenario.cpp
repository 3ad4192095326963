// Scenario 5: a cold sweep of N header-heavy CUB kernels (cub_kernels.hpp), one program and
// cache entry each, compiled five ways, each in a fresh process (this program, spawned), as an
// autotuner's first run would be, so each pays NVRTC's start-up and, with PCH, the first
// compile that creates the precompiled header:
//   raw               sequential plain NVRTC (create, compile, get the cubin, destroy), no cache
//   batch 1 PCH       kjit_compile_batch, 1 worker thread, NVRTC's automatic PCH
//   batch 2 PCH       kjit_compile_batch, 2 worker threads, PCH
//   batch 2           kjit_compile_batch, 2 worker threads, plain compiles
//   batch 2 proc PCH  kjit_compile_batch, 2 worker processes (kjit-worker), PCH in each
//   sequential        kjit_compile one kernel at a time, as an autotuner's loop does: a PCH where
//                     the measured prices say it pays (docs/batch.md#misses-compiled-alone), on a
//                     cache with no record yet
//   sequential known  the same in a later process, on a fresh cache holding the first's record
// The child times its own work (from before the first compile to after the last), so process
// start-up (tens of ms) is not counted, and says the largest resident set of its worker
// processes (getrusage of its reaped children) and its own. The caches must hold the same
// entries, each kernel its own name.
// Then, in this process with raw NVRTC, the price of a PCH's creation (what each worker
// process pays once): one kernel plain, one that creates the PCH, one that uses it.
// Then, for one large program (cub_large_source: four sort+scan instantiations), raw NVRTC
// plain against --split-compile=2 and =0 (NVRTC's parallel optimizer), alternating, in this
// process, median of --split-rounds (3) each.
//
// Scenario "scaling" (not run by default; `--only scaling`, for machines with many cores): the
// same CUB sweep with PCH on 1, 2, 4, ... workers (--scaling-workers), threads against worker
// processes, each in a fresh process.
#include "scenarios.hpp"

#include "batch_run.hpp"
#include "cub_kernels.hpp"
#include "raw_nvrtc.hpp"
#include "support.hpp"

#include "kjit/kjit.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <set>

namespace kjit_bench {

namespace {

struct Mode {
    std::string id;  // the child's MODE argument and the row id
    std::string label;
    unsigned workers;  // 0: raw NVRTC
    int pch;
    int kind;  // a kjit_worker_kind
};

const std::vector<Mode> &cub_modes() {
    static const std::vector<Mode> modes = {
        {"raw", "sequential plain NVRTC, 1 thread, no cache", 0, KJIT_PCH_OFF, KJIT_WORKERS_THREADS},
        {"batch_1w_pch", "kjit_compile_batch, 1 worker thread, PCH", 1, KJIT_PCH_ON, KJIT_WORKERS_THREADS},
        {"batch_2w_pch", "kjit_compile_batch, 2 worker threads, PCH", 2, KJIT_PCH_ON, KJIT_WORKERS_THREADS},
        {"batch_2w_plain", "kjit_compile_batch, 2 worker threads, no PCH", 2, KJIT_PCH_OFF, KJIT_WORKERS_THREADS},
        {"batch_2p_pch", "kjit_compile_batch, 2 worker processes, PCH", 2, KJIT_PCH_ON, KJIT_WORKERS_PROCESSES},
        {"sequential", "kjit_compile one at a time, no PCH prices yet", 1, KJIT_PCH_DEFAULT, KJIT_WORKERS_THREADS},
        {"sequential_known", "kjit_compile one at a time, PCH prices of an earlier process", 1, KJIT_PCH_DEFAULT,
         KJIT_WORKERS_THREADS},
    };
    return modes;
}
constexpr std::size_t kRaw = 0, kOneThreadPch = 1, kTwoThreadsPch = 2, kTwoThreadsPlain = 3, kTwoProcessesPch = 4,
                      kSequential = 5, kSequentialKnown = 6;
bool one_at_a_time(const Mode &m) { return m.id.rfind("sequential", 0) == 0; }

// A scaling run's mode: "scale_threads_<W>" or "scale_processes_<W>", with PCH.
Mode scaling_mode(bool processes, unsigned workers) {
    const std::string kind = processes ? "processes" : "threads";
    return Mode{"scale_" + kind + "_" + std::to_string(workers),
                "kjit_compile_batch, " + std::to_string(workers) + " worker " + kind + ", PCH", workers, KJIT_PCH_ON,
                processes ? KJIT_WORKERS_PROCESSES : KJIT_WORKERS_THREADS};
}

std::optional<Mode> mode_named(const std::string &id) {
    for (const Mode &m : cub_modes()) {
        if (id == m.id) return m;
    }
    for (const char *kind : {"threads", "processes"}) {
        const std::string prefix = std::string("scale_") + kind + "_";
        if (id.rfind(prefix, 0) == 0) {
            const int w = std::atoi(id.c_str() + prefix.size());
            if (w >= 1 && w <= 256) return scaling_mode(std::string(kind) == "processes", static_cast<unsigned>(w));
        }
    }
    return std::nullopt;
}

// What one CUB child reported.
struct ChildRun {
    double wall_us = 0;
    double worker_maxrss_mib = 0;  // the largest of its reaped children (its worker processes)
    double self_maxrss_mib = 0;
};

// Runs the CUB child for `mode` over a fresh cache under the work folder; the cache stays in
// `caches`.
// `prices_from`: a cache folder whose PCH prices the fresh cache starts with (empty: none).
ChildRun run_cub_child(const BenchOptions &o, const Mode &mode, int n, std::vector<std::unique_ptr<TempDir>> &caches,
                       const std::string &prices_from = "") {
    caches.push_back(std::make_unique<TempDir>(o.work_dir, "cub-" + mode.id + "-"));
    if (!prices_from.empty()) {
        const std::string record = read_file(prices_from + "/.kjit-pch-prices");
        if (record.empty()) fail("the sequential CUB sweep left no PCH prices in '" + prices_from + "'");
        write_file(caches.back()->path() + "/.kjit-pch-prices", record);
    }
    std::fprintf(stderr, "cub: %s, %d kernels in a fresh process...\n", mode.label.c_str(), n);
    const ChildResult r =
        run_child({self_executable(), "--cub-child", mode.id, caches.back()->path(), std::to_string(n), o.arch});
    if (!r.started || r.exit_status != 0) {
        fail("the CUB child (" + mode.id + ") failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
    }
    auto number = [&](const char *label) {
        const std::size_t at = r.out.find(label);
        if (at == std::string::npos) fail("the CUB child (" + mode.id + ") printed no " + label + ": " + r.out);
        return std::strtod(r.out.c_str() + at + std::strlen(label), nullptr);
    };
    ChildRun run{number("wall_us "), number("worker_maxrss_kb ") / 1024, number("self_maxrss_kb ") / 1024};
    std::fprintf(stderr, "cub: %s: %.1f s\n", mode.label.c_str(), run.wall_us / 1e6);
    return run;
}

// "<shard>/<key>" of every entry in a cache folder, sorted (not the variants files that list a
// source key's entries: docs/cache-layout.md).
std::vector<std::string> entries_of(const std::string &cache) {
    std::vector<std::string> out;
    auto list = [](const std::string &dir) {
        std::vector<std::string> names;
        if (DIR *d = ::opendir(dir.c_str())) {
            while (const dirent *e = ::readdir(d)) {
                if (e->d_name[0] != '.') names.emplace_back(e->d_name);
            }
            ::closedir(d);
        }
        return names;
    };
    for (const std::string &shard : list(cache)) {
        for (const std::string &key : list(cache + "/" + shard)) {
            if (key.size() == 32) out.push_back(shard + "/" + key);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

int cub_child_main(const std::string &mode_id, const std::string &cache, int n, const std::string &arch) {
    const std::optional<Mode> mode = mode_named(mode_id);
    if (!mode) {
        std::fprintf(stderr, "kjit-bench --cub-child: unknown mode '%s'\n", mode_id.c_str());
        return 2;
    }
    std::vector<std::string> sources;
    for (const CubConfig &c : cub_configs(n)) sources.push_back(cub_source(c));
    const std::vector<std::string> options = cub_nvrtc_options();
    try {
        const auto started = Clock::now();
        if (mode->workers == 0) {
            for (const std::string &s : sources) raw_nvrtc_compile(s, arch, options);
        } else {
            std::vector<const char *> argv;
            for (const std::string &opt : options) argv.push_back(opt.c_str());
            kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
            opts.cache_dir = cache.c_str();
            opts.arch = arch.c_str();
            opts.nvrtc_options = argv.data();
            opts.nvrtc_option_count = argv.size();
            if (one_at_a_time(*mode)) {
                char path[4096];
                for (const std::string &s : sources) {
                    const kjit_status st = kjit_compile(s.c_str(), kCubKeyword, &opts, path, sizeof path, nullptr);
                    if (st != KJIT_OK) fail_kjit("kjit_compile of a CUB kernel", st);
                }
            } else {
                run_batch(sources, kCubKeyword, opts, mode->workers, mode->pch, "cub: " + mode->label, mode->kind);
            }
        }
        std::printf("wall_us %.0f\n", elapsed_us(started, Clock::now()));
        rusage children{}, self{};
        ::getrusage(RUSAGE_CHILDREN, &children);
        ::getrusage(RUSAGE_SELF, &self);
        std::printf("worker_maxrss_kb %ld\nself_maxrss_kb %ld\n", children.ru_maxrss, self.ru_maxrss);
        return 0;
    } catch (const BenchError &e) {
        std::fprintf(stderr, "kjit-bench --cub-child %s: %s\n", mode_id.c_str(), e.what());
        return 1;
    }
}

// The price of a PCH, in this process with raw NVRTC, after a warm-up compile: a kernel
// plain, a kernel that creates the PCH (in a fresh folder, NVRTC's PCH heap emptied first), a
// third that uses it; median of `rounds`.
void measure_pch_creation(const BenchOptions &o, Report &report, int rounds) {
    std::fprintf(stderr, "cub: the price of creating a PCH (raw NVRTC, %d rounds)...\n", rounds);
    const std::vector<CubConfig> configs = cub_configs(3);
    const std::vector<std::string> base = cub_nvrtc_options();
    raw_nvrtc_compile(cub_source(configs[0]), o.arch, base);
    std::vector<double> plain, create, use;
    for (int round = 0; round < rounds; ++round) {
        TempDir pch_dir(o.work_dir, "cub-pch-");
        std::vector<std::string> with_pch = base;
        with_pch.insert(with_pch.end(), {"-pch", "-pch-dir=" + pch_dir.path(), "-pch-messages=false"});
        plain.push_back(time_once([&] { raw_nvrtc_compile(cub_source(configs[0]), o.arch, base); }));
        forget_nvrtc_pch();
        create.push_back(time_once([&] { raw_nvrtc_compile(cub_source(configs[1]), o.arch, with_pch); }));
        use.push_back(time_once([&] { raw_nvrtc_compile(cub_source(configs[2]), o.arch, with_pch); }));
        forget_nvrtc_pch();
    }
    Section &s = report.section("pch", "one CUB kernel, raw NVRTC, " + o.arch + ": plain, creating the PCH, using it");
    s.rows.push_back(summarize("pch.plain", "plain compile", plain));
    s.rows.push_back(summarize("pch.create", "compile that creates the PCH", create));
    s.rows.push_back(summarize("pch.use", "compile that uses the PCH", use));
    char note[256];
    std::snprintf(note, sizeof note,
                  "a PCH's creation costs %.2f s over a plain compile (each worker process pays it once per set of "
                  "headers); a compile that uses it is %.2fx faster than plain (medians)",
                  (median(create) - median(plain)) / 1e6, median(plain) / median(use));
    s.notes.push_back(note);
}

void run_cub(const BenchOptions &o, Report &report) {
    if (o.cub_kernels > cub_size()) fail("--cub-kernels is at most " + std::to_string(cub_size()));
    const int n = o.cub_kernels;
    const std::vector<Mode> &modes = cub_modes();
    std::vector<ChildRun> runs;
    std::vector<std::vector<std::string>> entries;
    std::vector<std::unique_ptr<TempDir>> caches;
    for (std::size_t m = 0; m < modes.size(); ++m) {
        runs.push_back(
            run_cub_child(o, modes[m], n, caches, m == kSequentialKnown ? caches[kSequential]->path() : std::string()));
        if (modes[m].workers > 0) entries.push_back(entries_of(caches.back()->path()));
    }
    // The batches' caches agree, entry for entry, and hold n distinct kernels.
    for (const auto &e : entries) {
        if (e != entries.front()) fail("the CUB batches left different cache entries");
        if (e.size() != static_cast<std::size_t>(n)) {
            fail("a CUB batch left " + std::to_string(e.size()) + " entries for " + std::to_string(n) + " kernels");
        }
    }
    std::set<std::string> names;
    for (const std::string &entry : entries.front()) {
        const std::string cubin = caches[1]->path() + "/" + entry + "/kernel.cubin";
        char name[512];
        const kjit_status s = kjit_resolve_name(cubin.c_str(), kCubKeyword, name, sizeof name, nullptr);
        if (s != KJIT_OK) fail_kjit("kjit_resolve_name on '" + cubin + "'", s);
        if (!names.insert(name).second) fail(std::string("two CUB kernels resolved to '") + name + "'");
    }

    Section &s = report.section("cub", "cold sweep of " + std::to_string(n) + " CUB BlockLoad+BlockReduce kernels, " +
                                           o.arch + ", each way in a fresh process, per kernel (wall / N)");
    double best = 0;
    std::string best_label;
    char note[512];
    for (std::size_t m = 0; m < modes.size(); ++m) {
        s.rows.push_back(summarize("cub." + modes[m].id, modes[m].label, {runs[m].wall_us / n}));
        if (m == kRaw) continue;
        const double speedup = runs[kRaw].wall_us / runs[m].wall_us;
        std::snprintf(note, sizeof note, "%s: %.1f s, %.2fx faster than sequential plain NVRTC (%.1f s)",
                      modes[m].label.c_str(), runs[m].wall_us / 1e6, speedup, runs[kRaw].wall_us / 1e6);
        s.notes.push_back(note);
        if (speedup > best) {
            best = speedup;
            best_label = modes[m].label;
        }
    }
    std::snprintf(note, sizeof note,
                  "PCH with 2 worker threads vs without: %.2fx; 2 worker threads vs 1, with PCH: %.2fx",
                  runs[kTwoThreadsPlain].wall_us / runs[kTwoThreadsPch].wall_us,
                  runs[kOneThreadPch].wall_us / runs[kTwoThreadsPch].wall_us);
    s.notes.push_back(note);
    const double processes_over_best_threads =
        std::min(runs[kOneThreadPch].wall_us, runs[kTwoThreadsPch].wall_us) / runs[kTwoProcessesPch].wall_us;
    std::snprintf(note, sizeof note,
                  "2 worker processes with PCH vs the best thread setting with PCH: %.2fx; largest resident set of a "
                  "worker process %.0f MiB (the 1-thread batch process: %.0f MiB)",
                  processes_over_best_threads, runs[kTwoProcessesPch].worker_maxrss_mib,
                  runs[kOneThreadPch].self_maxrss_mib);
    s.notes.push_back(note);
    // Item 4 of issue 51: misses compiled one at a time reuse headers where it pays.
    std::snprintf(note, sizeof note,
                  "kjit_compile one at a time vs sequential plain NVRTC: %.2fx with no PCH prices yet, %.2fx with an "
                  "earlier process's",
                  runs[kRaw].wall_us / runs[kSequential].wall_us, runs[kRaw].wall_us / runs[kSequentialKnown].wall_us);
    s.notes.push_back(note);
    for (const std::size_t m : {kSequential, kSequentialKnown}) {
        Target t{"cub_" + modes[m].id + "_over_raw", "CUB cold sweep: " + modes[m].label + " vs sequential plain NVRTC",
                 1.5};
        t.value = runs[kRaw].wall_us / runs[m].wall_us;
        report.add_target(t);
    }
    Target processes_target{"cub_processes_over_best_threads",
                            "CUB cold sweep: 2 worker processes vs the best thread setting, both with PCH", 1.6};
    processes_target.value = processes_over_best_threads;
    report.add_target(processes_target);
    measure_pch_creation(o, report, o.split_rounds);
    // --split-compile on one large program: alternating rounds, after one untimed compile.
    std::fprintf(stderr, "cub: one large program, plain and with --split-compile=2 and =0, %d rounds...\n",
                 o.split_rounds);
    const std::string large = cub_large_source();
    const std::vector<std::string> base = cub_nvrtc_options();
    const std::vector<std::pair<const char *, const char *>> splits = {{"plain", nullptr},
                                                                       {"--split-compile=2", "--split-compile=2"},
                                                                       {"--split-compile=0 (all CPUs)",
                                                                        "--split-compile=0"}};
    raw_nvrtc_compile(large, o.arch, base);
    std::vector<std::vector<double>> split_us(splits.size());
    for (int round = 0; round < o.split_rounds; ++round) {
        for (std::size_t k = 0; k < splits.size(); ++k) {
            std::vector<std::string> opts = base;
            if (splits[k].second) opts.push_back(splits[k].second);
            split_us[k].push_back(time_once([&] { raw_nvrtc_compile(large, o.arch, opts); }));
        }
    }
    Section &sp =
        report.section("split", "one large CUB program (4 BlockRadixSort+BlockScan instantiations), raw NVRTC, " +
                                    o.arch + ", per compile");
    for (std::size_t k = 0; k < splits.size(); ++k) {
        sp.rows.push_back(summarize(std::string("split.") + (k == 0   ? "plain"
                                                             : k == 1 ? "split2"
                                                                      : "split0"),
                                    splits[k].first, split_us[k]));
    }
    std::snprintf(note, sizeof note, "--split-compile=2 vs plain: %.2fx; --split-compile=0 vs plain: %.2fx (medians)",
                  median(split_us[0]) / median(split_us[1]), median(split_us[0]) / median(split_us[2]));
    sp.notes.push_back(note);

    Target t{"cub_best_batch_over_raw",
             "CUB cold sweep: best batch setting vs sequential plain NVRTC (" + best_label + ")", 2.5};
    t.value = best;
    report.add_target(t);
    report.meta["cub"] = {{"kernels", n}, {"arch", o.arch}};
}

void run_scaling(const BenchOptions &o, Report &report) {
    if (o.scaling_kernels > cub_size()) fail("--scaling-kernels is at most " + std::to_string(cub_size()));
    const int n = o.scaling_kernels;
    std::vector<std::unique_ptr<TempDir>> caches;
    Section &s = report.section("scaling", "cold sweep of " + std::to_string(n) + " CUB kernels with PCH, " + o.arch +
                                               ": threads against worker processes, each in a fresh process, per "
                                               "kernel (wall / N)");
    double one_thread_us = 0;
    char note[256];
    for (int w : o.scaling_workers) {
        if (w < 1 || w > 256) fail("--scaling-workers takes counts from 1 to 256, not " + std::to_string(w));
        double threads_us = 0;
        for (bool processes : {false, true}) {
            const Mode mode = scaling_mode(processes, static_cast<unsigned>(w));
            const ChildRun run = run_cub_child(o, mode, n, caches);
            caches.pop_back();  // removed now: a 16-way sweep leaves many
            s.rows.push_back(summarize("scaling." + mode.id, mode.label, {run.wall_us / n}));
            if (!processes) threads_us = run.wall_us;
            if (!processes && one_thread_us == 0) one_thread_us = run.wall_us;
            if (processes) {
                std::snprintf(note, sizeof note,
                              "%d workers: threads %.1f s (%.2fx 1 thread), processes %.1f s (%.2fx 1 thread, %.2fx "
                              "threads), worker resident set up to %.0f MiB",
                              w, threads_us / 1e6, one_thread_us / threads_us, run.wall_us / 1e6,
                              one_thread_us / run.wall_us, threads_us / run.wall_us, run.worker_maxrss_mib);
                s.notes.push_back(note);
            }
        }
    }
    report.meta["scaling"] = {{"kernels", n}, {"arch", o.arch}, {"workers", o.scaling_workers}};
}

}  // namespace kjit_bench
