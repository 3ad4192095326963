// kjit-fleet-node: one node of the fleet scenario (fleet_scenario.cpp), a fresh process that asks
// for kernels with kjit_compile, one thread, and prints what it cost:
//
//   kjit-fleet-node CACHE ARCH REMOTE KERNELS
//     KERNELS  sweep:FIRST:COUNT  the sweep's configurations FIRST .. FIRST+COUNT-1
//              slow               one kernel whose compile takes about a second (a lease holder
//                                 the scenario kills while it compiles)
//
// Prints one line of "name=value" words: its kjit_get_stats counters (NVRTC's time among them),
// the loop's time, its first call's and its slowest call's (microseconds). Seed folders come from KJIT_CACHE_SEED,
// which the scenario sets.
//
// It links libkjit.so alone and fills only the fields 0.8.0 knew, so that the scenario can run
// it against 0.8.0's libkjit (LD_LIBRARY_PATH) beside this one: a caller built against a newer
// header that sets struct_size to an older struct's size is what the struct_size rule is for.
#include "sweep_kernels.hpp"

#include "kjit/kjit.h"
#include "kjit/kjit_cache.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The kernel of `slow`: a fully unrolled loop of dependent math, which NVRTC (ptxas, mostly)
// takes about a second to compile on this machine's cores.
constexpr const char *kSlowSource = R"(
extern "C" __global__ void fleet_slow(float *out) {
    float x = out[threadIdx.x];
#pragma unroll
    for (int i = 0; i < 1200; ++i) x = __sinf(x) * 1.0001f + out[(threadIdx.x + i) & 255];
    out[threadIdx.x] = x;
}
)";

double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

// The size of a struct up to and including `last_field`: what a caller built against the
// release whose last field it was passes as struct_size.
#define KJIT_FLEET_SIZE_UP_TO(type, last_field) (offsetof(type, last_field) + sizeof(type::last_field))

struct Request {
    std::string source;
    std::string keyword;
};

bool requests_for(const std::string &kernels, std::vector<Request> &out) {
    if (kernels == "slow") {
        out.push_back({kSlowSource, "fleet_slow"});
        return true;
    }
    int first = 0, count = 0;
    if (std::sscanf(kernels.c_str(), "sweep:%d:%d", &first, &count) != 2 || first < 0 || count <= 0 ||
        first + count > kjit_bench::sweep_size()) {
        return false;
    }
    const std::vector<kjit_bench::GemmConfig> configs = kjit_bench::sweep_configs(first + count);
    for (int i = first; i < first + count; ++i)
        out.push_back({kjit_bench::sweep_source(configs[static_cast<std::size_t>(i)]), kjit_bench::kSweepKeyword});
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: kjit-fleet-node CACHE ARCH REMOTE sweep:FIRST:COUNT|slow\n");
        return 2;
    }
    std::vector<Request> requests;
    if (!requests_for(argv[4], requests)) {
        std::fprintf(stderr, "kjit-fleet-node: bad kernels '%s': sweep:FIRST:COUNT (within %d) or slow\n", argv[4],
                     kjit_bench::sweep_size());
        return 2;
    }
    kjit_compile_options opts;
    if (kjit_compile_options_init(&opts, KJIT_FLEET_SIZE_UP_TO(kjit_compile_options, program_name)) != KJIT_OK) {
        std::fprintf(stderr, "kjit-fleet-node: kjit_compile_options_init: %s\n", kjit_last_error());
        return 1;
    }
    opts.cache_dir = argv[1];
    opts.arch = argv[2];
    opts.remote_storage = argv[3];
    double first_us = 0, worst_us = 0;
    const Clock::time_point started = Clock::now();
    for (std::size_t i = 0; i < requests.size(); ++i) {
        char path[4096];
        const Clock::time_point call = Clock::now();
        const kjit_status s =
            kjit_compile(requests[i].source.c_str(), requests[i].keyword.c_str(), &opts, path, sizeof path, nullptr);
        const double us = us_between(call, Clock::now());
        if (s != KJIT_OK) {
            std::fprintf(stderr, "kjit-fleet-node: kernel %zu: %s: %s\n", i, kjit_status_string(s), kjit_last_error());
            return 1;
        }
        if (i == 0) first_us = us;
        worst_us = std::max(worst_us, us);
    }
    const double loop_us = us_between(started, Clock::now());
    kjit_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = KJIT_FLEET_SIZE_UP_TO(kjit_stats, remote_shared_failures);
    if (kjit_get_stats(&st) != KJIT_OK) {
        std::fprintf(stderr, "kjit-fleet-node: kjit_get_stats: %s\n", kjit_last_error());
        return 1;
    }
    using ull = unsigned long long;
    std::printf("nvrtc=%llu local_hits=%llu remote_hits=%llu remote_errors=%llu remote_timeouts=%llu "
                "remote_puts=%llu bytes_in=%llu bytes_out=%llu leases_owned=%llu lease_waits=%llu "
                "lease_takeovers=%llu nvrtc_us=%.1f loop_us=%.1f first_us=%.1f worst_us=%.1f\n",
                static_cast<ull>(st.nvrtc_compiles), static_cast<ull>(st.compile_hits),
                static_cast<ull>(st.remote_hits), static_cast<ull>(st.remote_errors),
                static_cast<ull>(st.remote_timeouts), static_cast<ull>(st.remote_puts),
                static_cast<ull>(st.remote_bytes_in), static_cast<ull>(st.remote_bytes_out),
                static_cast<ull>(st.remote_leases_owned), static_cast<ull>(st.remote_lease_waits),
                static_cast<ull>(st.remote_lease_takeovers), static_cast<double>(st.nvrtc_nanoseconds) / 1e3, loop_us,
                first_us, worst_us);
    return 0;
}
