/* Fault injection for the tests: an LD_PRELOAD library that interposes the file system calls
   libkjit makes and fails chosen ones with a chosen errno. Armed from the test process through
   kjit_fault_arm() (looked up with dlsym), so nothing else in the process is affected: only
   calls on paths containing the armed substring fail (and, for fd calls, fds opened on such
   paths). Counts what it injected, per call, and the fsyncs of matching fds it let through.
   kjit_fault_reboot() makes CLOCK_BOOTTIME start again at that moment, so that every file
   written before looks written by an earlier boot (a power cut, without losing the process).
   Test-only; never linked into libkjit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { KJIT_FAULT_MAX_FDS = 4096 };

static char armed_call[32];
static char armed_path[1024];
static int armed_errno;
static atomic_int skip_left;
static atomic_int times_left;
static atomic_int injected;
static atomic_char fd_matches[KJIT_FAULT_MAX_FDS];
static atomic_int fsyncs_seen;
/* CLOCK_BOOTTIME at the last kjit_fault_reboot(), subtracted from it after (0: none yet). */
static _Atomic long long boot_offset_ns;

void kjit_fault_arm(const char *call, int err, const char *path_substring, int skip, int times) {
    snprintf(armed_call, sizeof armed_call, "%s", call);
    snprintf(armed_path, sizeof armed_path, "%s", path_substring);
    armed_errno = err;
    atomic_store(&skip_left, skip);
    atomic_store(&times_left, times);
    atomic_store(&injected, 0);
    atomic_store(&fsyncs_seen, 0);
}

void kjit_fault_disarm(void) {
    armed_call[0] = '\0';
    atomic_store(&times_left, 0);
}

int kjit_fault_injected(void) { return atomic_load(&injected); }

/* The fsyncs of fds on matching paths since the last arm, failed or not. */
int kjit_fault_fsyncs(void) { return atomic_load(&fsyncs_seen); }

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
static clock_gettime_fn real_clock_gettime_fn(void) {
    static clock_gettime_fn real;
    if (!real) real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return real;
}

void kjit_fault_reboot(void) {
    struct timespec ts;
    real_clock_gettime_fn()(CLOCK_BOOTTIME, &ts);
    /* Less 1 ns: 0 means no reboot yet. */
    atomic_store(&boot_offset_ns, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec - 1);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    const int rc = real_clock_gettime_fn()(clock, ts);
    const long long offset = atomic_load(&boot_offset_ns);
    if (rc != 0 || clock != CLOCK_BOOTTIME || offset == 0) return rc;
    const long long shifted = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec - offset;
    ts->tv_sec = (time_t)(shifted / 1000000000LL);
    ts->tv_nsec = (long)(shifted % 1000000000LL);
    return rc;
}

static int path_matches(const char *path) { return armed_path[0] && path && strstr(path, armed_path) != NULL; }

/* Whether this call (named `call`, on a matching path or fd) fails now. */
static int should_fail(const char *call, int matches) {
    if (!matches || strcmp(armed_call, call) != 0 || atomic_load(&times_left) <= 0) return 0;
    if (atomic_fetch_sub(&skip_left, 1) > 0) return 0;
    if (atomic_fetch_sub(&times_left, 1) <= 0) return 0;
    atomic_fetch_add(&injected, 1);
    errno = armed_errno;
    return 1;
}

static void note_fd(int fd, const char *path) {
    if (fd >= 0 && fd < KJIT_FAULT_MAX_FDS) atomic_store(&fd_matches[fd], (char)path_matches(path));
}
static int fd_matched(int fd) { return fd >= 0 && fd < KJIT_FAULT_MAX_FDS && atomic_load(&fd_matches[fd]); }

typedef int (*open_fn)(const char *, int, ...);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*fd_fn)(int);
typedef int (*mkdir_fn)(const char *, mode_t);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned);

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name, type)     \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

/* open and open64 alike: fail, or forward with the mode and note the fd's path. */
static int open_with(open_fn real, const char *path, int flags, va_list ap) {
    const mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
    if (should_fail("open", path_matches(path))) return -1;
    const int fd = real(path, flags, mode);
    note_fd(fd, path);
    return fd;
}

int open(const char *path, int flags, ...) {
    REAL(open, open_fn);
    va_list ap;
    va_start(ap, flags);
    const int fd = open_with(real_open, path, flags, ap);
    va_end(ap);
    return fd;
}

int open64(const char *path, int flags, ...) {
    REAL(open64, open_fn);
    va_list ap;
    va_start(ap, flags);
    const int fd = open_with(real_open64, path, flags, ap);
    va_end(ap);
    return fd;
}

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write, write_fn);
    if (should_fail("write", fd_matched(fd))) return -1;
    return real_write(fd, buf, n);
}

int fsync(int fd) {
    REAL(fsync, fd_fn);
    if (fd_matched(fd)) atomic_fetch_add(&fsyncs_seen, 1);
    if (should_fail("fsync", fd_matched(fd))) return -1;
    return real_fsync(fd);
}

int close(int fd) {
    REAL(close, fd_fn);
    const int matched = fd_matched(fd);
    if (fd >= 0 && fd < KJIT_FAULT_MAX_FDS) atomic_store(&fd_matches[fd], 0);
    if (should_fail("close", matched)) {
        real_close(fd); /* as Linux does: the fd is gone even when close reports an error */
        return -1;
    }
    return real_close(fd);
}

int mkdir(const char *path, mode_t mode) {
    REAL(mkdir, mkdir_fn);
    if (should_fail("mkdir", path_matches(path))) return -1;
    return real_mkdir(path, mode);
}

int rename(const char *from, const char *to) {
    REAL(rename, rename_fn);
    if (should_fail("rename", path_matches(to))) return -1;
    return real_rename(from, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags) {
    REAL(renameat2, renameat2_fn);
    if (should_fail("rename", path_matches(to))) return -1;
    return real_renameat2(fromfd, from, tofd, to, flags);
}
