// One compile per key on the node (src/store/compile_lock.hpp): processes that miss one key at
// once compile it once; a holder that takes too long is not waited on for ever; other keys, and
// a released lock, are not waited for.
#include "store/compile_lock.hpp"
#include "cache/cache.hpp"
#include "key/cache_key.hpp"
#include "store/cache_layout.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"

#include "../cache/cache_test_support.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

using kjit::cache::Cache;
using kjit::key::Request;
using namespace kjit_test;

TEST(CompileLock, ProcessesMissingOneKeyAtOnceCompileItOnce) {
    TempDir dir;
    const Request r = base_request(dir.file("cache"));
    constexpr int kProcesses = 4;
    int go[2], out[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(out), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < kProcesses; ++i) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::close(go[1]);
            char c = 0;
            (void)::read(go[0], &c, 1);  // returns when the parent closes its end: all start at once
            Cache cache;
            auto path = cache.compile(r);
            const std::uint64_t runs = cache.counters().nvrtc_compiles.load();
            const bool written = ::write(out[1], &runs, sizeof runs) == static_cast<ssize_t>(sizeof runs);
            ::_exit(path.ok() && written ? 0 : 1);
        }
        children.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);
    ::close(out[1]);
    for (pid_t pid : children) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    std::uint64_t total = 0, runs = 0;
    int reports = 0;
    while (::read(out[0], &runs, sizeof runs) == static_cast<ssize_t>(sizeof runs)) {
        total += runs;
        ++reports;
    }
    ::close(out[0]);
    EXPECT_EQ(reports, kProcesses);
    EXPECT_EQ(total, 1u) << "every process that missed the key compiled it";
    EXPECT_EQ(complete_entries(dir.file("cache")), 1);
}

namespace {

// Holds the compile lock of `key` in `cache_dir` through a descriptor of its own, as another
// process would (OFD locks conflict between open file descriptions, even in one process).
struct ForeignHolder {
    kjit::LockFd fd;
    ForeignHolder(const std::string &cache_dir, const std::string &key)
        : fd(::open((cache_dir + "/" + kjit::store::cache_layout::kCompileLockFile).c_str(),
                    O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = static_cast<off_t>(std::strtoull(key.substr(0, 15).c_str(), nullptr, 16));
        fl.l_len = 1;
        locked = fd.valid() && ::fcntl(fd.get(), F_OFD_SETLK, &fl) == 0;
    }
    bool locked = false;
};

}  // namespace

TEST(CompileLock, AHolderThatTakesTooLongIsNotWaitedOnForEver) {
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    Request r = base_request(dir.file("cache"));
    r.compile_wait = std::chrono::milliseconds(200);
    ForeignHolder holder(dir.file("cache"), kjit::key::key_request(r)->key);
    ASSERT_TRUE(holder.locked);
    Cache cache;
    const std::string path = compile_ok(cache, r);
    EXPECT_FALSE(path.empty());
    EXPECT_EQ(cache.counters().compile_lock_waits, 1u);
    EXPECT_EQ(cache.counters().compile_lock_timeouts, 1u);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
}

TEST(CompileLock, OtherKeysAndAReleasedLockAreNotWaitedFor) {
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    Request r = base_request(dir.file("cache"));
    r.compile_wait = std::chrono::milliseconds(60'000);
    Request other = r;
    other.source += "\n// another key\n";
    {
        ForeignHolder holder(dir.file("cache"), kjit::key::key_request(other)->key);
        ASSERT_TRUE(holder.locked);
        Cache cache;
        compile_ok(cache, r);
        EXPECT_EQ(cache.counters().compile_lock_waits, 0u) << "a lock of another key was waited for";
    }
    // The holder closed its descriptor (as a process that dies does): the key is free.
    Cache cache;
    compile_ok(cache, other);
    EXPECT_EQ(cache.counters().compile_lock_waits, 0u);
}

TEST(CompileLock, ReleasingTheLockDoesNotWaitForOtherCopiesOfItsDescriptor) {
    // A child forked between the lock file's open and the descriptor's registration keeps a copy
    // of it that the fork handler does not close: the release must not depend on every copy
    // being closed. Here the copy is a dup() of the held descriptor, found in /proc/self/fd.
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    auto folder = kjit::folder_trust::check_cache_folder_now(dir.file("cache"));
    ASSERT_TRUE(folder.ok()) << folder.error().message;
    const std::string key(32, 'a');
    const std::string lock_path = dir.file("cache") + "/" + kjit::store::cache_layout::kCompileLockFile;
    kjit::store::compile_lock::Waited waited;
    auto held =
        kjit::store::compile_lock::acquire(dir.file("cache"), *folder, key, std::chrono::milliseconds(0), &waited);
    ASSERT_TRUE(held.has_value());
    const int copy = dup_of_descriptor_on(lock_path);
    ASSERT_GE(copy, 0) << "the held lock file's descriptor was not found";
    ForeignHolder blocked(dir.file("cache"), key);
    EXPECT_FALSE(blocked.locked) << "the lock was not held";
    held.reset();
    ForeignHolder after(dir.file("cache"), key);
    EXPECT_TRUE(after.locked) << "the lock lived on in another copy of its descriptor";
    ::close(copy);
}
