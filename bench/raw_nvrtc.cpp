#include "raw_nvrtc.hpp"

#include "support.hpp"

#include <nvrtc.h>

namespace kjit_bench {

namespace {

void check(nvrtcResult r, const char *what) {
    if (r != NVRTC_SUCCESS) fail(std::string(what) + " failed: " + nvrtcGetErrorString(r));
}

// A program compiled with `options`; destroyed with the object.
class Program {
public:
    Program(const std::string &source, const std::vector<std::string> &options) {
        check(nvrtcCreateProgram(&prog_, source.c_str(), "source.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
        std::vector<const char *> argv;
        for (const std::string &o : options) argv.push_back(o.c_str());
        const nvrtcResult compiled = nvrtcCompileProgram(prog_, static_cast<int>(argv.size()), argv.data());
        if (compiled != NVRTC_SUCCESS) {
            std::size_t log_size = 0;
            std::string log;
            if (nvrtcGetProgramLogSize(prog_, &log_size) == NVRTC_SUCCESS && log_size > 1) {
                log.resize(log_size);
                if (nvrtcGetProgramLog(prog_, log.data()) != NVRTC_SUCCESS) log.clear();
            }
            nvrtcDestroyProgram(&prog_);
            fail(std::string("nvrtcCompileProgram failed: ") + nvrtcGetErrorString(compiled) + "\n" + log);
        }
    }
    ~Program() {
        if (prog_) nvrtcDestroyProgram(&prog_);
    }
    Program(const Program &) = delete;
    Program &operator=(const Program &) = delete;
    nvrtcProgram get() const { return prog_; }
    // Destroyed now, as the timed baseline does (its cost is NVRTC's too).
    void destroy() { check(nvrtcDestroyProgram(&prog_), "nvrtcDestroyProgram"); }

private:
    nvrtcProgram prog_ = nullptr;
};

}  // namespace

std::string nvrtc_version() {
    int major = 0, minor = 0;
    check(nvrtcVersion(&major, &minor), "nvrtcVersion");
    return std::to_string(major) + "." + std::to_string(minor);
}

std::size_t raw_nvrtc_compile(const std::string &source, const std::string &arch,
                              const std::vector<std::string> &options) {
    std::vector<std::string> all = {"-arch=" + arch};
    all.insert(all.end(), options.begin(), options.end());
    Program prog(source, all);
    std::size_t size = 0;
    check(nvrtcGetCUBINSize(prog.get(), &size), "nvrtcGetCUBINSize");
    if (size == 0) fail("NVRTC produced no cubin");
    std::vector<char> cubin(size);
    check(nvrtcGetCUBIN(prog.get(), cubin.data()), "nvrtcGetCUBIN");
    prog.destroy();
    return size;
}

std::string raw_nvrtc_ltoir(const std::string &source, const std::string &arch,
                            const std::vector<std::string> &options) {
    std::vector<std::string> all = options;
    all.insert(all.end(), {"-dlto", "-rdc=true", "-arch=" + arch});
    Program prog(source, all);
    std::size_t size = 0;
    check(nvrtcGetLTOIRSize(prog.get(), &size), "nvrtcGetLTOIRSize");
    if (size == 0) fail("NVRTC produced no LTO-IR");
    std::string ltoir(size, '\0');
    check(nvrtcGetLTOIR(prog.get(), ltoir.data()), "nvrtcGetLTOIR");
    prog.destroy();
    return ltoir;
}

}  // namespace kjit_bench
