// The in-process hit memo (src/cache/hit_memo.hpp), both of its kinds of answer. Hits: a repeat
// answered from memory, never past a change that could alter the answer (the cubin or its entry
// changed or moved away, a header the request reads edited, the cache folder leading elsewhere
// through the working directory or a link, a removal by this process), the memo telling requests
// apart by every input the caller gives. Refusals (issue 48): a serving process that refuses to
// compile (key::CompileMode::never) answers a repeat of a miss it refused from memory, without
// keying, looking in the stores or scanning the include tree again (a header-heavy request's scan
// costs milliseconds), and never past a change that could turn the miss into a hit: an entry
// appearing in the cache folder or a seed (another process warming it), a file the request reads
// changing back to a state an entry was built for, another mode, seed list or cluster tier.
// KJIT_HIT_MEMO=0 turns off both. Each test gives its cache a long revalidation interval, so that
// what it checks never depends on the machine's speed: only the checks at each repeat can stop
// the memo.
#include "cache/hit_memo.hpp"
#include "cache/cache.hpp"
#include "key/cache_key.hpp"
#include "key/dependency_watch.hpp"
#include "resolve/name_resolver.hpp"
#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"

#include "cache_test_support.hpp"
#include "damage_support.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
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
    std::uint64_t answers() const { return cache.counters().memo_answers.load(); }
    std::uint64_t refusals() const { return cache.counters().memo_refusals.load(); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Hits: a repeat answered from memory.

// The in-process hit memo tells requests apart by every input the caller gives (all but the
// NVRTC build, which the full look-up settles): a field it left out would answer one request with
// another's cubin.
TEST(Cache, HitMemoDigestChangesWithEachInputTheCallerGives) {
    const Request base = base_request("/c");
    std::set<std::pair<std::uint64_t, std::uint64_t>> digests;
    const auto digest_of = [](const Request &r) {
        const kjit::cache::HitMemo::Digest d = kjit::cache::HitMemo::digest(r);
        return std::make_pair(d.low, d.high);
    };
    digests.insert(digest_of(base));
    std::size_t given = 1;
    std::vector<Request> changed = one_input_changed();
    // Base folders change the key only where a folder is pinned or keyed by location, which the
    // memo cannot tell: they are always in its digest.
    changed.push_back(base);
    changed.back().base_dirs = {"/opt/venv"};
    for (const Request &v : changed) {
        if (v.nvrtc_identity != base.nvrtc_identity) continue;
        digests.insert(digest_of(v));
        ++given;
    }
    EXPECT_EQ(digests.size(), given);
}

namespace {

// Compiles `r` (a miss) and hits it once (the full look-up the memo remembers); its path.
std::string miss_then_hit(Cache &cache, const Request &r) {
    const std::string path = compile_ok(cache, r);
    EXPECT_EQ(compile_ok(cache, r), path);
    return path;
}

}  // namespace

TEST(HitMemo, ARepeatIsAnsweredFromMemoryWithoutReadingTheDisk) {
    TempDir dir;
    MemoCache m;
    Request r = base_request(dir.file("cache"));
    r.name_expression = "gemm<128>";
    const std::string path = miss_then_hit(m.cache, r);
    const auto sidecar_hits = kjit::resolve::NameResolver::instance().counters().sidecar_hits.load();
    const auto hits = m.cache.counters().compile_hits.load();
    for (int i = 0; i < 5; ++i) {
        auto again = m.cache.compile(r);
        ASSERT_TRUE(again.ok()) << again.error().message;
        EXPECT_EQ(again->cubin, path);
        EXPECT_EQ(again->name, "_Z4gemmILi128EEvPf");
    }
    EXPECT_EQ(m.answers(), 5u);
    EXPECT_EQ(m.cache.counters().compile_hits.load(), hits + 5);                                      // counted as hits
    EXPECT_EQ(kjit::resolve::NameResolver::instance().counters().sidecar_hits.load(), sidecar_hits);  // no sidecar read
    // Another request (another keyword's expression, another arch) is not the same answer.
    Request other = r;
    other.arch = "sm_80";
    EXPECT_NE(compile_ok(m.cache, other), path);
    EXPECT_EQ(m.answers(), 5u);
}

TEST(HitMemo, AnyChangeToTheCubinIsLookedUpInFull) {
    struct Change {
        const char *what;
        std::function<void(const std::string &cubin)> make;
        // Whether the full look-up itself puts a good cubin back: a flip that keeps size and
        // mtime passes its sidecar check, as documented; the loader's hash check and verify
        // catch that one (KernelLoaderIntegrity, CacheIntegrity). The memo must not answer
        // either way.
        bool look_up_heals = true;
    };
    const std::vector<Change> changes = {
        {"a byte flipped in place, mtime kept (only ctime shows it)",
         [](const std::string &c) { ASSERT_TRUE(flip_text_byte(c, /*keep_mtime=*/true)); }, false},
        {"a byte flipped in place", [](const std::string &c) { ASSERT_TRUE(flip_text_byte(c, /*keep_mtime=*/false)); }},
        {"touched", [](const std::string &c) { ASSERT_EQ(::utimensat(AT_FDCWD, c.c_str(), nullptr, 0), 0); }},
        {"the entry removed", [](const std::string &c) { kjit::remove_tree(c.substr(0, c.rfind('/'))); }},
        {"the cubin replaced by a copy (another inode)",
         [](const std::string &c) {
             write_file(c + ".copy", read_file(c));
             ASSERT_EQ(::rename((c + ".copy").c_str(), c.c_str()), 0);
         }},
        {"the entry folder moved away, as eviction does before deleting it",
         [](const std::string &c) {
             const std::string entry = c.substr(0, c.rfind('/'));
             ASSERT_EQ(::rename(entry.c_str(), (entry + ".gone").c_str()), 0);
         }},
        {"the shard folder moved away",
         [](const std::string &c) {
             const std::string entry = c.substr(0, c.rfind('/'));
             const std::string shard = entry.substr(0, entry.rfind('/'));
             ASSERT_EQ(::rename(shard.c_str(), (shard + ".gone").c_str()), 0);
         }},
    };
    // Each change at the first repeat (proven by an lstat), then after repeats the cubin's
    // watch served (proven by reading the watch's queue).
    for (const bool watched : {false, true})
        for (const Change &change : changes) {
            SCOPED_TRACE(std::string(change.what) +
                         (watched ? ", after repeats the watch served" : ", at the first repeat"));
            TempDir dir;
            MemoCache m;
            const Request r = base_request(dir.file("cache"));
            const std::string path = miss_then_hit(m.cache, r);
            const std::string good = read_file(path);
            if (watched) {
                const auto by_watch = m.cache.hit_memo().answers_by_watch();
                for (int i = 0; i < 3; ++i) EXPECT_EQ(compile_ok(m.cache, r), path);
                if (kjit::key::dependency_watch::stats().usable) {
                    EXPECT_EQ(m.cache.hit_memo().answers_by_watch(), by_watch + 2) << "the watch did not serve";
                }
            }
            change.make(path);
            const auto answers = m.answers();
            EXPECT_EQ(compile_ok(m.cache, r), path);
            EXPECT_EQ(m.answers(), answers) << "the memo answered after the change";
            // Whatever the full look-up did (a hit, or a rebuild), the cubin there is a good one.
            if (change.look_up_heals) {
                EXPECT_TRUE(read_file(path) == good) << "the cubin there is not the good one";
            }
            EXPECT_EQ(compile_ok(m.cache, r), path);
        }
}

TEST(HitMemo, AHeaderEditIsSeenAtTheNextRepeat) {
    TempDir dir;
    MemoCache m;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/v.h"), "#define V 1\n");
    Request r = base_request(dir.file("cache"));
    r.source = "#include \"v.h\"\n__global__ void gemm(float *p) { p[0] = V; }\n";
    r.include_paths = {dir.file("inc")};
    const std::string path = miss_then_hit(m.cache, r);
    ASSERT_EQ(compile_ok(m.cache, r), path);
    const auto answers = m.answers();
    if (kjit::key::dependency_watch::stats().usable) {
        EXPECT_EQ(answers, 1u);  // the watch proved the repeat
    }
    write_file(dir.file("inc/v.h"), "#define V 2\n");
    const auto runs = m.cache.counters().nvrtc_compiles.load();
    const std::string edited = compile_ok(m.cache, r);
    EXPECT_NE(edited, path);  // the variant of the new text
    EXPECT_EQ(m.cache.counters().nvrtc_compiles.load(), runs + 1);
    EXPECT_EQ(m.answers(), answers);
}

// Once the cubin's watch serves a request that reads files, one look at the watch's queue
// proves the cubin and the files together: an edit of a header, of a header reached through
// another header, or a header appearing where the search would now find it first, is still seen
// at the next repeat.
TEST(HitMemo, AfterTheWatchServedARequestThatReadsFilesAnEditOfItsFilesIsSeen) {
    struct Edit {
        const char *what;
        std::function<void(TempDir &)> make;
    };
    const std::vector<Edit> edits = {
        {"the header edited in place",
         [](TempDir &d) { write_file(d.file("inc/v.h"), "#define V 2\n#include \"w.h\"\n"); }},
        {"the header it includes edited", [](TempDir &d) { write_file(d.file("inc/w.h"), "#define W 5\n"); }},
        {"a header put first on the search path",
         [](TempDir &d) { write_file(d.file("first/v.h"), "#define V 3\n#define W 0\n"); }},
    };
    for (const Edit &edit : edits) {
        SCOPED_TRACE(edit.what);
        TempDir dir;
        MemoCache m;
        for (const char *folder : {"inc", "first"}) ::mkdir(dir.file(folder).c_str(), 0755);
        write_file(dir.file("inc/v.h"), "#define V 1\n#include \"w.h\"\n");
        write_file(dir.file("inc/w.h"), "#define W 4\n");
        Request r = base_request(dir.file("cache"));
        r.source = "#include <v.h>\n__global__ void gemm(float *p) { p[0] = V + W; }\n";
        r.include_paths = {dir.file("first"), dir.file("inc")};
        const std::string path = miss_then_hit(m.cache, r);
        if (!kjit::key::dependency_watch::stats().usable) GTEST_SKIP() << "no header watch here (inotify)";
        const auto by_watch = m.cache.hit_memo().answers_by_watch();
        for (int i = 0; i < 4; ++i) EXPECT_EQ(compile_ok(m.cache, r), path);
        EXPECT_EQ(m.cache.hit_memo().answers_by_watch(), by_watch + 3) << "the watch did not serve";
        const auto answers = m.answers();
        edit.make(dir);
        const auto runs = m.cache.counters().nvrtc_compiles.load();
        EXPECT_NE(compile_ok(m.cache, r), path) << "the old variant's cubin after the edit";
        EXPECT_EQ(m.answers(), answers) << "the memo answered after the edit";
        EXPECT_EQ(m.cache.counters().nvrtc_compiles.load(), runs + 1);
    }
}

TEST(HitMemo, ARelativeCacheFolderFollowsTheWorkingDirectory) {
    TempDir dir;
    MemoCache m;
    ::mkdir(dir.file("a").c_str(), 0755);
    ::mkdir(dir.file("b").c_str(), 0755);
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
    const Request r = base_request("rel-cache");
    ASSERT_EQ(::chdir(dir.file("a").c_str()), 0);
    const std::string in_a = miss_then_hit(m.cache, r);
    EXPECT_EQ(compile_ok(m.cache, r), in_a);
    EXPECT_EQ(m.answers(), 1u);
    ASSERT_EQ(::chdir(dir.file("b").c_str()), 0);
    const std::string in_b = compile_ok(m.cache, r);
    ASSERT_EQ(::chdir(cwd), 0);
    EXPECT_EQ(in_b.rfind(dir.file("b") + "/rel-cache/", 0), 0u) << in_b;
    EXPECT_EQ(m.answers(), 1u);
}

TEST(HitMemo, ACacheFolderReachedThroughALinkToALinkFollowsItAtEveryLevel) {
    // cache -> alternatives/cache -> cache-A, as /usr/local/cuda's layout: re-pointed at either
    // level to an empty cache, a repeat must not answer the old one's cubin (which is not there).
    TempDir dir;
    MemoCache m;
    for (const char *name : {"alternatives", "cache-A", "cache-B", "cache-C"}) ::mkdir(dir.file(name).c_str(), 0755);
    ASSERT_EQ(::symlink(dir.file("cache-A").c_str(), dir.file("alternatives/cache").c_str()), 0);
    ASSERT_EQ(::symlink("alternatives/cache", dir.file("cache").c_str()), 0);
    const Request r = base_request(dir.file("cache"));
    const auto repoint = [&](const std::string &link, const std::string &target) {
        ASSERT_EQ(::symlink(target.c_str(), (link + ".new").c_str()), 0);
        ASSERT_EQ(::rename((link + ".new").c_str(), link.c_str()), 0);
    };
    for (const auto &[link, target] :
         {std::pair<std::string, std::string>{"alternatives/cache", "../cache-B"}, {"cache", "cache-C"}}) {
        SCOPED_TRACE(link + " -> " + target);
        const std::string path = miss_then_hit(m.cache, r);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(compile_ok(m.cache, r), path);
        const auto answers = m.answers();
        EXPECT_GT(answers, 0u);
        repoint(dir.file(link), target);
        const auto runs = m.cache.counters().nvrtc_compiles.load();
        EXPECT_EQ(compile_ok(m.cache, r), path);  // the same key: the same path, in the new cache
        EXPECT_EQ(m.answers(), answers) << "the memo answered for the cache the link no longer leads to";
        EXPECT_EQ(m.cache.counters().nvrtc_compiles.load(), runs + 1) << "no miss in the new cache";
        EXPECT_TRUE(exists(path));
    }
}

TEST(HitMemo, ARemovalByThisProcessForgetsEveryAnswer) {
    TempDir dir;
    MemoCache m;
    const Request r = base_request(dir.file("cache"));
    const std::string path = miss_then_hit(m.cache, r);
    Request other = r;
    other.arch = "sm_80";
    const std::string other_path = compile_ok(m.cache, other);
    // Another entry retired (as eviction, prune, clear or verify --fix would): the unrelated
    // answer is looked up in full too.
    ASSERT_TRUE(kjit::store::cache_entry::retire(other_path.substr(0, other_path.rfind('/')),
                                                 kjit::store::cache_entry::InUse::remove)
                    .ok());
    EXPECT_EQ(compile_ok(m.cache, r), path);
    EXPECT_EQ(m.answers(), 0u);
    EXPECT_EQ(compile_ok(m.cache, r), path);
    EXPECT_EQ(m.answers(), 1u);
}

TEST(HitMemo, OffWhenKjitHitMemoIsZero) {
    TempDir dir;
    MemoCache m;
    ScopedEnv off("KJIT_HIT_MEMO", "0");
    const Request r = base_request(dir.file("cache"));
    const std::string path = miss_then_hit(m.cache, r);
    EXPECT_EQ(compile_ok(m.cache, r), path);
    EXPECT_EQ(m.answers(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Refusals: a repeat of a refused miss (key::CompileMode::never) refused from memory.

namespace {

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

// The strict request of either kind, with its cache folder in `dir`.
Request strict_request(TempDir &dir, bool reads_files) {
    return strict(reads_files ? header_request(dir, dir.file("cache")) : plain_request(dir.file("cache")));
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
        const Request r = strict_request(dir, reads_files);
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
            Request r = strict_request(dir, c.reads_files);
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
        const Request r = strict_request(dir, reads_files);
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
