// Link-time kernels (kjit_compile_options::link_inputs), through the C ABI as users call it: a
// device-function library made here with NVRTC (LTO-IR, and a fatbin of a relocatable cubin),
// kernels that call it linked by nvJitLink and cached; the library's constant read back from the
// linked cubin proves which library version an entry holds.
#include "kjit/kjit.h"

#include "c_api_support.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char **environ;

namespace {

using kjit_test::TempDir;

// The library: lib_value(i) reads a table whose first word is a marker ("TIJK" in memory) and
// whose second is `constant`; the table lands in the linked cubin's initialised data, so the
// constant can be read back.
std::string library_source(int constant) {
    return "__device__ int lib_table[2] = {0x4b4a4954, " + std::to_string(constant) +
           "};\n"
           "extern \"C\" __device__ int lib_value(int i) { return lib_table[i]; }\n";
}

// A kernel that calls it: _Z7use_libPii.
const char *const kKernel = "extern \"C\" __device__ int lib_value(int i);\n"
                            "__global__ void use_lib(int *out, int i) { *out = lib_value(i); }\n";

// `source` as a library ships it: LTO-IR with `lto`, else a relocatable cubin.
std::string nvrtc_output(const std::string &source, const std::string &arch, bool lto) {
    return kjit_test::device_code_for(source, arch,
                                      lto ? kjit_test::DeviceCode::ltoir : kjit_test::DeviceCode::relocatable_cubin);
}

// The library with `constant` as LTO-IR for sm_90, written to `path`.
void write_ltoir_library(const std::string &path, int constant, const std::string &arch = "sm_90") {
    kjit_test::write_file(path, nvrtc_output(library_source(constant), arch, true));
}

// The constant the linked cubin at `path` holds after the marker; -1 when there is none.
long constant_in(const std::string &path) {
    const std::string bytes = kjit_test::read_file(path);
    const std::size_t at = bytes.find("TIJK");
    if (at == std::string::npos || at + 8 > bytes.size()) return -1;
    int value = 0;
    std::memcpy(&value, bytes.data() + at + 4, sizeof value);
    return value;
}

struct Compiled {
    kjit_status status = KJIT_OK;
    std::string path, name, error;
};

// kjit_compile_named of `source` for sm_90 into `cache`, with `inputs` and `link_options`.
Compiled compile_linked(const std::string &cache, const std::vector<std::string> &inputs,
                        const std::vector<std::string> &link_options = {}, const char *source = kKernel,
                        const char *keyword = "use_lib") {
    std::vector<const char *> in, lo;
    for (const std::string &s : inputs) in.push_back(s.c_str());
    for (const std::string &s : link_options) lo.push_back(s.c_str());
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    options.link_inputs = in.data();
    options.link_input_count = in.size();
    options.link_options = lo.data();
    options.link_option_count = lo.size();
    char path[4096] = {}, name[1024] = {};
    Compiled c;
    c.status = kjit_compile_named(source, keyword, &options, path, sizeof path, nullptr, name, sizeof name, nullptr);
    c.path = path;
    c.name = name;
    if (c.status != KJIT_OK) c.error = kjit_last_error();
    return c;
}

// Entry folders under `cache` (the two-hex-digit shards' children).
std::size_t entries_in(const std::string &cache) {
    std::size_t n = 0;
    if (!kjit_test::exists(cache)) return 0;
    for (const std::string &shard : kjit_test::list_dir(cache)) {
        if (shard.size() == 2) n += kjit_test::list_dir(cache + "/" + shard).size();
    }
    return n;
}

bool mapped(const char *library) {
    std::ifstream maps("/proc/self/maps");
    std::stringstream text;
    text << maps.rdbuf();
    return text.str().find(library) != std::string::npos;
}

class Link : public ::testing::Test {
protected:
    TempDir dir_;
    const std::string cache_ = dir_.file("cache");
    const std::string lib_ = dir_.file("lib.ltoir");
};

TEST_F(Link, RightNameAndHitOnRepeat) {
    write_ltoir_library(lib_, 7);
    const kjit_stats before = kjit_test::stats_now();
    const Compiled first = compile_linked(cache_, {lib_});
    ASSERT_EQ(first.status, KJIT_OK) << first.error;
    EXPECT_EQ(first.name, "_Z7use_libPii");
    EXPECT_EQ(constant_in(first.path), 7);
    const kjit_stats after_miss = kjit_test::stats_now();
    EXPECT_EQ(after_miss.nvrtc_compiles - before.nvrtc_compiles, 1u);
    EXPECT_EQ(after_miss.nvjitlink_links - before.nvjitlink_links, 1u);
    EXPECT_GT(after_miss.nvjitlink_nanoseconds, before.nvjitlink_nanoseconds);

    for (int i = 0; i < 3; ++i) {
        const Compiled again = compile_linked(cache_, {lib_});
        ASSERT_EQ(again.status, KJIT_OK) << again.error;
        EXPECT_EQ(again.path, first.path);
        EXPECT_EQ(again.name, first.name);
    }
    const kjit_stats after_hits = kjit_test::stats_now();
    EXPECT_EQ(after_hits.nvrtc_compiles, after_miss.nvrtc_compiles);
    EXPECT_EQ(after_hits.nvjitlink_links, after_miss.nvjitlink_links);
    EXPECT_EQ(after_hits.compile_hits - after_miss.compile_hits + after_hits.memo_hits - after_miss.memo_hits, 3u);
}

TEST_F(Link, WithoutLinkInputsTheKeyIsThePlainOne) {
    // The same source without a link: another entry (a plain NVRTC cubin), never the linked one.
    write_ltoir_library(lib_, 7);
    const Compiled linked = compile_linked(cache_, {lib_});
    ASSERT_EQ(linked.status, KJIT_OK) << linked.error;
    const char *const self_contained = "__global__ void use_lib(int *out, int i) { *out = i; }\n";
    const Compiled plain = compile_linked(cache_, {}, {}, self_contained);
    ASSERT_EQ(plain.status, KJIT_OK) << plain.error;
    EXPECT_NE(plain.path, linked.path);
    EXPECT_EQ(constant_in(plain.path), -1);
}

TEST_F(Link, LibraryEditIsAMissAndRevertHitsTheEarlierEntry) {
    write_ltoir_library(lib_, 7);
    const Compiled seven = compile_linked(cache_, {lib_});
    ASSERT_EQ(seven.status, KJIT_OK) << seven.error;
    ASSERT_EQ(constant_in(seven.path), 7);

    write_ltoir_library(lib_, 8);  // the same path, new content
    const kjit_stats before_edit = kjit_test::stats_now();
    const Compiled eight = compile_linked(cache_, {lib_});
    ASSERT_EQ(eight.status, KJIT_OK) << eight.error;
    EXPECT_NE(eight.path, seven.path);
    EXPECT_EQ(constant_in(eight.path), 8);
    EXPECT_EQ(kjit_test::stats_now().nvjitlink_links - before_edit.nvjitlink_links, 1u);

    // Edited in place (same inode, same size) rather than replaced: still seen.
    {
        const std::string seven_bytes = nvrtc_output(library_source(7), "sm_90", true);
        std::FILE *f = std::fopen(lib_.c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        ASSERT_EQ(std::fwrite(seven_bytes.data(), 1, seven_bytes.size(), f), seven_bytes.size());
        std::fclose(f);
        ASSERT_EQ(::truncate(lib_.c_str(), static_cast<off_t>(seven_bytes.size())), 0);
    }
    const kjit_stats before_revert = kjit_test::stats_now();
    const Compiled back = compile_linked(cache_, {lib_});
    ASSERT_EQ(back.status, KJIT_OK) << back.error;
    EXPECT_EQ(back.path, seven.path);
    EXPECT_EQ(constant_in(back.path), 7);
    const kjit_stats after_revert = kjit_test::stats_now();
    EXPECT_EQ(after_revert.nvrtc_compiles, before_revert.nvrtc_compiles);
    EXPECT_EQ(after_revert.nvjitlink_links, before_revert.nvjitlink_links);
}

TEST_F(Link, ContentNotPathIsKeyed) {
    write_ltoir_library(lib_, 7);
    const Compiled here = compile_linked(cache_, {lib_});
    ASSERT_EQ(here.status, KJIT_OK) << here.error;
    const std::string moved = dir_.file("elsewhere.ltoir");
    kjit_test::write_file(moved, kjit_test::read_file(lib_));
    const kjit_stats before = kjit_test::stats_now();
    const Compiled there = compile_linked(cache_, {moved});
    ASSERT_EQ(there.status, KJIT_OK) << there.error;
    EXPECT_EQ(there.path, here.path);
    EXPECT_EQ(kjit_test::stats_now().nvjitlink_links, before.nvjitlink_links);
}

TEST_F(Link, LinkOptionsAreInTheKey) {
    write_ltoir_library(lib_, 7);
    const Compiled plain = compile_linked(cache_, {lib_});
    ASSERT_EQ(plain.status, KJIT_OK) << plain.error;
    const Compiled capped = compile_linked(cache_, {lib_}, {"-maxrregcount=32"});
    ASSERT_EQ(capped.status, KJIT_OK) << capped.error;
    EXPECT_NE(capped.path, plain.path);
    EXPECT_EQ(constant_in(capped.path), 7);
}

TEST_F(Link, FatbinLibraryOfARelocatableCubin) {
    const std::string cubin = dir_.file("lib.cubin");
    kjit_test::write_file(cubin, nvrtc_output(library_source(11), "sm_90", false));
    const std::string fatbin = dir_.file("lib.fatbin");
    const std::string make =
        std::string(KJIT_TEST_FATBINARY) + " --create='" + fatbin + "' --image3=kind=elf,sm=90,file='" + cubin + "'";
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    const Compiled c = compile_linked(cache_, {fatbin});
    ASSERT_EQ(c.status, KJIT_OK) << c.error;
    EXPECT_EQ(c.name, "_Z7use_libPii");
    EXPECT_EQ(constant_in(c.path), 11);
    // The relocatable cubin itself links too.
    const Compiled direct = compile_linked(cache_, {cubin});
    ASSERT_EQ(direct.status, KJIT_OK) << direct.error;
    EXPECT_EQ(constant_in(direct.path), 11);
}

// Each refusal: its status, a message naming what is wrong, nothing published.
TEST_F(Link, ErrorsSayWhatIsWrongAndPublishNothing) {
    write_ltoir_library(lib_, 7);
    const std::string missing = dir_.file("missing.ltoir");
    Compiled c = compile_linked(cache_, {missing});
    EXPECT_EQ(c.status, KJIT_ERROR_IO);
    EXPECT_NE(c.error.find(missing), std::string::npos) << c.error;

    const std::string text = dir_.file("notes.txt");
    kjit_test::write_file(text, "just some notes, not code\n");
    c = compile_linked(cache_, {text});
    EXPECT_EQ(c.status, KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(c.error.find(text), std::string::npos) << c.error;
    EXPECT_NE(c.error.find("no kind"), std::string::npos) << c.error;

    c = compile_linked(cache_, {dir_.path()});
    EXPECT_EQ(c.status, KJIT_ERROR_IO) << c.error;
    EXPECT_NE(c.error.find(dir_.path()), std::string::npos) << c.error;

    const std::string old_cubin = dir_.file("lib80.cubin");
    kjit_test::write_file(old_cubin, nvrtc_output(library_source(7), "sm_80", false));
    c = compile_linked(cache_, {old_cubin});
    EXPECT_EQ(c.status, KJIT_ERROR_LINK);
    EXPECT_NE(c.error.find(old_cubin), std::string::npos) << c.error;
    EXPECT_NE(c.error.find("sm_80"), std::string::npos) << c.error;

    const std::string newer = dir_.file("lib100.ltoir");
    write_ltoir_library(newer, 7, "sm_100");
    c = compile_linked(cache_, {newer});
    EXPECT_EQ(c.status, KJIT_ERROR_LINK);
    EXPECT_NE(c.error.find(newer), std::string::npos) << c.error;

    // The kernel's library missing from the link: nvJitLink's log names the function.
    const std::string unrelated = dir_.file("unrelated.ltoir");
    kjit_test::write_file(unrelated,
                          nvrtc_output("extern \"C\" __device__ int other(int i) { return i; }\n", "sm_90", true));
    c = compile_linked(cache_, {unrelated});
    EXPECT_EQ(c.status, KJIT_ERROR_LINK);
    EXPECT_NE(c.error.find("lib_value"), std::string::npos) << c.error;

    c = compile_linked(cache_, {lib_}, {"-no-such-option"});
    EXPECT_EQ(c.status, KJIT_ERROR_LINK);
    EXPECT_NE(c.error.find("-no-such-option"), std::string::npos) << c.error;

    c = compile_linked(cache_, {lib_}, {"-arch=sm_80"});
    EXPECT_EQ(c.status, KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(c.error.find("-arch=sm_80"), std::string::npos) << c.error;

    // Code without a kernel links, but there is nothing to load.
    const char *const no_kernel =
        "extern \"C\" __device__ int lib_value(int i);\n__device__ int twice(int i) { return 2 * lib_value(i); }\n";
    c = compile_linked(cache_, {lib_}, {}, no_kernel);
    EXPECT_EQ(c.status, KJIT_ERROR_NOT_FOUND);
    EXPECT_NE(c.error.find("no kernel"), std::string::npos) << c.error;

    EXPECT_EQ(entries_in(cache_), 0u);
    EXPECT_TRUE(kjit_test::temp_files_in(cache_).empty());
}

TEST_F(Link, AnEmptyOrNullInputNameIsInvalid) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = cache_.c_str();
    options.arch = "sm_90";
    const char *inputs[] = {""};
    options.link_inputs = inputs;
    options.link_input_count = 1;
    char path[4096];
    EXPECT_EQ(kjit_compile(kKernel, "use_lib", &options, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    const char *nulls[] = {nullptr};
    options.link_inputs = nulls;
    EXPECT_EQ(kjit_compile(kKernel, "use_lib", &options, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    options.link_inputs = nullptr;
    EXPECT_EQ(kjit_compile(kKernel, "use_lib", &options, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
}

// A batch on worker processes (kjit-worker beside libkjit.so): each job carries the bytes the
// parent keyed, and each linked cubin holds its own library's constant.
TEST_F(Link, BatchOnWorkerProcessesLinksEachItem) {
    constexpr int kItems = 4;
    std::vector<std::string> libs;
    for (int i = 0; i < kItems; ++i) {
        libs.push_back(dir_.file("lib" + std::to_string(i) + ".ltoir"));
        write_ltoir_library(libs.back(), 100 + i);
    }
    std::vector<const char *> inputs;
    for (const std::string &l : libs) inputs.push_back(l.c_str());
    std::vector<kjit_compile_options> options(kItems, kjit_compile_options KJIT_COMPILE_OPTIONS_INIT);
    std::vector<kjit_compile_request> requests(kItems, kjit_compile_request KJIT_COMPILE_REQUEST_INIT);
    std::vector<const kjit_compile_request *> items;
    for (std::size_t i = 0; i < kItems; ++i) {
        options[i].cache_dir = cache_.c_str();
        options[i].arch = "sm_90";
        options[i].link_inputs = &inputs[i];
        options[i].link_input_count = 1;
        requests[i].source = kKernel;
        requests[i].keyword = "use_lib";
        requests[i].options = &options[i];
        items.push_back(&requests[i]);
    }
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = 2;
    batch.worker_kind = KJIT_WORKERS_PROCESSES;
    kjit_batch_result *result = nullptr;
    const kjit_stats before = kjit_test::stats_now();
    ASSERT_EQ(kjit_compile_batch(items.data(), items.size(), &batch, &result), KJIT_OK) << kjit_last_error();
    for (std::size_t i = 0; i < kItems; ++i) {
        ASSERT_EQ(kjit_batch_result_status(result, i), KJIT_OK) << kjit_batch_result_error(result, i);
        EXPECT_STREQ(kjit_batch_result_kernel_name(result, i), "_Z7use_libPii");
        EXPECT_EQ(constant_in(kjit_batch_result_cubin_path(result, i)), 100 + static_cast<long>(i));
    }
    kjit_batch_result_release(result);
    EXPECT_EQ(kjit_test::stats_now().nvjitlink_links - before.nvjitlink_links, static_cast<std::uint64_t>(kItems));
    // The same requests one by one: hits on the entries the workers linked.
    for (std::size_t i = 0; i < kItems; ++i) {
        const Compiled c = compile_linked(cache_, {libs[i]});
        ASSERT_EQ(c.status, KJIT_OK) << c.error;
        EXPECT_EQ(constant_in(c.path), 100 + static_cast<long>(i));
    }
    EXPECT_EQ(kjit_test::stats_now().nvjitlink_links - before.nvjitlink_links, static_cast<std::uint64_t>(kItems));
}

// A fresh process (this binary run again) over the same cache and library: a hit with no
// NVRTC or nvJitLink run. Exit codes say what went wrong.
int child_hit(const std::string &cache, const std::string &lib, const std::string &expected) {
    const Compiled c = compile_linked(cache, {lib});
    if (c.status != KJIT_OK) {
        std::fprintf(stderr, "child: %s\n", c.error.c_str());
        return 11;
    }
    if (c.path != expected) return 12;
    kjit_stats s = KJIT_STATS_INIT;
    if (kjit_get_stats(&s) != KJIT_OK) return 13;
    if (s.nvrtc_compiles != 0 || s.nvjitlink_links != 0) return 14;
    if (mapped("libnvJitLink")) return 15;
    return 0;
}

int run_child(const std::vector<std::string> &args) {
    std::vector<char *> argv;
    std::string self = "/proc/self/exe";
    argv.push_back(&self[0]);
    std::vector<std::string> copy = args;
    for (std::string &a : copy) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -2;
    return WEXITSTATUS(status);
}

TEST_F(Link, HitInAFreshProcessRunsAndLoadsNoLinker) {
    write_ltoir_library(lib_, 7);
    const Compiled first = compile_linked(cache_, {lib_});
    ASSERT_EQ(first.status, KJIT_OK) << first.error;
    EXPECT_EQ(run_child({"--child-hit", cache_, lib_, first.path}), 0)
        << "11: the call failed, 12: another entry, 13: no stats, 14: NVRTC or nvJitLink ran, 15: nvJitLink was "
           "loaded";
}

// A request without link inputs never needs nvJitLink: a fresh process that compiles one (a
// miss) does not map it.
int child_plain(const std::string &cache) {
    const std::string path =
        kjit_test::compile_through_c_api(TempDir(), "__global__ void k(int *o) { *o = 1; }\n", "k");
    (void)cache;
    if (path.empty()) return 11;
    return mapped("libnvJitLink") ? 15 : 0;
}

TEST_F(Link, PlainCompilesNeverLoadTheLinker) { EXPECT_EQ(run_child({"--child-plain", cache_}), 0); }

}  // namespace

int main(int argc, char **argv) {
    if (argc == 5 && std::strcmp(argv[1], "--child-hit") == 0) return child_hit(argv[2], argv[3], argv[4]);
    if (argc == 3 && std::strcmp(argv[1], "--child-plain") == 0) return child_plain(argv[2]);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
