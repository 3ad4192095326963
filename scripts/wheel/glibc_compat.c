/* What the manylinux wheels' binaries take from glibc, as zig links them (scripts/build_wheel.sh;
 * docs/python.md, "The wheel"). scripts/wheel/dependencies.sh archives this file into
 * PREFIX/lib/libkjit_glibc_compat.a, which scripts/wheel/zig-toolchain.cmake puts on every link
 * after the binary's own objects and libraries; every definition here is hidden in the binary
 * that takes it. Compiled with -fno-builtin: the functions below are defined, not recognised.
 *
 * 1. Functions newer than the wheels' glibc floor, 2.28. zig's glibc headers declare every
 *    function of its newest glibc whatever the target glibc (ziglang/zig#22765), so the sources
 *    compile; the 2.28 stubs the link sees lack these, and the link would fail on each. Each is
 *    defined here from what glibc 2.28 and the kernel have.
 *
 * 2. glibc's string functions, not zig's. zig's compiler_rt, which zig links into every C++
 *    binary after glibc, defines memcpy, memmove, memset, memcmp, bcmp and strlen as weak
 *    symbols: a definition in an object file wins over glibc's, so every call in libkjit went to
 *    zig's portable loops instead of glibc's versions tuned for the CPU (strlen alone was 14% of
 *    a memo hit's time; bench/wheel_hits.sh). The definitions below are strong, so compiler_rt's
 *    are not taken, and each calls glibc's function by its symbol version (.symver): the same
 *    code a GCC build of libkjit calls. */
#include <stddef.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define KJIT_HIDDEN __attribute__((visibility("hidden")))

/* glibc 2.30: the thread's kernel id (src/util/filesystem.cpp, src/util/log.cpp), from the
 * system call that glibc's own gettid makes. */
KJIT_HIDDEN pid_t gettid(void);

pid_t gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* The symbol versions of glibc's string functions on each arch (its abilists). */
#if defined(__x86_64__)
#define KJIT_GLIBC_BASE "GLIBC_2.2.5"
#define KJIT_GLIBC_MEMCPY "GLIBC_2.14"
#elif defined(__aarch64__)
#define KJIT_GLIBC_BASE "GLIBC_2.17"
#define KJIT_GLIBC_MEMCPY "GLIBC_2.17"
#else
#error "glibc_compat.c: the symbol versions of glibc's string functions on this arch are not listed"
#endif

/* kjit_glibc_NAME is an undefined reference to glibc's NAME at VERSION; NAME itself is defined
 * here, hidden, calling it. */
#define KJIT_FROM_GLIBC(name, version) __asm__(".symver kjit_glibc_" #name ", " #name "@" version)

KJIT_FROM_GLIBC(memcpy, KJIT_GLIBC_MEMCPY);
KJIT_FROM_GLIBC(memmove, KJIT_GLIBC_BASE);
KJIT_FROM_GLIBC(memset, KJIT_GLIBC_BASE);
KJIT_FROM_GLIBC(memcmp, KJIT_GLIBC_BASE);
KJIT_FROM_GLIBC(bcmp, KJIT_GLIBC_BASE);
KJIT_FROM_GLIBC(strlen, KJIT_GLIBC_BASE);

void *kjit_glibc_memcpy(void *dest, const void *src, size_t size);
void *kjit_glibc_memmove(void *dest, const void *src, size_t size);
void *kjit_glibc_memset(void *dest, int byte, size_t size);
int kjit_glibc_memcmp(const void *a, const void *b, size_t size);
int kjit_glibc_bcmp(const void *a, const void *b, size_t size);
size_t kjit_glibc_strlen(const char *text);

KJIT_HIDDEN void *memcpy(void *dest, const void *src, size_t size);
KJIT_HIDDEN void *memmove(void *dest, const void *src, size_t size);
KJIT_HIDDEN void *memset(void *dest, int byte, size_t size);
KJIT_HIDDEN int memcmp(const void *a, const void *b, size_t size);
KJIT_HIDDEN int bcmp(const void *a, const void *b, size_t size);
KJIT_HIDDEN size_t strlen(const char *text);

void *memcpy(void *dest, const void *src, size_t size) { return kjit_glibc_memcpy(dest, src, size); }
void *memmove(void *dest, const void *src, size_t size) { return kjit_glibc_memmove(dest, src, size); }
void *memset(void *dest, int byte, size_t size) { return kjit_glibc_memset(dest, byte, size); }
int memcmp(const void *a, const void *b, size_t size) { return kjit_glibc_memcmp(a, b, size); }
int bcmp(const void *a, const void *b, size_t size) { return kjit_glibc_bcmp(a, b, size); }
size_t strlen(const char *text) { return kjit_glibc_strlen(text); }
