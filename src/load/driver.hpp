// Driver: the CUDA Driver API, reached only through dlopen("libcuda.so.1") (override:
// KJIT_LIBCUDA), so libkjit loads, compiles and resolves on machines without a driver.
//
// On first use it opens the library, takes cuGetProcAddress_v2 from it and asks that for every
// other entry point at the ABI version of the prototype this file calls it through (the
// PFN_<name>_v<version> typedefs of the toolkit's cudaTypedefs.h). Asking at CUDA_VERSION
// instead could hand back a newer ABI than the prototype (cuCtxGetDevice changed its signature
// in 13.0). Then cuInit(0). The outcome is kept for the life of the process; a forked child
// opens the driver again (cuInit's state does not survive fork) on its first use.
//
// Only CUDA types cross this interface (cuda.h is a header-only dependency); failures come back
// as kjit::Error: Errc::driver_unavailable when there is no usable driver, Errc::driver (with the
// driver's error name) when a call fails, Errc::not_found for a kernel name absent from an image.
#pragma once

#include "util/status.hpp"

#include <cuda.h>

#include <string>
#include <string_view>

namespace kjit::load::driver {

// The oldest driver API the loader can use: the context-free cuLibrary* calls came in 12.0.
constexpr int kMinDriverVersion = 12000;

// Ok when the driver is loaded and initialised; else Errc::driver_unavailable saying what was
// tried (the library path, the entry point) and what failed.
Status available();

// The CUDA version the driver supports (e.g. 13000), or the availability error.
Result<int> driver_version();

// "sm_XY" of device 0 (compute capability X.Y). Errc::driver_unavailable when there is no
// driver, cuInit fails or there is no device.
Result<std::string> current_device_arch();

// The SM version (90 for compute capability 9.0) of the current context's device, else of device
// 0; 0 when neither can be asked. For error messages.
unsigned device_sm_version();

// cuLibraryLoadData over a cubin image (the driver copies it: the bytes may be freed after the
// call). Context-free: no current context is needed. On failure the CUresult is in `*result`
// (when not null) and the error is Errc::driver (or driver_unavailable) naming `label`.
Result<CUlibrary> load_library(std::string_view image, const std::string &label, CUresult *result = nullptr);

// cuLibraryUnload. Errors are logged, not returned: there is nothing a caller could do.
void unload_library(CUlibrary library);

// cuLibraryGetKernel. Errc::not_found when the image has no kernel of that name
// (CUDA_ERROR_NOT_FOUND), Errc::driver for any other failure.
Result<CUkernel> get_kernel(CUlibrary library, const std::string &name, const std::string &label);

// cuKernelGetFunction: the kernel's CUfunction in the calling thread's current context.
// Errc::driver when there is no current context or the call fails.
Result<CUfunction> function_in_current_context(CUkernel kernel);

}  // namespace kjit::load::driver
