#include "util/hashing.hpp"

#include <fcntl.h>
#include <xxhash.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <new>

namespace kjit {

std::uint64_t hash64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::uint64_t hash64(std::string_view first, std::string_view second) {
    const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
    if (!state) throw std::bad_alloc();
    XXH3_64bits_reset(state.get());
    XXH3_64bits_update(state.get(), first.data(), first.size());
    XXH3_64bits_update(state.get(), second.data(), second.size());
    return XXH3_64bits_digest(state.get());
}

std::string hash128_hex(std::string_view bytes) {
    const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, static_cast<std::uint64_t>(h.high64),
                  static_cast<std::uint64_t>(h.low64));
    return hex;
}

Result<std::uint64_t> hash_file64(const std::string &path, FileIdentity *identity) {
    // O_NONBLOCK: a FIFO put in the file's place must not block the open.
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) {
        const int err = errno;
        return io_error("cannot open", path, err);
    }
    FileIdentity read_as;
    auto bytes = read_whole_file(
        fd.get(), path, "file",
        [&](const struct stat &st) -> Status {
            if (!S_ISREG(st.st_mode)) return Error{Errc::io, "'" + path + "' is not a regular file"};
            return Ok{};
        },
        read_as);
    if (!bytes) return std::move(bytes).error();
    if (identity) *identity = read_as;
    return hash64(*bytes);
}

}  // namespace kjit
