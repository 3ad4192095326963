// Cache maintenance: recency records, LRU pruning and eviction after publishes, the in-use
// guard across processes, verify (each kind of damage, and --fix), clear, and the parsers.
#include "api/defaults.hpp"
#include "batch/compiler.hpp"
#include "cache/cache.hpp"
#include "cubin/sidecar.hpp"
#include "damage_support.hpp"
#include "load/kernel_loader.hpp"
#include "resolve/name_resolver.hpp"
#include "store/cache_entry.hpp"
#include "store/cache_eviction.hpp"
#include "store/cache_inventory.hpp"
#include "store/cache_verification.hpp"
#include "test_support.hpp"
#include "util/size_units.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

using kjit::cache::Cache;
using kjit::key::Request;
namespace entry = kjit::store::cache_entry;
namespace eviction = kjit::store::cache_eviction;
namespace inventory = kjit::store::cache_inventory;
namespace verification = kjit::store::cache_verification;
namespace units = kjit::size_units;
using namespace kjit_test;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

// Source number `i`: a distinct entry per i.
Request request_for(const std::string &cache_dir, int i) {
    Request r;
    r.source = sources::numbered_gemm(i);
    r.keyword = "gemm";
    r.cache_dir = cache_dir;
    r.arch = "sm_90";
    return r;
}

std::string folder_of(const std::string &cubin) { return cubin.substr(0, cubin.rfind('/')); }

std::int64_t now_ns() { return kjit::realtime_ns(); }

std::int64_t mtime_of(const std::string &path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return 0;
    return kjit::mtime_ns(st);
}

// Sets a folder's mtime (its recency record) `age_s` seconds in the past.
void age(const std::string &path, std::int64_t age_s) {
    const std::int64_t t = now_ns() - age_s * kSecond;
    const struct timespec times[2] = {{0, UTIME_OMIT},
                                      {static_cast<time_t>(t / kSecond), static_cast<long>(t % kSecond)}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// Cubin paths, indexed by the int the loops count with.
struct Cubins : std::vector<std::string> {
    const std::string &operator[](int i) const { return at(static_cast<std::size_t>(i)); }
};

Cubins compile_entries(Cache &cache, const std::string &dir, int n) {
    Cubins cubins;
    for (int i = 0; i < n; ++i) {
        auto path = cache.compile(request_for(dir, i));
        EXPECT_TRUE(path.ok()) << path.error().message;
        cubins.push_back(path.ok() ? path->cubin : std::string());
    }
    return cubins;
}

// What `du -s` counts for a flat folder: its own blocks and its files', 512 bytes each.
std::uint64_t entry_bytes(const std::string &folder) {
    struct stat st {};
    if (::lstat(folder.c_str(), &st) != 0) return 0;
    std::uint64_t n = static_cast<std::uint64_t>(st.st_blocks) * 512;
    for (const std::string &f : list_dir(folder)) {
        if (::lstat((folder + "/" + f).c_str(), &st) == 0) n += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    return n;
}

// The sum of the file sizes in a flat folder (what the size limit counted before it counted blocks).
std::uint64_t file_sizes(const std::string &folder) {
    std::uint64_t n = 0;
    for (const std::string &f : list_dir(folder)) {
        struct stat st {};
        if (::lstat((folder + "/" + f).c_str(), &st) == 0 && S_ISREG(st.st_mode))
            n += static_cast<std::uint64_t>(st.st_size);
    }
    return n;
}

verification::VerifyReport verify_ok(const std::string &dir, bool fix) {
    auto r = verification::verify(dir, fix);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : verification::VerifyReport{};
}

std::vector<verification::Damage> damages(const verification::VerifyReport &r) {
    std::vector<verification::Damage> d;
    for (const auto &f : r.findings) d.push_back(f.damage);
    std::sort(d.begin(), d.end());
    return d;
}

}  // namespace

TEST(CacheMaintenance, ParsesSizesAndAges) {
    EXPECT_EQ(*units::parse_size("12345"), 12345u);
    EXPECT_EQ(*units::parse_size("5G"), 5ull << 30);
    EXPECT_EQ(*units::parse_size("5g"), 5ull << 30);
    EXPECT_EQ(*units::parse_size("512M"), 512ull << 20);
    EXPECT_EQ(*units::parse_size("2GiB"), 2ull << 30);
    EXPECT_EQ(*units::parse_size("100KB"), 100ull << 10);
    EXPECT_EQ(*units::parse_size("1.5G"), 3ull << 29);
    EXPECT_EQ(*units::parse_size("0"), 0u);
    for (const char *bad : {"", "G", "-1G", "5X", "5 G", " 5G", "1e30T", "iB", "nan", "5GG"}) {
        auto r = units::parse_size(bad);
        EXPECT_FALSE(r.ok()) << bad;
        if (!r.ok()) {
            EXPECT_EQ(r.error().code, kjit::Errc::invalid_argument);
        }
    }
    EXPECT_EQ(*units::parse_age("30d"), 30 * 86400 * kSecond);
    EXPECT_EQ(*units::parse_age("12h"), 12 * 3600 * kSecond);
    EXPECT_EQ(*units::parse_age("0s"), 0);
    EXPECT_EQ(*units::parse_age("2w"), 14 * 86400 * kSecond);
    for (const char *bad : {"", "d", "30", "30x", "1.5d", "-1d", "9999999999d"})
        EXPECT_FALSE(units::parse_age(bad).ok()) << bad;
    EXPECT_EQ(units::format_size(512), "512 B");
    EXPECT_EQ(units::format_size(3ull << 29), "1.5 GiB");
}

TEST(CacheMaintenance, MaxSizeFromTheEnvironment) {
    ::unsetenv("KJIT_CACHE_MAX_SIZE");
    EXPECT_FALSE(kjit::api::defaults::max_cache_bytes()->has_value());
    ::setenv("KJIT_CACHE_MAX_SIZE", "5G", 1);
    EXPECT_EQ(**kjit::api::defaults::max_cache_bytes(), 5ull << 30);
    ::setenv("KJIT_CACHE_MAX_SIZE", "lots", 1);
    auto bad = kjit::api::defaults::max_cache_bytes();
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("KJIT_CACHE_MAX_SIZE"), std::string::npos) << bad.error().message;
    ::unsetenv("KJIT_CACHE_MAX_SIZE");
}

// `kjit cache prune --older-than 20000w` wrapped around int64 nanoseconds into a negative age and
// removed every entry. An age that does not fit is refused, saying what does.
TEST(CacheMaintenance, AgesThatDoNotFitAreRefusedNotWrapped) {
    // The largest that fits: 9223372036 s (about 292 years).
    const std::pair<const char *, std::int64_t> fit[] = {{"15250w", std::int64_t{15250} * 7 * 86400 * kSecond},
                                                         {"106751d", std::int64_t{106751} * 86400 * kSecond},
                                                         {"9223372036s", 9223372036 * kSecond}};
    for (const auto &[text, ns] : fit) {
        auto r = units::parse_age(text);
        ASSERT_TRUE(r.ok()) << text << ": " << r.error().message;
        EXPECT_EQ(*r, ns) << text;
    }
    for (const char *huge :
         {"20000w", "15251w", "106752d", "999999999w", "999999999d", "9223372037s", "99999999999999999999999s"}) {
        auto r = units::parse_age(huge);
        ASSERT_FALSE(r.ok()) << huge << " gave " << *r;
        EXPECT_EQ(r.error().code, kjit::Errc::invalid_argument);
        EXPECT_NE(r.error().message.find("too large"), std::string::npos) << r.error().message;
        EXPECT_NE(r.error().message.find(huge), std::string::npos) << r.error().message;
    }
}

// "0x10" was read as 16 bytes and "1e3" as 1000 (strtod): only decimal numbers with the
// documented suffixes are sizes, and the message says what is wrong with the rest.
TEST(CacheMaintenance, SizesAreDecimalWithTheDocumentedSuffixesOnly) {
    const std::pair<const char *, std::uint64_t> good[] = {{"16", 16},
                                                           {"16B", 16},
                                                           {"0.5K", 512},
                                                           {"1.25KiB", 1280},
                                                           {"18446744073709551615", UINT64_MAX},
                                                           {"15.999999T", 15999999ull * (1ull << 40) / 1000000}};
    for (const auto &[text, bytes] : good) {
        auto r = units::parse_size(text);
        ASSERT_TRUE(r.ok()) << text << ": " << r.error().message;
        EXPECT_EQ(*r, bytes) << text;
    }
    const std::pair<const char *, const char *> bad[] = {
        {"0x10", "hexadecimal"},    {"0X1F", "hexadecimal"},
        {"1e3", "exponent"},        {"1E3K", "exponent"},
        {"0x1p4", "hexadecimal"},   {".5G", "digit"},
        {"5.", "digit after"},      {"+5", "digit"},
        {"-5", "negative"},         {"5Q", "unit 'Q'"},
        {"5 G", "unit ' G'"},       {"", "empty"},
        {"inf", "digit"},           {"18446744073709551616", "too large"},
        {"16777216T", "too large"}, {"5KK", "unit 'KK'"},
        {"5Bi", "unit 'Bi'"},
    };
    for (const auto &[text, why] : bad) {
        auto r = units::parse_size(text);
        ASSERT_FALSE(r.ok()) << text << " gave " << *r;
        EXPECT_EQ(r.error().code, kjit::Errc::invalid_argument);
        EXPECT_NE(r.error().message.find(why), std::string::npos) << text << ": " << r.error().message;
        EXPECT_NE(r.error().message.find("5G"), std::string::npos) << r.error().message;  // what is accepted
    }
}

// "5X" was called hexadecimal (an X after the digits). It is an unknown unit, and the message
// starts with the text given and what a size looks like.
TEST(CacheMaintenance, ASizeWithAnUnknownUnitSaysWhatASizeIs) {
    for (const char *text : {"5X", "5x", "10Q", "2 G"}) {
        auto r = units::parse_size(text);
        ASSERT_FALSE(r.ok()) << text << " gave " << *r;
        const std::string &m = r.error().message;
        const std::string shown =
            std::string(text).find(' ') == std::string::npos ? text : "'" + std::string(text) + "'";
        EXPECT_EQ(m.rfind(shown + ": expected a size such as 500M or 5G (K, M, G, T)", 0), 0u) << m;
        EXPECT_EQ(m.find("hexadecimal"), std::string::npos) << m;
        EXPECT_NE(m.find("unknown unit"), std::string::npos) << m;
    }
    auto hex = units::parse_size("0x5");
    ASSERT_FALSE(hex.ok());
    EXPECT_EQ(hex.error().message.rfind("0x5: expected a size such as 500M or 5G (K, M, G, T)", 0), 0u)
        << hex.error().message;
    EXPECT_NE(hex.error().message.find("hexadecimal"), std::string::npos) << hex.error().message;
}

// ccache's users expect 0 to mean "no limit"; as bytes it made every publish evict everything.
TEST(CacheMaintenance, MaxSizeZeroInTheEnvironmentMeansNoLimit) {
    for (const char *zero : {"0", "0G", "0.0K"}) {
        ::setenv("KJIT_CACHE_MAX_SIZE", zero, 1);
        auto limit = kjit::api::defaults::max_cache_bytes();
        ASSERT_TRUE(limit.ok()) << zero << ": " << limit.error().message;
        EXPECT_FALSE(limit->has_value()) << zero << " gave a limit of " << **limit;
    }
    ::setenv("KJIT_CACHE_MAX_SIZE", "0x10", 1);
    auto bad = kjit::api::defaults::max_cache_bytes();
    ASSERT_FALSE(bad.ok()) << "0x10 gave " << (bad->has_value() ? **bad : 0);
    EXPECT_EQ(bad.error().code, kjit::Errc::invalid_argument);
    EXPECT_NE(bad.error().message.find("$KJIT_CACHE_MAX_SIZE"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("hexadecimal"), std::string::npos) << bad.error().message;
    ::unsetenv("KJIT_CACHE_MAX_SIZE");
}

TEST(CacheEntry, RecognisesEntryCubinPaths) {
    const std::string key = "27640f140e33ff97cdc7337de4e3fe2a";
    EXPECT_EQ(entry::entry_of_cubin("/c/27/" + key + "/kernel.cubin"), "/c/27/" + key);
    EXPECT_EQ(entry::entry_of_cubin("27/" + key + "/kernel.cubin"), "27/" + key);
    EXPECT_EQ(entry::entry_of_cubin("/c/28/" + key + "/kernel.cubin"), "");  // wrong shard
    EXPECT_EQ(entry::entry_of_cubin("/c/x27/" + key + "/kernel.cubin"), "");
    EXPECT_EQ(entry::entry_of_cubin("/c/27/" + key + "/other.cubin"), "");
    EXPECT_EQ(entry::entry_of_cubin("/c/27/" + key.substr(1) + "x/kernel.cubin"), "");
    EXPECT_EQ(entry::entry_of_cubin("/c/27/27640F140E33FF97CDC7337DE4E3FE2A/kernel.cubin"), "");
    EXPECT_EQ(entry::entry_of_cubin("kernel.cubin"), "");
}

TEST(CacheEntry, ManifestRoundTripsAndRejectsDamage) {
    entry::Manifest m;
    m.key = "27640f140e33ff97cdc7337de4e3fe2a";
    m.keyword = "gemm";
    m.name = "_Z4gemmPf";
    m.arch = "sm_90a";
    m.nvrtc = "13.0 libnvrtc.so.13 123";
    m.options = {"-DA=1", "line\nbreak \\ back"};
    m.include_paths = {"/inc"};
    m.headers = {"a.h"};
    m.name_expression = "gemm<1>";
    m.program_name = "kernels/gemm.cu";
    m.cubin_bytes = 4096;
    m.cubin_hash = "0123456789abcdef0123456789abcdef";
    m.created = "2026-12-03T10:00:00Z";
    const std::string text = entry::format_manifest(m);
    auto back = entry::parse_manifest(text, "m");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->options, m.options);
    EXPECT_EQ(back->include_paths, m.include_paths);
    EXPECT_EQ(back->name_expression, m.name_expression);
    EXPECT_EQ(back->program_name, m.program_name);
    EXPECT_EQ(back->cubin_bytes, 4096u);
    EXPECT_EQ(back->arch, "sm_90a");
    EXPECT_EQ(back->cubin_hash, m.cubin_hash);
    for (const std::string &bad : {std::string(""), std::string("kjit-manifest 2\n"), text.substr(0, text.size() - 1),
                                   std::string("kjit-manifest 1\nkey: x\nkeyword: k\n"),
                                   std::string("kjit-manifest 1\nkey: x\nkeyword: k\nname: n\ncubin_bytes: 12x\n"),
                                   std::string("kjit-manifest 1\nkey: x\nkeyword: k\nname: n\\q\n"),
                                   std::string("kjit-manifest 1\nno label here\n")}) {
        auto r = entry::parse_manifest(bad, "/c/m.txt");
        EXPECT_FALSE(r.ok()) << bad;
        if (!r.ok()) {
            EXPECT_NE(r.error().message.find("/c/m.txt"), std::string::npos);
        }
    }
}

TEST(CacheMaintenance, HitsAndLoadsRecordRecencyAtMostOncePerStep) {
    TempDir dir;
    Cache cache;
    const std::string cubin = compile_entries(cache, dir.file("c"), 1)[0];
    const std::string folder = folder_of(cubin);
    // Fresh: a hit writes nothing.
    const std::int64_t published = mtime_of(folder);
    ASSERT_TRUE(cache.compile(request_for(dir.file("c"), 0)).ok());
    EXPECT_EQ(mtime_of(folder), published);
    // Used 2 hours ago: the next hit records now. (The hit memo answers repeats for a second
    // without a look-up; these records are aged by hand within that second, so it is emptied:
    // a real record is never older than a minute and a second while the entry is asked for.)
    age(folder, 7200);
    cache.hit_memo().clear();
    ASSERT_TRUE(cache.compile(request_for(dir.file("c"), 0)).ok());
    EXPECT_GT(mtime_of(folder), now_ns() - 10 * kSecond);
    // 30 s ago is within the step: left as it is.
    age(folder, 30);
    const std::int64_t recent = mtime_of(folder);
    cache.hit_memo().clear();
    ASSERT_TRUE(cache.compile(request_for(dir.file("c"), 0)).ok());
    EXPECT_EQ(mtime_of(folder), recent);
    // A load (its file read) records the use too; a cubin outside a cache costs nothing.
    age(folder, 7200);
    ASSERT_TRUE(kjit::load::KernelLoader::instance().read_and_resolve(cubin, "gemm").ok());
    EXPECT_GT(mtime_of(folder), now_ns() - 10 * kSecond);
    // The cubin's own identity is untouched: its sidecar still hits.
    const auto hits = kjit::resolve::NameResolver::instance().counters().sidecar_hits.load();
    ASSERT_TRUE(kjit::resolve::NameResolver::instance().resolve(cubin, "gemm").ok());
    EXPECT_EQ(kjit::resolve::NameResolver::instance().counters().sidecar_hits.load(), hits + 1);
}

// The documented promise: an entry used in the last two minutes is never evicted. A hit records
// its use only when the record is over a minute old, and the in-use test allowed two minutes
// from the record, so a hit on an entry recorded 59 s earlier was protected for 61 s only.
TEST(CacheMaintenance, AUseIsProtectedForTheWholeDocumentedWindow) {
    constexpr std::int64_t kDocumentedWindow = 120 * kSecond;  // "the last two minutes"
    TempDir dir;
    Cache cache;
    const std::string cubin = compile_entries(cache, dir.file("c"), 1)[0];
    const std::string folder = folder_of(cubin);
    // A hit and a load on an entry whose record is 59 s old (neither writes a new one).
    for (int use = 0; use < 2; ++use) {
        age(folder, 59);
        const std::int64_t used = now_ns();
        if (use == 0) {
            ASSERT_TRUE(cache.compile(request_for(dir.file("c"), 0)).ok());
        } else {
            ASSERT_TRUE(kjit::load::KernelLoader::instance().read_and_resolve(cubin, "gemm").ok());
        }
        const std::int64_t record = mtime_of(folder);
        // Any process's eviction until two minutes after the use spares it.
        for (std::int64_t later : {std::int64_t{0}, 61 * kSecond, 100 * kSecond, kDocumentedWindow - kSecond}) {
            EXPECT_TRUE(entry::in_use(record, used + later))
                << (use == 0 ? "hit" : "load") << ": evictable " << later / kSecond << " s after the use";
        }
        // And it does not stay in use for ever: three minutes after its record, it may go.
        EXPECT_FALSE(entry::in_use(record, record + kDocumentedWindow + 61 * kSecond));
    }
}

TEST(CacheMaintenance, InventoryCountsEntriesTransitAndForeignFiles) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    auto empty = inventory::take_inventory(dir.file("missing"));
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->entries.empty());
    const auto cubins = compile_entries(cache, c, 3);
    const std::string shard = folder_of(folder_of(cubins[0]));
    ASSERT_EQ(::mkdir((shard + "/.tmp-abc-1-2-3").c_str(), 0700), 0);
    write_file(shard + "/.tmp-abc-1-2-3/kernel.cubin", "12345");
    write_file(c + "/README", "mine");
    ASSERT_EQ(::mkdir((c + "/zz").c_str(), 0700), 0);
    auto inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok()) << inv.error().message;
    EXPECT_EQ(inv->entries.size(), 3u);
    std::uint64_t expected = 0;
    for (const auto &cubin : cubins) expected += entry_bytes(folder_of(cubin));
    EXPECT_EQ(inv->entry_bytes, expected);
    ASSERT_EQ(inv->in_transit.size(), 1u);
    EXPECT_EQ(inv->in_transit[0].bytes, entry_bytes(shard + "/.tmp-abc-1-2-3"));
    EXPECT_EQ(inv->foreign, 2u);
    auto summary = inventory::summarize(c);
    ASSERT_TRUE(summary.ok());
    EXPECT_EQ(summary->entries, 3u);
    ASSERT_EQ(summary->by_arch.count("sm_90"), 1u);
    EXPECT_EQ(summary->by_arch.at("sm_90").entries, 3u);
    EXPECT_FALSE(summary->oldest_created.empty());
    EXPECT_LE(summary->oldest_created, summary->newest_created);
}

// The limit counted file sizes, so a cache of small entries took several times its limit on
// disk (a 4 KB cubin and four small files take 24 KiB with 4 KiB blocks). It counts what the
// disk counts, as du does, everywhere: eviction, stats, prune reports and the usage record.
TEST(CacheMaintenance, SizesCountDiskBlocksAsDuDoes) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 3);
    std::uint64_t on_disk = 0, sizes = 0;
    for (const auto &cubin : cubins) {
        on_disk += entry_bytes(folder_of(cubin));
        sizes += file_sizes(folder_of(cubin));
    }
    ASSERT_GT(on_disk, sizes) << "this file system does not round files up to blocks";
    auto inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok()) << inv.error().message;
    EXPECT_EQ(inv->entry_bytes, on_disk);
    for (const auto &e : inv->entries) EXPECT_EQ(e.bytes, entry_bytes(e.path)) << e.path;
    auto summary = inventory::summarize(c);
    ASSERT_TRUE(summary.ok());
    EXPECT_EQ(summary->bytes, on_disk);
    EXPECT_EQ(summary->by_arch.at("sm_90").bytes, on_disk);
    // Eviction: a limit of what the files hold is exceeded on disk, so a publish evicts.
    for (const auto &cubin : cubins) age(folder_of(cubin), 3600);
    Request r = request_for(c, 3);
    r.max_cache_bytes = sizes + file_sizes(folder_of(compile_entries(cache, dir.file("probe"), 1)[0])) + 4096;
    const auto evicted = eviction::counters().evicted_entries.load();
    ASSERT_TRUE(cache.compile(r).ok());
    EXPECT_GT(eviction::counters().evicted_entries.load(), evicted);
    inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok());
    EXPECT_LE(inv->entry_bytes, *r.max_cache_bytes);
    // Prune reports the same measure.
    eviction::PruneOptions none;
    none.older_than_ns = 86400 * kSecond;
    auto report = eviction::prune(c, none);
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->kept_bytes, inv->entry_bytes);
    std::uint64_t kept = 0;
    for (const auto &e : inv->entries) kept += entry_bytes(e.path);
    EXPECT_EQ(report->kept_bytes, kept);
}

TEST(CacheMaintenance, PruneRemovesTheLeastRecentlyUsedWholeEntries) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 6);
    // Entry i was last used (6 - i) hours ago: entry 5 is the newest.
    std::uint64_t newest_three = 0;
    for (int i = 0; i < 6; ++i) {
        age(folder_of(cubins[i]), (6 - i) * 3600);
        if (i >= 3) newest_three += entry_bytes(folder_of(cubins[i]));
    }
    eviction::PruneOptions by_size;
    by_size.max_bytes = newest_three;
    auto r = eviction::prune(c, by_size);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->removed_entries, 3u);
    EXPECT_EQ(r->kept_entries, 3u);
    EXPECT_EQ(r->kept_bytes, newest_three);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(exists(folder_of(cubins[i])), i >= 3) << i;
    // By age: entries 3 and 4 (3 and 2 hours) go, entry 5 (1 hour) stays.
    eviction::PruneOptions by_age;
    by_age.older_than_ns = 90 * 60 * kSecond;
    r = eviction::prune(c, by_age);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->removed_entries, 2u);
    EXPECT_TRUE(exists(folder_of(cubins[5])));
    EXPECT_FALSE(exists(folder_of(cubins[4])));
    // No trash left behind; the kept entry still hits without NVRTC.
    for (const std::string &shard : list_dir(c)) {
        if (shard[0] == '.') continue;
        for (const std::string &name : list_dir(c + "/" + shard)) EXPECT_NE(name[0], '.') << name;
    }
    const auto runs = cache.counters().nvrtc_compiles.load();
    ASSERT_TRUE(cache.compile(request_for(c, 5)).ok());
    EXPECT_EQ(cache.counters().nvrtc_compiles.load(), runs);
    // A removed one compiles again.
    ASSERT_TRUE(cache.compile(request_for(c, 0)).ok());
    EXPECT_EQ(cache.counters().nvrtc_compiles.load(), runs + 1);
}

TEST(CacheMaintenance, EntriesInUseAreSparedButClearRemovesEverything) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 2);
    age(folder_of(cubins[0]), 3600);  // idle; cubins[1] was just published: in use
    eviction::PruneOptions all;
    all.max_bytes = 0;
    auto r = eviction::prune(c, all);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->removed_entries, 1u);
    EXPECT_EQ(r->spared_in_use, 1u);
    EXPECT_TRUE(exists(cubins[1]));
    // A stale temp folder goes too; a live one (a publish in progress) stays.
    const std::string shard = folder_of(folder_of(cubins[1]));
    ASSERT_EQ(::mkdir((shard + "/.tmp-old-1-2-3").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((shard + "/.tmp-live-1-2-3").c_str(), 0700), 0);
    age(shard + "/.tmp-old-1-2-3", 3600);
    r = eviction::clear(c);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->removed_entries, 1u);
    EXPECT_EQ(r->removed_in_transit, 1u);
    EXPECT_FALSE(exists(cubins[1]));
    EXPECT_FALSE(exists(shard + "/.tmp-old-1-2-3"));
    EXPECT_TRUE(exists(shard + "/.tmp-live-1-2-3"));
    // Only the cache's own names are touched.
    write_file(c + "/notes.txt", "mine");
    ASSERT_TRUE(eviction::clear(c).ok());
    EXPECT_TRUE(exists(c + "/notes.txt"));
}

TEST(CacheMaintenance, RetireIsAtomicAndSparesInUseEntries) {
    TempDir dir;
    Cache cache;
    const auto cubins = compile_entries(cache, dir.file("c"), 1);
    const std::string folder = folder_of(cubins[0]);
    auto r = entry::retire(folder, entry::InUse::spare);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, entry::Retired::in_use);
    EXPECT_TRUE(exists(cubins[0]));
    age(folder, 3600);
    r = entry::retire(folder, entry::InUse::spare);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, entry::Retired::removed);
    EXPECT_FALSE(exists(folder));
    EXPECT_TRUE(list_dir(folder_of(folder)).empty());  // no trash left
    r = entry::retire(folder, entry::InUse::spare);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, entry::Retired::vanished);
}

TEST(CacheMaintenance, PublishesEvictDownToTheLimit) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const std::uint64_t one = entry_bytes(folder_of(compile_entries(cache, dir.file("probe"), 1)[0]));
    ASSERT_GT(one, 0u);
    const auto runs_before = eviction::counters().eviction_runs.load();
    const auto evicted_before = eviction::counters().evicted_entries.load();
    // Room for 3.5 entries (sizes differ by a few bytes: the source's digits).
    const std::uint64_t limit = one * 7 / 2;
    Cubins cubins;
    for (int i = 0; i < 8; ++i) {
        Request r = request_for(c, i);
        r.max_cache_bytes = limit;
        auto path = cache.compile(r);
        ASSERT_TRUE(path.ok()) << path.error().message;
        cubins.push_back(path->cubin);
        // Older entries were last used longer ago; none is in use at the next publish.
        for (int j = 0; j <= i; ++j) {
            if (exists(cubins[j])) age(folder_of(cubins[j]), 3600 * (i - j + 1));
        }
        auto inv = inventory::take_inventory(c);
        ASSERT_TRUE(inv.ok());
        EXPECT_LE(inv->entry_bytes, limit) << "after publish " << i;
    }
    // The newest entries are the ones kept, and every kept entry is whole.
    auto inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok());
    ASSERT_GE(inv->entries.size(), 2u);
    const std::size_t kept = inv->entries.size();
    for (std::size_t i = 0; i < cubins.size(); ++i) {
        EXPECT_EQ(exists(folder_of(cubins.at(i))), i + kept >= cubins.size()) << i;
    }
    EXPECT_TRUE(verify_ok(c, false).clean());
    EXPECT_GT(eviction::counters().eviction_runs.load(), runs_before);
    EXPECT_EQ(eviction::counters().evicted_entries.load() - evicted_before, cubins.size() - kept);
}

TEST(CacheMaintenance, EvictionNeverRemovesAnEntryAnotherProcessLoads) {
    const char *worker = KJIT_LOAD_WORKER;  // tests/store/load_worker.cpp, built beside this test
    ASSERT_NE(std::getenv("KJIT_LIBCUDA"), nullptr) << "KJIT_LIBCUDA is not set (ctest sets it)";
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 4);
    for (const auto &cubin : cubins) age(folder_of(cubin), 3600);  // all idle
    // Another process loads entry 0 over and over.
    std::string seconds = "2";
    char *argv[] = {const_cast<char *>(worker), seconds.data(), const_cast<char *>(cubins[0].c_str()),
                    const_cast<char *>("gemm"), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, worker, nullptr, nullptr, argv, environ), 0);
    // Once it has recorded its use, evict everything that is not in use, again and again.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (mtime_of(folder_of(cubins[0])) < now_ns() - 60 * kSecond && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    int rounds = 0;
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0) {
        eviction::PruneOptions all;
        all.max_bytes = 0;
        ASSERT_TRUE(eviction::prune(c, all).ok());
        eviction::after_publish(c, 1, 1);
        EXPECT_TRUE(exists(cubins[0]));
        ++rounds;
    }
    ASSERT_EQ(done, pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the loading process saw a failure";
    EXPECT_GT(rounds, 0);
    EXPECT_TRUE(exists(cubins[0]));
    for (int i = 1; i < 4; ++i) EXPECT_FALSE(exists(cubins[i])) << i;
}

// The throttle state of eviction, one per cache folder, grew without bound in a long-lived
// process (a service that opens a cache per job, per user). It keeps the most recent folders.
TEST(CacheMaintenance, EvictionStateStaysBoundedOverManyCacheFolders) {
    TempDir dir;
    const std::size_t folders = eviction::kMaxEvictionStates * 3;
    for (std::size_t i = 0; i < folders; ++i) {
        const std::string c = dir.file("c" + std::to_string(i));
        ASSERT_EQ(::mkdir(c.c_str(), 0700), 0);
        eviction::after_publish(c, 1ull << 40, 1);
        EXPECT_LE(eviction::eviction_state_count(), eviction::kMaxEvictionStates) << "after " << i + 1;
    }
    // The most recent folder keeps its state: it is not swept again within the interval (a
    // forgotten one would be: its stale temp folder would go).
    const std::string last = dir.file("c" + std::to_string(folders - 1));
    ASSERT_EQ(::mkdir((last + "/00").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((last + "/00/.tmp-stale-1-2-3").c_str(), 0700), 0);
    age(last + "/00/.tmp-stale-1-2-3", 3600);
    eviction::after_publish(last, 1ull << 40, 1);
    EXPECT_TRUE(exists(last + "/00/.tmp-stale-1-2-3"));
    // The first one was forgotten: its next publish sweeps.
    const std::string first = dir.file("c0");
    ASSERT_EQ(::mkdir((first + "/00").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((first + "/00/.tmp-stale-1-2-3").c_str(), 0700), 0);
    age(first + "/00/.tmp-stale-1-2-3", 3600);
    eviction::after_publish(first, 1ull << 40, 1);
    EXPECT_FALSE(exists(first + "/00/.tmp-stale-1-2-3"));
    EXPECT_LE(eviction::eviction_state_count(), eviction::kMaxEvictionStates);
}

// Recency records in the future (a clock that was ahead, a `cp -a` from such a machine) were
// never evicted: always "in use", never older than any age. A future record counts as now, and
// whatever sees it (a hit, a load, eviction, prune) rewrites it to now, so it ages from there.
TEST(CacheMaintenance, FutureRecencyCountsAsNowThenAgesFromThere) {
    constexpr std::int64_t kYear = 365 * 86400;
    EXPECT_TRUE(entry::in_use(now_ns() + kYear * kSecond, now_ns()));
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 4);
    for (int i = 0; i < 3; ++i) age(folder_of(cubins[i]), -kYear);
    age(folder_of(cubins[3]), 3600);
    // prune --max-size 0: the idle entry goes; the future ones may be in use by a process whose
    // clock is ahead, so they stay, but from now on their records age.
    eviction::PruneOptions all;
    all.max_bytes = 0;
    auto r = eviction::prune(c, all);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->removed_entries, 1u);
    EXPECT_EQ(r->spared_in_use, 3u);
    EXPECT_LE(mtime_of(folder_of(cubins[0])), now_ns()) << "prune left a recency record in the future";
    EXPECT_LE(mtime_of(folder_of(cubins[1])), now_ns()) << "prune left a recency record in the future";
    // --older-than: a future record is as old as now, so it stays the first time, and ages.
    age(folder_of(cubins[0]), -kYear);
    eviction::PruneOptions by_age;
    by_age.older_than_ns = kSecond;
    r = eviction::prune(c, by_age);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->removed_entries, 0u);
    EXPECT_LE(mtime_of(folder_of(cubins[0])), now_ns()) << "prune --older-than left a record in the future";
    // An hour after that, both are idle and go (the hour is set, not waited for).
    age(folder_of(cubins[0]), 3600);
    age(folder_of(cubins[1]), 3600);
    r = eviction::prune(c, by_age);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->removed_entries, 2u);
    EXPECT_FALSE(exists(cubins[0]));
    // A hit rewrites a future record as well (a load records its use through the same call).
    ASSERT_TRUE(exists(cubins[2]));
    ASSERT_TRUE(cache.compile(request_for(c, 2)).ok());
    EXPECT_LE(mtime_of(folder_of(cubins[2])), now_ns()) << "a hit left its record in the future";
    age(folder_of(cubins[2]), -kYear);
    ASSERT_TRUE(kjit::load::KernelLoader::instance().read_and_resolve(cubins[2], "gemm").ok());
    EXPECT_LE(mtime_of(folder_of(cubins[2])), now_ns()) << "a load left its record in the future";
    // Eviction after a publish, under a 1-byte limit: the same.
    age(folder_of(cubins[2]), -kYear);
    Request next = request_for(c, 10);
    next.max_cache_bytes = 1;
    ASSERT_TRUE(cache.compile(next).ok());
    EXPECT_TRUE(exists(cubins[2]));
    EXPECT_LE(mtime_of(folder_of(cubins[2])), now_ns()) << "eviction left a record in the future";
    age(folder_of(cubins[2]), 3600);
    next = request_for(c, 11);
    next.max_cache_bytes = 1;
    ASSERT_TRUE(cache.compile(next).ok());
    EXPECT_FALSE(exists(cubins[2])) << "a 1-byte limit kept an entry idle for an hour";
}

// A usage record in the future stopped the re-measuring every 30 s: a process whose own
// publishes stayed under the limit never measured, however large other processes made the cache.
TEST(CacheMaintenance, AUsageRecordInTheFutureIsMeasuredAgain) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 4);
    for (const auto &cubin : cubins) age(folder_of(cubin), 3600);
    write_file(c + "/.kjit-usage", "kjit-usage 1\nbytes 0\nentries 0\n");
    age(c + "/.kjit-usage", -86400);
    const std::uint64_t one = entry_bytes(folder_of(cubins[0]));
    const auto runs = eviction::counters().eviction_runs.load();
    eviction::after_publish(c, 2 * one, 1);
    EXPECT_EQ(eviction::counters().eviction_runs.load(), runs + 1);
    auto inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok());
    EXPECT_LE(inv->entry_bytes, 2 * one);
}

TEST(CacheMaintenance, VerifyFindsEachKindOfDamageAndFixRepairsIt) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 9);
    auto sidecar_of = [&](int i) { return kjit::cubin::sidecar::path_for(cubins[i]); };
    // 0: intact. Damage the others, one kind each.
    ASSERT_EQ(::unlink(cubins[1].c_str()), 0);            // missing cubin
    ASSERT_EQ(::truncate(cubins[2].c_str(), 64), 0);      // truncated cubin
    ASSERT_EQ(::unlink(sidecar_of(3).c_str()), 0);        // no sidecar
    write_file(sidecar_of(4), "not a sidecar at all\n");  // garbage sidecar
    {                                                     // stale sidecar
        struct stat st {};
        ASSERT_EQ(::stat(cubins[5].c_str(), &st), 0);
        const struct timespec times[2] = {st.st_atim, {st.st_mtim.tv_sec - 100, 0}};
        ASSERT_EQ(::utimensat(AT_FDCWD, cubins[5].c_str(), times, 0), 0);
    }
    {  // wrong name
        auto lines = kjit::cubin::sidecar::read(sidecar_of(6)).lines;
        ASSERT_EQ(lines.size(), 1u);
        lines[0].name = "_Z4gemmILi99EEvPf";
        write_file(sidecar_of(6), kjit::cubin::sidecar::format(lines));
    }
    ASSERT_EQ(::unlink((folder_of(cubins[7]) + "/manifest.txt").c_str()), 0);            // missing manifest
    write_file(folder_of(cubins[8]) + "/manifest.txt", "kjit-manifest 1\nkey: nope\n");  // bad manifest
    const std::string shard = folder_of(folder_of(cubins[0]));
    const std::string temp = shard + "/.tmp-" + std::string(32, 'a') + "-1-2-3";  // a killed writer's
    ASSERT_EQ(::mkdir(temp.c_str(), 0700), 0);
    write_file(temp + "/kernel.cubin", "partial");
    age(temp, 3600);
    const std::string temp_file = sidecar_of(0) + ".tmp-1-2-3";
    write_file(temp_file, "torn");
    age(temp_file, 3600);

    using D = verification::Damage;
    const std::vector<D> expected = {D::missing_file,    D::missing_file,    D::bad_manifest,  D::truncated_cubin,
                                     D::sidecar_missing, D::sidecar_damaged, D::sidecar_stale, D::sidecar_wrong_name,
                                     D::stale_temp,      D::stale_temp};
    auto sorted = expected;
    std::sort(sorted.begin(), sorted.end());
    auto report = verify_ok(c, false);
    EXPECT_EQ(damages(report), sorted);
    EXPECT_FALSE(report.clean());
    EXPECT_EQ(report.entries_checked, 9u);
    EXPECT_EQ(report.entries_ok, 1u);
    for (const auto &f : report.findings) EXPECT_FALSE(f.fixed);
    EXPECT_TRUE(exists(cubins[2])) << "verify without --fix changed the cache";

    report = verify_ok(c, true);
    EXPECT_EQ(damages(report), sorted);
    EXPECT_TRUE(report.clean());
    for (const auto &f : report.findings) EXPECT_TRUE(f.fixed) << f.path << ": " << f.action;
    // Repairable ones keep their entry with a good sidecar; broken ones are gone; so are temps.
    for (int i : {0, 3, 4, 5, 6}) {
        EXPECT_TRUE(exists(cubins[i])) << i;
        const auto lines = kjit::cubin::sidecar::read(sidecar_of(i)).lines;
        ASSERT_EQ(lines.size(), 1u) << i;
        EXPECT_EQ(lines[0].name, sources::numbered_gemm_name(i)) << i;
    }
    for (int i : {1, 2, 7, 8}) EXPECT_FALSE(exists(folder_of(cubins[i]))) << i;
    EXPECT_FALSE(exists(temp));
    EXPECT_FALSE(exists(temp_file));
    report = verify_ok(c, false);
    EXPECT_TRUE(report.findings.empty());
    EXPECT_EQ(report.entries_ok, 5u);
    // Rebuilt sidecars are hits; removed entries compile again.
    const auto scans = kjit::resolve::NameResolver::instance().counters().scans.load();
    for (int i : {3, 4, 5, 6}) ASSERT_TRUE(kjit::resolve::NameResolver::instance().resolve(cubins[i], "gemm").ok());
    EXPECT_EQ(kjit::resolve::NameResolver::instance().counters().scans.load(), scans);
    for (int i = 0; i < 9; ++i) ASSERT_TRUE(cache.compile(request_for(c, i)).ok());
    EXPECT_TRUE(verify_ok(c, false).findings.empty());
}

TEST(CacheMaintenance, PublishesSweepStaleTempFoldersButNotLiveOnes) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    ASSERT_EQ(::mkdir(c.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((c + "/ab").c_str(), 0700), 0);
    const std::string stale = c + "/ab/.tmp-" + std::string(32, 'a') + "-1-2-3";
    const std::string trash = c + "/ab/.trash-" + std::string(32, 'a') + "-1-2-4";
    const std::string live = c + "/ab/.tmp-" + std::string(32, 'b') + "-1-2-5";
    for (const std::string &d : {stale, trash, live}) {
        ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
        write_file(d + "/kernel.cubin", "partial");
    }
    age(stale, 3600);
    age(trash, 3600);
    const auto swept = eviction::counters().swept_temp_folders.load();
    // The first publish of this process into this cache sweeps (no size limit needed).
    compile_entries(cache, c, 1);
    EXPECT_FALSE(exists(stale));
    EXPECT_FALSE(exists(trash));
    EXPECT_TRUE(exists(live));  // a publish in progress elsewhere
    EXPECT_EQ(eviction::counters().swept_temp_folders.load() - swept, 2u);
    // The next ones, within kSweepIntervalNs, do not list the shards again.
    ASSERT_EQ(::mkdir(stale.c_str(), 0700), 0);
    age(stale, 3600);
    compile_entries(cache, c, 2);
    EXPECT_TRUE(exists(stale));
}

// ---------------------------------------------------------------------------------------------
// Integrity: verify checks the cubin's content and never trusts a damaged manifest.

// Item 5: a byte flipped in place with the mtime restored is found and --fix retires the entry.
TEST(CacheIntegrity, VerifyFindsACubinDamagedInPlace) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 2);
    ASSERT_TRUE(flip_text_byte(cubins[1], /*keep_mtime=*/true));
    auto report = verify_ok(c, false);
    ASSERT_EQ(report.findings.size(), 1u);
    EXPECT_EQ(report.findings[0].damage, verification::Damage::bad_cubin);
    EXPECT_EQ(report.findings[0].path, folder_of(cubins[1]));
    EXPECT_NE(report.findings[0].detail.find("hash"), std::string::npos) << report.findings[0].detail;
    report = verify_ok(c, true);
    EXPECT_TRUE(report.clean());
    EXPECT_FALSE(exists(folder_of(cubins[1])));
    EXPECT_TRUE(exists(cubins[0]));
    EXPECT_TRUE(verify_ok(c, false).findings.empty());
}

// Item 6: one bad `name:` line (another kernel the cubin holds, which passes the keyword rule)
// must not make verify condemn the correct sidecar, nor --fix write the wrong name.
TEST(CacheIntegrity, VerifyFixNeverTrustsADamagedManifest) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    Request r;
    r.source = sources::kTemplateSeveral;
    r.keyword = "tmpl";
    r.name_expression = "tmpl<2>";
    r.cache_dir = c;
    r.arch = "sm_90";
    auto path = cache.compile(r);
    ASSERT_TRUE(path.ok()) << path.error().message;
    const std::string manifest_path = folder_of(path->cubin) + "/manifest.txt";
    std::string manifest = read_file(manifest_path);
    const std::size_t at = manifest.find("name: _Z4tmplILi2EEvPf\n");
    ASSERT_NE(at, std::string::npos) << manifest;
    manifest[at + std::string("name: _Z4tmplILi").size()] = '3';
    write_file(manifest_path, manifest);

    auto report = verify_ok(c, false);
    ASSERT_EQ(report.findings.size(), 1u);
    EXPECT_EQ(report.findings[0].damage, verification::Damage::bad_manifest) << report.findings[0].detail;
    report = verify_ok(c, true);
    EXPECT_TRUE(report.clean());
    const std::string sidecar = read_file(kjit::cubin::sidecar::path_for(path->cubin));
    EXPECT_EQ(sidecar.find("_Z4tmplILi3EEvPf"), std::string::npos) << "--fix wrote the damaged manifest's name";
    EXPECT_FALSE(exists(folder_of(path->cubin))) << "a damaged manifest must retire the entry";
    // Rebuilt by the next compile, with the right name.
    auto again = cache.compile(r);
    ASSERT_TRUE(again.ok()) << again.error().message;
    auto name = kjit::resolve::NameResolver::instance().resolve(again->cubin, "tmpl");
    ASSERT_TRUE(name.ok()) << name.error().message;
    EXPECT_EQ(*name, "_Z4tmplILi2EEvPf");
}

// Of its kind: every single-byte change anywhere in a manifest is refused by the parser (the
// check line covers all of it, including the cubin hash and the name).
TEST(CacheIntegrity, EveryByteOfAManifestIsCovered) {
    entry::Manifest m;
    m.key = "27640f140e33ff97cdc7337de4e3fe2a";
    m.keyword = "gemm";
    m.name = "_Z4gemmPf";
    m.arch = "sm_90a";
    m.nvrtc = "13.0";
    m.cubin_bytes = 4096;
    m.cubin_hash = "0123456789abcdef0123456789abcdef";
    m.created = "2026-12-03T10:00:00Z";
    const std::string text = entry::format_manifest(m);
    ASSERT_TRUE(entry::parse_manifest(text, "m").ok());
    for (std::size_t i = 0; i < text.size(); ++i) {
        std::string bad = text;
        bad[i] = static_cast<char>(bad[i] == 'x' ? 'y' : 'x');
        EXPECT_FALSE(entry::parse_manifest(bad, "m").ok()) << "byte " << i << " of:\n" << bad;
    }
}

// Item 8 in a cache: a `tar` copy (whole-second mtimes) keeps hitting after one rescan per
// entry, whose line is then bound to the content; verify agrees with the resolver throughout.
TEST(CacheIntegrity, WholeSecondCacheHitsAfterOneRescanAndVerifyAgrees) {
    TempDir dir;
    Cache cache;
    const std::string c = dir.file("c");
    const auto cubins = compile_entries(cache, c, 2);
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(set_mtime(cubins[i], now_ns() / kSecond - 3600, 0));
    // Before any use the lines (written with nanoseconds, no hash) do not match: stale.
    auto report = verify_ok(c, false);
    EXPECT_EQ(damages(report), std::vector<verification::Damage>(2, verification::Damage::sidecar_stale));
    Cache other;
    auto compiled = [&](int i) {
        auto path = other.compile(request_for(c, i));
        return path.ok() ? path->cubin : "error: " + path.error().message;
    };
    const auto scans = kjit::resolve::NameResolver::instance().counters().scans.load();
    for (int i = 0; i < 2; ++i) ASSERT_EQ(compiled(i), cubins[i]);
    EXPECT_EQ(kjit::resolve::NameResolver::instance().counters().scans.load(), scans + 2);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(compiled(i), cubins[i]);
    EXPECT_EQ(kjit::resolve::NameResolver::instance().counters().scans.load(), scans + 2);  // hits now
    EXPECT_EQ(other.counters().nvrtc_compiles, 0u);
    for (int i = 0; i < 2; ++i) {
        const auto lines = kjit::cubin::sidecar::read(kjit::cubin::sidecar::path_for(cubins[i])).lines;
        ASSERT_EQ(lines.size(), 1u);
        EXPECT_TRUE(lines[0].content_hash.has_value());
    }
    EXPECT_TRUE(verify_ok(c, false).findings.empty());
}

namespace {

// Batch items into cache `c` for sources `first`..`first + n - 1`, each under `limit`.
std::vector<kjit::Result<Request>> batch_items(const std::string &c, int first, int n, std::uint64_t limit) {
    std::vector<kjit::Result<Request>> items;
    for (int i = first; i < first + n; ++i) {
        Request r = request_for(c, i);
        r.max_cache_bytes = limit;
        items.emplace_back(std::move(r));
    }
    return items;
}

}  // namespace

// Under a size limit, a batch running for more than about two minutes evicted items it had
// already reported OK: its own later publishes measured the cache, found the early items idle
// and evicted them, so the result said OK and the load failed with ENOENT. Time is not waited
// for: each item's record is set an hour back as it is reported, as if the batch had run that
// long since.
TEST(BatchRecency, ABatchNeverEvictsWhatItHandedOut) {
    TempDir dir;
    const std::string c = dir.file("c");
    Cache &cache = Cache::instance();  // the one batches use
    const std::string hit = cache.compile(request_for(c, 200))->cubin;
    const std::uint64_t one = entry_bytes(folder_of(hit));
    kjit::batch::compiler::Options options;
    options.workers = 1;
    options.pch = kjit::batch::compiler::Pch::off;
    options.progress = [&](std::size_t, std::size_t, std::size_t, const kjit::Result<kjit::storage::Found> &r) {
        if (r) age(folder_of(r->cubin), 3600);
        return false;
    };
    // Room for one and a half entries; item 0 is a hit, the others compile and publish.
    const auto results = kjit::batch::compiler::compile(batch_items(c, 200, 4, one * 3 / 2), options);
    const std::int64_t returned = now_ns();
    ASSERT_EQ(results.size(), 4u);
    for (std::size_t i = 0; i < results.size(); ++i) {
        ASSERT_TRUE(results[i].ok()) << results[i].error().message;
        EXPECT_TRUE(exists(results[i]->cubin))
            << "item " << i << " was reported OK, then evicted by the batch's own publishes";
        auto loaded = kjit::load::KernelLoader::instance().read_and_resolve(results[i]->cubin, "gemm");
        EXPECT_TRUE(loaded.ok()) << "item " << i << ": " << loaded.error().message;
        // Other processes see it in use until two minutes after the batch returned.
        EXPECT_TRUE(entry::in_use(mtime_of(folder_of(results[i]->cubin)), returned + 120 * kSecond - kSecond))
            << "item " << i << ": its recency record lets another process evict it as soon as the batch returns";
    }
    // Once it has returned (and two more minutes went by: set, not waited for), the limit holds again.
    for (const auto &r : results) age(folder_of(r->cubin), 3600);
    Request next = request_for(c, 210);
    next.max_cache_bytes = one * 3 / 2;
    ASSERT_TRUE(cache.compile(next).ok());
    auto inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok());
    EXPECT_LE(inv->entry_bytes, one * 3 / 2);
}

// While a batch runs, what it handed out must look in use to other processes' eviction, which
// sees only the recency records: the batch records their use again while it runs (here at every
// report; by default at most once a minute).
TEST(BatchRecency, WhatABatchHandedOutLooksInUseToOtherProcessesWhileItRuns) {
    TempDir dir;
    const std::string c = dir.file("c");
    Cache &cache = Cache::instance();
    ASSERT_TRUE(cache.compile(request_for(c, 220)).ok());
    kjit::batch::compiler::Options options;
    options.workers = 1;
    options.pch = kjit::batch::compiler::Pch::off;
    options.recency_refresh_ns = 0;
    std::vector<std::string> reported;
    options.progress = [&](std::size_t, std::size_t, std::size_t, const kjit::Result<kjit::storage::Found> &r) {
        const std::int64_t now = now_ns();
        for (const std::string &earlier : reported) {
            EXPECT_TRUE(entry::in_use(mtime_of(folder_of(earlier)), now))
                << earlier << " was handed out by this running batch, and another process may evict it";
        }
        if (r) {
            reported.push_back(r->cubin);
            age(folder_of(r->cubin), 3600);  // as if the batch had run an hour since
        }
        return false;
    };
    const auto results = kjit::batch::compiler::compile(batch_items(c, 220, 3, 1ull << 40), options);
    ASSERT_EQ(reported.size(), 3u);
    for (const auto &r : results) EXPECT_TRUE(r.ok());
}

// Eviction in the process of a running batch spares its entries whatever their records say
// (a record may be old: written by another process, or not writable), and prune too; once the
// batch has returned, they go like any other.
TEST(BatchRecency, EvictionInTheBatchsProcessSparesItsEntriesWhateverTheirRecords) {
    TempDir dir;
    const std::string c = dir.file("c");
    Cache &cache = Cache::instance();
    const auto cubins = compile_entries(cache, c, 3);  // sources 0, 1, 2
    kjit::batch::compiler::Options options;
    options.workers = 1;
    options.pch = kjit::batch::compiler::Pch::off;
    std::size_t calls = 0;
    options.progress = [&](std::size_t, std::size_t, std::size_t, const kjit::Result<kjit::storage::Found> &) {
        if (++calls == 2) {
            for (const auto &cubin : cubins) age(folder_of(cubin), 3600);
            eviction::PruneOptions all;
            all.max_bytes = 0;
            auto r = eviction::prune(c, all);
            EXPECT_TRUE(r.ok());
            EXPECT_EQ(r->removed_entries, 1u) << "prune removed an entry the running batch handed out";
            EXPECT_TRUE(exists(cubins[0]));
            EXPECT_TRUE(exists(cubins[1]));
            EXPECT_FALSE(exists(cubins[2]));
        }
        return false;
    };
    std::vector<kjit::Result<Request>> items;
    items.emplace_back(request_for(c, 0));
    items.emplace_back(request_for(c, 1));
    const auto results = kjit::batch::compiler::compile(std::move(items), options);
    EXPECT_EQ(calls, 2u);
    for (const auto &cubin : {cubins[0], cubins[1]}) age(folder_of(cubin), 3600);
    eviction::PruneOptions all;
    all.max_bytes = 0;
    auto r = eviction::prune(c, all);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->removed_entries, 2u);
}

// The variants file of a request that reads files (cache_entry.hpp) is the cache's own: not
// counted among other files, counted in the size, verified clean; it goes when none of the
// entries it lists is left (prune, clear), and not while a publish may be listing a new one.
TEST(CacheMaintenance, VariantsFilesGoWithTheirEntries) {
    TempDir dir;
    const std::string c = dir.file("cache");
    Cache cache;
    ::mkdir(dir.file("inc").c_str(), 0755);
    Request r = request_for(c, 0);
    r.source = "#include <v.h>\n__global__ void gemm(float *p) { p[0] = V; }\n";
    r.include_paths = {dir.file("inc")};
    std::vector<std::string> cubins;
    for (const char *v : {"1.0f", "2.0f"}) {
        write_file(dir.file("inc/v.h"), std::string("#define V ") + v + "\n");
        auto path = cache.compile(r);
        ASSERT_TRUE(path.ok()) << path.error().message;
        cubins.push_back(path->cubin);
    }
    auto prepared = kjit::key::key_request(r);
    ASSERT_TRUE(prepared.ok());
    const std::string list = entry::variants_file_for(prepared->request.cache_dir, prepared->key);
    ASSERT_TRUE(exists(list));
    auto summary = inventory::summarize(c);
    ASSERT_TRUE(summary.ok()) << summary.error().message;
    EXPECT_EQ(summary->entries, 2u);
    EXPECT_EQ(summary->foreign, 0u);
    auto inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok());
    ASSERT_EQ(inv->variants.size(), 1u);
    EXPECT_EQ(inv->entry_bytes,
              entry_bytes(folder_of(cubins[0])) + entry_bytes(folder_of(cubins[1])) + inv->variants[0].bytes);
    EXPECT_TRUE(verify_ok(c, false).clean());

    // One entry left: the list stays, even when old.
    for (const std::string &cubin : cubins) age(folder_of(cubin), 3 * 24 * 3600);
    age(list, 3 * 24 * 3600);
    age(folder_of(cubins[1]), 0);
    eviction::PruneOptions older;
    older.older_than_ns = 24 * 3600 * kSecond;
    auto pruned = eviction::prune(c, older);
    ASSERT_TRUE(pruned.ok()) << pruned.error().message;
    EXPECT_EQ(pruned->removed_entries, 1u);
    EXPECT_EQ(pruned->removed_variants, 0u);
    EXPECT_TRUE(exists(list));
    // None left, but the list written just now (a publish may be listing an entry the prune did
    // not see): kept; old: removed.
    age(folder_of(cubins[1]), 3 * 24 * 3600);
    age(list, 0);
    pruned = eviction::prune(c, older);
    ASSERT_TRUE(pruned.ok());
    EXPECT_EQ(pruned->removed_entries, 1u);
    EXPECT_EQ(pruned->removed_variants, 0u);
    EXPECT_TRUE(exists(list));
    age(list, 3 * 24 * 3600);
    pruned = eviction::prune(c, older);
    ASSERT_TRUE(pruned.ok());
    EXPECT_EQ(pruned->removed_variants, 1u);
    EXPECT_FALSE(exists(list));

    // clear takes every list, however young.
    auto path = cache.compile(r);
    ASSERT_TRUE(path.ok()) << path.error().message;
    ASSERT_TRUE(exists(list));
    auto cleared = eviction::clear(c);
    ASSERT_TRUE(cleared.ok());
    EXPECT_EQ(cleared->removed_variants, 1u);
    EXPECT_FALSE(exists(list));
    inv = inventory::take_inventory(c);
    ASSERT_TRUE(inv.ok());
    EXPECT_EQ(inv->entry_bytes, 0u);
}

// A child forked between the cache lock's open and the descriptor's registration keeps a copy of
// it that the fork handler does not close; the lock was let go only when every copy closed, so
// such a child held it for its whole life (and its own eviction waited on it for ever). The
// release must not depend on other copies: here one is a dup() of the held descriptor.
TEST(CacheLock, ReleasingItDoesNotWaitForOtherCopiesOfItsDescriptor) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ASSERT_EQ(::mkdir(cache.c_str(), 0700), 0);
    auto root = inventory::open_root(cache);
    ASSERT_TRUE(root.ok()) << root.error().message;
    auto held = inventory::CacheLock::acquire(*root, inventory::CacheLock::Wait::until_free);
    ASSERT_TRUE(held.ok() && held->has_value());
    const std::string lock_path = root->path + "/.kjit-lock";
    const int copy = dup_of_descriptor_on(lock_path);
    ASSERT_GE(copy, 0) << "the held lock file's descriptor was not found";
    auto try_lock = [&] {
        const int fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
        const bool got = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
        if (fd >= 0) ::close(fd);
        return got;
    };
    EXPECT_FALSE(try_lock()) << "the lock was not held";
    held->reset();
    EXPECT_TRUE(try_lock()) << "the lock lived on in another copy of its descriptor";
    ::close(copy);
    // Moved, it is released once, by its last owner.
    auto again = inventory::CacheLock::acquire(*root, inventory::CacheLock::Wait::not_at_all);
    ASSERT_TRUE(again.ok() && again->has_value());
    std::optional<inventory::CacheLock> moved = std::move(*again);
    again->reset();
    EXPECT_FALSE(try_lock()) << "a moved-from lock let go of the lock";
    moved.reset();
    EXPECT_TRUE(try_lock());
}
