#include "hashing.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>

namespace kjit {

std::uint64_t hash64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string hash128_hex(std::string_view bytes) {
    const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, static_cast<std::uint64_t>(h.high64),
                  static_cast<std::uint64_t>(h.low64));
    return hex;
}

Result<std::uint64_t> hash_file64(const std::string &path, FileIdentity *identity) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) {
        const int err = errno;
        return Error{Errc::io, "cannot open '" + path + "': " + errno_text(err)};
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        const int err = errno;
        return Error{Errc::io, "cannot stat '" + path + "': " + errno_text(err)};
    }
    if (!S_ISREG(st.st_mode)) return Error{Errc::io, "'" + path + "' is not a regular file"};
    if (identity) *identity = FileIdentity::from_stat(st);
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size == 0) return hash64({});
    void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (map == MAP_FAILED) {
        const int err = errno;
        return Error{Errc::io, "cannot map '" + path + "': " + errno_text(err)};
    }
    const std::uint64_t h = XXH3_64bits(map, size);
    ::munmap(map, size);
    return h;
}

}  // namespace kjit
