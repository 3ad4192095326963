// Prepared requests (kjit_prepare, kjit_prepared_compile, kjit_prepared_load,
// kjit_prepared_release; issue 51, item 1) through libkjit.so, as users link it: a prepared
// request gives what kjit_compile_named gives for the same arguments at that moment, whatever
// changed since it was prepared (a header edited, the cache folder replaced, the entry
// removed), from 8 threads at once and in a forked child; its arguments are copied and its
// defaults settled when it is made; bad arguments get a status and a message.
#include "kjit/kjit.h"

#include "c_api_support.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

// The fork case's child compiles, which may start threads of its own: TSan allows that only
// with die_after_fork=0, as tests/api/fork_test.cpp sets it.
extern "C" const char *__tsan_default_options() { return "die_after_fork=0"; }

using namespace kjit_test;

namespace {

// A kernel that reads a header from an include folder, so an edit of it must change the answer.
const char *const kSource = "#include \"scale.h\"\n"
                            "template <int N> __global__ void gemm(float *p) { p[0] = N * SCALE; }\n"
                            "template __global__ void gemm<3>(float *);\n";
const char *const kName = "_Z4gemmILi3EEvPf";

struct Answer {
    kjit_status status = KJIT_ERROR_INTERNAL;
    std::string path, name;
};

Answer prepared_answer(const kjit_prepared *p) {
    char path[4096], name[512];
    Answer a;
    a.status = kjit_prepared_compile(p, path, sizeof path, nullptr, name, sizeof name, nullptr);
    if (a.status == KJIT_OK) {
        a.path = path;
        a.name = name;
    }
    return a;
}

Answer named_answer(const char *source, const char *keyword, const kjit_compile_options &o) {
    char path[4096], name[512];
    Answer a;
    a.status = kjit_compile_named(source, keyword, &o, path, sizeof path, nullptr, name, sizeof name, nullptr);
    if (a.status == KJIT_OK) {
        a.path = path;
        a.name = name;
    }
    return a;
}

// A cache folder, an include folder with scale.h, and the options that name them.
class Prepared : public ::testing::Test {
protected:
    void SetUp() override {
        cache_ = dir_.file("cache");
        inc_ = dir_.file("inc");
        ASSERT_EQ(::mkdir(inc_.c_str(), 0755), 0);
        write_file(inc_ + "/scale.h", "#define SCALE 3\n");
        includes_[0] = inc_.c_str();
        options_.cache_dir = cache_.c_str();
        options_.arch = "sm_90";
        options_.include_paths = includes_;
        options_.include_path_count = 1;
        options_.name_expression = "gemm<3>";
    }
    void TearDown() override { kjit_prepared_release(prepared_); }

    void prepare() {
        ASSERT_EQ(kjit_prepare(kSource, "gemm", &options_, &prepared_), KJIT_OK) << kjit_last_error();
        ASSERT_NE(prepared_, nullptr);
    }

    TempDir dir_;
    std::string cache_, inc_;
    const char *includes_[1] = {nullptr};
    kjit_compile_options options_ = KJIT_COMPILE_OPTIONS_INIT;
    kjit_prepared *prepared_ = nullptr;
};

TEST_F(Prepared, GivesWhatCompileNamedGivesAndARepeatHashesNothing) {
    prepare();
    const kjit_stats before = stats_now();
    const Answer first = prepared_answer(prepared_);
    ASSERT_EQ(first.status, KJIT_OK) << kjit_last_error();
    EXPECT_EQ(first.name, kName);
    EXPECT_TRUE(exists(first.path)) << first.path;
    EXPECT_EQ(stats_now().nvrtc_compiles - before.nvrtc_compiles, 1u) << "the first call is the miss that compiles";
    const Answer plain = named_answer(kSource, "gemm", options_);
    EXPECT_EQ(plain.path, first.path);
    EXPECT_EQ(plain.name, first.name);
    for (int i = 0; i < 3; ++i) {
        const kjit_stats b = stats_now();
        const Answer again = prepared_answer(prepared_);
        EXPECT_EQ(again.path, first.path);
        EXPECT_EQ(again.name, first.name);
        const kjit_stats a = stats_now();
        EXPECT_EQ(a.compile_hits - b.compile_hits, 1u);
        EXPECT_EQ(a.sidecar_hits - b.sidecar_hits, 0u) << "a repeat took the full look-up, not the memo";
    }
    // The path alone, as kjit_compile gives it; lengths alone; buffers too small.
    char path[4096];
    size_t path_len = 0, name_len = 0;
    ASSERT_EQ(kjit_prepared_compile(prepared_, path, sizeof path, &path_len, nullptr, 0, &name_len), KJIT_OK);
    EXPECT_EQ(path, first.path);
    EXPECT_EQ(path_len, first.path.size());
    EXPECT_EQ(name_len, first.name.size());
    char tiny[4];
    EXPECT_EQ(kjit_prepared_compile(prepared_, path, sizeof path, nullptr, tiny, sizeof tiny, &name_len),
              KJIT_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(name_len, first.name.size());
}

TEST_F(Prepared, ArgumentsAreCopiedWhenPrepared) {
    std::string source = kSource, keyword = "gemm", arch = "sm_90", cache = cache_, expression = "gemm<3>";
    kjit_compile_options o = options_;
    o.cache_dir = cache.c_str();
    o.arch = arch.c_str();
    o.name_expression = expression.c_str();
    ASSERT_EQ(kjit_prepare(source.c_str(), keyword.c_str(), &o, &prepared_), KJIT_OK) << kjit_last_error();
    // Every string the caller gave, overwritten in place and freed: the request keeps its own.
    for (std::string *s : {&source, &keyword, &arch, &cache, &expression}) {
        std::fill(s->begin(), s->end(), 'x');
        s->clear();
        s->shrink_to_fit();
    }
    o.include_path_count = 0;
    const Answer got = prepared_answer(prepared_);
    ASSERT_EQ(got.status, KJIT_OK) << kjit_last_error();
    EXPECT_EQ(got.name, kName);
    EXPECT_EQ(got.path.rfind(cache_ + "/", 0), 0u) << got.path;
}

// The headers the request reads are proven at each call: an edit gives the edited header's
// cubin, as kjit_compile_named does, and the old text's entry again after the edit is undone.
TEST_F(Prepared, AHeaderEditGivesTheNewAnswer) {
    prepare();
    const Answer three = prepared_answer(prepared_);
    ASSERT_EQ(three.status, KJIT_OK) << kjit_last_error();
    write_file(inc_ + "/scale.h", "#define SCALE 4 /* edited */\n");
    const Answer four = prepared_answer(prepared_);
    ASSERT_EQ(four.status, KJIT_OK) << kjit_last_error();
    EXPECT_NE(four.path, three.path) << "answered with the cubin of the header's old text";
    EXPECT_EQ(named_answer(kSource, "gemm", options_).path, four.path);
    EXPECT_EQ(prepared_answer(prepared_).path, four.path);
    write_file(inc_ + "/scale.h", "#define SCALE 3\n");
    EXPECT_EQ(prepared_answer(prepared_).path, three.path);
}

// The cache folder renamed away and made anew at its path, then the entry removed: each call
// gives a cubin that is there, compiled again into the folder now at that path.
TEST_F(Prepared, ACacheFolderReplacedOrAnEntryRemovedIsCompiledAgain) {
    prepare();
    const Answer first = prepared_answer(prepared_);
    ASSERT_EQ(first.status, KJIT_OK) << kjit_last_error();
    ASSERT_EQ(::rename(cache_.c_str(), dir_.file("cache.old").c_str()), 0);
    ASSERT_EQ(::mkdir(cache_.c_str(), 0700), 0);
    kjit_stats before = stats_now();
    const Answer swapped = prepared_answer(prepared_);
    ASSERT_EQ(swapped.status, KJIT_OK) << kjit_last_error();
    EXPECT_TRUE(exists(swapped.path)) << "answered with a cubin of the folder renamed away: " << swapped.path;
    EXPECT_EQ(stats_now().nvrtc_compiles - before.nvrtc_compiles, 1u);
    const std::string entry = swapped.path.substr(0, swapped.path.rfind('/'));
    const std::string remove = "rm -rf '" + entry + "'";
    ASSERT_EQ(std::system(remove.c_str()), 0);
    before = stats_now();
    const Answer again = prepared_answer(prepared_);
    ASSERT_EQ(again.status, KJIT_OK) << kjit_last_error();
    EXPECT_TRUE(exists(again.path)) << again.path;
    EXPECT_EQ(stats_now().nvrtc_compiles - before.nvrtc_compiles, 1u);
}

TEST_F(Prepared, EightThreadsOnOneHandleAndEachOnItsOwn) {
    prepare();
    constexpr std::size_t kThreads = 8;
    constexpr int kCalls = 200;
    std::atomic<int> wrong{0}, failed{0};
    std::vector<std::thread> threads;
    std::vector<std::string> paths(kThreads);
    for (std::size_t t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            kjit_prepared *own = nullptr;
            if (kjit_prepare(kSource, "gemm", &options_, &own) != KJIT_OK) {
                ++failed;
                return;
            }
            for (int i = 0; i < kCalls; ++i) {
                const Answer a = prepared_answer(i % 2 ? own : prepared_);
                if (a.status != KJIT_OK) {
                    ++failed;
                    continue;
                }
                if (a.name != kName) ++wrong;
                if (paths[t].empty()) paths[t] = a.path;
                if (a.path != paths[t]) ++wrong;
            }
            kjit_prepared_release(own);
        });
    }
    for (std::thread &t : threads) t.join();
    EXPECT_EQ(failed.load(), 0) << kjit_last_error();
    EXPECT_EQ(wrong.load(), 0);
    for (const std::string &p : paths) EXPECT_EQ(p, paths[0]);
    EXPECT_TRUE(exists(paths[0]));
}

// A handle made before fork() answers in the child, from the child's own state: there, an
// entry the parent had served is removed and the child compiles it again.
TEST_F(Prepared, AForkedChildUsesTheParentsHandle) {
    prepare();
    const Answer parent = prepared_answer(prepared_);
    ASSERT_EQ(parent.status, KJIT_OK) << kjit_last_error();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const Answer same = prepared_answer(prepared_);
        if (same.status != KJIT_OK || same.path != parent.path || same.name != kName) ::_exit(1);
        const std::string entry = parent.path.substr(0, parent.path.rfind('/'));
        if (std::system(("rm -rf '" + entry + "'").c_str()) != 0) ::_exit(2);
        const Answer again = prepared_answer(prepared_);
        if (again.status != KJIT_OK || !exists(again.path) || again.name != kName) ::_exit(3);
        kjit_prepared_release(prepared_);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died: " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the parent's answer not given; 2: rm; 3: not compiled again";
    EXPECT_TRUE(exists(prepared_answer(prepared_).path));
}

// Defaults are settled when the request is prepared: $KJIT_ARCH changed afterwards does not
// reach it (the answer is the one of the arch it was prepared under).
TEST_F(Prepared, DefaultsAreSettledWhenPrepared) {
    options_.arch = nullptr;
    {
        ScopedEnv arch("KJIT_ARCH", "sm_90");
        prepare();
    }
    ScopedEnv later("KJIT_ARCH", "sm_80");
    const Answer got = prepared_answer(prepared_);
    ASSERT_EQ(got.status, KJIT_OK) << kjit_last_error();
    options_.arch = "sm_90";
    EXPECT_EQ(named_answer(kSource, "gemm", options_).path, got.path);
    options_.arch = "sm_80";
    EXPECT_NE(named_answer(kSource, "gemm", options_).path, got.path);
}

// With the memo off when it is prepared, every call takes the full look-up, and gives the same.
TEST_F(Prepared, WithTheMemoOffEveryCallLooksUpInFull) {
    ScopedEnv off("KJIT_HIT_MEMO", "0");
    prepare();
    const Answer first = prepared_answer(prepared_);
    ASSERT_EQ(first.status, KJIT_OK) << kjit_last_error();
    const kjit_stats before = stats_now();
    EXPECT_EQ(prepared_answer(prepared_).path, first.path);
    EXPECT_EQ(stats_now().sidecar_hits - before.sidecar_hits, 1u) << "a repeat was answered from the memo";
}

// A serving process's prepared request in never mode: refused with KJIT_ERROR_NOT_CACHED, at
// once and again, and answered once the entry is there.
TEST_F(Prepared, NeverModeRefusesAMissAndServesAHit) {
    options_.compile_mode = KJIT_COMPILE_NEVER;
    prepare();
    char path[4096];
    EXPECT_EQ(kjit_prepared_compile(prepared_, path, sizeof path, nullptr, nullptr, 0, nullptr), KJIT_ERROR_NOT_CACHED);
    EXPECT_EQ(kjit_prepared_compile(prepared_, path, sizeof path, nullptr, nullptr, 0, nullptr), KJIT_ERROR_NOT_CACHED);
    options_.compile_mode = KJIT_COMPILE_DEFAULT;
    const Answer compiled = named_answer(kSource, "gemm", options_);
    ASSERT_EQ(compiled.status, KJIT_OK) << kjit_last_error();
    EXPECT_EQ(prepared_answer(prepared_).path, compiled.path);
}

// While the process records (kjit_record_start), each distinct prepared request is recorded.
TEST_F(Prepared, ARecordingProcessRecordsPreparedRequests) {
    prepare();
    ASSERT_EQ(prepared_answer(prepared_).status, KJIT_OK) << kjit_last_error();  // remembered by the memo
    const std::string record = dir_.file("record.jsonl");
    ASSERT_EQ(kjit_record_start(record.c_str()), KJIT_OK) << kjit_last_error();
    const Answer got = prepared_answer(prepared_);
    kjit_record_stop();
    ASSERT_EQ(got.status, KJIT_OK) << kjit_last_error();
    const std::string lines = read_file(record);
    EXPECT_NE(lines.find("gemm<3>"), std::string::npos) << lines;
}

TEST_F(Prepared, LoadGivesTheKernelOfItsCubin) {
    prepare();
    kjit_kernel *k = nullptr;
    ASSERT_EQ(kjit_prepared_load(prepared_, &k), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(kjit_kernel_name(k), kName);
    EXPECT_EQ(kjit_kernel_cubin_path(k), prepared_answer(prepared_).path);
    kjit_kernel_release(k);
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
}

TEST(PreparedArguments, BadArgumentsGetAStatusAndAMessage) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    kjit_prepared *p = reinterpret_cast<kjit_prepared *>(1);
    const auto message = [] { return std::string(kjit_last_error()); };
    EXPECT_EQ(kjit_prepare(nullptr, "k", &o, &p), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(p, nullptr) << "the out handle is not cleared on failure";
    EXPECT_NE(message().find("kjit_prepare: source is NULL"), std::string::npos) << message();
    EXPECT_EQ(kjit_prepare("__global__ void k() {}", nullptr, &o, &p), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(message().find("keyword is NULL"), std::string::npos) << message();
    EXPECT_EQ(kjit_prepare("__global__ void k() {}", "k", &o, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(message().find("prepared (the out handle) is NULL"), std::string::npos) << message();
    const char *with_null[] = {"-DA=1", nullptr};
    kjit_compile_options bad = o;
    bad.nvrtc_options = with_null;
    bad.nvrtc_option_count = 2;
    EXPECT_EQ(kjit_prepare("__global__ void k() {}", "k", &bad, &p), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(message().find("kjit_prepare: options"), std::string::npos) << message();
    EXPECT_NE(message().find("nvrtc_options[1] is NULL"), std::string::npos) << message();
    bad = o;
    bad.struct_size = sizeof bad + 8;
    EXPECT_EQ(kjit_prepare("__global__ void k() {}", "k", &bad, &p), KJIT_ERROR_INVALID_ARGUMENT);
    {
        ScopedEnv wait("KJIT_COMPILE_WAIT", "soon");
        EXPECT_EQ(kjit_prepare("__global__ void k() {}", "k", &o, &p), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(message().find("KJIT_COMPILE_WAIT"), std::string::npos) << message();
    }
    char path[64];
    EXPECT_EQ(kjit_prepared_compile(nullptr, path, sizeof path, nullptr, nullptr, 0, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    kjit_kernel *k = reinterpret_cast<kjit_kernel *>(1);
    EXPECT_EQ(kjit_prepared_load(nullptr, &k), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(k, nullptr);
    ASSERT_EQ(kjit_prepare("__global__ void k() {}", "k", &o, &p), KJIT_OK) << message();
    EXPECT_EQ(kjit_prepared_compile(p, nullptr, 8, nullptr, nullptr, 0, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_prepared_compile(p, path, sizeof path, nullptr, nullptr, 4, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_prepared_load(p, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    // A source NVRTC refuses: the compile error at the first call, and again at the next.
    kjit_prepared *broken = nullptr;
    ASSERT_EQ(kjit_prepare("__global__ void k() { undeclared(); }", "k", &o, &broken), KJIT_OK) << message();
    EXPECT_EQ(kjit_prepared_compile(broken, path, sizeof path, nullptr, nullptr, 0, nullptr), KJIT_ERROR_COMPILE);
    EXPECT_NE(message().find("undeclared"), std::string::npos) << message();
    EXPECT_EQ(kjit_prepared_compile(broken, path, sizeof path, nullptr, nullptr, 0, nullptr), KJIT_ERROR_COMPILE);
    kjit_prepared_release(broken);
    kjit_prepared_release(p);
    kjit_prepared_release(nullptr);
}

}  // namespace
