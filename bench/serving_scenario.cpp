// Scenario "serving": serving without JIT (issue 48, item 5; docs/serving.md): record what a
// staging run asks for, warm a cache from the record ahead of time, and serve strict. Every
// process is a fresh one linked to libkjit.so alone (kjit-serving-node, bench/serving_node.cpp,
// and the `kjit` command); every count comes from its kjit_get_stats, never assumed.
//   the set     the real clients' kernels (deepgemm.json and humming.json in --clients, which
//               bench/real_clients/prepare.py writes; those present), else, and said, the first
//               --serving-kernels (24) kernels of the header tree the headers scenario writes
//               (header_tree.hpp), written into the scenario's temp folder
//   record      a staging run with KJIT_RECORD=FILE over an empty staging cache: the set in one
//               kjit_compile_batch, then each kernel again with kjit_compile (hits); the record
//               must hold each distinct request once (its lines against the distinct requests of
//               the manifests, compared by their fields)
//   warm        `kjit warm RECORD --cache-dir EMPTY --json` (the bench's build's bin/kjit) against
//               kjit_compile_batch of the record's requests on another empty cache (kjit-serving-node
//               batch), both spawn to exit, --serving-rounds (2) rounds, the order swapped each
//               round; the last warm cache is served from
//   strict      a fresh process with KJIT_NO_COMPILE=1 asking every recorded request once with
//               kjit_compile over the warmed cache: NVRTC runs, hits, misses, and its time
//   a miss      one process: a request that is not cached (the record's first, its source changed)
//               asked --serving-misses (2000) times under KJIT_COMPILE_NEVER (each
//               KJIT_ERROR_NOT_CACHED; fewer, never under 10, once they took 5 s: its key scans the
//               include tree), a header-free one as many times, then the record's first as
//               many times with the hit memo off (KJIT_HIT_MEMO=0) and on; whether NVRTC got mapped
// Everything lives in one temp folder, removed on the way out.
#include "scenarios.hpp"

#include "header_tree.hpp"
#include "progress.hpp"
#include "support.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace kjit_bench {

namespace {

using Counts = std::map<std::string, double>;

// Sets (or, with nullptr, unsets) an environment variable for the children spawned while this
// object lives; puts it back as it was after.
class ScopedEnv {
public:
    ScopedEnv(const char *name, const char *value) : name_(name) {
        const char *was = std::getenv(name);
        had_ = was != nullptr;
        saved_ = was ? was : "";
        if (value) ::setenv(name, value, 1);
        else ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_) ::setenv(name_.c_str(), saved_.c_str(), 1);
        else ::unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
    std::string name_, saved_;
    bool had_ = false;
};

// The kernels the staging run asks for: prepare.py-format manifests.
struct ServingSet {
    std::string name;  // "deepgemm+humming", "deepgemm", "humming" or "header-tree"
    std::vector<std::string> manifests;
    std::string fallback;  // why the real clients' set is not used ("" when it is)
    int kernels = 0;
    int distinct = 0;  // distinct requests among them, by their fields
};

// Each kernel's request as one string of its fields (the source's text, not its file): equal
// strings are the same request.
void count_requests(const std::string &manifest, std::set<std::string> &distinct, int &kernels) {
    const nlohmann::json j = nlohmann::json::parse(read_file(manifest), nullptr, false);
    if (j.is_discarded() || !j.contains("kernels") || !j["kernels"].is_array() || j["kernels"].empty())
        fail("'" + manifest + "' is not a manifest with kernels");
    for (const auto &k : j["kernels"]) {
        nlohmann::json fields = k;
        fields.erase("name");
        fields["source"] = read_file(json_string(k, "source", ""));
        distinct.insert(fields.dump());
        ++kernels;
    }
}

// The first `n` tree kernels, their sources written under `folder`, as a kernel manifest.
nlohmann::json tree_manifest(const HeaderTree &tree, const std::string &folder, int n, const std::string &arch) {
    std::vector<std::string> sources;
    for (int i = 0; i < n; ++i) {
        sources.push_back(folder + "/tree_" + std::to_string(i) + ".cu");
        write_file(sources.back(), tree_kernel_source(i));
    }
    return tree_kernel_manifest(tree, sources, arch);
}

ServingSet serving_set(const BenchOptions &o, const std::string &work) {
    ServingSet s;
    for (const char *name : {"deepgemm", "humming"}) {
        const std::string path = o.clients_dir + "/" + name + ".json";
        if (::access(path.c_str(), R_OK) != 0) continue;
        s.manifests.push_back(path);
        s.name += (s.name.empty() ? "" : "+") + std::string(name);
    }
    if (s.manifests.empty()) {
        s.fallback = "no real clients' manifests in " + o.clients_dir +
                     " (bench/real_clients/prepare.py writes them from the pinned sources under $KJIT_BENCH_SOURCES): "
                     "the header tree's first " +
                     std::to_string(o.serving_kernels) + " kernels instead";
        s.name = "header-tree";
        const HeaderTree tree = write_header_tree(work + "/header-tree");
        const std::string folder = work + "/tree-kernels";
        std::filesystem::create_directories(folder);
        s.manifests.push_back(work + "/header-tree.json");
        write_file(s.manifests.back(), tree_manifest(tree, folder, o.serving_kernels, o.arch).dump(1));
    }
    std::set<std::string> distinct;
    for (const std::string &m : s.manifests) count_requests(m, distinct, s.kernels);
    s.distinct = static_cast<int>(distinct.size());
    return s;
}

// What the record holds: its lines, those that are requests of version 1, their distinct ids.
struct RecordCheck {
    long lines = 0, requests = 0, distinct_ids = 0;
    std::string first;  // the first request's keyword: the strict misses change its source
    bool equals(int distinct_requests) const {
        return lines == distinct_requests && requests == lines && distinct_ids == lines;
    }
};

RecordCheck check_record(const std::string &path) {
    std::ifstream in(path);
    if (!in) fail("the staging run wrote no record at '" + path + "'");
    RecordCheck c;
    std::set<std::string> ids;
    for (std::string text; std::getline(in, text);) {
        if (text.empty()) continue;
        ++c.lines;
        const nlohmann::json line = nlohmann::json::parse(text, nullptr, false);
        if (line.is_discarded() || !line.is_object() || json_number(line, "kjit_request", 0) != 1) continue;
        if (++c.requests == 1) c.first = json_string(line, "keyword", "");
        ids.insert(json_string(line, "id", text));
    }
    c.distinct_ids = static_cast<long>(ids.size());
    return c;
}

// The numbers a child printed on lines "samples_<what> <us> <us> ...".
std::vector<double> samples_of(const std::string &out, const std::string &what) {
    const std::string tag = "samples_" + what + " ";
    const std::size_t at = out.find(tag);
    if (at == std::string::npos) fail("a serving node printed no " + tag + "line: '" + out.substr(0, 400) + "'");
    std::istringstream line(out.substr(at + tag.size(), out.find('\n', at) - at - tag.size()));
    std::vector<double> v;
    for (double x = 0; line >> x;) v.push_back(x);
    if (v.empty()) fail("a serving node printed an empty " + tag + "line");
    return v;
}

struct NodeRun {
    Counts c;
    std::string out;
    double wall_us = 0;
};

struct Ways {
    std::string node;  // kjit-serving-node's path
    std::string kjit;  // the kjit command's path ("" when it is not built)

    NodeRun run(const std::vector<std::string> &args, const std::vector<std::string> &required) const {
        std::vector<std::string> argv = {node};
        argv.insert(argv.end(), args.begin(), args.end());
        const ChildResult r = run_child(argv);
        if (!r.started || r.exit_status != 0)
            fail("kjit-serving-node " + args[0] + " failed, exit " + std::to_string(r.exit_status) + ": " + r.err);
        return {parse_counts(r.out, required, "kjit-serving-node " + args[0]), r.out, r.wall_seconds * 1e6};
    }

    // `kjit warm RECORD --cache-dir CACHE --json`: its summary and its time, spawn to exit.
    NodeRun warm(const std::string &record, const std::string &cache) const {
        if (kjit.empty()) return run({"batch", record, cache}, {"requests", "nvrtc"});
        const ChildResult r = run_child({kjit, "warm", record, "--cache-dir", cache, "--json"});
        if (!r.started || r.exit_status != 0)
            fail("kjit warm failed, exit " + std::to_string(r.exit_status) + ": " + r.err + r.out);
        const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
        if (j.is_discarded() || !j.is_object()) fail("kjit warm --json printed no object: '" + r.out + "'");
        NodeRun w{{}, r.out, r.wall_seconds * 1e6};
        for (const char *k : {"requests", "items", "compiled", "found", "failed"}) w.c[k] = json_number(j, k, -1);
        return w;
    }
};

struct Outcome {
    ServingSet set;
    std::string warm_way;
    std::string record;
    RecordCheck record_check;
    NodeRun stage, strict, miss;
    std::vector<NodeRun> warms, batches;
    double load_before = 0, load_after = 0;
};

double load_average() {
    std::ifstream in("/proc/loadavg");
    double v = 0;
    in >> v;
    return v;
}

void warm_rounds(const BenchOptions &o, const Ways &ways, const std::string &work, Outcome &out, Progress &progress) {
    for (int round = 0; round < o.serving_rounds; ++round) {
        const std::string at = work + "/round-" + std::to_string(round);
        const auto warm = [&] { out.warms.push_back(ways.warm(out.record, at + "-warm")); };
        const auto batch = [&] {
            out.batches.push_back(ways.run({"batch", out.record, at + "-batch"}, {"requests", "nvrtc", "call_us"}));
        };
        if (round % 2 == 0) {
            warm();
            batch();
        } else {
            batch();
            warm();
        }
        progress.tick();
        progress.tick();
        std::filesystem::remove_all(at + "-batch");
        if (round + 1 < o.serving_rounds) std::filesystem::remove_all(at + "-warm");
    }
}

Outcome measure(const BenchOptions &o, const Ways &ways, const std::string &work) {
    Outcome out;
    out.load_before = load_average();
    out.set = serving_set(o, work);
    out.warm_way = ways.kjit.empty() ? "kjit-serving-node batch (no bin/kjit: build the kjit_cli target)"
                                     : "kjit warm RECORD --cache-dir EMPTY";
    out.record = work + "/requests.jsonl";
    Progress progress("serving: " + out.set.name + ", " + std::to_string(out.set.kernels) +
                          " kernels recorded, warmed and served strict",
                      3 + 2 * o.serving_rounds, "steps");
    {
        ScopedEnv record("KJIT_RECORD", out.record.c_str());
        std::vector<std::string> args = {"stage", work + "/staging-cache"};
        args.insert(args.end(), out.set.manifests.begin(), out.set.manifests.end());
        out.stage = ways.run(args, {"kernels", "asked", "nvrtc", "hits", "batch_us", "again_us"});
    }
    out.record_check = check_record(out.record);
    progress.tick();
    warm_rounds(o, ways, work, out, progress);
    const std::string served = work + "/round-" + std::to_string(o.serving_rounds - 1) + "-warm";
    {
        ScopedEnv strict("KJIT_NO_COMPILE", "1");
        out.strict = ways.run({"serve", out.record, served},
                              {"requests", "ok", "nvrtc", "hits", "misses", "not_cached", "call_us", "nvrtc_mapped"});
    }
    progress.tick();
    out.miss = ways.run({"miss", out.record, served, std::to_string(o.serving_misses)},
                        {"calls", "miss_calls", "plain_calls", "nvrtc", "misses", "not_cached", "hit_hits", "hit_nvrtc",
                         "first_miss_us", "nvrtc_mapped_after_misses", "nvrtc_mapped", "message_names_it"});
    progress.tick();
    out.load_after = load_average();
    return out;
}

// ---- the report --------------------------------------------------------------------------------

std::vector<double> walls(const std::vector<NodeRun> &runs) {
    std::vector<double> v;
    for (const NodeRun &r : runs) v.push_back(r.wall_us);
    return v;
}

std::string fmt(const char *format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *format, ...) {
    char text[1024];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof text, format, args);
    va_end(args);
    return text;
}

void report_record_and_warm(const Outcome &r, Section &s) {
    const NodeRun &st = r.stage;
    s.rows.push_back(summarize("serving.stage",
                               "(info) staging run with KJIT_RECORD: " + std::to_string(r.set.kernels) +
                                   " kernels in one batch, then each again (hits), spawn to exit",
                               {st.wall_us}));
    s.notes.push_back(
        fmt("record: the staging run asked %.0f requests (%d distinct: a batch of %.0f, %.0f NVRTC runs, "
            "then each again, %.0f hits); the record holds %ld lines, %ld requests of version 1, %ld "
            "distinct ids: %s",
            st.c.at("asked"), r.set.distinct, st.c.at("kernels"), st.c.at("nvrtc"), st.c.at("hits"),
            r.record_check.lines, r.record_check.requests, r.record_check.distinct_ids,
            r.record_check.equals(r.set.distinct) ? "each distinct request once" : "NOT each distinct request once"));
    const double warm = median(walls(r.warms)), batch = median(walls(r.batches));
    s.rows.push_back(summarize("serving.warm", r.warm_way + ", spawn to exit", walls(r.warms)));
    s.rows.push_back(summarize("serving.batch",
                               "kjit_compile_batch of the record's requests (kjit-serving-node), empty cache, spawn "
                               "to exit",
                               walls(r.batches)));
    std::string rounds;
    for (std::size_t i = 0; i < r.warms.size(); ++i)
        rounds += fmt("%s%.2fx", i ? ", " : "", r.warms[i].wall_us / r.batches[i].wall_us);
    const Counts &w = r.warms.back().c;
    const std::string last = w.count("compiled") ? fmt("%.0f compiled, %.0f found, %.0f failed", w.at("compiled"),
                                                       w.at("found"), w.at("failed"))
                                                 : fmt("%.0f NVRTC runs", w.at("nvrtc"));
    s.notes.push_back(fmt("warm / batch of the same %ld requests on empty caches: %.2fx (medians %s / %s; by round: "
                          "%s); the last warm: %s",
                          r.record_check.requests, warm / batch, format_us(warm).c_str(), format_us(batch).c_str(),
                          rounds.c_str(), last.c_str()));
}

void report_strict(const Outcome &r, Section &s) {
    const Counts &c = r.strict.c;
    s.rows.push_back(summarize("serving.strict",
                               fmt("strict run (KJIT_NO_COMPILE=1, a fresh process): every recorded request once "
                                   "(%.0f kjit_compile calls), %.0f NVRTC runs, %.0f misses",
                                   c.at("requests"), c.at("nvrtc"), c.at("misses")),
                               {c.at("call_us")}));
    s.rows.push_back(summarize("serving.strict_each", "strict run: one request's first hit in the process",
                               samples_of(r.strict.out, "each")));
    s.notes.push_back(fmt("strict run over the warmed cache: %.0f of %.0f requests answered, %.0f hits, %.0f misses, "
                          "%.0f NOT_CACHED, %.0f NVRTC runs, NVRTC %s; %s for all, %s spawn to exit",
                          c.at("ok"), c.at("requests"), c.at("hits"), c.at("misses"), c.at("not_cached"), c.at("nvrtc"),
                          c.at("nvrtc_mapped") != 0 ? "mapped" : "never mapped", format_us(c.at("call_us")).c_str(),
                          format_us(r.strict.wall_us).c_str()));
    const Counts &m = r.miss.c;
    const std::vector<double> miss = samples_of(r.miss.out, "miss"), full = samples_of(r.miss.out, "full"),
                              memo = samples_of(r.miss.out, "memo"), plain = samples_of(r.miss.out, "plain");
    s.rows.push_back(summarize("serving.miss",
                               "a strict miss (KJIT_ERROR_NOT_CACHED): the record's first request, its source changed; "
                               "one process",
                               miss));
    s.rows.push_back(summarize("serving.miss_plain",
                               "(info) a strict miss of a header-free request (no include to scan for the key), same "
                               "process",
                               plain));
    s.rows.push_back(summarize(
        "serving.hit_full", "a hit of the record's first request, hit memo off (KJIT_HIT_MEMO=0), same process", full));
    s.rows.push_back(summarize("serving.hit_memo", "a repeat through the hit memo, same process", memo));
    s.notes.push_back(
        fmt("a strict miss (%s, its source changed): %s median (the process's first %s), %s for a "
            "header-free request; %.0f NOT_CACHED of %.0f calls (%.0f and %.0f; at most "
            "--serving-misses, 5 s each), %.0f NVRTC runs, the message names the kernel: %s; NVRTC "
            "mapped after the misses: %s, at the end: %s",
            r.record_check.first.c_str(), format_us(median(miss)).c_str(), format_us(m.at("first_miss_us")).c_str(),
            format_us(median(plain)).c_str(), m.at("not_cached"), m.at("miss_calls") + m.at("plain_calls"),
            m.at("miss_calls"), m.at("plain_calls"), m.at("nvrtc"), m.at("message_names_it") != 0 ? "yes" : "no",
            m.at("nvrtc_mapped_after_misses") != 0 ? "yes" : "no", m.at("nvrtc_mapped") != 0 ? "yes" : "no"));
    s.notes.push_back(fmt("a strict miss / a full hit (memo off): %.2fx; / a memo repeat: %.2fx (full hit %s, memo %s, "
                          "%.0f hits, %.0f NVRTC runs); the header-free miss / the same: %.2fx, %.2fx",
                          median(miss) / median(full), median(miss) / median(memo), format_us(median(full)).c_str(),
                          format_us(median(memo)).c_str(), m.at("hit_hits"), m.at("hit_nvrtc"),
                          median(plain) / median(full), median(plain) / median(memo)));
}

void add_targets(const Outcome &r, Report &report) {
    Target runs{"serving_strict_nvrtc_runs",
                "serving: NVRTC runs of the strict run over the warmed cache (every recorded request)", 0.0, true,
                TargetUnit::count};
    runs.value = r.strict.c.at("nvrtc");
    report.add_target(runs);
    Target misses{"serving_strict_misses", "serving: misses of the strict run over the warmed cache", 0.0, true,
                  TargetUnit::count};
    misses.value = r.strict.c.at("misses");
    report.add_target(misses);
    Target lines{"serving_record_lines_equal_distinct",
                 "serving: the record holds each distinct request of the staging run once (lines = distinct "
                 "requests)",
                 1, false, TargetUnit::yes_no};
    lines.value = r.record_check.equals(r.set.distinct) ? 1 : 0;
    report.add_target(lines);
}

nlohmann::json counts_json(const NodeRun &r) {
    nlohmann::json j = {{"wall_us", r.wall_us}};
    for (const auto &[name, value] : r.c) j[name] = value;
    return j;
}

nlohmann::json meta_of(const BenchOptions &o, const Outcome &r) {
    nlohmann::json warms = nlohmann::json::array(), batches = nlohmann::json::array();
    for (const NodeRun &w : r.warms) warms.push_back(counts_json(w));
    for (const NodeRun &b : r.batches) batches.push_back(counts_json(b));
    return {{"set", r.set.name},
            {"fallback", r.set.fallback},
            {"kernels", r.set.kernels},
            {"distinct_requests", r.set.distinct},
            {"arch", o.arch},
            {"record",
             {{"lines", r.record_check.lines},
              {"requests", r.record_check.requests},
              {"distinct_ids", r.record_check.distinct_ids},
              {"first_keyword", r.record_check.first}}},
            {"stage", counts_json(r.stage)},
            {"warm_way", r.warm_way},
            {"warm", warms},
            {"batch", batches},
            {"strict", counts_json(r.strict)},
            {"miss", counts_json(r.miss)},
            {"load_average", {r.load_before, r.load_after}}};
}

}  // namespace

void run_serving(const BenchOptions &o, Report &report) {
    if (o.serving_kernels > tree_kernel_count())
        fail("--serving-kernels is at most " + std::to_string(tree_kernel_count()));
    const std::string self = self_executable();
    const std::string kjit = folder_of(folder_of(self)) + "/bin/kjit";
    const Ways ways{folder_of(self) + "/kjit-serving-node", ::access(kjit.c_str(), X_OK) == 0 ? kjit : ""};
    TempDir work(o.work_dir, "serving-");
    const ScopedEnv no_record("KJIT_RECORD", nullptr), no_strict("KJIT_NO_COMPILE", nullptr);
    const Outcome r = measure(o, ways, work.path());

    Section &s = report.section("serving",
                                "serving without JIT: a staging run recorded (KJIT_RECORD), warmed from the record on "
                                "an empty cache, served strict (KJIT_NO_COMPILE=1); each a fresh process");
    s.notes.push_back("the set: " + r.set.name + ", " + std::to_string(r.set.kernels) + " kernels" +
                      (r.set.fallback.empty() ? "" : " (" + r.set.fallback + ")"));
    report_record_and_warm(r, s);
    report_strict(r, s);
    s.notes.push_back(fmt("load average (1 min) %.2f before, %.2f after", r.load_before, r.load_after));
    add_targets(r, report);
    report.meta["serving"] = meta_of(o, r);
}

}  // namespace kjit_bench
