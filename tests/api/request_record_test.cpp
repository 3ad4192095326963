// The request record (issue 48, item 1): kjit_record_start / kjit_record_stop and $KJIT_RECORD.
// Every distinct request of a process, hit or miss, is appended once as one JSON line; many
// threads and processes recording into one file at once leave each distinct request exactly
// once, every line whole; a repeat answered by the hit memo before recording began is still
// recorded; a strict miss (KJIT_ERROR_NOT_CACHED) is recorded too, so the misses of a strict
// run are the next warm's input.
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace kjit_test;

namespace {

const char *const kSource = "template <int N> __global__ void rec(float *p) { p[0] = N; }";
const std::string kPrefix = "{\"kjit_request\":1,\"id\":\"";

kjit_status compile(const std::string &cache, int n, int mode = KJIT_COMPILE_DEFAULT) {
    const std::string expression = "rec<" + std::to_string(n) + ">";
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.name_expression = expression.c_str();
    o.compile_mode = mode;
    char path[4096];
    return kjit_compile(kSource, "rec", &o, path, sizeof path, nullptr);
}

struct Lines {
    std::vector<std::string> all;
    std::set<std::string> ids;
    std::size_t malformed = 0;
};

Lines lines_of(const std::string &file) {
    Lines out;
    const std::string text = read_file(file);
    std::size_t start = 0;
    for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
        const std::string line = text.substr(start, end - start);
        out.all.push_back(line);
        if (line.compare(0, kPrefix.size(), kPrefix) != 0 || line.back() != '}' ||
            line.find("\"source\":") == std::string::npos) {
            ++out.malformed;
            continue;
        }
        out.ids.insert(line.substr(kPrefix.size(), 16));
    }
    if (start != text.size()) ++out.malformed;  // a line without its newline: torn
    return out;
}

bool has(const Lines &l, const std::string &part) {
    for (const std::string &line : l.all) {
        if (line.find(part) != std::string::npos) return true;
    }
    return false;
}

}  // namespace

// 8 processes x 4 threads: each thread of each process asks for the 6 shared kernels and one of
// its process's own, twice. 6 + 8 distinct requests: each once, every line whole.
TEST(RequestRecord, ManyProcessesAndThreadsRecordEachDistinctRequestOnce) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string record = dir.file("requests.jsonl");
    std::vector<pid_t> children;
    std::fflush(nullptr);
    for (int p = 0; p < 8; ++p) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            if (kjit_record_start(record.c_str()) != KJIT_OK) ::_exit(2);
            std::vector<std::thread> threads;
            std::atomic<bool> failed{false};
            for (int t = 0; t < 4; ++t) {
                threads.emplace_back([&, t] {
                    for (int round = 0; round < 2; ++round) {
                        for (int k = 0; k < 6; ++k) {
                            if (compile(cache, (k + t) % 6) != KJIT_OK) failed = true;
                        }
                        if (compile(cache, 100 + p) != KJIT_OK) failed = true;
                    }
                });
            }
            for (std::thread &th : threads) th.join();
            kjit_record_stop();
            ::_exit(failed ? 1 : 0);
        }
        children.push_back(pid);
    }
    for (pid_t pid : children) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    }
    const Lines l = lines_of(record);
    EXPECT_EQ(l.malformed, 0u);
    EXPECT_EQ(l.all.size(), 14u) << read_file(record).substr(0, 2000);
    EXPECT_EQ(l.ids.size(), 14u);
    for (int p = 0; p < 8; ++p) EXPECT_TRUE(has(l, "rec<" + std::to_string(100 + p) + ">")) << p;
}

// A repeat the hit memo answered before recording began is recorded at its next call; a strict
// miss is recorded as well; nothing after stop.
TEST(RequestRecord, MemoHitsAndStrictMissesAreRecordedNothingAfterStop) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string record = dir.file("requests.jsonl");
    ASSERT_EQ(compile(cache, 1), KJIT_OK) << kjit_last_error();
    ASSERT_EQ(compile(cache, 1), KJIT_OK);  // in the memo now
    ASSERT_EQ(kjit_record_start(record.c_str()), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(compile(cache, 1), KJIT_OK);
    EXPECT_EQ(compile(cache, 2, KJIT_COMPILE_NEVER), KJIT_ERROR_NOT_CACHED);
    kjit_record_stop();
    EXPECT_EQ(compile(cache, 3), KJIT_OK);
    const Lines l = lines_of(record);
    EXPECT_EQ(l.malformed, 0u);
    EXPECT_EQ(l.all.size(), 2u);
    EXPECT_TRUE(has(l, "\"name_expression\":\"rec<1>\""));
    EXPECT_TRUE(has(l, "\"name_expression\":\"rec<2>\"")) << "the strict miss was not recorded";
    EXPECT_FALSE(has(l, "rec<3>"));
    EXPECT_TRUE(has(l, "\"arch\":\"sm_90\""));

    // Bad arguments and a place that cannot be written say so.
    EXPECT_EQ(kjit_record_start(nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_record_start(dir.file("no/such/folder/r.jsonl").c_str()), KJIT_ERROR_IO);
    EXPECT_NE(std::string(kjit_last_error()).find("no/such/folder/r.jsonl"), std::string::npos) << kjit_last_error();
    EXPECT_EQ(kjit_record_start(dir.path().c_str()), KJIT_ERROR_IO);
}
