// One "node" of a simulated cluster, for remote_test: a process with its own cache folder that
// compiles kernels through libkjit.so with the cluster tier ($KJIT_REMOTE_STORAGE), then says
// what it counted. Usage:
//
//   kjit_remote_node CACHE_DIR FIRST COUNT MODE [BARRIER_FILE]
//
// MODE: single (kjit_compile per kernel), batch (one kjit_compile_batch), error (kernel FIRST
// only, a source that fails to compile: the call must fail with KJIT_ERROR_COMPILE and NVRTC's
// log), slow (kernel FIRST only, a source that takes NVRTC seconds). Waits for BARRIER_FILE to
// exist before it starts, so that many nodes start at once. Kernel i is remote_kernel_<i> for
// even i (the keyword rule names it) and remote_tpl<i> through a name expression for odd i;
// every name is checked against the one expected. Prints one line of counters
// ("nvrtc=N remote_hits=N ...") and exits 0 when every call gave the right answer, 1 if not.
#include <kjit/kjit.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string source_of(int i) {
    if (i % 2 == 0) {
        return "__global__ void remote_kernel_" + std::to_string(i) +
               "(float *x) { x[threadIdx.x] = " + std::to_string(i) + ".0f; }\n";
    }
    return "template <int N> __global__ void remote_tpl(float *x) { x[threadIdx.x] = N * 2.0f; }\n";
}
std::string keyword_of(int i) { return i % 2 == 0 ? "remote_kernel_" + std::to_string(i) : "remote_tpl"; }
std::string expression_of(int i) { return i % 2 == 0 ? std::string() : "remote_tpl<" + std::to_string(i) + ">"; }
std::string expected_name(int i) {
    if (i % 2 == 0) {
        const std::string id = "remote_kernel_" + std::to_string(i);
        return "_Z" + std::to_string(id.size()) + id + "Pf";
    }
    return "_Z10remote_tplILi" + std::to_string(i) + "EEvPf";
}

// Seconds of NVRTC: a long chain of template instantiations (the lease test's holder is killed
// while it compiles this).
const char *const kSlowSource =
    "template <int N, int T> struct chain { __device__ static float v(float x) { return chain<N - 1, T>::v(x * 1.0001f "
    "+ N); } };\n"
    "template <int T> struct chain<0, T> { __device__ static float v(float x) { return x + T; } };\n"
    "template <int N, int T> struct fan { __device__ static float v(float x) { return chain<N, T>::v(x) + fan<N - 1, "
    "T>::v(x); } };\n"
    "template <int T> struct fan<0, T> { __device__ static float v(float x) { return x; } };\n"
    "__global__ void remote_slow(float *x) { x[0] = fan<120, 0>::v(x[0]) + fan<120, 1>::v(x[1]) + fan<120, "
    "2>::v(x[2]); }\n";

bool check(kjit_status st, const std::string &cubin, int i, const std::string &name) {
    if (st != KJIT_OK) {
        std::fprintf(stderr, "node: kernel %d: %s: %s\n", i, kjit_status_string(st), kjit_last_error());
        return false;
    }
    if (name != expected_name(i)) {
        std::fprintf(stderr, "node: kernel %d: name %s, expected %s\n", i, name.c_str(), expected_name(i).c_str());
        return false;
    }
    // What a later load reads: the sidecar of the published cubin.
    char resolved[512];
    if (kjit_resolve_name(cubin.c_str(), keyword_of(i).c_str(), resolved, sizeof resolved, nullptr) != KJIT_OK ||
        expected_name(i) != resolved) {
        std::fprintf(stderr, "node: kernel %d: %s resolves to %s\n", i, cubin.c_str(), kjit_last_error());
        return false;
    }
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: kjit_remote_node CACHE_DIR FIRST COUNT single|batch|error|slow [BARRIER_FILE]\n");
        return 2;
    }
    const std::string cache_dir = argv[1];
    const int first = std::atoi(argv[2]);
    const int count = std::atoi(argv[3]);
    const std::string mode = argv[4];
    if (argc > 5) {
        while (::access(argv[5], F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kjit_compile_options base = KJIT_COMPILE_OPTIONS_INIT;
    base.cache_dir = cache_dir.c_str();
    base.arch = "sm_80";
    bool ok = true;
    if (mode == "single") {
        for (int i = first; i < first + count; ++i) {
            kjit_compile_options o = base;
            const std::string expression = expression_of(i);
            if (!expression.empty()) o.name_expression = expression.c_str();
            char cubin[1024];
            char name[512] = "";
            const kjit_status st = kjit_compile_named(source_of(i).c_str(), keyword_of(i).c_str(), &o, cubin,
                                                      sizeof cubin, nullptr, name, sizeof name, nullptr);
            ok = check(st, cubin, i, name) && ok;
        }
    } else if (mode == "batch") {
        std::vector<std::string> sources, keywords, expressions;
        std::vector<kjit_compile_options> options(static_cast<std::size_t>(count), base);
        std::vector<kjit_compile_request> requests(static_cast<std::size_t>(count));
        std::vector<const kjit_compile_request *> pointers;
        for (int i = first; i < first + count; ++i) {
            sources.push_back(source_of(i));
            keywords.push_back(keyword_of(i));
            expressions.push_back(expression_of(i));
        }
        for (std::size_t k = 0; k < requests.size(); ++k) {
            if (!expressions[k].empty()) options[k].name_expression = expressions[k].c_str();
            requests[k] = kjit_compile_request KJIT_COMPILE_REQUEST_INIT;
            requests[k].source = sources[k].c_str();
            requests[k].keyword = keywords[k].c_str();
            requests[k].options = &options[k];
            pointers.push_back(&requests[k]);
        }
        kjit_batch_result *result = nullptr;
        const kjit_status st = kjit_compile_batch(pointers.data(), pointers.size(), nullptr, &result);
        if (st != KJIT_OK) {
            std::fprintf(stderr, "node: batch: %s: %s\n", kjit_status_string(st), kjit_last_error());
            ok = false;
        }
        for (std::size_t k = 0; result && k < requests.size(); ++k) {
            const int i = first + static_cast<int>(k);
            const kjit_status item = kjit_batch_result_status(result, k);
            const char *path = kjit_batch_result_cubin_path(result, k);
            const char *name = kjit_batch_result_kernel_name(result, k);
            if (item != KJIT_OK) {
                std::fprintf(stderr, "node: batch item %d: %s\n", i, kjit_batch_result_error(result, k));
                ok = false;
            } else {
                ok = check(item, path, i, name ? name : "") && ok;
            }
        }
        kjit_batch_result_release(result);
    } else if (mode == "error" || mode == "slow") {
        const std::string source =
            mode == "error" ? "__global__ void remote_broken(float *x) { x[0] = undeclared_in_remote_test; }\n"
                            : kSlowSource;
        char cubin[1024];
        const kjit_status st = kjit_compile(source.c_str(), mode == "error" ? "remote_broken" : "remote_slow", &base,
                                            cubin, sizeof cubin, nullptr);
        if (mode == "error") {
            const std::string log = kjit_last_error();
            ok = st == KJIT_ERROR_COMPILE && log.find("undeclared_in_remote_test") != std::string::npos;
            if (!ok)
                std::fprintf(stderr, "node: expected a compile error with its log, got %s: %s\n",
                             kjit_status_string(st), log.c_str());
        } else {
            ok = st == KJIT_OK;
            if (!ok) std::fprintf(stderr, "node: slow kernel: %s: %s\n", kjit_status_string(st), kjit_last_error());
        }
    } else {
        std::fprintf(stderr, "node: unknown mode %s\n", mode.c_str());
        return 2;
    }
    kjit_stats s = KJIT_STATS_INIT;
    kjit_get_stats(&s);
    std::printf("nvrtc=%llu remote_hits=%llu remote_misses=%llu remote_errors=%llu remote_timeouts=%llu "
                "remote_corrupt=%llu remote_puts=%llu leases=%llu waits=%llu takeovers=%llu shared_failures=%llu\n",
                static_cast<unsigned long long>(s.nvrtc_compiles), static_cast<unsigned long long>(s.remote_hits),
                static_cast<unsigned long long>(s.remote_misses), static_cast<unsigned long long>(s.remote_errors),
                static_cast<unsigned long long>(s.remote_timeouts), static_cast<unsigned long long>(s.remote_corrupt),
                static_cast<unsigned long long>(s.remote_puts), static_cast<unsigned long long>(s.remote_leases_owned),
                static_cast<unsigned long long>(s.remote_lease_waits),
                static_cast<unsigned long long>(s.remote_lease_takeovers),
                static_cast<unsigned long long>(s.remote_shared_failures));
    return ok ? 0 : 1;
}
