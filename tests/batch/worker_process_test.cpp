// kjit_compile_batch on worker processes (kjit_batch_options::worker_kind), through libkjit.so,
// which finds kjit-worker beside itself: the same cache as threads, errors that come back,
// workers that crash, hang, lie or are missing, the automatic choice, and nothing (no process,
// no PCH folder) outliving the batch or its caller. The misbehaving workers are test_worker.cpp,
// through $KJIT_WORKER.
#include "batch_support.hpp"
#include "c_api_support.hpp"
#include "kjit/kjit.h"

#include "batch/worker_protocol.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace kjit_test;

// Live (not zombie) child processes of `parent`, from /proc.
std::vector<pid_t> live_children_of(pid_t parent) {
    std::vector<pid_t> out;
    for (const std::string &name : list_dir("/proc")) {
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream in("/proc/" + name + "/stat");
        std::string line;
        if (!std::getline(in, line)) continue;
        const auto close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(line.substr(close + 2));
        char state = 0;
        long ppid = 0;
        rest >> state >> ppid;
        if (ppid == parent && state != 'Z' && state != 'X') out.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return out;
}

bool alive(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return false;
    const auto close = line.rfind(')');
    return close != std::string::npos && line.size() > close + 2 && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

// A header-light kernel that includes an in-memory header (a "header-heavy" miss for the
// automatic choice) and is distinct per `i`.
std::string including_kernel(int i) {
    return "#include \"tile_config.h\"\n" + sources::numbered_gemm(i) + "\n// item " + std::to_string(i) + "\n";
}

// Requests over one cache folder, each with its own source; optionally with an in-memory header.
class Sweep {
public:
    explicit Sweep(std::string cache) : cache_(std::move(cache)) {
        options_.cache_dir = cache_.c_str();
        options_.arch = "sm_90";
    }
    void with_header() {
        options_.headers = &header_;
        options_.header_count = 1;
    }
    std::size_t add(std::string source) {
        sources_.push_back(std::move(source));
        return sources_.size() - 1;
    }
    BatchOutcome run(int kind, unsigned workers, kjit_batch_progress_fn progress = nullptr, void *user = nullptr) {
        kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
        batch.workers = workers;
        batch.worker_kind = kind;
        batch.progress = progress;
        batch.progress_user_data = user;
        return compile_batch(sources_, "gemm", options_, &batch);
    }
    const kjit_compile_options &options() const { return options_; }

private:
    std::string cache_;
    kjit_header header_{"tile_config.h", "#define TILE 128\n"};
    kjit_compile_options options_ = KJIT_COMPILE_OPTIONS_INIT;
    std::vector<std::string> sources_;
};

std::string resolve(const std::string &cubin) {
    char name[512];
    const kjit_status st = kjit_resolve_name(cubin.c_str(), "gemm", name, sizeof name, nullptr);
    EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
    return st == KJIT_OK ? name : "";
}

std::string test_worker() {
    const char *path = std::getenv("KJIT_TEST_WORKER");
    if (!path) {
        std::fprintf(stderr, "KJIT_TEST_WORKER is not set (ctest sets it to test_worker's path)\n");
        std::abort();
    }
    return path;
}

TEST(WorkerProcesses, GiveTheCacheThreadsGive) {
    TempDir dir;
    Sweep threads(dir.file("threads")), processes(dir.file("processes"));
    for (Sweep *s : {&threads, &processes}) {
        s->with_header();
        for (int i = 0; i < 4; ++i) s->add(including_kernel(i));
        s->add(including_kernel(1));  // a duplicate: merged, one compile
    }
    const BatchOutcome a = threads.run(KJIT_WORKERS_THREADS, 2);
    ASSERT_EQ(a.overall, KJIT_OK) << a.errors[0];
    const kjit_stats before = stats_now();
    const BatchOutcome b = processes.run(KJIT_WORKERS_PROCESSES, 2);
    ASSERT_EQ(b.overall, KJIT_OK) << b.errors[0];
    const kjit_stats after = stats_now();
    // One NVRTC run per distinct miss, counted in this process although the workers ran them.
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, 4u);
    for (std::size_t i = 0; i < a.cubin_paths.size(); ++i) {
        EXPECT_EQ(read_file(a.cubin_paths[i]), read_file(b.cubin_paths[i])) << i;
        EXPECT_EQ(resolve(b.cubin_paths[i]), sources::numbered_gemm_name(i == 4 ? 1 : static_cast<int>(i)));
    }
    EXPECT_EQ(b.cubin_paths[1], b.cubin_paths[4]);
    // The workers ended with the batch.
    EXPECT_TRUE(live_children_of(::getpid()).empty());
    // A second run hits, without a worker.
    const BatchOutcome again = processes.run(KJIT_WORKERS_PROCESSES, 2);
    EXPECT_EQ(again.overall, KJIT_OK);
    EXPECT_EQ(stats_now().nvrtc_compiles, after.nvrtc_compiles);
}

TEST(WorkerProcesses, CompileErrorsAndLoweredNamesComeBack) {
    TempDir dir;
    Sweep sweep(dir.file("cache"));
    sweep.add("__global__ void gemm(float *p) { p[0] = undefined_thing_in_worker; }\n");
    sweep.add(sources::numbered_gemm(7));
    const BatchOutcome out = sweep.run(KJIT_WORKERS_PROCESSES, 2);
    EXPECT_EQ(out.statuses[0], KJIT_ERROR_COMPILE);
    EXPECT_NE(out.errors[0].find("undefined_thing_in_worker"), std::string::npos) << out.errors[0];
    EXPECT_EQ(out.statuses[1], KJIT_OK) << out.errors[1];

    // A name expression is lowered by the worker's NVRTC and checked here.
    const std::string cache = dir.file("named");
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    options.name_expression = "tmpl<4>";
    kjit_compile_request request = KJIT_COMPILE_REQUEST_INIT;
    request.source = "template <int N> __global__ void tmpl(float *p) { p[0] = N; }\n";
    request.keyword = "tmpl";
    request.options = &options;
    const kjit_compile_request *items[] = {&request};
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.worker_kind = KJIT_WORKERS_PROCESSES;
    kjit_batch_result *result = nullptr;
    ASSERT_EQ(kjit_compile_batch(items, 1, &batch, &result), KJIT_OK) << kjit_last_error();
    char name[256];
    EXPECT_EQ(kjit_resolve_name(kjit_batch_result_cubin_path(result, 0), "tmpl", name, sizeof name, nullptr), KJIT_OK);
    EXPECT_STREQ(name, "_Z4tmplILi4EEvPf");
    kjit_batch_result_release(result);
}

TEST(WorkerProcesses, ACrashFailsOnlyItsItemAfterOneRetry) {
    TempDir dir;
    ScopedEnv worker("KJIT_WORKER", test_worker().c_str());
    ScopedEnv mode("KJIT_TEST_WORKER_MODE", "crash:CRASH_THIS_ONE");
    Sweep sweep(dir.file("cache"));
    sweep.add(sources::numbered_gemm(1));
    const std::size_t bad = sweep.add(sources::numbered_gemm(2) + "// CRASH_THIS_ONE\n");
    sweep.add(sources::numbered_gemm(3));
    sweep.add(sources::numbered_gemm(4));
    const BatchOutcome out = sweep.run(KJIT_WORKERS_PROCESSES, 2);
    EXPECT_EQ(out.overall, KJIT_ERROR_NVRTC);
    for (std::size_t i = 0; i < out.statuses.size(); ++i) {
        if (i == bad) continue;
        EXPECT_EQ(out.statuses[i], KJIT_OK) << i << ": " << out.errors[i];
    }
    ASSERT_EQ(out.statuses[bad], KJIT_ERROR_NVRTC);
    const std::string &e = out.errors[bad];
    EXPECT_NE(e.find("failed twice"), std::string::npos) << e;
    EXPECT_NE(e.find("killed by signal 6 (SIGABRT)"), std::string::npos) << e;
    EXPECT_NE(e.find("on a fresh worker"), std::string::npos) << e;
    EXPECT_TRUE(live_children_of(::getpid()).empty());
    // Nothing was cached for it: the same request on threads compiles.
    ::unsetenv("KJIT_TEST_WORKER_MODE");
    const kjit_stats before = stats_now();
    const BatchOutcome rerun = sweep.run(KJIT_WORKERS_THREADS, 1);
    EXPECT_EQ(rerun.overall, KJIT_OK);
    EXPECT_EQ(stats_now().nvrtc_compiles - before.nvrtc_compiles, 1u);
}

TEST(WorkerProcesses, AWorkerThatCrashesOnceIsReplaced) {
    TempDir dir;
    const std::string flag = dir.file("crashed");
    ScopedEnv worker("KJIT_WORKER", test_worker().c_str());
    ScopedEnv mode("KJIT_TEST_WORKER_MODE", ("crash-once:CRASH_ONCE:" + flag).c_str());
    Sweep sweep(dir.file("cache"));
    sweep.add(sources::numbered_gemm(1) + "// CRASH_ONCE\n");
    sweep.add(sources::numbered_gemm(2));
    const BatchOutcome out = sweep.run(KJIT_WORKERS_PROCESSES, 1);
    EXPECT_EQ(out.overall, KJIT_OK) << out.errors[0];
    EXPECT_TRUE(exists(flag));  // it did crash
    EXPECT_EQ(resolve(out.cubin_paths[0]), sources::numbered_gemm_name(1));
}

TEST(WorkerProcesses, BrokenWorkersAreClearErrors) {
    struct Case {
        const char *mode;
        kjit_status status;
        const char *says;
    };
    for (const Case &c : {Case{"exit-on-job", KJIT_ERROR_NVRTC, "exited with status 3"},
                          Case{"garbage", KJIT_ERROR_NVRTC, "without the KJW1 magic"},
                          Case{"wrong-nvrtc", KJIT_ERROR_NVRTC, "loaded NVRTC '0.0 libnvrtc.so.0.0.0 1'"},
                          Case{"old-protocol", KJIT_ERROR_NVRTC, "speaks protocol version 0"}}) {
        SCOPED_TRACE(c.mode);
        TempDir dir;
        ScopedEnv worker("KJIT_WORKER", test_worker().c_str());
        ScopedEnv mode("KJIT_TEST_WORKER_MODE", c.mode);
        Sweep sweep(dir.file("cache"));
        sweep.add(sources::numbered_gemm(5));
        const BatchOutcome out = sweep.run(KJIT_WORKERS_PROCESSES, 1);
        EXPECT_EQ(out.statuses[0], c.status);
        EXPECT_NE(out.errors[0].find(c.says), std::string::npos) << out.errors[0];
        EXPECT_TRUE(out.cubin_paths[0].empty());
        EXPECT_TRUE(live_children_of(::getpid()).empty());
    }
}

TEST(WorkerProcesses, AMissingHelperFailsExplicitProcessesAndFallsBackToThreads) {
    TempDir dir;
    Sweep sweep(dir.file("cache"));
    sweep.with_header();
    const std::size_t hit = sweep.add(including_kernel(20));
    ASSERT_EQ(sweep.run(KJIT_WORKERS_THREADS, 1).overall, KJIT_OK);
    sweep.add(including_kernel(21));
    sweep.add(including_kernel(22));
    ScopedEnv worker("KJIT_WORKER", dir.file("no-such-worker").c_str());
    const BatchOutcome explicit_kind = sweep.run(KJIT_WORKERS_PROCESSES, 2);
    EXPECT_EQ(explicit_kind.statuses[hit], KJIT_OK);  // hits need no worker
    for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
        EXPECT_EQ(explicit_kind.statuses[i], KJIT_ERROR_NOT_FOUND);
        EXPECT_NE(explicit_kind.errors[i].find("$KJIT_WORKER is '" + dir.file("no-such-worker") + "'"),
                  std::string::npos)
            << explicit_kind.errors[i];
    }
    const BatchOutcome automatic = sweep.run(KJIT_WORKERS_AUTOMATIC, 2);
    EXPECT_EQ(automatic.overall, KJIT_OK) << automatic.errors[1];
}

// What the progress callback saw of this process's children while the batch ran.
struct ChildWatch {
    std::size_t most = 0;
    static int callback(void *user, size_t, size_t, size_t, kjit_status, const char *) {
        auto *self = static_cast<ChildWatch *>(user);
        self->most = std::max(self->most, live_children_of(::getpid()).size());
        return 0;
    }
};

TEST(WorkerProcesses, AutomaticUsesProcessesForMissesWithHeadersOnMoreThanOneWorker) {
    TempDir dir;
    struct Case {
        bool headers;
        unsigned workers;
        bool processes;
    };
    int n = 30;
    for (const Case &c : {Case{true, 2u, true}, Case{false, 2u, false}, Case{true, 1u, false}}) {
        SCOPED_TRACE(std::to_string(c.headers) + " " + std::to_string(c.workers));
        Sweep sweep(dir.file("cache" + std::to_string(n)));
        if (c.headers) sweep.with_header();
        for (int i = 0; i < 4; ++i, ++n) sweep.add(c.headers ? including_kernel(n) : sources::numbered_gemm(n));
        ChildWatch watch;
        const BatchOutcome out = sweep.run(KJIT_WORKERS_AUTOMATIC, c.workers, &ChildWatch::callback, &watch);
        EXPECT_EQ(out.overall, KJIT_OK) << out.errors[0];
        if (c.processes) {
            EXPECT_GE(watch.most, 1u);
        } else {
            EXPECT_EQ(watch.most, 0u);
        }
    }
}

// A worker ends with the process that started it, also when that process is killed mid-compile.
TEST(WorkerProcesses, WorkersDieWithTheirCaller) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const pid_t caller = ::fork();
    ASSERT_GE(caller, 0);
    if (caller == 0) {
        ::setenv("KJIT_WORKER", test_worker().c_str(), 1);
        ::setenv("KJIT_TEST_WORKER_MODE", "hang:HANG_HERE", 1);
        Sweep sweep(cache);
        sweep.add(sources::numbered_gemm(9) + "// HANG_HERE\n");
        (void)sweep.run(KJIT_WORKERS_PROCESSES, 1);
        std::_Exit(0);  // not reached: the worker hangs until the caller is killed
    }
    std::vector<pid_t> workers;
    for (int i = 0; i < 6000 && workers.empty(); ++i) {
        workers = live_children_of(caller);
        if (workers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(workers.size(), 1u) << "the caller never started its worker";
    ::kill(caller, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(caller, &status, 0), caller);
    bool gone = false;
    for (int i = 0; i < 6000 && !gone; ++i) {
        gone = !alive(workers[0]);
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(gone) << "worker " << workers[0] << " outlived its caller";
    if (!gone) ::kill(workers[0], SIGKILL);
}

// PCH folders of `tmp` (TMPDIR), as the progress callback saw them.
struct PchWatch {
    std::string tmp;
    std::size_t most = 0;
    static std::size_t count(const std::string &tmp) {
        std::size_t n = 0;
        for (const std::string &name : list_dir(tmp)) n += name.rfind("kjit-pch-", 0) == 0 ? 1u : 0u;
        return n;
    }
    static int callback(void *user, size_t, size_t, size_t, kjit_status, const char *) {
        auto *self = static_cast<PchWatch *>(user);
        self->most = std::max(self->most, count(self->tmp));
        return 0;
    }
};

// Workers that made PCHs leave no folder behind: each removes its own as it exits.
TEST(WorkerProcesses, NoPchFolderOutlivesTheBatch) {
    TempDir dir;
    PchWatch watch{dir.file("tmp")};
    ASSERT_EQ(::mkdir(watch.tmp.c_str(), 0700), 0);
    ScopedEnv tmpdir("TMPDIR", watch.tmp.c_str());
    Sweep sweep(dir.file("cache"));
    sweep.with_header();
    for (int i = 40; i < 44; ++i) sweep.add(including_kernel(i));
    const BatchOutcome out = sweep.run(KJIT_WORKERS_PROCESSES, 2, &PchWatch::callback, &watch);
    ASSERT_EQ(out.overall, KJIT_OK) << out.errors[0];
    EXPECT_GE(watch.most, 1u);  // the workers made PCHs there (four misses, one set of headers)
    EXPECT_TRUE(live_children_of(::getpid()).empty());
    EXPECT_EQ(PchWatch::count(watch.tmp), 0u);
}

// The protocol's decoders take any bytes: a truncated or garbled message is an error naming
// the field, never a read past its end.
TEST(WorkerProtocol, TruncatedAndGarbledMessagesAreErrors) {
    kjit::compile::Job job;
    job.request.source = "__global__ void k() {}";
    job.request.options = {"-arch=sm_90", "-DX=1"};
    job.request.headers = {{"a.h", "int a;"}};
    job.request.name_expressions = {"k"};
    job.pch_identity = "abc";
    const std::string whole = kjit::batch::worker_protocol::encode_job(job);
    auto back = kjit::batch::worker_protocol::decode_job(whole);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->request.source, job.request.source);
    EXPECT_EQ(back->request.options, job.request.options);
    EXPECT_EQ(back->request.headers, job.request.headers);
    EXPECT_EQ(back->pch_identity, "abc");
    for (std::size_t cut = 0; cut < whole.size(); ++cut) {
        auto partial = kjit::batch::worker_protocol::decode_job(whole.substr(0, cut));
        ASSERT_FALSE(partial) << cut;
        EXPECT_NE(partial.error().message.find("a job message's"), std::string::npos) << partial.error().message;
    }
    EXPECT_FALSE(kjit::batch::worker_protocol::decode_job(whole + "x"));
    // A list count larger than the message could hold is refused before anything is allocated.
    std::string huge = whole.substr(0, 8 + job.request.source.size() + 8 + job.request.program_name.size());
    huge += std::string("\xff\xff\xff\xff\xff\xff\xff\x0f", 8);
    EXPECT_FALSE(kjit::batch::worker_protocol::decode_job(huge));

    kjit::compile::JobOutcome failed{kjit::Error{kjit::Errc::compile, "log text", 0}, true, false};
    auto outcome = kjit::batch::worker_protocol::decode_outcome(kjit::batch::worker_protocol::encode_outcome(failed));
    ASSERT_TRUE(outcome);
    ASSERT_FALSE(outcome->output);
    EXPECT_EQ(outcome->output.error().code, kjit::Errc::compile);
    EXPECT_EQ(outcome->output.error().message, "log text");
    EXPECT_TRUE(outcome->used_pch);
    std::string bad_flag = kjit::batch::worker_protocol::encode_outcome(failed);
    bad_flag[0] = 2;  // neither 0 nor 1
    EXPECT_FALSE(kjit::batch::worker_protocol::decode_outcome(bad_flag));
}

}  // namespace
