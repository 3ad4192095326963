// kjit-serving-node: one process of the serving scenario (serving_scenario.cpp; docs/serving.md),
// on a cache folder of its own, that prints what it did and cost:
//
//   kjit-serving-node stage CACHE MANIFEST...
//       the staging run, with $KJIT_RECORD set by the scenario: every kernel of the manifests
//       (bench/real_clients/prepare.py's format: {"kernels": [{"source" (a file), "keyword",
//       "program_name", "arch", "options", "include_paths"}]}) in one kjit_compile_batch with its
//       defaults, then each again with kjit_compile (hits: the record must still hold it once)
//   kjit-serving-node batch RECORD CACHE
//       every request of a record (KJIT_RECORD's JSON lines, version 1) in one kjit_compile_batch
//       with its defaults: what `kjit warm RECORD` is timed against
//   kjit-serving-node serve RECORD CACHE
//       the strict serving run, with $KJIT_NO_COMPILE=1 set by the scenario: every request of the
//       record with kjit_compile, one after the other, as a server's warm-up asks for its kernels
//   kjit-serving-node miss RECORD CACHE N
//       a strict miss's cost: the record's first request with its source changed (not cached)
//       asked N times under KJIT_COMPILE_NEVER (fewer, never under 10, once they took 5 s), then
//       a header-free request that is not cached either N times (the same bound), then the first
//       request itself (cached) N times with the hit memo off ($KJIT_HIT_MEMO=0, read at each
//       call) and N times with it on
//
// Prints one line of "name=value" words: kjit_get_stats's counters over the timed calls (NVRTC
// runs, hits, misses, KJIT_ERROR_NOT_CACHED failures) and times in microseconds, and, for serve
// and miss, lines "samples_<what> <us> <us> ..." of each call's time, and whether NVRTC got mapped
// into the process (/proc/self/maps). It links libkjit.so alone: nothing else maps NVRTC.
// remote_storage and the seeds are "none": only the cache folder answers.
#include "node_files.hpp"

#include "kjit/kjit.h"
#include "kjit/kjit_batch.h"
#include "kjit/kjit_cache.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using kjit_bench::read_text;

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using ull = unsigned long long;

double us_since(Clock::time_point a) { return std::chrono::duration<double, std::micro>(Clock::now() - a).count(); }

// Whether a library whose file name holds `stem` is mapped into this process.
bool mapped(const char *stem) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        if (line.find(stem) != std::string::npos) return true;
    }
    return false;
}

// The field `name` of `j` as T; T() when it is missing, null or of another type.
template <typename T>
T field(const json &j, const char *name) {
    try {
        return j.contains(name) && !j.at(name).is_null() ? j.at(name).get<T>() : T();
    } catch (const json::exception &) {
        return T();
    }
}

// One request, owning what its options point at.
struct Request {
    std::string source, keyword, arch, program_name;
    std::optional<std::string> name_expression;
    std::vector<std::string> nvrtc_options, include_paths, link_inputs, link_options;
    std::vector<std::pair<std::string, std::string>> headers;

    std::vector<const char *> argv, includes, links, link_argv;
    std::vector<kjit_header> header_list;
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    kjit_compile_request item = KJIT_COMPILE_REQUEST_INIT;
};

const char *const kNoSeeds[] = {"none"};

std::vector<const char *> pointers(const std::vector<std::string> &strings) {
    std::vector<const char *> out;
    for (const std::string &s : strings) out.push_back(s.c_str());
    return out;
}

// Points r.options and r.item at r's fields (after r stopped moving).
void bind(Request &r, const char *cache, int compile_mode) {
    r.argv = pointers(r.nvrtc_options);
    r.includes = pointers(r.include_paths);
    r.links = pointers(r.link_inputs);
    r.link_argv = pointers(r.link_options);
    r.header_list.clear();
    for (const auto &h : r.headers) r.header_list.push_back(kjit_header{h.first.c_str(), h.second.c_str()});
    kjit_compile_options &o = r.options;
    o = kjit_compile_options KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache;
    o.arch = r.arch.c_str();
    o.nvrtc_options = r.argv.data();
    o.nvrtc_option_count = r.argv.size();
    o.include_paths = r.includes.data();
    o.include_path_count = r.includes.size();
    o.headers = r.header_list.data();
    o.header_count = r.header_list.size();
    o.name_expression = r.name_expression ? r.name_expression->c_str() : nullptr;
    o.program_name = r.program_name.empty() ? nullptr : r.program_name.c_str();
    o.link_inputs = r.links.data();
    o.link_input_count = r.links.size();
    o.link_options = r.link_argv.data();
    o.link_option_count = r.link_argv.size();
    o.remote_storage = "none";
    o.seed_dirs = kNoSeeds;
    o.seed_dir_count = 1;
    o.compile_mode = compile_mode;
    r.item.source = r.source.c_str();
    r.item.keyword = r.keyword.c_str();
    r.item.options = &o;
}

// The kernels of prepare.py's manifests, their sources read; "" on success, else what is wrong.
std::string load_manifest(const std::string &path, std::deque<Request> &out) {
    std::string text;
    if (!read_text(path, text)) return "cannot read " + path;
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("kernels") || !j["kernels"].is_array() || j["kernels"].empty())
        return path + " is not a manifest with kernels";
    for (const auto &k : j["kernels"]) {
        Request &r = out.emplace_back();
        r.keyword = field<std::string>(k, "keyword");
        r.arch = field<std::string>(k, "arch");
        r.program_name = field<std::string>(k, "program_name");
        r.nvrtc_options = field<std::vector<std::string>>(k, "options");
        r.include_paths = field<std::vector<std::string>>(k, "include_paths");
        if (r.keyword.empty() || r.arch.empty() || !read_text(field<std::string>(k, "source"), r.source) ||
            r.source.empty()) {
            return path + ": a kernel has no keyword, arch or readable source";
        }
    }
    return "";
}

// The requests of a record (docs/serving.md, "The record"), each line once; "" or what is wrong.
std::string load_record(const std::string &path, std::deque<Request> &out) {
    std::ifstream in(path);
    if (!in) return "cannot read the record " + path;
    for (std::string text; std::getline(in, text);) {
        const json line = json::parse(text, nullptr, false);
        if (line.is_discarded() || !line.is_object() || field<int>(line, "kjit_request") != 1)
            return path + ": a line that is no request of version 1";
        Request &r = out.emplace_back();
        r.source = field<std::string>(line, "source");
        r.keyword = field<std::string>(line, "keyword");
        r.arch = field<std::string>(line, "arch");
        r.program_name = field<std::string>(line, "program_name");
        if (const auto e = field<std::string>(line, "name_expression"); !e.empty()) r.name_expression = e;
        r.nvrtc_options = field<std::vector<std::string>>(line, "nvrtc_options");
        r.include_paths = field<std::vector<std::string>>(line, "include_paths");
        r.link_inputs = field<std::vector<std::string>>(line, "link_inputs");
        r.link_options = field<std::vector<std::string>>(line, "link_options");
        for (const auto &h : field<std::vector<std::vector<std::string>>>(line, "headers")) {
            if (h.size() == 2) r.headers.emplace_back(h[0], h[1]);
        }
        if (field<std::size_t>(line, "base_dirs") != 0) return path + ": a line under base folders (not made here)";
        if (r.source.empty() || r.keyword.empty() || r.arch.empty()) return path + ": a line without a request";
    }
    return out.empty() ? path + " holds no request" : "";
}

kjit_stats stats_now() {
    kjit_stats st = KJIT_STATS_INIT;
    if (kjit_get_stats(&st) != KJIT_OK)
        std::fprintf(stderr, "kjit-serving-node: kjit_get_stats: %s\n", kjit_last_error());
    return st;
}

// The counters of a stretch of work, as "name=value" words, each name after `prefix`.
std::string counts(const kjit_stats &a, const kjit_stats &b, const char *prefix = "") {
    char text[256];
    std::snprintf(text, sizeof text, "%snvrtc=%llu %shits=%llu %smisses=%llu %snot_cached=%llu", prefix,
                  static_cast<ull>(b.nvrtc_compiles - a.nvrtc_compiles), prefix,
                  static_cast<ull>(b.compile_hits - a.compile_hits), prefix,
                  static_cast<ull>(b.compile_misses - a.compile_misses), prefix,
                  static_cast<ull>(b.errors[KJIT_ERROR_NOT_CACHED] - a.errors[KJIT_ERROR_NOT_CACHED]));
    return text;
}

int failed(const std::string &what) {
    std::fprintf(stderr, "kjit-serving-node: %s\n", what.c_str());
    return 1;
}

int failed_status(const char *what, kjit_status s) {
    return failed(std::string(what) + ": " + kjit_status_string(s) + ": " + kjit_last_error());
}

// One kjit_compile_batch of every request with the batch's defaults; KJIT_OK when all succeeded.
kjit_status compile_all(std::deque<Request> &requests) {
    std::vector<const kjit_compile_request *> items;
    for (const Request &r : requests) items.push_back(&r.item);
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    kjit_batch_result *raw = nullptr;
    const kjit_status s = kjit_compile_batch(items.data(), items.size(), &batch, &raw);
    std::unique_ptr<kjit_batch_result, decltype(&kjit_batch_result_release)> result(raw, &kjit_batch_result_release);
    if (s != KJIT_OK || !raw) return s != KJIT_OK ? s : KJIT_ERROR_INVALID_ARGUMENT;
    for (std::size_t i = 0; i < items.size(); ++i) {
        const int st = kjit_batch_result_status(raw, i);
        if (st != KJIT_OK) {
            std::fprintf(stderr, "kjit-serving-node: batch item %zu: %s\n", i, kjit_batch_result_error(raw, i));
            return static_cast<kjit_status>(st);
        }
    }
    return KJIT_OK;
}

kjit_status compile_one(const Request &r) {
    char path[4096];
    return kjit_compile(r.item.source, r.item.keyword, r.item.options, path, sizeof path, nullptr);
}

void print_samples(const char *what, const std::vector<double> &us) {
    std::printf("samples_%s", what);
    for (const double v : us) std::printf(" %.3f", v);
    std::printf("\n");
}

int stage(const char *cache, int argc, char **argv) {
    std::deque<Request> requests;
    for (int i = 3; i < argc; ++i) {
        if (const std::string why = load_manifest(argv[i], requests); !why.empty()) return failed(why);
    }
    for (Request &r : requests) bind(r, cache, KJIT_COMPILE_ALWAYS);
    const kjit_stats before = stats_now();
    const Clock::time_point started = Clock::now();
    if (const kjit_status s = compile_all(requests); s != KJIT_OK) return failed_status("the staging batch", s);
    const double batch_us = us_since(started);
    const Clock::time_point again = Clock::now();
    for (const Request &r : requests) {
        if (const kjit_status s = compile_one(r); s != KJIT_OK) return failed_status("a staging repeat", s);
    }
    const double again_us = us_since(again);
    std::printf("kernels=%zu asked=%zu %s batch_us=%.1f again_us=%.1f\n", requests.size(), 2 * requests.size(),
                counts(before, stats_now()).c_str(), batch_us, again_us);
    return 0;
}

int batch(const char *record, const char *cache) {
    std::deque<Request> requests;
    if (const std::string why = load_record(record, requests); !why.empty()) return failed(why);
    for (Request &r : requests) bind(r, cache, KJIT_COMPILE_ALWAYS);
    const kjit_stats before = stats_now();
    const Clock::time_point started = Clock::now();
    if (const kjit_status s = compile_all(requests); s != KJIT_OK) return failed_status("the batch", s);
    const double call_us = us_since(started);
    std::printf("requests=%zu %s call_us=%.1f\n", requests.size(), counts(before, stats_now()).c_str(), call_us);
    return 0;
}

// Every request once, with compile_mode from $KJIT_NO_COMPILE: a failure is counted, not fatal.
int serve(const char *record, const char *cache) {
    std::deque<Request> requests;
    if (const std::string why = load_record(record, requests); !why.empty()) return failed(why);
    for (Request &r : requests) bind(r, cache, KJIT_COMPILE_DEFAULT);
    std::vector<double> each;
    std::size_t ok = 0;
    const kjit_stats before = stats_now();
    const Clock::time_point started = Clock::now();
    for (const Request &r : requests) {
        const Clock::time_point at = Clock::now();
        const kjit_status s = compile_one(r);
        each.push_back(us_since(at));
        if (s == KJIT_OK) ++ok;
        else std::fprintf(stderr, "kjit-serving-node: serve: %s: %s\n", kjit_status_string(s), kjit_last_error());
    }
    const double call_us = us_since(started);
    const kjit_stats after = stats_now();
    std::printf("requests=%zu ok=%zu %s call_us=%.1f nvrtc_mapped=%d\n", requests.size(), ok,
                counts(before, after).c_str(), call_us, mapped("libnvrtc") ? 1 : 0);
    print_samples("each", each);
    return 0;
}

// `n` calls of `r`, each timed, or fewer (never under 10) once they took `budget_us` in all: a
// miss whose key scans a large include tree costs milliseconds. False when one returns other
// than `want`.
bool time_calls(const Request &r, long n, kjit_status want, std::vector<double> &us, double budget_us = 1e300) {
    double spent = 0;
    for (long i = 0; i < n && (i < 10 || spent < budget_us); ++i) {
        const Clock::time_point at = Clock::now();
        const kjit_status s = compile_one(r);
        us.push_back(us_since(at));
        spent += us.back();
        if (s != want) {
            std::fprintf(stderr, "kjit-serving-node: miss: call %ld gave %s, not %s: %s\n", i, kjit_status_string(s),
                         kjit_status_string(want), kjit_last_error());
            return false;
        }
    }
    return true;
}

// The most time each kind of strict miss is timed for (at least 10 calls are).
constexpr double kMissBudgetUs = 5e6;

int miss(const char *record, const char *cache, long n) {
    std::deque<Request> requests;
    if (const std::string why = load_record(record, requests); !why.empty()) return failed(why);
    requests.resize(1);
    requests.push_back(requests.front());
    requests.emplace_back();
    Request &cached = requests[0], &missing = requests[1], &plain = requests[2];
    missing.source += "\n// kjit-bench serving: a request that was never warmed\n";
    plain.source = "extern \"C\" __global__ void kjit_bench_never_warmed(float *p) { *p = 1.0f; }\n";
    plain.keyword = "kjit_bench_never_warmed";
    plain.arch = cached.arch;
    for (Request *r : {&cached, &missing, &plain}) bind(*r, cache, KJIT_COMPILE_NEVER);
    std::vector<double> miss_us, plain_us, full_us, memo_us;
    const kjit_stats before = stats_now();
    if (!time_calls(missing, n, KJIT_ERROR_NOT_CACHED, miss_us, kMissBudgetUs)) return 1;
    const std::string message = kjit_last_error();  // the last miss's
    if (!time_calls(plain, n, KJIT_ERROR_NOT_CACHED, plain_us, kMissBudgetUs)) return 1;
    const kjit_stats after_misses = stats_now();
    const bool nvrtc_after_misses = mapped("libnvrtc");
    ::setenv("KJIT_HIT_MEMO", "0", 1);
    if (!time_calls(cached, n, KJIT_OK, full_us)) return 1;
    ::unsetenv("KJIT_HIT_MEMO");
    if (!time_calls(cached, n, KJIT_OK, memo_us)) return 1;
    const kjit_stats after = stats_now();
    const bool named =
        message.find("is not cached") != std::string::npos && message.find(cached.keyword) != std::string::npos;
    std::printf("calls=%ld miss_calls=%zu plain_calls=%zu %s first_miss_us=%.3f nvrtc_mapped_after_misses=%d "
                "nvrtc_mapped=%d message_names_it=%d\n",
                n, miss_us.size(), plain_us.size(), counts(before, after_misses).c_str(), miss_us.front(),
                nvrtc_after_misses ? 1 : 0, mapped("libnvrtc") ? 1 : 0, named ? 1 : 0);
    std::printf("%s\n", counts(after_misses, after, "hit_").c_str());
    print_samples("miss", miss_us);
    print_samples("plain", plain_us);
    print_samples("full", full_us);
    print_samples("memo", memo_us);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    const std::string mode = argc >= 2 ? argv[1] : "";
    if (mode == "stage" && argc >= 4) return stage(argv[2], argc, argv);
    if (mode == "batch" && argc == 4) return batch(argv[2], argv[3]);
    if (mode == "serve" && argc == 4) return serve(argv[2], argv[3]);
    if (mode == "miss" && argc == 5 && std::atol(argv[4]) > 0) return miss(argv[2], argv[3], std::atol(argv[4]));
    std::fprintf(stderr,
                 "usage: kjit-serving-node stage CACHE MANIFEST... | batch RECORD CACHE | serve RECORD CACHE | miss "
                 "RECORD CACHE N\n");
    return 2;
}
