// fork() while libkjit is in use, as Python's multiprocessing does by default on Linux: a forked
// child must start with clean in-process state. Every case forks for real, while another thread
// of the parent is inside libkjit (a compile, a batch, the driver's cuInit, a log write, a wait
// on the cache lock), and gives the child a deadline: a child that deadlocks on state copied
// from the parent is killed and reported as hung, never left to hang the test.
//
// Through libkjit.so, against the driver test double (KJIT_LIBCUDA), which forgets the parent's
// driver state in a child as CUDA does. The cache lock case uses the internal library.
#include "kjit/kjit.h"

#include "batch_support.hpp"
#include "c_api_support.hpp"
#include "compile/compiler.hpp"
#include "store/cache_eviction.hpp"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
// Some children here start threads (a batch's workers) although their parent had several:
// TSan allows that only with die_after_fork=0 (it warns that such a child may deadlock in its
// own runtime; none has here).
extern "C" const char *__tsan_default_options() { return "die_after_fork=0"; }
#endif

using namespace kjit_test;

namespace {

using Clock = std::chrono::steady_clock;

// How long a child may take: its compiles run NVRTC on a machine that may be busy.
constexpr std::chrono::seconds kChildDeadline{90};

struct ChildEnd {
    bool hung = false;  // still running at the deadline (then killed)
    int status = 0;     // waitpid's
    bool ok() const { return !hung && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

std::string describe(const ChildEnd &end) {
    if (end.hung) {
        return "the child hung (still running after " + std::to_string(kChildDeadline.count()) +
               " s, killed): it waited on state copied from the parent";
    }
    if (WIFSIGNALED(end.status)) return "the child was killed by signal " + std::to_string(WTERMSIG(end.status));
    return "the child exited with " + std::to_string(WEXITSTATUS(end.status)) + " (its stderr says why)";
}

// Waits for child `pid` until the deadline; kills it then.
ChildEnd wait_for_child(pid_t pid) {
    ChildEnd end;
    const auto until = Clock::now() + kChildDeadline;
    for (;;) {
        const pid_t r = ::waitpid(pid, &end.status, WNOHANG);
        if (r == pid) return end;
        if (r < 0) {
            end.status = -1;
            return end;
        }
        if (Clock::now() > until) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &end.status, 0);
            end.hung = true;
            return end;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

// In a child: a SIGALRM backstop a little after the parent's deadline, should the parent die.
void arm_child_backstop() { ::alarm(static_cast<unsigned>(kChildDeadline.count()) + 30); }

// Runs `body` in a forked child, which exits with its return value (no destructors, no gtest).
ChildEnd run_forked(const std::function<int()> &body) {
    // The child's TMPDIR is a folder of the parent's, removed after it: a child ends with _exit,
    // which runs no atexit handler, so the root of its PCH folders (kjit-pch-<pid>-*) would stay
    // in the run's TMPDIR. Set in the child (one thread), never in the parent, whose threads may
    // be reading the environment.
    TempDir child_tmp;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        ADD_FAILURE() << "fork: " << std::strerror(errno);
        return ChildEnd{false, -1};
    }
    if (pid == 0) {
        ::setenv("TMPDIR", child_tmp.path().c_str(), 1);
        arm_child_backstop();
        const int rc = body();
        std::fflush(nullptr);
        ::_exit(rc);
    }
    return wait_for_child(pid);
}

// A check in a child: prints what failed to stderr and makes the child exit 1.
#define CHILD_CHECK(cond, what)                                                                                        \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            std::fprintf(stderr, "child %d: %s:%d: %s: %s\n", static_cast<int>(::getpid()), __FILE__, __LINE__, #cond, \
                         std::string(what).c_str());                                                                   \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

kjit_stats stats() {
    kjit_stats s = KJIT_STATS_INIT;
    kjit_get_stats(&s);
    return s;
}

bool wait_until(const std::function<bool()> &done, std::chrono::seconds limit = std::chrono::seconds(120)) {
    const auto until = Clock::now() + limit;
    while (!done()) {
        if (Clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// kjit_compile into `cache` (sm_90); "" with the error in *error on failure.
std::string compile(const std::string &cache, const std::string &source, const char *keyword = "gemm",
                    const char *name_expression = nullptr, std::string *error = nullptr,
                    std::uint64_t max_cache_size = 0) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.name_expression = name_expression;
    o.max_cache_size = max_cache_size;
    char path[4096];
    const kjit_status st = kjit_compile(source.c_str(), keyword, &o, path, sizeof path, nullptr);
    if (st != KJIT_OK) {
        if (error) *error = std::string(kjit_status_string(st)) + ": " + kjit_last_error();
        return "";
    }
    return path;
}

std::string resolve(const std::string &path, const char *keyword = "gemm") {
    char name[512];
    const kjit_status st = kjit_resolve_name(path.c_str(), keyword, name, sizeof name, nullptr);
    return st == KJIT_OK ? std::string(name)
                         : std::string("<") + kjit_status_string(st) + ": " + kjit_last_error() + ">";
}

// A source NVRTC takes a while over (hundreds of instantiations): a thread compiling it stays
// inside the compile long enough to fork meanwhile.
std::string slow_source(int salt, int instantiations = 300) {
    std::string s =
        "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N + " + std::to_string(salt) + "; }\n";
    for (int i = 0; i < instantiations; ++i)
        s += "template __global__ void gemm<" + std::to_string(i) + ">(float *);\n";
    return s;
}

// The fds of this process open on a file named `name`.
int fds_open_on(const std::string &name) {
    int n = 0;
    DIR *d = ::opendir("/proc/self/fd");
    if (!d) return -1;
    while (const dirent *e = ::readdir(d)) {
        char target[4096];
        const std::string link = std::string("/proc/self/fd/") + e->d_name;
        const ssize_t len = ::readlink(link.c_str(), target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = '\0';
        const std::string t(target);
        if (t.size() >= name.size() && t.compare(t.size() - name.size(), name.size(), name) == 0) ++n;
    }
    ::closedir(d);
    return n;
}

}  // namespace

// (a) A thread of the parent is inside the compile of key K (NVRTC running, K in the in-flight
// table) when the parent forks. The child compiles K: it must not wait for a compile that has no
// thread in it, and must get a complete entry with the right kernel.
TEST(Fork, ChildCompilesTheKeyAParentThreadIsCompiling) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string source = slow_source(1);
    const kjit_stats before = stats();
    std::string parent_path, parent_error;
    std::thread compiling([&] { parent_path = compile(cache, source, "gemm", "gemm<7>", &parent_error); });
    // nvrtc_compiles counts just before NVRTC starts, inside the single-flight.
    ASSERT_TRUE(wait_until([&] { return stats().nvrtc_compiles > before.nvrtc_compiles; }));
    const ChildEnd end = run_forked([&]() -> int {
        const kjit_stats s0 = stats();
        std::string error;
        const std::string path = compile(cache, source, "gemm", "gemm<7>", &error);
        CHILD_CHECK(!path.empty(), error);
        const kjit_stats s1 = stats();
        CHILD_CHECK(s1.compile_shared_waits == s0.compile_shared_waits, "the child shared the parent's compile");
        CHILD_CHECK(resolve(path) == "_Z4gemmILi7EEvPf", resolve(path));
        // Loading checks the cubin's bytes against the entry's manifest: a complete entry.
        kjit_kernel *k = nullptr;
        CHILD_CHECK(kjit_load_cached(path.c_str(), "gemm", &k) == KJIT_OK, kjit_last_error());
        CHILD_CHECK(std::string(kjit_kernel_name(k)) == "_Z4gemmILi7EEvPf", kjit_kernel_name(k));
        kjit_kernel_release(k);
        return 0;
    });
    compiling.join();
    EXPECT_TRUE(end.ok()) << describe(end);
    ASSERT_FALSE(parent_path.empty()) << parent_error;
    EXPECT_EQ(resolve(parent_path), "_Z4gemmILi7EEvPf");
}

// fork() waits for NVRTC calls in flight (NVRTC holds a lock of its own inside a compile), but
// not for ever: a child forked when the wait ran out cannot use NVRTC, and says so at once
// instead of waiting for a lock no thread of its own will let go. Internal library: its own
// compiler module, with a short wait.
TEST(Fork, ChildForkedWhenTheNvrtcWaitRanOutFailsItsCompilesAtOnce) {
    kjit::compile::compiler::set_fork_wait(std::chrono::milliseconds(100));
    kjit::compile::compiler::Program slow;
    slow.source = slow_source(2, 2000);
    slow.options = {"-arch=sm_90"};
    std::atomic<bool> started{false}, finished{false};
    std::thread compiling([&] {
        started = true;
        (void)kjit::compile::compiler::compile(slow);
        finished = true;
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside NVRTC by now
    const ChildEnd end = run_forked([&]() -> int {
        kjit::compile::compiler::Program quick;
        quick.source = sources::kPlain;
        quick.options = {"-arch=sm_90"};
        const auto t0 = Clock::now();
        auto r = kjit::compile::compiler::compile(quick);
        CHILD_CHECK(!r, "NVRTC used in a child forked while it was busy");
        CHILD_CHECK(r.error().code == kjit::Errc::nvrtc, r.error().message);
        CHILD_CHECK(r.error().message.find("forked") != std::string::npos, r.error().message);
        CHILD_CHECK(Clock::now() - t0 < std::chrono::seconds(1), "it took a while to say so");
        return 0;
    });
    const bool compile_outlived_the_fork = !finished.load();
    compiling.join();
    kjit::compile::compiler::set_fork_wait(std::chrono::seconds(120));
    if (!compile_outlived_the_fork) GTEST_SKIP() << "the compile was over before the child was: no telling";
    EXPECT_TRUE(end.ok()) << describe(end);
    // The parent compiles on.
    kjit::compile::compiler::Program quick;
    quick.source = sources::kPlain;
    quick.options = {"-arch=sm_90"};
    EXPECT_TRUE(kjit::compile::compiler::compile(quick).ok());
}

// (b) The parent loaded a cubin; the child loads the same path. Its load must go to the driver
// again (the child's CUDA has none of the parent's libraries), after initialising the driver in
// the child. The parent's handle, still in the child's memory, keeps its name but hands out no
// driver handle, and releasing it there unloads nothing (the library is the parent's).
TEST(Fork, ChildLoadReachesTheDriverAfresh) {
    TempDir dir;
    const std::string path = compile_through_c_api(dir, sources::kTemplateOne, "tmpl");
    ASSERT_FALSE(path.empty());
    kjit_kernel *parent = nullptr;
    ASSERT_EQ(kjit_load_cached(path.c_str(), "tmpl", &parent), KJIT_OK) << kjit_last_error();
    void *const parent_library = kjit_kernel_culibrary(parent);
    void *const parent_kernel = kjit_kernel_cukernel(parent);
    const ChildEnd end = run_forked([&]() -> int {
        const fake_cuda_counters c0 = fake_cuda().counters();
        const kjit_stats s0 = stats();
        kjit_kernel *k = nullptr;
        CHILD_CHECK(kjit_load_cached(path.c_str(), "tmpl", &k) == KJIT_OK, kjit_last_error());
        const fake_cuda_counters c1 = fake_cuda().counters();
        const kjit_stats s1 = stats();
        CHILD_CHECK(c1.init_calls == c0.init_calls + 1, "the child did not call cuInit");
        CHILD_CHECK(c1.library_loads == c0.library_loads + 1, "no fresh cuLibraryLoadData in the child");
        CHILD_CHECK(s1.load_reuses == s0.load_reuses, "served from the parent's registry");
        CHILD_CHECK(s1.driver_loads == s0.driver_loads + 1, "driver_loads did not count the child's load");
        CHILD_CHECK(kjit_kernel_culibrary(k) != parent_library, "the child got the parent's CUlibrary");
        const char *name = fake_cuda().kernel_name(kjit_kernel_cukernel(k));
        CHILD_CHECK(name && std::string(name) == "_Z4tmplILi4EEvPf", "the child's CUkernel is not the child driver's");
        fake_cuda().make_context_current(true);
        void *function = nullptr;
        CHILD_CHECK(kjit_kernel_cufunction(k, &function) == KJIT_OK, kjit_last_error());

        // The parent's handle, as the child sees it.
        CHILD_CHECK(std::string(kjit_kernel_name(parent)) == "_Z4tmplILi4EEvPf", "name lost");
        CHILD_CHECK(std::string(kjit_kernel_cubin_path(parent)) == path, "path lost");
        CHILD_CHECK(kjit_kernel_culibrary(parent) == nullptr, "the parent's CUlibrary handed out in the child");
        CHILD_CHECK(kjit_kernel_cukernel(parent) == nullptr, "the parent's CUkernel handed out in the child");
        function = reinterpret_cast<void *>(1);
        CHILD_CHECK(kjit_kernel_cufunction(parent, &function) == KJIT_ERROR_DRIVER && function == nullptr,
                    "cufunction of the parent's handle");
        CHILD_CHECK(std::strstr(kjit_last_error(), "fork") != nullptr, kjit_last_error());
        kjit_kernel_release(parent);
        const fake_cuda_counters c2 = fake_cuda().counters();
        CHILD_CHECK(c2.library_unloads == c1.library_unloads, "the child unloaded the parent's library");
        CHILD_CHECK(c2.bad_handles == c0.bad_handles, "the child passed the parent's handles to its driver");
        kjit_kernel_release(k);
        CHILD_CHECK(fake_cuda().counters().library_unloads == c2.library_unloads + 1, "the child's own library stays");
        fake_cuda().make_context_current(false);
        return 0;
    });
    EXPECT_TRUE(end.ok()) << describe(end);
    // The parent's handle is untouched by the child.
    EXPECT_EQ(kjit_kernel_culibrary(parent), parent_library);
    EXPECT_STREQ(fake_cuda().kernel_name(parent_kernel), "_Z4tmplILi4EEvPf");
    kjit_kernel_release(parent);
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
}

// What the driver says about a forked child reaches the caller: a child whose cuInit fails (as
// CUDA may refuse a child whose parent used the GPU) gets KJIT_ERROR_DRIVER_UNAVAILABLE with
// the driver's words, never the parent's loaded library.
TEST(Fork, ChildGetsItsOwnDriversAnswer) {
    TempDir dir;
    const std::string path = compile_through_c_api(dir, sources::kPlain, "plain_kernel");
    ASSERT_FALSE(path.empty());
    kjit_kernel *parent = nullptr;
    ASSERT_EQ(kjit_load_cached(path.c_str(), "plain_kernel", &parent), KJIT_OK) << kjit_last_error();
    fake_cuda().set_child_init_result(3);  // CUDA_ERROR_NOT_INITIALIZED
    const ChildEnd end = run_forked([&]() -> int {
        kjit_kernel *k = reinterpret_cast<kjit_kernel *>(1);
        const kjit_status st = kjit_load_cached(path.c_str(), "plain_kernel", &k);
        CHILD_CHECK(st == KJIT_ERROR_DRIVER_UNAVAILABLE,
                    std::string(kjit_status_string(st)) + ": " + kjit_last_error());
        CHILD_CHECK(k == nullptr, "a handle on failure");
        CHILD_CHECK(std::strstr(kjit_last_error(), "cuInit(0) failed: CUDA_ERROR_NOT_INITIALIZED"), kjit_last_error());
        // Compiling and resolving need no driver.
        char name[256];
        CHILD_CHECK(kjit_resolve_name(path.c_str(), "plain_kernel", name, sizeof name, nullptr) == KJIT_OK,
                    kjit_last_error());
        return 0;
    });
    fake_cuda().set_child_init_result(-1);
    EXPECT_TRUE(end.ok()) << describe(end);
    kjit_kernel *again = nullptr;
    EXPECT_EQ(kjit_load_cached(path.c_str(), "plain_kernel", &again), KJIT_OK) << kjit_last_error();
    kjit_kernel_release(again);
    kjit_kernel_release(parent);
}

// A thread of the parent is inside libkjit's driver initialisation (in cuInit, which the double
// makes slow) when the parent forks: the child initialises its own driver instead of waiting for
// an initialisation that has no thread in it.
TEST(Fork, ChildInitialisesTheDriverWhileAParentThreadIsInCuInit) {
    if (stats().loads != 0 || stats().driver_loads != 0) {
        GTEST_SKIP() << "libkjit has used the driver already in this process (run this test alone, as ctest does)";
    }
    TempDir dir;
    const std::string path = compile_through_c_api(dir, sources::kPlain, "plain_kernel");
    ASSERT_FALSE(path.empty());
    // NVRTC calls cuInit itself when it finds a libcuda loaded: count from here.
    const auto base = fake_cuda().counters().init_calls;
    fake_cuda().set_init_delay_ms(1500);
    kjit_status parent_status = KJIT_ERROR_INTERNAL;
    std::thread loading([&] {
        kjit_kernel *k = nullptr;
        parent_status = kjit_load_cached(path.c_str(), "plain_kernel", &k);
        kjit_kernel_release(k);
    });
    ASSERT_TRUE(wait_until([&] { return fake_cuda().counters().init_calls == base + 1; }));
    const ChildEnd end = run_forked([&]() -> int {
        fake_cuda().set_init_delay_ms(0);
        kjit_kernel *k = nullptr;
        CHILD_CHECK(kjit_load_cached(path.c_str(), "plain_kernel", &k) == KJIT_OK, kjit_last_error());
        CHILD_CHECK(fake_cuda().counters().init_calls == base + 2, "the child did not initialise its driver");
        kjit_kernel_release(k);
        return 0;
    });
    loading.join();
    fake_cuda().set_init_delay_ms(0);
    EXPECT_TRUE(end.ok()) << describe(end);
    EXPECT_EQ(parent_status, KJIT_OK) << kjit_last_error();
}

// (c) The parent forks while a batch of its compiles on its workers; the child's batch of the
// same kernels (and one more) compiles on workers of its own and gets every item.
TEST(Fork, ChildBatchWorksAfterAForkDuringAParentBatch) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    std::vector<std::string> srcs;
    for (int i = 0; i < 5; ++i) srcs.push_back(sources::numbered_gemm(300 + i));
    kjit_compile_options co = KJIT_COMPILE_OPTIONS_INIT;
    co.cache_dir = cache.c_str();
    co.arch = "sm_90";
    kjit_batch_options bo = KJIT_BATCH_OPTIONS_INIT;
    bo.workers = 2;
    bo.pch = KJIT_PCH_ON;
    const kjit_stats before = stats();
    BatchOutcome parent;
    std::thread batch([&] { parent = compile_batch(srcs, "gemm", co, &bo); });
    ASSERT_TRUE(wait_until([&] { return stats().nvrtc_compiles > before.nvrtc_compiles; }));
    const ChildEnd end = run_forked([&]() -> int {
#if defined(__SANITIZE_THREAD__)
        // glibc gives a child's new thread the descriptor (so the pthread_t) of a parent's thread
        // whose stack it cached, which TSan still counts as that thread ("dup thread with used
        // id"). Larger stacks than the parent's threads had are never taken from that cache.
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, std::size_t{64} << 20);
        pthread_setattr_default_np(&attr);
        pthread_attr_destroy(&attr);
#endif
        std::vector<std::string> mine = srcs;
        mine.push_back(sources::numbered_gemm(305));
        const BatchOutcome r = compile_batch(mine, "gemm", co, &bo);
        CHILD_CHECK(r.overall == KJIT_OK, std::string(kjit_status_string(r.overall)) + ": " + kjit_last_error());
        for (std::size_t i = 0; i < mine.size(); ++i) {
            CHILD_CHECK(resolve(r.cubin_paths[i]) == sources::numbered_gemm_name(300 + static_cast<int>(i)),
                        r.cubin_paths[i] + ": " + resolve(r.cubin_paths[i]));
        }
        return 0;
    });
    batch.join();
    EXPECT_TRUE(end.ok()) << describe(end);
    ASSERT_EQ(parent.overall, KJIT_OK);
    for (std::size_t i = 0; i < srcs.size(); ++i) {
        EXPECT_EQ(resolve(parent.cubin_paths[i]), sources::numbered_gemm_name(300 + static_cast<int>(i)));
    }
}

namespace {

struct ForkInCallback {
    pid_t child = -1;  // in the parent: the child forked from the callback
    bool in_child = false;
    std::size_t reported = 0;
};

int fork_on_first_report(void *user_data, size_t, size_t, size_t, kjit_status, const char *) {
    auto *f = static_cast<ForkInCallback *>(user_data);
    ++f->reported;
    if (f->reported == 1 && !f->in_child) {
        std::fflush(nullptr);
        const pid_t pid = ::fork();
        if (pid == 0) {
            arm_child_backstop();
            f->in_child = true;
        } else {
            f->child = pid;
        }
    }
    return 0;
}

}  // namespace

// The progress callback forks (runs a subprocess the Python way, say) while the batch's workers
// compile. The child returns from the callback into a batch whose workers it does not have: it
// must finish the batch on its own thread, every item reported, rather than wait for them.
TEST(Fork, ChildForkedFromABatchProgressCallbackFinishesTheBatch) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    std::vector<std::string> srcs;
    for (int i = 0; i < 6; ++i) srcs.push_back(sources::numbered_gemm(320 + i));
    kjit_compile_options co = KJIT_COMPILE_OPTIONS_INIT;
    co.cache_dir = cache.c_str();
    co.arch = "sm_90";
    ForkInCallback f;
    kjit_batch_options bo = KJIT_BATCH_OPTIONS_INIT;
    bo.workers = 2;
    bo.pch = KJIT_PCH_OFF;
    bo.progress = fork_on_first_report;
    bo.progress_user_data = &f;
    const BatchOutcome r = compile_batch(srcs, "gemm", co, &bo);
    if (f.in_child) {
        int rc = r.overall == KJIT_OK && f.reported == srcs.size() ? 0 : 1;
        if (rc != 0) {
            std::fprintf(stderr, "child: batch %s, %zu of %zu reported: %s\n", kjit_status_string(r.overall),
                         f.reported, srcs.size(), kjit_last_error());
        }
        for (std::size_t i = 0; rc == 0 && i < srcs.size(); ++i) {
            if (resolve(r.cubin_paths[i]) != sources::numbered_gemm_name(320 + static_cast<int>(i))) {
                std::fprintf(stderr, "child: item %zu: %s\n", i, resolve(r.cubin_paths[i]).c_str());
                rc = 1;
            }
        }
        std::fflush(nullptr);
        ::_exit(rc);
    }
    ASSERT_GT(f.child, 0);
    const ChildEnd end = wait_for_child(f.child);
    EXPECT_TRUE(end.ok()) << describe(end);
    EXPECT_EQ(r.overall, KJIT_OK);
    EXPECT_EQ(f.reported, srcs.size());
}

// A parent thread waits for the cache lock (prune, blocked by another process) when the parent
// forks. The child must not keep the lock's file open: it would hold the lock for as long as it
// lives once the parent's thread got it, and every prune, clear and eviction of the cache would
// wait for (or skip) a process that does not know it holds anything.
TEST(Fork, ChildDoesNotKeepTheCacheLockOpen) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ASSERT_EQ(::mkdir(cache.c_str(), 0700), 0);
    const std::string lock = cache + "/.kjit-lock";
    // Another process holds the lock until told to let go.
    int held[2], release[2];
    ASSERT_EQ(::pipe(held), 0);
    ASSERT_EQ(::pipe(release), 0);
    const pid_t holder = ::fork();
    ASSERT_GE(holder, 0);
    if (holder == 0) {
        const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0600);
        if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
        char byte = 'h';
        if (::write(held[1], &byte, 1) != 1 || ::read(release[0], &byte, 1) != 1) ::_exit(1);
        ::_exit(0);
    }
    char byte = 0;
    ASSERT_EQ(::read(held[0], &byte, 1), 1);
    ASSERT_EQ(fds_open_on("/.kjit-lock"), 0);

    std::thread pruning([&] { (void)kjit::store::cache_eviction::prune(cache, {}); });
    ASSERT_TRUE(wait_until([&] { return fds_open_on("/.kjit-lock") == 1; }));  // opened, waiting in flock
    int go[2], report[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(report), 0);
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        arm_child_backstop();
        const char open_fds = static_cast<char>('0' + fds_open_on("/.kjit-lock"));
        (void)!::write(report[1], &open_fds, 1);
        char b = 0;
        (void)!::read(go[0], &b, 1);  // lives on meanwhile, as a pool worker would
        ::_exit(open_fds == '0' ? 0 : 1);
    }
    char child_fds = 0;
    ASSERT_EQ(::read(report[0], &child_fds, 1), 1);
    EXPECT_EQ(child_fds, '0') << "the child has the parent's cache lock file open";

    // The holder lets go; the parent's prune takes the lock, finishes and closes it.
    ASSERT_EQ(::write(release[1], "r", 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(holder, &status, 0), holder);
    pruning.join();
    // With the child alive, the lock is free.
    const int fd = ::open(lock.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0)
        << "the cache lock is still held, by the child: " << std::strerror(errno);
    ::close(fd);
    ASSERT_EQ(::write(go[1], "g", 1), 1);
    const ChildEnd end = wait_for_child(child);
    EXPECT_TRUE(end.ok()) << describe(end);
    for (int p : {held[0], held[1], release[0], release[1], go[0], go[1], report[0], report[1]}) ::close(p);
}

// A log line written in a child names the child's thread, not the thread of the parent that
// forked (spdlog keeps a thread's id in a thread_local, which a child inherits).
TEST(Fork, ChildLogLinesNameTheChildsThread) {
    ::setenv("KJIT_LOG_LEVEL", "debug", 1);
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string path = compile(cache, sources::numbered_gemm(340));
    ASSERT_FALSE(path.empty());
    // The main thread logs once before the fork (a hit), so its id is known to the logger.
    const int saved = ::dup(2);
    const std::string parent_log = dir.file("parent.log");
    const int pfd = ::open(parent_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(pfd, 0);
    ::dup2(pfd, 2);
    ::close(pfd);
    const std::string again = compile(cache, sources::numbered_gemm(340));
    ::dup2(saved, 2);
    ::close(saved);
    if (read_file(parent_log).find("cache hit") == std::string::npos) {
        GTEST_SKIP() << "libkjit's logger was made before KJIT_LOG_LEVEL was set (run this test alone, as ctest does)";
    }
    const std::string child_log = dir.file("child.log");
    const ChildEnd end = run_forked([&]() -> int {
        const int fd = ::open(child_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHILD_CHECK(fd >= 0, "open");
        ::dup2(fd, 2);
        ::close(fd);
        CHILD_CHECK(!compile(cache, sources::numbered_gemm(340)).empty(), "compile");
        const std::string text = read_file(child_log);
        const std::string me = std::to_string(::getpid());
        // "[kjit D <pid>:<thread id>] ...": in the child's only thread, the thread id is its pid.
        CHILD_CHECK(text.find("] cache hit") != std::string::npos, text);
        CHILD_CHECK(text.find("[kjit D " + me + ":" + me + "] cache hit") != std::string::npos, text);
        return 0;
    });
    EXPECT_TRUE(end.ok()) << describe(end) << "\n" << read_file(child_log);
}

namespace {

// Points fd 2 at a pipe that a thread of its own drains slowly, so that whoever logs spends its
// time inside the log write, holding the logger's lock (and any lock it logs under). Restores
// fd 2 on destruction.
class SlowStderr {
public:
    SlowStderr() {
        saved_ = ::dup(2);
        int p[2];
        if (::pipe(p) != 0) std::abort();
        ::dup2(p[1], 2);
        ::close(p[1]);
        read_end_ = p[0];
        drain_ = std::thread([this] {
            char buf[256];
            while (::read(read_end_, buf, sizeof buf) > 0) {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        });
    }
    ~SlowStderr() {
        ::dup2(saved_, 2);  // closes the pipe's last write end: the drain ends
        ::close(saved_);
        drain_.join();
        ::close(read_end_);
    }

private:
    int saved_ = -1;
    int read_end_ = -1;
    std::thread drain_;
};

}  // namespace

// Forks again and again while threads load (first loads, which log under the loader's shard
// lock, and reuses), resolve (also cubins that take no sidecar, through the memo),
// compile hits and misses into a size-limited cache (eviction after each publish) and run
// batches, all logging at debug level into a pipe drained slowly. Whatever libkjit lock a thread
// held at a fork, each child must compile, resolve and load on its own.
TEST(Fork, ChildOfABusyProcessDoesNotDeadlock) {
    ::setenv("KJIT_LOG_LEVEL", "debug", 1);
    TempDir dir;
    const std::string cache = dir.file("cache");
    constexpr int kKernels = 4;
    std::vector<std::string> entries;
    for (int i = 0; i < kKernels; ++i) {
        std::string error;
        entries.push_back(compile(cache, sources::numbered_gemm(400 + i), "gemm", nullptr, &error));
        ASSERT_FALSE(entries.back().empty()) << error;
    }
    // Loose cubins that take no sidecar (a folder is in its place, root or not): their names come
    // from the resolver's memo.
    const std::string no_sidecars = dir.file("no-sidecars");
    ASSERT_EQ(::mkdir(no_sidecars.c_str(), 0700), 0);
    for (int i = 0; i < kKernels; ++i) {
        const std::string cubin = no_sidecars + "/k" + std::to_string(i) + ".cubin";
        write_file(cubin, read_file(entries[static_cast<std::size_t>(i)]));
        ASSERT_EQ(::mkdir((cubin + ".name").c_str(), 0700), 0);
    }
    const std::string loose = dir.file("loose");
    ASSERT_EQ(::mkdir(loose.c_str(), 0700), 0);

    std::atomic<bool> stop{false};
    std::atomic<int> sequence{0};
    std::vector<std::thread> threads;
    {
        SlowStderr slow;
        for (int t = 0; t < 4; ++t) {
            threads.emplace_back([&, t] {
                for (int n = 0; !stop; ++n) {
                    const int i = n % kKernels;
                    if (t <= 1) {  // first loads of fresh copies, then a reuse
                        const std::string copy = loose + "/t" + std::to_string(t) + "-" + std::to_string(n) + ".cubin";
                        write_file(copy, read_file(no_sidecars + "/k" + std::to_string(i) + ".cubin"));
                        kjit_kernel *a = nullptr, *b = nullptr;
                        (void)kjit_load_cached(copy.c_str(), "gemm", &a);
                        (void)kjit_load_cached(copy.c_str(), "gemm", &b);
                        kjit_kernel_release(a);
                        kjit_kernel_release(b);
                        ::unlink(copy.c_str());
                        ::unlink((copy + ".name").c_str());
                    } else if (t == 2) {  // hits, resolves, memo
                        (void)compile(cache, sources::numbered_gemm(400 + i));
                        (void)resolve(entries[static_cast<std::size_t>(i)]);
                        (void)resolve(no_sidecars + "/k" + std::to_string(i) + ".cubin");
                        kjit_kernel *k = nullptr;
                        (void)kjit_load_cached(entries[static_cast<std::size_t>(i)].c_str(), "gemm", &k);
                        kjit_kernel_release(k);
                    } else {  // misses into a size-limited cache, and small batches with PCH
                        const int s = sequence++;
                        (void)compile(cache, sources::numbered_gemm(1000 + s), "gemm", nullptr, nullptr, 64 * 1024);
                        if (n % 2 == 1) {
                            kjit_compile_options co = KJIT_COMPILE_OPTIONS_INIT;
                            co.cache_dir = cache.c_str();
                            co.arch = "sm_90";
                            kjit_batch_options bo = KJIT_BATCH_OPTIONS_INIT;
                            bo.workers = 2;
                            bo.pch = KJIT_PCH_ON;
                            (void)compile_batch({sources::numbered_gemm(2000 + s), sources::numbered_gemm(400 + i)},
                                                "gemm", co, &bo);
                        }
                    }
                }
            });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        for (int f = 0; f < 6; ++f) {
            std::this_thread::sleep_for(std::chrono::milliseconds(40));
            const std::string child_log = dir.file("child" + std::to_string(f) + ".log");
            const ChildEnd end = run_forked([&]() -> int {
                // Nothing drains the pipe in the child: log into a file.
                const int fd = ::open(child_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
                CHILD_CHECK(fd >= 0, "open");
                ::dup2(fd, 2);
                ::close(fd);
                std::string error;
                const std::string hit = compile(cache, sources::numbered_gemm(400), "gemm", nullptr, &error);
                CHILD_CHECK(!hit.empty(), error);
                const std::string miss = compile(cache, sources::numbered_gemm(3000 + f), "gemm", nullptr, &error);
                CHILD_CHECK(!miss.empty(), error);
                CHILD_CHECK(resolve(miss) == sources::numbered_gemm_name(3000 + f), resolve(miss));
                for (int i = 0; i < kKernels; ++i) {
                    const std::string cubin = no_sidecars + "/k" + std::to_string(i) + ".cubin";
                    CHILD_CHECK(resolve(cubin) == sources::numbered_gemm_name(400 + i), resolve(cubin));
                }
                // First loads of files of its own, which spread over the loader's shards.
                for (int n = 0; n < 24; ++n) {
                    const std::string copy = loose + "/child" + std::to_string(f) + "-" + std::to_string(n) + ".cubin";
                    write_file(copy, read_file(no_sidecars + "/k" + std::to_string(n % kKernels) + ".cubin"));
                    kjit_kernel *k = nullptr;
                    CHILD_CHECK(kjit_load_cached(copy.c_str(), "gemm", &k) == KJIT_OK, kjit_last_error());
                    CHILD_CHECK(std::string(kjit_kernel_name(k)) == sources::numbered_gemm_name(400 + n % kKernels),
                                kjit_kernel_name(k));
                    kjit_kernel_release(k);
                }
                return 0;
            });
            EXPECT_TRUE(end.ok()) << "fork " << f << ": " << describe(end) << "\n" << read_file(child_log);
            if (end.hung) break;
        }
        stop = true;
        for (std::thread &t : threads) t.join();
    }
    EXPECT_GT(stats().memo_hits, 0u);
}

// The header watch's inotify instance (dependency_watch.hpp) is shared with a forked child: a
// child that read from it would take events its parent needs, and the parent would go on proving
// hits on a header the child edited. The child closes its copy and watches anew.
TEST(Fork, ChildTakesNoHeaderWatchEventFromItsParent) {
    TempDir dir;
    write_file(dir.file("cfg.h"), "#define CFG 1\n");
    const std::string source = "#include \"" + dir.file("cfg.h") +
                               "\"\ntemplate <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                               "template __global__ void gemm<CFG>(float *);\n";
    const std::string cache = dir.file("cache");
    for (int i = 0; i < 3; ++i) ASSERT_EQ(resolve(compile(cache, source)), "_Z4gemmILi1EEvPf");  // watched, proven
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        {
            // In place (same inode), as an editor that truncates and writes.
            std::fstream out(dir.file("cfg.h"), std::ios::in | std::ios::out | std::ios::trunc);
            out << "#define CFG 2\n";
        }
        for (int i = 0; i < 3; ++i) {
            if (resolve(compile(cache, source)) != "_Z4gemmILi2EEvPf") std::_Exit(1);
        }
        std::_Exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's compile was stale";
    EXPECT_EQ(resolve(compile(cache, source)), "_Z4gemmILi2EEvPf") << "the parent missed the child's edit";
}
