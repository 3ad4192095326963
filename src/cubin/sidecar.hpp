// Sidecar: reads, validates the form of, and atomically writes `<cubin>.name` files.
// Knows the file format and the filesystem (and, from the name matcher, what a plain name is);
// what a line means (does it answer this keyword, does it belong to the cubin as it is now) is
// the resolver's business.
//
// Format, version 1 (docs/sidecar-format.md explains each field and why it was chosen):
//
//   kjit-sidecar 1
//   <keyword> <cubin size> <mtime sec>.<mtime nsec, 9 digits> <content hash|-> <name> <check>
//
// one line per keyword, each ending in '\n'. <content hash> is the cubin's XXH3-64 in 16 hex
// digits, written only when the cubin was modified so recently that its size and mtime alone
// might not tell a later change apart ("racy", as git calls it); otherwise '-'. <check> is the
// XXH3-64 of the line's text before it, so a torn or damaged line is never taken as valid.
#pragma once

#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cubin::sidecar {

// A sidecar larger than this is not read (it cannot be ours; reading it would be unbounded).
constexpr std::size_t kMaxFileSize = 64 * 1024;

struct Line {
    std::string keyword;
    std::uint64_t cubin_size = 0;
    std::int64_t mtime_sec = 0;
    std::uint32_t mtime_nsec = 0;
    std::optional<std::uint64_t> content_hash;  // set only for a racy line
    std::string name;
};

// Why a sidecar file as a whole gave no lines.
enum class FileProblem {
    none,        // read and parsed; `lines` holds every well-formed line
    missing,     // no such file
    unreadable,  // a symlink, a directory, no permission, an I/O error (see detail)
    too_large,   // larger than kMaxFileSize
    empty,       // 0 bytes
    bare_name,   // one bare symbol name, as older Python tools wrote: untrusted
    bad_header,  // not a kjit sidecar, or of another format version
};

const char *to_string(FileProblem problem);

// A line as parsed, viewing the bytes it came from (the hit path copies nothing but the name).
struct LineView {
    std::string_view keyword;
    std::uint64_t cubin_size = 0;
    std::int64_t mtime_sec = 0;
    std::uint32_t mtime_nsec = 0;
    std::optional<std::uint64_t> content_hash;
    std::string_view name;

    Line to_line() const;
};

// A sidecar's bytes as read: small files stay in the inline buffer (no heap on the hit path).
class FileBuffer {
public:
    FileBuffer() = default;
    FileBuffer(const FileBuffer &) = delete;
    FileBuffer &operator=(const FileBuffer &) = delete;

    FileProblem problem = FileProblem::none;  // missing, unreadable or too_large; else none
    std::string detail;                       // errno text or what was wrong
    // Who wrote the file (fstat of the descriptor read), for the resolver's trust rule.
    uid_t owner_uid = 0;
    gid_t owner_gid = 0;
    // The version read (the same fstat): a later lstat equal to it, owner included, proves
    // these bytes still the file's, once its last change is older than a timestamp tick.
    FileIdentity identity;
    bool regular = false;  // a regular file (not a FIFO or device opened in its place)
    std::string_view text() const { return {data_, size_}; }

private:
    friend void read_into(const std::string &path, FileBuffer &out);
    char small_[4096];
    std::string big_;
    const char *data_ = small_;
    std::size_t size_ = 0;
};

struct Contents {
    FileProblem problem = FileProblem::none;
    std::string detail;              // errno text or what was wrong, for the log
    std::vector<Line> lines;         // well-formed lines only
    std::size_t rejected_lines = 0;  // malformed lines skipped (bad fields, bad check, torn)
};

// `<cubin_path>.name`.
std::string path_for(const std::string &cubin_path);

// Reads a sidecar's bytes (at most kMaxFileSize + 1) into `out`. Never fails: problems are
// reported in `out.problem`. Does not follow a symlink at `path` (a planted link is
// unreadable, and rewriting replaces it) and does not block on a FIFO. Records the file's owner.
void read_into(const std::string &path, FileBuffer &out);

// The whole-file problem of sidecar bytes (empty, bare name, bad header), or none.
FileProblem classify(std::string_view text, std::string *detail = nullptr);

// The hit path: the last well-formed line for exactly `keyword` in sidecar bytes that
// classify() accepts. Only lines that start with the keyword are parsed.
std::optional<LineView> find_line(std::string_view text, std::string_view keyword);

// Parses sidecar bytes in full (the rewrite path, tests and fuzzing).
Contents parse(std::string_view text);

// read_into() then parse().
Contents read(const std::string &path);

// Whether the format can hold `line`: keyword and name are cubin::name_matcher::is_plain_name (no
// space, no control byte), since fields are space-separated and lines end in '\n'.
bool can_hold(const Line &line);

// The file text for `lines`, header included. Lines it cannot hold (can_hold) are left out.
std::string format(const std::vector<Line> &lines);

// Publishes `lines` as the sidecar at `path`: writes a temp file in the same folder, named with
// the pid and thread id and opened O_CREAT|O_EXCL|O_NOFOLLOW, then renames it over `path`.
// On any failure the temp file is removed and Errc::io names the step and the errno text. A
// line it cannot hold (can_hold) is Errc::invalid_argument and nothing is written. In a team
// folder (folder_trust.hpp) the file is made group-writable whatever the umask. After
// a success, sweeps the folder's stale temp files (sweep_stale_temp_files).
Status write(const std::string &path, const std::vector<Line> &lines);

// Whether `file_name` (no folder) is one of write()'s temp files for some sidecar.
bool is_temp_file_name(std::string_view file_name);

// write() sweeps its folder at most this often per process and folder.
constexpr std::int64_t kTempSweepIntervalNs = 600'000'000'000;

// Removes the stale sidecar temp files (is_temp_file_name, regular files older than
// kStaleTempNs: filesystem.hpp) in `folder`, unless this process swept it within kTempSweepIntervalNs.
// write() calls it after each successful publish, so a folder's leftovers go with its next
// rewrite; a live temp file of another process is never that old. Returns how many went.
std::size_t sweep_stale_temp_files(const std::string &folder);

}  // namespace kjit::cubin::sidecar
