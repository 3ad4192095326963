#include "compiler.hpp"

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>

namespace kjit::compiler {

namespace {

// Owns an nvrtcProgram.
class Program {
public:
    Program() = default;
    Program(const Program &) = delete;
    Program &operator=(const Program &) = delete;
    ~Program() {
        if (prog_) nvrtcDestroyProgram(&prog_);
    }
    nvrtcProgram *out() { return &prog_; }
    nvrtcProgram get() const { return prog_; }

private:
    nvrtcProgram prog_ = nullptr;
};

// NVRTC's result as an Error of `code`, or nothing on success.
Status check(nvrtcResult r, const char *what) {
    if (r == NVRTC_SUCCESS) return Ok{};
    return Error{Errc::nvrtc, std::string(what) + " failed: " + nvrtcGetErrorString(r)};
}

std::string program_log(nvrtcProgram prog) {
    size_t size = 0;
    if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return {};
    std::string log(size, '\0');
    if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
    log.resize(size - 1);  // drop the NUL
    return log;
}

}  // namespace

Result<Output> compile(const Request &request) {
    std::vector<const char *> header_sources, header_names, options;
    for (const auto &h : request.headers) {
        header_names.push_back(h.first.c_str());
        header_sources.push_back(h.second.c_str());
    }
    for (const auto &o : request.options) options.push_back(o.c_str());

    Program prog;
    if (auto st = check(nvrtcCreateProgram(prog.out(), request.source.c_str(), request.program_name.c_str(),
                                           static_cast<int>(header_names.size()), header_sources.data(),
                                           header_names.data()),
                        "nvrtcCreateProgram");
        !st) {
        return std::move(st).error();
    }
    for (const auto &e : request.name_expressions) {
        if (auto st = check(nvrtcAddNameExpression(prog.get(), e.c_str()), "nvrtcAddNameExpression"); !st) {
            return std::move(st).error();
        }
    }
    const nvrtcResult compiled = nvrtcCompileProgram(prog.get(), static_cast<int>(options.size()), options.data());
    Output out;
    out.log = program_log(prog.get());
    if (compiled == NVRTC_ERROR_COMPILATION) {
        return Error{Errc::compile, "NVRTC could not compile '" + request.program_name + "':\n" + out.log};
    }
    if (compiled != NVRTC_SUCCESS) {
        std::string msg = std::string("nvrtcCompileProgram failed for '") + request.program_name +
                          "': " + nvrtcGetErrorString(compiled);
        if (!out.log.empty()) msg += "\n" + out.log;
        return Error{Errc::nvrtc, std::move(msg)};
    }
    size_t cubin_size = 0;
    if (auto st = check(nvrtcGetCUBINSize(prog.get(), &cubin_size), "nvrtcGetCUBINSize"); !st) {
        return std::move(st).error();
    }
    if (cubin_size == 0) {
        return Error{Errc::nvrtc, "NVRTC produced no cubin for '" + request.program_name +
                                      "' (a virtual compute_XX target gives PTX only; use -arch=sm_XX)"};
    }
    out.cubin.resize(cubin_size);
    if (auto st = check(nvrtcGetCUBIN(prog.get(), out.cubin.data()), "nvrtcGetCUBIN"); !st) {
        return std::move(st).error();
    }
    for (const auto &e : request.name_expressions) {
        const char *lowered = nullptr;
        if (auto st = check(nvrtcGetLoweredName(prog.get(), e.c_str(), &lowered), "nvrtcGetLoweredName"); !st) {
            return std::move(st).error();
        }
        out.lowered_names.emplace_back(e, lowered ? lowered : "");
    }
    return out;
}

std::string nvrtc_version() {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    return std::to_string(major) + "." + std::to_string(minor);
}

std::string nvrtc_identity() {
    std::string id = nvrtc_version();
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void *>(&nvrtcVersion), &info) == 0 || !info.dli_fname) return id + " unknown-build";
    char resolved[PATH_MAX];
    const char *file = ::realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
    struct stat st {};
    const std::string path(file);
    id += " " + path.substr(path.rfind('/') + 1);
    if (::stat(file, &st) == 0) id += " " + std::to_string(st.st_size);
    return id;
}

}  // namespace kjit::compiler
