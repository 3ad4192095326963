// Seed caches (src/cache/seed_store.hpp): read-only cache folders searched after the local cache,
// their entries verified, published into the local cache, and the seed never written.
#include "cache/cache.hpp"

#include "store/cache_entry.hpp"
#include "test_support.hpp"
#include "util/hashing.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using kjit::cache::Cache;
using kjit::key::Request;
using namespace kjit_test;

namespace {

constexpr int kKernels = 4;

Request gemm_request(const std::string &cache_dir, int i) {
    Request r;
    r.source = sources::numbered_gemm(i);
    r.keyword = "gemm";
    r.cache_dir = cache_dir;
    r.arch = "sm_90";
    return r;
}

// A warm cache of kKernels entries at `dir`, made by a cache of its own.
void warm(const std::string &dir) {
    Cache cache;
    for (int i = 0; i < kKernels; ++i) {
        auto found = cache.compile(gemm_request(dir, i));
        ASSERT_TRUE(found.ok()) << found.error().message;
    }
    ASSERT_EQ(cache.counters().nvrtc_compiles, static_cast<std::uint64_t>(kKernels));
}

void copy_tree(const std::string &from, const std::string &to) {
    ASSERT_EQ(std::system(("cp -a '" + from + "' '" + to + "'").c_str()), 0);
}

// Everything about the tree at `dir` a write could change: each path, its type, mode, owner,
// size, mtime (to the nanosecond: a recorded use is an mtime) and content. Folders too, so a
// file created and removed again (a temp file, a lock) shows in the folder's mtime.
std::string tree_print(const std::string &dir) {
    std::string out;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return "missing " + dir;
    out += dir + " " + std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " " + std::to_string(st.st_size) +
           " " + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode)) out += " " + kjit::hash128_hex(read_file(dir));
    out += "\n";
    if (S_ISDIR(st.st_mode)) {
        for (const std::string &name : list_dir(dir)) out += tree_print(dir + "/" + name);
    }
    return out;
}

std::string entry_of(const std::string &cache_dir, const Request &r) {
    // The entry folder a compile of `r` found or made: the one cubin path's folder.
    Cache probe;
    auto found = probe.compile(r);
    EXPECT_TRUE(found.ok());
    return found.ok() ? found->cubin.substr(0, found->cubin.rfind('/')) : cache_dir;
}

// The seed's copy of the local entry `local_entry` of the cache at `local`.
std::string in_seed(const std::string &local, const std::string &seed, const std::string &local_entry) {
    return seed + local_entry.substr(local.size());
}

}  // namespace

// The done-when case, in one process: an empty cache with a seed holding every kernel runs NVRTC
// for none, gets the right names, and the copies make the next look-ups local hits.
TEST(Seed, EmptyCacheWarmFromSeedRunsNvrtcForNone) {
    TempDir dir;
    warm(dir.file("warm"));
    copy_tree(dir.file("warm"), dir.file("seed"));
    const std::string before = tree_print(dir.file("seed"));
    Cache node;
    for (int i = 0; i < kKernels; ++i) {
        Request r = gemm_request(dir.file("local"), i);
        r.seed_dirs = {dir.file("seed")};
        auto found = node.compile(r);
        ASSERT_TRUE(found.ok()) << found.error().message;
        EXPECT_EQ(found->name, sources::numbered_gemm_name(i));
        EXPECT_EQ(found->cubin.rfind(dir.file("local") + "/", 0), 0u) << found->cubin;  // the local copy
        EXPECT_TRUE(exists(found->cubin + ".name"));
    }
    EXPECT_EQ(node.counters().nvrtc_compiles, 0u);
    EXPECT_EQ(node.counters().seed_hits, static_cast<std::uint64_t>(kKernels));
    EXPECT_EQ(node.counters().seed_rejections, 0u);
    // Local from now on: a new cache (no hit memo) finds them without the seed.
    Cache later;
    for (int i = 0; i < kKernels; ++i) {
        Request r = gemm_request(dir.file("local"), i);
        r.seed_dirs = {dir.file("seed")};
        ASSERT_TRUE(later.compile(r).ok());
    }
    EXPECT_EQ(later.counters().seed_hits, 0u);
    EXPECT_EQ(later.counters().nvrtc_compiles, 0u);
    EXPECT_EQ(tree_print(dir.file("seed")), before) << "the seed was written";
}

// Seeds are asked in order, after the local cache; a missing one is skipped; none at all, or the
// local cache named as a seed, is a plain miss.
TEST(Seed, OrderMissingSeedAndLocalFirst) {
    TempDir dir;
    warm(dir.file("warm"));
    copy_tree(dir.file("warm"), dir.file("seed"));
    Cache node;
    Request r = gemm_request(dir.file("local"), 0);
    r.seed_dirs = {dir.file("no-such-seed"), dir.file("local"), dir.file("seed")};
    auto found = node.compile(r);
    ASSERT_TRUE(found.ok()) << found.error().message;
    EXPECT_EQ(node.counters().seed_hits, 1u);
    EXPECT_EQ(node.counters().seed_rejections, 0u);
    EXPECT_EQ(node.counters().nvrtc_compiles, 0u);
    Request other = gemm_request(dir.file("local"), kKernels + 1);  // in no seed
    other.seed_dirs = r.seed_dirs;
    ASSERT_TRUE(node.compile(other).ok());
    EXPECT_EQ(node.counters().nvrtc_compiles, 1u);
    EXPECT_EQ(node.counters().seed_rejections, 0u);
    EXPECT_FALSE(exists(dir.file("no-such-seed"))) << "a missing seed was created";
}

// A damaged seed entry is refused (counted), compiled instead, and left exactly as it was.
TEST(Seed, DamagedEntryIsRefusedCompiledAndLeftAlone) {
    TempDir dir;
    warm(dir.file("warm"));
    copy_tree(dir.file("warm"), dir.file("seed"));
    const std::string warm_entry = entry_of(dir.file("warm"), gemm_request(dir.file("warm"), 0));
    const std::string cubin = in_seed(dir.file("warm"), dir.file("seed"), warm_entry) + "/kernel.cubin";
    // One byte of the cubin flipped in place, size and mtime kept: only its hash can tell.
    std::string bytes = read_file(cubin);
    ASSERT_FALSE(bytes.empty());
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
    struct stat st {};
    ASSERT_EQ(::stat(cubin.c_str(), &st), 0);
    write_file(cubin, bytes);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, cubin.c_str(), times, 0), 0);
    // Another entry's manifest failing its check line.
    const std::string warm_entry1 = entry_of(dir.file("warm"), gemm_request(dir.file("warm"), 1));
    const std::string manifest = in_seed(dir.file("warm"), dir.file("seed"), warm_entry1) + "/manifest.txt";
    std::string text = read_file(manifest);
    const std::size_t at = text.find("arch: sm_90");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 11, "arch: sm_80");
    write_file(manifest, text);
    const std::string before = tree_print(dir.file("seed"));

    Cache node;
    for (int i = 0; i < 2; ++i) {
        Request r = gemm_request(dir.file("local"), i);
        r.seed_dirs = {dir.file("seed")};
        auto found = node.compile(r);
        ASSERT_TRUE(found.ok()) << found.error().message;
        EXPECT_EQ(found->name, sources::numbered_gemm_name(i));
    }
    EXPECT_EQ(node.counters().nvrtc_compiles, 2u);
    EXPECT_EQ(node.counters().seed_hits, 0u);
    EXPECT_EQ(node.counters().seed_rejections, 2u);
    EXPECT_EQ(tree_print(dir.file("seed")), before) << "the damaged seed was written";
}

// A seed the caller may not trust (writable by others; another user's) is skipped, said once.
TEST(Seed, UntrustedSeedIsSkipped) {
    TempDir dir;
    warm(dir.file("warm"));
    copy_tree(dir.file("warm"), dir.file("seed"));
    ASSERT_EQ(::chmod(dir.file("seed").c_str(), 0777), 0);
    Cache node;
    for (int i = 0; i < 2; ++i) {
        Request r = gemm_request(dir.file("local"), i);
        r.seed_dirs = {dir.file("seed")};
        ASSERT_TRUE(node.compile(r).ok());
    }
    EXPECT_EQ(node.counters().seed_hits, 0u);
    EXPECT_EQ(node.counters().nvrtc_compiles, 2u);
    EXPECT_EQ(node.counters().seed_rejections, 1u) << "refused once per folder, not per look-up";
    if (::geteuid() != 0) return;
    // Another user's folder (not root's), safe otherwise: refused too.
    copy_tree(dir.file("warm"), dir.file("seed2"));
    ASSERT_EQ(std::system(("chown -R 65534:65534 '" + dir.file("seed2") + "'").c_str()), 0);
    Request r = gemm_request(dir.file("local"), 2);
    r.seed_dirs = {dir.file("seed2")};
    ASSERT_TRUE(node.compile(r).ok());
    EXPECT_EQ(node.counters().seed_hits, 0u);
    EXPECT_EQ(node.counters().seed_rejections, 2u);
}

// A seed entry of a request that reads files serves only while its headers are as recorded here,
// as a local entry does; otherwise it is a miss (not a refusal).
TEST(Seed, RecordedHeadersMustHold) {
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("inc").c_str(), 0755), 0);
    write_file(dir.file("inc/value.h"), "#define VALUE 1.0f\n");
    Request r = gemm_request(dir.file("warm"), 0);
    r.source = "#include \"value.h\"\n__global__ void gemm(float *p) { p[0] = VALUE; }\n";
    r.include_paths = {dir.file("inc")};
    {
        Cache cache;
        ASSERT_TRUE(cache.compile(r).ok());
    }
    copy_tree(dir.file("warm"), dir.file("seed"));
    const std::string before = tree_print(dir.file("seed"));
    r.cache_dir = dir.file("local");
    r.seed_dirs = {dir.file("seed")};
    Cache node;
    auto hit = node.compile(r);
    ASSERT_TRUE(hit.ok()) << hit.error().message;
    EXPECT_EQ(node.counters().seed_hits, 1u);
    EXPECT_EQ(node.counters().nvrtc_compiles, 0u);
    EXPECT_TRUE(exists(hit->cubin.substr(0, hit->cubin.rfind('/')) + "/deps.txt"));

    write_file(dir.file("inc/value.h"), "#define VALUE 2.0f\n");
    Request elsewhere = r;
    elsewhere.cache_dir = dir.file("local2");
    Cache other;
    auto miss = other.compile(elsewhere);
    ASSERT_TRUE(miss.ok()) << miss.error().message;
    EXPECT_EQ(other.counters().seed_hits, 0u);
    EXPECT_EQ(other.counters().seed_rejections, 0u);
    EXPECT_EQ(other.counters().nvrtc_compiles, 1u);
    EXPECT_EQ(tree_print(dir.file("seed")), before);
}

// The done-when test: a fresh process (a forked child, with a cache object of its own),
// an empty cache, and the seed a read-only bind mount of a warm cache's copy, in a mount
// namespace of the child's own: NVRTC runs for none of the kernels and every name is right.
TEST(Seed, FreshNodeOnReadOnlyMountRunsNvrtcForNone) {
    if (::geteuid() != 0) GTEST_SKIP() << "a bind mount needs root";
    TempDir dir;
    warm(dir.file("warm"));
    copy_tree(dir.file("warm"), dir.file("copy"));
    ASSERT_EQ(::mkdir(dir.file("seed").c_str(), 0755), 0);
    const std::string before = tree_print(dir.file("copy"));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
        const std::string seed = dir.file("seed");
        if (::mount(dir.file("copy").c_str(), seed.c_str(), nullptr, MS_BIND, nullptr) != 0) ::_exit(77);
        if (::mount(nullptr, seed.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) ::_exit(77);
        // The mount must be read-only even for root, or the test shows nothing.
        if (::mkdir((seed + "/probe").c_str(), 0700) == 0 || errno != EROFS) ::_exit(10);
        Cache node;
        for (int i = 0; i < kKernels; ++i) {
            Request r = gemm_request(dir.file("local"), i);
            r.seed_dirs = {seed};
            auto found = node.compile(r);
            if (!found.ok()) {
                std::fprintf(stderr, "kernel %d: %s\n", i, found.error().message.c_str());
                ::_exit(11);
            }
            if (found->name != sources::numbered_gemm_name(i)) ::_exit(12);
        }
        if (node.counters().nvrtc_compiles != 0) ::_exit(13);
        if (node.counters().seed_hits != static_cast<std::uint64_t>(kKernels)) ::_exit(14);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no mount namespace or bind mount here";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the mount was writable, 11: a call failed, 12: a wrong name, 13: "
                                         "NVRTC ran, 14: not every kernel came from the seed";
    EXPECT_EQ(tree_print(dir.file("copy")), before);
}
