// Scenarios 1 and 3: the tuning sweep, cold and warm, and kjit_compile's cold time against raw
// NVRTC on the same sources.
//
// N instantiations of the GEMM-like gemm_tile kernel (sweep_kernels.hpp), each its own program:
//   cold, 1 thread   for each kernel in turn, raw NVRTC and a kjit_compile miss into an empty
//                    cache, alternating which goes first to cancel drift (scenario 3 is this
//                    pairing); after one untimed warm-up of each, so neither carries NVRTC's or
//                    libkjit's one-time process set-up
//   cold, 2 threads  kjit_compile of all N into a second empty cache on 2 threads; its entries
//                    must match the first cache's, name for name
//   cold, batch      kjit_compile_batch of all N into a third empty cache with its defaults
//                    (a worker per CPU; no PCH: these sources #include nothing), the
//                    progress line driven by its callback;
//                    same check
//   warm             on the first cache, in alternating rounds for 1 and 2 threads: kjit_compile
//                    (all hits), kjit_resolve_name, kjit_load_cached up to the driver call
//                    (KernelLoader::prepare: read the cubin once, resolve the name for those
//                    bytes), kjit_load_cached through the driver (released after each round, so
//                    every round loads anew; skipped when no driver answers), and the floor:
//                    open+read+close of each cubin and its sidecar with no libkjit code
// Each call is timed (steady_clock), and each round as a whole: round time / N is the rate.
// Then, on the first 40 kernels (durability.hpp), raw NVRTC and a miss into an empty cache with
// the disk quiet and then busy (a child process writing and fdatasyncing a file in the work
// dir), with KJIT_DURABILITY=none (the default) and entry: the misses' cost of the fsyncs.
#include "scenarios.hpp"

#include "batch_run.hpp"
#include "durability.hpp"
#include "progress.hpp"
#include "raw_nvrtc.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include "kjit/kjit.h"
#include "kjit/kjit_cache.h"
#include "load/kernel_loader.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

namespace kjit_bench {

namespace {

// kjit_compile_named (0.5), looked up at run time rather than linked: the trust scenario runs
// this same program over 0.3.0's libkjit.so, whose loader would refuse a program that needs
// version KJIT_1.4 before main() ran.
using CompileNamedFn = decltype(&kjit_compile_named);
CompileNamedFn compile_named_fn() {
    static const CompileNamedFn fn = reinterpret_cast<CompileNamedFn>(::dlsym(RTLD_DEFAULT, "kjit_compile_named"));
    if (!fn) fail("this libkjit has no kjit_compile_named (older than 0.5)");
    return fn;
}

}  // namespace

namespace {

constexpr int kThreadCounts[] = {1, 2};

// Runs body(i) for i in [0, n) on `threads` threads (thread t takes i = t, t + threads, ...).
// Returns the wall time in microseconds from the moment all threads are started and waiting
// (so thread creation, ~50 us each, is not counted against the 2-thread rounds) to the last
// one's end. The first exception thrown by a body is rethrown.
template <typename Body>
double timed_on_threads(int threads, int n, Body body) {
    std::exception_ptr error;
    std::mutex error_mutex;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            ++ready;
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            try {
                for (int i = t; i < n; i += threads) body(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
            }
        });
    }
    while (ready.load() < threads) std::this_thread::yield();
    const auto started = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto &th : pool) th.join();
    const double us = elapsed_us(started, Clock::now());
    if (error) std::rethrow_exception(error);
    return us;
}

std::string compile_or_fail(const std::string &source, const kjit_compile_options &opts) {
    char path[4096];
    size_t len = 0;
    const kjit_status s = kjit_compile(source.c_str(), kSweepKeyword, &opts, path, sizeof path, &len);
    if (s != KJIT_OK) fail_kjit("kjit_compile", s);
    return std::string(path, len);
}

// The `compile_seconds:` line of a cache entry's manifest.txt: libkjit's own NVRTC call inside
// kjit_compile (1 ms resolution). NaN when it cannot be read.
double manifest_compile_us(const std::string &entry) {
    const std::string text = read_file(entry + "/manifest.txt");
    const std::size_t at = text.find("compile_seconds: ");
    if (at == std::string::npos) return std::nan("");
    return std::strtod(text.c_str() + at + 17, nullptr) * 1e6;
}

// Per kernel, the median over rounds of its per-call times.
std::vector<double> per_kernel_median(const std::vector<std::vector<double>> &by_round, int n) {
    std::vector<double> out(static_cast<std::size_t>(n), std::nan(""));
    if (by_round.empty()) return out;
    for (int i = 0; i < n; ++i) {
        std::vector<double> v;
        for (const auto &round : by_round) v.push_back(round[static_cast<std::size_t>(i)]);
        out[static_cast<std::size_t>(i)] = median(v);
    }
    return out;
}

std::vector<double> flatten(const std::vector<std::vector<double>> &by_round) {
    std::vector<double> out;
    for (const auto &r : by_round) out.insert(out.end(), r.begin(), r.end());
    return out;
}

// One warm operation measured in rounds: per-call times (1 thread) and round rates.
struct WarmSeries {
    const char *id;
    const char *label;
    std::vector<std::vector<double>> calls_1t;  // [round][kernel]
    std::vector<double> rate_us[3];             // [threads]: round wall / N
};

std::string seconds(double us) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f s", us / 1e6);
    return buf;
}

// The durability rows' kernels: the sweep's first ones, enough for a median (4 runs each).
constexpr int kDurabilityKernels = 40;

// Cold kjit_compile against raw NVRTC with the disk quiet and busy, in each durability mode
// (durability.hpp), into the "compile" section.
void run_sweep_durability(const BenchOptions &o, const std::vector<std::string> &sources, Report &report) {
    const int n = std::min(static_cast<int>(sources.size()), kDurabilityKernels);
    TempDir folder(o.work_dir, "sweep-durability-");
    DurabilityKernel k;
    k.raw_us = [&](int v) {
        return time_once([&] { raw_nvrtc_compile(sources[static_cast<std::size_t>(v)], o.arch); });
    };
    k.cold = [&](int v, const std::string &cache) {
        kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
        opts.arch = o.arch.c_str();
        opts.cache_dir = cache.c_str();
        kjit_stats before = KJIT_STATS_INIT, after = KJIT_STATS_INIT;
        if (const kjit_status st = kjit_get_stats(&before); st != KJIT_OK) fail_kjit("kjit_get_stats", st);
        const double us = time_once([&] { compile_or_fail(sources[static_cast<std::size_t>(v)], opts); });
        if (const kjit_status st = kjit_get_stats(&after); st != KJIT_OK) fail_kjit("kjit_get_stats", st);
        if (after.compile_misses != before.compile_misses + 1) fail("a durability row's kjit_compile was not a miss");
        return ColdMiss{us, static_cast<double>(after.nvrtc_nanoseconds - before.nvrtc_nanoseconds) / 1e3};
    };
    const DurabilityFigures f = run_durability(folder.path(), n, k, "sweep");
    report_durability(report, report.section("compile", ""), f, "compile.durability", "sweep",
                      "sweep (" + std::to_string(n) + " kernels)");
}

}  // namespace

SweepOutcome run_sweep(const BenchOptions &o, Report &report) {
    if (o.kernels > sweep_size())
        fail("--kernels is at most " + std::to_string(sweep_size()) + " (the sweep's configurations)");
    const int n = o.kernels;
    const std::vector<GemmConfig> configs = sweep_configs(n);
    std::vector<std::string> sources;
    for (const GemmConfig &c : configs) sources.push_back(sweep_source(c));

    TempDir warmup_cache(o.work_dir, "sweep-warmup-");
    TempDir cold1(o.work_dir, "sweep-cold-1t-");
    TempDir cold2(o.work_dir, "sweep-cold-2t-");
    TempDir cold_batch(o.work_dir, "sweep-cold-batch-");
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.arch = o.arch.c_str();

    // Warm-up: NVRTC's first compile in a process loads its builtins, and kjit_compile's first
    // call sets up the library. A comment makes the source its own key.
    const std::string warm_source = sources.front() + "// warm-up\n";
    const double warm_raw_us = time_once([&] { raw_nvrtc_compile(warm_source, o.arch); });
    opts.cache_dir = warmup_cache.path().c_str();
    const double warm_kjit_us = time_once([&] { compile_or_fail(warm_source, opts); });

    // Cold, 1 thread, paired with raw NVRTC.
    const auto un = static_cast<std::size_t>(n);
    std::vector<double> raw_us(un), cold1_us(un), cold2_us(un);
    std::vector<std::string> paths(un), paths2(un);
    opts.cache_dir = cold1.path().c_str();
    {
        Progress progress("sweep: cold, 1 thread (raw NVRTC and kjit_compile of each kernel)", n, "kernels");
        for (int i = 0; i < n; ++i) {
            const auto u = static_cast<std::size_t>(i);
            auto run_raw = [&] { raw_us[u] = time_once([&] { raw_nvrtc_compile(sources[u], o.arch); }); };
            auto run_kjit = [&] { cold1_us[u] = time_once([&] { paths[u] = compile_or_fail(sources[u], opts); }); };
            if (i % 2 == 0) {
                run_raw();
                run_kjit();
            } else {
                run_kjit();
                run_raw();
            }
            progress.tick();
        }
    }
    // Cold, 2 threads, into a second empty cache.
    double cold2_wall_us = 0;
    {
        kjit_compile_options opts2 = opts;
        opts2.cache_dir = cold2.path().c_str();
        Progress progress("sweep: cold, 2 threads (kjit_compile)", n, "kernels");
        cold2_wall_us = timed_on_threads(2, n, [&](int i) {
            const auto u = static_cast<std::size_t>(i);
            cold2_us[u] = time_once([&] { paths2[u] = compile_or_fail(sources[u], opts2); });
            progress.tick();
        });
    }
    // Cold, one batch with the defaults, into a third empty cache.
    kjit_compile_options opts_batch = opts;
    opts_batch.cache_dir = cold_batch.path().c_str();
    const BatchRun batch = run_batch(sources, kSweepKeyword, opts_batch, 0, KJIT_PCH_DEFAULT,
                                     "sweep: cold, kjit_compile_batch (defaults)");
    // The caches hold the same entries, and every kernel its own, with its own name.
    std::set<std::string> names;
    for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        if (paths[u].compare(0, cold1.path().size(), cold1.path()) != 0 ||
            paths2[u].compare(0, cold2.path().size(), cold2.path()) != 0 ||
            batch.paths[u].compare(0, cold_batch.path().size(), cold_batch.path()) != 0 ||
            paths[u].substr(cold1.path().size()) != paths2[u].substr(cold2.path().size()) ||
            paths[u].substr(cold1.path().size()) != batch.paths[u].substr(cold_batch.path().size())) {
            fail("kernel " + std::to_string(i) + " went to '" + paths[u] + "' with 1 thread, '" + paths2[u] +
                 "' with 2 and '" + batch.paths[u] + "' in a batch");
        }
        char name[512];
        size_t len = 0;
        const kjit_status s = kjit_resolve_name(paths[u].c_str(), kSweepKeyword, name, sizeof name, &len);
        if (s != KJIT_OK) fail_kjit("kjit_resolve_name on '" + paths[u] + "'", s);
        if (!names.insert(std::string(name, len)).second)
            fail("two kernels resolved to '" + std::string(name, len) + "'");
    }

    // Warm. Does a driver answer? The load rows need one.
    SweepOutcome outcome;
    {
        kjit_kernel *probe = nullptr;
        const kjit_status s = kjit_load_cached(paths[0].c_str(), kSweepKeyword, &probe);
        outcome.driver_usable = s == KJIT_OK;
        if (!outcome.driver_usable)
            outcome.driver_problem = std::string(kjit_status_string(s)) + ": " + kjit_last_error();
        kjit_kernel_release(probe);
    }
    WarmSeries hit{"hit", "kjit_compile hit", {}, {}};
    WarmSeries resolve{"resolve", "kjit_resolve_name (sidecar hit)", {}, {}};
    WarmSeries two_calls{"path_name_2calls", "path and name: kjit_compile hit + kjit_resolve_name", {}, {}};
    WarmSeries named{"path_name_named", "path and name: kjit_compile_named hit", {}, {}};
    WarmSeries prepare{"prepare", "kjit_load_cached up to the driver call", {}, {}};
    WarmSeries load{"load", "kjit_load_cached through the driver", {}, {}};
    WarmSeries floor{"floor", "floor: open+read+close of cubin and sidecar", {}, {}};
    {
        std::vector<kjit_kernel *> handles(static_cast<std::size_t>(n), nullptr);
        std::vector<double> calls(static_cast<std::size_t>(n));
        Progress progress("sweep: warm rounds (hit, resolve, load; 1 and 2 threads)", 2L * o.rounds, "rounds");
        auto measure = [&](WarmSeries &series, int threads, auto &&body) {
            const double wall = timed_on_threads(threads, n, [&](int i) {
                calls[static_cast<std::size_t>(i)] = time_once([&] { body(static_cast<std::size_t>(i)); });
            });
            series.rate_us[threads].push_back(wall / n);
            if (threads == 1) series.calls_1t.push_back(calls);
        };
        for (int round = 0; round < o.rounds; ++round) {
            for (int threads : kThreadCounts) {
                // Each call writes the path into a buffer of its own: they run on several threads.
                measure(hit, threads, [&](std::size_t u) {
                    char path[4096];
                    size_t len = 0;
                    const kjit_status s =
                        kjit_compile(sources[u].c_str(), kSweepKeyword, &opts, path, sizeof path, &len);
                    if (s != KJIT_OK) fail_kjit("kjit_compile (hit)", s);
                });
                measure(resolve, threads, [&](std::size_t u) {
                    char name[512];
                    const kjit_status s =
                        kjit_resolve_name(paths[u].c_str(), kSweepKeyword, name, sizeof name, nullptr);
                    if (s != KJIT_OK) fail_kjit("kjit_resolve_name", s);
                });
                measure(two_calls, threads, [&](std::size_t u) {
                    // (One shared buffer once made this row resolve another thread's half-written
                    // path: "cannot open cubin", seen once in a bench run.)
                    char path[4096];
                    char name[512];
                    kjit_status st = kjit_compile(sources[u].c_str(), kSweepKeyword, &opts, path, sizeof path, nullptr);
                    if (st == KJIT_OK) st = kjit_resolve_name(path, kSweepKeyword, name, sizeof name, nullptr);
                    if (st != KJIT_OK) fail_kjit("kjit_compile + kjit_resolve_name (hit)", st);
                });
                measure(named, threads, [&](std::size_t u) {
                    char path[4096];
                    char name[512];
                    const kjit_status st = compile_named_fn()(sources[u].c_str(), kSweepKeyword, &opts, path,
                                                              sizeof path, nullptr, name, sizeof name, nullptr);
                    if (st != KJIT_OK) fail_kjit("kjit_compile_named (hit)", st);
                });
                measure(prepare, threads, [&](std::size_t u) {
                    auto prepared = kjit::load::KernelLoader::instance().read_and_resolve(paths[u], kSweepKeyword);
                    if (!prepared) fail(prepared.error().message);
                });
                if (outcome.driver_usable) {
                    measure(load, threads, [&](std::size_t u) {
                        const kjit_status s = kjit_load_cached(paths[u].c_str(), kSweepKeyword, &handles[u]);
                        if (s != KJIT_OK) fail_kjit("kjit_load_cached", s);
                    });
                    for (kjit_kernel *&h : handles) {
                        kjit_kernel_release(h);
                        h = nullptr;
                    }
                }
                measure(floor, threads, [&](std::size_t u) {
                    char buf[65536];
                    for (const std::string &file : {paths[u], paths[u] + ".name"}) {
                        const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
                        if (fd < 0) fail("cannot open '" + file + "': " + std::strerror(errno));
                        while (::read(fd, buf, sizeof buf) > 0) {
                        }
                        ::close(fd);
                    }
                });
                progress.tick();
            }
        }
    }
    // Where kjit's cold time goes: its NVRTC call (timed by libkjit, in the manifest) and all
    // the rest (key, look-up, name scan, publishing the entry: with an fsync of the cubin and of
    // its folder only when KJIT_DURABILITY=entry).
    std::vector<double> inner_us, outside_us, ratio, extra_us;
    for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        ratio.push_back(cold1_us[u] / raw_us[u]);
        extra_us.push_back(cold1_us[u] - raw_us[u]);
        const double inner = manifest_compile_us(folder_of(paths[u]));
        if (std::isnan(inner)) continue;
        inner_us.push_back(inner);
        outside_us.push_back(cold1_us[u] - inner);
    }

    // ---- report ------------------------------------------------------------------------------
    const std::vector<double> hit_k = per_kernel_median(hit.calls_1t, n);
    const std::vector<double> resolve_k = per_kernel_median(resolve.calls_1t, n);
    const std::vector<double> prepare_k = per_kernel_median(prepare.calls_1t, n);
    const std::vector<double> load_k = per_kernel_median(load.calls_1t, n);
    std::vector<double> cold_over_hit;
    for (int i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        report.kernels.push_back(KernelPoint{i, configs[u].label(), raw_us[u], cold1_us[u], cold2_us[u], hit_k[u],
                                             resolve_k[u], prepare_k[u], load_k[u]});
        cold_over_hit.push_back(cold1_us[u] / hit_k[u]);
    }
    double raw_total = 0, cold1_total = 0;
    for (int i = 0; i < n; ++i) {
        raw_total += raw_us[static_cast<std::size_t>(i)];
        cold1_total += cold1_us[static_cast<std::size_t>(i)];
    }

    Section &c = report.section("compile", "cold kjit_compile vs raw NVRTC: the sweep's " + std::to_string(n) +
                                               " sources, alternating, 1 thread, per kernel");
    c.rows.push_back(summarize("compile.raw_nvrtc", "raw NVRTC (create + compile + get cubin + destroy)", raw_us));
    c.rows.push_back(
        summarize("compile.kjit_cold", "kjit_compile miss into an empty cache (publish included)", cold1_us));
    if (inner_us.size() == static_cast<std::size_t>(n)) {
        c.rows.push_back(
            summarize("compile.kjit_nvrtc", "(info) of which its NVRTC call (manifest, 1 ms resolution)", inner_us));
        c.rows.push_back(
            summarize("compile.kjit_outside", "(info) of which all but NVRTC (key, scan, publish)", outside_us));
    }
    char note[512];
    std::snprintf(note, sizeof note,
                  "kjit / raw: %.3fx by the median of per-kernel ratios, %.3fx by the sums (%s vs %s)", median(ratio),
                  cold1_total / raw_total, seconds(cold1_total).c_str(), seconds(raw_total).c_str());
    c.notes.push_back(note);
    std::snprintf(
        note, sizeof note,
        "kjit - raw per kernel: %s (median); first-ever compile in the process: raw %s, kjit %s (untimed warm-up)",
        format_us(median(extra_us)).c_str(), format_us(warm_raw_us).c_str(), format_us(warm_kjit_us).c_str());
    c.notes.push_back(note);

    Section &s = report.section("sweep", "tuning sweep: " + std::to_string(n) + " gemm_tile kernels, " + o.arch +
                                             ", one program and cache entry each");
    s.rows.push_back(summarize("sweep.cold_1t", "cold, 1 thread: kjit_compile miss, per kernel", cold1_us));
    s.rows.push_back(summarize("sweep.cold_2t", "cold, 2 threads: kjit_compile miss, per call", cold2_us));
    s.rows.push_back(summarize("sweep.cold_batch", "cold, kjit_compile_batch (defaults): per kernel (wall / N)",
                               {batch.wall_us / n}));
    for (WarmSeries *w : {&hit, &resolve, &two_calls, &named, &prepare, &load}) {
        const std::string id = std::string("sweep.") + w->id + "_call";
        const std::string label = std::string("warm, 1 thread: ") + w->label + ", per call";
        if (w->calls_1t.empty()) s.rows.push_back(skipped_row(id, label, outcome.driver_problem));
        else s.rows.push_back(summarize(id, label, flatten(w->calls_1t)));
    }
    std::vector<std::string> rate_notes;
    for (WarmSeries *w : {&hit, &resolve, &two_calls, &named, &prepare, &load, &floor}) {
        for (int threads : kThreadCounts) {
            const std::string id = std::string("sweep.") + w->id + "_rate_" + std::to_string(threads) + "t";
            const std::string label = std::string("warm rate, ") + std::to_string(threads) +
                                      (threads == 1 ? " thread: " : " threads: ") + w->label + " (round / N)";
            if (w->rate_us[threads].empty()) s.rows.push_back(skipped_row(id, label, outcome.driver_problem));
            else s.rows.push_back(summarize(id, label, w->rate_us[threads]));
        }
        if (!w->rate_us[1].empty()) {
            const double scaling = median(w->rate_us[1]) / median(w->rate_us[2]);
            const double floor_scaling = median(floor.rate_us[1]) / median(floor.rate_us[2]);
            std::snprintf(note, sizeof note, "%s: 2 threads at %.2fx the 1-thread rate (%.0f%% of the floor's %.2fx)",
                          w->label, scaling, 100 * scaling / floor_scaling, floor_scaling);
            rate_notes.push_back(note);
        }
    }
    std::snprintf(note, sizeof note,
                  "cold totals: kjit_compile of all %d: %s on 1 thread, %s on 2 threads (%.2fx), %s in one "
                  "kjit_compile_batch (%.2fx); raw NVRTC %s",
                  n, seconds(cold1_total).c_str(), seconds(cold2_wall_us).c_str(), cold1_total / cold2_wall_us,
                  seconds(batch.wall_us).c_str(), cold1_total / batch.wall_us, seconds(raw_total).c_str());
    s.notes.push_back(note);
    const double warm_1t =
        median(hit.rate_us[1]) + (load.rate_us[1].empty() ? median(prepare.rate_us[1]) : median(load.rate_us[1]));
    std::snprintf(note, sizeof note,
                  "warm total, 1 thread: %s for all %d (kjit_compile hit + kjit_load_cached%s); cold / warm %.0fx",
                  format_us(warm_1t * n).c_str(), n, load.rate_us[1].empty() ? " up to the driver" : "",
                  cold1_total / (warm_1t * n));
    s.notes.push_back(note);
    s.notes.push_back("per kernel, median of cold / hit: " + std::to_string(static_cast<long>(median(cold_over_hit))) +
                      "x");
    const double named_over_two = median(flatten(named.calls_1t)) / median(flatten(two_calls.calls_1t));
    std::snprintf(note, sizeof note,
                  "path and name, 1 thread, per call: kjit_compile_named %s against kjit_compile + kjit_resolve_name "
                  "%s (%.2fx)",
                  format_us(median(flatten(named.calls_1t))).c_str(),
                  format_us(median(flatten(two_calls.calls_1t))).c_str(), named_over_two);
    s.notes.push_back(note);
    s.notes.insert(s.notes.end(), rate_notes.begin(), rate_notes.end());
    s.notes.push_back(outcome.driver_usable ? "load rows: through the driver " + json_string(report.meta, "driver", "")
                                            : "load rows through the driver skipped: " + outcome.driver_problem);

    Target hit_target{"cold_over_hit", "warm kjit_compile hit vs cold compile, per kernel (median cold / hit)", 1000};
    hit_target.value = median(cold_over_hit);
    report.add_target(hit_target);
    Target load_target{"load_rate_2t_over_1t", "warm kjit_load_cached, 2 threads vs 1 (rate ratio)", 1.6};
    load_target.available = !load.rate_us[1].empty();
    load_target.why_unavailable = outcome.driver_problem;
    if (load_target.available) load_target.value = median(load.rate_us[1]) / median(load.rate_us[2]);
    report.add_target(load_target);
    Target prepare_target{"prepare_rate_2t_over_1t", "warm load up to the driver call, 2 threads vs 1 (rate ratio)",
                          1.6};
    prepare_target.value = median(prepare.rate_us[1]) / median(prepare.rate_us[2]);
    report.add_target(prepare_target);
    Target named_target{"path_name_named_over_2calls",
                        "warm hit, path and name: kjit_compile_named / (kjit_compile + kjit_resolve_name)", 0.33, true};
    named_target.value = named_over_two;
    report.add_target(named_target);
    Target raw_target{"kjit_cold_over_raw", "cold kjit_compile vs raw NVRTC (median per-kernel ratio)", 1.05, true};
    raw_target.value = median(ratio);
    report.add_target(raw_target);

    run_sweep_durability(o, sources, report);

    // Keep the warm cache for the start-up scenario (and for people: `kjit cache stats` later),
    // replacing the previous run's.
    const std::string kept = o.work_dir + "/sweep-cache";
    std::error_code ec;
    std::filesystem::remove_all(kept, ec);
    if (ec) fail("cannot remove the previous '" + kept + "': " + ec.message());
    if (std::rename(cold1.path().c_str(), kept.c_str()) != 0) {
        fail("cannot rename '" + cold1.path() + "' to '" + kept + "': " + std::strerror(errno));
    }
    cold1.release();
    outcome.warm_cache = kept;
    report.meta["sweep"] = {{"kernels", n},
                            {"rounds", o.rounds},
                            {"arch", o.arch},
                            {"cache", kept},
                            {"filesystem", filesystem_name(o.work_dir)}};
    return outcome;
}

}  // namespace kjit_bench
