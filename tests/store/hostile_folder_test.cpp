// Hostile and odd cache folders, through the C ABI: symlinks planted for the cache folder, a
// shard, an entry or a sidecar; a world-writable cache folder; names with spaces, newlines and
// non-UTF-8 bytes, and near PATH_MAX; huge sidecars and empty or huge (sparse) cubins. Each case
// gets a clear status, no write lands outside the cache folder and nothing is read unbounded.
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

using namespace kjit_test;

namespace {

const std::string kSource = sources::numbered_gemm(127);  // gemm<128>
const std::string kName = sources::numbered_gemm_name(127);

kjit_status compile_into(const std::string &cache, std::string *path_out = nullptr) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    char path[PATH_MAX + 64];
    const kjit_status st = kjit_compile(kSource.c_str(), "gemm", &o, path, sizeof path, nullptr);
    if (st == KJIT_OK && path_out) *path_out = path;
    return st;
}

std::string resolved(const std::string &cubin) {
    char name[256];
    const kjit_status st = kjit_resolve_name(cubin.c_str(), "gemm", name, sizeof name, nullptr);
    return st == KJIT_OK ? std::string(name) : std::string(kjit_status_string(st)) + ": " + kjit_last_error();
}

std::string parent(const std::string &p) { return p.substr(0, p.rfind('/')); }

bool is_symlink(const std::string &p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace

TEST(HostileFolders, PlantedEntrySymlinkIsReplacedNotFollowed) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    std::string cubin;
    ASSERT_EQ(compile_into(cache, &cubin), KJIT_OK) << kjit_last_error();
    const std::string entry = parent(cubin);
    // Someone replaces the entry with a link to a folder of theirs holding another "cubin".
    const std::string theirs = dir.file("theirs");
    ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
    write_file(theirs + "/kernel.cubin", read_file(cubin));
    write_file(theirs + "/kernel.cubin.name", read_file(cubin + ".name"));
    write_file(theirs + "/manifest.txt", read_file(entry + "/manifest.txt"));
    write_file(theirs + "/source.cu", read_file(entry + "/source.cu"));
    ASSERT_EQ(::rename(entry.c_str(), dir.file("moved").c_str()), 0);
    ASSERT_EQ(::symlink(theirs.c_str(), entry.c_str()), 0);
    std::string again;
    ASSERT_EQ(compile_into(cache, &again), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(again, cubin);
    EXPECT_FALSE(is_symlink(entry)) << "the planted link still serves the entry";
    EXPECT_TRUE(exists(theirs + "/kernel.cubin")) << "their folder was written to or removed";
    EXPECT_EQ(list_dir(theirs).size(), 4u);
    EXPECT_EQ(resolved(again), kName);
}

TEST(HostileFolders, PlantedShardSymlinkIsRefused) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    std::string cubin;
    ASSERT_EQ(compile_into(cache, &cubin), KJIT_OK) << kjit_last_error();
    const std::string shard = parent(parent(cubin));
    const std::string theirs = dir.file("theirs");
    ASSERT_EQ(::mkdir(theirs.c_str(), 0777), 0);
    ASSERT_EQ(::rename(shard.c_str(), dir.file("moved").c_str()), 0);
    ASSERT_EQ(::symlink(theirs.c_str(), shard.c_str()), 0);
    EXPECT_EQ(compile_into(cache), KJIT_ERROR_IO);
    const std::string error = kjit_last_error();
    EXPECT_NE(error.find(shard), std::string::npos) << error;
    EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
    EXPECT_TRUE(list_dir(theirs).empty()) << "a write landed outside the cache folder";
}

TEST(HostileFolders, CacheFolderThatIsALinkToOurOwnFolderWorks) {
    // ~/.cache -> /data/cache is ordinary: the cache folder itself may be a link.
    TempDir dir;
    const std::string real = dir.file("real");
    ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
    ASSERT_EQ(::symlink(real.c_str(), dir.file("link").c_str()), 0);
    std::string cubin;
    ASSERT_EQ(compile_into(dir.file("link"), &cubin), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(resolved(cubin), kName);
    // The shard, the cache lock, the compile lock and the NVRTC record, nothing else.
    const std::vector<std::string> names = list_dir(real);
    ASSERT_EQ(names.size(), 4u);
    EXPECT_EQ(std::count_if(names.begin(), names.end(),
                            [](const std::string &n) { return n.rfind(".kjit-nvrtc-", 0) == 0; }),
              1);
}

TEST(HostileFolders, WorldWritableCacheFolderIsRefused) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ASSERT_EQ(::mkdir(cache.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(cache.c_str(), 0777), 0);
    EXPECT_EQ(compile_into(cache), KJIT_ERROR_IO);
    const std::string error = kjit_last_error();
    EXPECT_NE(error.find("writable by others"), std::string::npos) << error;
    EXPECT_NE(error.find(cache), std::string::npos) << error;
    EXPECT_TRUE(list_dir(cache).empty());
    // The sticky bit (as on /tmp) does not help: others could still create shards and entries.
    ASSERT_EQ(::chmod(cache.c_str(), 01777), 0);
    EXPECT_EQ(compile_into(cache), KJIT_ERROR_IO);
    EXPECT_TRUE(list_dir(cache).empty());
    // Group-writable but ours: allowed, as a private cache (a team cache is also setgid and
    // trusts its group's members: trust_test.cpp).
    TempDir team;
    ASSERT_EQ(::chmod(team.path().c_str(), 0770), 0);
    EXPECT_EQ(compile_into(team.path()), KJIT_OK) << kjit_last_error();
}

TEST(HostileFolders, PlantedSidecarSymlinkIsReplacedAndItsTargetUntouched) {
    TempDir dir;
    std::string cubin;
    ASSERT_EQ(compile_into(dir.file("cache"), &cubin), KJIT_OK);
    const std::string target = dir.file("precious.txt");
    write_file(target, "precious\n");
    ASSERT_EQ(::unlink((cubin + ".name").c_str()), 0);
    ASSERT_EQ(::symlink(target.c_str(), (cubin + ".name").c_str()), 0);
    EXPECT_EQ(resolved(cubin), kName);
    EXPECT_FALSE(is_symlink(cubin + ".name"));
    EXPECT_EQ(read_file(target), "precious\n");
}

TEST(HostileFolders, OddCharactersInPaths) {
    TempDir dir;
    for (const std::string &name : {std::string("with space"), std::string("new\nline"), std::string("bytes\xff\xfe"),
                                    std::string("quote'\"$(x)")}) {
        const std::string cache = dir.file(name);
        std::string cubin;
        ASSERT_EQ(compile_into(cache, &cubin), KJIT_OK) << kjit_last_error();
        EXPECT_EQ(cubin.rfind(cache + "/", 0), 0u);
        EXPECT_EQ(resolved(cubin), kName);
        kjit_kernel *k = nullptr;
        EXPECT_EQ(kjit_load_cached(cubin.c_str(), "gemm", &k), KJIT_OK) << kjit_last_error();
        kjit_kernel_release(k);
    }
}

TEST(HostileFolders, PathsNearPathMaxGetAnIoErrorNamingThePath) {
    TempDir dir;
    std::string cache = dir.path();
    while (cache.size() < PATH_MAX - 40)
        cache += "/" + std::string(std::min<std::size_t>(200, PATH_MAX - 40 - cache.size()), 'd');
    const kjit_status st = compile_into(cache);
    EXPECT_EQ(st, KJIT_ERROR_IO) << kjit_last_error();
    EXPECT_NE(std::string(kjit_last_error()).find("File name too long"), std::string::npos) << kjit_last_error();
    std::string long_cubin = dir.path() + "/" + std::string(5000, 'c') + ".cubin";
    char name[64];
    EXPECT_EQ(kjit_resolve_name(long_cubin.c_str(), "gemm", name, sizeof name, nullptr), KJIT_ERROR_IO);
}

TEST(HostileFolders, HugeSidecarIsNotReadWhole) {
    TempDir dir;
    std::string cubin;
    ASSERT_EQ(compile_into(dir.file("cache"), &cubin), KJIT_OK);
    const std::string sidecar = cubin + ".name";
    ASSERT_EQ(::unlink(sidecar.c_str()), 0);
    const int fd = ::open(sidecar.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t{1} << 30), 0);  // 1 GiB, sparse
    ::close(fd);
    EXPECT_EQ(resolved(cubin), kName);  // rescanned and rewritten
    struct stat st {};
    ASSERT_EQ(::stat(sidecar.c_str(), &st), 0);
    EXPECT_LT(st.st_size, 4096);
}

TEST(HostileFolders, EmptyAndHugeSparseCubins) {
    TempDir dir;
    const std::string empty = dir.file("empty.cubin");
    write_file(empty, "");
    char name[64];
    EXPECT_EQ(kjit_resolve_name(empty.c_str(), "gemm", name, sizeof name, nullptr), KJIT_ERROR_BAD_CUBIN);
    EXPECT_NE(std::string(kjit_last_error()).find("empty.cubin"), std::string::npos);
    kjit_kernel *k = nullptr;
    EXPECT_EQ(kjit_load_cached(empty.c_str(), "gemm", &k), KJIT_ERROR_BAD_CUBIN) << kjit_last_error();
    const std::string huge = dir.file("huge.cubin");
    const int fd = ::open(huge.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t{2} << 30), 0);  // 2 GiB of zeroes, sparse
    ::close(fd);
    EXPECT_EQ(kjit_resolve_name(huge.c_str(), "gemm", name, sizeof name, nullptr), KJIT_ERROR_BAD_CUBIN);
    EXPECT_NE(std::string(kjit_last_error()).find("huge.cubin"), std::string::npos);
    EXPECT_EQ(kjit_load_cached(huge.c_str(), "gemm", &k), KJIT_ERROR_BAD_CUBIN) << kjit_last_error();
    EXPECT_NE(std::string(kjit_last_error()).find("huge.cubin"), std::string::npos);
    EXPECT_EQ(k, nullptr);
}
