#include "raw_nvrtc.hpp"

#include "support.hpp"

#include <nvrtc.h>

namespace kjit_bench {

namespace {

void check(nvrtcResult r, const char *what) {
    if (r != NVRTC_SUCCESS) fail(std::string(what) + " failed: " + nvrtcGetErrorString(r));
}

}  // namespace

std::string nvrtc_version() {
    int major = 0, minor = 0;
    check(nvrtcVersion(&major, &minor), "nvrtcVersion");
    return std::to_string(major) + "." + std::to_string(minor);
}

std::size_t raw_nvrtc_compile(const std::string &source, const std::string &arch,
                              const std::vector<std::string> &options) {
    nvrtcProgram prog = nullptr;
    check(nvrtcCreateProgram(&prog, source.c_str(), "source.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
    std::vector<std::string> all = {"-arch=" + arch};
    all.insert(all.end(), options.begin(), options.end());
    std::vector<const char *> argv;
    for (const std::string &o : all) argv.push_back(o.c_str());
    const nvrtcResult compiled = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
    if (compiled != NVRTC_SUCCESS) {
        std::size_t log_size = 0;
        std::string log;
        if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
            log.resize(log_size);
            if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) log.clear();
        }
        nvrtcDestroyProgram(&prog);
        fail(std::string("nvrtcCompileProgram failed: ") + nvrtcGetErrorString(compiled) + "\n" + log);
    }
    std::size_t size = 0;
    check(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
    if (size == 0) fail("NVRTC produced no cubin");
    std::vector<char> cubin(size);
    check(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
    check(nvrtcDestroyProgram(&prog), "nvrtcDestroyProgram");
    return size;
}

}  // namespace kjit_bench
