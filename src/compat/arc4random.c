/* arc4random for a GCC build with libstdc++ linked in (KJIT_STATIC_CXX_RUNTIME, CMakeLists.txt).
 *
 * Debian 12's libstdc++.a was built against glibc 2.36 and calls arc4random (new in 2.36) for
 * std::random_device; linked from glibc, that one call would make the binaries need glibc 2.36
 * instead of 2.34 (RHEL 9, Ubuntu 22.04). (The wheels are built with zig, for 2.28, and do not
 * use this.) This definition, hidden in each
 * binary that links libstdc++ statically, answers those calls instead, from getrandom (glibc
 * 2.25), then /dev/urandom where the kernel has no getrandom or a sandbox forbids it. glibc's
 * arc4random aborts the process when both fail; libkjit's one user (the cluster tier's backoff
 * jitter) needs no secret, so this falls back to the clock and a counter rather than crash. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

__attribute__((visibility("hidden"))) uint32_t arc4random(void);

/* Fills buf from getrandom, else /dev/urandom; returns 0, or -1 when neither gives enough. */
static int kjit_entropy(unsigned char *buf, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t n = getrandom(buf + got, size - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0 || errno != EINTR) {
            break;
        }
    }
    if (got == size) {
        return 0;
    }
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0 || errno != EINTR) {
            break;
        }
    }
    close(fd);
    return got == size ? 0 : -1;
}

/* No entropy at all: splitmix64 over the clock and a counter, distinct per call. */
static uint32_t kjit_clock_mix(void) {
    static uint64_t counter;
    uint64_t count = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    struct timespec now = {0, 0};
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t x = ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) ^ (count * 0x9e3779b97f4a7c15u);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return (uint32_t)(x ^ (x >> 31));
}

uint32_t arc4random(void) {
    uint32_t value = 0;
    if (kjit_entropy((unsigned char *)&value, sizeof value) != 0) {
        value = kjit_clock_mix();
    }
    return value;
}
