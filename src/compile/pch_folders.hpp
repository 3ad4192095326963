// PCH folders: where NVRTC keeps the automatic precompiled headers of a process's compiles.
// NVRTC reuses a PCH for any later compile whose options match, without checking that the
// headers it was made from are the same: with its default folder, a program whose in-memory
// `config.h` (or a header on disk) differs from the first one's would silently compile against
// the first one's (measured with NVRTC 13.0: a static_assert on the header's value fails). So
// every distinct header identity (computed by the cache: options, arch, in-memory headers, the
// content of every file the compile may read from disk, the source up to its last #include)
// gets a folder of its own, under one private folder per process, and NVRTC only ever sees
// PCHs made from the same headers. Knows the filesystem only.
#pragma once

#include "util/status.hpp"

#include <string>

namespace kjit::compile::pch_folders {

// The folder for PCHs of `identity` (hex digits), created on first use (mode 0700) under
// "$TMPDIR/kjit-pch-<pid>-XXXXXX" (else /tmp), which is removed when the process exits
// normally (NVRTC removes the PCH files it made at exit too); roots of processes that are gone
// and untouched for 10 minutes are swept then. Errc::io when a folder cannot be
// created: the caller then compiles without a PCH. Thread safe; a forked child gets a root of
// its own.
// `*made_now` (when given) says whether this call created it: the first compile of that
// identity in this process, which makes the PCH.
Result<std::string> folder_for(const std::string &identity, bool *made_now = nullptr);

}  // namespace kjit::compile::pch_folders
