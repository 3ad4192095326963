// Child process for the multi-process tests: resolve_worker ROUNDS (CUBIN KEYWORD EXPECTED)...
// Resolves every triple ROUNDS times through the C ABI, from two threads. Exit 0 if every
// answer was right; 1 otherwise (the first wrong answer is printed).
#include "kjit/kjit.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

int main(int argc, char **argv) {
    if (argc < 5 || (argc - 2) % 3 != 0) {
        std::fprintf(stderr, "usage: %s ROUNDS (CUBIN KEYWORD EXPECTED)...\n", argv[0]);
        return 2;
    }
    const int rounds = std::atoi(argv[1]);
    int failures[2] = {0, 0};
    auto work = [&](int t) {
        for (int r = 0; r < rounds; ++r) {
            for (int i = 2; i + 2 < argc; i += 3) {
                char name[256];
                const kjit_status st = kjit_resolve_name(argv[i], argv[i + 1], name, sizeof name, nullptr);
                if (st != KJIT_OK || std::strcmp(name, argv[i + 2]) != 0) {
                    if (failures[t]++ == 0) {
                        std::fprintf(stderr, "%s [%s]: %s %s\n", argv[i], argv[i + 1], kjit_status_string(st),
                                     st == KJIT_OK ? name : kjit_last_error());
                    }
                }
            }
        }
    };
    std::thread other(work, 1);
    work(0);
    other.join();
    return failures[0] + failures[1] == 0 ? 0 : 1;
}
