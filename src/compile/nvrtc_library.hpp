// NVRTC library: libnvrtc reached only through dlopen on first need, never linked, so that
// libkjit loads, resolves names and loads cached kernels where no NVRTC is installed (a
// deployment that ships its cache), and takes NVRTC from wherever it is (a Python wheel rather
// than /usr/local/cuda: set KJIT_LIBNVRTC). Only the compiler calls it.
//
// Which file: `$KJIT_LIBNVRTC` alone when set and non-empty (a path or a name for dlopen's
// search), so a deployment or a test can pin NVRTC or rule it out; otherwise
// `libnvrtc.so.<major>` (the NVRTC major version the build was compiled against, e.g. 13) by the
// dynamic linker's search, then the same name in the toolkit's lib folder the build found
// (KJIT_NVRTC_DIR). The first that opens, has every entry point below and reports that major
// through nvrtcVersion is used. The outcome (the API, or why there is none) is kept for the life
// of the process: after installing NVRTC or changing the variable, start a new process.
//
// Typed by nvrtc.h's own prototypes (decltype), so a call through the table is checked like a
// call to the linked function. NVRTC keeps the C ABI of these functions within a major version,
// which is why only the major must match.
#pragma once

#include "util/status.hpp"

#include <nvrtc.h>

#include <string>
#include <vector>

namespace kjit::compile::nvrtc_library {

// Every NVRTC entry point libkjit calls.
struct Api {
    decltype(&::nvrtcVersion) nvrtcVersion = nullptr;
    decltype(&::nvrtcGetErrorString) nvrtcGetErrorString = nullptr;
    decltype(&::nvrtcCreateProgram) nvrtcCreateProgram = nullptr;
    decltype(&::nvrtcDestroyProgram) nvrtcDestroyProgram = nullptr;
    decltype(&::nvrtcAddNameExpression) nvrtcAddNameExpression = nullptr;
    decltype(&::nvrtcCompileProgram) nvrtcCompileProgram = nullptr;
    decltype(&::nvrtcGetProgramLogSize) nvrtcGetProgramLogSize = nullptr;
    decltype(&::nvrtcGetProgramLog) nvrtcGetProgramLog = nullptr;
    decltype(&::nvrtcGetCUBINSize) nvrtcGetCUBINSize = nullptr;
    decltype(&::nvrtcGetCUBIN) nvrtcGetCUBIN = nullptr;
    decltype(&::nvrtcGetLoweredName) nvrtcGetLoweredName = nullptr;
    // Optional (nullptr where absent): only for messages.
    decltype(&::nvrtcGetNumSupportedArchs) nvrtcGetNumSupportedArchs = nullptr;
    decltype(&::nvrtcGetSupportedArchs) nvrtcGetSupportedArchs = nullptr;
    // Optional: only a compile with link inputs asks for LTO-IR.
    decltype(&::nvrtcGetLTOIRSize) nvrtcGetLTOIRSize = nullptr;
    decltype(&::nvrtcGetLTOIR) nvrtcGetLTOIR = nullptr;

    std::string library;       // what dlopen was given, as the messages name it
    std::string file;          // the file it opened, links resolved (realpath)
    bool preexisting = false;  // dlopen returned a library something else had mapped already
    std::string version;       // "13.0", from nvrtcVersion
    std::string identity;      // compile::compiler::nvrtc_identity()'s text for this library
};

// The API, opened on the first call in the process (thread safe; the library is never closed).
// Errc::nvrtc when no NVRTC could be used, saying every file tried and why each failed (dlopen's
// own error, a missing entry point, another major version) and what to do: install the CUDA
// toolkit's NVRTC or point KJIT_LIBNVRTC at a libnvrtc.so.<major>.
Result<const Api *> api();

// The API when api() has already opened one in this process, else nullptr; never opens
// anything (the NVRTC probe asks whether the identity can be had without loading). Thread safe.
const Api *opened();

// What api() hands dlopen, in order: `$KJIT_LIBNVRTC` alone when set, else the bare name
// (the dynamic linker's search) and the path in the build's toolkit folder.
std::vector<std::string> candidates();

// The bare name api() looks for by the dynamic linker's search: "libnvrtc.so.<major>".
std::string library_name();

}  // namespace kjit::compile::nvrtc_library
