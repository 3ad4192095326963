// Scenario 5: a cold sweep of N header-heavy CUB kernels (cub_kernels.hpp), one program and
// cache entry each, compiled four ways, each in a fresh process (this program, spawned), as an
// autotuner's first run would be, so each pays NVRTC's start-up and, with PCH, the first
// compile that creates the precompiled header:
//   raw         sequential plain NVRTC (create, compile, get the cubin, destroy), no cache
//   batch 1 PCH kjit_compile_batch, 1 worker, NVRTC's automatic PCH
//   batch 2 PCH kjit_compile_batch, 2 workers, PCH
//   batch 2     kjit_compile_batch, 2 workers, plain compiles
// The child times its own work (from before the first compile to after the last), so process
// start-up (tens of ms) is not counted. The three caches must hold the same entries, each
// kernel its own name.
// Then, for one large program (cub_large_source: four sort+scan instantiations), raw NVRTC
// plain against --split-compile=2 and =0 (NVRTC's parallel optimizer), alternating, in this
// process, median of --split-rounds (3) each.
#include "scenarios.hpp"

#include "batch_run.hpp"
#include "cub_kernels.hpp"
#include "raw_nvrtc.hpp"
#include "support.hpp"

#include "kjit/kjit.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <set>

namespace kjit_bench {

namespace {

struct Mode {
    const char *id;     // the child's MODE argument and the row id
    const char *label;
    unsigned workers;   // 0: raw NVRTC
    int pch;
};

constexpr Mode kModes[] = {
    {"raw", "sequential plain NVRTC, 1 thread, no cache", 0, KJIT_PCH_OFF},
    {"batch_1w_pch", "kjit_compile_batch, 1 worker, PCH", 1, KJIT_PCH_ON},
    {"batch_2w_pch", "kjit_compile_batch, 2 workers, PCH", 2, KJIT_PCH_ON},
    {"batch_2w_plain", "kjit_compile_batch, 2 workers, no PCH", 2, KJIT_PCH_OFF},
};

const Mode *mode_named(const std::string &id) {
    for (const Mode &m : kModes) {
        if (id == m.id) return &m;
    }
    return nullptr;
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
    const Mode *mode = mode_named(mode_id);
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
            run_batch(sources, kCubKeyword, opts, mode->workers, mode->pch, std::string("cub: ") + mode->label);
        }
        std::printf("wall_us %.0f\n", elapsed_us(started, Clock::now()));
        return 0;
    } catch (const BenchError &e) {
        std::fprintf(stderr, "kjit-bench --cub-child %s: %s\n", mode_id.c_str(), e.what());
        return 1;
    }
}

void run_cub(const BenchOptions &o, Report &report) {
    if (o.cub_kernels > cub_size()) fail("--cub-kernels is at most " + std::to_string(cub_size()));
    const int n = o.cub_kernels;
    const std::string self = self_executable();
    double wall_us[std::size(kModes)] = {};
    std::vector<std::vector<std::string>> entries;
    std::vector<std::unique_ptr<TempDir>> caches;
    for (std::size_t m = 0; m < std::size(kModes); ++m) {
        const Mode &mode = kModes[m];
        caches.push_back(std::make_unique<TempDir>(o.work_dir, std::string("cub-") + mode.id + "-"));
        std::fprintf(stderr, "cub: %s, %d kernels in a fresh process...\n", mode.label, n);
        const ChildResult r = run_child({self, "--cub-child", mode.id, caches.back()->path(), std::to_string(n), o.arch});
        if (!r.started || r.exit_status != 0) {
            fail(std::string("the CUB child (") + mode.id + ") failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
        }
        const std::size_t at = r.out.find("wall_us ");
        if (at == std::string::npos) fail(std::string("the CUB child (") + mode.id + ") printed no time: " + r.out);
        wall_us[m] = std::strtod(r.out.c_str() + at + 8, nullptr);
        std::fprintf(stderr, "cub: %s: %.1f s\n", mode.label, wall_us[m] / 1e6);
        if (mode.workers > 0) entries.push_back(entries_of(caches.back()->path()));
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

    Section &s = report.section("cub", "cold sweep of " + std::to_string(n) +
                                           " CUB BlockLoad+BlockReduce kernels, " + o.arch +
                                           ", each way in a fresh process, per kernel (wall / N)");
    double best = 0;
    std::string best_label;
    char note[512];
    for (std::size_t m = 0; m < std::size(kModes); ++m) {
        s.rows.push_back(summarize(std::string("cub.") + kModes[m].id, kModes[m].label, {wall_us[m] / n}));
        if (m == 0) continue;
        const double speedup = wall_us[0] / wall_us[m];
        std::snprintf(note, sizeof note, "%s: %.1f s, %.2fx faster than sequential plain NVRTC (%.1f s)", kModes[m].label,
                      wall_us[m] / 1e6, speedup, wall_us[0] / 1e6);
        s.notes.push_back(note);
        if (speedup > best) {
            best = speedup;
            best_label = kModes[m].label;
        }
    }
    std::snprintf(note, sizeof note, "PCH with 2 workers vs without: %.2fx; 2 workers vs 1, with PCH: %.2fx",
                  wall_us[3] / wall_us[2], wall_us[1] / wall_us[2]);
    s.notes.push_back(note);
    // --split-compile on one large program: alternating rounds, after one untimed compile.
    std::fprintf(stderr, "cub: one large program, plain and with --split-compile=2 and =0, %d rounds...\n", o.split_rounds);
    const std::string large = cub_large_source();
    const std::vector<std::string> base = cub_nvrtc_options();
    const std::vector<std::pair<const char *, const char *>> splits = {
        {"plain", nullptr}, {"--split-compile=2", "--split-compile=2"}, {"--split-compile=0 (all CPUs)", "--split-compile=0"}};
    raw_nvrtc_compile(large, o.arch, base);
    std::vector<std::vector<double>> split_us(splits.size());
    for (int round = 0; round < o.split_rounds; ++round) {
        for (std::size_t k = 0; k < splits.size(); ++k) {
            std::vector<std::string> opts = base;
            if (splits[k].second) opts.push_back(splits[k].second);
            split_us[k].push_back(time_once([&] { raw_nvrtc_compile(large, o.arch, opts); }));
        }
    }
    Section &sp = report.section("split", "one large CUB program (4 BlockRadixSort+BlockScan instantiations), raw NVRTC, " +
                                              o.arch + ", per compile");
    for (std::size_t k = 0; k < splits.size(); ++k) {
        sp.rows.push_back(summarize(std::string("split.") + (k == 0 ? "plain" : k == 1 ? "split2" : "split0"),
                                    splits[k].first, split_us[k]));
    }
    std::snprintf(note, sizeof note, "--split-compile=2 vs plain: %.2fx; --split-compile=0 vs plain: %.2fx (medians)",
                  median(split_us[0]) / median(split_us[1]), median(split_us[0]) / median(split_us[2]));
    sp.notes.push_back(note);

    Target t{"cub_best_batch_over_raw", "CUB cold sweep: best batch setting vs sequential plain NVRTC (" + best_label + ")",
             2.5};
    t.value = best;
    report.add_target(t);
    report.meta["cub"] = {{"kernels", n}, {"arch", o.arch}};
}

}  // namespace kjit_bench
