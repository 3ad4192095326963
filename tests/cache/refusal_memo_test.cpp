// The hit memo's refusals (hit_memo.hpp, issue 48): a serving process that refuses to compile
// (key::CompileMode::never) answers a repeat of a miss it refused from memory, without keying,
// looking in the stores or scanning the include tree again (a header-heavy request's scan costs
// milliseconds), and never past a change that could turn the miss into a hit: an entry
// appearing in the cache folder or a seed (another process warming it), a file the request reads
// changing back to a state an entry was built for, another mode, seed list or cluster tier. Each
// test gives its cache a long revalidation interval, so that what it checks never depends on the
// machine's speed: only the checks at each repeat can stop the memo.
#include "cache/cache.hpp"
#include "cache/hit_memo.hpp"
#include "key/dependency_watch.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using kjit::Errc;
using kjit::cache::Cache;
using kjit::key::CompileMode;
using kjit::key::Request;
using namespace kjit_test;

namespace {

// A cache whose memo serves for a minute.
struct MemoCache {
    Cache cache;
    MemoCache() { cache.hit_memo().set_revalidate_ns(60'000'000'000); }
    std::uint64_t refusals() const { return cache.counters().memo_refusals.load(); }
};

// Whether the header watch works here; known once a look-up has used it.
bool watch_usable() { return kjit::key::dependency_watch::stats().usable; }

// A request that reads two headers through an include folder of `dir` (inc/v.h includes w.h).
Request header_request(TempDir &dir, const std::string &cache) {
    ::mkdir(dir.file("inc").c_str(), 0755);
    ::mkdir(dir.file("first").c_str(), 0755);
    write_file(dir.file("inc/v.h"), "#define V 1\n#include \"w.h\"\n");
    write_file(dir.file("inc/w.h"), "#define W 4\n");
    Request r;
    r.source = "#include <v.h>\n__global__ void served(float *p) { p[0] = V + W; }\n";
    r.keyword = "served";
    r.cache_dir = cache;
    r.arch = "sm_90";
    r.include_paths = {dir.file("first"), dir.file("inc")};
    return r;
}

// One without files.
Request plain_request(const std::string &cache) {
    Request r;
    r.source = "template <int N> __global__ void served(float *p) { p[0] = N; }\n";
    r.keyword = "served";
    r.cache_dir = cache;
    r.arch = "sm_90";
    r.name_expression = "served<3>";
    return r;
}

Request strict(Request r) {
    r.compile_mode = CompileMode::never;
    r.compile_mode_origin = "the compile_mode option";
    return r;
}

// A strict request's answer: the refusal's message, or "" for a hit (its path in *cubin).
std::string refused(Cache &cache, const Request &r, std::string *cubin = nullptr) {
    auto answer = cache.compile(r);
    if (answer) {
        if (cubin) *cubin = answer->cubin;
        return "";
    }
    EXPECT_EQ(answer.error().code, Errc::not_cached) << answer.error().message;
    return answer.error().message;
}

}  // namespace

// The repeat of a refused miss is refused again from memory, with the same message, counted as a
// miss; for a request that reads files only where the header watch can vouch for them.
TEST(RefusalMemo, ARepeatIsRefusedFromMemory) {
    for (const bool reads_files : {false, true}) {
        SCOPED_TRACE(reads_files ? "a request that reads headers" : "a request without files");
        TempDir dir;
        MemoCache m;
        const Request r =
            strict(reads_files ? header_request(dir, dir.file("cache")) : plain_request(dir.file("cache")));
        const std::string first = refused(m.cache, r);
        ASSERT_NE(first, "");
        EXPECT_EQ(m.refusals(), 0u);
        const auto misses = m.cache.counters().compile_misses.load();
        for (int i = 0; i < 5; ++i) EXPECT_EQ(refused(m.cache, r), first);
        if (reads_files && !watch_usable()) {
            EXPECT_EQ(m.refusals(), 0u) << "refused from memory with no watch to prove the headers";
            continue;
        }
        EXPECT_EQ(m.refusals(), 5u);
        EXPECT_EQ(m.cache.counters().compile_misses.load(), misses + 5);
        EXPECT_EQ(m.cache.counters().nvrtc_compiles.load(), 0u);
    }
}

// What turns the refused miss into a hit is seen at the next repeat, whether the refusal was
// proven at the first repeat or served from memory a few times before.
TEST(RefusalMemo, AnEntryAppearingIsServedAtTheNextRepeat) {
    struct Appearing {
        const char *what;
        bool reads_files;
        bool seed;  // the entry appears in the request's seed, not its cache folder
    };
    const std::vector<Appearing> cases = {
        {"compiled into the cache folder by another process", false, false},
        {"compiled into the cache folder by another process (headers)", true, false},
        {"compiled into the seed the request reads", false, true},
        {"compiled into the seed the request reads (headers)", true, true},
    };
    for (const Appearing &c : cases)
        for (const int repeats : {0, 3}) {
            SCOPED_TRACE(std::string(c.what) + ", after " + std::to_string(repeats) + " refusals from memory");
            TempDir dir;
            MemoCache m;
            Request r =
                strict(c.reads_files ? header_request(dir, dir.file("cache")) : plain_request(dir.file("cache")));
            if (c.seed) {
                // There already (a seed found missing is looked for again a minute later).
                ASSERT_EQ(::mkdir(dir.file("seed").c_str(), 0755), 0);
                r.seed_dirs = {dir.file("seed")};
            }
            ASSERT_NE(refused(m.cache, r), "");
            for (int i = 0; i < repeats; ++i) {
                ASSERT_NE(refused(m.cache, r), "");
            }
            if (!c.reads_files || watch_usable()) {
                ASSERT_EQ(m.refusals(), static_cast<std::uint64_t>(repeats));
            }
            // Another process (a cache of its own) warms it, where compiling is allowed.
            Cache other;
            Request warm = r;
            warm.compile_mode = CompileMode::always;
            warm.seed_dirs.clear();
            if (c.seed) warm.cache_dir = dir.file("seed");
            ASSERT_TRUE(other.compile(warm).ok());
            std::string cubin;
            EXPECT_EQ(refused(m.cache, r, &cubin), "") << "still refused after the entry appeared";
            EXPECT_EQ(cubin.rfind(dir.file("cache") + "/", 0), 0u) << cubin;
            EXPECT_EQ(m.refusals(), c.reads_files && !watch_usable() ? 0u : static_cast<std::uint64_t>(repeats));
        }
}

// A request that reads files: an edit that brings its files back to a state an entry was built
// for, a header appearing first on the search path, or one going away, is seen at the next repeat.
TEST(RefusalMemo, AChangeOfTheFilesReadIsSeenAtTheNextRepeat) {
    struct Edit {
        const char *what;
        std::function<void(TempDir &)> before_warm;  // the state an entry is built for
        std::function<void(TempDir &)> to_refused;   // to a state with no entry
        std::function<void(TempDir &)> back;         // back to the warmed state
    };
    const auto shadow = [](TempDir &d) { write_file(d.file("first/v.h"), "#define V 3\n#define W 0\n"); };
    const auto unshadow = [](TempDir &d) { ASSERT_EQ(::unlink(d.file("first/v.h").c_str()), 0); };
    const auto none = [](TempDir &) {};
    const std::vector<Edit> edits = {
        {"the included header edited back", none, [](TempDir &d) { write_file(d.file("inc/w.h"), "#define W 5\n"); },
         [](TempDir &d) { write_file(d.file("inc/w.h"), "#define W 4\n"); }},
        {"a shadowing header going away", none, shadow, unshadow},
        {"a shadowing header appearing", shadow, unshadow, shadow},
    };
    for (const Edit &edit : edits) {
        SCOPED_TRACE(edit.what);
        TempDir dir;
        MemoCache m;
        const Request r = strict(header_request(dir, dir.file("cache")));
        edit.before_warm(dir);
        Request warm = r;
        warm.compile_mode = CompileMode::always;
        Cache other;
        auto warmed = other.compile(warm);
        ASSERT_TRUE(warmed.ok()) << warmed.error().message;
        edit.to_refused(dir);
        ASSERT_NE(refused(m.cache, r), "");
        // Known once used (inotify started).
        if (!watch_usable())
            GTEST_SKIP() << "no header watch here (inotify): refusals that read files are not remembered";
        ASSERT_NE(refused(m.cache, r), "");
        ASSERT_EQ(m.refusals(), 1u);
        edit.back(dir);
        std::string cubin;
        EXPECT_EQ(refused(m.cache, r, &cubin), "") << "still refused after the files changed back to a warmed state";
        EXPECT_EQ(cubin, warmed->cubin);
        EXPECT_EQ(m.refusals(), 1u);
    }
}

// The refusal is the answer of one request in one mode, with its seeds and cluster tier: the
// same request in another mode compiles, and another origin of the mode, another seed list or
// another tier is looked up in full. KJIT_HIT_MEMO=0 turns refusals from memory off too.
TEST(RefusalMemo, OnlyTheSameStrictRequestIsRefusedFromMemory) {
    TempDir dir;
    MemoCache m;
    const Request r = strict(plain_request(dir.file("cache")));
    ASSERT_NE(refused(m.cache, r), "");
    ASSERT_NE(refused(m.cache, r), "");
    ASSERT_EQ(m.refusals(), 1u);

    Request by_variable = r;
    by_variable.compile_mode_origin = "KJIT_NO_COMPILE";
    {
        ScopedEnv mode("KJIT_NO_COMPILE", "1");
        const std::string message = refused(m.cache, by_variable);
        EXPECT_NE(message.find("$KJIT_NO_COMPILE=1"), std::string::npos) << message;
    }
    Request seeded = r;
    seeded.seed_dirs = {dir.file("seed")};
    EXPECT_NE(refused(m.cache, seeded), "");
    {
        ScopedEnv off("KJIT_HIT_MEMO", "0");
        EXPECT_NE(refused(m.cache, r), "");
    }
    EXPECT_EQ(m.refusals(), 1u) << "another mode origin, seed list or KJIT_HIT_MEMO=0 was refused from memory";

    Request allowed = r;
    allowed.compile_mode = CompileMode::always;
    auto compiled = m.cache.compile(allowed);
    ASSERT_TRUE(compiled.ok()) << compiled.error().message;
    EXPECT_EQ(m.cache.counters().nvrtc_compiles.load(), 1u);
    // Its hit is what the strict request gets now.
    std::string cubin;
    EXPECT_EQ(refused(m.cache, r, &cubin), "");
    EXPECT_EQ(cubin, compiled->cubin);
    EXPECT_EQ(m.refusals(), 1u);
}

// Many threads refused at once while another process warms the kernel: every call that begins
// after the warm finished is a hit, none a refusal kept from before (run under TSan too).
TEST(RefusalMemo, ThreadsRefusedWhileAnotherProcessWarmsSeeTheWarm) {
    for (const bool reads_files : {false, true}) {
        SCOPED_TRACE(reads_files ? "a request that reads headers" : "a request without files");
        TempDir dir;
        MemoCache m;
        const Request r =
            strict(reads_files ? header_request(dir, dir.file("cache")) : plain_request(dir.file("cache")));
        // Refused, and refused again from memory, before the threads start.
        ASSERT_NE(refused(m.cache, r), "");
        ASSERT_NE(refused(m.cache, r), "");
        if (!reads_files || watch_usable()) {
            ASSERT_EQ(m.refusals(), 1u);
        }
        std::atomic<bool> warmed{false};
        std::atomic<int> started{0}, stale{0}, hits_after{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t) {
            threads.emplace_back([&] {
                (void)m.cache.compile(r);
                ++started;
                while (!warmed.load()) (void)m.cache.compile(r);  // refused, from memory
                for (int i = 0; i < 50; ++i) {
                    if (m.cache.compile(r)) {
                        ++hits_after;
                    } else {
                        ++stale;
                    }
                }
            });
        }
        while (started.load() < 4) std::this_thread::yield();
        Request warm = r;
        warm.compile_mode = CompileMode::always;
        Cache other;
        const bool warm_ok = other.compile(warm).ok();
        warmed = true;
        for (std::thread &t : threads) t.join();
        ASSERT_TRUE(warm_ok);
        EXPECT_EQ(stale.load(), 0) << "a call begun after the warm was refused";
        EXPECT_EQ(hits_after.load(), 4 * 50);
        std::string cubin;
        EXPECT_EQ(refused(m.cache, r, &cubin), "");
    }
}
