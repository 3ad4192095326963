// Without a usable driver, kjit_load_cached says what was tried and what failed, and compile and
// resolve still work. ctest runs this binary once per way of lacking a driver; each sets
// KJIT_EXPECT_DRIVER_ERROR to text the message must hold.
#include "kjit/kjit.h"

#include "c_api_support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace kjit_test;

TEST(DriverUnavailable, LoadSaysWhyCompileAndResolveStillWork) {
    const char *expected = std::getenv("KJIT_EXPECT_DRIVER_ERROR");
    ASSERT_NE(expected, nullptr) << "set KJIT_EXPECT_DRIVER_ERROR";
    TempDir dir;
    const std::string compiled = compile_through_c_api(dir, sources::kPlain, "plain_kernel");
    ASSERT_FALSE(compiled.empty());
    const char *path = compiled.c_str();
    char name[256];
    ASSERT_EQ(kjit_resolve_name(path, "plain_kernel", name, sizeof name, nullptr), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(name, "_Z12plain_kernelPf");

    for (int attempt = 0; attempt < 2; ++attempt) {  // the outcome is kept, and said every time
        kjit_kernel *k = reinterpret_cast<kjit_kernel *>(1);
        EXPECT_EQ(kjit_load_cached(path, "plain_kernel", &k), KJIT_ERROR_DRIVER_UNAVAILABLE);
        EXPECT_EQ(k, nullptr);
        const std::string err = kjit_last_error();
        EXPECT_NE(err.find(expected), std::string::npos) << err;
    }
    // With no arch given, kjit_compile needs the device's and cannot get it either.
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    const std::string cache = dir.file("cache");
    options.cache_dir = cache.c_str();
    ::unsetenv("KJIT_ARCH");
    char out[4096];
    EXPECT_NE(kjit_compile(sources::kPlain, "plain_kernel", &options, out, sizeof out, nullptr), KJIT_OK);
}
