/*
 * Controls of the CUDA driver test double (tests/fake_cuda/fake_cuda.cpp), a shared library
 * named libcuda.so.1 that tests point KJIT_LIBCUDA at. It is not a driver: it parses cubins
 * with its own minimal ELF reading and answers the entry points libkjit uses as the real driver
 * would, so the loader can be tested on machines without a GPU. It also has what the programs
 * of the docs call (memory, copies, synchronize): device memory is host memory, and a launch
 * runs nothing. Tests reach these controls by
 * dlopen()ing the same file (tests/support: fake_cuda()).
 *
 * Environment, read once, on the first call:
 *   FAKE_CUDA_INIT_RESULT    CUresult cuInit returns (default 0)
 *   FAKE_CUDA_DRIVER_VERSION what cuDriverGetVersion reports (default 13000)
 *   FAKE_CUDA_DEVICE_SM      device 0's SM version, e.g. 90 (default 90)
 *
 * fork(): like CUDA, the double keeps nothing of the parent's driver state in a forked child.
 * There the driver is not initialised (every call but cuInit answers CUDA_ERROR_NOT_INITIALIZED
 * until the child calls cuInit itself), and the parent's libraries, kernels and functions are
 * unknown handles (a call with one counts as a bad handle). Counters carry over, so a child
 * counts from the values they had at the fork.
 */
#ifndef KJIT_TESTS_FAKE_CUDA_H
#define KJIT_TESTS_FAKE_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fake_cuda_counters {
    unsigned long long library_loads;     /* cuLibraryLoadData successes */
    unsigned long long library_unloads;   /* cuLibraryUnload successes */
    unsigned long long live_libraries;    /* loaded and not unloaded */
    unsigned long long rejected_images;   /* cuLibraryLoadData failures */
    unsigned long long get_kernel_calls;  /* cuLibraryGetKernel calls */
    unsigned long long kernels_not_found; /* ... answered CUDA_ERROR_NOT_FOUND */
    unsigned long long bad_handles;       /* calls with an unknown or unloaded handle: a bug */
    unsigned long long init_calls;        /* cuInit calls */
} fake_cuda_counters;

void fake_cuda_get_counters(fake_cuda_counters *out);

/* What the last cuLaunchKernel that succeeded was asked (it runs nothing). */
typedef struct fake_cuda_launch {
    const char *kernel; /* the launched kernel's symbol name */
    unsigned grid[3], block[3];
    unsigned shared_mem;
    void *stream;
    unsigned long long first_param; /* 8 bytes at kernelParams[0] (tests pass a pointer first) */
    unsigned long long launches;    /* successful launches so far */
} fake_cuda_launch;
/* Copies the last launch into *out; 0 when there was none. */
int fake_cuda_last_launch(fake_cuda_launch *out);
/* How many cuStreamSynchronize calls succeeded (it waits for nothing); *last_stream (when not
   NULL) receives the stream of the last one. */
unsigned long long fake_cuda_stream_syncs(void **last_stream);
/* Changes device 0's SM version (e.g. 80 for compute capability 8.0). */
void fake_cuda_set_device_sm(unsigned sm);
/* The symbol name a CUkernel / CUfunction stands for; NULL for a handle the double never gave. */
const char *fake_cuda_kernel_name(const void *cu_kernel);
const char *fake_cuda_function_name(const void *cu_function);
/* What cuInit answers in children forked after this call (default: what it answers here), as a
   driver that refuses a child whose parent used the GPU would. */
void fake_cuda_set_child_init_result(int result);
/* Makes every later cuInit take `ms` milliseconds more (counted as an init call on entry), so a
   test can fork while another thread is inside it. */
void fake_cuda_set_init_delay_ms(unsigned ms);

#ifdef __cplusplus
}
#endif

#endif
