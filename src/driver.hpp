// Driver: the CUDA Driver API, reached only through dlopen("libcuda.so.1") (override:
// KJIT_LIBCUDA), so libkjit loads, compiles and resolves on machines without a driver. So far it
// answers one question, the current GPU's arch, for kjit_compile's default target.
#pragma once

#include "status.hpp"

#include <string>

namespace kjit::driver {

// "sm_XY" of device 0 (compute capability X.Y). Errc::driver_unavailable, saying what was
// tried and what failed, when there is no driver, cuInit fails or there is no device.
Result<std::string> current_device_arch();

}  // namespace kjit::driver
