#include "compile/nvjitlink_library.hpp"

#include "compile/runtime_library.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace kjit::compile::nvjitlink_library {

namespace {

// The major version this build was compiled against: nvJitLink ships with the toolkit, so it is
// NVRTC's (the headers the table is typed by).
constexpr int kMajor = KJIT_NVRTC_MAJOR;
static_assert(kMajor == CUDA_VERSION / 1000, "KJIT_NVRTC_MAJOR differs from the toolkit headers' CUDA_VERSION");

// The versioned symbol nvJitLink.h's wrapper of `name` calls: "__nvJitLinkCreate_13_0".
std::string versioned(const char *name) { return std::string("__") + name + "_" + std::to_string(kMajor) + "_0"; }

template <typename Fn>
bool bind_versioned(void *handle, Fn &fn, const char *name, std::string &why) {
    return runtime_library::bind(handle, fn, versioned(name).c_str(), "nvJitLink", why);
}

// Opens `file` and fills `a` from it; false with `why` when it is not a usable nvJitLink.
bool open_one(const std::string &file, Api &a, std::string &why) {
    void *handle = runtime_library::open(file, &a.preexisting, why);
    if (!handle) return false;
    // The version first (an unversioned symbol in every release): another major has none of the
    // versioned names below, and saying its version is the clearer message.
    if (!runtime_library::bind(handle, a.version_of, "nvJitLinkVersion", "nvJitLink", why)) return false;
    unsigned major = 0, minor = 0;
    if (const nvJitLinkResult r = a.version_of(&major, &minor); r != NVJITLINK_SUCCESS) {
        why = "opened, but its nvJitLinkVersion failed (" + std::to_string(static_cast<int>(r)) + ")";
        return false;
    }
    a.version = std::to_string(major) + "." + std::to_string(minor);
    if (static_cast<int>(major) != kMajor) {
        why = "opened, but it is nvJitLink " + a.version + " and this libkjit was built against CUDA " +
              std::to_string(kMajor);
        return false;
    }
    if (!bind_versioned(handle, a.create, "nvJitLinkCreate", why) ||
        !bind_versioned(handle, a.destroy, "nvJitLinkDestroy", why) ||
        !bind_versioned(handle, a.add_data, "nvJitLinkAddData", why) ||
        !bind_versioned(handle, a.complete, "nvJitLinkComplete", why) ||
        !bind_versioned(handle, a.linked_cubin_size, "nvJitLinkGetLinkedCubinSize", why) ||
        !bind_versioned(handle, a.linked_cubin, "nvJitLinkGetLinkedCubin", why) ||
        !bind_versioned(handle, a.error_log_size, "nvJitLinkGetErrorLogSize", why) ||
        !bind_versioned(handle, a.error_log, "nvJitLinkGetErrorLog", why) ||
        !bind_versioned(handle, a.info_log_size, "nvJitLinkGetInfoLogSize", why) ||
        !bind_versioned(handle, a.info_log, "nvJitLinkGetInfoLog", why)) {
        return false;
    }
    a.library = file;
    a.identity = runtime_library::identity_of(a.version, reinterpret_cast<void *>(a.version_of), &a.file);
    return true;
}

runtime_library::Loaded<Api> open_library() {
    auto loaded =
        runtime_library::open_first<Api>(candidates(), environment::Variable::libnvjitlink, "nvJitLink", open_one);
    if (loaded.error.empty()) return loaded;
    loaded.error += ". A compile with link inputs needs nvJitLink " + std::to_string(kMajor) +
                    ": install the CUDA toolkit's nvJitLink (" + library_name() + ": the libnvjitlink-" +
                    std::to_string(kMajor) +
                    "-<minor> package, or the nvidia-nvjitlink wheel for Python) or set KJIT_LIBNVJITLINK to the "
                    "path of its " +
                    library_name();
    return loaded;
}

// Opened once per process, on first need, and never closed (as NVRTC; nvJitLink keeps no
// per-process state a forked child must renew: the child keeps the parent's outcome).
runtime_library::Slot<Api> slot;

// Serialises the first open (runtime_library::Slot::get says why).
std::mutex open_mutex;
void renew_open_mutex_in_forked_child() { fork_guard::renew(open_mutex); }
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::nvjitlink_open, renew_open_mutex_in_forked_child);

}  // namespace

std::string library_name() { return "libnvJitLink.so." + std::to_string(kMajor); }

std::vector<std::string> candidates() {
    return runtime_library::candidates(environment::Variable::libnvjitlink, library_name(), KJIT_NVRTC_DIR);
}

const Api *opened() { return slot.opened(); }

Result<const Api *> api() {
    const runtime_library::Loaded<Api> &l = slot.get(open_mutex, open_library);
    if (!l.error.empty()) return Error{Errc::link, l.error};
    return &l.api;
}

}  // namespace kjit::compile::nvjitlink_library
