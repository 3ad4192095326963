// A serving process that refuses to compile (issue 48, item 3): kjit_compile_options::compile_mode
// and $KJIT_NO_COMPILE. A miss in never mode is KJIT_ERROR_NOT_CACHED at once, naming the request
// and how to warm it, with NVRTC neither run nor (where the cache folder's record gives its
// identity) even loaded; hits, seeds and the cluster tier still answer; warn mode compiles and
// says so once per kernel. Each case that looks at what the process mapped runs in a child of
// its own (a process maps NVRTC once, for good).
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

const char *const kSource = "template <int N> __global__ void served(float *p) { p[0] = N; }";

kjit_status compile(const std::string &cache, int n, int mode, std::string *out,
                    const std::vector<std::string> &seeds = {}) {
    const std::string expression = "served<" + std::to_string(n) + ">";
    std::vector<const char *> seed_pointers;
    for (const std::string &s : seeds) seed_pointers.push_back(s.c_str());
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.name_expression = expression.c_str();
    o.program_name = "served.cu";
    o.compile_mode = mode;
    o.seed_dirs = seed_pointers.data();
    o.seed_dir_count = seed_pointers.size();
    char path[4096];
    const kjit_status st = kjit_compile(kSource, "served", &o, path, sizeof path, nullptr);
    *out = st == KJIT_OK ? std::string(path) : std::string(kjit_last_error());
    return st;
}

kjit_stats stats() {
    kjit_stats s = KJIT_STATS_INIT;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_OK);
    return s;
}

// Whether this process maps a file whose path holds `part` (/proc/self/maps).
bool maps(const std::string &part) {
    std::ifstream in("/proc/self/maps");
    for (std::string line; std::getline(in, line);) {
        if (line.find(part) != std::string::npos) return true;
    }
    return false;
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

}  // namespace

// never: a miss is NOT_CACHED naming the kernel, program, arch and what to do, with no NVRTC run;
// a hit of a kernel compiled earlier is the same hit; a batch item is refused the same way.
TEST(CompileMode, NeverRefusesAMissAndServesAHit) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    std::string warm;
    ASSERT_EQ(compile(cache, 1, KJIT_COMPILE_ALWAYS, &warm), KJIT_OK) << warm;
    const kjit_stats before = stats();
    std::string out;
    EXPECT_EQ(compile(cache, 1, KJIT_COMPILE_NEVER, &out), KJIT_OK) << out;
    EXPECT_EQ(out, warm);
    ASSERT_EQ(compile(cache, 2, KJIT_COMPILE_NEVER, &out), KJIT_ERROR_NOT_CACHED);
    for (const char *part : {"is not cached, and compiling is refused (by the compile_mode option)", "kernel 'served'",
                             "name expression 'served<2>'", "program 'served.cu'", "for sm_90", cache.c_str(),
                             "Warm it ahead of time", "docs/serving.md"}) {
        EXPECT_TRUE(contains(out, part)) << part << " not in: " << out;
    }
    EXPECT_EQ(stats().nvrtc_compiles, before.nvrtc_compiles);
    EXPECT_EQ(stats().errors[KJIT_ERROR_NOT_CACHED], before.errors[KJIT_ERROR_NOT_CACHED] + 1);
    EXPECT_STREQ(kjit_status_string(KJIT_ERROR_NOT_CACHED), "not cached (compiling refused)");

    // A batch: the cached item is a hit, the other refused.
    kjit_compile_options o[2];
    std::string expressions[2] = {"served<1>", "served<3>"};
    kjit_compile_request items[2];
    const kjit_compile_request *pointers[2];
    for (int i = 0; i < 2; ++i) {
        o[i] = KJIT_COMPILE_OPTIONS_INIT;
        o[i].cache_dir = cache.c_str();
        o[i].arch = "sm_90";
        o[i].name_expression = expressions[i].c_str();
        o[i].program_name = "served.cu";
        o[i].compile_mode = KJIT_COMPILE_NEVER;
        items[i] = KJIT_COMPILE_REQUEST_INIT;
        items[i].source = kSource;
        items[i].keyword = "served";
        items[i].options = &o[i];
        pointers[i] = &items[i];
    }
    kjit_batch_result *result = nullptr;
    EXPECT_EQ(kjit_compile_batch(pointers, 2, nullptr, &result), KJIT_ERROR_NOT_CACHED);
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(kjit_batch_result_status(result, 0), KJIT_OK);
    EXPECT_EQ(kjit_batch_result_status(result, 1), KJIT_ERROR_NOT_CACHED);
    EXPECT_TRUE(contains(kjit_batch_result_error(result, 1), "served<3>")) << kjit_batch_result_error(result, 1);
    kjit_batch_result_release(result);
    EXPECT_EQ(stats().nvrtc_compiles, before.nvrtc_compiles);

    // A bad mode is an invalid argument naming the field.
    EXPECT_EQ(compile(cache, 1, 7, &out), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(out, "compile_mode is 7")) << out;
}

// $KJIT_NO_COMPILE: 1 and never refuse, warn and 0 compile, anything else is named; the option
// wins over the variable. In a fresh process over a cache that compiled before (its record of
// NVRTC's identity), a refused miss does not even load NVRTC.
TEST(CompileMode, TheVariableAndNoNvrtcLoaded) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const int code = in_child([&] {
        std::string out;
        if (compile(cache, 1, KJIT_COMPILE_DEFAULT, &out) != KJIT_OK) return 1;  // the record, and an entry
        return 0;
    });
    ASSERT_EQ(code, 0);
    const int strict = in_child([&] {
        // ctest runs each test in a process of its own; run together, an earlier test loaded it.
        const bool mapped_before = maps("libnvrtc");
        ::setenv("KJIT_NO_COMPILE", "1", 1);
        std::string out;
        if (compile(cache, 1, KJIT_COMPILE_DEFAULT, &out) != KJIT_OK) return 1;
        if (compile(cache, 2, KJIT_COMPILE_DEFAULT, &out) != KJIT_ERROR_NOT_CACHED) return 2;
        if (!contains(out, "(by $KJIT_NO_COMPILE=1)")) return 3;
        if (!mapped_before && maps("libnvrtc")) return 4;  // keyed from the record, refused before any compile
        ::setenv("KJIT_NO_COMPILE", "never", 1);
        if (compile(cache, 3, KJIT_COMPILE_DEFAULT, &out) != KJIT_ERROR_NOT_CACHED) return 5;
        ::setenv("KJIT_NO_COMPILE", "yes", 1);
        if (compile(cache, 3, KJIT_COMPILE_DEFAULT, &out) != KJIT_ERROR_INVALID_ARGUMENT) return 6;
        if (!contains(out, "$KJIT_NO_COMPILE is 'yes'")) return 7;
        ::setenv("KJIT_NO_COMPILE", "1", 1);
        if (compile(cache, 4, KJIT_COMPILE_ALWAYS, &out) != KJIT_OK) return 8;  // the option wins
        return 0;
    });
    EXPECT_EQ(strict, 0) << "1-8: which check failed";
}

// warn: a miss compiles and says so once per kernel, naming it; a hit says nothing.
TEST(CompileMode, WarnCompilesAndSaysSoOncePerKernel) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string log = dir.file("stderr.txt");
    const int code = in_child([&] {
        if (!std::freopen(log.c_str(), "w", stderr)) return 1;
        std::string out;
        for (int n : {5, 5, 6}) {
            if (compile(cache, n, KJIT_COMPILE_WARN, &out) != KJIT_OK) return 2;
        }
        return 0;
    });
    ASSERT_EQ(code, 0);
    const std::string text = read_file(log);
    const auto count = [&](const std::string &part) {
        std::size_t n = 0;
        for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
        return n;
    };
    EXPECT_EQ(count("which was not cached"), 2u) << text;
    EXPECT_EQ(count("served<5>"), 1u) << text;
    EXPECT_EQ(count("served<6>"), 1u) << text;
}

// A seed still answers a strict miss: warmed into a cache, exported, served from a fresh cache.
TEST(CompileMode, ASeedAnswersAStrictMiss) {
    TempDir dir;
    std::string out;
    ASSERT_EQ(compile(dir.file("warm"), 8, KJIT_COMPILE_ALWAYS, &out), KJIT_OK) << out;
    ASSERT_EQ(kjit_cache_export(dir.file("warm").c_str(), dir.file("seed").c_str(), nullptr, nullptr, nullptr), KJIT_OK)
        << kjit_last_error();
    const kjit_stats before = stats();
    EXPECT_EQ(compile(dir.file("serving"), 8, KJIT_COMPILE_NEVER, &out, {dir.file("seed")}), KJIT_OK) << out;
    EXPECT_EQ(stats().seed_hits, before.seed_hits + 1);
    EXPECT_EQ(compile(dir.file("serving"), 9, KJIT_COMPILE_NEVER, &out, {dir.file("seed")}), KJIT_ERROR_NOT_CACHED);
    EXPECT_TRUE(contains(out, "1 seed folder(s)")) << out;
    EXPECT_EQ(stats().nvrtc_compiles, before.nvrtc_compiles);
}
