// The peers scenario's jitify2 child (peers_scenario.cpp): the same request as kjit-peers-child's
// measured kernel, asked again of jitify2's in-memory layer (NVIDIA/jitify, branch jitify2,
// header-only). Built only where the bench is given jitify2.hpp's folder
// (-DKJIT_BENCH_JITIFY2_DIR=..., which bench/run.sh extracts from the pinned NVIDIA/jitify under $KJIT_BENCH_SOURCES);
// jitify2 is never part of this project.
//
//   kjit-peers-jitify2-child MODE ARCH REPEATS REQUESTS_JSON
//
// Takes the first request of MODE (small | cub) in REQUESTS_JSON ({"source", "keyword",
// "nvrtc_options", "name_expression"}): preprocesses it (jitify2::Program::preprocess, which
// loads its headers into memory), builds a jitify2::ProgramCache over it, asks once (NVRTC,
// nvJitLink, the driver's load: not timed here), then REPEATS times again, and prints:
//   repeat <us>         get_program for the name expression (the in-memory layer's hit: a
//                       loaded program) and its lowered name copied out, as kjit_compile_named
//                       copies path and name out; mean over REPEATS
//   repeat_kernel <us>  get_kernel for it (the hit, then the driver's handle of the kernel)
//   lowered <name>      the lowered name, to compare with kjit's
// jitify2 opens the driver itself (dlopen "libcuda.so"): the scenario puts a folder where
// libcuda.so leads to $KJIT_LIBCUDA (the driver test double without a GPU) first on
// LD_LIBRARY_PATH. The child makes the device's primary context current first, as a program
// using jitify2 does through the runtime.
#include "jitify2.hpp"

#include <dlfcn.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

int fail(const std::string &what) {
    std::fprintf(stderr, "kjit-peers-jitify2-child: %s\n", what.c_str());
    return 1;
}

// The device's primary context made current, through the driver jitify2 opens (the same
// library, as dlopen hands back the loaded one). Empty on success, else why not.
std::string make_context_current() {
    void *cu = ::dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (!cu) return std::string("no CUDA driver (dlopen libcuda.so): ") + ::dlerror();
    using Init = int (*)(unsigned);
    using DeviceGet = int (*)(int *, int);
    using Retain = int (*)(void **, int);
    using SetCurrent = int (*)(void *);
    const auto init = reinterpret_cast<Init>(::dlsym(cu, "cuInit"));
    const auto device_get = reinterpret_cast<DeviceGet>(::dlsym(cu, "cuDeviceGet"));
    const auto retain = reinterpret_cast<Retain>(::dlsym(cu, "cuDevicePrimaryCtxRetain"));
    const auto set_current = reinterpret_cast<SetCurrent>(::dlsym(cu, "cuCtxSetCurrent"));
    if (!init || !device_get || !retain || !set_current) return "the CUDA driver lacks a context entry point";
    int device = 0;
    void *context = nullptr;
    if (init(0) != 0 || device_get(&device, 0) != 0 || retain(&context, device) != 0 || set_current(context) != 0) {
        return "the CUDA driver gave no context for device 0";
    }
    return {};
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s MODE ARCH REPEATS REQUESTS_JSON\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[1], arch = argv[2];
    const long repeats = std::atol(argv[3]);
    std::ifstream in(argv[4]);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains(mode) || j[mode].empty() || !j[mode][0].contains("name_expression")) {
        return fail(std::string(argv[4]) + ": no request with a name_expression for '" + mode + "'");
    }
    if (repeats < 1) return fail("REPEATS must be at least 1");
    const nlohmann::json &r = j[mode][0];
    const std::string source = r["source"].get<std::string>();
    const std::string expression = r["name_expression"].get<std::string>();
    std::vector<std::string> options = r["nvrtc_options"].get<std::vector<std::string>>();
    options.push_back("-arch=" + arch);

    if (std::string why = make_context_current(); !why.empty()) return fail(why);
    jitify2::PreprocessedProgram preprocessed =
        jitify2::Program("peers.cu", source)->preprocess(jitify2::OptionsVec(options));
    if (!preprocessed) return fail("preprocess: " + preprocessed.error());
    jitify2::ProgramCache<> cache(/*max_in_mem=*/16, *preprocessed);
    const jitify2::LoadedProgram first = cache.get_program({expression});
    if (!first) return fail("get_program: " + first.error());

    char name[4096];
    bool found = true;
    auto t0 = Clock::now();
    for (long i = 0; i < repeats; ++i) {
        const jitify2::LoadedProgram program = cache.get_program({expression});
        const auto lowered =
            program ? program->lowered_name_map().find(expression) : jitify2::StringMap::const_iterator();
        if (!program || lowered == program->lowered_name_map().end() || lowered->second.size() >= sizeof name) {
            found = false;
            break;
        }
        std::memcpy(name, lowered->second.c_str(), lowered->second.size() + 1);
    }
    const double repeat_us = us_since(t0) / static_cast<double>(repeats);
    if (!found) return fail("a repeat of get_program gave no lowered name for " + expression);
    t0 = Clock::now();
    for (long i = 0; i < repeats; ++i) {
        if (!cache.get_kernel(expression)) return fail("a repeat of get_kernel failed for " + expression);
    }
    const double kernel_us = us_since(t0) / static_cast<double>(repeats);
    std::printf("repeat %.4f\nrepeat_kernel %.4f\nlowered %s\n", repeat_us, kernel_us, name);
    return 0;
}
