// Linker: the link step of a request with link inputs (kjit_compile_options::link_inputs): the
// input files read once and told apart by content, and nvJitLink (nvjitlink_library.hpp, loaded
// on first need) linking NVRTC's LTO-IR of the source with them into the cubin that is cached.
// The bytes the key hashes are the bytes linked: a file edited between keying and linking
// cannot put one version's code under the other's key.
#pragma once

#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::compile::linker {

// What a link input is, from its first bytes (never its name): what nvJitLink is told it is.
enum class Kind { ltoir, cubin, fatbin, ptx, object, library };

// "LTO-IR", "cubin", "fatbin", "PTX", "relocatable object", "library".
const char *kind_name(Kind kind);

// One link input file, read.
struct Input {
    std::string path;                          // absolute, as the request named it
    Kind kind = Kind::ltoir;                   //
    std::shared_ptr<const std::string> bytes;  // the content, as keyed and as linked
    std::string content_hash;                  // XXH3-128 of `bytes`, 32 hex digits (the key's)
    FileIdentity identity;                     // fstat of what was read (the hit memo proves it unchanged)
};

// Reads `path` (absolute) whole and tells its kind. Errc::io naming the file when it is missing,
// unreadable, not a regular file or kept changing; Errc::invalid_argument when it is empty,
// larger than 1 GiB, or of no kind above (what its first bytes are, in hex). A file this process
// read before is not read again while a stat shows it is the very file that was read (device,
// inode, size, mtime and ctime to the nanosecond) and it was not young then (kRacyWindowNs): its
// Input then shares the bytes read first. Thread safe.
Result<Input> read_input(const std::string &path);

// How many link inputs this process has read whole (tests, the bench).
std::uint64_t inputs_read();

// Links `ltoir` (NVRTC's -dlto output of `program_name`) with `inputs`, in order, for `arch`
// ("sm_90"): nvJitLink with "-arch=<arch>", "-lto" and then `options`. Returns the linked cubin;
// `*info_log` receives nvJitLink's info log (may be empty). Errc::link with nvJitLink's error log
// and the input it concerns (an input for another arch, one it cannot read, an unresolved
// function, a bad option), or when no nvJitLink can be loaded. Thread safe (each link has its
// own handle).
Result<std::string> link(std::string_view ltoir, const std::string &program_name, const std::string &arch,
                         const std::vector<Input> &inputs, const std::vector<std::string> &options,
                         std::string *info_log);

}  // namespace kjit::compile::linker
