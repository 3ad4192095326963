// Tests on a real GPU (ctest label `gpu`; excluded by label where there is none, and they fail,
// never skip, when run without one). They talk to the real driver: libkjit through
// kjit_load_cached, the test itself through dlopen("libcuda.so.1") for contexts, memory and
// launches.
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

using namespace kjit_test;

namespace {

// The few driver calls the test makes itself, at the ABI versions it uses them.
struct Cuda {
    PFN_cuInit_v2000 init = nullptr;
    PFN_cuDeviceGet_v2000 device_get = nullptr;
    PFN_cuDevicePrimaryCtxRetain_v7000 ctx_retain = nullptr;
    PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
    PFN_cuMemAlloc_v3020 mem_alloc = nullptr;
    PFN_cuMemFree_v3020 mem_free = nullptr;
    PFN_cuMemcpyDtoH_v3020 memcpy_dtoh = nullptr;
    PFN_cuLaunchKernel_v4000 launch = nullptr;
    PFN_cuCtxSynchronize_v2000 synchronize = nullptr;
    CUcontext ctx = nullptr;
};

const Cuda &cuda() {
    static Cuda c = [] {
        Cuda x;
        void *lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            std::fprintf(stderr, "gpu tests need a CUDA driver: %s\n", ::dlerror());
            std::abort();
        }
        take_symbol(lib, x.init, "cuInit", "libcuda.so.1");
        take_symbol(lib, x.device_get, "cuDeviceGet", "libcuda.so.1");
        take_symbol(lib, x.ctx_retain, "cuDevicePrimaryCtxRetain", "libcuda.so.1");
        take_symbol(lib, x.ctx_set_current, "cuCtxSetCurrent", "libcuda.so.1");
        take_symbol(lib, x.mem_alloc, "cuMemAlloc_v2", "libcuda.so.1");
        take_symbol(lib, x.mem_free, "cuMemFree_v2", "libcuda.so.1");
        take_symbol(lib, x.memcpy_dtoh, "cuMemcpyDtoH_v2", "libcuda.so.1");
        take_symbol(lib, x.launch, "cuLaunchKernel", "libcuda.so.1");
        take_symbol(lib, x.synchronize, "cuCtxSynchronize", "libcuda.so.1");
        CUdevice dev = 0;
        if (x.init(0) != CUDA_SUCCESS || x.device_get(&dev, 0) != CUDA_SUCCESS ||
            x.ctx_retain(&x.ctx, dev) != CUDA_SUCCESS) {
            std::fprintf(stderr, "gpu tests need a GPU: cuInit/cuDeviceGet/cuDevicePrimaryCtxRetain failed\n");
            std::abort();
        }
        return x;
    }();
    c.ctx_set_current(c.ctx);
    return c;
}

const char *const kFill = R"(
template <int N> __global__ void fill(float *out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = N + 0.5f * i;
}
)";

// kjit_compile with the arch left to the driver (the current GPU's).
std::string compile_fill(const std::string &cache_dir, int n) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache_dir.c_str();
    const std::string expr = "fill<" + std::to_string(n) + ">";
    options.name_expression = expr.c_str();
    char path[4096];
    const kjit_status st = kjit_compile(kFill, "fill", &options, path, sizeof path, nullptr);
    EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
    return st == KJIT_OK ? path : "";
}

// Launches `function` as fill<N> over 1000 elements and checks every one.
void launch_and_check(CUfunction function, int n) {
    const Cuda &c = cuda();
    constexpr int kCount = 1000;
    CUdeviceptr out = 0;
    ASSERT_EQ(c.mem_alloc(&out, kCount * sizeof(float)), CUDA_SUCCESS);
    int count = kCount;
    void *args[] = {&out, &count};
    ASSERT_EQ(c.launch(function, (kCount + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(c.synchronize(), CUDA_SUCCESS);
    std::vector<float> host(kCount);
    ASSERT_EQ(c.memcpy_dtoh(host.data(), out, kCount * sizeof(float)), CUDA_SUCCESS);
    c.mem_free(out);
    for (int i = 0; i < kCount; ++i) {
        ASSERT_EQ(host[static_cast<std::size_t>(i)], static_cast<float>(n) + 0.5f * static_cast<float>(i)) << i;
    }
}

}  // namespace

TEST(Gpu, CompileLoadLaunch) {
    cuda();
    TempDir dir;
    const std::string path = compile_fill(dir.file("cache"), 7);
    kjit_kernel *k = nullptr;
    ASSERT_EQ(kjit_load_cached(path.c_str(), "fill", &k), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(kjit_kernel_name(k), "_Z4fillILi7EEvPfi");
    // A CUkernel launches as a CUfunction in the current context, and so does cuKernelGetFunction's.
    launch_and_check(static_cast<CUfunction>(kjit_kernel_cukernel(k)), 7);
    void *function = nullptr;
    ASSERT_EQ(kjit_kernel_cufunction(k, &function), KJIT_OK) << kjit_last_error();
    launch_and_check(static_cast<CUfunction>(function), 7);
    kjit_kernel_release(k);
}

// Times kjit_load_cached (through the real driver) of 300 cached kernels with 1 and 2 threads.
// Reported, never asserted.
TEST(Gpu, Load300CachedKernels) {
    cuda();
    constexpr int kKernels = 300;
    TempDir dir;
    std::vector<std::string> paths(kKernels);
    {
        const unsigned workers = std::max(2u, std::thread::hardware_concurrency());
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < workers; ++t) {
            threads.emplace_back([&, t] {
                for (unsigned i = t; i < kKernels; i += workers) paths[i] = compile_fill(dir.file("cache"), int(i));
            });
        }
        for (auto &t : threads) t.join();
    }
    for (int threads : {1, 2}) {
        std::vector<kjit_kernel *> handles(kKernels, nullptr);
        const auto started = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                cuda();
                for (int i = t; i < kKernels; i += threads) {
                    const kjit_status st = kjit_load_cached(paths[static_cast<std::size_t>(i)].c_str(), "fill",
                                                            &handles[static_cast<std::size_t>(i)]);
                    EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
                }
            });
        }
        for (auto &t : pool) t.join();
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count();
        std::printf("gpu: kjit_load_cached of %d cached kernels, %d thread(s): %.0f us total, %.1f us per kernel\n",
                    kKernels, threads, us, us / kKernels);
        launch_and_check(static_cast<CUfunction>(kjit_kernel_cukernel(handles[123])), 123);
        for (kjit_kernel *k : handles) kjit_kernel_release(k);  // unloads: the next round loads anew
    }
}

// A batch compiled on worker processes (kjit-worker beside libkjit.so), the arch left to the
// driver: every cubin loads through the real driver and its kernel computes what it should.
TEST(Gpu, BatchOnWorkerProcessesLoadsAndLaunches) {
    cuda();
    TempDir dir;
    const std::string cache = dir.file("cache");
    constexpr int kKernels = 8;
    std::vector<std::string> exprs;
    std::vector<kjit_compile_options> options(kKernels, kjit_compile_options KJIT_COMPILE_OPTIONS_INIT);
    std::vector<kjit_compile_request> requests(kKernels, kjit_compile_request KJIT_COMPILE_REQUEST_INIT);
    std::vector<const kjit_compile_request *> items;
    for (int i = 0; i < kKernels; ++i) exprs.push_back("fill<" + std::to_string(100 + i) + ">");
    for (std::size_t i = 0; i < kKernels; ++i) {
        options[i].cache_dir = cache.c_str();
        options[i].name_expression = exprs[i].c_str();
        requests[i].source = kFill;
        requests[i].keyword = "fill";
        requests[i].options = &options[i];
        items.push_back(&requests[i]);
    }
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = 4;
    batch.worker_kind = KJIT_WORKERS_PROCESSES;
    kjit_batch_result *result = nullptr;
    ASSERT_EQ(kjit_compile_batch(items.data(), items.size(), &batch, &result), KJIT_OK) << kjit_last_error();
    for (std::size_t i = 0; i < kKernels; ++i) {
        kjit_kernel *k = nullptr;
        ASSERT_EQ(kjit_load_cached(kjit_batch_result_cubin_path(result, i), "fill", &k), KJIT_OK) << kjit_last_error();
        launch_and_check(static_cast<CUfunction>(kjit_kernel_cukernel(k)), 100 + static_cast<int>(i));
        kjit_kernel_release(k);
    }
    kjit_batch_result_release(result);
}

namespace {

// A device-function library as LTO-IR for sm_75, which nvJitLink links into any newer target
// (the current GPU's), made with NVRTC as a library vendor would ship it.
std::string scale_library_ltoir() {
    return device_code_for("extern \"C\" __device__ float lib_scale(int i) { return 3.0f * i + 0.25f; }\n", "sm_75",
                           DeviceCode::ltoir);
}

}  // namespace

// A kernel linked with a library function through link_inputs, the arch left to the driver:
// it loads and computes with the library's function, first compiled, then as a hit.
TEST(Gpu, LinkedKernelLaunchesWithTheLibrarysFunction) {
    const Cuda &c = cuda();
    TempDir dir;
    const std::string lib = dir.file("scale.ltoir");
    write_file(lib, scale_library_ltoir());
    const std::string cache = dir.file("cache");
    const char *inputs[] = {lib.c_str()};
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.link_inputs = inputs;
    options.link_input_count = 1;
    const char *const source = "extern \"C\" __device__ float lib_scale(int i);\n"
                               "__global__ void scaled(float *out, int n) {\n"
                               "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "    if (i < n) out[i] = lib_scale(i);\n"
                               "}\n";
    for (int round = 0; round < 2; ++round) {  // the link, then the hit
        char path[4096];
        ASSERT_EQ(kjit_compile(source, "scaled", &options, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
        kjit_kernel *k = nullptr;
        ASSERT_EQ(kjit_load_cached(path, "scaled", &k), KJIT_OK) << kjit_last_error();
        constexpr int kCount = 1000;
        CUdeviceptr out = 0;
        ASSERT_EQ(c.mem_alloc(&out, kCount * sizeof(float)), CUDA_SUCCESS);
        int count = kCount;
        void *args[] = {&out, &count};
        ASSERT_EQ(c.launch(static_cast<CUfunction>(kjit_kernel_cukernel(k)), (kCount + 127) / 128, 1, 1, 128, 1, 1, 0,
                           nullptr, args, nullptr),
                  CUDA_SUCCESS);
        ASSERT_EQ(c.synchronize(), CUDA_SUCCESS);
        std::vector<float> host(kCount);
        ASSERT_EQ(c.memcpy_dtoh(host.data(), out, kCount * sizeof(float)), CUDA_SUCCESS);
        c.mem_free(out);
        kjit_kernel_release(k);
        for (int i = 0; i < kCount; ++i) {
            ASSERT_EQ(host[static_cast<std::size_t>(i)], 3.0f * static_cast<float>(i) + 0.25f) << i;
        }
    }
}
