// The baseline kjit_compile is measured against: NVRTC alone, source to cubin bytes in memory,
// no files and no cache (nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetCUBIN, destroy); for
// link-time kernels, source to LTO-IR the same way, then nvJitLink alone (raw_nvjitlink.hpp).
#pragma once

#include <string>
#include <vector>

namespace kjit_bench {

std::string nvrtc_version();  // "13.0"

// Compiles `source` for `arch` (e.g. "sm_90") with `options` added; returns the cubin's size.
// Throws BenchError with NVRTC's log on failure.
std::size_t raw_nvrtc_compile(const std::string &source, const std::string &arch,
                              const std::vector<std::string> &options = {});

// Compiles `source` to LTO-IR for `arch` as kjit_compile does with link inputs: `options`, then
// -dlto, -rdc=true and -arch=<arch>; returns the LTO-IR. Throws BenchError with NVRTC's log.
std::string raw_nvrtc_ltoir(const std::string &source, const std::string &arch,
                            const std::vector<std::string> &options = {});

}  // namespace kjit_bench
