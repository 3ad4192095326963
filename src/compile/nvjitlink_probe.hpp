// nvJitLink probe: the identity of the nvJitLink this process would load, which the key of
// every request with link inputs holds (an entry linked by another nvJitLink build must not be
// served), as nvrtc_probe.hpp gives NVRTC's.
#pragma once

#include "util/status.hpp"

#include <string>

namespace kjit::compile::nvjitlink_probe {

// nvjitlink_library::Api::identity of the nvJitLink this process uses or would load: from the
// loaded library when there is one, else by loading it (Errc::link when there is none). Thread safe.
Result<std::string> identity(const std::string &cache_dir);

// Called by the cache after a hit or a link in `cache_dir` (a folder that passed the trust checks).
void record(const std::string &cache_dir);

// Before nvJitLink links a request keyed with `keyed_identity`: Errc::link when the nvJitLink
// loaded is another, or when none loads. Thread safe.
Status confirm(const std::string &keyed_identity, const std::string &cache_dir);

// Whether nvJitLink is mapped into this process by libkjit (tests, the bench).
bool nvjitlink_loaded();

}  // namespace kjit::compile::nvjitlink_probe
