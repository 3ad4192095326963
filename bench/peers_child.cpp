// The peers scenario's C child (peers_scenario.cpp): a program like a kernel library's, linking
// only libkjit.so (the bench itself links NVRTC for its raw-NVRTC rows, which would hide whether
// libkjit loads it), chosen by LD_LIBRARY_PATH among builds.
//
//   kjit-peers-child MODE CACHE ARCH REPEATS REQUESTS_JSON
//
// (the scenario leaves its requests in WORK_DIR/requests-peers.json, to run one by hand)
// Gets a loadable cubin's path and its kernel's name for the requests of MODE in REQUESTS_JSON
// (each {"source", "keyword", "nvrtc_options"}), with kjit_compile_named where this libkjit has
// it, else kjit_compile + kjit_resolve_name, and prints:
//   MODE small | cub (requests: the measured kernel, then another of its kind):
//     process_first <us>  the first call of the process (the other kernel: one-time set-up)
//     kernel_first <us>   the measured kernel's first hit in that warm process
//     repeat <us>         its repeats, mean over REPEATS
//     prepared_repeat <us> where this libkjit has kjit_prepare (0.14): the measured kernel's
//                         request prepared once, then its kjit_prepared_compile, mean over REPEATS
//     floor <us>          what proving a repeat costs at the least: a read() of an empty
//                         non-blocking inotify descriptor (the header watch's one system call),
//                         mean over REPEATS
//   MODE sweep: ready <us>, from main() to the last kernel's path and name
//   always: "api named|two_calls", "nvrtc mapped|absent" (NVRTC mapped at the end)
#include "kjit/kjit.h"

#include <dlfcn.h>
#include <nlohmann/json.hpp>
#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

bool nvrtc_mapped() {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        if (line.find("/libnvrtc.") != std::string::npos) return true;
    }
    return false;
}

struct Request {
    std::string source, keyword;
    std::vector<std::string> options;
    std::vector<const char *> argv;
    // The size of 0.5's struct: the same child runs against an earlier build (the baseline),
    // which refuses a struct larger than its own.
    kjit_compile_options opts = [] {
        kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
        o.struct_size = offsetof(kjit_compile_options, max_cache_size) + sizeof o.max_cache_size;
        return o;
    }();
};

// The prepared_repeat and floor lines (MODE small and cub), where this libkjit has kjit_prepare.
void prepared_rows(const Request &r, long repeats) {
    using PrepareFn = decltype(&kjit_prepare);
    using CompileFn = decltype(&kjit_prepared_compile);
    using ReleaseFn = decltype(&kjit_prepared_release);
    const auto prepare = reinterpret_cast<PrepareFn>(::dlsym(RTLD_DEFAULT, "kjit_prepare"));
    const auto compile = reinterpret_cast<CompileFn>(::dlsym(RTLD_DEFAULT, "kjit_prepared_compile"));
    const auto release = reinterpret_cast<ReleaseFn>(::dlsym(RTLD_DEFAULT, "kjit_prepared_release"));
    if (!prepare || !compile || !release) return;
    kjit_prepared *p = nullptr;
    char path[4096], name[512];
    if (prepare(r.source.c_str(), r.keyword.c_str(), &r.opts, &p) != KJIT_OK ||
        compile(p, path, sizeof path, nullptr, name, sizeof name, nullptr) != KJIT_OK) {
        std::fprintf(stderr, "prepared %s: %s\n", r.keyword.c_str(), kjit_last_error());
        std::exit(1);
    }
    auto t0 = Clock::now();
    for (long i = 0; i < repeats; ++i) {
        if (compile(p, path, sizeof path, nullptr, name, sizeof name, nullptr) != KJIT_OK) {
            std::fprintf(stderr, "prepared %s: %s\n", r.keyword.c_str(), kjit_last_error());
            std::exit(1);
        }
    }
    std::printf("prepared_repeat %.4f\n", us_since(t0) / static_cast<double>(repeats));
    release(p);
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return;
    alignas(inotify_event) char events[4096];
    t0 = Clock::now();
    for (long i = 0; i < repeats; ++i) {
        if (::read(fd, events, sizeof events) >= 0) break;  // never: nothing is watched
    }
    std::printf("floor %.4f\n", us_since(t0) / static_cast<double>(repeats));
    ::close(fd);
}

}  // namespace

int main(int argc, char **argv) {
    const auto started = Clock::now();
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s MODE CACHE ARCH REPEATS REQUESTS_JSON\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1];
    const long repeats = std::atol(argv[4]);
    std::vector<Request> requests;
    {
        std::ifstream in(argv[5]);
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.contains(mode)) {
            std::fprintf(stderr, "%s: no requests for '%s'\n", argv[5], mode.c_str());
            return 2;
        }
        requests.resize(j[mode].size());
        for (std::size_t i = 0; i < requests.size(); ++i) {
            Request &r = requests[i];
            r.source = j[mode][i]["source"].get<std::string>();
            r.keyword = j[mode][i]["keyword"].get<std::string>();
            r.options = j[mode][i]["nvrtc_options"].get<std::vector<std::string>>();
        }
    }
    // The options of each request, made once: the caller's side, not what is measured.
    for (Request &r : requests) {
        for (const std::string &o : r.options) r.argv.push_back(o.c_str());
        r.opts.cache_dir = argv[2];
        r.opts.arch = argv[3];
        r.opts.nvrtc_options = r.argv.data();
        r.opts.nvrtc_option_count = r.argv.size();
    }
    using NamedFn = decltype(&kjit_compile_named);
    const auto named = reinterpret_cast<NamedFn>(::dlsym(RTLD_DEFAULT, "kjit_compile_named"));
    char path[4096], name[512];
    auto ready = [&](const Request &r) {
        kjit_status s = KJIT_OK;
        if (named) {
            s = named(r.source.c_str(), r.keyword.c_str(), &r.opts, path, sizeof path, nullptr, name, sizeof name,
                      nullptr);
        } else {
            s = kjit_compile(r.source.c_str(), r.keyword.c_str(), &r.opts, path, sizeof path, nullptr);
            if (s == KJIT_OK) s = kjit_resolve_name(path, r.keyword.c_str(), name, sizeof name, nullptr);
        }
        if (s != KJIT_OK) {
            std::fprintf(stderr, "path and name of %s: %s: %s\n", r.keyword.c_str(), kjit_status_string(s),
                         kjit_last_error());
            std::exit(1);
        }
    };
    if (mode == "sweep") {
        for (const Request &r : requests) ready(r);
        std::printf("ready %.3f\n", us_since(started));
    } else {
        if (requests.size() != 2 || repeats < 1) {
            std::fprintf(stderr, "mode %s wants 2 requests and REPEATS >= 1\n", mode.c_str());
            return 2;
        }
        auto t0 = Clock::now();
        ready(requests[1]);
        std::printf("process_first %.3f\n", us_since(t0));
        t0 = Clock::now();
        ready(requests[0]);
        std::printf("kernel_first %.3f\n", us_since(t0));
        t0 = Clock::now();
        for (long i = 0; i < repeats; ++i) ready(requests[0]);
        std::printf("repeat %.4f\n", us_since(t0) / static_cast<double>(repeats));
        prepared_rows(requests[0], repeats);
    }
    std::printf("api %s\nnvrtc %s\n", named ? "named" : "two_calls", nvrtc_mapped() ? "mapped" : "absent");
    return 0;
}
