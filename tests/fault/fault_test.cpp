// Fault injection through libkjit.so: with tests/fault/fault_shim.c preloaded, every open,
// write, fsync, close, mkdir and rename of a publish (and of a sidecar rewrite) is failed in
// turn with ENOSPC, EACCES, EROFS, EIO and EINTR (the fsyncs with KJIT_DURABILITY=entry, the
// only mode that makes any). Each call must return the documented status (kjit_compile:
// KJIT_ERROR_IO naming the file, or success where EINTR is retried; kjit_resolve_name: success,
// as sidecar writes never fail it), nothing partial may become visible and no temp file may
// remain. Then writers are killed with SIGKILL at random points and the cache must still be
// correct; and a batch whose publishes hit a full disk fails only those items. Entries torn as
// a power cut leaves them (a file empty, cut, or the right size of zeros) are refused and
// rebuilt by the next boot's lookup (the shim's kjit_fault_reboot), whichever mode published
// them; a miss makes no fsync with KJIT_DURABILITY unset or none, two with entry. Prints the
// counts of faults injected, by kind.
#include "kjit/kjit.h"
#include "kjit/kjit_cache.h"

#include "batch_support.hpp"
#include "cubin/sidecar.hpp"
#include "test_support.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

using namespace kjit_test;

namespace {

struct Shim {
    void (*arm)(const char *, int, const char *, int, int) = nullptr;
    void (*disarm)() = nullptr;
    int (*injected)() = nullptr;
    int (*fsyncs)() = nullptr;
    void (*reboot)() = nullptr;
};

const Shim &shim() {
    static const Shim s = [] {
        Shim x;
        x.arm = reinterpret_cast<decltype(x.arm)>(::dlsym(RTLD_DEFAULT, "kjit_fault_arm"));
        x.disarm = reinterpret_cast<decltype(x.disarm)>(::dlsym(RTLD_DEFAULT, "kjit_fault_disarm"));
        x.injected = reinterpret_cast<decltype(x.injected)>(::dlsym(RTLD_DEFAULT, "kjit_fault_injected"));
        x.fsyncs = reinterpret_cast<decltype(x.fsyncs)>(::dlsym(RTLD_DEFAULT, "kjit_fault_fsyncs"));
        x.reboot = reinterpret_cast<decltype(x.reboot)>(::dlsym(RTLD_DEFAULT, "kjit_fault_reboot"));
        return x;
    }();
    return s;
}

const char *const kCalls[] = {"open", "write", "fsync", "close", "mkdir", "rename"};
const std::pair<int, const char *> kErrnos[] = {
    {ENOSPC, "ENOSPC"}, {EACCES, "EACCES"}, {EROFS, "EROFS"}, {EIO, "EIO"}, {EINTR, "EINTR"}};

std::map<std::string, int> &fault_counts() {
    static std::map<std::string, int> counts;
    return counts;
}

// KJIT_DURABILITY set to `mode` for the scope, then unset (the default).
struct Durability {
    explicit Durability(const char *mode) { ::setenv("KJIT_DURABILITY", mode, 1); }
    ~Durability() { ::unsetenv("KJIT_DURABILITY"); }
    Durability(const Durability &) = delete;
    Durability &operator=(const Durability &) = delete;
};
const char *const kDurabilities[] = {"none", "entry"};

std::string source_of(int i) { return kjit_test::sources::numbered_gemm(i); }
std::string name_of(int i) { return kjit_test::sources::numbered_gemm_name(i); }

kjit_status compile_into(const std::string &cache, int i, std::string *path_out = nullptr,
                         std::uint64_t max_cache_size = 0, const char *program_name = nullptr) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.max_cache_size = max_cache_size;
    o.program_name = program_name;
    char path[4096];
    const std::string src = source_of(i);
    const kjit_status st = kjit_compile(src.c_str(), "gemm", &o, path, sizeof path, nullptr);
    if (st == KJIT_OK && path_out) *path_out = path;
    return st;
}

// Every entry under `cache` is complete and names its kernel; nothing in transit or temp is
// left. Returns the number of entries.
int check_cache(const std::string &cache, bool allow_transit = false) {
    int entries = 0;
    for (const std::string &shard : list_dir(cache)) {
        if (shard[0] == '.') continue;  // .kjit-lock, .kjit-usage
        for (const std::string &e : list_dir(cache + "/" + shard)) {
            const std::string path = cache + "/" + shard + "/" + e;
            if (e[0] == '.') {
                EXPECT_TRUE(allow_transit) << "left behind: " << path;
                continue;
            }
            ++entries;
            for (const char *f : {"kernel.cubin", "kernel.cubin.name", "manifest.txt", "source.cu"}) {
                EXPECT_TRUE(exists(path + "/" + f)) << path << " lacks " << f;
            }
            for (const std::string &f : list_dir(path))
                EXPECT_EQ(f.find(".tmp-"), std::string::npos) << path << "/" << f;
            const auto sc = kjit::cubin::sidecar::read(path + "/kernel.cubin.name");
            EXPECT_EQ(sc.problem, kjit::cubin::sidecar::FileProblem::none) << path;
            EXPECT_EQ(sc.rejected_lines, 0u) << path;
        }
    }
    return entries;
}

}  // namespace

TEST(FaultInjection, TheShimIsPreloaded) {
    ASSERT_NE(shim().arm, nullptr) << "run with LD_PRELOAD=<build>/tests/libkjit_fault_shim.so (ctest does)";
}

namespace {

// Each of `calls` (kCalls' names) of one publish failed in turn with each errno, in the
// durability `mode` set: the documented status, nothing partial, nothing left. Returns the
// number of publishes tried.
int every_failing_call_of_a_publish(const char *mode, const std::vector<const char *> &calls) {
    int runs = 0;
    for (const char *call : calls) {
        for (const auto &[err, err_name] : kErrnos) {
            // Fail the first, then the second, ... matching call, until a publish makes fewer.
            for (int skip = 0; skip < 16; ++skip) {
                TempDir dir;
                const std::string cache = dir.file("cache");
                shim().arm(call, err, cache.c_str(), skip, 1);
                const kjit_status st = compile_into(cache, 0);
                const std::string error = kjit_last_error();
                const int injected = shim().injected();
                shim().disarm();
                ++runs;
                if (injected == 0) {
                    EXPECT_EQ(st, KJIT_OK) << call << " " << err_name << " skip " << skip << ": " << error;
                    break;
                }
                fault_counts()[std::string(call) + " " + err_name + " (" + mode + ")"] += injected;
                const std::string what = std::string(call) + " failing with " + err_name + " (occurrence " +
                                         std::to_string(skip + 1) + ", KJIT_DURABILITY=" + mode + ")";
                if (st != KJIT_OK) {
                    EXPECT_EQ(st, KJIT_ERROR_IO) << what << ": " << error;
                    EXPECT_NE(error.find(cache), std::string::npos) << what << ": " << error;
                    EXPECT_NE(error.find(std::strerror(err)), std::string::npos) << what << ": " << error;
                    EXPECT_EQ(check_cache(cache), 0) << what << ": a failed publish left an entry";
                } else {
                    // Only what may fail without harm: EINTR retried, or a best-effort step.
                    EXPECT_EQ(check_cache(cache), 1) << what;
                }
                // Nothing partial, nothing left; and the next call publishes a correct entry.
                std::string path;
                char name[256] = "";
                if (compile_into(cache, 0, &path) != KJIT_OK) {
                    ADD_FAILURE() << what << ", then: " << kjit_last_error();
                    return runs;
                }
                EXPECT_EQ(kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr), KJIT_OK) << what;
                EXPECT_EQ(std::string(name), name_of(0)) << what;
                EXPECT_EQ(check_cache(cache), 1) << what;
            }
        }
    }
    return runs;
}

}  // namespace

TEST(FaultInjection, EveryFailingCallOfAPublish) {
    ASSERT_NE(shim().arm, nullptr);
    int runs = 0;
    {
        // The default: no fsync at all (DurabilityNoneFsyncsNothing), the fsync runs inject none.
        const Durability none("none");
        runs +=
            every_failing_call_of_a_publish("none", std::vector<const char *>(std::begin(kCalls), std::end(kCalls)));
    }
    {
        // Every other call is the same in both modes: only the fsyncs differ.
        const Durability entry("entry");
        runs += every_failing_call_of_a_publish("entry", {"fsync"});
    }
    EXPECT_GT(runs, 60);
}

// KJIT_DURABILITY decides the fsyncs of a miss: none (the default) makes none, entry two (the
// cubin, then the temp entry folder before the rename), and both publish the same entry.
TEST(FaultInjection, DurabilityDecidesTheFsyncsOfAMiss) {
    ASSERT_NE(shim().fsyncs, nullptr);
    for (const char *mode : {static_cast<const char *>(nullptr), "none", "entry"}) {
        if (mode) ::setenv("KJIT_DURABILITY", mode, 1);
        TempDir dir;
        const std::string cache = dir.file("cache");
        shim().arm("no call", 0, cache.c_str(), 0, 0);  // counts the fsyncs under `cache`, fails nothing
        std::string path;
        EXPECT_EQ(compile_into(cache, 3, &path), KJIT_OK) << kjit_last_error();
        const int fsyncs = shim().fsyncs();
        shim().disarm();
        ::unsetenv("KJIT_DURABILITY");
        const std::string label = mode ? mode : "unset";
        EXPECT_EQ(fsyncs, mode && std::string(mode) == "entry" ? 2 : 0) << "KJIT_DURABILITY=" << label;
        EXPECT_EQ(check_cache(cache), 1) << label;
    }
    ::setenv("KJIT_DURABILITY", "always", 1);
    TempDir dir;
    EXPECT_EQ(compile_into(dir.file("cache"), 3), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("$KJIT_DURABILITY is 'always'"), std::string::npos)
        << kjit_last_error();
    ::unsetenv("KJIT_DURABILITY");
}

namespace {

// What a power cut can leave of a file whose data never reached the disk: its name, and its
// size and mtime as the journal kept them, over bytes that are gone.
enum class Tear { empty, half, zeros };
const std::pair<Tear, const char *> kTears[] = {{Tear::empty, "empty"}, {Tear::half, "half"}, {Tear::zeros, "zeros"}};

// Tears the file at `path` as `tear` says, keeping its mtime (which the journal keeps).
void tear_file(const std::string &path, Tear tear) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    const std::size_t size = static_cast<std::size_t>(st.st_size);
    if (tear == Tear::empty) {
        ASSERT_EQ(::truncate(path.c_str(), 0), 0);
    } else if (tear == Tear::half) {
        ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size / 2)), 0);
    } else {
        write_file(path, std::string(size, '\0'));
    }
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

// A reboot as libkjit sees it (the shim's kjit_fault_reboot), with a pause either side: file
// times come from a coarse clock, up to a tick behind the one the boot is reckoned from.
void reboot() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    shim().reboot();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::uint64_t entries_rebuilt() {
    kjit_stats s = KJIT_STATS_INIT;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_OK);
    return s.entries_rebuilt;
}

// `kjit cache verify` of `cache` exits 0: every entry's cubin is what its manifest recorded.
bool cache_verifies(const std::string &cache) {
    const std::string command = std::string(KJIT_CLI) + " cache verify --cache-dir '" + cache + "' >/dev/null 2>&1";
    return std::system(command.c_str()) == 0;
}

}  // namespace

// A power cut after a publish whose data never reached the disk (a publish without fsync, or a
// file a publish with fsync did not sync: the manifest, the sidecar) leaves files of the right
// names that are empty, short, or the right size of zeros. The next boot's lookup must refuse
// such an entry, rebuild it and serve the right cubin, in both durability modes; the boot is
// simulated by the shim (kjit_fault_reboot: every file written before looks an earlier boot's).
TEST(FaultInjection, EntriesTornByAPowerCutAreRebuiltNeverServed) {
    ASSERT_NE(shim().reboot, nullptr);
    ::setenv("KJIT_HIT_MEMO", "0", 1);  // every lookup goes to the disk, as a new process's would
    int kernel = 100;
    for (const char *mode : kDurabilities) {
        const Durability durability(mode);
        for (const char *file : {"kernel.cubin", "manifest.txt", "kernel.cubin.name"}) {
            for (const auto &[tear, tear_name] : kTears) {
                const std::string what = std::string(file) + " " + tear_name + ", KJIT_DURABILITY=" + mode;
                TempDir dir;
                const std::string cache = dir.file("cache");
                const int k = kernel++;
                std::string path;
                ASSERT_EQ(compile_into(cache, k, &path), KJIT_OK) << what << ": " << kjit_last_error();
                const std::string entry = path.substr(0, path.rfind('/'));
                tear_file(entry + "/" + file, tear);
                reboot();
                const std::uint64_t rebuilt = entries_rebuilt();
                std::string again;
                ASSERT_EQ(compile_into(cache, k, &again), KJIT_OK) << what << ": " << kjit_last_error();
                EXPECT_EQ(again, path) << what;
                // A torn sidecar alone is a rescan (the cubin and its manifest agree); any other
                // tear is a rebuild.
                const bool sidecar = std::string(file) == "kernel.cubin.name";
                EXPECT_EQ(entries_rebuilt() - rebuilt, sidecar ? 0u : 1u) << what;
                char name[256] = "";
                EXPECT_EQ(kjit_resolve_name(again.c_str(), "gemm", name, sizeof name, nullptr), KJIT_OK) << what;
                EXPECT_EQ(std::string(name), name_of(k)) << what;
                EXPECT_TRUE(cache_verifies(cache)) << what << ": the entry served is not what its manifest says";
                EXPECT_EQ(check_cache(cache), 1) << what;
            }
        }
    }
    ::unsetenv("KJIT_HIT_MEMO");
}

// An entry from before the boot that is whole is confirmed once: its cubin is read and checked,
// its ctime stamped, and it is served, not rebuilt; the next lookup confirms nothing again.
TEST(FaultInjection, AWholeEntryFromAnEarlierBootIsConfirmedOnce) {
    ASSERT_NE(shim().reboot, nullptr);
    ::setenv("KJIT_HIT_MEMO", "0", 1);
    TempDir dir;
    const std::string cache = dir.file("cache");
    std::string path;
    ASSERT_EQ(compile_into(cache, 140, &path), KJIT_OK) << kjit_last_error();
    struct stat before {};
    ASSERT_EQ(::stat(path.c_str(), &before), 0);
    reboot();
    const std::uint64_t rebuilt = entries_rebuilt();
    ASSERT_EQ(compile_into(cache, 140), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(entries_rebuilt(), rebuilt);
    struct stat after {};
    ASSERT_EQ(::stat(path.c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino);
    EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
    EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    EXPECT_TRUE(after.st_ctim.tv_sec > before.st_ctim.tv_sec ||
                (after.st_ctim.tv_sec == before.st_ctim.tv_sec && after.st_ctim.tv_nsec > before.st_ctim.tv_nsec))
        << "the confirmed cubin's ctime was not stamped";
    // Confirmed for this boot: the next lookup confirms (and stamps) nothing again.
    ASSERT_EQ(compile_into(cache, 140), KJIT_OK) << kjit_last_error();
    struct stat later {};
    ASSERT_EQ(::stat(path.c_str(), &later), 0);
    EXPECT_EQ(later.st_ctim.tv_sec, after.st_ctim.tv_sec);
    EXPECT_EQ(later.st_ctim.tv_nsec, after.st_ctim.tv_nsec) << "a confirmed cubin was confirmed again";
    ::unsetenv("KJIT_HIT_MEMO");
}

// kjit_compile_batch of kernels first..first+count-1 (2 workers) into `cache`.
BatchOutcome batch_into(const std::string &cache, int first, int count) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    std::vector<std::string> sources;
    for (int i = 0; i < count; ++i) sources.push_back(source_of(first + i));
    kjit_batch_options b = KJIT_BATCH_OPTIONS_INIT;
    b.workers = 2;
    return compile_batch(sources, "gemm", o, &b);
}

// A full disk during a batch: the item whose publish fails gets KJIT_ERROR_IO with the path and
// errno text, the others are unaffected, nothing partial is left, and a rerun finishes it.
TEST(FaultInjection, BatchItemsWhosePublishFailsFailAlone) {
    ASSERT_NE(shim().arm, nullptr);
    for (int times : {1, 1000}) {
        TempDir dir;
        const std::string cache = dir.file("cache");
        shim().arm("rename", ENOSPC, cache.c_str(), 0, times);
        const BatchOutcome first = batch_into(cache, 60, 4);
        const std::vector<kjit_status> &st = first.statuses;
        const std::vector<std::string> &errors = first.errors;
        const int injected = shim().injected();
        shim().disarm();
        fault_counts()["rename ENOSPC (batch)"] += injected;
        ASSERT_EQ(st.size(), 4u);
        const int expected_failures = times == 1 ? 1 : 4;
        EXPECT_EQ(injected, expected_failures);
        int failed = 0;
        for (std::size_t i = 0; i < st.size(); ++i) {
            if (st[i] == KJIT_OK) continue;
            ++failed;
            EXPECT_EQ(st[i], KJIT_ERROR_IO) << errors[i];
            EXPECT_NE(errors[i].find(cache), std::string::npos) << errors[i];
            EXPECT_NE(errors[i].find(std::strerror(ENOSPC)), std::string::npos) << errors[i];
        }
        EXPECT_EQ(failed, expected_failures);
        EXPECT_EQ(first.overall, KJIT_ERROR_IO);
        EXPECT_EQ(check_cache(cache), 4 - expected_failures);
        const BatchOutcome again = batch_into(cache, 60, 4);
        EXPECT_EQ(again.overall, KJIT_OK) << kjit_last_error();
        EXPECT_EQ(again.statuses, std::vector<kjit_status>(4, KJIT_OK));
        EXPECT_EQ(check_cache(cache), 4);
    }
}

// On a full disk eviction never ran: it runs after a successful publish, and the publish had
// failed. Under a size limit, a publish that fails with ENOSPC or EDQUOT evicts least recently
// used entries (even when the cache is within its limit: the disk is full) and tries once more.
TEST(FaultInjection, FullDiskUnderALimitEvictsAndRetriesOnce) {
    ASSERT_NE(shim().arm, nullptr);
    for (const auto &[err, err_name] : {std::pair<int, const char *>{ENOSPC, "ENOSPC"}, {EDQUOT, "EDQUOT"}}) {
        TempDir dir;
        const std::string cache = dir.file("cache");
        std::vector<std::string> old;
        for (int i = 0; i < 6; ++i) {
            std::string path;
            ASSERT_EQ(compile_into(cache, 80 + i, &path), KJIT_OK) << kjit_last_error();
            old.push_back(path);
            // Entry i was last used 6 - i hours ago: entry 0 is the least recently used.
            const std::string entry = path.substr(0, path.rfind('/'));
            const struct timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - (6 - i) * 3600, 0}};
            ASSERT_EQ(::utimensat(AT_FDCWD, entry.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
        }
        const std::uint64_t limit = 1ull << 30;           // far above the cache: only the full disk evicts
        shim().arm("write", err, "/kernel.cubin", 0, 1);  // the new entry's first write, its cubin
        std::string path;
        const kjit_status st = compile_into(cache, 90, &path, limit);
        const std::string error = kjit_last_error();
        const int injected = shim().injected();
        shim().disarm();
        fault_counts()[std::string("write ") + err_name + " under a limit (evict, retry)"] += injected;
        EXPECT_EQ(injected, 1) << err_name;
        ASSERT_EQ(st, KJIT_OK) << err_name << ": " << error;
        EXPECT_TRUE(exists(path));
        EXPECT_FALSE(exists(old[0])) << err_name << ": the least recently used entry was not evicted";
        EXPECT_TRUE(exists(old[5])) << err_name << ": more than needed was evicted";
        int kept = 0;
        for (const auto &p : old) kept += exists(p) ? 1 : 0;
        EXPECT_EQ(check_cache(cache), kept + 1);
        // Once only: a second failure is the error, and nothing partial is left.
        shim().arm("write", err, "/kernel.cubin", 0, 2);
        const kjit_status again = compile_into(cache, 91, nullptr, limit);
        const std::string again_error = kjit_last_error();
        EXPECT_EQ(shim().injected(), 2) << err_name;
        shim().disarm();
        EXPECT_EQ(again, KJIT_ERROR_IO) << err_name;
        EXPECT_NE(again_error.find(std::strerror(err)), std::string::npos) << again_error;
        EXPECT_NE(again_error.find("tried again"), std::string::npos) << again_error;
        EXPECT_LE(check_cache(cache), kept + 1);
        // Without a limit nothing is evicted for it: the failure is the error at once.
        const int before = check_cache(cache);
        shim().arm("write", err, "/kernel.cubin", 0, 1);
        EXPECT_EQ(compile_into(cache, 92, nullptr, UINT64_MAX), KJIT_ERROR_IO) << err_name;
        shim().disarm();
        EXPECT_EQ(check_cache(cache), before);
    }
}

TEST(FaultInjection, SidecarWriteFaultsNeverFailAResolve) {
    ASSERT_NE(shim().arm, nullptr);
    const std::string bytes = cubin_for(sources::kPlain);
    for (const char *call : {"open", "write", "fsync", "close", "rename"}) {
        for (const auto &[err, err_name] : kErrnos) {
            for (int skip = 0; skip < 4; ++skip) {
                TempDir dir;
                const std::string cubin = dir.file("k.cubin");
                write_file(cubin, bytes);
                shim().arm(call, err, ".name", skip, 1);
                char name[256];
                const kjit_status st = kjit_resolve_name(cubin.c_str(), "plain_kernel", name, sizeof name, nullptr);
                const int injected = shim().injected();
                shim().disarm();
                EXPECT_EQ(st, KJIT_OK) << call << " " << err_name << ": " << kjit_last_error();
                EXPECT_STREQ(name, "_Z12plain_kernelPf");
                EXPECT_TRUE(temp_files_in(dir.path()).empty()) << call << " " << err_name;
                const auto sc = kjit::cubin::sidecar::read(cubin + ".name");
                EXPECT_TRUE(sc.problem == kjit::cubin::sidecar::FileProblem::missing ||
                            (sc.problem == kjit::cubin::sidecar::FileProblem::none && sc.rejected_lines == 0))
                    << call << " " << err_name << ": a torn sidecar became visible";
                if (injected == 0) break;
                fault_counts()[std::string("sidecar ") + call + " " + err_name] += injected;
            }
        }
    }
}

TEST(FaultInjection, WritersKilledAtRandomPointsLeaveACorrectCache) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string src_dir = dir.file("src");
    ASSERT_EQ(::mkdir(src_dir.c_str(), 0700), 0);
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> delay_us(0, 60000);
    constexpr int kRounds = 24;
    int killed_mid_flight = 0;
    for (int round = 0; round < kRounds; ++round) {
        const int i = round;  // a new kernel each time: a miss, so there is a publish to kill
        const std::string file = src_dir + "/k" + std::to_string(i) + ".cu";
        write_file(file, source_of(i));
        std::vector<std::string> args = {KJIT_CLI, "compile", file,          "-k", "gemm",
                                         "--arch", "sm_90",   "--cache-dir", cache};
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_t pid = 0;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        ASSERT_EQ(::posix_spawn(&pid, KJIT_CLI, &actions, nullptr, argv.data(), environ), 0);
        posix_spawn_file_actions_destroy(&actions);
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
        ::kill(pid, SIGKILL);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status)) ++killed_mid_flight;
        // Whatever the moment: every entry is complete (a killed publish leaves at most a
        // .tmp- folder, never an entry).
        check_cache(cache, /*allow_transit=*/true);
    }
    fault_counts()["SIGKILL of a writer mid-compile or mid-publish"] += killed_mid_flight;
    EXPECT_GT(killed_mid_flight, kRounds / 4) << "the kills came too late to test anything";
    for (int i = 0; i < kRounds; ++i) {
        // Named as `kjit compile` names its program (the file as given): the entries the killed
        // writers published are this request's, and must be hits that give the right name.
        const std::string file = src_dir + "/k" + std::to_string(i) + ".cu";
        std::string path;
        ASSERT_EQ(compile_into(cache, i, &path, 0, file.c_str()), KJIT_OK) << kjit_last_error();
        char name[256];
        ASSERT_EQ(kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr), KJIT_OK);
        EXPECT_EQ(std::string(name), name_of(i));
    }
    EXPECT_EQ(check_cache(cache, true), kRounds);
}

TEST(FaultInjection, Summary) {
    int total = 0;
    for (const auto &[kind, n] : fault_counts()) {
        std::printf("faults injected: %-52s %d\n", kind.c_str(), n);
        total += n;
    }
    std::printf("faults injected: %-52s %d\n", "total", total);
}
