// Small POSIX helpers shared by the modules that touch files: an owning file descriptor, the
// identity of a file as stat(2) reports it, and the one way libkjit reads a whole file.
#pragma once

#include "status.hpp"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

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
        for (std::uint64_t v : {id.size, id.ino, id.dev, static_cast<std::uint64_t>(id.mtime_sec),
                                std::uint64_t{id.mtime_nsec}, static_cast<std::uint64_t>(id.ctime_sec),
                                std::uint64_t{id.ctime_nsec}}) {
            h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        }
        return static_cast<std::size_t>(h);
    }
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
