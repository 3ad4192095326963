// NVRTC options that name a file NVRTC writes (issue 45, defect 3): NVRTC 13.0 aborts the whole
// process (SIGABRT, "Could not open <file>.json") when it cannot create the trace file of
// -fdevice-time-trace, and fails the compile on -time's CSV. libkjit checks every such file
// before NVRTC runs and fails with KJIT_ERROR_IO naming it: here from the C ABI, in a batch on
// worker processes, and the check itself (compiler::check_output_files). Each case that would
// abort runs in a forked child first, so a regression fails this test instead of killing it.
#include "kjit/kjit.h"

#include "compile/compiler.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

using namespace kjit_test;
namespace compiler = kjit::compile::compiler;

namespace {

const char *const kSource = "template <int N> __global__ void traced(float *p) { p[0] = N; }";

// The C call of one kernel with `options` (and `program_name`, or none) into `cache`.
kjit_status compile(const std::string &cache, const std::vector<std::string> &options, std::string *error,
                    const char *program_name = nullptr, int n = 3) {
    std::vector<const char *> raw;
    for (const std::string &o : options) raw.push_back(o.c_str());
    const std::string expression = "traced<" + std::to_string(n) + ">";
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.nvrtc_options = raw.data();
    o.nvrtc_option_count = raw.size();
    o.name_expression = expression.c_str();
    o.program_name = program_name;
    char path[4096];
    const kjit_status st = kjit_compile(kSource, "traced", &o, path, sizeof path, nullptr);
    *error = st == KJIT_OK ? std::string(path) : std::string(kjit_last_error());
    return st;
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

}  // namespace

// The check alone: each place NVRTC could not write, and the ones it can.
TEST(OutputFiles, TheCheckNamesEachFileNvrtcCouldNotWrite) {
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("folder.json").c_str(), 0755), 0);
    write_file(dir.file("file"), "x");
    struct Case {
        std::string option, program, expect;  // expect: "" when it passes
    } cases[] = {
        {"-fdevice-time-trace=" + dir.file("missing/t"), "", "its folder '" + dir.file("missing") + "' does not exist"},
        {"--fdevice-time-trace=" + dir.file("missing/t"), "", dir.file("missing/t.json")},
        {"-fdevice-time-trace=-", dir.file("gen/k.cu"), "'" + dir.file("gen/k.cu.json") + "'"},
        {"-fdevice-time-trace=" + dir.file("folder"), "", "it is a folder"},
        {"-fdevice-time-trace=" + dir.file("file/t"), "", "Not a directory"},
        {"-time=" + dir.file("missing/t.csv"), "", "does not exist"},
        {"--time=" + dir.file("missing/t.csv"), "", "does not exist"},
        {"-fdevice-time-trace=" + dir.file("t"), "", ""},
        {"-fdevice-time-trace=-", dir.file("k.cu"), ""},
        {"-time=-", "", ""},
        {"-time=" + dir.file("file"), "", ""},
    };
    for (const Case &c : cases) {
        const auto st = compiler::check_output_files({"-DX=1", c.option}, c.program);
        if (c.expect.empty()) {
            EXPECT_TRUE(st.ok()) << c.option << ": " << st.error().message;
            continue;
        }
        ASSERT_FALSE(st.ok()) << c.option;
        EXPECT_EQ(st.error().code, kjit::Errc::io) << c.option;
        EXPECT_TRUE(contains(st.error().message, c.expect)) << c.option << ": " << st.error().message;
        EXPECT_TRUE(contains(st.error().message, c.option)) << st.error().message;
    }
    EXPECT_FALSE(exists(dir.file("t.json"))) << "the check created a file";
}

// From the C ABI, on a miss: an error naming the file, the process alive; a trace folder that
// does not exist, and "-" with a program name in a folder that does not exist.
TEST(OutputFiles, AMissWithAnUnwritableTraceIsAnErrorNotAnAbort) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const int code = in_child([&] {
        std::string error;
        if (compile(cache, {"-fdevice-time-trace=" + dir.file("no/such/t")}, &error) != KJIT_ERROR_IO) return 1;
        if (!contains(error, dir.file("no/such/t.json"))) return 2;
        if (::chdir(dir.path().c_str()) != 0) return 6;
        if (compile(cache, {"-fdevice-time-trace=-"}, &error, "gen/k.cu", 4) != KJIT_ERROR_IO) return 3;
        if (!contains(error, "gen/k.cu.json")) return 4;
        if (compile(cache, {"-time=" + dir.file("no/t.csv")}, &error, nullptr, 5) != KJIT_ERROR_IO) return 5;
        return 0;
    });
    EXPECT_EQ(code, 0) << "1-6: a wrong outcome; 134: NVRTC aborted the process";
    // In this process, the same: and the folder made, the same request compiles.
    std::string error;
    EXPECT_EQ(compile(cache, {"-fdevice-time-trace=" + dir.file("later/t")}, &error), KJIT_ERROR_IO);
    EXPECT_TRUE(contains(error, "does not exist")) << error;
    ASSERT_EQ(::mkdir(dir.file("later").c_str(), 0755), 0);
    EXPECT_EQ(compile(cache, {"-fdevice-time-trace=" + dir.file("later/t")}, &error), KJIT_OK) << error;
    EXPECT_TRUE(exists(dir.file("later/t.json")));
}

// In a batch on worker processes: each such item fails with its error, the others compile, and
// neither the caller nor a worker dies.
TEST(OutputFiles, ABatchOnWorkerProcessesFailsTheItemNotTheWorker) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string bad = "-fdevice-time-trace=" + dir.file("missing/t");
    const char *bad_options[] = {bad.c_str()};
    kjit_compile_options opts[4];
    std::string expressions[4];
    kjit_compile_request items[4];
    const kjit_compile_request *pointers[4];
    for (int i = 0; i < 4; ++i) {
        opts[i] = KJIT_COMPILE_OPTIONS_INIT;
        opts[i].cache_dir = cache.c_str();
        opts[i].arch = "sm_90";
        expressions[i] = "traced<" + std::to_string(10 + i) + ">";
        opts[i].name_expression = expressions[i].c_str();
        if (i % 2 == 0) {
            opts[i].nvrtc_options = bad_options;
            opts[i].nvrtc_option_count = 1;
        }
        items[i] = KJIT_COMPILE_REQUEST_INIT;
        items[i].source = kSource;
        items[i].keyword = "traced";
        items[i].options = &opts[i];
        pointers[i] = &items[i];
    }
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = 2;
    batch.worker_kind = KJIT_WORKERS_PROCESSES;
    kjit_batch_result *result = nullptr;
    // The batch's status is its first failed item's; every item has its own.
    EXPECT_EQ(kjit_compile_batch(pointers, 4, &batch, &result), KJIT_ERROR_IO) << kjit_last_error();
    ASSERT_NE(result, nullptr);
    for (size_t i = 0; i < 4; ++i) {
        if (i % 2 == 0) {
            EXPECT_EQ(kjit_batch_result_status(result, i), KJIT_ERROR_IO) << i;
            EXPECT_TRUE(contains(kjit_batch_result_error(result, i), dir.file("missing/t.json")))
                << kjit_batch_result_error(result, i);
        } else {
            EXPECT_EQ(kjit_batch_result_status(result, i), KJIT_OK) << kjit_batch_result_error(result, i);
        }
    }
    kjit_batch_result_release(result);
    kjit_stats s = KJIT_STATS_INIT;
    ASSERT_EQ(kjit_get_stats(&s), KJIT_OK);
    EXPECT_EQ(s.nvrtc_compiles, 2u) << "the refused items reached NVRTC";
}
