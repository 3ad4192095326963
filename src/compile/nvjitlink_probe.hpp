// nvJitLink probe: the identity of the nvJitLink this process would load, which the key of
// every request with link inputs holds (an entry linked by another nvJitLink build must not be
// served), proven without loading it, so that a process that only hits never maps nvJitLink:
// library_probe.hpp's probe for nvJitLink, as nvrtc_probe.hpp is for NVRTC (docs/cache-layout.md,
// "NVRTC's identity without loading NVRTC"). Its records: `<cache>/.kjit-nvjitlink-<euid>-<hash>`;
// what decides which nvJitLink api() opens includes $KJIT_LIBNVJITLINK.
//
// If a record was wrong all the same, the first link, which loads nvJitLink, finds the loaded
// identity differs (confirm()): it fails that compile with KJIT_ERROR_LINK, removes the record and
// keys with the loaded nvJitLink from then on, so no cubin is stored under another nvJitLink's key.
#pragma once

#include "util/status.hpp"

#include <string>

namespace kjit::compile::nvjitlink_probe {

// nvjitlink_library::Api::identity of the nvJitLink this process uses or would load: from the
// loaded library when there is one, else from a valid record in `cache_dir` (an absolute
// folder), else by loading it (Errc::link when there is none). The answer a record gave is kept
// for the process. Thread safe.
Result<std::string> identity(const std::string &cache_dir);

// Called by the cache after a hit or a link in `cache_dir` (a folder that passed the trust
// checks): where this process has loaded nvJitLink and found no valid record of it there, writes
// one (best effort: a read-only cache gets none; failures are logged at debug). At most once per
// folder and process. Thread safe.
void record(const std::string &cache_dir);

// Before nvJitLink links a request keyed with `keyed_identity`: Errc::link when the nvJitLink
// loaded is another (the record of `cache_dir` that said so is removed; retrying keys with the
// loaded one), or when none loads. Thread safe.
Status confirm(const std::string &keyed_identity, const std::string &cache_dir);

// Whether nvJitLink is mapped into this process by libkjit (tests, the bench).
bool nvjitlink_loaded();

}  // namespace kjit::compile::nvjitlink_probe
