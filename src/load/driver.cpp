#include "load/driver.hpp"

#include "util/environment.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdlib>

namespace kjit::load::driver {

namespace {

// Every entry point libkjit calls, each typed by the PFN of the ABI version it is asked for.
struct Api {
    void *handle = nullptr;
    std::string library;  // what was opened
    std::string error;    // why the API is unusable, if it is
    int version = 0;      // cuDriverGetVersion

    PFN_cuGetProcAddress_v12000 get_proc_address = nullptr;  // cuGetProcAddress_v2
    PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
    PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
    PFN_cuInit_v2000 cuInit = nullptr;
    PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
    PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
    PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
    PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
    PFN_cuLibraryLoadData_v12000 cuLibraryLoadData = nullptr;
    PFN_cuLibraryUnload_v12000 cuLibraryUnload = nullptr;
    PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel = nullptr;
    PFN_cuKernelGetFunction_v12000 cuKernelGetFunction = nullptr;
};

std::string name_of(const Api &a, CUresult result) {
    const char *text = nullptr;
    if (a.cuGetErrorName && a.cuGetErrorName(result, &text) == CUDA_SUCCESS && text) return text;
    return "CUresult " + std::to_string(static_cast<int>(result));
}

std::string describe(const Api &a, std::string_view call, CUresult result) {
    std::string text = std::string(call) + " failed: " + name_of(a, result);
    const char *detail = nullptr;
    if (a.cuGetErrorString && a.cuGetErrorString(result, &detail) == CUDA_SUCCESS && detail) {
        text += " (";
        text += detail;
        text += ")";
    }
    return text;
}

// Asks cuGetProcAddress for `symbol` at ABI `version`; records why on failure.
template <typename Fn>
bool bind(Api &a, Fn &fn, const char *symbol, int version) {
    void *pfn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    const CUresult r = a.get_proc_address(symbol, &pfn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || !pfn || status != CU_GET_PROC_ADDRESS_SUCCESS) {
        const char *why = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "the driver is too old for it"
                          : status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND     ? "no such symbol"
                                                                               : "the query failed";
        a.error = "cuGetProcAddress(\"" + std::string(symbol) + "\", " + std::to_string(version) + ") in " + a.library +
                  ": " + why;
        return false;
    }
    fn = reinterpret_cast<Fn>(pfn);
    return true;
}

#define KJIT_BIND(api, name, version) bind(api, api.name, #name, version)

Api open_api() {
    Api a;
    const char *env = environment::get(environment::Variable::libcuda);
    const bool from_env = env && *env;
    a.library = from_env ? env : "libcuda.so.1";
    const std::string origin = from_env ? " (from KJIT_LIBCUDA)" : "";
    a.handle = ::dlopen(a.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!a.handle) {
        const char *why = ::dlerror();
        a.error = "dlopen(\"" + a.library + "\")" + origin + " failed: " + (why ? why : "unknown error");
        return a;
    }
    // The one symbol taken by name: every other entry point comes through it, versioned.
    a.get_proc_address = reinterpret_cast<PFN_cuGetProcAddress_v12000>(::dlsym(a.handle, "cuGetProcAddress_v2"));
    if (!a.get_proc_address) {
        // A library without the driver's first entry point is either no CUDA driver at all (a
        // wrong KJIT_LIBCUDA) or one older than CUDA 12.0: say which it looks like.
        const bool a_driver = ::dlsym(a.handle, "cuInit") != nullptr;
        a.error =
            a.library + origin +
            (a_driver ? " has no cuGetProcAddress_v2: the driver predates CUDA 12.0 (install a newer NVIDIA driver)"
                      : " is not a CUDA driver (it exports neither cuInit nor cuGetProcAddress_v2)" +
                            std::string(from_env ? ": point KJIT_LIBCUDA at the driver's libcuda.so.1" : ""));
        return a;
        return a;
    }
    if (!KJIT_BIND(a, cuGetErrorName, 6000) || !KJIT_BIND(a, cuGetErrorString, 6000) || !KJIT_BIND(a, cuInit, 2000) ||
        !KJIT_BIND(a, cuDriverGetVersion, 2020)) {
        return a;
    }
    if (const CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
        a.error = describe(a, "cuInit(0)", r) + " in " + a.library + origin;
        return a;
    }
    if (const CUresult r = a.cuDriverGetVersion(&a.version); r != CUDA_SUCCESS) {
        a.error = describe(a, "cuDriverGetVersion", r) + " in " + a.library + origin;
        return a;
    }
    if (a.version < kMinDriverVersion) {
        a.error = a.library + origin + " supports CUDA " + std::to_string(a.version / 1000) + "." +
                  std::to_string(a.version % 1000 / 10) + "; libkjit needs 12.0 or newer";
        return a;
    }
    if (!KJIT_BIND(a, cuDeviceGet, 2000) || !KJIT_BIND(a, cuDeviceGetAttribute, 2000) ||
        !KJIT_BIND(a, cuCtxGetDevice, 2000) || !KJIT_BIND(a, cuLibraryLoadData, 12000) ||
        !KJIT_BIND(a, cuLibraryUnload, 12000) || !KJIT_BIND(a, cuLibraryGetKernel, 12000) ||
        !KJIT_BIND(a, cuKernelGetFunction, 12000)) {
        return a;
    }
    log().debug("driver: {} (CUDA {}) loaded through cuGetProcAddress", a.library, a.version);
    return a;
}

#undef KJIT_BIND

// Loaded once per process, on first use; the library is never closed (kernels it handed out
// may be used until exit). No once-guard (fork_guard.hpp): opening takes dlopen and cuInit, and
// a thread of the parent inside them at a fork would leave a guard the child waits on for ever.
// Threads that race to open it each open it (dlopen counts, cuInit may be called again); one
// Api is kept, the others are deleted, their dlopen references kept.
std::atomic<const Api *> api_slot{nullptr};

const Api &api() {
    return fork_guard::lazy(api_slot, [] { return new Api(open_api()); });
}

// A forked child opens the driver again on first use: CUDA's state, cuInit's included, does
// not survive fork, so the child must call cuInit itself, and gets whatever the driver then says
// about a forked child. The parent's Api is leaked (its entry points are still good: the same
// library, which stays mapped).
void forget_the_parents_driver() { api_slot.store(nullptr, std::memory_order_relaxed); }
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::driver, forget_the_parents_driver);

// What to do is part of the message: loading is the only step that needs a driver.
Error unavailable(const Api &a) {
    return Error{Errc::driver_unavailable,
                 "no usable CUDA driver: " + a.error +
                     ". Loading a kernel needs the NVIDIA driver's libcuda.so.1 (on a machine with a GPU: install the "
                     "driver; elsewhere: set KJIT_LIBCUDA to a libcuda.so.1); compiling, naming and the cache work "
                     "without one"};
}

Result<int> attribute(const Api &a, CUdevice_attribute attr, CUdevice dev) {
    int value = 0;
    if (const CUresult r = a.cuDeviceGetAttribute(&value, attr, dev); r != CUDA_SUCCESS) {
        return Error{Errc::driver, describe(a, "cuDeviceGetAttribute", r)};
    }
    return value;
}

}  // namespace

Status available() {
    const Api &a = api();
    if (!a.error.empty()) return unavailable(a);
    return Ok{};
}

Result<int> driver_version() {
    const Api &a = api();
    if (!a.error.empty()) return unavailable(a);
    return a.version;
}

Result<std::string> current_device_arch() {
    const Api &a = api();
    if (!a.error.empty()) return unavailable(a);
    CUdevice dev = 0;
    if (const CUresult r = a.cuDeviceGet(&dev, 0); r != CUDA_SUCCESS) {
        return Error{Errc::driver_unavailable, describe(a, "cuDeviceGet(0)", r)};
    }
    KJIT_TRY_ASSIGN(auto major, attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    KJIT_TRY_ASSIGN(auto minor, attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    return "sm_" + std::to_string(major) + std::to_string(minor);
}

unsigned device_sm_version() {
    const Api &a = api();
    if (!a.error.empty()) return 0;
    CUdevice dev = 0;
    if (a.cuCtxGetDevice(&dev) != CUDA_SUCCESS && a.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return 0;
    auto major = attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    auto minor = attribute(a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (!major || !minor || *major < 0 || *minor < 0) return 0;
    return static_cast<unsigned>(*major * 10 + *minor);
}

Result<CUlibrary> load_library(std::string_view image, const std::string &label, CUresult *result) {
    const Api &a = api();
    if (!a.error.empty()) return unavailable(a);
    CUlibrary library = nullptr;
    const CUresult r = a.cuLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (result) *result = r;
    if (r != CUDA_SUCCESS) {
        return Error{Errc::driver, describe(a, "cuLibraryLoadData", r) + " for cubin '" + label + "'"};
    }
    return library;
}

void unload_library(CUlibrary library) {
    const Api &a = api();
    if (!library || !a.error.empty()) return;
    if (const CUresult r = a.cuLibraryUnload(library); r != CUDA_SUCCESS) {
        log().warn("{}", describe(a, "cuLibraryUnload", r));
    }
}

Result<CUkernel> get_kernel(CUlibrary library, const std::string &name, const std::string &label) {
    const Api &a = api();
    if (!a.error.empty()) return unavailable(a);
    CUkernel kernel = nullptr;
    const CUresult r = a.cuLibraryGetKernel(&kernel, library, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
        return Error{Errc::not_found, "the driver finds no kernel '" + name + "' in cubin '" + label + "'"};
    }
    if (r != CUDA_SUCCESS) {
        return Error{Errc::driver,
                     describe(a, "cuLibraryGetKernel(\"" + name + "\")", r) + " for cubin '" + label + "'"};
    }
    return kernel;
}

Result<CUfunction> function_in_current_context(CUkernel kernel) {
    const Api &a = api();
    if (!a.error.empty()) return unavailable(a);
    CUfunction function = nullptr;
    const CUresult r = a.cuKernelGetFunction(&function, kernel);
    if (r == CUDA_ERROR_INVALID_CONTEXT) {
        return Error{Errc::driver, describe(a, "cuKernelGetFunction", r) +
                                       ": the calling thread has no current CUDA context (make one current with "
                                       "cuCtxSetCurrent or cudaSetDevice first)"};
    }
    if (r != CUDA_SUCCESS) return Error{Errc::driver, describe(a, "cuKernelGetFunction", r)};
    return function;
}

}  // namespace kjit::load::driver
