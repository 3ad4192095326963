// NVRTC probe: the identity of the NVRTC this process would load (the cache key holds it),
// proven without loading it, so that a process that only hits never pays for NVRTC (6 to 24 ms
// to map and relocate its 100 MB, more from a cold disk).
//
// What api() would open depends only on: $KJIT_LIBNVRTC, the folders the dynamic linker
// searches for libkjit (LD_LIBRARY_PATH, RPATH/RUNPATH, the system folders: dlinfo's
// RTLD_DI_SERINFO lists them, in order) with their glibc-hwcaps subfolders, ldconfig's cache,
// the build's toolkit folder, the host, and the file found. A process that loads NVRTC writes a
// record of all of them into each cache folder it uses (docs/cache-layout.md, "NVRTC's
// identity without NVRTC"): every folder's and file's stat (device, inode, mode, size, mtime and
// ctime to the nanosecond) and the identity. A later process whose context is the same and
// whose every stat still matches takes the identity from the record: a name added, removed or
// re-pointed in any of those folders changes that folder's mtime, a rewritten library its own.
// Every symbolic link on each of those paths, and on the path the library was opened by, is
// recorded too, one link at a time (its text): a link reached through another link (KJIT_LIBNVRTC
// or a search folder's libnvrtc -> /etc/alternatives/... -> a toolkit) re-pointed at any level
// is a difference, though the folder it is in is on no path the record names.
// Anything else (no record, another user's, a damaged one, a single difference, an NVRTC
// already mapped into the process) loads NVRTC as before.
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
