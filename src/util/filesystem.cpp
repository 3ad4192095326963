#include "util/filesystem.hpp"

#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>

namespace kjit {

namespace {

Error io_error(const char *doing, const char *what, const std::string &path, int err) {
    return Error{Errc::io, std::string(doing) + " " + what + " '" + path + "': " + errno_text(err), err};
}

// One sequence for every temp name of the process: a thread's retries never reuse a name.
std::atomic<std::uint64_t> suffix_sequence{0};

}  // namespace

Error io_error(std::string_view doing, const std::string &path, int err) {
    return Error{Errc::io, std::string(doing) + " '" + path + "': " + errno_text(err), err};
}

std::string unique_suffix() {
    return std::to_string(::getpid()) + "-" + std::to_string(::gettid()) + "-" +
           std::to_string(suffix_sequence.fetch_add(1, std::memory_order_relaxed));
}

std::uint64_t unique_suffixes_drawn() { return suffix_sequence.load(std::memory_order_relaxed); }

Result<std::string> create_unique(const std::string &stem, std::string_view tail, std::string_view what,
                                  const std::function<int(const std::string &)> &create) {
    std::string name;
    for (int attempt = 0; attempt < kUniqueNameAttempts; ++attempt) {
        name = stem + unique_suffix();
        name.append(tail);
        if (create(name) == 0) return name;
        if (errno != EEXIST) break;
    }
    const int err = errno;
    return io_error("cannot create " + std::string(what), name, err);
}

Status write_new_file(const std::string &path, std::string_view bytes, unsigned flags) {
    const mode_t mode = (flags & kUmaskMode) ? 0666 : 0644;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd.valid()) return io_error("cannot create", path, errno);
    // The next member of a team must be able to read it, and replace it, whatever our umask.
    if ((flags & kGroupWritable) && ::fchmod(fd.get(), 0664) != 0) {
        return io_error("cannot make group-writable", path, errno);
    }
    if (!write_all(fd.get(), bytes.data(), bytes.size())) return io_error("cannot write", path, errno);
    if (flags & kBackdated) {
        struct timespec now {};
        clock_gettime(CLOCK_REALTIME, &now);
        now.tv_sec -= kBackdateSeconds;
        const struct timespec times[2] = {now, now};
        if (::futimens(fd.get(), times) != 0) return io_error("cannot set the mtime of", path, errno);
    }
    if ((flags & kDurable) && ::fsync(fd.get()) != 0) return io_error("cannot fsync", path, errno);
    if (fd.reset() != 0) return io_error("cannot close", path, errno);
    return Ok{};
}

Status replace_file(const std::string &path, const std::string &temp_stem, std::string_view temp_tail,
                    std::string_view bytes, unsigned flags) {
    Status written = Ok{};
    auto temp = create_unique(temp_stem, temp_tail, "temp file", [&](const std::string &name) {
        written = write_new_file(name, bytes, flags);
        if (written) return 0;
        // A name taken in advance is the one failure worth another name.
        const int err = written.error().sys_errno;
        if (err != EEXIST) ::unlink(name.c_str());
        errno = err;
        return -1;
    });
    if (!temp) return written ? Status(std::move(temp).error()) : written;
    if (::rename(temp->c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(temp->c_str());
        return io_error("cannot rename a temp file over", path, err);
    }
    return Ok{};
}

std::optional<std::string> read_small_file(const std::string &path, std::size_t limit, int dir_fd) {
    UniqueFd fd(::openat(dir_fd, path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) return std::nullopt;
    std::string text;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::nullopt;
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > limit) return std::nullopt;
    }
    return text;
}

namespace {

// Whether `folder` is absolute and already written as absolute_folder writes it: no empty, "."
// or ".." name and no trailing '/' (a cache folder given whole, the common case, which then
// costs no std::filesystem::path and its allocations on every full look-up).
bool normal_absolute(std::string_view folder) {
    if (folder.empty() || folder[0] != '/') return false;
    if (folder.size() == 1) return true;
    if (folder.back() == '/') return false;
    for (std::size_t start = 1; start <= folder.size();) {
        const std::size_t slash = std::min(folder.find('/', start), folder.size());
        const std::string_view name = folder.substr(start, slash - start);
        if (name.empty() || name == "." || name == "..") return false;
        start = slash + 1;
    }
    return true;
}

}  // namespace

Result<std::string> absolute_folder(const std::string &folder) {
    if (normal_absolute(folder)) return folder;
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(folder, ec).lexically_normal().string();
    if (ec || absolute.empty()) return Error{Errc::io, "cannot make '" + folder + "' absolute"};
    while (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
    return absolute;
}

namespace {

// Pushes the names of `path` onto `names` so that the first is at the back.
void push_names(std::vector<std::string> &names, const std::string &path) {
    std::vector<std::string> in_order;
    for (std::size_t at = 0; at <= path.size();) {
        const std::size_t slash = std::min(path.find('/', at), path.size());
        if (slash > at) in_order.push_back(path.substr(at, slash - at));
        at = slash + 1;
    }
    names.insert(names.end(), in_order.rbegin(), in_order.rend());
}

}  // namespace

std::optional<std::string> link_text(const std::string &path, const struct stat &st) {
    // st_size is the text's length for most file systems; 0 for some (procfs): start bigger.
    std::size_t size = st.st_size > 0 ? static_cast<std::size_t>(st.st_size) + 1 : 256;
    for (;;) {
        std::string text(size, '\0');
        const ssize_t n = ::readlink(path.c_str(), text.data(), size);
        if (n < 0) return std::nullopt;
        if (static_cast<std::size_t>(n) < size) {
            text.resize(static_cast<std::size_t>(n));
            return text;
        }
        size *= 2;  // cut short: it grew since the lstat
    }
}

std::optional<LinkWalk> walk_links(const std::string &path, std::string_view link_free) {
    if (path.empty() || path[0] != '/') return std::nullopt;
    LinkWalk walk;
    std::string done;               // the resolved part, "" for "/"
    std::vector<std::string> left;  // names still to look up, the next at the back
    if (link_free.size() > 1 && link_free[0] == '/' && link_free.back() != '/' && path.size() > link_free.size() &&
        path[link_free.size()] == '/' && path.compare(0, link_free.size(), link_free) == 0) {
        done = std::string(link_free);
        push_names(left, path.substr(link_free.size()));
    } else {
        push_names(left, path);
    }
    int followed = 0;
    while (!left.empty()) {
        const std::string name = std::move(left.back());
        left.pop_back();
        if (name == ".") continue;
        if (!walk.found) {
            done += "/" + name;
            continue;
        }
        if (name == "..") {
            done.erase(std::min(done.rfind('/'), done.size()));  // "/.." is "/"
            continue;
        }
        const std::string next = done + "/" + name;
        struct stat st {};
        if (::lstat(next.c_str(), &st) != 0) {
            if (errno != ENOENT && errno != ENOTDIR) return std::nullopt;
            walk.found = false;  // its folder's watch, or a stat, sees it appear
            done = next;
            continue;
        }
        if (!S_ISLNK(st.st_mode)) {
            done = next;
            continue;
        }
        if (++followed > kMaxLinksOnPath) return std::nullopt;
        auto target = link_text(next, st);
        if (!target || target->empty()) return std::nullopt;
        push_names(left, *target);
        if ((*target)[0] == '/') done.clear();  // else from the link's folder: `done` as it is
        walk.links.push_back(LinkWalk::Link{next, std::move(*target)});
    }
    walk.resolved = done.empty() ? "/" : done;
    return walk;
}

Status make_folders(const std::string &path, mode_t mode, std::string_view what) {
    std::string partial;
    std::size_t pos = 0;
    while (pos != std::string::npos) {
        pos = path.find('/', pos + 1);
        partial = path.substr(0, pos);
        if (partial.empty()) continue;
        if (::mkdir(partial.c_str(), mode) == 0) continue;
        const int err = errno;
        struct stat st {};
        if (err == EEXIST && ::stat(partial.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
        // The folder asked for is named first: a parent's name alone ("cannot create cache folder
        // '/home/u/.cache'") read as if that were the folder wanted.
        std::string message = "cannot create " + std::string(what) + " '" + path + "': ";
        if (err == EEXIST) message += "'" + partial + "' exists and is not a folder";
        else if (partial == path) message += errno_text(err);
        else message += "cannot create '" + partial + "': " + errno_text(err);
        return Error{Errc::io, std::move(message), err == EEXIST ? ENOTDIR : err};
    }
    return Ok{};
}

Status fsync_folder(const std::string &path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid() || ::fsync(fd.get()) != 0) return io_error("cannot fsync folder", path, errno);
    return Ok{};
}

void remove_tree(const std::string &path) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) log().warn("could not remove '{}': {}", path, ec.message());
}

Result<FolderReader> FolderReader::open(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open folder", path, errno);
    return adopt(fd, path);
}

Result<FolderReader> FolderReader::adopt(int dir_fd, const std::string &path) {
    DIR *dir = ::fdopendir(dir_fd);
    if (!dir) {
        const int err = errno;
        ::close(dir_fd);
        return io_error("cannot read folder", path, err);
    }
    return FolderReader(dir, path);
}

FolderReader::~FolderReader() {
    if (dir_) ::closedir(dir_);
}

Result<const struct dirent *> FolderReader::next() {
    for (;;) {
        errno = 0;
        const struct dirent *d = ::readdir(dir_);
        if (!d) {
            if (errno != 0) return io_error("cannot read folder", path_, errno);
            return static_cast<const struct dirent *>(nullptr);
        }
        if (std::strcmp(d->d_name, ".") != 0 && std::strcmp(d->d_name, "..") != 0) return d;
    }
}

int FolderReader::fd() const { return ::dirfd(dir_); }

Result<std::string> read_whole_file(int fd, const std::string &path, const char *what,
                                    const std::function<Status(const struct stat &)> &accept, FileIdentity &identity) {
    for (int attempt = 0; attempt < kWholeFileReadAttempts; ++attempt) {
        struct stat before {};
        if (::fstat(fd, &before) != 0) return io_error("cannot stat", what, path, errno);
        if (auto ok = accept(before); !ok) return ok.error();
        std::string bytes(static_cast<std::size_t>(before.st_size), '\0');
        std::size_t done = 0;
        bool ended_early = false;
        while (done < bytes.size()) {
            const ssize_t n = ::pread(fd, &bytes[done], bytes.size() - done, static_cast<off_t>(done));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return io_error("cannot read", what, path, errno);
            if (n == 0) {  // it shrank while being read
                ended_early = true;
                break;
            }
            done += static_cast<std::size_t>(n);
        }
        // One byte past the end: a file that grew while being read is not the one stat'ed.
        char extra = 0;
        ssize_t more = 0;
        if (!ended_early) {
            do {
                more = ::pread(fd, &extra, 1, static_cast<off_t>(done));
            } while (more < 0 && errno == EINTR);
        }
        struct stat after {};
        if (::fstat(fd, &after) != 0) return io_error("cannot stat", what, path, errno);
        identity = FileIdentity::from_stat(after);
        if (!ended_early && more == 0 && identity == FileIdentity::from_stat(before)) return bytes;
    }
    return Error{Errc::io, std::string(what) + " '" + path + "' kept changing while it was read (" +
                               std::to_string(kWholeFileReadAttempts) + " attempts)"};
}

namespace {

// The lock descriptors open in this process, as fd + 1 (0: a free slot), which a forked child
// closes (LockFd says why; fork_guard.hpp); the parent's thread releases its lock as usual.
constexpr std::size_t kLockSlots = 64;
std::array<std::atomic<int>, kLockSlots> lock_fds{};

void close_lock_fds_in_forked_child() {
    for (std::atomic<int> &slot : lock_fds) {
        if (const int v = slot.exchange(0, std::memory_order_relaxed); v > 0) ::close(v - 1);
    }
}
[[maybe_unused]] const bool lock_fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::removers_lock, close_lock_fds_in_forked_child);

}  // namespace

LockFd::LockFd(int fd) : fd_(fd) {
    if (fd_ < 0) return;
    for (std::size_t i = 0; i < kLockSlots; ++i) {
        int expected = 0;
        if (lock_fds[i].compare_exchange_strong(expected, fd_ + 1, std::memory_order_relaxed)) {
            slot_ = static_cast<int>(i);
            return;
        }
    }
}

LockFd::LockFd(LockFd &&other) noexcept : fd_(other.fd_), slot_(other.slot_) {
    other.fd_ = -1;
    other.slot_ = -1;
}

LockFd &LockFd::operator=(LockFd &&other) noexcept {
    if (this != &other) {
        reset();
        fd_ = other.fd_;
        slot_ = other.slot_;
        other.fd_ = -1;
        other.slot_ = -1;
    }
    return *this;
}

void LockFd::reset() {
    const int fd = fd_;
    fd_ = -1;
    if (fd < 0) return;
    if (slot_ >= 0) {
        int expected = fd + 1;
        const auto slot = static_cast<std::size_t>(slot_);
        slot_ = -1;
        // Not ours any more: this is a forked child, which closed it (its number may be
        // another file's now). Only a thread that forked holding the lock gets here so.
        if (!lock_fds[slot].compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return;
    }
    ::close(fd);
}

}  // namespace kjit
