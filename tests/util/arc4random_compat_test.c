/* The arc4random of src/compat/arc4random.c (KJIT_STATIC_CXX_RUNTIME), which answers
 * std::random_device in binaries that link libstdc++ statically: linked here as it is there (an
 * object file, hidden), it must be the one called, not glibc's, and its values must look random:
 * over 256 calls every bit is seen both set and clear (a chance of about 2^-250 of failing by
 * luck), so a constant, a truncated or an unfilled result fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

uint32_t arc4random(void);

int main(void) {
    /* ISO C has no cast from a function pointer to void *; dladdr takes the address's bytes. */
    uint32_t (*function)(void) = arc4random;
    void *address = NULL;
    memcpy(&address, &function, sizeof address);
    Dl_info where;
    memset(&where, 0, sizeof where);
    if (dladdr(address, &where) == 0 || where.dli_fname == NULL || strstr(where.dli_fname, "libc.so") != NULL) {
        printf("FAIL: arc4random is glibc's (%s), not src/compat/arc4random.c\n",
               where.dli_fname != NULL ? where.dli_fname : "unknown");
        return 1;
    }
    uint32_t any_set = 0, all_set = UINT32_MAX;
    for (int i = 0; i < 256; i++) {
        uint32_t value = arc4random();
        any_set |= value;
        all_set &= value;
    }
    if (any_set != UINT32_MAX || all_set != 0) {
        printf("FAIL: over 256 calls, bits never set: %08x, bits always set: %08x\n", (unsigned)~any_set,
               (unsigned)all_set);
        return 1;
    }
    printf("OK: arc4random from %s, every bit both set and clear over 256 calls\n", where.dli_fname);
    return 0;
}
