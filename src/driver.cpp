#include "driver.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace kjit::driver {

namespace {

// The few Driver API types and values used here (cuda.h is not needed to build libkjit).
using CUresult = int;
using CUdevice = int;
constexpr int kAttrComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrComputeCapabilityMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

struct Api {
    void *handle = nullptr;
    CUresult (*cuInit)(unsigned) = nullptr;
    CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice) = nullptr;
    std::string error;  // why the API is unusable, if it is
};

template <typename Fn>
bool bind(Api &api, Fn &fn, const char *symbol, const std::string &library) {
    fn = reinterpret_cast<Fn>(::dlsym(api.handle, symbol));
    if (!fn) api.error = library + " has no " + symbol;
    return fn != nullptr;
}

// Loaded once per process; the handle is kept for the life of the process.
const Api &api() {
    static const Api loaded = [] {
        Api a;
        const char *env = std::getenv("KJIT_LIBCUDA");
        const std::string library = env && *env ? env : "libcuda.so.1";
        a.handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!a.handle) {
            const char *why = ::dlerror();
            a.error = "dlopen(\"" + library + "\") failed: " + (why ? why : "unknown error") +
                      (env && *env ? " (from KJIT_LIBCUDA)" : "");
            return a;
        }
        if (!bind(a, a.cuInit, "cuInit", library) || !bind(a, a.cuDeviceGet, "cuDeviceGet", library) ||
            !bind(a, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", library)) {
            return a;
        }
        if (const CUresult r = a.cuInit(0); r != 0) {
            a.error = "cuInit(0) failed with CUresult " + std::to_string(r) + " (" + library + ")";
        }
        return a;
    }();
    return loaded;
}

}  // namespace

Result<std::string> current_device_arch() {
    const Api &a = api();
    if (!a.error.empty()) return Error{Errc::driver_unavailable, "no CUDA driver: " + a.error};
    CUdevice dev = 0;
    if (const CUresult r = a.cuDeviceGet(&dev, 0); r != 0) {
        return Error{Errc::driver_unavailable, "cuDeviceGet(0) failed with CUresult " + std::to_string(r)};
    }
    int major = 0, minor = 0;
    if (a.cuDeviceGetAttribute(&major, kAttrComputeCapabilityMajor, dev) != 0 ||
        a.cuDeviceGetAttribute(&minor, kAttrComputeCapabilityMinor, dev) != 0) {
        return Error{Errc::driver, "cuDeviceGetAttribute(compute capability) failed"};
    }
    return "sm_" + std::to_string(major) + std::to_string(minor);
}

}  // namespace kjit::driver
