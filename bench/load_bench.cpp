// kjit-bench-load: a warm start of N cached kernels (default 300), as an autotuner's cache
// leaves them, with 1 and 2 threads.
//
// The kernels are N instantiations `sweep<K>` of a small templated kernel, each its own program
// and cache entry, compiled with kjit_compile into --cache (kept between runs; the first run
// compiles them). Then, in alternating rounds (--rounds, default 7) for 1 and 2 threads, each
// round timed as a whole with std::chrono::steady_clock and divided by N:
//   prepare   everything kjit_load_cached does before the driver call: read the cubin once and
//             resolve the name for those bytes (sidecar hit). kjit_internal's KernelLoader::prepare.
//   load      kjit_load_cached through the driver (the real one, or whatever KJIT_LIBCUDA names,
//             e.g. the test double on a machine without a GPU), then kjit_kernel_release of all
//             N, so every round loads anew. Skipped when no driver is usable.
//   reuse     kjit_load_cached of a kernel whose library is already loaded (no read), per call.
//   floor     for reference: open+read+close of each cubin and of its sidecar, no libkjit code:
//             what the machine's filesystem calls cost, and how they scale to 2 threads.
//   start-up  a fresh process (this program, spawned) that gets all N kernels ready the way an
//             autotuned application starts: kjit_compile (all hits) then kjit_load_cached, one
//             thread; against a fresh process that does the same on an empty cache (N cold
//             compiles), and one that only starts and exits. Wall time from spawn to exit.
//
// Usage: kjit-bench-load --cache DIR [--kernels N] [--rounds N] [--no-startup] [--json FILE]
#include "kjit/kjit.h"

#include "bench_common.hpp"
#include "kernel_loader.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace kjit_bench;

struct Options {
    std::string cache;
    int kernels = 300;
    int rounds = 7;
    bool startup = true;
    std::string json;
};

[[noreturn]] void usage(const char *argv0) {
    std::fprintf(stderr, "usage: %s --cache DIR [--kernels N] [--rounds N] [--no-startup] [--json FILE]\n", argv0);
    std::exit(2);
}

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--no-startup") {
            o.startup = false;
            continue;
        }
        if (i + 1 >= argc) usage(argv[0]);
        const std::string value = argv[++i];
        if (arg == "--cache") o.cache = value;
        else if (arg == "--kernels") o.kernels = std::atoi(value.c_str());
        else if (arg == "--rounds") o.rounds = std::atoi(value.c_str());
        else if (arg == "--json") o.json = value;
        else usage(argv[0]);
    }
    if (o.cache.empty() || o.kernels <= 0 || o.rounds <= 0) usage(argv[0]);
    return o;
}

std::string source_for(int k) {
    return "template <int K> __global__ void sweep(float *out, const float *in, int n) {\n"
           "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) out[i] = in[i] * K + 0.5f;\n"
           "}\n"
           "template __global__ void sweep<" + std::to_string(k) + ">(float *, const float *, int);\n";
}

// Runs body(i) for i in [0, n) on `threads` threads (interleaved); returns the wall time in us.
template <typename Body>
double timed_on_threads(int threads, int n, Body body) {
    const auto started = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int i = t; i < n; i += threads) body(i);
        });
    }
    for (auto &th : pool) th.join();
    return std::chrono::duration<double, std::micro>(Clock::now() - started).count();
}

void fail(const char *what, const std::string &detail) {
    std::fprintf(stderr, "kjit-bench-load: %s: %s\n", what, detail.c_str());
    std::exit(1);
}

// kjit_compile of kernel k into `cache` (a hit or a miss); returns the cubin path.
std::string compile_one(const std::string &cache, int k) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    char path[4096];
    const std::string source = source_for(k);
    if (kjit_compile(source.c_str(), "sweep", &options, path, sizeof path, nullptr) != KJIT_OK) {
        fail("kjit_compile", kjit_last_error());
    }
    return path;
}

// The spawned start-up process: get kernels 0..n-1 ready (compile, then load), or do nothing.
int child_main(const std::string &mode, const std::string &cache, int n) {
    if (mode == "nothing") return 0;
    const bool load = mode == "load";
    for (int k = 0; k < n; ++k) {
        const std::string path = compile_one(cache, k);
        if (!load) continue;
        kjit_kernel *kernel = nullptr;
        if (kjit_load_cached(path.c_str(), "sweep", &kernel) != KJIT_OK) fail("kjit_load_cached", kjit_last_error());
        // Kept loaded, as an application would, until exit.
    }
    return 0;
}

// Spawns this program as a start-up child and returns its wall time in seconds.
double time_child(const char *self, const std::string &mode, const std::string &cache, int n) {
    const std::string count = std::to_string(n);
    const char *args[] = {self, "--startup-child", mode.c_str(), cache.c_str(), count.c_str(), nullptr};
    const auto started = Clock::now();
    pid_t pid = 0;
    if (posix_spawn(&pid, self, nullptr, nullptr, const_cast<char *const *>(args), environ) != 0) {
        fail("posix_spawn", self);
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail("start-up child failed", mode);
    }
    return std::chrono::duration<double>(Clock::now() - started).count();
}

}  // namespace

int main(int argc, char **argv) {
    if (argc == 5 && std::strcmp(argv[1], "--startup-child") == 0) return child_main(argv[2], argv[3], std::atoi(argv[4]));
    const Options o = parse(argc, argv);
    const int n = o.kernels;
    std::vector<std::string> paths(static_cast<std::size_t>(n));

    // The cache: compiled once, hits afterwards.
    std::atomic<int> compiled{0};
    const double compile_us = timed_on_threads(2, n, [&](int k) {
        paths[static_cast<std::size_t>(k)] = compile_one(o.cache, k);
        if (const int done = ++compiled; isatty(2) && done % 10 == 0) std::fprintf(stderr, "\rcompiling %d/%d", done, n);
    });
    if (isatty(2)) std::fprintf(stderr, "\r                    \r");
    std::printf("kjit-bench-load: %d cached kernels in %s (%s), kjit_compile of all: %.2f s with 2 threads\n", n,
                o.cache.c_str(), filesystem_name(o.cache).c_str(), compile_us / 1e6);

    // Does a driver answer? The load rows need one.
    kjit_kernel *probe = nullptr;
    const kjit_status probe_status = kjit_load_cached(paths[0].c_str(), "sweep", &probe);
    const std::string no_driver = probe_status == KJIT_OK ? "" : kjit_last_error();
    kjit_kernel_release(probe);
    const char *libcuda = std::getenv("KJIT_LIBCUDA");
    const std::string driver = libcuda && *libcuda ? libcuda : "libcuda.so.1";

    std::vector<double> prepare_us[3], load_us[3], floor_us[3];  // per kernel, by thread count (1, 2)
    std::vector<kjit_kernel *> handles(static_cast<std::size_t>(n), nullptr);
    for (int round = 0; round < o.rounds; ++round) {
        for (int threads : {1, 2}) {
            const double p = timed_on_threads(threads, n, [&](int k) {
                auto prepared = kjit::KernelLoader::instance().prepare(paths[static_cast<std::size_t>(k)], "sweep");
                if (!prepared) fail("prepare", prepared.error().message);
            });
            prepare_us[threads].push_back(p / n);
            const double fl = timed_on_threads(threads, n, [&](int k) {
                char buf[65536];
                for (const std::string &file : {paths[static_cast<std::size_t>(k)],
                                                paths[static_cast<std::size_t>(k)] + ".name"}) {
                    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
                    if (fd < 0) fail("open", file);
                    while (::read(fd, buf, sizeof buf) > 0) {
                    }
                    ::close(fd);
                }
            });
            floor_us[threads].push_back(fl / n);
            if (!no_driver.empty()) continue;
            const double l = timed_on_threads(threads, n, [&](int k) {
                if (kjit_load_cached(paths[static_cast<std::size_t>(k)].c_str(), "sweep",
                                     &handles[static_cast<std::size_t>(k)]) != KJIT_OK) {
                    fail("kjit_load_cached", kjit_last_error());
                }
            });
            load_us[threads].push_back(l / n);
            for (kjit_kernel *&h : handles) {
                kjit_kernel_release(h);
                h = nullptr;
            }
        }
    }

    std::vector<Row> rows;
    rows.push_back(summarize("prepare_1t", "up to the driver call (read + sidecar resolve), 1 thread", prepare_us[1]));
    rows.push_back(summarize("prepare_2t", "up to the driver call (read + sidecar resolve), 2 threads", prepare_us[2]));
    rows.push_back(summarize("floor_1t", "floor: open+read+close of cubin and sidecar, 1 thread", floor_us[1]));
    rows.push_back(summarize("floor_2t", "floor: open+read+close of cubin and sidecar, 2 threads", floor_us[2]));
    Row load1, load2, reuse;
    if (no_driver.empty()) {
        load1 = summarize("load_1t", "kjit_load_cached through the driver, 1 thread", load_us[1]);
        load2 = summarize("load_2t", "kjit_load_cached through the driver, 2 threads", load_us[2]);
        // Reuse: one kernel held, then loaded again and released, per call.
        kjit_kernel *held = nullptr;
        kjit_load_cached(paths[0].c_str(), "sweep", &held);
        std::vector<double> us;
        for (int i = 0; i < 2000; ++i) {
            kjit_kernel *k = nullptr;
            const auto t0 = Clock::now();
            kjit_load_cached(paths[0].c_str(), "sweep", &k);
            us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
            kjit_kernel_release(k);
        }
        kjit_kernel_release(held);
        reuse = summarize("reuse", "kjit_load_cached, library already loaded (no read)", us);
    } else {
        for (Row *r : {&load1, &load2, &reuse}) {
            r->skipped = true;
            r->reason = no_driver;
        }
        load1.id = "load_1t";
        load2.id = "load_2t";
        reuse.id = "reuse";
        load1.label = "kjit_load_cached, 1 thread";
        load2.label = "kjit_load_cached, 2 threads";
        reuse.label = "kjit_load_cached, library already loaded";
    }
    rows.push_back(load1);
    rows.push_back(load2);
    rows.push_back(reuse);

    std::printf("driver: %s\n", no_driver.empty() ? driver.c_str() : "none usable");
    std::printf("\n%-11s %-60s %10s %10s %10s\n", "row", "what (per kernel; rounds of all kernels)", "median us",
                "p10 us", "p90 us");
    for (const Row &r : rows) {
        if (r.skipped) {
            std::printf("%-11s %-60s skipped: %s\n", r.id.c_str(), r.label.c_str(), r.reason.c_str());
        } else {
            std::printf("%-11s %-60s %10.2f %10.2f %10.2f\n", r.id.c_str(), r.label.c_str(), r.median_us, r.p10_us,
                        r.p90_us);
        }
    }
    const double prepare_scaling = rows[0].median_us / rows[1].median_us;
    std::printf("\n2-thread rate / 1-thread rate: prepare %.2fx, floor %.2fx", prepare_scaling,
                rows[2].median_us / rows[3].median_us);
    if (!load1.skipped) std::printf(", load %.2fx", load1.median_us / load2.median_us);
    std::printf("  (machine has %u CPUs)\n", std::thread::hardware_concurrency());

    // Start-up: fresh processes, one thread each. The cold one compiles into an empty cache.
    double startup_nothing = 0, startup_warm = 0, startup_cold = 0;
    if (o.startup && no_driver.empty()) {
        char self[4096];
        const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) fail("readlink", "/proc/self/exe");
        self[len] = '\0';
        char cold_dir[] = "/tmp/kjit-bench-cold-XXXXXX";
        if (!::mkdtemp(cold_dir)) fail("mkdtemp", cold_dir);
        std::vector<double> nothing, warm;
        for (int i = 0; i < 5; ++i) {
            nothing.push_back(time_child(self, "nothing", o.cache, n));
            warm.push_back(time_child(self, "load", o.cache, n));
        }
        std::sort(nothing.begin(), nothing.end());
        std::sort(warm.begin(), warm.end());
        startup_nothing = nothing[2];
        startup_warm = warm[2];
        if (isatty(2)) std::fprintf(stderr, "start-up: cold process compiling %d kernels...\n", n);
        startup_cold = time_child(self, "load", cold_dir, n);
        std::filesystem::remove_all(cold_dir);
        std::printf("\nstart-up of a fresh process, 1 thread, %d kernels ready to launch (median of 5; cold once):\n", n);
        std::printf("  warm (kjit_compile hits + kjit_load_cached)   %9.3f s\n", startup_warm);
        std::printf("  cold (empty cache: %d NVRTC compiles + loads) %9.3f s\n", n, startup_cold);
        std::printf("  a process that only starts and exits          %9.3f s\n", startup_nothing);
        std::printf("  cold / warm                                   %9.0f x\n", startup_cold / startup_warm);
    }

    if (!o.json.empty()) {
        FILE *f = std::fopen(o.json.c_str(), "w");
        if (!f) fail("cannot write", o.json);
        std::fprintf(f, "{\n  \"kernels\": %d,\n  \"rounds\": %d,\n  \"driver\": \"%s\",\n  \"rows\": [\n", n, o.rounds,
                     json_escape(no_driver.empty() ? driver : "none").c_str());
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Row &r = rows[i];
            std::fprintf(f, "    {\"id\": \"%s\", \"label\": \"%s\", \"skipped\": %s, \"median_us\": %.3f, "
                            "\"p10_us\": %.3f, \"p90_us\": %.3f, \"samples\": %ld}%s\n",
                         r.id.c_str(), json_escape(r.label).c_str(), r.skipped ? "true" : "false", r.median_us,
                         r.p10_us, r.p90_us, r.samples, i + 1 < rows.size() ? "," : "");
        }
        std::fprintf(f, "  ],\n  \"startup_s\": {\"warm\": %.4f, \"cold\": %.4f, \"nothing\": %.4f}\n}\n",
                     startup_warm, startup_cold, startup_nothing);
        std::fclose(f);
    }
    return 0;
}
