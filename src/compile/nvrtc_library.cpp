#include "compile/nvrtc_library.hpp"

#include "compile/runtime_library.hpp"

#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <cuda.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace kjit::compile::nvrtc_library {

namespace {

// The NVRTC major version this build was compiled against (the toolkit CMake found), which must
// be that of the headers the table is typed by.
constexpr int kMajor = KJIT_NVRTC_MAJOR;
static_assert(kMajor == CUDA_VERSION / 1000, "KJIT_NVRTC_MAJOR differs from the toolkit headers' CUDA_VERSION");

// NVRTC opens its builtins library (libnvrtc-builtins[.alt].so.<major>.<minor>) by name when it
// first compiles, through the dynamic linker's search from libnvrtc itself (it has no RUNPATH),
// not from its own folder. An NVRTC that libkjit found by path (the toolkit folder of the build,
// a wheel named by KJIT_LIBNVRTC) would then fail every compile with "failed to open
// libnvrtc-builtins.so.13.0" wherever that folder is not searched. So the builtins beside the
// loaded libnvrtc are opened first: the loader then answers NVRTC's open by name with them (an
// object already loaded matches by its SONAME), and they are the ones of the same release.
// "Beside" is beside the library file itself, every link followed (KJIT_LIBNVRTC may name a
// link, or a link to a link, in a folder of its own: the builtins there may be of another
// release); only where that folder has none, beside the name it was loaded by. Missing there is
// not an error here: NVRTC may still find them by its own search, and says clearly when it cannot.
void preload_builtins(const Api &a) {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void *>(a.nvrtcVersion), &info) == 0 || !info.dli_fname) return;
    const std::string loaded(info.dli_fname);
    std::vector<std::string> libraries;  // the file itself, then the name it was loaded by
    if (char *real = ::realpath(loaded.c_str(), nullptr)) {
        libraries.emplace_back(real);
        std::free(real);
    }
    if (libraries.empty() || libraries.front() != loaded) libraries.push_back(loaded);
    std::string tried;
    for (const std::string &lib : libraries) {
        const std::size_t slash = lib.rfind('/');
        if (slash == std::string::npos) continue;
        // libnvrtc.alt.so.* (the toolkit's other build) opens the .alt builtins.
        const bool alt = lib.find(".alt.", slash) != std::string::npos;
        const std::string builtins =
            lib.substr(0, slash + 1) + (alt ? "libnvrtc-builtins.alt.so." : "libnvrtc-builtins.so.") + a.version;
        if (::access(builtins.c_str(), F_OK) != 0) {
            tried += (tried.empty() ? "" : ", ") + builtins;
            continue;
        }
        if (::dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL)) return;
        const char *e = ::dlerror();
        tried += (tried.empty() ? "" : ", ") + (e ? std::string(e) : builtins);
    }
    log().debug("nvrtc: no builtins preloaded ({}); NVRTC will look for them itself", tried);
}

#define KJIT_BIND(name) runtime_library::bind(handle, a.name, #name, "NVRTC", why)

// Opens `file` and fills `a` from it; false with `why` when it is not a usable NVRTC. A handle
// that was opened stays open even then: closing runs the library's destructors, and it may be
// a library the process uses for something else.
bool open_one(const std::string &file, Api &a, std::string &why) {
    void *handle = runtime_library::open(file, &a.preexisting, why);
    if (!handle) return false;
    if (!KJIT_BIND(nvrtcVersion) || !KJIT_BIND(nvrtcGetErrorString) || !KJIT_BIND(nvrtcCreateProgram) ||
        !KJIT_BIND(nvrtcDestroyProgram) || !KJIT_BIND(nvrtcAddNameExpression) || !KJIT_BIND(nvrtcCompileProgram) ||
        !KJIT_BIND(nvrtcGetProgramLogSize) || !KJIT_BIND(nvrtcGetProgramLog) || !KJIT_BIND(nvrtcGetCUBINSize) ||
        !KJIT_BIND(nvrtcGetCUBIN) || !KJIT_BIND(nvrtcGetLoweredName)) {
        return false;
    }
    a.nvrtcGetNumSupportedArchs =
        reinterpret_cast<decltype(a.nvrtcGetNumSupportedArchs)>(::dlsym(handle, "nvrtcGetNumSupportedArchs"));
    a.nvrtcGetSupportedArchs =
        reinterpret_cast<decltype(a.nvrtcGetSupportedArchs)>(::dlsym(handle, "nvrtcGetSupportedArchs"));
    a.nvrtcGetLTOIRSize = reinterpret_cast<decltype(a.nvrtcGetLTOIRSize)>(::dlsym(handle, "nvrtcGetLTOIRSize"));
    a.nvrtcGetLTOIR = reinterpret_cast<decltype(a.nvrtcGetLTOIR)>(::dlsym(handle, "nvrtcGetLTOIR"));
    int major = 0, minor = 0;
    if (const nvrtcResult r = a.nvrtcVersion(&major, &minor); r != NVRTC_SUCCESS) {
        why = std::string("opened, but its nvrtcVersion failed: ") + a.nvrtcGetErrorString(r);
        return false;
    }
    a.version = std::to_string(major) + "." + std::to_string(minor);
    if (major != kMajor) {
        // Another major version may change these functions' ABI, and its cubins differ anyway.
        why = "opened, but it is NVRTC " + a.version + " and this libkjit was built against NVRTC " +
              std::to_string(kMajor);
        return false;
    }
    a.library = file;
    a.identity = runtime_library::identity_of(a.version, reinterpret_cast<void *>(a.nvrtcVersion), &a.file);
    preload_builtins(a);
    return true;
}

#undef KJIT_BIND

runtime_library::Loaded<Api> open_library() {
    auto loaded = runtime_library::open_first<Api>(candidates(), environment::Variable::libnvrtc, "NVRTC", open_one);
    if (loaded.error.empty()) return loaded;
    const std::string name = library_name();
    loaded.error += ". kjit_compile needs NVRTC " + std::to_string(kMajor) +
                    ", also to key a cache hit (NVRTC's build is part of the cache key): install the CUDA toolkit's "
                    "NVRTC (" +
                    name + ": the cuda-nvrtc-" + std::to_string(kMajor) +
                    "-<minor> package, or the nvidia-cuda-nvrtc wheel for Python) or set KJIT_LIBNVRTC to the path "
                    "of its " +
                    name;
    return loaded;
}

// Opened once per process, on first need, and never closed (cubins it compiled may be in use,
// and NVRTC keeps process-wide state such as its PCH heap). A forked child keeps the parent's
// outcome: the library stays mapped in it and holds no per-process state that libkjit renews
// (NVRTC's own lock is the compiler's gate's business).
runtime_library::Slot<Api> slot;

// Serialises the first open (Slot::get; reported in Cache.EightThreadsOnOneKeyRunNvrtcOnce
// before it was held).
std::mutex open_mutex;
void renew_open_mutex_in_forked_child() { fork_guard::renew(open_mutex); }
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::nvrtc_open, renew_open_mutex_in_forked_child);

}  // namespace

std::string library_name() { return "libnvrtc.so." + std::to_string(kMajor); }

std::vector<std::string> candidates() {
    // LD_LIBRARY_PATH, ldconfig's cache, ...; then the toolkit the build used.
    return runtime_library::candidates(environment::Variable::libnvrtc, library_name(), KJIT_NVRTC_DIR);
}

const Api *opened() { return slot.opened(); }

Result<const Api *> api() {
    const runtime_library::Loaded<Api> &l = slot.get(open_mutex, open_library);
    if (!l.error.empty()) return Error{Errc::nvrtc, l.error};
    return &l.api;
}

}  // namespace kjit::compile::nvrtc_library
