#include "store/compile_lock.hpp"

#include "store/cache_layout.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

namespace kjit::store::compile_lock {

namespace {

// The byte of the lock file that stands for `key`: its first 15 hex digits (60 bits), so the
// offset is a valid, positive off_t.
off_t offset_of(const std::string &key) {
    return static_cast<off_t>(std::strtoull(key.substr(0, 15).c_str(), nullptr, 16));
}

// Tries to take the byte at `offset` without waiting: true when taken, false when another open
// file description holds it; nullopt on another error (errno set).
std::optional<bool> try_lock(int fd, off_t offset, short type = F_WRLCK) {
    struct flock fl {};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = offset;
    fl.l_len = 1;
    while (::fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EACCES) return false;
        return std::nullopt;
    }
    return true;
}

// The lock file, opened (created when missing) for locking; invalid when it cannot be used.
LockFd open_lock_file(const std::string &path, const folder_trust::CacheFolder &folder) {
    const bool shared = folder_trust::shared(folder);
    LockFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, shared ? 0660 : 0600));
    if (!fd.valid()) {
        log().debug("compiling without the compile lock: cannot open '{}': {}", path, errno_text(errno));
        return LockFd(-1);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !folder_trust::trusted_owner(folder, st.st_uid)) {
        log().debug("compiling without the compile lock: '{}' is not a regular file of yours (or root's, or your "
                    "team's)",
                    path);
        return LockFd(-1);
    }
    // Every member of a team takes it: group-writable whatever the umask.
    if (shared && st.st_uid == ::geteuid() && (st.st_mode & 0060) != 0060) (void)::fchmod(fd.get(), 0660);
    return fd;
}

}  // namespace

Held::~Held() {
    if (fd_.valid()) (void)try_lock(fd_.get(), offset_, F_UNLCK);
}

std::optional<Held> acquire(const std::string &cache_dir, const folder_trust::CacheFolder &folder,
                            const std::string &key, std::chrono::milliseconds max_wait, Waited *waited) {
    *waited = Waited{};
    const std::string path = cache_dir + "/" + cache_layout::kCompileLockFile;
    LockFd fd = open_lock_file(path, folder);
    if (!fd.valid()) return std::nullopt;
    const off_t offset = offset_of(key);
    const auto deadline = std::chrono::steady_clock::now() + max_wait;
    // Polled: F_OFD_SETLKW cannot be given a time limit. The first retries come quickly (most
    // compiles take tens to hundreds of milliseconds), later ones every 50 ms.
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        const std::optional<bool> taken = try_lock(fd.get(), offset);
        if (!taken) {
            log().debug("compiling {} without the compile lock: cannot lock '{}': {}", key, path, errno_text(errno));
            return std::nullopt;
        }
        if (*taken) return Held(std::move(fd), offset);
        if (!waited->waited) {
            waited->waited = true;
            log().debug("waiting for another process's compile of {} (at most {} ms)", key, max_wait.count());
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            waited->timed_out = true;
            log().debug("another process still compiles {} after {} ms: compiling it here too", key, max_wait.count());
            return std::nullopt;
        }
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
}

}  // namespace kjit::store::compile_lock
