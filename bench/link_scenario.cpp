// Scenario 12: link-time kernels (issue 37). A device-function library shaped like NVIDIA's
// MathDx ones (bench/link_kernels.cpp: 36 exported functions over eight templates) is compiled
// once by NVRTC to LTO-IR (-dlto) into a file in the work dir; --link-kernels (8) variants of a
// tile kernel that calls it (-DLINK_VARIANT=V) are each linked with it. In --link-rounds (3)
// rounds, each on an empty cache, for each kernel in turn, alternating which goes first so that
// the machine's noise falls on both:
//   raw   NVRTC to LTO-IR (the options kjit_compile gives it: -dlto -rdc=true -arch) and
//         nvJitLink (-arch -lto) of that with the library file, called directly: the floor
//   cold  kjit_compile with link_inputs = {the library}, a miss (key, NVRTC, nvJitLink, name
//         scan, publish); its NVRTC and nvJitLink time from kjit_get_stats
// after an untimed warm-up of each (NVRTC's builtins, nvJitLink's dlopen, libkjit's set-up).
// Then the hits, in fresh processes (kjit-link-child, which links libkjit.so alone, as a client
// does): one fills an empty cache with all the kernels (timed: cold in a fresh process, which
// loads NVRTC and nvJitLink itself); --link-rounds more on that cache time the process's first
// call, every other kernel's first hit and --link-repeats rounds of memo hits, and say whether
// NVRTC or nvJitLink ran or were mapped. (Not on this process's caches: NVRTC was mapped here
// before libkjit opened it, so libkjit leaves no record of it there, and the first process to
// hit them would load NVRTC to learn its identity, as it would in a client's cache filled by a
// process that had NVRTC mapped by something else.)
// Last, raw against cold for each kernel with the disk quiet and then busy (a child process
// writing and fdatasyncing a file in the work dir), with KJIT_DURABILITY=none (the default) and
// entry (durability.hpp): what the fsyncs of a publish cost beside a busy disk.
#include "scenarios.hpp"

#include "durability.hpp"
#include "link_kernels.hpp"
#include "progress.hpp"
#include "raw_nvjitlink.hpp"
#include "raw_nvrtc.hpp"
#include "stats.hpp"
#include "support.hpp"

#include "kjit/kjit.h"
#include "kjit/kjit_cache.h"

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kjit_bench {

namespace {

// One kernel in one round.
struct Pair {
    double raw_us = 0, raw_nvrtc_us = 0, raw_link_us = 0;
    double cold_us = 0, kjit_nvrtc_us = 0, kjit_link_us = 0;
    std::string path;  // the entry's cubin
};

struct LinkBench {
    const BenchOptions &o;
    std::string source;   // the kernels' program (link_kernel_source())
    std::string library;  // the LTO-IR file
    std::vector<std::vector<std::string>> options;

    // Raw NVRTC to LTO-IR, then nvJitLink with the library, each part timed.
    void raw(int v, const std::string &src, Pair &p) const {
        std::string ltoir;
        p.raw_nvrtc_us = time_once([&] { ltoir = raw_nvrtc_ltoir(src, o.arch, options[static_cast<std::size_t>(v)]); });
        p.raw_link_us = time_once([&] { raw_nvjitlink(ltoir, library, o.arch); });
        p.raw_us = p.raw_nvrtc_us + p.raw_link_us;
    }

    // kjit_compile of kernel v with the library into `cache`; NVRTC's and nvJitLink's time in
    // it from the process-wide counters (this thread is the only one compiling).
    void cold(int v, const std::string &src, const std::string &cache, Pair &p) const {
        std::vector<const char *> opt;
        for (const std::string &s : options[static_cast<std::size_t>(v)]) opt.push_back(s.c_str());
        const char *inputs[] = {library.c_str()};
        kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
        opts.cache_dir = cache.c_str();
        opts.arch = o.arch.c_str();
        opts.nvrtc_options = opt.data();
        opts.nvrtc_option_count = opt.size();
        opts.link_inputs = inputs;
        opts.link_input_count = 1;
        kjit_stats before = KJIT_STATS_INIT, after = KJIT_STATS_INIT;
        if (const kjit_status st = kjit_get_stats(&before); st != KJIT_OK) fail_kjit("kjit_get_stats", st);
        char path[4096];
        std::size_t len = 0;
        kjit_status s = KJIT_OK;
        p.cold_us = time_once([&] { s = kjit_compile(src.c_str(), kLinkKeyword, &opts, path, sizeof path, &len); });
        if (s != KJIT_OK)
            fail_kjit("kjit_compile with link_inputs (" + options[static_cast<std::size_t>(v)][0] + ")", s);
        if (const kjit_status st = kjit_get_stats(&after); st != KJIT_OK) fail_kjit("kjit_get_stats", st);
        if (after.compile_misses != before.compile_misses + 1)
            fail("the cold kjit_compile of kernel " + std::to_string(v) + " was not a miss");
        // nvrtc_nanoseconds counts the whole compile, the link included.
        p.kjit_link_us = static_cast<double>(after.nvjitlink_nanoseconds - before.nvjitlink_nanoseconds) / 1e3;
        p.kjit_nvrtc_us =
            static_cast<double>(after.nvrtc_nanoseconds - before.nvrtc_nanoseconds) / 1e3 - p.kjit_link_us;
        if (after.nvjitlink_links != before.nvjitlink_links + 1)
            fail("the cold kjit_compile of kernel " + std::to_string(v) + " ran no nvJitLink link");
        p.path.assign(path, len);
    }
};

// The library's LTO-IR, written to `folder`/dxlib.ltoir; returns NVRTC's time.
double build_library(LinkBench &b, const std::string &folder, std::size_t &bytes) {
    std::string ltoir;
    const double us = time_once([&] { ltoir = raw_nvrtc_ltoir(link_library_source(), b.o.arch); });
    b.library = folder + "/dxlib.ltoir";
    write_file(b.library, ltoir);
    bytes = ltoir.size();
    return us;
}

// Every round's raw and cold of every kernel; the last round's cache is kept in `last`.
std::vector<std::vector<Pair>> run_rounds(const LinkBench &b, const std::string &folder,
                                          std::unique_ptr<TempDir> &last) {
    const int n = b.o.link_kernels;
    std::vector<std::vector<Pair>> rounds;
    Progress progress("link: raw NVRTC + nvJitLink and cold kjit_compile of each kernel",
                      static_cast<long>(n) * b.o.link_rounds, "kernels");
    for (int r = 0; r < b.o.link_rounds; ++r) {
        last = std::make_unique<TempDir>(folder, "cold-");
        std::vector<Pair> pairs(static_cast<std::size_t>(n));
        for (int v = 0; v < n; ++v) {
            Pair &p = pairs[static_cast<std::size_t>(v)];
            if ((v + r) % 2 == 0) {
                b.raw(v, b.source, p);
                b.cold(v, b.source, last->path(), p);
            } else {
                b.cold(v, b.source, last->path(), p);
                b.raw(v, b.source, p);
            }
            progress.tick();
        }
        rounds.push_back(std::move(pairs));
    }
    return rounds;
}

// Each kernel its own entry, and the kernel in it the one the source names.
void check_entries(const std::vector<Pair> &pairs) {
    std::set<std::string> paths;
    for (const Pair &p : pairs) {
        if (!paths.insert(p.path).second) fail("two link kernels went to one entry: '" + p.path + "'");
        char name[512];
        std::size_t len = 0;
        const kjit_status s = kjit_resolve_name(p.path.c_str(), kLinkKeyword, name, sizeof name, &len);
        if (s != KJIT_OK) fail_kjit("kjit_resolve_name on '" + p.path + "'", s);
        if (std::string(name, len) != kLinkKernelName)
            fail("the linked cubin '" + p.path + "' names '" + std::string(name, len) + "', not " + kLinkKernelName);
    }
}

const char *const kChildCounts[] = {"process_first_us", "kernel_first_us", "memo_us",         "hits", "misses", "nvrtc",
                                    "nvjitlink",        "nvrtc_mapped",    "nvjitlink_mapped"};

// One kjit-link-child on `cache`: its counts.
std::map<std::string, double> run_child_on(const LinkBench &b, const std::string &cache, int repeats) {
    const std::string self = self_executable();
    const std::string child = self.substr(0, self.rfind('/')) + "/kjit-link-child";
    const ChildResult c =
        run_child({child, cache, b.library, b.o.arch, std::to_string(b.o.link_kernels), std::to_string(repeats)});
    if (!c.started || c.exit_status != 0)
        fail("kjit-link-child failed, exit " + std::to_string(c.exit_status) + ": " + c.err);
    return parse_counts(c.out, {std::begin(kChildCounts), std::end(kChildCounts)}, "kjit-link-child");
}

// A fresh process compiles every kernel into `cache`: each call a miss, with one NVRTC run and
// one link.
std::map<std::string, double> fill(const LinkBench &b, const std::string &cache) {
    std::map<std::string, double> c = run_child_on(b, cache, 1);
    const double n = b.o.link_kernels;
    if (c.at("misses") != n || c.at("nvrtc") != n || c.at("nvjitlink") != n) {
        auto count = [&](const char *name) { return std::to_string(static_cast<long>(c.at(name))); };
        fail("the process filling the hit cache had " + count("misses") + " misses, " + count("nvrtc") +
             " NVRTC runs and " + count("nvjitlink") + " links for " + std::to_string(b.o.link_kernels) + " kernels");
    }
    return c;
}

// The hit-only processes on `cache`, one per round.
std::vector<std::map<std::string, double>> run_children(const LinkBench &b, const std::string &cache) {
    std::vector<std::map<std::string, double>> out;
    Progress progress("link: hits in fresh processes", b.o.link_rounds, "processes");
    for (int r = 0; r < b.o.link_rounds; ++r) {
        out.push_back(run_child_on(b, cache, b.o.link_repeats));
        progress.tick();
    }
    return out;
}

std::vector<double> field(const std::vector<std::vector<Pair>> &rounds, double Pair::*f) {
    std::vector<double> out;
    for (const auto &pairs : rounds) {
        for (const Pair &p : pairs) out.push_back(p.*f);
    }
    return out;
}

std::vector<double> field(const std::vector<std::map<std::string, double>> &children, const char *name) {
    std::vector<double> out;
    for (const auto &c : children) out.push_back(c.at(name));
    return out;
}

double sum(const std::vector<double> &v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
}

struct Figures {
    std::vector<double> raw, raw_nvrtc, raw_link, cold, kjit_nvrtc, kjit_link, kjit_outside, ratio, extra;
    std::vector<double> process_first, kernel_first, memo;
    std::vector<double> fresh_cold;  // a miss in the filling process (not its first call)
    double fresh_first = 0;          // its first call: NVRTC's and nvJitLink's loads too
    double hit_runs = 0, hit_links = 0, nvrtc_maps = 0, nvjitlink_maps = 0, hit_misses = 0, hits = 0;
};

Figures figures(const std::vector<std::vector<Pair>> &rounds, const std::map<std::string, double> &filled,
                const std::vector<std::map<std::string, double>> &kids) {
    Figures f;
    f.fresh_cold = {filled.at("kernel_first_us")};
    f.fresh_first = filled.at("process_first_us");
    f.raw = field(rounds, &Pair::raw_us);
    f.raw_nvrtc = field(rounds, &Pair::raw_nvrtc_us);
    f.raw_link = field(rounds, &Pair::raw_link_us);
    f.cold = field(rounds, &Pair::cold_us);
    f.kjit_nvrtc = field(rounds, &Pair::kjit_nvrtc_us);
    f.kjit_link = field(rounds, &Pair::kjit_link_us);
    for (std::size_t i = 0; i < f.raw.size(); ++i) {
        f.ratio.push_back(f.cold[i] / f.raw[i]);
        f.extra.push_back(f.cold[i] - f.raw[i]);
        f.kjit_outside.push_back(f.cold[i] - f.kjit_nvrtc[i] - f.kjit_link[i]);
    }
    f.process_first = field(kids, "process_first_us");
    f.kernel_first = field(kids, "kernel_first_us");
    f.memo = field(kids, "memo_us");
    f.hit_runs = sum(field(kids, "nvrtc"));
    f.hit_links = sum(field(kids, "nvjitlink"));
    f.nvrtc_maps = sum(field(kids, "nvrtc_mapped"));
    f.nvjitlink_maps = sum(field(kids, "nvjitlink_mapped"));
    f.hit_misses = sum(field(kids, "misses"));
    f.hits = sum(field(kids, "hits"));
    return f;
}

void add_rows(Section &s, const Figures &f) {
    s.rows.push_back(summarize("link.raw", "raw: NVRTC to LTO-IR + nvJitLink, called directly (the floor)", f.raw));
    s.rows.push_back(summarize("link.raw_nvrtc", "(info) of which NVRTC to LTO-IR", f.raw_nvrtc));
    s.rows.push_back(summarize("link.raw_nvjitlink", "(info) of which nvJitLink", f.raw_link));
    s.rows.push_back(summarize("link.kjit_cold",
                               "kjit_compile with link_inputs, a miss into an empty cache (publish included)", f.cold));
    s.rows.push_back(summarize("link.kjit_nvrtc", "(info) of which its NVRTC (kjit_get_stats)", f.kjit_nvrtc));
    s.rows.push_back(summarize("link.kjit_nvjitlink", "(info) of which its nvJitLink (kjit_get_stats)", f.kjit_link));
    s.rows.push_back(summarize("link.kjit_outside", "(info) of which all but NVRTC and nvJitLink", f.kjit_outside));
    s.rows.push_back(summarize("link.kjit_cold_fresh",
                               "(info) a miss in a fresh process that filled the hit cache (kjit-link-child)",
                               f.fresh_cold));
    s.rows.push_back(
        summarize("link.hit_process_first", "hit: a fresh process's first call (libkjit's set-up)", f.process_first));
    s.rows.push_back(summarize("link.hit_first", "hit: a kernel's first hit in a fresh process", f.kernel_first));
    s.rows.push_back(summarize("link.hit_memo", "hit: a repeat (the in-process memo, a stat of the library)", f.memo));
}

void add_notes(Section &s, const Figures &f, const BenchOptions &o, double library_us, std::size_t library_bytes) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "kjit cold / raw: %.3fx by the median of per-kernel ratios, %.3fx by the sums; kjit - raw per "
                  "kernel: %s (median)",
                  median(f.ratio), sum(f.cold) / sum(f.raw), format_us(median(f.extra)).c_str());
    s.notes.push_back(line);
    std::snprintf(line, sizeof line,
                  "cold / hit: %.0fx for a kernel's first hit in a fresh process, %.0fx for a memo hit, %.0fx for a "
                  "fresh process's first call",
                  median(f.cold) / median(f.kernel_first), median(f.cold) / median(f.memo),
                  median(f.cold) / median(f.process_first));
    s.notes.push_back(line);
    std::snprintf(line, sizeof line,
                  "hit-only processes: %.0f hits, %.0f misses, %.0f NVRTC runs, %.0f nvJitLink links; NVRTC mapped "
                  "in %.0f of %d, nvJitLink in %.0f",
                  f.hits, f.hit_misses, f.hit_runs, f.hit_links, f.nvrtc_maps, o.link_rounds, f.nvjitlink_maps);
    s.notes.push_back(line);
    std::snprintf(line, sizeof line,
                  "the fresh process that filled the hit cache: its first call %s (NVRTC and nvJitLink loaded), "
                  "a later miss %s",
                  format_us(f.fresh_first).c_str(), format_us(median(f.fresh_cold)).c_str());
    s.notes.push_back(line);
    std::snprintf(line, sizeof line, "library: %d functions, %zu bytes of LTO-IR, compiled once by NVRTC in %s",
                  link_library_functions(), library_bytes, format_us(library_us).c_str());
    s.notes.push_back(line);
}

void add_targets(Report &report, const Figures &f) {
    Target raw{"link_cold_over_raw", "link: cold kjit_compile with link_inputs vs raw NVRTC + nvJitLink (median ratio)",
               1.05, true};
    raw.value = median(f.ratio);
    report.add_target(raw);
    Target first{"link_cold_over_first_hit", "link: cold vs a kernel's first hit in a fresh process (medians)", 1000};
    first.value = median(f.cold) / median(f.kernel_first);
    report.add_target(first);
    Target memo{"link_cold_over_memo_hit", "link: cold vs a memo hit (medians)", 10000};
    memo.value = median(f.cold) / median(f.memo);
    report.add_target(memo);
    Target runs{"link_hit_process_runs", "link: misses, NVRTC runs and nvJitLink links in the hit-only processes", 0,
                true, TargetUnit::count};
    runs.value = f.hit_runs + f.hit_links + f.hit_misses;
    report.add_target(runs);
    Target maps{"link_hit_process_maps", "link: NVRTC or nvJitLink mapped by a hit-only process", 0, true,
                TargetUnit::count};
    maps.value = f.nvrtc_maps + f.nvjitlink_maps;
    report.add_target(maps);
}

}  // namespace

void run_link(const BenchOptions &o, Report &report) {
    if (o.link_kernels > link_kernel_variants())
        fail("--link-kernels is at most " + std::to_string(link_kernel_variants()));
    LinkBench b{o, link_kernel_source(), "", {}};
    for (int v = 0; v < o.link_kernels; ++v) b.options.push_back(link_kernel_options(v));
    TempDir folder(o.work_dir, "link-");
    std::size_t library_bytes = 0;
    const double library_us = build_library(b, folder.path(), library_bytes);

    // Untimed warm-ups: a comment makes the source its own key.
    const std::string warm_source = b.source + "// warm-up\n";
    Pair warm;
    b.raw(0, warm_source, warm);
    {
        TempDir warm_cache(folder.path(), "warmup-");
        b.cold(0, warm_source, warm_cache.path(), warm);
    }
    std::unique_ptr<TempDir> last;
    const std::vector<std::vector<Pair>> rounds = run_rounds(b, folder.path(), last);
    check_entries(rounds.back());
    TempDir hit_cache(folder.path(), "hits-");
    const std::map<std::string, double> filled = fill(b, hit_cache.path());
    const std::vector<std::map<std::string, double>> kids = run_children(b, hit_cache.path());

    const Figures f = figures(rounds, filled, kids);
    Section &s =
        report.section("link", "link-time kernels: " + std::to_string(o.link_kernels) +
                                   " kernels calling an LTO-IR library of " + std::to_string(link_library_functions()) +
                                   " device functions, " + o.arch + ", " + std::to_string(o.link_rounds) + " rounds");
    add_rows(s, f);
    add_notes(s, f, o, library_us, library_bytes);
    add_targets(report, f);
    report.meta["link"] = {{"kernels", o.link_kernels},
                           {"rounds", o.link_rounds},
                           {"repeats", o.link_repeats},
                           {"arch", o.arch},
                           {"nvjitlink_version", nvjitlink_version()},
                           {"library_functions", link_library_functions()},
                           {"library_ltoir_bytes", library_bytes},
                           {"library_nvrtc_us", library_us},
                           {"hit_processes", kids.size()},
                           {"hits", f.hits},
                           {"hit_misses", f.hit_misses},
                           {"hit_nvrtc_runs", f.hit_runs},
                           {"hit_nvjitlink_links", f.hit_links},
                           {"hit_nvrtc_maps", f.nvrtc_maps},
                           {"hit_nvjitlink_maps", f.nvjitlink_maps}};

    // Cold against raw with the disk quiet and busy, in each durability mode (durability.hpp).
    DurabilityKernel k;
    k.raw_us = [&](int v) {
        Pair p;
        b.raw(v, b.source, p);
        return p.raw_us;
    };
    k.cold = [&](int v, const std::string &cache) {
        Pair p;
        b.cold(v, b.source, cache, p);
        return ColdMiss{p.cold_us, p.kjit_nvrtc_us + p.kjit_link_us};
    };
    const DurabilityFigures d = run_durability(folder.path(), o.link_kernels, k, "link");
    report_durability(report, report.section("link", ""), d, "link.durability", "link",
                      "link (" + std::to_string(o.link_kernels) + " kernels)");
}

}  // namespace kjit_bench
