// The file system as every libkjit module uses it, written once: an owning file descriptor and
// folder reader, the identity of a file as stat(2) reports it, the clock rules for files just
// written, unique temp names, new files written whole (never through a link, never over another
// file), whole and small file reads, tree removal, and I/O errors that name the path and errno.
// Knows POSIX and nothing of libkjit's formats.
#pragma once

#include "util/status.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd &&other) noexcept : fd_(other.release()) {}
    UniqueFd &operator=(UniqueFd &&other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    UniqueFd(const UniqueFd &) = delete;
    UniqueFd &operator=(const UniqueFd &) = delete;
    ~UniqueFd() { reset(); }

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }
    // Closes the held descriptor; returns close(2)'s result (0 when none was held).
    int reset(int fd = -1) {
        int rc = 0;
        if (fd_ >= 0) rc = ::close(fd_);
        fd_ = fd;
        return rc;
    }

private:
    int fd_ = -1;
};

// Writes all of `bytes` to `fd`, retrying short writes and EINTR. Returns true, or false with
// errno set by the failing write.
inline bool write_all(int fd, const char *bytes, std::size_t size) {
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::write(fd, bytes + done, size - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    return true;
}

// A file modified less than this long before it was read is "young" (git's "racy"): its size
// and mtime cannot tell it apart from an edit made within the same timestamp tick, so whoever
// records it must also check its content later. 2 s covers 1-2 s timestamp granularity (FAT,
// HFS+, tar) and coarse clocks.
constexpr std::int64_t kRacyWindowNs = 2'000'000'000;

// The wall clock in nanoseconds: the clock file timestamps are taken from.
inline std::int64_t realtime_ns() {
    struct timespec ts {};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// When this boot of the machine began, on the wall clock (CLOCK_REALTIME less CLOCK_BOOTTIME,
// which counts suspend too): a file last changed before it was written by an earlier boot, and
// what a power cut kept from the disk is lost from it. Moves with the wall clock (NTP steps).
inline std::int64_t boot_realtime_ns() {
    struct timespec since_boot {};
    clock_gettime(CLOCK_BOOTTIME, &since_boot);
    return realtime_ns() - (static_cast<std::int64_t>(since_boot.tv_sec) * 1'000'000'000 + since_boot.tv_nsec);
}

// The monotonic clock in nanoseconds: for intervals and deadlines within a process.
inline std::int64_t steady_ns() {
    struct timespec ts {};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A file's mtime in nanoseconds.
inline std::int64_t mtime_ns(const struct stat &st) {
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// A temp file or folder (of any module) older than this was left by a killed writer: writing
// one takes milliseconds (a cache entry's compile happens before its temp folder exists), so
// whoever sweeps may remove it.
constexpr std::int64_t kStaleTempNs = 600'000'000'000;

// Whether a file last modified at `mtime_sec`.`mtime_nsec` was young at `when_ns`.
inline bool young_at(std::int64_t mtime_sec, std::uint32_t mtime_nsec, std::int64_t when_ns) {
    return mtime_sec * 1'000'000'000 + static_cast<std::int64_t>(mtime_nsec) > when_ns - kRacyWindowNs;
}

// What identifies one version of a file's contents without reading them. size and mtime
// survive `cp -a` and `tar`; dev, ino and ctime do not, and are only used for in-process
// memos, never written to disk.
struct FileIdentity {
    std::uint64_t size = 0;
    std::int64_t mtime_sec = 0;
    std::uint32_t mtime_nsec = 0;
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
    std::int64_t ctime_sec = 0;
    std::uint32_t ctime_nsec = 0;

    static FileIdentity from_stat(const struct stat &st) {
        FileIdentity id;
        id.size = static_cast<std::uint64_t>(st.st_size);
        id.mtime_sec = st.st_mtim.tv_sec;
        id.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
        id.dev = st.st_dev;
        id.ino = st.st_ino;
        id.ctime_sec = st.st_ctim.tv_sec;
        id.ctime_nsec = static_cast<std::uint32_t>(st.st_ctim.tv_nsec);
        return id;
    }

    // Every field equal: the same file, unchanged (the in-process memo and loader key).
    bool operator==(const FileIdentity &o) const {
        return size == o.size && mtime_sec == o.mtime_sec && mtime_nsec == o.mtime_nsec && dev == o.dev &&
               ino == o.ino && ctime_sec == o.ctime_sec && ctime_nsec == o.ctime_nsec;
    }
    bool operator!=(const FileIdentity &o) const { return !(*this == o); }
};

// Hash of every FileIdentity field, for unordered containers keyed by file version.
struct FileIdentityHash {
    std::size_t operator()(const FileIdentity &id) const {
        std::uint64_t h = 0xcbf29ce484222325ULL;
        for (std::uint64_t v :
             {id.size, id.ino, id.dev, static_cast<std::uint64_t>(id.mtime_sec), std::uint64_t{id.mtime_nsec},
              static_cast<std::uint64_t>(id.ctime_sec), std::uint64_t{id.ctime_nsec}}) {
            h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        }
        return static_cast<std::size_t>(h);
    }
};

// Errc::io "<doing> '<path>': <errno text>", with `err` in Error::sys_errno. Callers pass the
// errno they saved right after the failing call (a later call may change errno).
Error io_error(std::string_view doing, const std::string &path, int err);

// A suffix no other temp name on this machine has right now: "<pid>-<tid>-<n>", n from one
// process-wide sequence. Every module names its temp files and folders with it, so sweeps can
// tell a live writer's (its pid) from a killed one's by age alone.
std::string unique_suffix();
// How many suffixes this process has drawn so far: the n of the next one (for tests that take
// names in advance).
std::uint64_t unique_suffixes_drawn();

// Creates something at a fresh name "<stem><unique_suffix()><tail>" with `create` (an O_EXCL
// open, a mkdir: it returns 0, or -1 with errno set). A name taken in advance (a stray file, a
// killed writer's folder whose pid and thread id came back, a planted link) is skipped for the
// next one, kUniqueNameAttempts times in all. Returns the name, or io_error("cannot create
// <what>", the last name tried, errno).
constexpr int kUniqueNameAttempts = 8;
Result<std::string> create_unique(const std::string &stem, std::string_view tail, std::string_view what,
                                  const std::function<int(const std::string &)> &create);

// How write_new_file writes (or'ed together; none: a 0644 file, not synced).
constexpr unsigned kDurable = 1u << 0;        // fsync it before returning
constexpr unsigned kBackdated = 1u << 1;      // its mtime kBackdateSeconds in the past (see below)
constexpr unsigned kGroupWritable = 1u << 2;  // 0664 whatever the umask: a team's members replace each other's files
constexpr unsigned kUmaskMode = 1u << 3;      // 0666 less the umask, like a file the user writes (a sidecar)
// A backdated file's mtime is this far in the past: a file whose mtime is well before its read
// is not "young" (kRacyWindowNs), and any later change to it, which stamps the current time, can
// never look like this version.
constexpr std::int64_t kBackdateSeconds = 10;

// Writes `bytes` to a new file at `path`, never through a link and never over an existing file
// (O_EXCL), as `flags` say. On failure the file may be left partly written: the caller removes
// it (it made the name). Errors: io naming the step ("cannot create/write/fsync/close") and
// `path`, with its errno.
Status write_new_file(const std::string &path, std::string_view bytes, unsigned flags = 0);

// Replaces `path` whole with `bytes`: written to a new temp file "<temp_stem><unique suffix>
// <temp_tail>" (write_new_file with `flags`) and renamed over it, so readers see the old file
// or the new, never a part. The temp name must lie in the same folder (rename is atomic within
// one file system) and have a shape the folder's sweeps know. Nothing is left behind on
// failure. Errors: io naming the temp file or `path`.
Status replace_file(const std::string &path, const std::string &temp_stem, std::string_view temp_tail,
                    std::string_view bytes, unsigned flags = 0);

// Reads a small file whole, not through a link; nullopt when it is missing, unreadable or over
// `limit` bytes (it never reads more than limit + 64 KiB). With `dir_fd`, `path` is relative to
// that folder (openat). Never blocks on a FIFO planted in its place.
std::optional<std::string> read_small_file(const std::string &path, std::size_t limit, int dir_fd = AT_FDCWD);

// `folder` as libkjit works on it: made absolute against the working directory (the same
// relative folder means another folder elsewhere), "." and ".." folded, no trailing '/'; links
// are not resolved. Errors: io naming it.
Result<std::string> absolute_folder(const std::string &folder);

// A path as the kernel resolves it, one symbolic link at a time (path_resolution(7)). Whoever
// proves something about what a path leads to (the header watch, the NVRTC probe's record) must
// prove it about every link on the way: a link reached through another link (`/usr/local/cuda ->
// /etc/alternatives/cuda -> /usr/local/cuda-13.0`, update-alternatives' layout) is re-pointed in
// a folder that the path as spelled never names, and realpath() alone hides it.
struct LinkWalk {
    struct Link {
        std::string path;    // the link itself, in a folder reached with no link left in its path
        std::string target;  // its text, as readlink(2) gives it (a relative one is from its folder)
    };
    std::vector<Link> links;  // every link followed, in the order followed (the last name's too)
    // The path with every link resolved and "." and ".." folded as the kernel does (".." after a
    // link goes up from where the link led); where a name is missing, or a file stands where a
    // folder is needed, the names left are appended as spelled, unresolved (found = false).
    std::string resolved;
    bool found = true;
};
// The text of the symbolic link at `path` (readlink(2), whatever its length), whose lstat is
// `st`; nullopt (errno set) when it cannot be read.
std::optional<std::string> link_text(const std::string &path, const struct stat &st);
// At most this many links on one path, as Linux's own lookup (ELOOP).
constexpr int kMaxLinksOnPath = 40;
// Walks the absolute `path` one name at a time (an lstat each, a readlink per link). nullopt
// when `path` is relative, holds more than kMaxLinksOnPath links (a loop), or a name cannot be
// looked up (EACCES, EIO): then nothing may be proven through it. `link_free`: a folder that
// `path` begins with (up to a '/'), which the caller knows holds no link on its way and is
// there (the header watch: one it watches, with every folder above it): the walk starts after
// it. Empty, or not how `path` begins: the walk starts at '/'.
std::optional<LinkWalk> walk_links(const std::string &path, std::string_view link_free = {});

// mkdir -p: creates `path` and its missing parents with `mode` (less the umask). An existing
// folder is fine, an existing non-folder is an error. Errors: io "cannot create <what> '<path>':
// " and why, naming the part of the path that failed, with its errno (ENOTDIR for a non-folder
// in the way).
Status make_folders(const std::string &path, mode_t mode, std::string_view what);

// fsyncs the folder at `path`, so that the names created in it survive a power cut. Errors: io.
Status fsync_folder(const std::string &path);

// Deletes a folder tree (or a file); failures are logged, not returned.
void remove_tree(const std::string &path);

// Reads a folder's names, closing it on destruction ("." and ".." are skipped).
class FolderReader {
public:
    // Opens `path` (O_DIRECTORY). Errors: io "cannot open folder '<path>'" with its errno.
    static Result<FolderReader> open(const std::string &path);
    // The same on a folder descriptor the reader then owns (it is closed even on failure).
    static Result<FolderReader> adopt(int dir_fd, const std::string &path);

    FolderReader(FolderReader &&other) noexcept : dir_(other.dir_), path_(std::move(other.path_)) {
        other.dir_ = nullptr;
    }
    FolderReader &operator=(FolderReader &&) = delete;
    FolderReader(const FolderReader &) = delete;
    FolderReader &operator=(const FolderReader &) = delete;
    ~FolderReader();

    // The next entry, or nullptr at the end; errors: io "cannot read folder '<path>'".
    Result<const struct dirent *> next();
    // The folder's descriptor, for the *at() calls on its entries.
    int fd() const;

private:
    FolderReader(DIR *dir, std::string path) : dir_(dir), path_(std::move(path)) {}
    DIR *dir_;
    std::string path_;
};

// The descriptor of a lock file (a flock or an OFD lock is held through it), registered from its
// open to its close so that a forked child closes it. Such a lock belongs to the open file, not
// the process: it is let go only once every descriptor on that file is closed, so a child that
// lived on (a pool worker) with a descriptor a parent's thread had open, locked or waiting,
// would hold the lock after that thread released it, for as long as it lives, and every
// process waiting on it would wait for one that knows nothing of it. More than 64 descriptors
// open at once are not registered.
class LockFd {
public:
    explicit LockFd(int fd);
    LockFd(LockFd &&other) noexcept;
    LockFd &operator=(LockFd &&other) noexcept;
    LockFd(const LockFd &) = delete;
    LockFd &operator=(const LockFd &) = delete;
    ~LockFd() { reset(); }
    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }

private:
    void reset();

    int fd_ = -1;
    int slot_ = -1;
};

// Reads the whole regular file open at `fd` into memory, with pread(2), and sets `identity` to
// the fstat of what was read. Never maps the file: another process truncating it meanwhile
// (`cp new a`, an editor saving in place) must give an error, not SIGBUS in the host program.
// A file that changes while it is read (it ends early or late, or its fstat after the read
// differs from before) is read again, kWholeFileReadAttempts times in all. `accept` sees each
// fstat before reading and may refuse the file (a directory, empty, too large: its error is
// returned as is). Errors name `path` and say `what` it is ("cubin", "header"): Errc::io
// "cannot stat/read <what> '<path>': <errno text>", or "<what> '<path>' kept changing while it
// was read (3 attempts)". Thread safe (pread does not move the descriptor's offset).
constexpr int kWholeFileReadAttempts = 3;
Result<std::string> read_whole_file(int fd, const std::string &path, const char *what,
                                    const std::function<Status(const struct stat &)> &accept, FileIdentity &identity);

}  // namespace kjit
