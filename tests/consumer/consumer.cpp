// An installed-libkjit consumer in C++: the same as consumer.c, with the kernel handle in a
// std::unique_ptr. Usage: consumer_cpp CACHE_DIR. Exits non-zero on any failure.
#include <kjit/kjit.h>

#include <cstdio>
#include <memory>
#include <string>

namespace {

struct KernelRelease {
    void operator()(kjit_kernel *k) const { kjit_kernel_release(k); }
};
using Kernel = std::unique_ptr<kjit_kernel, KernelRelease>;

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: consumer_cpp CACHE_DIR\n");
        return 2;
    }
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    opts.cache_dir = argv[1];
    opts.arch = "sm_90";
    opts.name_expression = "scale<5>";
    const std::string source = "template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N; }\n";
    char cubin[4096];
    char name[512];
    kjit_status st = kjit_compile(source.c_str(), "scale", &opts, cubin, sizeof cubin, nullptr);
    if (st == KJIT_OK) st = kjit_resolve_name(cubin, "scale", name, sizeof name, nullptr);
    if (st != KJIT_OK) {
        std::fprintf(stderr, "%s: %s\n", kjit_status_string(st), kjit_last_error());
        return 1;
    }
    if (std::string(name) != "_Z5scaleILi5EEvPf") {
        std::fprintf(stderr, "unexpected name %s\n", name);
        return 1;
    }
    // Without a GPU driver the load fails with a status and a message, never a crash; with
    // one (or KJIT_LIBCUDA naming the test double) it gives a kernel of that name.
    kjit_kernel *raw = nullptr;
    st = kjit_load_cached(cubin, "scale", &raw);
    Kernel kernel(raw);
    if (st == KJIT_OK && std::string(kjit_kernel_name(kernel.get())) != name) {
        std::fprintf(stderr, "loaded %s, resolved %s\n", kjit_kernel_name(kernel.get()), name);
        return 1;
    }
    if (st != KJIT_OK && (kernel || *kjit_last_error() == '\0')) {
        std::fprintf(stderr, "a failed load left a handle or no message\n");
        return 1;
    }
    std::printf("C++ consumer: %s -> %s, load: %s\n", cubin, name, st == KJIT_OK ? "ok" : kjit_status_string(st));
    return 0;
}
