// PCH prices (src/cache/pch_price.hpp): a miss compiled alone uses NVRTC's automatic PCH where
// what PCHs of its header identity cost and saved says it pays, measured at run time and kept in
// the cache folder; never where using one was measured slower; never one built from other
// headers. Through the cache, with the real NVRTC (it compiles for any arch without a GPU).
#include "cache/pch_price.hpp"

#include "batch/compiler.hpp"
#include "cache/cache.hpp"
#include "store/cache_inventory.hpp"

#include "cache_test_support.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

// AProcessAfterOneWithTwoMissesTriesAPchAtItsFirst forks to stand for a later process; TSan
// allows a child of a process that ran threads only with die_after_fork=0, as
// tests/api/fork_test.cpp sets it.
extern "C" const char *__tsan_default_options() { return "die_after_fork=0"; }

using namespace kjit_test;
using kjit::cache::Cache;
using kjit::cache::pch_price::Prices;
using kjit::key::Request;

namespace {

// A program over `inc/tile.h` whose instantiation (after the last #include) is `n`: requests
// that differ in `n` only share a header identity.
Request tile_request(const TempDir &dir, int n) {
    Request r = base_request(dir.file("cache"));
    r.include_paths = {dir.file("inc")};
    r.source = "#include <tile.h>\n"
               "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N * TILE; }\n"
               "template __global__ void gemm<" +
               std::to_string(n) + ">(float *);\n";
    return r;
}

// A header tree of its own per test (the process remembers the misses of each identity): its
// text names the test.
void make_tree(const TempDir &dir, const std::string &tag, int tile = 4) {
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/tile.h"), "// " + tag + "\n#define TILE " + std::to_string(tile) + "\n");
}

std::string identity_of(const Request &r) {
    auto keyed = kjit::key::key_request(r);
    EXPECT_TRUE(keyed.ok());
    bool names_program = false;
    auto deps = kjit::key::include_scanner::scan(keyed->request.source, keyed->request.headers, keyed->request.search,
                                                 &names_program);
    EXPECT_TRUE(deps.ok());
    return kjit::key::pch_identity(keyed->request, *deps, names_program);
}

// Prices that pay: plain 100 ms, making 160 ms, using 40 ms (60 ms saved a compile, 60 ms to
// make), over 3, 1 and 2 compiles.
Prices paying_prices() {
    Prices p;
    p.plain_us = 100'000;
    p.plain_n = 3;
    p.made_us = 160'000;
    p.made_n = 1;
    p.used_us = 40'000;
    p.used_n = 2;
    return p;
}

// A tree of its own (make_tree) and a cache whose record (in `version`'s format) has `fields`
// for the tree's header identity: what an earlier process left. Returns the identity.
std::string tree_with_record(const TempDir &dir, const std::string &tag, const std::string &fields, int version = 2) {
    make_tree(dir, tag);
    const std::string identity = identity_of(tile_request(dir, 1));
    ::mkdir(dir.file("cache").c_str(), 0700);
    write_file(dir.file("cache/.kjit-pch-prices"),
               "kjit-pch-prices " + std::to_string(version) + "\n" + identity + " " + fields + "\n");
    return identity;
}

}  // namespace

// The rule, from the prices alone.
TEST(PchPrice, TheRuleMakesAPchOnlyWhereTheMissesSeenWouldRepayIt) {
    using kjit::cache::pch_price::worth_making;
    using kjit::cache::pch_price::worth_using;
    const Prices unknown;
    EXPECT_FALSE(worth_making(unknown, 0)) << "a first miss says nothing of more to come";
    EXPECT_FALSE(worth_making(unknown, 2));
    EXPECT_TRUE(worth_making(unknown, 3)) << "nothing known: tried at the fourth miss";
    Prices made_never_used;
    made_never_used.made_us = 900;
    made_never_used.made_n = 1;
    EXPECT_FALSE(worth_making(made_never_used, 4));
    EXPECT_TRUE(worth_making(made_never_used, 5));
    const Prices pays = paying_prices();
    EXPECT_TRUE(worth_using(pays));
    EXPECT_FALSE(worth_making(pays, 0));
    EXPECT_TRUE(worth_making(pays, 1));
    Prices dear = pays;  // making costs three compiles' saving
    dear.made_us = 280'000;
    EXPECT_FALSE(worth_making(dear, 1));
    EXPECT_FALSE(worth_making(dear, 2));
    EXPECT_TRUE(worth_making(dear, 3));
    Prices slower = pays;  // the worst case that kept PyTorch from turning it on
    slower.used_us = 100'000;
    EXPECT_FALSE(worth_using(slower));
    EXPECT_FALSE(worth_making(slower, 50));
}

// A batch's rule, from the prices alone: the fewest misses of an identity on one worker that
// repay the making.
TEST(PchPrice, ABatchsRuleIsTheFewestMissesThatRepayTheMaking) {
    using kjit::cache::pch_price::fewest_misses_that_pay;
    using kjit::cache::pch_price::kNeverPays;
    EXPECT_EQ(fewest_misses_that_pay(Prices{}), 0u) << "nothing known: the batch's own default";
    Prices made_only;
    made_only.made_us = 900;
    made_only.made_n = 1;
    EXPECT_EQ(fewest_misses_that_pay(made_only), 0u);
    const Prices pays = paying_prices();  // making costs one use's saving: pays from the second
    EXPECT_EQ(fewest_misses_that_pay(pays), 2u);
    Prices dear = pays;  // making costs three uses' saving: the fourth
    dear.made_us = 280'000;
    EXPECT_EQ(fewest_misses_that_pay(dear), 4u);
    dear.made_us = 280'001;  // a microsecond more: the fifth
    EXPECT_EQ(fewest_misses_that_pay(dear), 5u);
    Prices cheap = pays;  // making cheaper than a plain compile: still two (one use)
    cheap.made_us = 90'000;
    EXPECT_EQ(fewest_misses_that_pay(cheap), 2u);
    Prices slower = pays;
    slower.used_us = 100'000;
    EXPECT_EQ(fewest_misses_that_pay(slower), kNeverPays);
}

// The rule with the history of earlier processes: the misses a process can expect of an
// identity are as many as earlier processes had, while it has had no more.
TEST(PchPrice, TheHistoryOfEarlierProcessesSaysHowManyMissesToExpect) {
    using kjit::cache::pch_price::worth_making;
    const Prices pays = paying_prices();
    Prices twice = pays;  // earlier processes had two misses each
    twice.processes = 3;
    twice.misses = 6;
    EXPECT_TRUE(worth_making(twice, 0)) << "a second miss to come repays the making";
    EXPECT_FALSE(worth_making(twice, 1)) << "no third expected";
    EXPECT_TRUE(worth_making(twice, 2)) << "beyond the history: as many more as seen";
    Prices once = pays;  // each earlier process had it once
    once.processes = 4;
    once.misses = 4;
    EXPECT_FALSE(worth_making(once, 0));
    EXPECT_TRUE(worth_making(once, 1));
    Prices dear = twice;  // making costs three compiles' saving
    dear.made_us = 280'000;
    dear.misses = 3 * 4;  // four misses a process: three more after the first
    EXPECT_TRUE(worth_making(dear, 0));
    dear.misses = 3 * 3;
    EXPECT_FALSE(worth_making(dear, 0));
    EXPECT_FALSE(worth_making(dear, 1));
    Prices slower = twice;
    slower.used_us = 100'000;
    slower.misses = 3 * 50;
    EXPECT_FALSE(worth_making(slower, 0));
    EXPECT_FALSE(worth_making(slower, 10));

    Prices untried;  // plain compiles only, two a process
    untried.plain_us = 100'000;
    untried.plain_n = 6;
    untried.processes = 3;
    untried.misses = 6;
    EXPECT_TRUE(worth_making(untried, 0)) << "recurring and never tried: tried once at the first miss";
    EXPECT_FALSE(worth_making(untried, 1));
    EXPECT_FALSE(worth_making(untried, 2)) << "beyond the history, nothing measured: the fourth miss";
    EXPECT_TRUE(worth_making(untried, 3));
    Prices tried = untried;  // a PCH of it was made before and never used
    tried.made_us = 150'000;
    tried.made_n = 1;
    EXPECT_FALSE(worth_making(tried, 0));
    Prices seldom = untried;  // 1.5 misses a process: no second miss to count on
    seldom.processes = 2;
    seldom.misses = 3;
    EXPECT_FALSE(worth_making(seldom, 0));
}

// Sequential misses of one header identity in one process: the first three plain, the fourth
// makes the PCH, the later ones use it; each kind timed into the cache folder's record, which the
// cache's own walk takes for libkjit's.
TEST(PchPrice, SequentialMissesMakeAPchAtTheFourthAndUseItAfter) {
    TempDir dir;
    make_tree(dir, "sequential");
    Cache cache;
    const Request first = tile_request(dir, 1);
    const std::string identity = identity_of(first);
    compile_ok(cache, first);
    for (int n = 2; n <= 3; ++n) compile_ok(cache, tile_request(dir, n));
    EXPECT_EQ(cache.counters().pch_compiles, 0u);
    compile_ok(cache, tile_request(dir, 4));
    EXPECT_EQ(cache.counters().pch_compiles, 1u);
    EXPECT_EQ(cache.counters().pch_identities, 1u);
    for (int n = 5; n <= 7; ++n) compile_ok(cache, tile_request(dir, n));
    EXPECT_EQ(cache.counters().nvrtc_compiles, 7u);
    const Prices p = kjit::cache::pch_price::recorded(dir.file("cache"), identity);
    EXPECT_GE(p.plain_n, 3u);
    EXPECT_EQ(p.made_n, 1u);
    EXPECT_GT(p.plain_us, 0u);
    EXPECT_GT(p.made_us, 0u);
    // Kept while it saves time, which this machine decides: each later compile is a use or,
    // while using was measured slower, plain.
    EXPECT_EQ(p.used_n + p.plain_n + p.made_n, 7u);
    EXPECT_GE(p.used_n, 1u) << "the PCH made was never tried";
    EXPECT_EQ(cache.counters().pch_compiles, 1u + p.used_n);
    auto inventory = kjit::store::cache_inventory::inventory_of(dir.file("cache"));
    ASSERT_TRUE(inventory.ok());
    EXPECT_EQ(inventory->foreign, 0u) << "the record is taken for a file that is not libkjit's";
    for (const std::string &name : list_dir(dir.file("cache"))) {
        EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
    }
}

// A record that says using a PCH of this identity was slower than compiling plain: no PCH, however
// many misses; one that says it pays makes it at the second miss; a damaged record is nothing
// known, and the next compile writes a good one.
TEST(PchPrice, TheRecordDecidesForLaterProcesses) {
    TempDir dir;
    const std::string identity = tree_with_record(dir, "slower", "1 100000 3 160000 1 120000 2", 1);
    Cache cache;
    for (int n = 1; n <= 4; ++n) compile_ok(cache, tile_request(dir, n));
    EXPECT_EQ(cache.counters().pch_compiles, 0u) << "a PCH measured slower than plain was used";
    EXPECT_EQ(kjit::cache::pch_price::recorded(dir.file("cache"), identity).plain_n, 7u);

    TempDir other;
    make_tree(other, "damaged record");
    ::mkdir(other.file("cache").c_str(), 0700);
    write_file(other.file("cache/.kjit-pch-prices"), "kjit-pch-prices 1\nnot a line\n\x01\x02 9 9");
    Cache second;
    compile_ok(second, tile_request(other, 1));
    EXPECT_EQ(second.counters().pch_compiles, 0u);
    EXPECT_EQ(kjit::cache::pch_price::recorded(other.file("cache"), identity_of(tile_request(other, 1))).plain_n, 1u);
    EXPECT_EQ(read_file(other.file("cache/.kjit-pch-prices")).find("not a line"), std::string::npos);
}

// A process whose record says earlier processes had two misses each of an identity, with prices
// that pay, makes the PCH at its first miss and uses it at the second; one whose record says
// they had it once makes none; the record's history counts each process once and each miss.
TEST(PchPrice, ALaterProcessMakesThePchAtItsFirstMissWhereEarlierOnesHadSeveral) {
    TempDir dir;
    const std::string identity = tree_with_record(dir, "history of two", "1 100000 3 160000 1 40000 2 3 6");
    Cache cache;
    compile_ok(cache, tile_request(dir, 1));
    EXPECT_EQ(cache.counters().pch_identities, 1u) << "the PCH was not made at the first miss";
    compile_ok(cache, tile_request(dir, 2));
    EXPECT_EQ(cache.counters().pch_compiles, 2u);
    const Prices after = kjit::cache::pch_price::recorded(dir.file("cache"), identity);
    EXPECT_EQ(after.processes, 4u);
    EXPECT_EQ(after.misses, 8u);
    EXPECT_EQ(after.made_n, 2u);
    EXPECT_EQ(after.used_n, 3u);

    TempDir other;
    tree_with_record(other, "history of one", "1 100000 3 160000 1 40000 2 3 3");
    Cache second;
    compile_ok(second, tile_request(other, 1));
    EXPECT_EQ(second.counters().pch_compiles, 0u) << "a PCH made for a miss that earlier processes had once";
}

// A process after one that had two misses of an identity and tried no PCH (a fork stands for it:
// a child's misses are its own) tries one at its first miss; the record counts both processes.
TEST(PchPrice, AProcessAfterOneWithTwoMissesTriesAPchAtItsFirst) {
    TempDir dir;
    make_tree(dir, "recurring, untried");
    const std::string identity = identity_of(tile_request(dir, 1));
    Cache parent;
    compile_ok(parent, tile_request(dir, 1));
    compile_ok(parent, tile_request(dir, 2));
    ASSERT_EQ(parent.counters().pch_compiles, 0u);
    const Prices before = kjit::cache::pch_price::recorded(dir.file("cache"), identity);
    EXPECT_EQ(before.processes, 1u);
    EXPECT_EQ(before.misses, 2u);
    // Its TMPDIR the test's (it ends with _exit, which leaves its PCH root where it made it).
    const std::string child_tmp = dir.file("child-tmp");
    ::mkdir(child_tmp.c_str(), 0700);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::setenv("TMPDIR", child_tmp.c_str(), 1);
        Cache cache;
        const bool ok = cache.compile(tile_request(dir, 3)).ok();
        ::_exit(ok && cache.counters().pch_identities == 1 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the next process did not try a PCH at its first miss";
    const Prices after = kjit::cache::pch_price::recorded(dir.file("cache"), identity);
    EXPECT_EQ(after.processes, 2u);
    EXPECT_EQ(after.misses, 3u);
    EXPECT_EQ(after.made_n, 1u);
    compile_ok(parent, tile_request(dir, 4));  // the parent's third: beyond its history, still plain
    EXPECT_EQ(parent.counters().pch_compiles, 0u);
}

// A PCH is made from one state of the headers and never used for another: an edit between two
// misses (same size) is another identity, compiled against the new text.
TEST(PchPrice, AHeaderEditedBetweenMissesIsNeverCompiledFromTheOldPch) {
    TempDir dir;
    make_tree(dir, "edited", 4);
    Cache cache;
    for (int n = 1; n <= 5; ++n) compile_ok(cache, tile_request(dir, n));
    ASSERT_GE(cache.counters().pch_compiles, 1u);
    make_tree(dir, "edited", 5);
    for (int n = 6; n <= 10; ++n) {
        Request checks = tile_request(dir, n);
        checks.source += "static_assert(TILE == 5, \"compiled from the old header\");\n";
        compile_ok(cache, checks);
    }
    EXPECT_EQ(cache.counters().nvrtc_compiles, 10u);
    EXPECT_EQ(cache.counters().pch_identities, 2u) << "the edited headers got no PCH of their own";
}

// Programs of other names over the same headers are one header identity (Warp names each
// module's program after the module): the fourth miss makes the PCH, the later ones use it.
TEST(PchPrice, ProgramsOfOtherNamesShareTheirHeadersPch) {
    TempDir dir;
    make_tree(dir, "program names");
    const auto named = [&](int n) {
        Request r = tile_request(dir, n);
        r.program_name = "module_" + std::to_string(n) + ".cu";
        return r;
    };
    EXPECT_EQ(identity_of(named(1)), identity_of(named(2)));
    Cache cache;
    for (int n = 1; n <= 6; ++n) compile_ok(cache, named(n));
    EXPECT_EQ(cache.counters().pch_identities, 1u);
    EXPECT_GE(cache.counters().pch_compiles, 1u) << "no PCH made at the fourth miss";
}

// __BASE_FILE__ names the program in whichever file expands it: a header that does gets a PCH
// per program, and each cubin its own program's name. (NVRTC's own -pch, made by alpha.cu and
// used by beta.cu, gives beta.cu's cubin "alpha.cu".) The same for an in-memory header.
TEST(PchPrice, AHeaderThatExpandsBaseFileGetsAPchPerProgram) {
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/tile.h"), "#define TILE 4\n__device__ const char base_name[] = __BASE_FILE__;\n");
    const auto named = [&](const std::string &name) {
        Request r = tile_request(dir, 1);
        r.program_name = name;
        r.nvrtc_options = {"--pch"};  // every miss with the PCH of its header identity
        r.source += "__global__ void copy_name(char *p) { p[threadIdx.x] = base_name[threadIdx.x]; }\n";
        return r;
    };
    EXPECT_NE(identity_of(named("alpha_module.cu")), identity_of(named("beta_module.cu")));
    Cache cache;
    const std::string alpha = read_file(compile_ok(cache, named("alpha_module.cu")));
    const std::string beta = read_file(compile_ok(cache, named("beta_module.cu")));
    EXPECT_EQ(cache.counters().pch_compiles, 2u);
    EXPECT_EQ(cache.counters().pch_identities, 2u);
    EXPECT_NE(alpha.find("alpha_module.cu"), std::string::npos);
    EXPECT_NE(beta.find("beta_module.cu"), std::string::npos) << "beta's cubin lacks its own name";
    EXPECT_EQ(beta.find("alpha_module.cu"), std::string::npos) << "beta's cubin names the program whose PCH it used";

    Request memory = base_request(dir.file("cache"));
    memory.source = "#include \"names.h\"\n" + std::string(kTemplated);
    memory.headers = {{"names.h", "__device__ const char base_name[] = __BASE_FILE__;\n"}};
    Request other = memory;
    memory.program_name = "alpha_module.cu";
    other.program_name = "beta_module.cu";
    EXPECT_NE(identity_of(memory), identity_of(other));
    memory.headers = other.headers = {{"names.h", "__device__ const char file_name[] = __FILE__;\n"}};
    EXPECT_EQ(identity_of(memory), identity_of(other)) << "__FILE__ in a header names the header";
}

// A miss a batch planned never asks the prices (the batch read them to plan it), and is noted:
// a planned plain compile where the record would have made a PCH at the first miss stays plain,
// and its time is the identity's plain price.
TEST(PchPrice, ABatchsMissesAreNotedAndNeverAsk) {
    TempDir dir;
    const std::string identity = tree_with_record(dir, "batch", "1 100000 3 160000 1 40000 2 3 6");
    Cache cache;
    auto keyed = kjit::key::key_request(tile_request(dir, 1));
    ASSERT_TRUE(keyed.ok());
    keyed->request.pch_planned = true;
    auto built = cache.build(*keyed, nullptr);
    ASSERT_TRUE(built.ok()) << built.error().message;
    EXPECT_EQ(cache.counters().pch_compiles, 0u) << "a miss the batch planned plain asked the prices";
    const Prices after = kjit::cache::pch_price::recorded(dir.file("cache"), identity);
    EXPECT_EQ(after.plain_n, 4u);
    EXPECT_EQ(after.misses, 7u);
}

namespace {

// `n` misses of the tree's identity (tile_request 1..n) as one kjit_compile_batch with its
// defaults on 2 worker threads; the compiles that used a PCH.
std::uint64_t batch_pch_compiles(const TempDir &dir, int n) {
    std::vector<kjit::Result<Request>> items;
    for (int i = 1; i <= n; ++i) items.emplace_back(tile_request(dir, i));
    kjit::batch::compiler::Options options;
    options.workers = 2;
    options.kind = kjit::batch::compiler::WorkerKind::threads;
    const auto &counters = Cache::instance().counters();
    const std::uint64_t before = counters.pch_compiles.load();
    for (const auto &result : kjit::batch::compiler::compile(std::move(items), options)) {
        EXPECT_TRUE(result.ok()) << result.error().message;
    }
    return counters.pch_compiles.load() - before;
}

}  // namespace

// A batch with its defaults plans each group's PCH by the prices its cache folder recorded for
// the group's identity: nothing known, from the second miss; a PCH whose making costs three
// uses' saving, from the fourth; none where using one was slower; and what its compiles cost is
// recorded for the next.
TEST(PchPrice, ABatchPlansItsPchsByTheRecordedPrices) {
    TempDir unknown;
    make_tree(unknown, "batch, nothing known");
    EXPECT_EQ(batch_pch_compiles(unknown, 2), 2u) << "two misses of one identity, nothing known, got no PCH";
    const Prices noted = kjit::cache::pch_price::recorded(unknown.file("cache"), identity_of(tile_request(unknown, 1)));
    EXPECT_EQ(noted.made_n, 1u);
    EXPECT_EQ(noted.used_n, 1u);

    TempDir dear3;
    tree_with_record(dear3, "batch, dear, three", "1 100000 3 280000 1 40000 2 1 3");
    EXPECT_EQ(batch_pch_compiles(dear3, 3), 0u) << "three misses cannot repay three uses' saving";
    TempDir dear4;
    tree_with_record(dear4, "batch, dear, four", "1 100000 3 280000 1 40000 2 1 4");
    EXPECT_EQ(batch_pch_compiles(dear4, 4), 4u) << "four misses repay it";

    TempDir slower;
    tree_with_record(slower, "batch, slower", "1 100000 3 160000 1 120000 2 1 6");
    EXPECT_EQ(batch_pch_compiles(slower, 6), 0u) << "a PCH measured slower than plain was used";
}

// The record keeps the most recently noted identities, at most kMaxIdentities.
TEST(PchPrice, TheRecordKeepsTheLatestIdentities) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ::mkdir(cache.c_str(), 0700);
    const std::size_t n = kjit::cache::pch_price::kMaxIdentities + 5;
    for (std::size_t i = 0; i < n; ++i) {
        kjit::cache::pch_price::note(cache, "id" + std::to_string(i), kjit::cache::pch_price::Compile::plain, 0.01,
                                     false);
    }
    EXPECT_EQ(kjit::cache::pch_price::recorded(cache, "id0").plain_n, 0u);
    EXPECT_EQ(kjit::cache::pch_price::recorded(cache, "id4").plain_n, 0u);
    EXPECT_EQ(kjit::cache::pch_price::recorded(cache, "id5").plain_n, 1u);
    EXPECT_EQ(kjit::cache::pch_price::recorded(cache, "id" + std::to_string(n - 1)).plain_us, 10'000u);
}
