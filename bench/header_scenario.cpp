// Scenario 7: header-heavy kernels, as DeepGEMM's over CuTe/CUTLASS, against header-free ones
// (issue 19). The bench writes its own header tree shaped like CUTLASS/CuTe (header_tree.hpp:
// about 500 headers, nested folders, computed includes through a macro defined two ways,
// `#pragma once` and guards, a pre-included file) into WORK_DIR/header-tree, and N templated
// kernels over it (--header-kernels, 300), each its own program and cache entry. In order:
//   cold fill      a fresh process compiles the N kernels into an empty cache: one
//                  kjit_compile_batch, 2 workers, the default PCH policy
//   warm start     a fresh process gets all N from that cache (all hits): one kjit_compile_batch,
//                  and, alternating with it, N kjit_compile calls; the child times the calls,
//                  the parent spawn to exit (median of --header-repeats each)
//   hits           in this process, kjit_compile hits on the first 16 tree kernels against hits
//                  on 2 header-free kernels of the sweep (a cache of their own), alternating
//                  blocks of calls, --header-hit-rounds rounds; beside them, what a tree hit
//                  checks: deps.txt read and parsed, and its files stat'ed (libkjit's
//                  key::include_scanner::check on the parsed list, and a bare stat loop as the floor)
//   cold batches   fresh processes on empty caches, 2 workers: the first --header-batch tree
//                  kernels (they share their headers) with the default PCH policy and with
//                  KJIT_PCH_OFF, and as many humming-style kernels (each defines its
//                  configuration, then includes an in-memory header of its own, so no two share
//                  a PCH) both ways; --header-repeats rounds, the order of the modes alternating
//   edit cycle     in this process, one tree kernel in a cache of its own: edit a header every
//                  kernel includes (a constant the cubin carries) -> kjit_compile; revert the
//                  text -> kjit_compile; touch it (same text, new mtime) -> kjit_compile; edit a
//                  header nothing includes -> kjit_compile. Each call's hit or miss is read from
//                  kjit_get_stats and reported as it happens, never assumed.
// The tree is restored at the end; every cache is a temp folder removed on the way out.
#include "scenarios.hpp"

#include "batch_run.hpp"
#include "header_tree.hpp"
#include "progress.hpp"
#include "raw_nvrtc.hpp"
#include "support.hpp"
#include "sweep_kernels.hpp"

#include "key/cache_key.hpp"
#include "key/include_scanner.hpp"
#include "kjit/kjit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace kjit_bench {

namespace {

constexpr unsigned kBatchWorkers = 2;
constexpr int kHitTreeKernels = 16;  // tree kernels cycled through in the hit rounds
constexpr int kHitFreeKernels = 2;   // header-free sweep kernels beside them

// What a child process (kjit-bench --headers-child) runs.
struct ChildMode {
    const char *id;
    const char *label;
    bool humming;  // the humming-style kernels, else the tree kernels
    bool batch;    // one kjit_compile_batch, else one kjit_compile per kernel
    int pch;
};

constexpr ChildMode kChildModes[] = {
    {"tree-batch-default", "tree kernels, kjit_compile_batch, 2 workers, default PCH policy", false, true,
     KJIT_PCH_DEFAULT},
    {"tree-batch-off", "tree kernels, kjit_compile_batch, 2 workers, KJIT_PCH_OFF", false, true, KJIT_PCH_OFF},
    {"hum-batch-default", "humming-style kernels, kjit_compile_batch, 2 workers, default PCH policy", true, true,
     KJIT_PCH_DEFAULT},
    {"hum-batch-off", "humming-style kernels, kjit_compile_batch, 2 workers, KJIT_PCH_OFF", true, true, KJIT_PCH_OFF},
    {"tree-each", "tree kernels, one kjit_compile each", false, false, KJIT_PCH_DEFAULT},
};

const ChildMode *child_mode(const std::string &id) {
    for (const ChildMode &m : kChildModes) {
        if (id == m.id) return &m;
    }
    return nullptr;
}

// A mode the parent names itself. child_mode() answers null for an id not in kChildModes (the
// child checks, its id comes from the command line); here such an id is the bench's own bug,
// said at once instead of a null pointer dereferenced (GCC -O3 saw that path: -Wnull-dereference).
const ChildMode &known_child_mode(const char *id) {
    const ChildMode *mode = child_mode(id);
    if (!mode) fail(std::string("kjit-bench: no headers child mode '") + id + "'");
    return *mode;
}

// What a child reports: its calls' wall time and the counters they moved.
struct ChildOutcome {
    double call_us = 0;   // the batch, or the N kjit_compile calls (child's own clock)
    double spawn_us = 0;  // spawn to exit (parent's clock)
    long hits = 0, misses = 0, nvrtc = 0;
};

kjit_stats stats_now() {
    kjit_stats s = KJIT_STATS_INIT;
    if (kjit_get_stats(&s) != KJIT_OK) fail("kjit_get_stats failed");
    return s;
}

// The parts of an options struct that own memory: an argv of NVRTC options, in-memory headers.
struct OwnedOptions {
    std::vector<std::string> nvrtc;
    std::vector<const char *> argv;
    std::vector<kjit_header> headers;
    std::pair<std::string, std::string> header_text;
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
};

// Options for the tree kernels: the tree's -I and pre-include.
void tree_options(OwnedOptions &o, const HeaderTree &tree, const std::string &cache, const std::string &arch) {
    o.nvrtc = tree.nvrtc_options();
    for (const std::string &s : o.nvrtc) o.argv.push_back(s.c_str());
    o.opts.cache_dir = cache.c_str();
    o.opts.arch = arch.c_str();
    o.opts.nvrtc_options = o.argv.data();
    o.opts.nvrtc_option_count = o.argv.size();
}

// Options for humming-style kernel i: its own in-memory header, nothing from disk.
void hum_options(OwnedOptions &o, int i, const std::string &cache, const std::string &arch) {
    o.header_text = hum_header(i);
    o.headers.push_back(kjit_header{o.header_text.first.c_str(), o.header_text.second.c_str()});
    o.nvrtc = {"-std=c++17"};
    for (const std::string &s : o.nvrtc) o.argv.push_back(s.c_str());
    o.opts.cache_dir = cache.c_str();
    o.opts.arch = arch.c_str();
    o.opts.nvrtc_options = o.argv.data();
    o.opts.nvrtc_option_count = o.argv.size();
    o.opts.headers = o.headers.data();
    o.opts.header_count = o.headers.size();
}

// One kjit_compile, its time, and whether it hit (from the counters, not assumed).
struct CompileStep {
    double us = 0;
    bool hit = false, miss = false;
    long nvrtc = 0;
    std::string path;
    std::string cubin;  // the cubin's bytes after the call
};

CompileStep compile_step(const std::string &source, const char *keyword, const kjit_compile_options &opts) {
    CompileStep step;
    const kjit_stats before = stats_now();
    char path[4096];
    size_t len = 0;
    kjit_status s = KJIT_OK;
    step.us = time_once([&] { s = kjit_compile(source.c_str(), keyword, &opts, path, sizeof path, &len); });
    if (s != KJIT_OK) fail_kjit("kjit_compile", s);
    const kjit_stats after = stats_now();
    step.hit = after.compile_hits > before.compile_hits;
    step.miss = after.compile_misses > before.compile_misses;
    step.nvrtc = static_cast<long>(after.nvrtc_compiles - before.nvrtc_compiles);
    step.path.assign(path, len);
    step.cubin = read_file(step.path);
    return step;
}

std::string hit_or_miss(const CompileStep &s) { return s.hit ? "hit" : s.miss ? "MISS" : "neither (?)"; }

// Writes `text` to `path` in place (as an editor that truncates and rewrites would).
void rewrite(const std::string &path, const std::string &text) { write_file(path, text); }

// Sets `path`'s mtime to now, as `touch` does; waits for the clock to move past its current
// mtime first, so the mtime does change even on a coarse timestamp clock.
void touch(const std::string &path) {
    struct stat before {};
    if (::stat(path.c_str(), &before) != 0) fail("cannot stat '" + path + "': " + std::strerror(errno));
    for (int attempt = 0; attempt < 100; ++attempt) {
        if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0)
            fail("cannot touch '" + path + "': " + std::strerror(errno));
        struct stat after {};
        if (::stat(path.c_str(), &after) != 0) fail("cannot stat '" + path + "': " + std::strerror(errno));
        if (after.st_mtim.tv_sec != before.st_mtim.tv_sec || after.st_mtim.tv_nsec != before.st_mtim.tv_nsec) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    fail("the mtime of '" + path + "' did not change when touched");
}

// Whether `bytes` hold `word` as a little-endian 32-bit word (a cubin's initialized data).
bool holds_word(const std::string &bytes, unsigned word) {
    const char le[4] = {static_cast<char>(word & 0xFF), static_cast<char>((word >> 8) & 0xFF),
                        static_cast<char>((word >> 16) & 0xFF), static_cast<char>((word >> 24) & 0xFF)};
    return bytes.find(std::string(le, 4)) != std::string::npos;
}

std::string replace_once(std::string text, const std::string &from, const std::string &to) {
    const std::size_t at = text.find(from);
    if (at == std::string::npos) fail("'" + from + "' is not in the text to edit");
    return text.replace(at, from.size(), to);
}

}  // namespace

int headers_child_main(const std::string &mode_id, const std::string &cache, const std::string &tree_root, int n,
                       const std::string &arch) {
    const ChildMode *mode = child_mode(mode_id);
    if (!mode || n < 1) {
        std::fprintf(stderr, "kjit-bench --headers-child: unknown mode '%s' or bad count %d\n", mode_id.c_str(), n);
        return 2;
    }
    try {
        const HeaderTree tree = header_tree_at(tree_root);
        std::vector<std::string> sources;
        std::vector<OwnedOptions> owned(static_cast<std::size_t>(n));
        std::vector<kjit_compile_options> options;
        for (int i = 0; i < n; ++i) {
            OwnedOptions &o = owned[static_cast<std::size_t>(i)];
            if (mode->humming) {
                sources.push_back(hum_source(i));
                hum_options(o, i, cache, arch);
            } else {
                sources.push_back(tree_kernel_source(i));
                tree_options(o, tree, cache, arch);
            }
            options.push_back(o.opts);
        }
        const char *keyword = mode->humming ? kHumKeyword : kTreeKeyword;
        const kjit_stats before = stats_now();
        const auto started = Clock::now();
        if (mode->batch) {
            run_batch(sources, keyword, options, kBatchWorkers, mode->pch, std::string("headers: ") + mode->label);
        } else {
            for (int i = 0; i < n; ++i) {
                char path[4096];
                const kjit_status s = kjit_compile(sources[static_cast<std::size_t>(i)].c_str(), keyword,
                                                   &options[static_cast<std::size_t>(i)], path, sizeof path, nullptr);
                if (s != KJIT_OK) fail_kjit("kjit_compile of tree kernel " + std::to_string(i), s);
            }
        }
        const double us = elapsed_us(started, Clock::now());
        const kjit_stats after = stats_now();
        std::printf("call_us %.0f\nhits %llu\nmisses %llu\nnvrtc %llu\n", us,
                    static_cast<unsigned long long>(after.compile_hits - before.compile_hits),
                    static_cast<unsigned long long>(after.compile_misses - before.compile_misses),
                    static_cast<unsigned long long>(after.nvrtc_compiles - before.nvrtc_compiles));
        return 0;
    } catch (const BenchError &e) {
        std::fprintf(stderr, "kjit-bench --headers-child %s: %s\n", mode_id.c_str(), e.what());
        return 1;
    }
}

void run_headers(const BenchOptions &o, Report &report) {
    if (o.header_kernels > tree_kernel_count())
        fail("--header-kernels is at most " + std::to_string(tree_kernel_count()));
    if (o.header_batch > tree_kernel_count()) fail("--header-batch is at most " + std::to_string(tree_kernel_count()));
    const int n = o.header_kernels;
    const int m = o.header_batch;
    const std::string self = self_executable();
    std::fprintf(stderr, "headers: writing the header tree into %s/header-tree...\n", o.work_dir.c_str());
    const HeaderTree tree = write_header_tree(o.work_dir + "/header-tree");
    const std::string edited_original = read_file(tree.edited_header);
    const std::string orphan_original = read_file(tree.orphan_header);

    auto child = [&](const char *mode, const std::string &cache, int count) {
        const ChildResult r =
            run_child({self, "--headers-child", mode, cache, tree.root, std::to_string(count), o.arch});
        if (!r.started || r.exit_status != 0) {
            fail(std::string("the headers child (") + mode + ") failed, exit " + std::to_string(r.exit_status) + ": " +
                 r.err);
        }
        ChildOutcome out;
        out.spawn_us = r.wall_seconds * 1e6;
        std::istringstream lines(r.out);
        std::string key;
        double value = 0;
        bool timed = false;
        while (lines >> key >> value) {
            if (key == "call_us") out.call_us = value, timed = true;
            else if (key == "hits") out.hits = static_cast<long>(value);
            else if (key == "misses") out.misses = static_cast<long>(value);
            else if (key == "nvrtc") out.nvrtc = static_cast<long>(value);
        }
        if (!timed) fail(std::string("the headers child (") + mode + ") printed no time: " + r.out);
        return out;
    };

    // ---- one compile, for scale: plain raw NVRTC in this process (after an untimed one) -------
    OwnedOptions raw_owned;
    tree_options(raw_owned, tree, "", o.arch);
    std::vector<double> raw_us;
    {
        Progress progress("headers: one tree kernel, plain raw NVRTC", 3, "compiles");
        raw_nvrtc_compile(tree_kernel_source(0), o.arch, raw_owned.nvrtc);
        progress.tick();
        for (int i = 1; i < 3; ++i) {
            raw_us.push_back(time_once([&] { raw_nvrtc_compile(tree_kernel_source(i), o.arch, raw_owned.nvrtc); }));
            progress.tick();
        }
    }

    // ---- cold fill, then warm starts -----------------------------------------------------------
    TempDir warm(o.work_dir, "headers-warm-");
    ChildOutcome fill;
    {
        Progress progress("headers: cold fill of " + std::to_string(n) + " tree kernels (a fresh process, one batch)",
                          1, "runs");
        fill = child("tree-batch-default", warm.path(), n);
        progress.tick();
    }
    std::vector<double> warm_batch_call, warm_batch_spawn, warm_each_call, warm_each_spawn;
    long warm_batch_misses = 0, warm_each_misses = 0;
    {
        Progress progress("headers: warm starts (fresh processes, all hits)", 2L * o.header_repeats, "runs");
        for (int r = 0; r < o.header_repeats; ++r) {
            for (int k = 0; k < 2; ++k) {
                const bool batch = (k + r) % 2 == 0;
                const ChildOutcome c = child(batch ? "tree-batch-default" : "tree-each", warm.path(), n);
                (batch ? warm_batch_call : warm_each_call).push_back(c.call_us);
                (batch ? warm_batch_spawn : warm_each_spawn).push_back(c.spawn_us);
                (batch ? warm_batch_misses : warm_each_misses) += c.misses;
                progress.tick();
            }
        }
    }

    // ---- hits in this process: header-heavy against header-free -------------------------------
    const int tree_hits = std::min(n, kHitTreeKernels);
    std::vector<std::string> tree_sources, free_sources;
    for (int i = 0; i < tree_hits; ++i) tree_sources.push_back(tree_kernel_source(i));
    for (const GemmConfig &c : sweep_configs(kHitFreeKernels)) free_sources.push_back(sweep_source(c));
    TempDir free_cache(o.work_dir, "headers-free-");
    OwnedOptions tree_hit_owned;
    tree_options(tree_hit_owned, tree, warm.path(), o.arch);
    kjit_compile_options free_opts = KJIT_COMPILE_OPTIONS_INIT;
    free_opts.cache_dir = free_cache.path().c_str();
    free_opts.arch = o.arch.c_str();
    std::vector<double> tree_hit_us, free_hit_us, parse_us, check_us, stat_us;
    std::size_t dep_lines = 0, dep_absent = 0;
    long hit_misses = 0;
    {
        Progress progress("headers: kjit_compile hits, header-heavy and header-free", o.header_hit_rounds, "rounds");
        // Untimed: the header-free kernels' cold compiles, and one hit of each kernel.
        std::string tree0_path;
        for (const std::string &s : free_sources) compile_step(s, kSweepKeyword, free_opts);
        for (const std::string &s : free_sources) compile_step(s, kSweepKeyword, free_opts);
        for (const std::string &s : tree_sources) {
            const CompileStep step = compile_step(s, kTreeKeyword, tree_hit_owned.opts);
            if (tree0_path.empty()) tree0_path = step.path;
        }
        const std::string deps_file = folder_of(tree0_path) + "/deps.txt";
        // The folders the entry's deps.txt names files relative to: the tree request's, as keyed.
        kjit::key::Request tree_request;
        tree_request.source = tree_sources.front();
        tree_request.keyword = kTreeKeyword;
        tree_request.cache_dir = warm.path();
        tree_request.arch = o.arch;
        tree_request.nvrtc_options = tree.nvrtc_options();
        auto tree_keyed = kjit::key::key_request(tree_request);
        if (!tree_keyed) fail("cannot key the tree request: " + tree_keyed.error().message);
        const kjit::key::include_scanner::Search &tree_search = tree_keyed->request.search;
        const kjit_stats before = stats_now();
        for (int r = 0; r < o.header_hit_rounds; ++r) {
            char path[4096];
            for (const std::string &s : tree_sources) {
                tree_hit_us.push_back(time_once([&] {
                    const kjit_status st =
                        kjit_compile(s.c_str(), kTreeKeyword, &tree_hit_owned.opts, path, sizeof path, nullptr);
                    if (st != KJIT_OK) fail_kjit("kjit_compile (tree hit)", st);
                }));
            }
            for (int k = 0; k < tree_hits; ++k) {
                const std::string &s = free_sources[static_cast<std::size_t>(k) % free_sources.size()];
                free_hit_us.push_back(time_once([&] {
                    const kjit_status st =
                        kjit_compile(s.c_str(), kSweepKeyword, &free_opts, path, sizeof path, nullptr);
                    if (st != KJIT_OK) fail_kjit("kjit_compile (header-free hit)", st);
                }));
            }
            // What a tree hit checks, piece by piece, on the first kernel's entry.
            std::vector<kjit::key::include_scanner::Dependency> deps;
            parse_us.push_back(time_once([&] {
                auto parsed = kjit::key::include_scanner::parse(read_file(deps_file), tree_search);
                if (!parsed) fail("cannot parse '" + deps_file + "'");
                deps = std::move(*parsed);
            }));
            dep_lines = deps.size();
            dep_absent = 0;
            for (const auto &d : deps) dep_absent += d.exists ? 0 : 1;
            check_us.push_back(time_once([&] {
                if (!kjit::key::include_scanner::still_current(deps)) fail("the tree changed under the hit rounds");
            }));
            stat_us.push_back(time_once([&] {
                struct stat st {};
                for (const auto &d : deps) (void)::stat(d.path.c_str(), &st);
            }));
            progress.tick();
        }
        const kjit_stats after = stats_now();
        hit_misses = static_cast<long>(after.compile_misses - before.compile_misses);
    }

    // ---- cold batches: PCH default against off, tree kernels and humming-style ----------------
    const ChildMode *const cold_modes[] = {&known_child_mode("tree-batch-default"), &known_child_mode("tree-batch-off"),
                                           &known_child_mode("hum-batch-default"), &known_child_mode("hum-batch-off")};
    std::vector<double> cold_us[4];  // per kernel: call / m
    long cold_misses[4] = {};
    {
        Progress progress("headers: cold batches of " + std::to_string(m) + ", PCH default and off (fresh processes)",
                          4L * o.header_repeats, "runs");
        for (int r = 0; r < o.header_repeats; ++r) {
            // Tree then humming; within each, which PCH mode goes first alternates by round.
            for (int pair = 0; pair < 2; ++pair) {
                for (int k = 0; k < 2; ++k) {
                    const int index = pair * 2 + (k + r) % 2;
                    TempDir cache(o.work_dir, "headers-cold-");
                    const ChildOutcome c = child(cold_modes[index]->id, cache.path(), m);
                    cold_us[index].push_back(c.call_us / m);
                    cold_misses[index] += c.misses;
                    progress.tick();
                }
            }
        }
    }

    // ---- the edit cycle -----------------------------------------------------------------------
    TempDir edit_cache(o.work_dir, "headers-edit-");
    OwnedOptions edit_owned;
    tree_options(edit_owned, tree, edit_cache.path(), o.arch);
    const std::string edit_source = tree_kernel_source(0);
    CompileStep first, again, edited, reverted, touched, unrelated;
    {
        Progress progress("headers: edit cycle (edit, revert, touch, unrelated edit)", 6, "compiles");
        first = compile_step(edit_source, kTreeKeyword, edit_owned.opts);
        progress.tick();
        again = compile_step(edit_source, kTreeKeyword, edit_owned.opts);
        progress.tick();
        rewrite(tree.edited_header, replace_once(edited_original, tree.edit_from, tree.edit_to));
        edited = compile_step(edit_source, kTreeKeyword, edit_owned.opts);
        progress.tick();
        rewrite(tree.edited_header, edited_original);
        reverted = compile_step(edit_source, kTreeKeyword, edit_owned.opts);
        progress.tick();
        touch(tree.edited_header);
        touched = compile_step(edit_source, kTreeKeyword, edit_owned.opts);
        progress.tick();
        rewrite(tree.orphan_header, orphan_original + "// an edit to a header nothing includes\n");
        unrelated = compile_step(edit_source, kTreeKeyword, edit_owned.opts);
        rewrite(tree.orphan_header, orphan_original);
        progress.tick();
    }
    if (!first.miss || !again.hit) {
        fail("the edit cycle's first compile was a " + hit_or_miss(first) + " and its repeat a " + hit_or_miss(again) +
             ": expected a miss into an empty cache, then a hit");
    }
    // Which text each cubin was built from, by the constant's stamp in it (two compiles of one
    // text differ in bytes, so the bytes alone cannot tell).
    if (!holds_word(first.cubin, tree.stamp_before))
        fail("the tree kernel's cubin does not carry the edited header's stamp");
    const bool edit_new_cubin =
        holds_word(edited.cubin, tree.stamp_after) && !holds_word(edited.cubin, tree.stamp_before);
    const bool revert_same_cubin =
        holds_word(reverted.cubin, tree.stamp_before) && !holds_word(reverted.cubin, tree.stamp_after);

    // ---- report -------------------------------------------------------------------------------
    char note[768];
    Section &s = report.section("headers", "header-heavy kernels: a generated CuTe/CUTLASS-shaped tree of " +
                                               std::to_string(tree.headers) + " headers, " + std::to_string(n) +
                                               " tree_gemm kernels, " + o.arch);
    s.rows.push_back(summarize("headers.raw_nvrtc", "(info) one tree kernel, plain raw NVRTC in this process", raw_us));
    s.rows.push_back(
        summarize("headers.cold_fill",
                  "cold fill of " + std::to_string(n) + ": one kjit_compile_batch, 2 workers, default PCH, per kernel",
                  {fill.call_us / n}));
    s.rows.push_back(
        summarize("headers.hit_tree", "kjit_compile hit, header-heavy tree kernel, per call", tree_hit_us));
    s.rows.push_back(
        summarize("headers.hit_free", "kjit_compile hit, header-free sweep kernel, per call", free_hit_us));
    s.rows.push_back(summarize("headers.deps_parse", "(info) of a tree hit: read + parse its deps.txt", parse_us));
    s.rows.push_back(
        summarize("headers.deps_check", "(info) of a tree hit: include_scanner check of the parsed list", check_us));
    s.rows.push_back(summarize("headers.deps_stat", "(info) floor: a bare stat of each deps.txt path", stat_us));
    s.rows.push_back(
        summarize("headers.warm_batch",
                  "warm start: one kjit_compile_batch of all " + std::to_string(n) + " (the call, in the child)",
                  warm_batch_call));
    s.rows.push_back(summarize("headers.warm_batch_process", "warm start: the same, spawn to exit", warm_batch_spawn));
    s.rows.push_back(summarize("headers.warm_each",
                               "warm start: " + std::to_string(n) + " kjit_compile calls (in the child)",
                               warm_each_call));
    s.rows.push_back(summarize("headers.warm_each_process", "warm start: the same, spawn to exit", warm_each_spawn));
    std::snprintf(note, sizeof note,
                  "hits: tree / header-free = %.2fx (%s vs %s); a tree kernel's deps.txt has %zu lines (%zu absent "
                  "candidates); misses among the timed hits: %ld",
                  median(tree_hit_us) / median(free_hit_us), format_us(median(tree_hit_us)).c_str(),
                  format_us(median(free_hit_us)).c_str(), dep_lines, dep_absent, hit_misses);
    s.notes.push_back(note);
    std::snprintf(note, sizeof note,
                  "what a tree hit checks, timed apart (median): deps.txt read+parse %s, the check of its lines %s "
                  "(bare stats %s, %.2f us per line)",
                  format_us(median(parse_us)).c_str(), format_us(median(check_us)).c_str(),
                  format_us(median(stat_us)).c_str(),
                  dep_lines ? median(stat_us) / static_cast<double>(dep_lines) : 0.0);
    s.notes.push_back(note);
    std::snprintf(note, sizeof note,
                  "cold fill: %s for %d kernels (%ld misses, %ld NVRTC runs); warm start misses: %ld in the batches, "
                  "%ld in the kjit_compile runs (all should hit)",
                  format_us(fill.call_us).c_str(), n, fill.misses, fill.nvrtc, warm_batch_misses, warm_each_misses);
    s.notes.push_back(note);

    Section &c = report.section("headers_pch", "cold kjit_compile_batch of " + std::to_string(m) +
                                                   " kernels, 2 workers, each in a fresh process on an empty cache, "
                                                   "default PCH policy vs KJIT_PCH_OFF, per kernel (call / N)");
    const char *const cold_ids[] = {"tree_default", "tree_off", "hum_default", "hum_off"};
    for (int k = 0; k < 4; ++k) {
        c.rows.push_back(summarize(std::string("headers_pch.") + cold_ids[k], cold_modes[k]->label, cold_us[k]));
    }
    const double hum_ratio = median(cold_us[2]) / median(cold_us[3]);
    const double tree_gain = median(cold_us[1]) / median(cold_us[0]);
    std::snprintf(note, sizeof note,
                  "tree kernels (shared headers): PCH_OFF / default = %.2fx (the PCH's gain); per round:", tree_gain);
    std::string per_round = note;
    for (std::size_t r = 0; r < cold_us[0].size(); ++r) {
        std::snprintf(note, sizeof note, " %.2fx", cold_us[1][r] / cold_us[0][r]);
        per_round += note;
    }
    c.notes.push_back(per_round);
    std::snprintf(note, sizeof note, "humming-style (a header each): default / PCH_OFF = %.3fx; per round:", hum_ratio);
    per_round = note;
    for (std::size_t r = 0; r < cold_us[2].size(); ++r) {
        std::snprintf(note, sizeof note, " %.3fx", cold_us[2][r] / cold_us[3][r]);
        per_round += note;
    }
    c.notes.push_back(per_round);
    std::snprintf(note, sizeof note, "misses (all should miss, %d per run): tree %ld/%ld, humming %ld/%ld", m,
                  cold_misses[0], cold_misses[1], cold_misses[2], cold_misses[3]);
    c.notes.push_back(note);

    Section &e = report.section("headers_edit", "edit cycle on tree kernel 0 (a cache of its own): each kjit_compile, "
                                                "hit or miss as kjit_get_stats counted it");
    const std::string edited_name = tree.edited_header.substr(tree.edited_header.rfind('/') + 1);
    e.rows.push_back(
        summarize("headers_edit.cold", "first compile into the empty cache: " + hit_or_miss(first), {first.us}));
    e.rows.push_back(summarize("headers_edit.repeat", "the same again: " + hit_or_miss(again), {again.us}));
    e.rows.push_back(summarize("headers_edit.edit",
                               "after editing " + edited_name +
                                   " (a constant the cubin carries): " + hit_or_miss(edited) +
                                   (edit_new_cubin ? ", cubin of the new text" : ", cubin of the OLD text"),
                               {edited.us}));
    e.rows.push_back(summarize("headers_edit.revert",
                               "after reverting the edit: " + hit_or_miss(reverted) +
                                   (revert_same_cubin ? ", cubin of the original text" : ", cubin of the EDITED text"),
                               {reverted.us}));
    e.rows.push_back(summarize("headers_edit.touch",
                               "after touching it (same text, new mtime): " + hit_or_miss(touched), {touched.us}));
    e.rows.push_back(summarize("headers_edit.unrelated",
                               "after editing a header nothing includes: " + hit_or_miss(unrelated), {unrelated.us}));
    std::snprintf(note, sizeof note,
                  "NVRTC runs: edit %ld, revert %ld, touch %ld, unrelated edit %ld; the edit's cubin path %s the "
                  "original's; which text a cubin was built from is read from the constant's stamp in it",
                  edited.nvrtc, reverted.nvrtc, touched.nvrtc, unrelated.nvrtc,
                  edited.path == first.path ? "is" : "is not");
    e.notes.push_back(note);

    Target hit_target{"headers_hit_over_free", "kjit_compile hit: header-heavy tree kernel / header-free kernel", 3,
                      true};
    hit_target.value = median(tree_hit_us) / median(free_hit_us);
    report.add_target(hit_target);
    Target warm_target{"headers_warm_start_s",
                       "warm start: a fresh process, " + std::to_string(n) +
                           " tree kernels in one batch (spawn to exit)",
                       0.5, true, TargetUnit::seconds};
    warm_target.value = median(warm_batch_spawn) / 1e6;
    report.add_target(warm_target);
    Target edit_target{"headers_edit_misses", "header edit -> a miss with a cubin from the new text", 1, false,
                       TargetUnit::yes_no};
    edit_target.value = edited.miss && edit_new_cubin ? 1 : 0;
    report.add_target(edit_target);
    Target revert_target{"headers_revert_hits", "header edit reverted -> a hit", 1, false, TargetUnit::yes_no};
    revert_target.value = reverted.hit ? 1 : 0;
    report.add_target(revert_target);
    Target touch_target{"headers_touch_hits", "header touched (same text) -> a hit", 1, false, TargetUnit::yes_no};
    touch_target.value = touched.hit ? 1 : 0;
    report.add_target(touch_target);
    Target unrelated_target{"headers_unrelated_edit_hits", "edit to a header nothing includes -> a hit", 1, false,
                            TargetUnit::yes_no};
    unrelated_target.value = unrelated.hit ? 1 : 0;
    report.add_target(unrelated_target);
    Target hum_target{"headers_hum_default_over_off", "humming-style cold batch: default PCH policy / KJIT_PCH_OFF",
                      1.05, true};
    hum_target.value = hum_ratio;
    report.add_target(hum_target);
    Target gain_target{"headers_tree_pch_gain", "tree kernels cold batch: KJIT_PCH_OFF / default PCH policy (PCH gain)",
                       1.1};
    gain_target.value = tree_gain;
    report.add_target(gain_target);

    report.meta["headers"] = {{"kernels", n},
                              {"batch", m},
                              {"repeats", o.header_repeats},
                              {"hit_rounds", o.header_hit_rounds},
                              {"tree", tree.root},
                              {"tree_headers", tree.headers},
                              {"deps_lines", dep_lines},
                              {"edit",
                               {{"edit", hit_or_miss(edited)},
                                {"edit_cubin_of_new_text", edit_new_cubin},
                                {"revert", hit_or_miss(reverted)},
                                {"revert_cubin_of_original_text", revert_same_cubin},
                                {"touch", hit_or_miss(touched)},
                                {"unrelated_edit", hit_or_miss(unrelated)}}}};
}

}  // namespace kjit_bench
