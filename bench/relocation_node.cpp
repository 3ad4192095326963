// kjit-relocation-node: one node of the relocation scenario (relocation_scenario.cpp), a fresh
// process on a cache folder of its own that asks for a manifest's kernels in one
// kjit_compile_batch (its defaults) and prints what it cost:
//
//   kjit-relocation-node MODE MANIFEST CACHE SEED BASE
//     MODE      build  compile into CACHE (seed_dirs "none"), then export CACHE into the seed
//                      folder SEED (kjit_cache_export, every arch)
//               ready  compile into CACHE with SEED as its seed folder ("none": no seed)
//     MANIFEST  kernels in bench/real_clients/prepare.py's format: {"kernels": [{"name",
//               "source" (a file), "keyword", "program_name", "arch", "options", "include_paths"}]}
//     BASE      base folders, separated by ':' (kjit_compile_options.base_dirs); "none": the
//               single entry "none" (no base folders, whatever KJIT_BASE_DIRS says); "-": the
//               options struct as 0.10.0 knew it (no base_dirs field), for an earlier libkjit
//
// Prints one line of "name=value" words: the library's version (kjit_version()), its
// kjit_get_stats counters (NVRTC runs, hits, misses, seed hits), the batch call's time and the
// export's (microseconds), and the entries exported. remote_storage is "none": only the seed
// can answer a local miss.
//
// It links libkjit.so alone and fills only the fields 0.10.0 knew unless base folders are
// given, so that the scenario can run it against 0.10.0's libkjit (LD_LIBRARY_PATH) beside this
// one, as the fleet scenario's node does.
#include "node_files.hpp"

#include "kjit/kjit.h"
#include "kjit/kjit_batch.h"
#include "kjit/kjit_cache.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using kjit_bench::read_text;

namespace {

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

// The size of a struct up to and including `last_field`: what a caller built against the
// release whose last field it was passes as struct_size.
#define KJIT_RELOCATION_SIZE_UP_TO(type, last_field) (offsetof(type, last_field) + sizeof(type::last_field))

struct Kernel {
    std::string source, keyword, program_name, arch;
    std::vector<std::string> options, include_paths;
};

bool strings_of(const nlohmann::json &k, const char *key, std::vector<std::string> &out) {
    if (!k.contains(key) || !k[key].is_array()) return false;
    for (const auto &v : k[key]) {
        if (!v.is_string()) return false;
        out.push_back(v.get<std::string>());
    }
    return true;
}

std::string string_of(const nlohmann::json &k, const char *key) {
    return k.contains(key) && k[key].is_string() ? k[key].get<std::string>() : std::string();
}

// The manifest's kernels with their sources read; "" on success, else what is wrong.
std::string load_kernels(const std::string &manifest, std::vector<Kernel> &out) {
    std::string text;
    if (!read_text(manifest, text)) return "cannot read " + manifest;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("kernels") || !j["kernels"].is_array() || j["kernels"].empty())
        return manifest + " is not a manifest with kernels";
    for (const auto &k : j["kernels"]) {
        Kernel c;
        c.keyword = string_of(k, "keyword");
        c.program_name = string_of(k, "program_name");
        c.arch = string_of(k, "arch");
        const std::string file = string_of(k, "source");
        if (c.keyword.empty() || c.arch.empty() || !read_text(file, c.source) || c.source.empty())
            return manifest + ": kernel " + std::to_string(out.size()) + " has no keyword, arch or readable source";
        if (!strings_of(k, "options", c.options) || !strings_of(k, "include_paths", c.include_paths))
            return manifest + ": kernel " + std::to_string(out.size()) + " has no options or include_paths list";
        out.push_back(std::move(c));
    }
    return "";
}

std::vector<std::string> split(const std::string &text, char separator) {
    std::vector<std::string> parts;
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t end = text.find(separator, at);
        const std::string part = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
        if (!part.empty()) parts.push_back(part);
        if (end == std::string::npos) break;
        at = end + 1;
    }
    return parts;
}

std::vector<const char *> pointers(const std::vector<std::string> &strings) {
    std::vector<const char *> out;
    for (const std::string &s : strings) out.push_back(s.c_str());
    return out;
}

// The batch's arguments, owning what the structs point at.
struct Requests {
    std::vector<std::vector<const char *>> argv, includes;
    std::vector<kjit_compile_options> options;
    std::vector<kjit_compile_request> requests;
    std::vector<const kjit_compile_request *> items;
};

// Fills `r` for every kernel; false (kjit_last_error() says why) when the library refuses the
// options' size.
bool make_requests(const std::vector<Kernel> &kernels, const char *cache, const char *const *seeds,
                   const std::vector<const char *> &base, bool old_struct, Requests &r) {
    const std::size_t n = kernels.size();
    r.argv.resize(n);
    r.includes.resize(n);
    r.options.resize(n);
    r.requests.resize(n);
    const std::size_t size =
        old_struct ? KJIT_RELOCATION_SIZE_UP_TO(kjit_compile_options, link_option_count) : sizeof(kjit_compile_options);
    for (std::size_t i = 0; i < n; ++i) {
        const Kernel &k = kernels[i];
        kjit_compile_options &o = r.options[i];
        if (kjit_compile_options_init(&o, size) != KJIT_OK) return false;
        r.argv[i] = pointers(k.options);
        r.includes[i] = pointers(k.include_paths);
        o.cache_dir = cache;
        o.arch = k.arch.c_str();
        o.nvrtc_options = r.argv[i].data();
        o.nvrtc_option_count = r.argv[i].size();
        o.include_paths = r.includes[i].data();
        o.include_path_count = r.includes[i].size();
        o.program_name = k.program_name.empty() ? nullptr : k.program_name.c_str();
        o.remote_storage = "none";
        o.seed_dirs = seeds;
        o.seed_dir_count = 1;
        if (!old_struct) {
            o.base_dirs = base.data();
            o.base_dir_count = base.size();
        }
        if (kjit_compile_request_init(&r.requests[i], sizeof(kjit_compile_request)) != KJIT_OK) return false;
        r.requests[i].source = k.source.c_str();
        r.requests[i].keyword = k.keyword.c_str();
        r.requests[i].options = &r.options[i];
    }
    for (const kjit_compile_request &q : r.requests) r.items.push_back(&q);
    return true;
}

kjit_stats stats_now() {
    kjit_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = KJIT_RELOCATION_SIZE_UP_TO(kjit_stats, seed_rejections);
    if (kjit_get_stats(&st) != KJIT_OK)
        std::fprintf(stderr, "kjit-relocation-node: kjit_get_stats: %s\n", kjit_last_error());
    return st;
}

int failed(const char *what, kjit_status s) {
    std::fprintf(stderr, "kjit-relocation-node: %s: %s: %s\n", what, kjit_status_string(s), kjit_last_error());
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    const std::string mode = argc == 6 ? argv[1] : "";
    if (mode != "build" && mode != "ready") {
        std::fprintf(stderr, "usage: kjit-relocation-node build|ready MANIFEST CACHE SEED BASE\n");
        return 2;
    }
    std::vector<Kernel> kernels;
    const std::string why = load_kernels(argv[2], kernels);
    if (!why.empty()) {
        std::fprintf(stderr, "kjit-relocation-node: %s\n", why.c_str());
        return 2;
    }
    const std::string base_arg = argv[5];
    const bool old_struct = base_arg == "-";
    const std::vector<std::string> base_list = old_struct ? std::vector<std::string>() : split(base_arg, ':');
    const std::vector<const char *> base = pointers(base_list);
    const char *const seeds[] = {mode == "ready" ? argv[4] : "none"};
    Requests r;
    if (!make_requests(kernels, argv[3], seeds, base, old_struct, r))
        return failed("the options", KJIT_ERROR_INVALID_ARGUMENT);
    kjit_batch_options batch;
    if (kjit_batch_options_init(&batch, sizeof batch) != KJIT_OK)
        return failed("kjit_batch_options_init", KJIT_ERROR_INVALID_ARGUMENT);

    const kjit_stats before = stats_now();
    kjit_batch_result *raw = nullptr;
    const Clock::time_point started = Clock::now();
    const kjit_status s = kjit_compile_batch(r.items.data(), r.items.size(), &batch, &raw);
    const double call_us = us_between(started, Clock::now());
    std::unique_ptr<kjit_batch_result, decltype(&kjit_batch_result_release)> result(raw, &kjit_batch_result_release);
    if (s != KJIT_OK) return failed("kjit_compile_batch", s);
    const kjit_stats after = stats_now();

    double export_us = 0;
    kjit_copy_report copied = KJIT_COPY_REPORT_INIT;
    if (mode == "build") {
        const Clock::time_point at = Clock::now();
        const kjit_status e = kjit_cache_export(argv[3], argv[4], nullptr, &copied, nullptr);
        export_us = us_between(at, Clock::now());
        if (e != KJIT_OK) return failed("kjit_cache_export", e);
    }
    using ull = unsigned long long;
    std::printf("version=%u kernels=%zu nvrtc=%llu hits=%llu misses=%llu seed_hits=%llu call_us=%.1f export_us=%.1f "
                "exported=%llu\n",
                kjit_version(), kernels.size(), static_cast<ull>(after.nvrtc_compiles - before.nvrtc_compiles),
                static_cast<ull>(after.compile_hits - before.compile_hits),
                static_cast<ull>(after.compile_misses - before.compile_misses),
                static_cast<ull>(after.seed_hits - before.seed_hits), call_us, export_us,
                static_cast<ull>(copied.copied_entries + copied.present_entries));
    return 0;
}
