// The link scenario's baseline (issue 37): nvJitLink alone, called directly, no files written
// and no cache: a kernel's LTO-IR in memory linked with a library file into a cubin in memory
// (nvJitLinkCreate, AddData, AddFile, Complete, GetLinkedCubin, Destroy), with the options
// kjit_compile gives it (-arch=<arch> -lto).
#pragma once

#include <string>

namespace kjit_bench {

std::string nvjitlink_version();  // "13.0"

// Links `ltoir` (a kernel's, from raw_nvrtc_ltoir) with the LTO-IR file `library` for `arch`;
// returns the linked cubin's size. Throws BenchError with nvJitLink's error log on failure.
std::size_t raw_nvjitlink(const std::string &ltoir, const std::string &library, const std::string &arch);

}  // namespace kjit_bench
