// NVRTC probe: the identity of the NVRTC this process would load (the cache key holds it),
// proven without loading it, so that a process that only hits never pays for NVRTC (6 to 24 ms
// to map and relocate its 100 MB, more from a cold disk): library_probe.hpp's probe for NVRTC,
// which says how (docs/cache-layout.md, "NVRTC's identity without loading NVRTC"). Its records:
// `<cache>/.kjit-nvrtc-<euid>-<hash>`; what decides which NVRTC api() opens includes
// $KJIT_LIBNVRTC. Anything else than a valid record (none, another user's, a damaged one, a
// single difference, an NVRTC already mapped into the process) loads NVRTC as before.
//
// If a record was wrong all the same (a change no stat shows), the first compile, which loads
// NVRTC, finds the loaded identity differs (confirm()); it fails that compile with
// KJIT_ERROR_NVRTC, removes the record and keys with the loaded NVRTC from then on, so no cubin
// is ever stored under another NVRTC's key.
#pragma once

#include "util/status.hpp"

#include <string>
#include <string_view>

namespace kjit::compile::nvrtc_probe {

// compile::compiler::nvrtc_identity()'s text for the NVRTC this process uses or would load: from the
// loaded library when there is one, else from a valid record in `cache_dir` (an absolute
// folder), else by loading NVRTC (its error when there is none). The answer a record gave is
// kept for the process (like api()'s outcome). Thread safe.
Result<std::string> identity(const std::string &cache_dir);

// Called by the cache after a hit or a compile in `cache_dir` (its folder passed the trust
// checks): where this process has loaded NVRTC and found no valid record of it there, writes
// one (best effort: a read-only cache gets none; failures are logged at debug). At most once per
// folder and process. Thread safe.
void record(const std::string &cache_dir);

// Before NVRTC compiles a request keyed with `keyed_identity`: Errc::nvrtc when the NVRTC
// loaded is another (the record of `cache_dir` that said so is removed; retrying keys with the
// loaded one), or when none loads. Thread safe.
Status confirm(const std::string &keyed_identity, const std::string &cache_dir);

// Whether NVRTC is mapped into this process by libkjit (tests, the bench).
bool nvrtc_loaded();

}  // namespace kjit::compile::nvrtc_probe
