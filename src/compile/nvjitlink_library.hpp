// nvJitLink library: libnvJitLink reached only through dlopen, and only by a process that links
// (a request with link inputs that misses), never linked: a process that only hits, or never
// links, never maps it. Only the linker calls it.
//
// Which file: `$KJIT_LIBNVJITLINK` alone when set and non-empty (a path, e.g. the
// nvidia-nvjitlink wheel's, or a name for dlopen's search); otherwise `libnvJitLink.so.<major>`
// (the CUDA major version the build was compiled against) by the dynamic linker's search, then
// the same name in the toolkit's lib folder the build found. The first that opens, has every
// entry point below and reports that major through nvJitLinkVersion is used; the outcome is
// kept for the life of the process.
//
// nvJitLink.h's functions are inline wrappers of versioned symbols (`__nvJitLinkCreate_13_0`),
// so a library of another major has none of them: bound here by those versioned names, typed
// by the wrappers' prototypes (decltype).
#pragma once

#include "util/status.hpp"

#include <nvJitLink.h>

#include <string>
#include <vector>

namespace kjit::compile::nvjitlink_library {

// Every nvJitLink entry point libkjit calls.
struct Api {
    decltype(&::nvJitLinkCreate) create = nullptr;
    decltype(&::nvJitLinkDestroy) destroy = nullptr;
    decltype(&::nvJitLinkAddData) add_data = nullptr;
    decltype(&::nvJitLinkComplete) complete = nullptr;
    decltype(&::nvJitLinkGetLinkedCubinSize) linked_cubin_size = nullptr;
    decltype(&::nvJitLinkGetLinkedCubin) linked_cubin = nullptr;
    decltype(&::nvJitLinkGetErrorLogSize) error_log_size = nullptr;
    decltype(&::nvJitLinkGetErrorLog) error_log = nullptr;
    decltype(&::nvJitLinkGetInfoLogSize) info_log_size = nullptr;
    decltype(&::nvJitLinkGetInfoLog) info_log = nullptr;
    decltype(&::nvJitLinkVersion) version_of = nullptr;

    std::string library;       // what dlopen was given, as the messages name it
    std::string file;          // the file it opened, links resolved (realpath)
    bool preexisting = false;  // dlopen returned a library something else had mapped already
    std::string version;       // "13.0", from nvJitLinkVersion
    std::string identity;      // "13.0 libnvJitLink.so.13.0.88 <size>": in the key of every link
};

// The API, opened on the first call in the process (thread safe; never closed). Errc::link when
// no nvJitLink could be used, saying every file tried and why each failed and what to do.
Result<const Api *> api();

// The API when api() has already opened one in this process, else nullptr; opens nothing.
const Api *opened();

// What api() hands dlopen, in order (runtime_library::candidates with $KJIT_LIBNVJITLINK).
std::vector<std::string> candidates();

// The bare name api() looks for: "libnvJitLink.so.<major>".
std::string library_name();

}  // namespace kjit::compile::nvjitlink_library
