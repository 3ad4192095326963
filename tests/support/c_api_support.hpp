// Helpers for the tests that go through libkjit.so, as users link it (test_support itself
// links only the internal library, so these live in a header of their own).
#pragma once

#include "kjit/kjit.h"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kjit_test {

// kjit_compile of `source` for sm_90 into `<dir>/cache`; the cubin path, or "" after a test
// failure naming kjit_last_error().
inline std::string compile_through_c_api(const TempDir &dir, const char *source, const char *keyword) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    const std::string cache = dir.file("cache");
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    char path[4096];
    const kjit_status st = kjit_compile(source, keyword, &options, path, sizeof path, nullptr);
    EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
    return st == KJIT_OK ? path : "";
}

// kjit_get_stats now (a test failure if it fails).
inline kjit_stats stats_now() {
    kjit_stats s = KJIT_STATS_INIT;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_OK);
    return s;
}

}  // namespace kjit_test
