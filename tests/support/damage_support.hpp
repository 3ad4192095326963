// Helpers that damage cache files the way disks, tools and people do, for the integrity tests:
// a byte flipped in place in a cubin's code, with or without its mtime restored.
#pragma once

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace kjit_test {

// The file offset of the first byte of the cubin's first non-empty `.text*` section, or 0 when
// there is none (the callers then fail their set-up).
inline std::size_t text_offset(const std::string &bytes) {
    if (bytes.size() < sizeof(Elf64_Ehdr)) return 0;
    Elf64_Ehdr eh;
    std::memcpy(&eh, bytes.data(), sizeof eh);
    if (eh.e_shoff == 0 || eh.e_shstrndx >= eh.e_shnum || eh.e_shoff + eh.e_shnum * sizeof(Elf64_Shdr) > bytes.size()) {
        return 0;
    }
    auto section = [&](std::size_t i) {
        Elf64_Shdr sh;
        std::memcpy(&sh, bytes.data() + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof sh);
        return sh;
    };
    const Elf64_Shdr names = section(eh.e_shstrndx);
    for (std::size_t i = 0; i < eh.e_shnum; ++i) {
        const Elf64_Shdr sh = section(i);
        if (sh.sh_type == SHT_NOBITS || sh.sh_size == 0 || sh.sh_offset + sh.sh_size > bytes.size()) continue;
        if (names.sh_offset + sh.sh_name + 5 > bytes.size()) continue;
        if (std::strncmp(bytes.data() + names.sh_offset + sh.sh_name, ".text", 5) == 0) return sh.sh_offset;
    }
    return 0;
}

// Flips one bit of the cubin's code in place (same file, same size), as a bad disk or a stray
// write would. With `keep_mtime` the mtime is set back to what it was, as `touch -r` or an
// mtime-preserving tool would leave it. Returns false when it could not.
inline bool flip_text_byte(const std::string &path, bool keep_mtime) {
    struct stat before {};
    if (::stat(path.c_str(), &before) != 0) return false;
    std::string bytes(static_cast<std::size_t>(before.st_size), '\0');
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = ::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size());
    const std::size_t at = ok ? text_offset(bytes) : 0;
    ok = ok && at != 0;
    if (ok) {
        const char flipped = static_cast<char>(bytes[at] ^ 0x01);
        ok = ::pwrite(fd, &flipped, 1, static_cast<off_t>(at)) == 1;
    }
    ::close(fd);
    if (ok && keep_mtime) {
        const struct timespec times[2] = {before.st_atim, before.st_mtim};
        ok = ::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
    }
    return ok;
}

// Sets the file's mtime to exactly `sec`.`nsec` (as `tar --mtime=@sec` or a tar copy leaves it
// with nsec 0).
inline bool set_mtime(const std::string &path, std::int64_t sec, long nsec) {
    const struct timespec times[2] = {{static_cast<time_t>(sec), nsec}, {static_cast<time_t>(sec), nsec}};
    return ::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
}

}  // namespace kjit_test
