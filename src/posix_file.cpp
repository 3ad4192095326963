#include "posix_file.hpp"

#include <cstring>

namespace kjit {

namespace {

Error io_error(const char *doing, const char *what, const std::string &path, int err) {
    return Error{Errc::io, std::string(doing) + " " + what + " '" + path + "': " + errno_text(err)};
}

}  // namespace

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

}  // namespace kjit
