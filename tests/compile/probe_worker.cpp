// Child process for the NVRTC probe tests (nvrtc_probe_test.cpp):
// probe_worker CACHE N [retry] [preload:FILE[,FILE...]] compiles kernel gemm<N>
// (kjit_compile_named) into CACHE and prints what the test checks:
//   preloaded <file>|none           (with preload: the first FILE that dlopen opened, before
//                                    libkjit's first compile, as a host such as numba-cuda does;
//                                    <file> as /proc/self/maps names the NVRTC mapped then)
//   status <kjit_status number>     (again after "retry", for a second try in the same process)
//   path <cubin>  name <kernel>     (on success)
//   error <kjit_last_error()>       (on failure)
//   nvrtc mapped|absent             (whether any libnvrtc is mapped into this process at the end)
//   nvrtc-file <file>               (when mapped: the first libnvrtc file /proc/self/maps names)
// Exit 0 whenever it ran; the test reads the lines.
#include "kjit/kjit.h"

#include "host_preload.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// The first libnvrtc file mapped into this process, as /proc/self/maps names it; "" when none.
std::string nvrtc_file() { return kjit_test::mapped_file("/libnvrtc."); }

// dlopens the first of `files` that opens, as a host that loads NVRTC for its own use would,
// and says which.
void preload(const std::string &files) {
    std::printf("preloaded %s\n", kjit_test::preload_first(files) ? nvrtc_file().c_str() : "none");
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
        std::fprintf(stderr, "usage: %s CACHE N [retry] [preload:FILE[,FILE...]]\n", argv[0]);
        return 2;
    }
    const int n = std::atoi(argv[2]);
    bool retry = false;
    for (int i = 3; i < argc; ++i) {
        if (std::strcmp(argv[i], "retry") == 0) {
            retry = true;
        } else if (std::strncmp(argv[i], "preload:", 8) == 0) {
            preload(argv[i] + 8);
        } else {
            std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    compile_once(argv[1], n);
    if (retry) compile_once(argv[1], n);
    const std::string file = nvrtc_file();
    std::printf("nvrtc %s\n", file.empty() ? "absent" : "mapped");
    if (!file.empty()) std::printf("nvrtc-file %s\n", file.c_str());
    return 0;
}
