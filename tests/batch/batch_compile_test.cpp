// kjit_compile_batch through libkjit.so: mixed batches (hits, misses, duplicates, failures),
// progress and cancellation, worker counts and PCH modes giving the same cache, and a batch
// racing single compiles from another process.
#include "c_api_support.hpp"
#include "kjit/kjit.h"

#include "batch/compiler.hpp"
#include "cache/cache.hpp"
#include "store/cache_verification.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace kjit_test;

// Requests that own their strings; pointers() is what kjit_compile_batch takes.
class Batch {
public:
    explicit Batch(std::string cache_dir) : cache_dir_(std::move(cache_dir)) {
        options_.cache_dir = cache_dir_.c_str();
        options_.arch = "sm_90";
    }
    // Adds an item; returns its index.
    std::size_t add(std::string source, std::string keyword) {
        sources_.push_back(std::move(source));
        keywords_.push_back(std::move(keyword));
        return sources_.size() - 1;
    }
    // An item that is a NULL pointer in the array.
    std::size_t add_null() {
        nulls_.insert(sources_.size());
        return add("", "");
    }
    // An item whose source is NULL.
    std::size_t add_null_source() {
        null_sources_.insert(sources_.size());
        return add("", "gemm");
    }
    std::size_t size() const { return sources_.size(); }

    kjit_status run(const kjit_batch_options *options, kjit_batch_result **result) {
        requests_.assign(sources_.size(), KJIT_COMPILE_REQUEST_INIT);
        std::vector<const kjit_compile_request *> pointers;
        for (std::size_t i = 0; i < sources_.size(); ++i) {
            requests_[i].source = null_sources_.count(i) ? nullptr : sources_[i].c_str();
            requests_[i].keyword = keywords_[i].c_str();
            requests_[i].options = &options_;
            pointers.push_back(nulls_.count(i) ? nullptr : &requests_[i]);
        }
        return kjit_compile_batch(pointers.data(), pointers.size(), options, result);
    }

    // kjit_compile of item i (what the batch must agree with).
    std::string compile_one(std::size_t i) const {
        char path[4096];
        const kjit_status st =
            kjit_compile(sources_[i].c_str(), keywords_[i].c_str(), &options_, path, sizeof path, nullptr);
        EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
        return st == KJIT_OK ? path : "";
    }

private:
    std::string cache_dir_;
    kjit_compile_options options_ = KJIT_COMPILE_OPTIONS_INIT;
    std::vector<std::string> sources_, keywords_;
    std::set<std::size_t> nulls_, null_sources_;
    std::vector<kjit_compile_request> requests_;
};

// What the progress callback saw.
struct Progress {
    struct Call {
        std::size_t done, total, index;
        kjit_status status;
        std::string path;
        std::thread::id thread;
        std::string resolved;  // kjit_resolve_name on the path, from inside the callback
    };
    std::vector<Call> calls;
    int cancel_at_call = 0;  // 1-based; 0: never
    int cancel_value = 1;    // what it returns to cancel (any non-zero cancels)
    int throw_at_call = 0;   // 1-based; 0: never. Throws std::runtime_error, or 42 with throw_int
    bool throw_int = false;
    std::string keyword = "gemm";

    static int callback(void *user, size_t done, size_t total, size_t index, kjit_status status, const char *path) {
        auto *self = static_cast<Progress *>(user);
        Call c{done, total, index, status, path ? path : "", std::this_thread::get_id(), ""};
        if (path) {
            // libkjit may be called from the callback.
            char name[512];
            if (kjit_resolve_name(path, self->keyword.c_str(), name, sizeof name, nullptr) == KJIT_OK)
                c.resolved = name;
        }
        self->calls.push_back(c);
        const int call = static_cast<int>(self->calls.size());
        if (call == self->throw_at_call) {
            if (self->throw_int) throw 42;
            throw std::runtime_error("thrown by the test's callback at item " + std::to_string(index));
        }
        return self->cancel_at_call != 0 && call == self->cancel_at_call ? self->cancel_value : 0;
    }
    kjit_batch_options options(unsigned workers, int pch = KJIT_PCH_DEFAULT) {
        kjit_batch_options o = KJIT_BATCH_OPTIONS_INIT;
        o.workers = workers;
        o.pch = pch;
        o.progress = &Progress::callback;
        o.progress_user_data = this;
        return o;
    }
};

// Releases a batch result at scope end.
struct ResultGuard {
    kjit_batch_result *r = nullptr;
    ~ResultGuard() { kjit_batch_result_release(r); }
};

const char *const kBroken = "__global__ void gemm(float *p) { p[0] = undefined_thing_in_batch; }\n";

TEST(CompileBatch, MixedHitsMissesDuplicatesAndFailures) {
    TempDir dir;
    Batch batch(dir.file("cache"));
    const std::size_t hit = batch.add(sources::numbered_gemm(0), "gemm");
    const std::size_t miss = batch.add(sources::numbered_gemm(1), "gemm");
    const std::size_t dup_of_miss = batch.add(sources::numbered_gemm(1), "gemm");
    const std::size_t broken = batch.add(kBroken, "gemm");
    const std::size_t null_item = batch.add_null();
    const std::size_t null_source = batch.add_null_source();
    const std::size_t dup_of_hit = batch.add(sources::numbered_gemm(0), "gemm");
    const std::size_t bad_keyword = batch.add(sources::numbered_gemm(2), "no such-keyword");
    const std::size_t miss2 = batch.add(sources::numbered_gemm(3), "gemm");
    const std::size_t not_found = batch.add(sources::numbered_gemm(4), "absent_kernel");
    const std::string hit_path = batch.compile_one(hit);

    const kjit_stats before = stats_now();
    Progress progress;
    const kjit_batch_options options = progress.options(2);
    ResultGuard result;
    const kjit_status st = batch.run(&options, &result.r);
    const kjit_stats after = stats_now();
    ASSERT_NE(result.r, nullptr);
    // The first failed item by index decides the batch's status.
    EXPECT_EQ(st, KJIT_ERROR_COMPILE);
    EXPECT_NE(std::string(kjit_last_error()).find("5 of 10 items failed; the first, item 3"), std::string::npos)
        << kjit_last_error();

    ASSERT_EQ(kjit_batch_result_count(result.r), batch.size());
    for (std::size_t ok : {hit, miss, dup_of_miss, dup_of_hit, miss2}) {
        EXPECT_EQ(kjit_batch_result_status(result.r, ok), KJIT_OK)
            << "item " << ok << ": " << kjit_batch_result_error(result.r, ok);
        ASSERT_NE(kjit_batch_result_cubin_path(result.r, ok), nullptr);
        EXPECT_STREQ(kjit_batch_result_error(result.r, ok), "");
        // Each path is what a single kjit_compile now answers (a hit), and each name what
        // kjit_resolve_name reads from it: hits, compiles and merged duplicates alike.
        EXPECT_EQ(kjit_batch_result_cubin_path(result.r, ok), batch.compile_one(ok));
        ASSERT_NE(kjit_batch_result_kernel_name(result.r, ok), nullptr);
        char name[256];
        ASSERT_EQ(kjit_resolve_name(kjit_batch_result_cubin_path(result.r, ok), "gemm", name, sizeof name, nullptr),
                  KJIT_OK);
        EXPECT_STREQ(kjit_batch_result_kernel_name(result.r, ok), name);
        EXPECT_STREQ(name, sources::numbered_gemm_name(ok == hit || ok == dup_of_hit ? 0
                                                       : ok == miss2                 ? 3
                                                                                     : 1)
                               .c_str());
    }
    EXPECT_EQ(kjit_batch_result_kernel_name(result.r, broken), nullptr);
    EXPECT_EQ(kjit_batch_result_kernel_name(result.r, batch.size()), nullptr);
    EXPECT_EQ(kjit_batch_result_kernel_name(nullptr, 0), nullptr);
    EXPECT_EQ(kjit_batch_result_cubin_path(result.r, hit), hit_path);
    EXPECT_STREQ(kjit_batch_result_cubin_path(result.r, miss), kjit_batch_result_cubin_path(result.r, dup_of_miss));

    EXPECT_EQ(kjit_batch_result_status(result.r, broken), KJIT_ERROR_COMPILE);
    EXPECT_EQ(kjit_batch_result_cubin_path(result.r, broken), nullptr);
    const std::string log = kjit_batch_result_error(result.r, broken);
    EXPECT_NE(log.find("undefined_thing_in_batch"), std::string::npos) << log;  // the NVRTC log
    EXPECT_NE(log.find("error"), std::string::npos) << log;
    EXPECT_EQ(log.find("precompiled header"), std::string::npos) << log;  // PCH notes stay out

    EXPECT_EQ(kjit_batch_result_status(result.r, null_item), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_batch_result_error(result.r, null_item)).find("requests[4] is NULL"), std::string::npos);
    EXPECT_EQ(kjit_batch_result_status(result.r, null_source), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_batch_result_error(result.r, null_source)).find("requests[5]->source is NULL"),
              std::string::npos);
    EXPECT_EQ(kjit_batch_result_status(result.r, bad_keyword), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_batch_result_status(result.r, not_found), KJIT_ERROR_NOT_FOUND);
    EXPECT_NE(std::string(kjit_batch_result_error(result.r, not_found)).find("absent_kernel"), std::string::npos);

    // Out of range and NULL handles.
    EXPECT_EQ(kjit_batch_result_status(result.r, batch.size()), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_batch_result_cubin_path(result.r, batch.size()), nullptr);
    EXPECT_EQ(kjit_batch_result_error(result.r, batch.size()), nullptr);
    EXPECT_EQ(kjit_batch_result_count(nullptr), 0u);
    EXPECT_EQ(kjit_batch_result_status(nullptr, 0), KJIT_ERROR_INVALID_ARGUMENT);

    // NVRTC ran for the three distinct misses (two compile, one fails) and the not-found item;
    // the duplicate and the hits ran none.
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, 4u);
    EXPECT_EQ(after.compile_hits - before.compile_hits, 2u);
    EXPECT_EQ(after.errors[KJIT_ERROR_COMPILE] - before.errors[KJIT_ERROR_COMPILE], 1u);
    EXPECT_EQ(after.errors[KJIT_ERROR_INVALID_ARGUMENT] - before.errors[KJIT_ERROR_INVALID_ARGUMENT], 3u);

    // Progress: every item once, on this thread, done counting up, items found before any
    // compile (the hits and the argument errors) reported first.
    ASSERT_EQ(progress.calls.size(), batch.size());
    std::set<std::size_t> seen;
    for (std::size_t k = 0; k < progress.calls.size(); ++k) {
        const auto &c = progress.calls[k];
        EXPECT_EQ(c.done, k + 1);
        EXPECT_EQ(c.total, batch.size());
        EXPECT_EQ(c.thread, std::this_thread::get_id());
        EXPECT_EQ(c.status, kjit_batch_result_status(result.r, c.index));
        if (c.status == KJIT_OK) {
            EXPECT_EQ(c.path, kjit_batch_result_cubin_path(result.r, c.index));
            EXPECT_FALSE(c.resolved.empty());
        } else {
            EXPECT_TRUE(c.path.empty());
        }
        seen.insert(c.index);
    }
    EXPECT_EQ(seen.size(), batch.size());
    std::vector<std::size_t> first_reported;
    for (std::size_t k = 0; k < 5; ++k) first_reported.push_back(progress.calls[k].index);
    EXPECT_EQ(first_reported, (std::vector<std::size_t>{hit, null_item, null_source, dup_of_hit, bad_keyword}));
    EXPECT_EQ(progress.calls[hit].resolved, sources::numbered_gemm_name(0));

    // Nothing of the failed items reached the cache, and what did is sound.
    auto report = kjit::store::cache_verification::verify(dir.file("cache"), false);
    ASSERT_TRUE(report.ok()) << report.error().message;
    EXPECT_EQ(report->entries_checked, 3u);
    EXPECT_TRUE(report->clean());
}

TEST(CompileBatch, CancelFromTheFirstReportStartsNoCompile) {
    TempDir dir;
    Batch batch(dir.file("cache"));
    const std::size_t hit = batch.add(sources::numbered_gemm(0), "gemm");
    for (int i = 1; i <= 6; ++i) batch.add(sources::numbered_gemm(i), "gemm");
    batch.compile_one(hit);

    const kjit_stats before = stats_now();
    Progress progress;
    progress.cancel_at_call = 1;  // the hit, reported before any compile starts
    const kjit_batch_options options = progress.options(2);
    ResultGuard result;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_CANCELLED);
    EXPECT_NE(std::string(kjit_last_error()).find("6 of 7 items were not started"), std::string::npos)
        << kjit_last_error();
    const kjit_stats after = stats_now();
    ASSERT_NE(result.r, nullptr);
    EXPECT_EQ(kjit_batch_result_status(result.r, hit), KJIT_OK);
    for (std::size_t i = 1; i < batch.size(); ++i) {
        EXPECT_EQ(kjit_batch_result_status(result.r, i), KJIT_ERROR_CANCELLED);
        EXPECT_EQ(kjit_batch_result_cubin_path(result.r, i), nullptr);
        EXPECT_NE(std::string(kjit_batch_result_error(result.r, i)).find("cancelled"), std::string::npos);
    }
    EXPECT_EQ(progress.calls.size(), 1u);
    EXPECT_EQ(after.nvrtc_compiles, before.nvrtc_compiles);
    EXPECT_EQ(after.errors[KJIT_ERROR_CANCELLED] - before.errors[KJIT_ERROR_CANCELLED], 1u);  // the batch, once
    auto report = kjit::store::cache_verification::verify(dir.file("cache"), false);
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->entries_checked, 1u);
}

TEST(CompileBatch, CancelMidwayStopsUnstartedItemsAndARerunFinishesThem) {
    TempDir dir;
    Batch batch(dir.file("cache"));
    for (int i = 0; i < 8; ++i) batch.add(sources::numbered_gemm(10 + i), "gemm");
    Progress progress;
    progress.cancel_at_call = 1;  // after the first compile
    const kjit_batch_options options = progress.options(1);
    ResultGuard first;
    EXPECT_EQ(batch.run(&options, &first.r), KJIT_ERROR_CANCELLED);
    std::size_t ok = 0, cancelled = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const kjit_status s = kjit_batch_result_status(first.r, i);
        ASSERT_TRUE(s == KJIT_OK || s == KJIT_ERROR_CANCELLED) << s;
        (s == KJIT_OK ? ok : cancelled)++;
    }
    // The one worker may have taken the next item while the callback ran; no more.
    EXPECT_GE(ok, 1u);
    EXPECT_LE(ok, 2u);
    EXPECT_EQ(progress.calls.size(), ok);
    auto report = kjit::store::cache_verification::verify(dir.file("cache"), false);
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->entries_checked, ok);
    EXPECT_TRUE(report->clean());

    // Run again, uncancelled: the finished items are hits, the rest compile.
    const kjit_stats before = stats_now();
    Progress again;
    const kjit_batch_options options2 = again.options(2);
    ResultGuard second;
    EXPECT_EQ(batch.run(&options2, &second.r), KJIT_OK) << kjit_last_error();
    const kjit_stats after = stats_now();
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, cancelled);
    EXPECT_EQ(after.compile_hits - before.compile_hits, ok);
    for (std::size_t i = 0; i < batch.size(); ++i) {
        if (kjit_batch_result_status(first.r, i) == KJIT_OK) {
            EXPECT_STREQ(kjit_batch_result_cubin_path(first.r, i), kjit_batch_result_cubin_path(second.r, i));
        }
    }
}

TEST(CompileBatch, AnyNonZeroReturnCancels) {
    TempDir dir;
    Batch batch(dir.file("cache"));
    const std::size_t hit = batch.add(sources::numbered_gemm(0), "gemm");
    for (int i = 1; i <= 3; ++i) batch.add(sources::numbered_gemm(i), "gemm");
    batch.compile_one(hit);
    // An error code, a negative value, the most negative int: each is "cancel", as 1 is.
    for (const int value : {static_cast<int>(KJIT_ERROR_IO), -1, INT_MIN}) {
        const kjit_stats before = stats_now();
        Progress progress;
        progress.cancel_at_call = 1;  // the hit, reported before any compile starts
        progress.cancel_value = value;
        const kjit_batch_options options = progress.options(1);
        ResultGuard result;
        EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_CANCELLED) << value;
        ASSERT_NE(result.r, nullptr);
        EXPECT_EQ(kjit_batch_result_status(result.r, hit), KJIT_OK);
        for (std::size_t i = 1; i < batch.size(); ++i) {
            EXPECT_EQ(kjit_batch_result_status(result.r, i), KJIT_ERROR_CANCELLED);
        }
        EXPECT_EQ(progress.calls.size(), 1u);
        EXPECT_EQ(stats_now().nvrtc_compiles, before.nvrtc_compiles);
    }
}

// A C++ callback that throws: the exception stops at libkjit's side of the C ABI. The batch is
// cancelled as if the callback had returned non-zero, the callback is not called again, the
// result is complete and kjit_last_error() says what was thrown. (0.3.0 let the exception
// unwind the batch: KJIT_ERROR_INTERNAL, "internal error", and no result at all.)
TEST(CompileBatch, ThrowingCallbackCancelsTheBatchAndKeepsTheResult) {
    for (const bool throw_int : {false, true}) {
        SCOPED_TRACE(throw_int ? "throw 42" : "throw std::runtime_error");
        TempDir dir;
        Batch batch(dir.file("cache"));
        for (int i = 0; i < 8; ++i) batch.add(sources::numbered_gemm(20 + i), "gemm");
        const kjit_stats before = stats_now();
        Progress progress;
        progress.throw_at_call = 1;  // after the first compile
        progress.throw_int = throw_int;
        const kjit_batch_options options = progress.options(1);
        ResultGuard result;
        EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_CANCELLED);
        const std::string error = kjit_last_error();
        EXPECT_NE(error.find("the progress callback threw"), std::string::npos) << error;
        EXPECT_NE(error.find(throw_int ? "not a std::exception" : "thrown by the test's callback at item 0"),
                  std::string::npos)
            << error;
        ASSERT_NE(result.r, nullptr);
        ASSERT_EQ(kjit_batch_result_count(result.r), batch.size());
        EXPECT_EQ(progress.calls.size(), 1u);  // not called again, also for the item in flight
        EXPECT_EQ(kjit_batch_result_status(result.r, 0), KJIT_OK);
        std::size_t ok = 0;
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const kjit_status s = kjit_batch_result_status(result.r, i);
            ASSERT_TRUE(s == KJIT_OK || s == KJIT_ERROR_CANCELLED) << s;
            if (s == KJIT_OK) ++ok;
        }
        EXPECT_LE(ok, 2u);  // the one worker may have taken the next item meanwhile
        EXPECT_EQ(stats_now().errors[KJIT_ERROR_CANCELLED] - before.errors[KJIT_ERROR_CANCELLED], 1u);
        EXPECT_EQ(stats_now().errors[KJIT_ERROR_INTERNAL], before.errors[KJIT_ERROR_INTERNAL]);
        // What finished is published and sound.
        auto report = kjit::store::cache_verification::verify(dir.file("cache"), false);
        ASSERT_TRUE(report.ok());
        EXPECT_EQ(report->entries_checked, ok);
        EXPECT_TRUE(report->clean());
    }
}

// Thrown at the last report, with nothing left to cancel: still KJIT_ERROR_CANCELLED, so the
// caller learns that its callback failed.
TEST(CompileBatch, CallbackThrowingAtTheLastItemIsStillReported) {
    TempDir dir;
    Batch batch(dir.file("cache"));
    const std::size_t hit = batch.add(sources::numbered_gemm(0), "gemm");
    batch.compile_one(hit);
    Progress progress;
    progress.throw_at_call = 1;
    const kjit_batch_options options = progress.options(1);
    ResultGuard result;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_CANCELLED);
    EXPECT_NE(std::string(kjit_last_error()).find("0 of 1 items were not started"), std::string::npos)
        << kjit_last_error();
    ASSERT_NE(result.r, nullptr);
    EXPECT_EQ(kjit_batch_result_status(result.r, hit), KJIT_OK);
}

// The callback may run a batch of its own (kjit.h: it may call any libkjit function).
TEST(CompileBatch, CallbackMayRunANestedBatch) {
    TempDir dir;
    Batch outer(dir.file("cache"));
    for (int i = 0; i < 3; ++i) outer.add(sources::numbered_gemm(30 + i), "gemm");
    struct Nested {
        Batch inner;
        int calls = 0;
        kjit_status inner_status = KJIT_ERROR_INTERNAL;
        std::vector<std::string> inner_paths;
    } nested{Batch(dir.file("cache")), 0, KJIT_ERROR_INTERNAL, {}};
    for (int i = 0; i < 3; ++i) nested.inner.add(sources::numbered_gemm(40 + i), "gemm");
    kjit_batch_options options = KJIT_BATCH_OPTIONS_INIT;
    options.workers = 2;
    options.progress_user_data = &nested;
    options.progress = [](void *user, size_t, size_t, size_t, kjit_status, const char *) -> int {
        auto *n = static_cast<Nested *>(user);
        if (n->calls++ == 0) {
            Progress progress;
            const kjit_batch_options inner_options = progress.options(2);
            ResultGuard r;
            n->inner_status = n->inner.run(&inner_options, &r.r);
            for (std::size_t i = 0; r.r && i < kjit_batch_result_count(r.r); ++i) {
                const char *path = kjit_batch_result_cubin_path(r.r, i);
                n->inner_paths.push_back(path ? path : "");
            }
        }
        return 0;
    };
    ResultGuard result;
    EXPECT_EQ(outer.run(&options, &result.r), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(nested.calls, 3);
    EXPECT_EQ(nested.inner_status, KJIT_OK);
    ASSERT_EQ(nested.inner_paths.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(kjit_batch_result_cubin_path(result.r, i), outer.compile_one(i));
        EXPECT_EQ(nested.inner_paths[i], nested.inner.compile_one(i));
    }
}

// What a cache holds, with what NVRTC does not reproduce left out: per entry, its files, its
// source, its manifest without the creation time, compile duration, cubin hash and check line,
// its cubin's size and the kernel name (cubin bytes differ between any two compiles: NVRTC gives internal-linkage
// symbols a per-compile id).
std::map<std::string, std::string> cache_contents(const std::string &cache_dir, const char *keyword) {
    std::map<std::string, std::string> out;
    for (const std::string &shard : list_dir(cache_dir)) {
        for (const std::string &key : list_dir(cache_dir + "/" + shard)) {
            const std::string entry = cache_dir + "/" + shard + "/" + key;
            std::ostringstream desc;
            for (const std::string &f : list_dir(entry)) desc << f << ",";
            desc << "\nsource:" << read_file(entry + "/source.cu");
            std::istringstream manifest(read_file(entry + "/manifest.txt"));
            for (std::string line; std::getline(manifest, line);) {
                if (line.rfind("created", 0) == 0 || line.rfind("compile_seconds", 0) == 0 ||
                    line.rfind("cubin_hash", 0) == 0 || line.rfind("check", 0) == 0) {
                    continue;
                }
                desc << "\nmanifest:" << line;
            }
            desc << "\ncubin bytes:" << read_file(entry + "/kernel.cubin").size();
            char name[512] = "";
            EXPECT_EQ(kjit_resolve_name((entry + "/kernel.cubin").c_str(), keyword, name, sizeof name, nullptr),
                      KJIT_OK);
            desc << "\nname:" << name;
            out[shard + "/" + key] = desc.str();
        }
    }
    return out;
}

TEST(CompileBatch, WorkerCountsAndPchModesGiveTheSameCache) {
    TempDir dir;
    std::vector<std::map<std::string, std::string>> caches;
    const std::vector<std::pair<unsigned, int>> settings = {
        {1, KJIT_PCH_ON}, {2, KJIT_PCH_DEFAULT}, {8, KJIT_PCH_ON}, {2, KJIT_PCH_OFF}};
    for (const auto &[workers, pch] : settings) {
        const std::string cache = dir.file("cache-" + std::to_string(workers) + "-" + std::to_string(pch));
        Batch batch(cache);
        for (int i = 0; i < 10; ++i) batch.add(sources::numbered_gemm(20 + i), "gemm");
        batch.add(sources::numbered_gemm(20), "gemm");  // duplicates
        batch.add(sources::numbered_gemm(25), "gemm");
        Progress progress;
        const kjit_batch_options options = progress.options(workers, pch);
        ResultGuard result;
        ASSERT_EQ(batch.run(&options, &result.r), KJIT_OK) << kjit_last_error();
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const std::string path = kjit_batch_result_cubin_path(result.r, i);
            EXPECT_EQ(path.rfind(cache, 0), 0u) << path;
            const int n = i < 10 ? static_cast<int>(20 + i) : (i == 10 ? 20 : 25);
            EXPECT_EQ(progress.calls.size(), batch.size());
            char name[512];
            ASSERT_EQ(kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr), KJIT_OK);
            EXPECT_EQ(name, sources::numbered_gemm_name(n));
        }
        auto report = kjit::store::cache_verification::verify(cache, false);
        ASSERT_TRUE(report.ok());
        EXPECT_EQ(report->entries_checked, 10u);
        EXPECT_TRUE(report->clean());
        caches.push_back(cache_contents(cache, "gemm"));
        EXPECT_EQ(caches.back().size(), 10u);
    }
    for (std::size_t k = 1; k < caches.size(); ++k) {
        EXPECT_EQ(caches[k], caches[0]) << "workers " << settings[k].first << ", pch " << settings[k].second;
    }
}

// The same request for two cache folders in one batch is two jobs on two workers: each item
// gets an entry in its own folder, never a path in the other's.
TEST(CompileBatch, SameRequestIntoTwoCacheFoldersFillsBoth) {
    TempDir dir;
    const std::string folders[2] = {dir.file("a"), dir.file("b")};
    kjit_compile_options options[2] = {KJIT_COMPILE_OPTIONS_INIT, KJIT_COMPILE_OPTIONS_INIT};
    kjit_compile_request requests[2] = {KJIT_COMPILE_REQUEST_INIT, KJIT_COMPILE_REQUEST_INIT};
    const std::string source = sources::numbered_gemm(41);
    const kjit_compile_request *items[2];
    for (int i = 0; i < 2; ++i) {
        options[i].cache_dir = folders[i].c_str();
        options[i].arch = "sm_90";
        requests[i].source = source.c_str();
        requests[i].keyword = "gemm";
        requests[i].options = &options[i];
        items[i] = &requests[i];
    }
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = 2;
    ResultGuard result;
    ASSERT_EQ(kjit_compile_batch(items, 2, &batch, &result.r), KJIT_OK) << kjit_last_error();
    for (std::size_t i = 0; i < 2; ++i) {
        ASSERT_EQ(kjit_batch_result_status(result.r, i), KJIT_OK) << kjit_batch_result_error(result.r, i);
        const std::string path = kjit_batch_result_cubin_path(result.r, i);
        EXPECT_EQ(path.rfind(folders[i] + "/", 0), 0u) << "item " << i << ": " << path;
        EXPECT_TRUE(exists(path)) << path;
        char name[512];
        ASSERT_EQ(kjit_resolve_name(path.c_str(), "gemm", name, sizeof name, nullptr), KJIT_OK) << kjit_last_error();
        EXPECT_EQ(name, sources::numbered_gemm_name(41));
    }
}

TEST(CompileBatch, BatchAndSingleCompilesFromAnotherProcessLeaveASoundCache) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    constexpr int kKernels = 12;
    // The child compiles the same keys one by one, in reverse order, while the batch runs.
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(go[1]);
        char byte;
        if (::read(go[0], &byte, 1) != 1) ::_exit(3);
        kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
        options.cache_dir = cache.c_str();
        options.arch = "sm_90";
        for (int i = kKernels - 1; i >= 0; --i) {
            char path[4096], name[512];
            if (kjit_compile(sources::numbered_gemm(40 + i).c_str(), "gemm", &options, path, sizeof path, nullptr) !=
                KJIT_OK)
                ::_exit(1);
            if (kjit_resolve_name(path, "gemm", name, sizeof name, nullptr) != KJIT_OK) ::_exit(1);
            if (sources::numbered_gemm_name(40 + i) != name) ::_exit(2);
        }
        ::_exit(0);
    }
    ::close(go[0]);
    Batch batch(cache);
    for (int i = 0; i < kKernels; ++i) batch.add(sources::numbered_gemm(40 + i), "gemm");
    kjit_batch_options options = KJIT_BATCH_OPTIONS_INIT;
    options.workers = 2;
    ASSERT_EQ(::write(go[1], "g", 1), 1);
    ::close(go[1]);
    ResultGuard result;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_OK) << kjit_last_error();
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    for (int i = 0; i < kKernels; ++i) {
        char name[512];
        ASSERT_EQ(kjit_resolve_name(kjit_batch_result_cubin_path(result.r, static_cast<std::size_t>(i)), "gemm", name,
                                    sizeof name, nullptr),
                  KJIT_OK);
        EXPECT_EQ(name, sources::numbered_gemm_name(40 + i));
    }
    auto report = kjit::store::cache_verification::verify(cache, false);
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->entries_checked, static_cast<std::size_t>(kKernels));
    EXPECT_TRUE(report->clean());
    for (const std::string &shard : list_dir(cache)) {
        for (const std::string &name : list_dir(cache + "/" + shard)) {
            EXPECT_EQ(name.find(".tmp-"), std::string::npos) << shard << "/" << name;
            EXPECT_EQ(name.find(".trash-"), std::string::npos) << shard << "/" << name;
        }
    }
}

// NVRTC reuses an automatic PCH for any compile with matching options, without checking the
// headers it was made from; each header identity must get PCHs of its own. Items that differ
// only in an in-memory header, or in a header on disk under an include path edited between two
// batches, must each compile against their own header (a static_assert checks the value).
TEST(CompileBatch, PchNeverServesAnotherHeadersContent) {
    TempDir dir;
    const std::string include = dir.file("include");
    ASSERT_EQ(::mkdir(include.c_str(), 0700), 0);
    auto source = [](const char *header, int value) {
        return std::string("#include \"") + header +
               "\"\n#include <cuda/std/cstdint>\n"
               "static_assert(KJIT_CFG_VALUE == " +
               std::to_string(value) +
               ", \"compiled against another header\");\n"
               "__global__ void gemm(cuda::std::int32_t *p) { p[0] = KJIT_CFG_VALUE; }\n";
    };
    const std::string cache = dir.file("cache");
    const std::string cccl = std::string("-I") + KJIT_TEST_CUDA_INCLUDE + "/cccl";
    const char *nvrtc_options[] = {cccl.c_str(), "-std=c++17"};
    const char *include_paths[] = {include.c_str()};
    // In-memory headers: one "cfg.h", three contents, one batch (the first and last alike).
    std::vector<std::string> header_text = {"#define KJIT_CFG_VALUE 1\n", "#define KJIT_CFG_VALUE 2\n",
                                            "#define KJIT_CFG_VALUE 1\n"};
    std::vector<kjit_header> headers(3);
    std::vector<kjit_compile_options> options(3, kjit_compile_options KJIT_COMPILE_OPTIONS_INIT);
    std::vector<std::string> sources;
    std::vector<kjit_compile_request> requests(3, kjit_compile_request KJIT_COMPILE_REQUEST_INIT);
    std::vector<const kjit_compile_request *> items;
    for (int i = 0; i < 3; ++i) sources.push_back(source("cfg.h", i == 1 ? 2 : 1));
    for (std::size_t i = 0; i < 3; ++i) {
        headers[i] = kjit_header{"cfg.h", header_text[i].c_str()};
        options[i].cache_dir = cache.c_str();
        options[i].arch = "sm_90";
        options[i].nvrtc_options = nvrtc_options;
        options[i].nvrtc_option_count = 2;
        options[i].headers = &headers[i];
        options[i].header_count = 1;
        requests[i].source = sources[i].c_str();
        requests[i].keyword = "gemm";
        requests[i].options = &options[i];
        items.push_back(&requests[i]);
    }
    kjit_batch_options batch = KJIT_BATCH_OPTIONS_INIT;
    batch.workers = 1;
    batch.pch = KJIT_PCH_ON;
    ResultGuard result;
    EXPECT_EQ(kjit_compile_batch(items.data(), items.size(), &batch, &result.r), KJIT_OK) << kjit_last_error();

    // A header on disk, edited between two batches of this process.
    kjit_compile_options disk = KJIT_COMPILE_OPTIONS_INIT;
    disk.cache_dir = cache.c_str();
    disk.arch = "sm_90";
    disk.nvrtc_options = nvrtc_options;
    disk.nvrtc_option_count = 2;
    disk.include_paths = include_paths;
    disk.include_path_count = 1;
    for (int value : {3, 44}) {
        write_file(include + "/disk_cfg.h", "#define KJIT_CFG_VALUE " + std::to_string(value) + "\n");
        const std::string s = source("disk_cfg.h", value);
        kjit_compile_request request = KJIT_COMPILE_REQUEST_INIT;
        request.source = s.c_str();
        request.keyword = "gemm";
        request.options = &disk;
        const kjit_compile_request *one[] = {&request};
        ResultGuard r;
        EXPECT_EQ(kjit_compile_batch(one, 1, &batch, &r.r), KJIT_OK)
            << "header value " << value << ": " << kjit_last_error();
    }
}

// The default PCH policy: a PCH only where at least two misses of one header identity compile
// in one process (the compile that makes it costs about what a later one saves), those misses
// on one worker. Items that put their configuration before the #include, or each include a
// header of their own (humming's style), share nothing: a PCH would cost each a creation and
// serve none (about 20% slower), and `--pch` among their options (DeepGEMM passes it on every
// compile) does not change that. Counted by the batch's compiles (internal counters), not timed. Below the C ABI, with
// the internal library's own cache and counters, on 2 worker threads (no worker helper beside this test).
namespace pch_policy {

struct Count {
    std::uint64_t compiles, pch_compiles, pch_identities;
};

Count count() {
    const auto &c = kjit::cache::Cache::instance().counters();
    return Count{c.nvrtc_compiles.load(), c.pch_compiles.load(), c.pch_identities.load()};
}

// A folder of headers: kernel0..2.h (each uses CFG, defined before the #include) and shared.h.
std::string make_headers(TempDir &dir) {
    const std::string include = dir.file("include");
    EXPECT_EQ(::mkdir(include.c_str(), 0700), 0);
    for (int i = 0; i < 3; ++i) {
        write_file(include + "/kernel" + std::to_string(i) + ".h",
                   "template <int V> __global__ void gemm(float *p) { p[0] = V + CFG; }\n");
    }
    write_file(include + "/shared.h", "#define CFG 7\ntemplate <int V> __global__ void gemm(float *p) { p[0] = V; }\n");
    // heavy.h: over 6 MiB of headers (a comment: NVRTC reads it fast), where a PCH was once
    // thought to need four misses to pay.
    std::string heavy;
    const std::string line = "// " + std::string(1021, 'x') + "\n";
    while (heavy.size() < (7u << 20)) heavy += line;
    write_file(include + "/heavy.h", heavy);
    return include;
}

std::string instantiate(int v) { return "template __global__ void gemm<" + std::to_string(v) + ">(float *);\n"; }

// Compiles `sources` as one batch on 2 workers; what the batch's compiles counted. `first_report`
// (when given) gets the NVRTC compiles started when the first item was reported.
Count run(const std::string &include, const std::vector<std::string> &sources, kjit::batch::compiler::Pch pch,
          const std::string &cache_dir, const std::vector<std::string> &nvrtc_options = {},
          std::uint64_t *first_report = nullptr) {
    std::vector<kjit::Result<kjit::key::Request>> items;
    for (const std::string &source : sources) {
        kjit::key::Request r;
        r.source = source;
        r.keyword = "gemm";
        r.cache_dir = cache_dir;
        r.arch = "sm_90";
        r.include_paths = {include};
        r.nvrtc_options = nvrtc_options;
        items.emplace_back(std::move(r));
    }
    kjit::batch::compiler::Options options;
    options.workers = 2;
    options.pch = pch;
    const Count before = count();
    if (first_report) {
        options.progress = [&](std::size_t done, std::size_t, std::size_t, const auto &) {
            if (done == 1) *first_report = count().compiles - before.compiles;
            return false;
        };
    }
    for (const auto &result : kjit::batch::compiler::compile(std::move(items), options)) {
        EXPECT_TRUE(result.ok()) << result.error().message;
    }
    const Count after = count();
    return Count{after.compiles - before.compiles, after.pch_compiles - before.pch_compiles,
                 after.pch_identities - before.pch_identities};
}

}  // namespace pch_policy

TEST(CompileBatch, DefaultPchOnlyForMissesThatShareTheirHeaders) {
    using kjit::batch::compiler::Pch;
    using pch_policy::instantiate;
    using pch_policy::run;
    TempDir dir;
    const std::string include = pch_policy::make_headers(dir);
    // humming's style: the configuration before the #include, a header each.
    std::vector<std::string> own;
    for (int i = 0; i < 3; ++i) {
        own.push_back("#define CFG " + std::to_string(i) + "\n#include <kernel" + std::to_string(i) + ".h>\n" +
                      instantiate(i));
    }
    pch_policy::Count c = run(include, own, Pch::automatic, dir.file("cache-own"));
    EXPECT_EQ(c.compiles, 3u);
    EXPECT_EQ(c.pch_compiles, 0u) << "items that share no header each paid for a PCH";
    EXPECT_EQ(c.pch_identities, 0u);
    // The same configuration before the same header, four instantiations after it: one PCH.
    std::vector<std::string> same;
    for (int i = 0; i < 4; ++i) same.push_back("#include <shared.h>\n" + instantiate(10 + i));
    c = run(include, same, Pch::automatic, dir.file("cache-same"));
    EXPECT_EQ(c.compiles, 4u);
    EXPECT_EQ(c.pch_compiles, 4u);
    EXPECT_EQ(c.pch_identities, 1u);
    // Three that share headers: one PCH (its making costs about one use's saving), over light
    // headers (humming's 3.8 MB) as over heavy ones (DeepGEMM's 10.5 MB; until 2026-12-07 a
    // weight rule wanted four misses there, which left DeepGEMM's groups of two and three plain
    // at 0.80x the batch with PCH on). The prices recorded decide where known (PchPrice tests).
    std::vector<std::string> three, heavy;
    for (int i = 0; i < 3; ++i) {
        three.push_back("// three\n#include <shared.h>\n" + instantiate(60 + i));
        heavy.push_back("// heavy\n#include <heavy.h>\n#include <shared.h>\n" + instantiate(70 + i));
    }
    c = run(include, three, Pch::automatic, dir.file("cache-three"));
    EXPECT_EQ(c.compiles, 3u);
    EXPECT_EQ(c.pch_compiles, 3u) << "a group of three over light headers got no PCH";
    EXPECT_EQ(c.pch_identities, 1u);
    c = run(include, heavy, Pch::automatic, dir.file("cache-heavy"));
    EXPECT_EQ(c.compiles, 3u);
    EXPECT_EQ(c.pch_compiles, 3u) << "a group of three over heavy headers got no PCH";
    EXPECT_EQ(c.pch_identities, 1u);
    // `--pch` among the options of items that share nothing: still none (it made one each).
    // (A PCH folder lives as long as the process: a prefix of their own, for identities of
    // their own.)
    std::vector<std::string> own_pch;
    for (const std::string &source : own) own_pch.push_back("// with --pch\n" + source);
    c = run(include, own_pch, Pch::automatic, dir.file("cache-own-pch"), {"--pch"});
    EXPECT_EQ(c.compiles, 3u);
    EXPECT_EQ(c.pch_compiles, 0u) << "--pch made a PCH for items that share nothing";
    EXPECT_EQ(c.pch_identities, 0u);
    // Four that share, one alone (its configuration differs): the four only, one PCH.
    // (Four, so that the group gets one whatever its headers weigh.)
    const std::string pair = "// the group\n#include <shared.h>\n";
    std::vector<std::string> mixed = {pair + instantiate(20), "#define CFG 5\n#include <kernel0.h>\n" + instantiate(22),
                                      pair + instantiate(21), pair + instantiate(23), pair + instantiate(24)};
    c = run(include, mixed, Pch::automatic, dir.file("cache-mixed"));
    EXPECT_EQ(c.compiles, 5u);
    EXPECT_EQ(c.pch_compiles, 4u);
    EXPECT_EQ(c.pch_identities, 1u);
    // Hits and merged duplicates are not misses that share: one miss alone gets no PCH.
    std::vector<std::string> one = {pair + instantiate(20), pair + instantiate(30), pair + instantiate(30)};
    c = run(include, one, Pch::automatic, dir.file("cache-mixed"));
    EXPECT_EQ(c.compiles, 1u);
    EXPECT_EQ(c.pch_compiles, 0u);
    // KJIT_PCH_ON: every miss, shared or not (each of humming's a PCH of its own); KJIT_PCH_OFF:
    // none.
    c = run(include, own, Pch::on, dir.file("cache-own-on"));
    EXPECT_EQ(c.pch_compiles, 3u);
    EXPECT_EQ(c.pch_identities, 3u);
    c = run(include, same, Pch::off, dir.file("cache-same-off"));
    EXPECT_EQ(c.pch_compiles, 0u);
}

// Misses that share a PCH go to one worker, whose first compile makes it, while the other
// workers go on with other misses: two groups of four on two worker threads make one PCH
// each (neither group's misses made a second one on another worker), and the second worker
// started compiling before the first item was reported. (Before, a batch whose first miss made
// a PCH started its other workers only after that compile: one NVRTC run at the first report.)
TEST(CompileBatch, GroupsSharingAPchDoNotWaitForEachOther) {
    using kjit::batch::compiler::Pch;
    using pch_policy::instantiate;
    TempDir dir;
    const std::string include = pch_policy::make_headers(dir);
    std::vector<std::string> sources;
    for (int i = 0; i < 4; ++i) {
        sources.push_back("// group a\n#include <shared.h>\n" + instantiate(40 + i));
        sources.push_back("// group b\n#include <shared.h>\n" + instantiate(50 + i));
    }
    std::uint64_t started_at_first_report = 0;
    const pch_policy::Count c =
        pch_policy::run(include, sources, Pch::automatic, dir.file("cache"), {}, &started_at_first_report);
    EXPECT_EQ(c.compiles, 8u);
    EXPECT_EQ(c.pch_compiles, 8u);
    EXPECT_EQ(c.pch_identities, 2u) << "a group's misses made more than one PCH";
    EXPECT_GE(started_at_first_report, 2u) << "the second worker waited for the first one's PCH";
}

TEST(CompileBatch, RefusedCallsAndOlderStructs) {
    TempDir dir;
    Batch batch(dir.file("cache"));
    batch.add(sources::numbered_gemm(0), "gemm");
    ResultGuard result;
    // NULL out handle; NULL array with a count.
    EXPECT_EQ(batch.run(nullptr, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_compile_batch(nullptr, 3, nullptr, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(result.r, nullptr);
    EXPECT_NE(std::string(kjit_last_error()).find("requests is NULL but count is 3"), std::string::npos);
    // An empty batch is fine.
    EXPECT_EQ(kjit_compile_batch(nullptr, 0, nullptr, &result.r), KJIT_OK);
    ASSERT_NE(result.r, nullptr);
    EXPECT_EQ(kjit_batch_result_count(result.r), 0u);
    kjit_batch_result_release(result.r);
    result.r = nullptr;

    kjit_batch_options options = KJIT_BATCH_OPTIONS_INIT;
    options.struct_size = sizeof(kjit_batch_options) + 8;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(result.r, nullptr);
    EXPECT_NE(std::string(kjit_last_error()).find("options->struct_size"), std::string::npos);
    options = KJIT_BATCH_OPTIONS_INIT;
    options.pch = 7;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("options->pch is 7"), std::string::npos);

    // $KJIT_JOBS: a malformed value is refused when the workers are left to it, not otherwise.
    ::setenv("KJIT_JOBS", "lots", 1);
    options = KJIT_BATCH_OPTIONS_INIT;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("$KJIT_JOBS is 'lots'"), std::string::npos);
    options.workers = 1;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_OK) << kjit_last_error();
    kjit_batch_result_release(result.r);
    result.r = nullptr;
    ::setenv("KJIT_JOBS", "3", 1);
    EXPECT_EQ(batch.run(nullptr, &result.r), KJIT_OK) << kjit_last_error();
    kjit_batch_result_release(result.r);
    result.r = nullptr;
    ::unsetenv("KJIT_JOBS");

    // The worker kind: an unknown one is refused; so is a malformed $KJIT_WORKER_KIND when the
    // kind is left to it, and not otherwise.
    options = KJIT_BATCH_OPTIONS_INIT;
    options.worker_kind = 9;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(result.r, nullptr);
    EXPECT_NE(std::string(kjit_last_error()).find("options->worker_kind is 9"), std::string::npos);
    options = KJIT_BATCH_OPTIONS_INIT;
    options.reserved = 1;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("options->reserved is 1"), std::string::npos);
    ::setenv("KJIT_WORKER_KIND", "fibers", 1);
    options = KJIT_BATCH_OPTIONS_INIT;
    options.workers = 1;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("$KJIT_WORKER_KIND is 'fibers'"), std::string::npos)
        << kjit_last_error();
    options.worker_kind = KJIT_WORKERS_THREADS;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_OK) << kjit_last_error();
    kjit_batch_result_release(result.r);
    result.r = nullptr;
    ::unsetenv("KJIT_WORKER_KIND");

    // An older, shorter options struct: only the fields it holds are read.
    options = KJIT_BATCH_OPTIONS_INIT;
    options.struct_size = offsetof(kjit_batch_options, pch);
    options.pch = 99;  // past its size: not read
    options.workers = 1;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_OK) << kjit_last_error();
    kjit_batch_result_release(result.r);
    result.r = nullptr;
    options = KJIT_BATCH_OPTIONS_INIT;
    options.struct_size = offsetof(kjit_batch_options, worker_kind);  // 0.4's struct
    options.worker_kind = 99;
    options.workers = 1;
    EXPECT_EQ(batch.run(&options, &result.r), KJIT_OK) << kjit_last_error();
}

// count = SIZE_MAX failed with KJIT_ERROR_INTERNAL ("vector::reserve"), and other counts no
// request array can hold with an out-of-memory error, or worse. More than a batch takes (2^24
// requests) is an invalid argument, refused before any request is read.
TEST(CompileBatch, HugeCountsAreInvalidArguments) {
    const kjit_compile_request *one[1] = {nullptr};
    for (const std::size_t count : {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / sizeof(void *) + 1, std::size_t{1} << 40,
                                    std::size_t{1} << 32, (std::size_t{1} << 24) + 1}) {
        ResultGuard result;
        ASSERT_EQ(kjit_compile_batch(one, count, nullptr, &result.r), KJIT_ERROR_INVALID_ARGUMENT)
            << count << ": " << kjit_last_error();
        EXPECT_EQ(result.r, nullptr);
        const std::string error = kjit_last_error();
        EXPECT_NE(error.find("count is " + std::to_string(count)), std::string::npos) << error;
        EXPECT_NE(error.find("at most 16777216"), std::string::npos) << error;
    }
}

TEST(CompileBatch, BadRequestStructSizeFailsOnlyThatItem) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options copts = KJIT_COMPILE_OPTIONS_INIT;
    copts.cache_dir = cache.c_str();
    copts.arch = "sm_90";
    const std::string good_source = sources::numbered_gemm(1);
    kjit_compile_request good = KJIT_COMPILE_REQUEST_INIT;
    good.source = good_source.c_str();
    good.keyword = "gemm";
    good.options = &copts;
    kjit_compile_request bad = good;
    bad.struct_size = 3;
    const kjit_compile_request *items[] = {&bad, &good};
    ResultGuard result;
    EXPECT_EQ(kjit_compile_batch(items, 2, nullptr, &result.r), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_batch_result_status(result.r, 0), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_batch_result_error(result.r, 0)).find("requests[0]->struct_size is 3"),
              std::string::npos);
    EXPECT_EQ(kjit_batch_result_status(result.r, 1), KJIT_OK);
    EXPECT_STREQ(kjit_status_string(KJIT_ERROR_CANCELLED), "cancelled");
}

}  // namespace
