// kjit_load_cached and the kjit_kernel accessors through libkjit.so, against the driver test
// double (KJIT_LIBCUDA points at it).
#include "kjit/kjit.h"

#include "c_api_support.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace kjit_test;

TEST(CApiLoad, CompileLoadAccessorsRelease) {
    TempDir dir;
    const std::string path = compile_through_c_api(dir, sources::kTemplateOne, "tmpl");
    const auto live0 = fake_cuda().counters().live_libraries;
    kjit_kernel *k = nullptr;
    ASSERT_EQ(kjit_load_cached(path.c_str(), "tmpl", &k), KJIT_OK) << kjit_last_error();
    ASSERT_NE(k, nullptr);
    EXPECT_STREQ(kjit_kernel_name(k), "_Z4tmplILi4EEvPf");
    EXPECT_EQ(kjit_kernel_cubin_path(k), path);
    EXPECT_STREQ(fake_cuda().kernel_name(kjit_kernel_cukernel(k)), "_Z4tmplILi4EEvPf");
    EXPECT_NE(kjit_kernel_culibrary(k), nullptr);

    kjit_kernel *again = nullptr;
    ASSERT_EQ(kjit_load_cached(path.c_str(), "tmpl", &again), KJIT_OK) << kjit_last_error();
    EXPECT_NE(again, k);  // a handle per call, on one loaded library
    EXPECT_EQ(kjit_kernel_culibrary(again), kjit_kernel_culibrary(k));
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + 1);

    void *function = reinterpret_cast<void *>(1);
    fake_cuda().make_context_current(false);
    EXPECT_EQ(kjit_kernel_cufunction(k, &function), KJIT_ERROR_DRIVER);
    EXPECT_EQ(function, nullptr);
    EXPECT_NE(std::string(kjit_last_error()).find("no current CUDA context"), std::string::npos) << kjit_last_error();
    fake_cuda().make_context_current(true);
    ASSERT_EQ(kjit_kernel_cufunction(k, &function), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(fake_cuda().function_name(function), "_Z4tmplILi4EEvPf");
    fake_cuda().make_context_current(false);

    kjit_kernel_release(k);
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + 1);
    kjit_kernel_release(again);
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0);
    kjit_kernel_release(nullptr);
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
}

TEST(CApiLoad, ArgumentsAndErrors) {
    TempDir dir;
    const std::string path = compile_through_c_api(dir, sources::kPlain, "plain_kernel");
    kjit_kernel *k = reinterpret_cast<kjit_kernel *>(1);
    EXPECT_EQ(kjit_load_cached(nullptr, "plain_kernel", &k), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(k, nullptr);
    EXPECT_EQ(kjit_load_cached("", "plain_kernel", &k), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_load_cached(path.c_str(), nullptr, &k), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_load_cached(path.c_str(), "plain_kernel", nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_load_cached(path.c_str(), "a.b", &k), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_load_cached(path.c_str(), "nothing_like_it", &k), KJIT_ERROR_NOT_FOUND);
    EXPECT_NE(std::string(kjit_last_error()).find(path), std::string::npos) << kjit_last_error();
    EXPECT_EQ(kjit_load_cached(dir.file("absent.cubin").c_str(), "plain_kernel", &k), KJIT_ERROR_IO);
    EXPECT_NE(std::string(kjit_last_error()).find("absent.cubin"), std::string::npos);
    write_file(dir.file("junk.cubin"), "definitely not an ELF file");
    EXPECT_EQ(kjit_load_cached(dir.file("junk.cubin").c_str(), "plain_kernel", &k), KJIT_ERROR_BAD_CUBIN);
    EXPECT_EQ(k, nullptr);

    fake_cuda().set_device_sm(80);
    EXPECT_EQ(kjit_load_cached(path.c_str(), "plain_kernel", &k), KJIT_ERROR_DRIVER);
    fake_cuda().set_device_sm(90);
    const std::string err = kjit_last_error();
    EXPECT_NE(err.find("CUDA_ERROR_NO_BINARY_FOR_GPU"), std::string::npos) << err;
    EXPECT_NE(err.find("sm_80"), std::string::npos) << err;

    EXPECT_EQ(kjit_kernel_name(nullptr), nullptr);
    EXPECT_EQ(kjit_kernel_cubin_path(nullptr), nullptr);
    EXPECT_EQ(kjit_kernel_cukernel(nullptr), nullptr);
    EXPECT_EQ(kjit_kernel_culibrary(nullptr), nullptr);
    void *function = nullptr;
    EXPECT_EQ(kjit_kernel_cufunction(nullptr, &function), KJIT_ERROR_INVALID_ARGUMENT);
}

// kjit_compile_and_load: compile (or find) and load in one call; a repeat reuses the loaded
// library (no driver load) while a handle to it is alive; each call's failure is its part's.
TEST(CApiLoad, CompileAndLoadInOneCall) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    const auto driver_loads0 = fake_cuda().counters().library_loads;
    kjit_kernel *first = nullptr;
    ASSERT_EQ(kjit_compile_and_load(sources::kTemplateOne, "tmpl", &o, &first), KJIT_OK) << kjit_last_error();
    ASSERT_NE(first, nullptr);
    EXPECT_STREQ(kjit_kernel_name(first), "_Z4tmplILi4EEvPf");
    EXPECT_STREQ(fake_cuda().kernel_name(kjit_kernel_cukernel(first)), "_Z4tmplILi4EEvPf");
    char path[4096];
    ASSERT_EQ(kjit_compile(sources::kTemplateOne, "tmpl", &o, path, sizeof path, nullptr), KJIT_OK);
    EXPECT_STREQ(kjit_kernel_cubin_path(first), path);

    const kjit_stats before = stats_now();
    for (int i = 0; i < 3; ++i) {
        kjit_kernel *again = nullptr;
        ASSERT_EQ(kjit_compile_and_load(sources::kTemplateOne, "tmpl", &o, &again), KJIT_OK) << kjit_last_error();
        EXPECT_NE(again, first);  // a handle per call
        EXPECT_EQ(kjit_kernel_cukernel(again), kjit_kernel_cukernel(first));
        kjit_kernel_release(again);
    }
    const kjit_stats after = stats_now();
    EXPECT_EQ(after.load_reuses - before.load_reuses, 3u);
    EXPECT_EQ(after.compile_hits - before.compile_hits, 3u);
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, 0u);
    EXPECT_EQ(fake_cuda().counters().library_loads, driver_loads0 + 1);
    kjit_kernel_release(first);

    kjit_kernel *k = reinterpret_cast<kjit_kernel *>(1);
    EXPECT_EQ(kjit_compile_and_load("__global__ void tmpl(float *p) { p[0] = nope; }\n", "tmpl", &o, &k),
              KJIT_ERROR_COMPILE);
    EXPECT_EQ(k, nullptr);
    EXPECT_NE(std::string(kjit_last_error()).find("nope"), std::string::npos) << kjit_last_error();
    EXPECT_EQ(kjit_compile_and_load(sources::kTemplateOne, "tmpl", &o, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_compile_and_load(nullptr, "tmpl", &o, &k), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("kjit_compile_and_load: source is NULL"), std::string::npos);
    fake_cuda().set_device_sm(80);  // compiled for sm_90: the load's error
    EXPECT_EQ(kjit_compile_and_load(sources::kTemplateOne, "tmpl", &o, &k), KJIT_ERROR_DRIVER);
    fake_cuda().set_device_sm(90);
    EXPECT_EQ(k, nullptr);
}
