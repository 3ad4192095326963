#include "warm.hpp"

#include "kjit/kjit.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace kjit_cli {

namespace {

using json = nlohmann::json;

constexpr int kExitUsage = 64;

// One recorded request, as a record line holds it.
struct Recorded {
    std::string id;  // the line's id ("" when it has none)
    std::string source, keyword, arch, program_name;
    std::optional<std::string> name_expression;
    std::vector<std::string> nvrtc_options, include_paths, link_inputs, link_options;
    std::vector<std::pair<std::string, std::string>> headers;
    // How many base folders its paths name as "{base N}" (docs/serving.md): the recording
    // process's, which a warming node gives as its own (--base-dir, $KJIT_BASE_DIRS).
    std::size_t base_dirs = 0;
};

// What a batch item points at, kept alive until the batch ends.
struct Item {
    const Recorded *request = nullptr;
    std::string arch;
    std::vector<const char *> nvrtc_options, include_paths, link_inputs, link_options, seed_dirs, base_dirs;
    std::vector<kjit_header> headers;
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    kjit_compile_request item = KJIT_COMPILE_REQUEST_INIT;
};

// The field `name` of `line` as T; T() when it is missing or of another type.
template <typename T>
T field(const json &line, const char *name) {
    try {
        return line.contains(name) && !line.at(name).is_null() ? line.at(name).get<T>() : T();
    } catch (const json::exception &) {
        return T();
    }
}

// The request of one record line, or nullopt when the line is no request of this format.
std::optional<Recorded> parse_line(const std::string &text) {
    const json line = json::parse(text, nullptr, false);
    if (line.is_discarded() || !line.is_object() || field<int>(line, "kjit_request") != 1) return std::nullopt;
    Recorded r;
    r.id = field<std::string>(line, "id");
    r.source = field<std::string>(line, "source");
    r.keyword = field<std::string>(line, "keyword");
    r.arch = field<std::string>(line, "arch");
    if (r.source.empty() || r.keyword.empty() || r.arch.empty()) return std::nullopt;
    r.program_name = field<std::string>(line, "program_name");
    if (const std::string e = field<std::string>(line, "name_expression"); !e.empty()) r.name_expression = e;
    r.nvrtc_options = field<std::vector<std::string>>(line, "nvrtc_options");
    r.include_paths = field<std::vector<std::string>>(line, "include_paths");
    r.link_inputs = field<std::vector<std::string>>(line, "link_inputs");
    r.link_options = field<std::vector<std::string>>(line, "link_options");
    r.base_dirs = field<std::size_t>(line, "base_dirs");
    for (const auto &h : field<std::vector<std::vector<std::string>>>(line, "headers")) {
        if (h.size() != 2) return std::nullopt;
        r.headers.emplace_back(h[0], h[1]);
    }
    return r;
}

// The requests of every record, each once (by its line's id, else its text); `skipped` counts
// the lines that are no request. Errors: a record that cannot be read, said on stderr.
bool read_records(const std::vector<std::string> &files, std::deque<Recorded> &out, std::size_t &skipped) {
    std::set<std::string> seen;
    for (const std::string &file : files) {
        std::ifstream in(file);
        if (!in) {
            std::fprintf(stderr, "kjit: warm: cannot read the record '%s'\n", file.c_str());
            return false;
        }
        for (std::string text; std::getline(in, text);) {
            if (text.empty()) continue;
            std::optional<Recorded> r = parse_line(text);
            if (!r) {
                ++skipped;
                continue;
            }
            if (seen.insert(r->id.empty() ? text : r->id).second) out.push_back(std::move(*r));
        }
    }
    return true;
}

// This node's base folders: --base-dir's, else $KJIT_BASE_DIRS's ("none" alone: none).
std::vector<std::string> base_folders(const WarmArgs &a) {
    std::vector<std::string> out = a.base_dirs;
    if (out.empty()) {
        const char *env = std::getenv("KJIT_BASE_DIRS");
        std::stringstream folders(env ? env : "");
        for (std::string dir; std::getline(folders, dir, ':');) {
            if (!dir.empty()) out.push_back(dir);
        }
    }
    if (out.size() == 1 && out[0] == "none") out.clear();
    return out;
}

// `text` with each "{base N}" (N < `names`) replaced by this node's base folder N.
std::string under_base_folders(std::string text, std::size_t names, const std::vector<std::string> &bases) {
    for (std::size_t n = 0; n < names; ++n) {
        const std::string label = "{base " + std::to_string(n) + "}";
        for (std::size_t at = text.find(label); at != std::string::npos; at = text.find(label, at + bases[n].size())) {
            text.replace(at, label.size(), bases[n]);
        }
    }
    return text;
}

// Gives the paths a record wrote relative to base folders ("{base N}/inc") this node's base
// folders; false (said on stderr) when a record names more base folders than this node has.
bool place_under_base_folders(std::deque<Recorded> &requests, const WarmArgs &a) {
    const std::vector<std::string> bases = base_folders(a);
    for (Recorded &r : requests) {
        if (r.base_dirs == 0) continue;
        if (r.base_dirs > bases.size()) {
            std::fprintf(stderr,
                         "kjit: warm: a record names its paths under %zu base folder(s) ('{base 0}'...), and %zu "
                         "are given: pass this node's install roots, in the recording's order, with --base-dir "
                         "(or $KJIT_BASE_DIRS)\n",
                         r.base_dirs, bases.size());
            return false;
        }
        const auto place = [&](std::string &text) { text = under_base_folders(std::move(text), r.base_dirs, bases); };
        place(r.program_name);
        for (auto *list : {&r.nvrtc_options, &r.include_paths, &r.link_inputs}) {
            for (std::string &text : *list) place(text);
        }
    }
    return true;
}

void fill(Item &it, const WarmArgs &a) {
    const Recorded &r = *it.request;
    for (const std::string &s : r.nvrtc_options) it.nvrtc_options.push_back(s.c_str());
    for (const std::string &s : r.include_paths) it.include_paths.push_back(s.c_str());
    for (const std::string &s : r.link_inputs) it.link_inputs.push_back(s.c_str());
    for (const std::string &s : r.link_options) it.link_options.push_back(s.c_str());
    for (const std::string &s : a.seed_dirs) it.seed_dirs.push_back(s.c_str());
    for (const std::string &s : a.base_dirs) it.base_dirs.push_back(s.c_str());
    for (const auto &h : r.headers) it.headers.push_back(kjit_header{h.first.c_str(), h.second.c_str()});
    kjit_compile_options &o = it.options;
    o.cache_dir = a.cache_dir.empty() ? nullptr : a.cache_dir.c_str();
    o.arch = it.arch.c_str();
    o.nvrtc_options = it.nvrtc_options.data();
    o.nvrtc_option_count = it.nvrtc_options.size();
    o.include_paths = it.include_paths.data();
    o.include_path_count = it.include_paths.size();
    o.headers = it.headers.data();
    o.header_count = it.headers.size();
    o.name_expression = r.name_expression ? r.name_expression->c_str() : nullptr;
    o.remote_storage = a.remote_storage.empty() ? nullptr : a.remote_storage.c_str();
    o.program_name = r.program_name.empty() ? nullptr : r.program_name.c_str();
    o.seed_dirs = it.seed_dirs.data();
    o.seed_dir_count = it.seed_dirs.size();
    o.base_dirs = it.base_dirs.data();
    o.base_dir_count = it.base_dirs.size();
    o.link_inputs = it.link_inputs.data();
    o.link_input_count = it.link_inputs.size();
    o.link_options = it.link_options.data();
    o.link_option_count = it.link_options.size();
    o.compile_mode = KJIT_COMPILE_ALWAYS;  // warming compiles, whatever $KJIT_NO_COMPILE says
    it.item.source = r.source.c_str();
    it.item.keyword = r.keyword.c_str();
    it.item.options = &o;
}

// One line of progress on a terminal: "kjit warm: 12/40".
int on_progress(void *, size_t done, size_t total, size_t, kjit_status, const char *) {
    std::fprintf(stderr, "\rkjit warm: %zu/%zu", done, total);
    if (done == total) std::fprintf(stderr, "\n");
    return 0;
}

std::string label(const Item &it) {
    const Recorded &r = *it.request;
    return (r.name_expression ? *r.name_expression : r.keyword) + " (" +
           (r.program_name.empty() ? std::string("source.cu") : r.program_name) + ", " + it.arch + ")";
}

}  // namespace

int run_warm(const WarmArgs &a) {
    std::deque<Recorded> requests;
    std::size_t skipped = 0;
    if (!read_records(a.records, requests, skipped)) return kExitUsage;
    if (requests.empty()) {
        std::fprintf(stderr, "kjit: warm: no request in %zu record(s) (%zu line(s) that are none)\n", a.records.size(),
                     skipped);
        return kExitUsage;
    }
    if (!place_under_base_folders(requests, a)) return kExitUsage;
    std::deque<Item> items;
    for (const Recorded &r : requests) {
        for (const std::string &arch : a.archs.empty() ? std::vector<std::string>{r.arch} : a.archs) {
            Item &it = items.emplace_back();
            it.request = &r;
            it.arch = arch;
            fill(it, a);
        }
    }
    std::vector<const kjit_compile_request *> pointers;
    for (const Item &it : items) pointers.push_back(&it.item);
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = a.jobs;
    batch.worker_kind = a.workers == "threads"     ? KJIT_WORKERS_THREADS
                        : a.workers == "processes" ? KJIT_WORKERS_PROCESSES
                        : a.workers == "auto"      ? KJIT_WORKERS_AUTOMATIC
                                                   : KJIT_WORKERS_DEFAULT;
    if (!a.json && ::isatty(STDERR_FILENO)) batch.progress = on_progress;
    kjit_stats before = KJIT_STATS_INIT, after = KJIT_STATS_INIT;
    kjit_get_stats(&before);
    kjit_batch_result *raw = nullptr;
    const kjit_status overall = kjit_compile_batch(pointers.data(), pointers.size(), &batch, &raw);
    kjit_get_stats(&after);
    if (!raw) {
        std::fprintf(stderr, "kjit: warm: %s: %s\n", kjit_status_string(overall), kjit_last_error());
        return overall;
    }
    std::size_t ok = 0;
    int first_failure = 0;
    json failures = json::array();
    for (std::size_t i = 0; i < items.size(); ++i) {
        const int st = kjit_batch_result_status(raw, i);
        if (st == KJIT_OK) {
            ++ok;
            continue;
        }
        if (!first_failure) first_failure = st;
        failures.push_back({{"request", label(items[i])},
                            {"status", kjit_status_string(static_cast<kjit_status>(st))},
                            {"error", kjit_batch_result_error(raw, i)}});
        if (!a.json) {
            std::fprintf(stderr, "kjit: warm: %s: %s: %s\n", label(items[i]).c_str(),
                         kjit_status_string(static_cast<kjit_status>(st)), kjit_batch_result_error(raw, i));
        }
    }
    kjit_batch_result_release(raw);
    const std::uint64_t compiled = after.nvrtc_compiles - before.nvrtc_compiles;
    const std::uint64_t found = ok >= compiled ? ok - compiled : 0;
    if (a.json) {
        std::cout << json{{"requests", requests.size()}, {"items", items.size()},
                          {"compiled", compiled},        {"found", found},
                          {"failed", failures.size()},   {"skipped_lines", skipped},
                          {"failures", failures}}
                         .dump(2)
                  << "\n";
    } else {
        std::printf("warmed %zu request(s) x %zu arch(es): %zu items, %llu compiled, %llu found (cache, seeds, "
                    "cluster), %zu failed",
                    requests.size(), a.archs.empty() ? std::size_t{1} : a.archs.size(), items.size(),
                    static_cast<unsigned long long>(compiled), static_cast<unsigned long long>(found), failures.size());
        if (skipped) std::printf("; %zu record line(s) that are no request skipped", skipped);
        std::printf("\n");
    }
    return first_failure;
}

}  // namespace kjit_cli
