// Child process for the NVRTC probe tests (nvrtc_probe_test.cpp): probe_worker CACHE N [retry]
// compiles kernel gemm<N> (kjit_compile_named) into CACHE and prints what the test checks:
//   status <kjit_status number>     (again after "retry", for a second try in the same process)
//   path <cubin>  name <kernel>     (on success)
//   error <kjit_last_error()>       (on failure)
//   nvrtc mapped|absent             (whether any libnvrtc is mapped into this process at the end)
// Exit 0 whenever it ran; the test reads the lines.
#include "kjit/kjit.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

bool nvrtc_mapped() {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        if (line.find("/libnvrtc.") != std::string::npos) return true;
    }
    return false;
}

void compile_once(const char *cache, int n) {
    const std::string source = "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }\n"
                               "template __global__ void gemm<" +
                               std::to_string(n) + ">(float *);\n";
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache;
    options.arch = "sm_90";
    char path[4096], name[512];
    const kjit_status st =
        kjit_compile_named(source.c_str(), "gemm", &options, path, sizeof path, nullptr, name, sizeof name, nullptr);
    std::printf("status %d\n", static_cast<int>(st));
    if (st == KJIT_OK) {
        std::printf("path %s\nname %s\n", path, name);
    } else {
        std::string error = kjit_last_error();
        for (char &c : error) c = c == '\n' ? ' ' : c;
        std::printf("error %s\n", error.c_str());
    }
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s CACHE N [retry]\n", argv[0]);
        return 2;
    }
    const int n = std::atoi(argv[2]);
    compile_once(argv[1], n);
    if (argc > 3 && std::strcmp(argv[3], "retry") == 0) compile_once(argv[1], n);
    std::printf("nvrtc %s\n", nvrtc_mapped() ? "mapped" : "absent");
    return 0;
}
