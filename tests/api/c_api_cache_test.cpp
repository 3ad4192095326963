// Cache maintenance through the public C ABI (kjit_cache_*, since 0.4), through libkjit.so as a
// user links it: the struct_size rules of every struct, NULL arguments, missing and wrong cache
// folders, prune by size and by age, verify and its fix, clear, and the *_init functions.
#include "kjit/kjit.h"

#include "c_api_support.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr int kEntries = 3;

std::string folder_of(const std::string &cubin) { return cubin.substr(0, cubin.rfind('/')); }

// Sets a folder's mtime (its recency record) `age_s` seconds in the past.
void age(const std::string &path, std::int64_t age_s) {
    const std::time_t t = std::time(nullptr) - static_cast<std::time_t>(age_s);
    const struct timespec times[2] = {{0, UTIME_OMIT}, {t, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

std::string error_text() { return kjit_last_error(); }

// kEntries entries (gemm<1>..gemm<kEntries>) compiled once per process into a template cache,
// copied (times kept, so the sidecars stay current) into each test's own folder: NVRTC runs
// kEntries times in all, not per test.
class CacheApi : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        template_dir_ = new TempDir();
        for (int i = 0; i < kEntries; ++i) {
            const std::string source = sources::numbered_gemm(i);
            template_cubins_.push_back(compile_through_c_api(*template_dir_, source.c_str(), "gemm"));
        }
    }
    static void TearDownTestSuite() {
        delete template_dir_;
        template_dir_ = nullptr;
        template_cubins_.clear();
    }

    void SetUp() override {
        ASSERT_EQ(template_cubins_.size(), static_cast<std::size_t>(kEntries));
        for (const std::string &c : template_cubins_) ASSERT_FALSE(c.empty());
        cache_ = dir_.file("cache");
        const std::string copy = "cp -a '" + template_dir_->file("cache") + "' '" + cache_ + "'";
        ASSERT_EQ(std::system(copy.c_str()), 0) << copy;
        for (const std::string &c : template_cubins_) {
            cubins_.push_back(cache_ + c.substr(template_dir_->file("cache").size()));
            ASSERT_TRUE(exists(cubins_.back())) << cubins_.back();
        }
    }

    // The summary of `cache_`, checked OK.
    kjit_cache_summary summary() {
        kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
        EXPECT_EQ(kjit_cache_summarize(cache_.c_str(), &s, nullptr), KJIT_OK) << error_text();
        return s;
    }

    static TempDir *template_dir_;
    static std::vector<std::string> template_cubins_;
    TempDir dir_;
    std::string cache_;
    std::vector<std::string> cubins_;
};

TempDir *CacheApi::template_dir_ = nullptr;
std::vector<std::string> CacheApi::template_cubins_;

struct VerifyReportDeleter {
    void operator()(kjit_verify_report *r) const { kjit_verify_report_release(r); }
};
using VerifyReport = std::unique_ptr<kjit_verify_report, VerifyReportDeleter>;

VerifyReport verify(const std::string &cache, int fix) {
    kjit_verify_report *raw = nullptr;
    EXPECT_EQ(kjit_cache_verify(cache.c_str(), fix, &raw), KJIT_OK) << error_text();
    return VerifyReport(raw);
}

}  // namespace

// ---- The *_init functions --------------------------------------------------------------------

// Each *_init gives byte for byte what its macro gives (the structs have no padding), writes
// nothing past an older caller's smaller struct, and refuses a size it does not know.
template <typename T, typename Init>
void check_init(const T &from_macro, Init init, std::size_t older_size) {
    T s;
    std::memset(static_cast<void *>(&s), 0xAB, sizeof s);
    ASSERT_EQ(init(&s, sizeof s), KJIT_OK) << error_text();
    EXPECT_EQ(std::memcmp(&s, &from_macro, sizeof s), 0);

    std::memset(static_cast<void *>(&s), 0xAB, sizeof s);
    ASSERT_EQ(init(&s, older_size), KJIT_OK) << error_text();
    EXPECT_EQ(s.struct_size, older_size);
    EXPECT_EQ(std::memcmp(reinterpret_cast<const char *>(&s) + sizeof(size_t),
                          reinterpret_cast<const char *>(&from_macro) + sizeof(size_t), older_size - sizeof(size_t)),
              0);
    const auto *tail = reinterpret_cast<const unsigned char *>(&s) + older_size;
    EXPECT_TRUE(std::all_of(tail, tail + (sizeof s - older_size), [](unsigned char c) { return c == 0xAB; }))
        << "wrote past the older struct_size";

    std::memset(static_cast<void *>(&s), 0xAB, sizeof s);
    EXPECT_EQ(init(&s, sizeof s + 8), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("struct_size is " + std::to_string(sizeof s + 8)), std::string::npos) << error_text();
    EXPECT_EQ(s.struct_size, static_cast<size_t>(0xABABABABABABABABull)) << "wrote into a refused struct";
    EXPECT_EQ(init(&s, sizeof(size_t) - 1), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(init(nullptr, sizeof s), KJIT_ERROR_INVALID_ARGUMENT);
}

TEST(CacheApiInit, InitFunctionsEqualTheMacros) {
    check_init(kjit_compile_options KJIT_COMPILE_OPTIONS_INIT, kjit_compile_options_init,
               offsetof(kjit_compile_options, max_cache_size));  // as 0.1 had it
    check_init(kjit_compile_request KJIT_COMPILE_REQUEST_INIT, kjit_compile_request_init,
               offsetof(kjit_compile_request, options));
    check_init(kjit_batch_options KJIT_BATCH_OPTIONS_INIT, kjit_batch_options_init,
               offsetof(kjit_batch_options, progress));
    check_init(kjit_batch_options KJIT_BATCH_OPTIONS_INIT, kjit_batch_options_init,
               offsetof(kjit_batch_options, worker_kind));  // as 0.4 had it
    check_init(kjit_prune_options KJIT_PRUNE_OPTIONS_INIT, kjit_prune_options_init,
               offsetof(kjit_prune_options, older_than_s));
    // What the macros promise, so that a wrong macro and a matching wrong function both fail.
    kjit_prune_options p = KJIT_PRUNE_OPTIONS_INIT;
    EXPECT_EQ(p.max_size, KJIT_PRUNE_NO_LIMIT);
    EXPECT_EQ(p.older_than_s, KJIT_PRUNE_NO_LIMIT);
    kjit_batch_options b;
    ASSERT_EQ(kjit_batch_options_init(&b, sizeof b), KJIT_OK);
    EXPECT_EQ(b.pch, KJIT_PCH_DEFAULT);
    EXPECT_EQ(b.progress, nullptr);
}

// ---- kjit_cache_dir ---------------------------------------------------------------------------

TEST(CacheApiDir, DefaultAndRelativeFolders) {
    TempDir dir;
    const std::string env_cache = dir.file("from-env");
    ScopedEnv cache_env("KJIT_CACHE_DIR", env_cache.c_str());
    char path[4096];
    size_t len = 0;
    ASSERT_EQ(kjit_cache_dir(nullptr, path, sizeof path, &len), KJIT_OK) << error_text();
    EXPECT_EQ(std::string(path), env_cache);
    EXPECT_EQ(len, env_cache.size());
    ASSERT_EQ(kjit_cache_dir("", path, sizeof path, nullptr), KJIT_OK);
    EXPECT_EQ(std::string(path), env_cache);
    // Relative: against the working directory, folded, no trailing '/'.
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
    ASSERT_EQ(kjit_cache_dir("a/./b/../c/", path, sizeof path, nullptr), KJIT_OK);
    EXPECT_EQ(std::string(path), std::string(cwd) + "/a/c");
    // The buffer rules of every out string.
    ASSERT_EQ(kjit_cache_dir(nullptr, nullptr, 0, &len), KJIT_OK);
    EXPECT_EQ(len, env_cache.size());
    char small[4];
    EXPECT_EQ(kjit_cache_dir(nullptr, small, sizeof small, &len), KJIT_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(kjit_cache_dir(nullptr, nullptr, 8, &len), KJIT_ERROR_INVALID_ARGUMENT);
    // No default at all.
    // (Empty counts as unset.)
    ScopedEnv no_cache("KJIT_CACHE_DIR", ""), no_xdg("XDG_CACHE_HOME", ""), no_home("HOME", "");
    EXPECT_EQ(kjit_cache_dir(nullptr, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("KJIT_CACHE_DIR"), std::string::npos) << error_text();
}

// ---- kjit_cache_summarize -----------------------------------------------------------------------

TEST_F(CacheApi, SummaryCountsEntriesByArch) {
    kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
    kjit_cache_arches *raw = nullptr;
    ASSERT_EQ(kjit_cache_summarize(cache_.c_str(), &s, &raw), KJIT_OK) << error_text();
    std::unique_ptr<kjit_cache_arches, decltype(&kjit_cache_arches_release)> arches(raw, &kjit_cache_arches_release);
    EXPECT_EQ(s.entries, static_cast<std::uint64_t>(kEntries));
    EXPECT_GT(s.bytes, 0u);
    EXPECT_EQ(s.max_size, 0u);
    EXPECT_EQ(s.in_transit, 0u);
    EXPECT_EQ(s.foreign, 0u);
    EXPECT_GT(s.least_recent_use_ns, 0);
    EXPECT_LE(s.least_recent_use_ns, s.most_recent_use_ns);
    EXPECT_GT(s.oldest_created_ns, 0);
    EXPECT_EQ(s.oldest_created_ns % kSecond, 0);  // the manifest records seconds
    EXPECT_LE(s.oldest_created_ns, s.newest_created_ns);
    EXPECT_LE(s.newest_created_ns, static_cast<std::int64_t>(std::time(nullptr) + 1) * kSecond);
    ASSERT_EQ(kjit_cache_arches_count(arches.get()), 1u);
    EXPECT_STREQ(kjit_cache_arches_name(arches.get(), 0), "sm_90");
    EXPECT_EQ(kjit_cache_arches_entries(arches.get(), 0), static_cast<std::uint64_t>(kEntries));
    EXPECT_EQ(kjit_cache_arches_bytes(arches.get(), 0), s.bytes);
    EXPECT_EQ(kjit_cache_arches_name(arches.get(), 1), nullptr);
    EXPECT_EQ(kjit_cache_arches_entries(arches.get(), 1), 0u);
    EXPECT_EQ(kjit_cache_arches_count(nullptr), 0u);
    EXPECT_EQ(kjit_cache_arches_name(nullptr, 0), nullptr);
    kjit_cache_arches_release(nullptr);

    // A foreign file is counted, never touched.
    write_file(cache_ + "/notes.txt", "mine");
    EXPECT_EQ(summary().foreign, 1u);
}

TEST_F(CacheApi, SummaryStructSizeRules) {
    // Too large: from a newer header, never half-filled.
    kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
    s.struct_size = sizeof s + 8;
    s.entries = 77;
    EXPECT_EQ(kjit_cache_summarize(cache_.c_str(), &s, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("summary->struct_size"), std::string::npos) << error_text();
    EXPECT_EQ(s.entries, 77u);
    // Older and smaller: filled up to its size, nothing past it.
    std::memset(static_cast<void *>(&s), 0xAB, sizeof s);
    s.struct_size = offsetof(kjit_cache_summary, least_recent_use_ns);
    ASSERT_EQ(kjit_cache_summarize(cache_.c_str(), &s, nullptr), KJIT_OK) << error_text();
    EXPECT_EQ(s.entries, static_cast<std::uint64_t>(kEntries));
    EXPECT_EQ(s.least_recent_use_ns, static_cast<std::int64_t>(0xABABABABABABABABull));
    // NULL summary; a handle asked for is NULL after a failure.
    kjit_cache_arches *arches = reinterpret_cast<kjit_cache_arches *>(&s);
    EXPECT_EQ(kjit_cache_summarize(cache_.c_str(), nullptr, &arches), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(arches, nullptr);
}

TEST_F(CacheApi, SummaryReportsTheSizeLimit) {
    {
        ScopedEnv limit("KJIT_CACHE_MAX_SIZE", "2G");
        EXPECT_EQ(summary().max_size, 2ull << 30);
    }
    ScopedEnv bad("KJIT_CACHE_MAX_SIZE", "0x10");
    kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
    EXPECT_EQ(kjit_cache_summarize(cache_.c_str(), &s, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("KJIT_CACHE_MAX_SIZE"), std::string::npos) << error_text();
}

TEST_F(CacheApi, NullOrEmptyCacheDirIsTheDefault) {
    ScopedEnv cache_env("KJIT_CACHE_DIR", cache_.c_str());
    for (const char *dir : {static_cast<const char *>(nullptr), ""}) {
        kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
        ASSERT_EQ(kjit_cache_summarize(dir, &s, nullptr), KJIT_OK) << error_text();
        EXPECT_EQ(s.entries, static_cast<std::uint64_t>(kEntries));
    }
    VerifyReport report;
    {
        kjit_verify_report *raw = nullptr;
        ASSERT_EQ(kjit_cache_verify(nullptr, 0, &raw), KJIT_OK) << error_text();
        report.reset(raw);
    }
    EXPECT_EQ(kjit_verify_report_entries_checked(report.get()), static_cast<size_t>(kEntries));
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_clear("", &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, static_cast<std::uint64_t>(kEntries));
}

// ---- Missing folders, files, NULLs ------------------------------------------------------------

TEST(CacheApiFolders, MissingFolderIsAnEmptyCacheAndIsNotCreated) {
    TempDir dir;
    const std::string missing = dir.file("nothing-here");
    kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
    s.entries = 5;
    ASSERT_EQ(kjit_cache_summarize(missing.c_str(), &s, nullptr), KJIT_OK) << error_text();
    EXPECT_EQ(s.entries, 0u);
    EXPECT_EQ(s.bytes, 0u);
    EXPECT_EQ(s.least_recent_use_ns, 0);
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    options.max_size = 0;
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_prune(missing.c_str(), &options, &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries + r.kept_entries, 0u);
    ASSERT_EQ(kjit_cache_clear(missing.c_str(), &r), KJIT_OK) << error_text();
    VerifyReport report = verify(missing, 1);
    ASSERT_NE(report, nullptr);
    EXPECT_EQ(kjit_verify_report_entries_checked(report.get()), 0u);
    EXPECT_EQ(kjit_verify_report_count(report.get()), 0u);
    EXPECT_FALSE(exists(missing));
}

TEST(CacheApiFolders, FileInsteadOfAFolderIsAnIoErrorNamingIt) {
    TempDir dir;
    const std::string file = dir.file("a-file");
    write_file(file, "not a cache\n");
    kjit_cache_summary s = KJIT_CACHE_SUMMARY_INIT;
    EXPECT_EQ(kjit_cache_summarize(file.c_str(), &s, nullptr), KJIT_ERROR_IO);
    EXPECT_NE(error_text().find(file), std::string::npos) << error_text();
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    options.max_size = 0;
    EXPECT_EQ(kjit_cache_prune(file.c_str(), &options, nullptr), KJIT_ERROR_IO);
    EXPECT_NE(error_text().find(file), std::string::npos) << error_text();
    EXPECT_EQ(kjit_cache_clear(file.c_str(), nullptr), KJIT_ERROR_IO);
    EXPECT_NE(error_text().find(file), std::string::npos) << error_text();
    kjit_verify_report *report = reinterpret_cast<kjit_verify_report *>(&s);
    EXPECT_EQ(kjit_cache_verify(file.c_str(), 1, &report), KJIT_ERROR_IO);
    EXPECT_NE(error_text().find(file), std::string::npos) << error_text();
    EXPECT_EQ(report, nullptr);
    EXPECT_EQ(read_file(file), "not a cache\n");
}

TEST(CacheApiFolders, NullArguments) {
    EXPECT_EQ(kjit_cache_verify(nullptr, 0, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("report"), std::string::npos) << error_text();
    EXPECT_EQ(kjit_cache_summarize(nullptr, nullptr, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_verify_report_count(nullptr), 0u);
    EXPECT_EQ(kjit_verify_report_entries_checked(nullptr), 0u);
    EXPECT_EQ(kjit_verify_report_entries_ok(nullptr), 0u);
    EXPECT_EQ(kjit_verify_report_path(nullptr, 0), nullptr);
    EXPECT_EQ(kjit_verify_report_kind(nullptr, 0), -1);
    EXPECT_EQ(kjit_verify_report_detail(nullptr, 0), nullptr);
    EXPECT_EQ(kjit_verify_report_fixed(nullptr, 0), -1);
    EXPECT_EQ(kjit_verify_report_action(nullptr, 0), nullptr);
    kjit_verify_report_release(nullptr);
}

// ---- Prune -------------------------------------------------------------------------------------

TEST_F(CacheApi, PruneByAgeRemovesTheEntriesNotUsedSince) {
    age(folder_of(cubins_[0]), 3 * 3600);
    age(folder_of(cubins_[1]), 2 * 3600);
    age(folder_of(cubins_[2]), 1 * 3600);
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    options.older_than_s = 90 * 60;
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, 2u);
    EXPECT_EQ(r.kept_entries, 1u);
    EXPECT_EQ(r.spared_in_use, 0u);
    EXPECT_FALSE(exists(cubins_[0]));
    EXPECT_FALSE(exists(cubins_[1]));
    EXPECT_TRUE(exists(cubins_[2]));
    EXPECT_EQ(r.kept_bytes, summary().bytes);
}

TEST_F(CacheApi, PruneBySizeRemovesTheLeastRecentlyUsed) {
    age(folder_of(cubins_[0]), 2 * 3600);
    age(folder_of(cubins_[1]), 3 * 3600);  // the least recently used
    age(folder_of(cubins_[2]), 1 * 3600);
    const kjit_cache_summary before = summary();
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    options.max_size = before.bytes - 1;
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, 1u);
    EXPECT_EQ(r.kept_entries, 2u);
    EXPECT_TRUE(exists(cubins_[0]));
    EXPECT_FALSE(exists(cubins_[1]));
    EXPECT_TRUE(exists(cubins_[2]));
    EXPECT_GT(r.removed_bytes, 0u);
    EXPECT_EQ(r.removed_bytes + r.kept_bytes, before.bytes);
    EXPECT_LE(r.kept_bytes, options.max_size);
}

TEST_F(CacheApi, PruneSparesEntriesInUse) {
    // Just compiled (copied with their times): in use.
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    options.max_size = 0;
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, 0u);
    EXPECT_EQ(r.spared_in_use, static_cast<std::uint64_t>(kEntries));
    for (const std::string &c : cubins_) EXPECT_TRUE(exists(c)) << c;
}

TEST_F(CacheApi, PruneWithoutOptionsRemovesNoEntry) {
    for (const std::string &c : cubins_) age(folder_of(c), 3600 * 24 * 365);
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), nullptr, nullptr), KJIT_OK) << error_text();
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, 0u);
    EXPECT_EQ(r.kept_entries, static_cast<std::uint64_t>(kEntries));
    for (const std::string &c : cubins_) EXPECT_TRUE(exists(c)) << c;
}

TEST_F(CacheApi, PruneStructSizeRules) {
    for (const std::string &c : cubins_) age(folder_of(c), 3 * 3600);
    kjit_prune_options options = KJIT_PRUNE_OPTIONS_INIT;
    options.max_size = 0;
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    // Too large options or report: refused before anything is removed.
    options.struct_size = sizeof options + 8;
    EXPECT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("options->struct_size"), std::string::npos) << error_text();
    options.struct_size = sizeof options;
    r.struct_size = sizeof r + 8;
    EXPECT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("report->struct_size"), std::string::npos) << error_text();
    EXPECT_EQ(kjit_cache_clear(cache_.c_str(), &r), KJIT_ERROR_INVALID_ARGUMENT);
    r.struct_size = 0;
    EXPECT_EQ(kjit_cache_prune(cache_.c_str(), &options, &r), KJIT_ERROR_INVALID_ARGUMENT);
    for (const std::string &c : cubins_) EXPECT_TRUE(exists(c)) << c;
    // An age that does not fit in int64 nanoseconds would wrap to a negative one: refused.
    r.struct_size = sizeof r;
    kjit_prune_options too_old = KJIT_PRUNE_OPTIONS_INIT;
    too_old.older_than_s = 20000ull * 7 * 86400;
    EXPECT_EQ(kjit_cache_prune(cache_.c_str(), &too_old, &r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("older_than_s"), std::string::npos) << error_text();
    for (const std::string &c : cubins_) EXPECT_TRUE(exists(c)) << c;

    // An older, smaller options struct: older_than_s (0 here: "every entry") lies past its size
    // and is not read, so nothing but the size bound applies.
    kjit_prune_options older = KJIT_PRUNE_OPTIONS_INIT;
    older.struct_size = offsetof(kjit_prune_options, older_than_s);
    older.older_than_s = 0;
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), &older, &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, 0u);
    // An older, smaller report: filled up to its size only.
    kjit_prune_report small;
    std::memset(static_cast<void *>(&small), 0xAB, sizeof small);
    small.struct_size = offsetof(kjit_prune_report, spared_in_use);
    options.struct_size = sizeof options;
    ASSERT_EQ(kjit_cache_prune(cache_.c_str(), &options, &small), KJIT_OK) << error_text();
    EXPECT_EQ(small.removed_entries, static_cast<std::uint64_t>(kEntries));
    EXPECT_EQ(small.kept_entries, 0xABABABABABABABABull);
    for (const std::string &c : cubins_) EXPECT_FALSE(exists(c)) << c;
}

// ---- Clear -------------------------------------------------------------------------------------

TEST_F(CacheApi, ClearRemovesEveryEntryInUseOrNot) {
    age(folder_of(cubins_[0]), 3 * 3600);  // the others are in use
    write_file(cache_ + "/notes.txt", "mine");
    kjit_prune_report r = KJIT_PRUNE_REPORT_INIT;
    ASSERT_EQ(kjit_cache_clear(cache_.c_str(), &r), KJIT_OK) << error_text();
    EXPECT_EQ(r.removed_entries, static_cast<std::uint64_t>(kEntries));
    EXPECT_EQ(r.kept_entries, 0u);
    EXPECT_EQ(r.spared_in_use, 0u);
    for (const std::string &c : cubins_) EXPECT_FALSE(exists(c)) << c;
    EXPECT_EQ(summary().entries, 0u);
    EXPECT_EQ(read_file(cache_ + "/notes.txt"), "mine");  // not the cache's: left alone
    ASSERT_EQ(kjit_cache_clear(cache_.c_str(), nullptr), KJIT_OK) << error_text();
}

// ---- Verify ------------------------------------------------------------------------------------

TEST_F(CacheApi, VerifyFindsDamageAndFixRepairsIt) {
    VerifyReport clean = verify(cache_, 0);
    ASSERT_NE(clean, nullptr);
    EXPECT_EQ(kjit_verify_report_entries_checked(clean.get()), static_cast<size_t>(kEntries));
    EXPECT_EQ(kjit_verify_report_entries_ok(clean.get()), static_cast<size_t>(kEntries));
    EXPECT_EQ(kjit_verify_report_count(clean.get()), 0u);

    // Damage: a truncated cubin (cannot be repaired) and an emptied sidecar (rebuilt).
    ASSERT_EQ(::truncate(cubins_[0].c_str(), 100), 0);
    write_file(cubins_[1] + ".name", "");
    VerifyReport found = verify(cache_, 0);
    ASSERT_NE(found, nullptr);
    ASSERT_EQ(kjit_verify_report_count(found.get()), 2u);
    EXPECT_EQ(kjit_verify_report_entries_ok(found.get()), static_cast<size_t>(kEntries - 2));
    std::set<int> kinds;
    for (size_t i = 0; i < 2; ++i) {
        const int kind = kjit_verify_report_kind(found.get(), i);
        kinds.insert(kind);
        const std::string path = kjit_verify_report_path(found.get(), i);
        const std::string detail = kjit_verify_report_detail(found.get(), i);
        EXPECT_EQ(kjit_verify_report_fixed(found.get(), i), 0);
        EXPECT_STREQ(kjit_verify_report_action(found.get(), i), "");
        if (kind == KJIT_CACHE_TRUNCATED_CUBIN) {
            EXPECT_EQ(path, folder_of(cubins_[0]));
            EXPECT_NE(detail.find(cubins_[0]), std::string::npos) << detail;
        } else {
            EXPECT_EQ(path, folder_of(cubins_[1]));
            EXPECT_NE(detail.find(cubins_[1] + ".name"), std::string::npos) << detail;
        }
    }
    EXPECT_EQ(kinds, (std::set<int>{KJIT_CACHE_TRUNCATED_CUBIN, KJIT_CACHE_SIDECAR_DAMAGED}));
    EXPECT_EQ(kjit_verify_report_path(found.get(), 2), nullptr);
    EXPECT_EQ(kjit_verify_report_kind(found.get(), 2), -1);
    EXPECT_EQ(kjit_verify_report_fixed(found.get(), 2), -1);
    EXPECT_TRUE(exists(cubins_[0]));  // without fix nothing changes

    VerifyReport fixed = verify(cache_, 1);
    ASSERT_NE(fixed, nullptr);
    ASSERT_EQ(kjit_verify_report_count(fixed.get()), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(kjit_verify_report_fixed(fixed.get(), i), 1) << kjit_verify_report_action(fixed.get(), i);
        EXPECT_STRNE(kjit_verify_report_action(fixed.get(), i), "");
    }
    EXPECT_FALSE(exists(cubins_[0]));  // removed: the next kjit_compile rebuilds it
    char name[256];
    ASSERT_EQ(kjit_resolve_name(cubins_[1].c_str(), "gemm", name, sizeof name, nullptr), KJIT_OK) << error_text();
    EXPECT_EQ(std::string(name), sources::numbered_gemm_name(1));

    VerifyReport after = verify(cache_, 0);
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(kjit_verify_report_count(after.get()), 0u);
    EXPECT_EQ(kjit_verify_report_entries_ok(after.get()), static_cast<size_t>(kEntries - 1));
}

TEST(CacheApiProblems, EveryProblemHasItsName) {
    const char *names[] = {"misplaced",          "missing_file",    "bad_manifest",    "bad_cubin",
                           "truncated_cubin",    "sidecar_missing", "sidecar_damaged", "sidecar_stale",
                           "sidecar_wrong_name", "stale_temp",      "foreign"};
    for (int p = KJIT_CACHE_MISPLACED; p <= KJIT_CACHE_FOREIGN; ++p) {
        EXPECT_STREQ(kjit_cache_problem_string(p), names[p]) << p;
    }
    EXPECT_STREQ(kjit_cache_problem_string(KJIT_CACHE_FOREIGN + 1), "unknown");
    EXPECT_STREQ(kjit_cache_problem_string(-1), "unknown");
}

// ---- Seed caches (since 0.9) ------------------------------------------------------------------

namespace {

// kjit_compile of numbered kernel `i` into `cache` with `seeds` (nullptr: the option not
// given), by a caller whose struct ends at `struct_size`; the status.
kjit_status compile_with_seeds(const std::string &cache, int i, const std::vector<const char *> *seeds,
                               size_t struct_size = sizeof(kjit_compile_options)) {
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.struct_size = struct_size;
    options.cache_dir = cache.c_str();
    options.arch = "sm_90";
    if (seeds) {
        options.seed_dirs = seeds->data();
        options.seed_dir_count = seeds->size();
    }
    const std::string source = sources::numbered_gemm(i);
    char path[4096];
    char name[256];
    const kjit_status st =
        kjit_compile_named(source.c_str(), "gemm", &options, path, sizeof path, nullptr, name, sizeof name, nullptr);
    if (st == KJIT_OK) {
        EXPECT_EQ(std::string(name), sources::numbered_gemm_name(i));
        EXPECT_EQ(std::string(path).rfind(cache + "/", 0), 0u) << path;
    }
    return st;
}

}  // namespace

// The seed_dirs option, $KJIT_CACHE_SEED, "none" whatever the variable says, and an older
// caller's struct (before seed_dirs: the variable), counted in kjit_stats.seed_hits.
TEST_F(CacheApi, SeedDirsOptionAndVariable) {
    const std::string seed = cache_;  // the fixture's copy of a warm cache
    const std::vector<const char *> given = {seed.c_str()};
    const std::vector<const char *> none = {"none"};
    const kjit_stats before = stats_now();
    ASSERT_EQ(compile_with_seeds(dir_.file("a"), 0, &given), KJIT_OK) << error_text();
    kjit_stats now = stats_now();
    EXPECT_EQ(now.seed_hits - before.seed_hits, 1u);
    EXPECT_EQ(now.nvrtc_compiles, before.nvrtc_compiles);
    {
        const ScopedEnv variable("KJIT_CACHE_SEED", (dir_.file("missing") + ":" + seed).c_str());
        ASSERT_EQ(compile_with_seeds(dir_.file("b"), 1, nullptr), KJIT_OK) << error_text();
        // An older caller's struct (0.8's, up to program_name) cannot give seeds: the variable's.
        ASSERT_EQ(compile_with_seeds(dir_.file("c"), 1, &given, offsetof(kjit_compile_options, seed_dirs)), KJIT_OK);
        now = stats_now();
        EXPECT_EQ(now.seed_hits - before.seed_hits, 3u);
        EXPECT_EQ(now.nvrtc_compiles, before.nvrtc_compiles);
        // "none": no seed whatever the variable says; the kernel is compiled.
        ASSERT_EQ(compile_with_seeds(dir_.file("d"), 2, &none), KJIT_OK) << error_text();
        now = stats_now();
        EXPECT_EQ(now.seed_hits - before.seed_hits, 3u);
        EXPECT_EQ(now.nvrtc_compiles - before.nvrtc_compiles, 1u);
    }
    // A NULL array with a count, a NULL or empty entry: invalid, said.
    kjit_compile_options bad = KJIT_COMPILE_OPTIONS_INIT;
    bad.cache_dir = cache_.c_str();
    bad.arch = "sm_90";
    bad.seed_dir_count = 1;
    char path[4096];
    EXPECT_EQ(kjit_compile(sources::kPlain, "plain_kernel", &bad, path, sizeof path, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("seed_dirs is NULL but its count is 1"), std::string::npos) << error_text();
    const char *empty[] = {""};
    bad.seed_dirs = empty;
    EXPECT_EQ(kjit_compile(sources::kPlain, "plain_kernel", &bad, path, sizeof path, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("seed_dirs has an empty folder name"), std::string::npos) << error_text();
}

// kjit_cache_export and kjit_cache_import: counts, the refused entries' report, struct_size rules.
TEST_F(CacheApi, ExportAndImport) {
    const std::string seed = dir_.file("seed");
    kjit_copy_report report = KJIT_COPY_REPORT_INIT;
    kjit_verify_report *raw = nullptr;
    ASSERT_EQ(kjit_cache_export(cache_.c_str(), seed.c_str(), nullptr, &report, &raw), KJIT_OK) << error_text();
    VerifyReport refused(raw);
    EXPECT_EQ(report.copied_entries, static_cast<std::uint64_t>(kEntries));
    EXPECT_GT(report.copied_bytes, 0u);
    EXPECT_EQ(report.refused_entries, 0u);
    EXPECT_EQ(kjit_verify_report_entries_checked(refused.get()), static_cast<size_t>(kEntries));
    EXPECT_EQ(kjit_verify_report_count(refused.get()), 0u);
    // Only entries: nothing at the top of the seed but shards.
    for (const std::string &name : list_dir(seed)) EXPECT_EQ(name.size(), 2u) << name;
    // Again: every entry there already; another arch: every entry skipped.
    ASSERT_EQ(kjit_cache_export(cache_.c_str(), seed.c_str(), "sm_90", &report, nullptr), KJIT_OK);
    EXPECT_EQ(report.copied_entries, 0u);
    EXPECT_EQ(report.present_entries, static_cast<std::uint64_t>(kEntries));
    ASSERT_EQ(kjit_cache_export(cache_.c_str(), dir_.file("other").c_str(), "sm_80", &report, nullptr), KJIT_OK);
    EXPECT_EQ(report.skipped_entries, static_cast<std::uint64_t>(kEntries));
    EXPECT_EQ(report.copied_entries, 0u);

    // One entry of the seed damaged: imported without it, and named.
    const std::string damaged = seed + cubins_[0].substr(cache_.size());
    std::string bytes = read_file(damaged);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
    write_file(damaged, bytes);
    const std::string imported = dir_.file("imported");
    ASSERT_EQ(kjit_cache_import(seed.c_str(), imported.c_str(), &report, &raw), KJIT_OK) << error_text();
    refused.reset(raw);
    EXPECT_EQ(report.copied_entries, static_cast<std::uint64_t>(kEntries - 1));
    EXPECT_EQ(report.refused_entries, 1u);
    ASSERT_EQ(kjit_verify_report_count(refused.get()), 1u);
    EXPECT_EQ(std::string(kjit_verify_report_path(refused.get(), 0)), folder_of(damaged));
    EXPECT_EQ(kjit_verify_report_kind(refused.get(), 0), KJIT_CACHE_BAD_CUBIN);
    EXPECT_EQ(std::string(kjit_verify_report_action(refused.get(), 0)), "not copied");
    EXPECT_FALSE(exists(imported + cubins_[0].substr(cache_.size())));
    EXPECT_TRUE(exists(imported + cubins_[1].substr(cache_.size())));

    // Bad arguments.
    EXPECT_EQ(kjit_cache_export(cache_.c_str(), nullptr, nullptr, nullptr, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_cache_import("", cache_.c_str(), nullptr, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_cache_import(cache_.c_str(), cache_.c_str(), nullptr, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(error_text().find("the same folder"), std::string::npos) << error_text();
    EXPECT_EQ(kjit_cache_import(dir_.file("none").c_str(), cache_.c_str(), nullptr, nullptr), KJIT_ERROR_IO);
    report.struct_size = sizeof report + 8;
    EXPECT_EQ(kjit_cache_export(cache_.c_str(), seed.c_str(), nullptr, &report, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
}
