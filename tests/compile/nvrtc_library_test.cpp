// NVRTC is dlopened on first need, never linked (src/compile/nvrtc_library.hpp). ctest runs this binary
// once per case, each with its own KJIT_LIBNVRTC (libkjit keeps the outcome for the process):
//  - NvrtcUnavailable.*, with KJIT_LIBNVRTC naming something that is not a usable NVRTC 13 (a
//    missing file, a library without NVRTC's entry points, an NVRTC of another major) and
//    KJIT_EXPECT_NVRTC_ERROR the text kjit_last_error() must then hold: compiles fail with
//    KJIT_ERROR_NVRTC saying what was tried and what to do; resolving and loading a cache made
//    elsewhere still work; no libnvrtc is ever mapped into the process.
//  - NvrtcPinned.*, with KJIT_LIBNVRTC naming the toolkit's own libnvrtc: that one is loaded, on
//    the first compile and not before.
//  - NvrtcBesideItsBuiltins.*, which pins KJIT_LIBNVRTC itself: NVRTC's builtins come from the
//    folder of the libnvrtc loaded.
// Through libkjit.so, against the driver test double (KJIT_LIBCUDA).
#include "kjit/kjit.h"

#include "c_api_support.hpp"

#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

// What /proc/self/maps says is mapped from a file whose name holds `part`.
std::vector<std::string> mapped_files_like(const std::string &part) {
    std::ifstream maps("/proc/self/maps");
    std::vector<std::string> files;
    for (std::string line; std::getline(maps, line);) {
        const std::size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        const std::string file = line.substr(slash);
        if (file.find(part) != std::string::npos && (files.empty() || files.back() != file)) files.push_back(file);
    }
    return files;
}

std::string joined(const std::vector<std::string> &v) {
    std::string s;
    for (const std::string &x : v) s += x + "\n";
    return s;
}

std::string expected_error() {
    const char *expected = std::getenv("KJIT_EXPECT_NVRTC_ERROR");
    return expected ? expected : "";
}

// kjit_compile of sources::kTemplateOne for sm_90 into `cache`.
kjit_status compile_template(const std::string &cache, std::string *path = nullptr) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    char out[4096];
    const kjit_status st = kjit_compile(sources::kTemplateOne, "tmpl", &options, out, sizeof out, nullptr);
    if (st == KJIT_OK && path) *path = out;
    return st;
}

// Makes the cache entry of compile_template(cache) in another process, which has NVRTC (this
// binary run with --make-entry and KJIT_LIBNVRTC unset), as a deployment ships a cache made on
// a build machine. Returns the entry's cubin path, or "" after a test failure.
std::string entry_made_elsewhere(const std::string &cache) {
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        ADD_FAILURE() << "cannot read /proc/self/exe";
        return "";
    }
    exe[n] = '\0';
    const std::string command = "env -u KJIT_LIBNVRTC '" + std::string(exe) + "' --make-entry '" + cache + "'";
    FILE *child = ::popen(command.c_str(), "r");
    if (!child) {
        ADD_FAILURE() << "popen(" << command << ") failed";
        return "";
    }
    std::string out;
    char buf[4096];
    for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, child)) > 0;) out.append(buf, got);
    const int status = ::pclose(child);
    if (status != 0 || out.empty() || out[0] != '/') {
        ADD_FAILURE() << command << " failed (status " << status << "): " << out;
        return "";
    }
    return out;
}

}  // namespace

TEST(NvrtcUnavailable, CompileFailsSayingWhatWasTriedAndWhatToDo) {
    const std::string expected = expected_error();
    ASSERT_FALSE(expected.empty()) << "set KJIT_EXPECT_NVRTC_ERROR";
    TempDir dir;
    const std::string cache = dir.file("cache");
    const kjit_stats before = stats_now();
    for (int attempt = 0; attempt < 2; ++attempt) {  // the outcome is kept, and said every time
        EXPECT_EQ(compile_template(cache), KJIT_ERROR_NVRTC);
        const std::string err = kjit_last_error();
        EXPECT_NE(err.find(expected), std::string::npos) << err;
        EXPECT_NE(err.find("(from KJIT_LIBNVRTC)"), std::string::npos) << err;
        EXPECT_NE(err.find("install the CUDA toolkit's NVRTC"), std::string::npos) << err;
        EXPECT_NE(err.find("set KJIT_LIBNVRTC"), std::string::npos) << err;
    }
    EXPECT_FALSE(exists(cache)) << "a compile that cannot run must not make the cache folder";
    // A bad request still says what is wrong with it: arguments are checked before NVRTC is needed.
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.arch = "compute_90";
    char out[4096];
    EXPECT_EQ(kjit_compile(sources::kPlain, "plain_kernel", &options, out, sizeof out, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("compute_90"), std::string::npos) << kjit_last_error();

    const kjit_stats after = stats_now();
    EXPECT_EQ(after.nvrtc_compiles, 0u);
    EXPECT_EQ(after.errors[KJIT_ERROR_NVRTC] - before.errors[KJIT_ERROR_NVRTC], 2u);
    EXPECT_EQ(mapped_files_like("libnvrtc"), std::vector<std::string>{});
}

TEST(NvrtcUnavailable, EveryBatchItemFailsTheSameWay) {
    const std::string expected = expected_error();
    ASSERT_FALSE(expected.empty()) << "set KJIT_EXPECT_NVRTC_ERROR";
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    kjit_compile_request a = KJIT_COMPILE_REQUEST_INIT, b = KJIT_COMPILE_REQUEST_INIT;
    a.source = sources::kPlain;
    a.keyword = "plain_kernel";
    a.options = &options;
    b.source = sources::kTemplateOne;
    b.keyword = "tmpl";
    b.options = &options;
    const kjit_compile_request *requests[] = {&a, &b};
    kjit_batch_result *result = nullptr;
    EXPECT_EQ(kjit_compile_batch(requests, 2, nullptr, &result), KJIT_ERROR_NVRTC);
    ASSERT_NE(result, nullptr) << kjit_last_error();
    for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(kjit_batch_result_status(result, i), KJIT_ERROR_NVRTC);
        EXPECT_EQ(kjit_batch_result_cubin_path(result, i), nullptr);
        const std::string err = kjit_batch_result_error(result, i);
        EXPECT_NE(err.find(expected), std::string::npos) << err;
    }
    kjit_batch_result_release(result);
    EXPECT_EQ(mapped_files_like("libnvrtc"), std::vector<std::string>{});
}

TEST(NvrtcUnavailable, ResolveAndLoadAShippedCacheWithoutNvrtc) {
    const std::string expected = expected_error();
    ASSERT_FALSE(expected.empty()) << "set KJIT_EXPECT_NVRTC_ERROR";
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::string path = entry_made_elsewhere(cache);
    ASSERT_FALSE(path.empty());

    const kjit_stats before = stats_now();
    char name[256];
    ASSERT_EQ(kjit_resolve_name(path.c_str(), "tmpl", name, sizeof name, nullptr), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(name, "_Z4tmplILi4EEvPf");
    kjit_kernel *k = nullptr;
    ASSERT_EQ(kjit_load_cached(path.c_str(), "tmpl", &k), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(kjit_kernel_name(k), "_Z4tmplILi4EEvPf");
    EXPECT_STREQ(fake_cuda().kernel_name(kjit_kernel_cukernel(k)), "_Z4tmplILi4EEvPf");
    kjit_kernel_release(k);
    EXPECT_EQ(stats_now().loads - before.loads, 1u);

    // kjit_compile of the very request the entry answers: NVRTC's build is part of the key, so
    // even this hit needs NVRTC, and says so as clearly (kjit.h, docs/troubleshooting.md).
    EXPECT_EQ(compile_template(cache), KJIT_ERROR_NVRTC);
    EXPECT_NE(std::string(kjit_last_error()).find(expected), std::string::npos) << kjit_last_error();
    EXPECT_EQ(mapped_files_like("libnvrtc"), std::vector<std::string>{});
}

TEST(NvrtcPinned, TheNamedLibraryIsLoadedOnTheFirstCompile) {
    const char *pinned = std::getenv("KJIT_LIBNVRTC");
    ASSERT_TRUE(pinned && *pinned) << "set KJIT_LIBNVRTC";
    char real[PATH_MAX];
    ASSERT_NE(::realpath(pinned, real), nullptr) << pinned;
    TempDir dir;
    const std::string cache = dir.file("cache");
    // Neither linking libkjit nor resolving or loading maps NVRTC.
    EXPECT_EQ(mapped_files_like("libnvrtc"), std::vector<std::string>{});
    std::string path;
    ASSERT_EQ(compile_template(cache, &path), KJIT_OK) << kjit_last_error();
    char name[256];
    ASSERT_EQ(kjit_resolve_name(path.c_str(), "tmpl", name, sizeof name, nullptr), KJIT_OK) << kjit_last_error();
    EXPECT_STREQ(name, "_Z4tmplILi4EEvPf");
    const std::vector<std::string> mapped = mapped_files_like("libnvrtc.so");
    EXPECT_EQ(mapped, std::vector<std::string>{real}) << joined(mapped);
    // A second compile is a hit on the same entry, through the NVRTC already loaded.
    std::string again;
    ASSERT_EQ(compile_template(cache, &again), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(again, path);
    const kjit_stats stats = stats_now();
    EXPECT_EQ(stats.nvrtc_compiles, 1u);
    EXPECT_EQ(stats.compile_hits, 1u);
}

// The toolkit's NVRTC ($KJIT_TEST_TOOLKIT_NVRTC, every link followed), its folder and the name
// of its builtins there (libnvrtc-builtins.so.<major>.<minor>, the file itself); `error` says
// what is missing.
namespace {

struct Toolkit {
    std::string lib, folder, builtins, error;
};

Toolkit toolkit() {
    Toolkit t;
    const char *given = std::getenv("KJIT_TEST_TOOLKIT_NVRTC");
    char real_lib[PATH_MAX];
    if (!given || !*given || !::realpath(given, real_lib)) {
        t.error = "set KJIT_TEST_TOOLKIT_NVRTC to the toolkit's libnvrtc";
        return t;
    }
    t.lib = real_lib;
    t.folder = t.lib.substr(0, t.lib.rfind('/'));
    for (const std::string &name : list_dir(t.folder)) {
        if (name.rfind("libnvrtc-builtins.so.", 0) == 0 && std::count(name.begin(), name.end(), '.') == 3) {
            t.builtins = name;
        }
    }
    if (t.builtins.empty()) t.error = "no libnvrtc-builtins.so.<major>.<minor> in " + t.folder;
    return t;
}

}  // namespace

// NVRTC opens its builtins library by name at its first compile, which fails wherever the
// folder of an NVRTC found by path (a wheel, the build's toolkit folder) is not searched. libkjit
// opens the builtins beside the libnvrtc it loaded first, so those are the ones NVRTC uses:
// beside the library file itself, every link followed. Here KJIT_LIBNVRTC names a link to a
// link to the toolkit's libnvrtc, and each link's folder holds a copy of the builtins (a release
// that need not match): the toolkit's own are the ones mapped.
TEST(NvrtcBesideItsBuiltins, TheBuiltinsBesideTheLibraryItselfAreUsedThroughTwoLinks) {
    const Toolkit t = toolkit();
    ASSERT_TRUE(t.error.empty()) << t.error;
    const std::string &lib = t.lib, &folder = t.folder, &builtins = t.builtins;
    char real_builtins[PATH_MAX];
    ASSERT_NE(::realpath((folder + "/" + builtins).c_str(), real_builtins), nullptr);
    TempDir dir;
    const std::string soname = lib.substr(lib.rfind('/') + 1);
    for (const char *sub : {"first", "second"}) {
        ASSERT_EQ(::mkdir(dir.file(sub).c_str(), 0755), 0);
        write_file(dir.file(std::string(sub) + "/" + builtins), read_file(folder + "/" + builtins));
    }
    const std::string second = dir.file("second/" + soname);
    const std::string first = dir.file("first/" + soname);
    ASSERT_EQ(::symlink(lib.c_str(), second.c_str()), 0) << second;
    ASSERT_EQ(::symlink(second.c_str(), first.c_str()), 0) << first;
    const ScopedEnv pin("KJIT_LIBNVRTC", first.c_str());  // read at the first compile, below

    ASSERT_EQ(compile_template(dir.file("cache")), KJIT_OK) << kjit_last_error();
    const std::vector<std::string> mapped = mapped_files_like("libnvrtc-builtins");
    EXPECT_EQ(mapped, std::vector<std::string>{real_builtins}) << joined(mapped);
}

// Where the library's own folder holds no builtins, those beside the name it was loaded by are
// used: here the library is a hard link in a folder of its own (skipped, saying why, where the
// toolkit lies on another file system), reached through a link beside a copy of the builtins.
TEST(NvrtcBesideItsBuiltins, WithoutBuiltinsBesideTheFileThoseBesideTheLinkAreUsed) {
    const Toolkit t = toolkit();
    ASSERT_TRUE(t.error.empty()) << t.error;
    const std::string &lib = t.lib, &folder = t.folder, &builtins = t.builtins;
    TempDir dir;
    const std::string soname = lib.substr(lib.rfind('/') + 1);
    ASSERT_EQ(::mkdir(dir.file("bare").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(dir.file("pinned").c_str(), 0755), 0);
    const std::string bare = dir.file("bare/" + soname);
    if (::link(lib.c_str(), bare.c_str()) != 0) {
        GTEST_SKIP() << "cannot hard-link " << lib << " into " << dir.path() << ": " << std::strerror(errno);
    }
    write_file(dir.file("pinned/" + builtins), read_file(folder + "/" + builtins));
    char copy[PATH_MAX];
    ASSERT_NE(::realpath(dir.file("pinned/" + builtins).c_str(), copy), nullptr);
    const std::string link = dir.file("pinned/" + soname);
    ASSERT_EQ(::symlink(bare.c_str(), link.c_str()), 0) << link;
    const ScopedEnv pin("KJIT_LIBNVRTC", link.c_str());

    ASSERT_EQ(compile_template(dir.file("cache")), KJIT_OK) << kjit_last_error();
    const std::vector<std::string> mapped = mapped_files_like("libnvrtc-builtins");
    EXPECT_EQ(mapped, std::vector<std::string>{copy}) << joined(mapped);
}

int main(int argc, char **argv) {
    // The helper mode of entry_made_elsewhere: compile into the cache named, print the path.
    if (argc == 3 && std::string(argv[1]) == "--make-entry") {
        std::string path;
        if (compile_template(argv[2], &path) != KJIT_OK) {
            std::printf("kjit_compile failed: %s", kjit_last_error());
            return 1;
        }
        std::printf("%s", path.c_str());
        return 0;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
