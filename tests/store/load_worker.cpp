// Child process for the eviction tests: load_worker SECONDS CUBIN KEYWORD. Loads the kernel
// through the C ABI and releases it, over and over for SECONDS (each release unloads the
// library, so every load reads the cubin again). Prints the number of loads; exit 0 if every
// load succeeded, 1 otherwise (the first failure is printed).
#include "kjit/kjit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s SECONDS CUBIN KEYWORD\n", argv[0]);
        return 2;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[1]));
    long loads = 0, failures = 0;
    while (std::chrono::steady_clock::now() < until) {
        kjit_kernel *k = nullptr;
        const kjit_status st = kjit_load_cached(argv[2], argv[3], &k);
        if (st != KJIT_OK) {
            if (failures++ == 0)
                std::fprintf(stderr, "load %ld: %s: %s\n", loads, kjit_status_string(st), kjit_last_error());
        }
        kjit_kernel_release(k);
        ++loads;
    }
    std::printf("%ld\n", loads);
    return failures == 0 ? 0 : 1;
}
