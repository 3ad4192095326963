// kjit-worker: the helper a batch starts to compile in a process of its own (worker_pool.hpp).
// Installed beside libkjit.so; not meant to be run by hand. It speaks worker_protocol.hpp on the
// descriptor it is given, and ends when its parent closes it or dies.
//
//   kjit-worker --serve-fd=3 --parent=<pid>
#include "batch/worker_protocol.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int usage(const char *why) {
    std::fprintf(stderr,
                 "kjit-worker: %s\n"
                 "kjit-worker is started by libkjit's kjit_compile_batch to compile in a process of its own;\n"
                 "it is not meant to be run by hand (usage: kjit-worker --serve-fd=<fd> --parent=<pid>)\n",
                 why);
    return 2;
}

bool parse_number(const char *text, long &out) {
    char *end = nullptr;
    errno = 0;
    out = std::strtol(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && out >= 0;
}

// Descriptors the host left open without close-on-exec are none of the worker's business:
// closed, so that a pipe or lock of the host's never stays open because a worker holds it.
void close_descriptors_from(int first) {
#ifdef SYS_close_range
    if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0u, 0u) == 0) return;
#endif
    const long max = ::sysconf(_SC_OPEN_MAX);
    for (long fd = first; fd < (max > 0 ? max : 1024); ++fd) ::close(static_cast<int>(fd));
}

}  // namespace

int main(int argc, char **argv) {
    long fd = -1, parent = -1;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (std::strncmp(a, "--serve-fd=", 11) == 0) {
            if (!parse_number(a + 11, fd)) return usage("--serve-fd needs a descriptor number");
        } else if (std::strncmp(a, "--parent=", 9) == 0) {
            if (!parse_number(a + 9, parent)) return usage("--parent needs a process id");
        } else {
            return usage((std::string("unknown argument ") + a).c_str());
        }
    }
    if (fd < 0 || parent <= 0) return usage("--serve-fd and --parent are both needed");
    close_descriptors_from(static_cast<int>(fd) + 1);
    return kjit::batch::worker_protocol::serve(static_cast<int>(fd), static_cast<pid_t>(parent));
}
