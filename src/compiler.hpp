// Compiler: one NVRTC program -> cubin bytes, the compile log and lowered names. Knows NVRTC
// only: no files, no cache.
#pragma once

#include "status.hpp"

#include <string>
#include <utility>
#include <vector>

namespace kjit::compiler {

struct Request {
    std::string source;
    std::string program_name = "kjit_program.cu";  // shown in NVRTC's diagnostics
    std::vector<std::string> options;              // e.g. "-arch=sm_90", "-std=c++17"
    std::vector<std::pair<std::string, std::string>> headers;  // (include name, source)
    std::vector<std::string> name_expressions;     // e.g. "gemm<128, 64>"
};

struct Output {
    std::string cubin;
    std::string log;
    std::vector<std::pair<std::string, std::string>> lowered_names;  // (expression, mangled name)
};

// Compiles `request`. Errc::compile with the whole NVRTC log when the source does not compile;
// Errc::nvrtc with NVRTC's text for other NVRTC failures (unknown option, no cubin for a
// virtual arch, ...). Thread safe: NVRTC programs are independent.
Result<Output> compile(const Request &request);

// NVRTC's version as "major.minor".
std::string nvrtc_version();

// What identifies the NVRTC build in use beyond major.minor (patch releases change code
// generation): "major.minor libnvrtc.so.X.Y.Z <file size>", from the loaded library's file.
// The folder is left out, so the same toolkit installed elsewhere gives the same identity.
std::string nvrtc_identity();

}  // namespace kjit::compiler
