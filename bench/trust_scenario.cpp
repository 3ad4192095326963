// Scenario 6: the price of the trust checks (ownership of the cache folder, entries and
// sidecars; the cubin's content hash; names and manifests checked). It times the paths those
// checks sit on, each in a child process (this program again) so that the same calls can run
// against two builds of libkjit in one bench run: this one, and, when bench/run.sh built it, the
// baseline before the checks (0.3.0), chosen by LD_LIBRARY_PATH (libkjit.so.0 has a stable ABI,
// and this program's RUNPATH yields to LD_LIBRARY_PATH). Rounds alternate the two builds to
// cancel drift; each row is the median over rounds of a per-call mean.
//
// The child (kjit-bench --trust-child CACHE ARCH CALLS LOADS) fills CACHE with a small kernel
// and a large one (the first round compiles them; every timed call is a hit), then prints one
// "<metric> <microseconds per call>" line per path:
//   compile.small/large  kjit_compile hit
//   resolve.small/large  kjit_resolve_name of the entry's cubin (sidecar hit)
//   load.small/large     kjit_load_cached + kjit_kernel_release of the entry's cubin: the
//                        release unloads the library, so every load reads the whole cubin (and
//                        now hashes it) and goes to the driver (the test double without a GPU)
// and "bytes.small/large <cubin size>". The parent adds XXH3-128 over the big test cubin, in
// microseconds per MB: the part of a load's price that grows with the cubin.
#include "scenarios.hpp"

#include "progress.hpp"
#include "support.hpp"

#include "kjit/kjit.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdio>
#include <map>
#include <sstream>

namespace kjit_bench {

namespace {

const char *const kTrustKeyword = "trust_gemm";

// A one-kernel source (a few KB of cubin).
std::string small_source() {
    return "__global__ void trust_gemm(float *p, int n) { for (int i = threadIdx.x; i < n; i += blockDim.x) "
           "p[i] = p[i] * 2.0f + 1.0f; }\n";
}

// The same kernel beside 32 unrolled fillers: a cubin of about a megabyte, as large tuned
// kernels are, so that what grows with the cubin (reading and hashing it) shows.
std::string large_source() {
    std::string s = small_source();
    s += "template <int N> __global__ void filler(float *p) {\n"
         "#pragma unroll\n"
         "  for (int i = 0; i < 256; ++i) p[(threadIdx.x * N + i) & 4095] += p[(i * 7 + N) & 4095] * (float)i;\n"
         "}\n";
    for (int i = 0; i < 32; ++i) s += "template __global__ void filler<" + std::to_string(i + 1) + ">(float *);\n";
    return s;
}

// Mean microseconds per call of `body`, over `calls` calls.
template <typename Body>
double per_call_us(long calls, Body &&body) {
    const auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) body();
    return elapsed_us(t0, Clock::now()) / static_cast<double>(calls);
}

}  // namespace

int trust_child_main(const std::string &cache, const std::string &arch, long calls, long loads) {
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    // The same child runs against 0.3.0's library, which refuses a struct larger than its own:
    // the fields it knows only, as a program built against its header passes them.
    opts.struct_size = offsetof(kjit_compile_options, max_cache_size) + sizeof opts.max_cache_size;
    opts.cache_dir = cache.c_str();
    opts.arch = arch.c_str();
    bool can_load = true;  // until the first load says there is no driver
    for (const auto &kernel : {std::make_pair("small", small_source()), std::make_pair("large", large_source())}) {
        // Named, not a structured binding: the lambdas below use them, and a lambda may capture
        // a structured binding only from C++20 (clang 14 refuses it in C++17; GCC allows it).
        const char *const label = kernel.first;
        const std::string &source = kernel.second;
        char path[4096];
        auto compile = [&] {
            const kjit_status s = kjit_compile(source.c_str(), kTrustKeyword, &opts, path, sizeof path, nullptr);
            if (s != KJIT_OK) {
                std::fprintf(stderr, "kjit_compile (%s): %s: %s\n", label, kjit_status_string(s), kjit_last_error());
                std::exit(1);
            }
        };
        compile();  // the first round's miss; every timed call below is a hit
        struct stat st {};
        if (::stat(path, &st) != 0) return 1;
        std::printf("bytes.%s %lld\n", label, static_cast<long long>(st.st_size));
        std::printf("compile.%s %.4f\n", label, per_call_us(calls, compile));
        std::printf("resolve.%s %.4f\n", label, per_call_us(calls, [&] {
                        char name[512];
                        if (kjit_resolve_name(path, kTrustKeyword, name, sizeof name, nullptr) != KJIT_OK) std::exit(1);
                    }));
        if (can_load) {
            kjit_kernel *probe = nullptr;
            const kjit_status p = kjit_load_cached(path, kTrustKeyword, &probe);
            kjit_kernel_release(probe);
            can_load = p != KJIT_ERROR_DRIVER_UNAVAILABLE;
        }
        if (can_load) {
            std::printf("load.%s %.4f\n", label, per_call_us(loads, [&] {
                            kjit_kernel *k = nullptr;
                            const kjit_status s = kjit_load_cached(path, kTrustKeyword, &k);
                            if (s != KJIT_OK) {
                                std::fprintf(stderr, "kjit_load_cached: %s: %s\n", kjit_status_string(s),
                                             kjit_last_error());
                                std::exit(1);
                            }
                            kjit_kernel_release(k);
                        }));
        }
    }
    return 0;
}

void run_trust(const BenchOptions &o, Report &report) {
    const std::string self = self_executable();
    struct Build {
        std::string label, lib_dir, cache;
        std::map<std::string, std::vector<double>> us;
        std::map<std::string, double> bytes;
    };
    TempDir caches(o.work_dir, "trust-");  // a cache per build: their formats differ
    std::vector<Build> builds;
    builds.push_back({"now", "", caches.path() + "/now", {}, {}});
    if (!o.baseline_lib.empty()) builds.push_back({"0.3.0", o.baseline_lib, caches.path() + "/0.3.0", {}, {}});
    {
        LibraryPathSwitch library;
        Progress progress("trust: hits and loads, this libkjit" + std::string(builds.size() > 1 ? " and 0.3.0" : ""),
                          o.trust_rounds * static_cast<int>(builds.size()), "runs");
        for (int round = 0; round < o.trust_rounds; ++round) {
            for (std::size_t k = 0; k < builds.size(); ++k) {
                Build &b = builds[(k + static_cast<std::size_t>(round)) % builds.size()];
                library.use(b.lib_dir);
                const ChildResult r = run_child({self, "--trust-child", b.cache, o.arch, std::to_string(o.trust_calls),
                                                 std::to_string(o.trust_loads)});
                if (!r.started || r.exit_status != 0) {
                    fail("the trust child (" + b.label + ") failed, exit " + std::to_string(r.exit_status) + ": " +
                         r.err);
                }
                std::istringstream lines(r.out);
                std::string metric;
                double value = 0;
                while (lines >> metric >> value) {
                    if (metric.rfind("bytes.", 0) == 0) b.bytes[metric.substr(6)] = value;
                    else b.us[metric].push_back(value);
                }
                progress.tick();
            }
        }
    }
    Section &s =
        report.section("trust", "trust checks: their price on hits and loads (per call; the baseline is 0.3.0, "
                                "before the checks, in the same run)");
    const std::vector<std::pair<std::string, std::string>> metrics = {
        {"compile.small", "kjit_compile hit, small kernel"},
        {"resolve.small", "kjit_resolve_name sidecar hit, small kernel"},
        {"load.small", "kjit_load_cached + release (reads, hashes, driver load), small kernel"},
        {"compile.large", "kjit_compile hit, large kernel"},
        {"resolve.large", "kjit_resolve_name sidecar hit, large kernel"},
        {"load.large", "kjit_load_cached + release (reads, hashes, driver load), large kernel"}};
    for (const auto &[metric, label] : metrics) {
        for (const Build &b : builds) {
            auto it = b.us.find(metric);
            const std::string id = "trust." + metric + "." + (b.lib_dir.empty() ? "now" : "baseline");
            const std::string text = label + " [" + b.label + "]";
            if (it == b.us.end()) s.rows.push_back(skipped_row(id, text, "no driver: no load"));
            else s.rows.push_back(summarize(id, text, it->second));
        }
        if (builds.size() > 1 && builds[0].us.count(metric) && builds[1].us.count(metric)) {
            char note[256];
            std::snprintf(note, sizeof note, "%s: now / 0.3.0 = %.2fx (%s vs %s)", metric.c_str(),
                          median(builds[0].us.at(metric)) / median(builds[1].us.at(metric)),
                          format_us(median(builds[0].us.at(metric))).c_str(),
                          format_us(median(builds[1].us.at(metric))).c_str());
            s.notes.push_back(note);
        }
    }
    for (const auto &[label, bytes] : builds[0].bytes) {
        s.notes.push_back("the " + label + " kernel's cubin: " + std::to_string(static_cast<long long>(bytes)) +
                          " bytes");
    }
    if (builds.size() == 1) {
        s.notes.push_back(
            "no baseline: bench/run.sh builds 0.3.0's libkjit from git history (none here), or pass --baseline-lib");
    }

    // XXH3-128 over the big test cubin: what a load's content check costs per MB.
    const std::string big = read_file(o.cubin);
    if (!big.empty()) {
        std::vector<double> us;
        XXH128_hash_t sink{};
        for (int i = 0; i < 50; ++i) {
            us.push_back(time_once([&] { sink = XXH3_128bits(big.data(), big.size()); }));
        }
        const double mb = static_cast<double>(big.size()) / 1e6;
        char note[256];
        std::snprintf(note, sizeof note,
                      "XXH3-128 of the %.1f MB test cubin in memory: %.1f us per MB (digest %016llx)", mb,
                      median(us) / mb, static_cast<unsigned long long>(sink.low64));
        s.notes.push_back(note);
        s.rows.push_back(summarize("trust.xxh3_128_per_mb", "XXH3-128 per MB of cubin (in memory)", [&] {
            std::vector<double> per_mb;
            for (double u : us) per_mb.push_back(u / mb);
            return per_mb;
        }()));
    }
}

}  // namespace kjit_bench
