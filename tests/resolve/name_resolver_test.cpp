#include "resolve/name_resolver.hpp"

#include "crafted_elf.hpp"
#include "cubin/sidecar.hpp"
#include "damage_support.hpp"
#include "in_place_rewriter.hpp"
#include "test_support.hpp"
#include "util/hashing.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

using kjit::Errc;
using kjit::resolve::NameResolver;
using namespace kjit_test;
namespace sc = kjit::cubin::sidecar;

namespace {

// Sets the file's mtime to now - `age_ns` (so a test controls whether it counts as young).
void set_age(const std::string &path, std::int64_t age_ns) {
    struct timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    const std::int64_t t = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec - age_ns;
    struct timespec times[2];
    times[0].tv_sec = times[1].tv_sec = t / 1'000'000'000;
    times[0].tv_nsec = times[1].tv_nsec = t % 1'000'000'000;
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

void copy_mtime(const std::string &from, const std::string &to) {
    struct stat st {};
    ASSERT_EQ(::stat(from.c_str(), &st), 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, to.c_str(), times, 0), 0);
}

constexpr std::int64_t kOld = 3600LL * 1'000'000'000;  // an hour: well past the racy window

// A cubin in a temp folder, aged past the racy window unless asked otherwise.
struct Fixture {
    TempDir dir;
    std::string cubin = dir.file("kernel.cubin");
    std::string sidecar = sc::path_for(cubin);
    explicit Fixture(const std::string &source, std::int64_t age_ns = kOld) { put(source, age_ns); }
    void put(const std::string &source, std::int64_t age_ns = kOld) const {
        write_file(cubin, cubin_for(source));
        set_age(cubin, age_ns);
    }
};

std::string resolve_ok(NameResolver &r, const std::string &cubin, const std::string &keyword) {
    auto name = r.resolve(cubin, keyword);
    EXPECT_TRUE(name.ok()) << name.error().message;
    return name.ok() ? *name : std::string();
}

const char *const kOtherInstantiation = R"(
template <int N> __global__ void tmpl(float *p) { p[threadIdx.x] = N; }
template __global__ void tmpl<5>(float *);
)";

}  // namespace

// A crafted cubin whose kernel's name holds a newline followed by a complete, valid sidecar
// line for another keyword, for this very file (its size and mtime), naming a kernel the cubin
// does not hold. Resolving the kernel must not write that name into the sidecar, or resolving
// the other keyword would return the forged name.
TEST(NameResolver, NameWithNewlineCannotForgeALineForAnotherKeyword) {
    TempDir dir;
    const std::string cubin = dir.file("kernel.cubin");
    const std::string &real = cubin_for(sources::kPlain);
    const struct timespec mtime = {1600000000, 123456789};
    // The forged line states the crafted file's size, which depends on the forged line's length:
    // iterate until the size's digit count is stable (it is after a step or two).
    std::string image;
    std::uint64_t size = real.size();
    for (int i = 0; i < 8; ++i) {
        sc::Line victim;
        victim.keyword = "victim";
        victim.name = "_Z6victimPf";
        victim.cubin_size = size;
        victim.mtime_sec = mtime.tv_sec;
        victim.mtime_nsec = static_cast<std::uint32_t>(mtime.tv_nsec);
        const std::string forged_line = sc::format({victim}).substr(std::string("kjit-sidecar 1\n").size());
        image = crafted::with_symbol_renamed(real, "_Z12plain_kernelPf",
                                             "_Z12plain_kernelPf 0000000000000000\n" + forged_line + "z");
        if (image.size() == size) break;
        size = image.size();
    }
    ASSERT_EQ(image.size(), size);
    write_file(cubin, image);
    const struct timespec times[2] = {mtime, mtime};
    ASSERT_EQ(::utimensat(AT_FDCWD, cubin.c_str(), times, 0), 0);

    NameResolver r;
    auto kernel = r.resolve(cubin, "plain_kernel");
    ASSERT_FALSE(kernel.ok()) << "resolved a name the sidecar cannot hold: '" << *kernel << "'";
    EXPECT_EQ(kernel.error().code, Errc::not_found) << kernel.error().message;
    EXPECT_NE(kernel.error().message.find(cubin), std::string::npos) << kernel.error().message;
    auto victim = r.resolve(cubin, "victim");
    ASSERT_FALSE(victim.ok()) << "the forged line answered: '" << *victim << "'";
    EXPECT_EQ(victim.error().code, Errc::not_found);
    for (const sc::Line &l : sc::read(sc::path_for(cubin)).lines) EXPECT_NE(l.keyword, "victim");
}

// A length number with a leading zero (`_Z04gemmPf`, which c++filt reads as gemm(float*)) is
// the exact identifier: with gemm_fp16 beside it, one kernel has it and that one wins.
TEST(NameResolver, LeadingZeroLengthIsTheExactIdentifier) {
    TempDir dir;
    const std::string cubin = dir.file("kernel.cubin");
    write_file(cubin, crafted::with_symbol_renamed(cubin_for(sources::kPrefixCollision), "_Z4gemmPf", "_Z04gemmPf"));
    set_age(cubin, kOld);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z04gemmPf");
    EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z04gemmPf");
    EXPECT_EQ(r.counters().sidecar_hits, 1u);
}

TEST(NameResolver, SecondCallIsASidecarHit) {
    Fixture f(sources::kPrefixCollision);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(r.counters().scans, 1u);
    EXPECT_EQ(r.counters().sidecar_writes, 1u);
    const auto c = sc::read(f.sidecar);
    ASSERT_EQ(c.lines.size(), 1u);
    EXPECT_EQ(c.lines[0].keyword, "gemm");
    EXPECT_FALSE(c.lines[0].content_hash.has_value());  // an old cubin needs no content hash
    for (int i = 0; i < 5; ++i) EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(r.counters().scans, 1u);
    EXPECT_EQ(r.counters().sidecar_hits, 5u);
    EXPECT_TRUE(temp_files_in(f.dir.path()).empty());
}

TEST(NameResolver, OneLinePerKeyword) {
    Fixture f(sources::kPrefixCollision);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm_fp16"), "_Z9gemm_fp16Pf");
    EXPECT_EQ(sc::read(f.sidecar).lines.size(), 2u);
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm_fp16"), "_Z9gemm_fp16Pf");
    EXPECT_EQ(r.counters().scans, 2u);
    EXPECT_EQ(r.counters().sidecar_hits, 2u);
}

// Every untrusted sidecar: rescan, right answer, rewritten so the next call hits.
TEST(NameResolver, UntrustedSidecarsAreRescannedAndRewritten) {
    struct Case {
        const char *what;
        std::string text;
        std::string keyword;
        std::string expected;
    };
    sc::Line other;
    other.keyword = "gemm_fp16";
    other.name = "_Z9gemm_fp16Pf";
    sc::Line prefix;
    prefix.keyword = "gemm";
    prefix.name = "_Z4gemmPf";
    sc::Line lying;  // well-formed, right keyword, but a name that fails the keyword rule
    lying.keyword = "gemm";
    lying.name = "_Z9attentionPf";
    const std::vector<Case> cases = {
        {"empty", "", "gemm", "_Z4gemmPf"},
        {"garbage", std::string("\x01\x02\xff garbage\n", 13), "gemm", "_Z4gemmPf"},
        {"bare name (legacy Python tools)", "_Z9gemm_fp16Pf\n", "gemm", "_Z4gemmPf"},
        {"header only", "kjit-sidecar 1\n", "gemm", "_Z4gemmPf"},
        {"another keyword", "", "gemm", "_Z4gemmPf"},
        {"a prefix of the keyword", "", "gemm_fp16", "_Z9gemm_fp16Pf"},
        {"a name failing the rule", "", "gemm", "_Z4gemmPf"},
        {"future format", "kjit-sidecar 9\nwhatever\n", "gemm", "_Z4gemmPf"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.what);
        Fixture f(sources::kPrefixCollision);
        struct stat st {};
        ASSERT_EQ(::stat(f.cubin.c_str(), &st), 0);
        std::string text = c.text;
        auto bind = [&](sc::Line l) {
            l.cubin_size = static_cast<std::uint64_t>(st.st_size);
            l.mtime_sec = st.st_mtim.tv_sec;
            l.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
            return sc::format({l});
        };
        if (std::string(c.what) == "another keyword") text = bind(other);
        if (std::string(c.what) == "a prefix of the keyword") text = bind(prefix);
        if (std::string(c.what) == "a name failing the rule") text = bind(lying);
        write_file(f.sidecar, text);
        NameResolver r;
        EXPECT_EQ(resolve_ok(r, f.cubin, c.keyword), c.expected);
        EXPECT_EQ(r.counters().scans, 1u);
        EXPECT_EQ(r.counters().sidecar_rejections, 1u);
        bool found = false;
        for (const auto &l : sc::read(f.sidecar).lines) {
            if (l.keyword == c.keyword) {
                found = true;
                EXPECT_EQ(l.name, c.expected);
            }
        }
        EXPECT_TRUE(found) << "sidecar not rewritten for the keyword";
        EXPECT_EQ(resolve_ok(r, f.cubin, c.keyword), c.expected);
        EXPECT_EQ(r.counters().scans, 1u) << "the rewritten sidecar did not hit";
        EXPECT_TRUE(temp_files_in(f.dir.path()).empty());
    }
}

TEST(NameResolver, ReplacedCubinNeverYieldsTheOldName) {
    Fixture f(sources::kTemplateOne);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "tmpl"), "_Z4tmplILi4EEvPf");
    f.put(kOtherInstantiation, kOld / 2);  // another instantiation, another mtime
    EXPECT_EQ(resolve_ok(r, f.cubin, "tmpl"), "_Z4tmplILi5EEvPf");
    EXPECT_EQ(r.counters().scans, 2u);
    EXPECT_EQ(resolve_ok(r, f.cubin, "tmpl"), "_Z4tmplILi5EEvPf");
    EXPECT_EQ(r.counters().scans, 2u);
}

// The hard case: the replacement has the same size and the same mtime (written within one
// timestamp tick). A young cubin's line carries a content hash, which catches it.
TEST(NameResolver, SameSizeSameMtimeReplacementOfAYoungCubin) {
    ASSERT_EQ(cubin_for(sources::kTemplateOne).size(), cubin_for(kOtherInstantiation).size());
    Fixture f(sources::kTemplateOne, 0);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "tmpl"), "_Z4tmplILi4EEvPf");
    ASSERT_TRUE(sc::read(f.sidecar).lines.at(0).content_hash.has_value());
    // The scan read the symbols alone; the hash is still of the whole file's bytes.
    EXPECT_EQ(*sc::read(f.sidecar).lines.at(0).content_hash, kjit::hash64(read_file(f.cubin)));
    const std::string saved = f.dir.file("saved-mtime");
    write_file(saved, "");
    copy_mtime(f.cubin, saved);
    write_file(f.cubin, cubin_for(kOtherInstantiation));
    copy_mtime(saved, f.cubin);
    EXPECT_EQ(resolve_ok(r, f.cubin, "tmpl"), "_Z4tmplILi5EEvPf");
    EXPECT_EQ(r.counters().scans, 2u);
}

TEST(NameResolver, YoungLineLosesItsHashOnceTheCubinAges) {
    // 1.8 s old: young now, old after a short sleep.
    Fixture f(sources::kPlain, NameResolver::kRacyWindowNs - 200'000'000);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "plain_kernel"), "_Z12plain_kernelPf");
    EXPECT_TRUE(sc::read(f.sidecar).lines.at(0).content_hash.has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(resolve_ok(r, f.cubin, "plain_kernel"), "_Z12plain_kernelPf");
    EXPECT_EQ(r.counters().sidecar_content_checks, 1u);
    EXPECT_FALSE(sc::read(f.sidecar).lines.at(0).content_hash.has_value());
    EXPECT_EQ(resolve_ok(r, f.cubin, "plain_kernel"), "_Z12plain_kernelPf");
    EXPECT_EQ(r.counters().scans, 1u);
    EXPECT_EQ(r.counters().sidecar_hits, 1u);
}

TEST(NameResolver, CopiedCacheKeepsHitting) {
    Fixture f(sources::kPrefixCollision);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    TempDir copies;
    const std::string script = "set -e; cd '" + copies.path() + "'; cp -a '" + f.dir.path() + "' cp_copy; " +
                               "tar -C '" + f.dir.path() + "' -cf archive.tar kernel.cubin kernel.cubin.name; " +
                               "mkdir tar_copy; tar -C tar_copy -xf archive.tar";
    ASSERT_EQ(std::system(script.c_str()), 0);
    for (const char *copy : {"cp_copy", "tar_copy"}) {
        SCOPED_TRACE(copy);
        NameResolver fresh;
        const std::string cubin = copies.file(std::string(copy) + "/kernel.cubin");
        struct stat st {};
        ASSERT_EQ(::stat(cubin.c_str(), &st), 0);
        // GNU tar keeps whole seconds: size and mtime no longer tell versions apart, so the
        // copy costs one rescan, which binds the line to the content; then it hits.
        const bool whole_seconds = st.st_mtim.tv_nsec == 0;
        EXPECT_EQ(resolve_ok(fresh, cubin, "gemm"), "_Z4gemmPf");
        EXPECT_EQ(fresh.counters().scans, whole_seconds ? 1u : 0u);
        EXPECT_EQ(fresh.counters().sidecar_hits, whole_seconds ? 0u : 1u);
        EXPECT_EQ(resolve_ok(fresh, cubin, "gemm"), "_Z4gemmPf");
        EXPECT_EQ(fresh.counters().scans, whole_seconds ? 1u : 0u);
    }
}

TEST(NameResolver, UnwritableSidecarDegradesToMemo) {
    Fixture f(sources::kPlain);
    ASSERT_EQ(::mkdir(f.sidecar.c_str(), 0755), 0);  // the sidecar path is a directory
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "plain_kernel"), "_Z12plain_kernelPf");
    EXPECT_EQ(r.counters().sidecar_write_failures, 1u);
    EXPECT_TRUE(temp_files_in(f.dir.path()).empty());
    EXPECT_EQ(resolve_ok(r, f.cubin, "plain_kernel"), "_Z12plain_kernelPf");
    EXPECT_EQ(r.counters().scans, 1u);
    EXPECT_EQ(r.counters().memo_hits, 1u);
    // The memo is keyed by the cubin's identity: a replaced cubin is scanned again.
    f.put(sources::kExternC, kOld / 2);
    EXPECT_EQ(resolve_ok(r, f.cubin, "c_kernel"), "c_kernel");
    EXPECT_FALSE(r.resolve(f.cubin, "plain_kernel").ok());
}

// A read-only folder, as a user who cannot write there sees it. Root ignores permission bits,
// so as root the check runs in a child that has dropped to `nobody`.
TEST(NameResolver, ReadOnlyFolderDegradesToScanningOnce) {
    // `nobody` must reach the folder: under /tmp, not a $TMPDIR that may be private
    // (libpam-tmpdir makes /tmp/user/0, mode 0700).
    const ScopedEnv reachable("TMPDIR", "/tmp");
    for (std::int64_t age : {kOld, std::int64_t{0}}) {  // an old cubin, and a young one
        SCOPED_TRACE(age == 0 ? "young cubin" : "old cubin");
        Fixture f(sources::kDeviceFunction, age);
        ASSERT_EQ(::chmod(f.dir.path().c_str(), 0555), 0);
        ASSERT_EQ(::chmod(f.cubin.c_str(), 0444), 0);
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(10);
            NameResolver r;
            for (int i = 0; i < 3; ++i) {
                auto name = r.resolve(f.cubin, "scale");
                if (!name.ok() || *name != "_Z5scalePf") ::_exit(11);
            }
            if (r.counters().scans != 1) ::_exit(12);
            if (r.counters().memo_hits != 2) ::_exit(13);
            if (r.counters().sidecar_write_failures != 1) ::_exit(14);
            ::_exit(0);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        EXPECT_EQ(WEXITSTATUS(status), 0) << "10: cannot drop privileges, 11: wrong name, 12: rescanned, "
                                             "13: memo not used, 14: write did not fail";
        EXPECT_EQ(list_dir(f.dir.path()), std::vector<std::string>{"kernel.cubin"});  // no sidecar, no temp
    }
}

TEST(NameResolver, BadInputNamesTheFile) {
    TempDir dir;
    NameResolver r;
    auto missing = r.resolve(dir.file("absent.cubin"), "gemm");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().code, Errc::io);
    EXPECT_NE(missing.error().message.find(dir.file("absent.cubin")), std::string::npos);
    auto directory = r.resolve(dir.path(), "gemm");
    ASSERT_FALSE(directory.ok());
    EXPECT_EQ(directory.error().code, Errc::io);
    Fixture f(sources::kPlain);
    auto not_found = r.resolve(f.cubin, "gemm");
    ASSERT_FALSE(not_found.ok());
    EXPECT_EQ(not_found.error().code, Errc::not_found);
    EXPECT_NE(not_found.error().message.find(f.cubin), std::string::npos);
    auto bad_keyword = r.resolve(f.cubin, "plain.*");
    ASSERT_FALSE(bad_keyword.ok());
    EXPECT_EQ(bad_keyword.error().code, Errc::invalid_argument);
    EXPECT_FALSE(exists(f.sidecar));  // failures write no sidecar
}

// ---------------------------------------------------------------------------------------------
// Item 8: whole-second mtimes. Release tarballs made with `tar --mtime=@T` give every cubin
// the same mtime (T.0), and two releases' cubins may have the same size.

namespace {

const char *const kGemmA = "__global__ void gemm_a(float *p) { p[threadIdx.x] = 1; }\n";

// Release 1's cubin, and release 2's: the same bytes with the kernel renamed gemm_b (the same
// length, so the same size), everywhere the name occurs.
std::string release_cubin(int release) {
    std::string bytes = cubin_for(kGemmA);
    if (release == 2) {
        const std::string from = "_Z6gemm_aPf", to = "_Z6gemm_bPf";
        for (std::size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + 1)) {
            bytes.replace(at, from.size(), to);
        }
    }
    return bytes;
}

std::int64_t an_hour_ago_sec() { return static_cast<std::int64_t>(std::time(nullptr)) - 3600; }

}  // namespace

TEST(NameResolverIntegrity, SameSizeWholeSecondReleasesAreToldApart) {
    ASSERT_EQ(release_cubin(1).size(), release_cubin(2).size());
    ASSERT_NE(release_cubin(1), release_cubin(2));
    const std::int64_t t = an_hour_ago_sec();
    // Release 1 resolved at T.<first_nsec>, then release 2 unpacked over it, stamped T.0: release
    // 1's line must not answer. T.0 twice is `tar --mtime=@T` releases; T.123456789 then T.0 is
    // a line with nanoseconds against a whole-second mtime.
    for (const std::uint32_t first_nsec : {0u, 123456789u}) {
        TempDir dir;
        const std::string cubin = dir.file("kernel.cubin");
        write_file(cubin, release_cubin(1));
        ASSERT_TRUE(set_mtime(cubin, t, first_nsec));
        NameResolver r;
        EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z6gemm_aPf");
        write_file(cubin, release_cubin(2));
        ASSERT_TRUE(set_mtime(cubin, t, 0));
        EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z6gemm_bPf")
            << "release 1's line answered release 2 (first mtime " << t << "." << first_nsec << ")";
    }
}

// Of its kind: the load path (the resolver against bytes in memory) follows the same rule.
TEST(NameResolverIntegrity, WholeSecondRuleHoldsForImagesInMemory) {
    const std::int64_t t = an_hour_ago_sec();
    TempDir dir;
    const std::string cubin = dir.file("kernel.cubin");
    write_file(cubin, release_cubin(1));
    ASSERT_TRUE(set_mtime(cubin, t, 0));
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z6gemm_aPf");
    struct stat st {};
    ASSERT_EQ(::stat(cubin.c_str(), &st), 0);
    const std::string image = release_cubin(2);  // what a reader read, same size and mtime
    auto name = r.resolve_image(cubin, "gemm", kjit::FileIdentity::from_stat(st), image);
    ASSERT_TRUE(name.ok()) << name.error().message;
    EXPECT_EQ(name->name, "_Z6gemm_bPf");
}

// A whole-second line is bound to the content for good: it keeps its hash after the racy
// window, and each hit checks it (no rescan).
TEST(NameResolverIntegrity, WholeSecondLinesKeepTheirContentHash) {
    TempDir dir;
    const std::string cubin = dir.file("kernel.cubin");
    write_file(cubin, release_cubin(1));
    ASSERT_TRUE(set_mtime(cubin, an_hour_ago_sec(), 0));
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z6gemm_aPf");
    for (int i = 0; i < 3; ++i) EXPECT_EQ(resolve_ok(r, cubin, "gemm"), "_Z6gemm_aPf");
    EXPECT_EQ(r.counters().scans, 1u);
    EXPECT_EQ(r.counters().sidecar_content_checks, 3u);
    const auto lines = sc::read(sc::path_for(cubin)).lines;
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_TRUE(lines[0].content_hash.has_value());
}

// `cp new.cubin a.cubin` rewrites the cubin in place (same inode, truncated, then written) while
// other threads resolve it: 0.3.0 mapped the file to scan it (and to hash a young one) and died
// of SIGBUS within seconds. Every answer must be a whole version's kernel or an error naming the
// file, never a signal, never a mix.
TEST(NameResolverRobustness, CubinRewrittenInPlaceWhileResolvedIsNeverASignal) {
    TempDir dir;
    const std::string cubin = dir.file("a.cubin");
    const std::string small = cubin_for(sources::numbered_gemm(0));
    // A larger version (its kernel among 300 others), so truncation cuts through mapped pages.
    std::string big_source =
        sources::numbered_gemm(1) + "template <int N> __global__ void filler(float *p) { p[threadIdx.x] = N; }\n";
    for (int i = 0; i < 300; ++i)
        big_source += "template __global__ void filler<" + std::to_string(i) + ">(float *);\n";
    const std::string big = cubin_for(big_source);
    const std::string names[2] = {sources::numbered_gemm_name(0), sources::numbered_gemm_name(1)};
    write_file(cubin, small);

    std::atomic<bool> stop{false};
    std::atomic<int> answers{0}, errors{0};
    std::vector<std::thread> readers;
    {
        InPlaceRewriter writer(cubin, {big, small});
        for (int t = 0; t < 2; ++t) {
            readers.emplace_back([&] {
                while (!stop.load()) {
                    auto name = NameResolver::instance().resolve(cubin, "gemm");
                    if (name) {
                        EXPECT_TRUE(*name == names[0] || *name == names[1]) << *name;
                        answers.fetch_add(1);
                    } else {
                        EXPECT_TRUE(name.error().code == Errc::io || name.error().code == Errc::bad_cubin)
                            << name.error().message;
                        EXPECT_NE(name.error().message.find(cubin), std::string::npos) << name.error().message;
                        errors.fetch_add(1);
                    }
                }
            });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        stop.store(true);
        for (auto &r : readers) r.join();
        writer.stop();
        EXPECT_GT(writer.rewrites(), 10u);
        // Once the writer is done, the file's kernel is the answer.
        EXPECT_EQ(resolve_ok(NameResolver::instance(), cubin, "gemm"), writer.last() == 0 ? names[1] : names[0]);
    }
    RecordProperty("answers", answers.load());
    RecordProperty("errors", errors.load());
}

namespace {

// Waits until every file in `paths` has a status change (ctime) older than the racy window:
// until then a resolver reads a sidecar at every hit.
void wait_until_settled(const std::vector<std::string> &paths) {
    std::int64_t newest = 0;
    for (const std::string &p : paths) {
        struct stat st {};
        ASSERT_EQ(::lstat(p.c_str(), &st), 0) << p;
        newest = std::max<std::int64_t>(newest, st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec);
    }
    for (;;) {
        struct timespec now {};
        clock_gettime(CLOCK_REALTIME, &now);
        const std::int64_t left =
            newest + NameResolver::kRacyWindowNs + 50'000'000 - (now.tv_sec * 1'000'000'000LL + now.tv_nsec);
        if (left <= 0) return;
        std::this_thread::sleep_for(std::chrono::nanoseconds(left));
    }
}

// A sidecar for the cubin as it is now, naming `name` for `keyword` (a name the keyword rule
// passes, though the cubin may not hold it: what a planted or hand-written line can say).
void write_sidecar_naming(const Fixture &f, const std::string &keyword, const std::string &name) {
    struct stat st {};
    ASSERT_EQ(::stat(f.cubin.c_str(), &st), 0);
    sc::Line line;
    line.keyword = keyword;
    line.name = name;
    line.cubin_size = static_cast<std::uint64_t>(st.st_size);
    line.mtime_sec = st.st_mtim.tv_sec;
    line.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
    ASSERT_TRUE(sc::write(f.sidecar, {line}).ok());
}

}  // namespace

// A repeat whose cubin and settled sidecar are unchanged since this thread read the sidecar
// is answered from what it read, proven by the two files' stat alone; a sidecar younger than
// the racy window (a same-tick rewrite in place would keep its stat) is read at every hit.
TEST(NameResolverRepeats, ASettledSidecarIsReadOncePerThread) {
    Fixture f(sources::kPrefixCollision);
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");            // scan, sidecar written
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm_fp16"), "_Z9gemm_fp16Pf");  // scan, its line added
    for (int i = 0; i < 3; ++i) EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(r.counters().settled_repeats, 0u) << "a young sidecar answered without being read";
    wait_until_settled({f.sidecar});
    for (int i = 0; i < 4; ++i) EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(r.counters().sidecar_hits, 7u);
    EXPECT_EQ(r.counters().settled_repeats, 3u);
    EXPECT_EQ(r.counters().scans, 2u);
    // Another keyword is its own repeat; another resolver has read nothing yet.
    for (int i = 0; i < 2; ++i) EXPECT_EQ(resolve_ok(r, f.cubin, "gemm_fp16"), "_Z9gemm_fp16Pf");
    EXPECT_EQ(r.counters().settled_repeats, 4u);
    NameResolver other;
    EXPECT_EQ(resolve_ok(other, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(other.counters().settled_repeats, 0u);
    // Another thread reads the sidecar once for itself.
    std::thread([&] {
        for (int i = 0; i < 2; ++i) EXPECT_EQ(resolve_ok(other, f.cubin, "gemm"), "_Z4gemmPf");
    }).join();
    EXPECT_EQ(other.counters().settled_repeats, 1u);
    // The cache's look-up expects no repeats (its hit memo answers them): nothing remembered.
    NameResolver cache_side;
    for (int i = 0; i < 2; ++i) {
        auto name = cache_side.resolve(f.cubin, "gemm", nullptr, NameResolver::Repeats::not_expected);
        ASSERT_TRUE(name.ok()) << name.error().message;
        EXPECT_EQ(*name, "_Z4gemmPf");
    }
    EXPECT_EQ(resolve_ok(cache_side, f.cubin, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(cache_side.counters().settled_repeats, 0u);
    EXPECT_EQ(cache_side.counters().sidecar_hits, 3u);
}

// Whatever happens to a settled sidecar or its cubin after a thread read it, the next answer
// is the files' as they are then, never the one remembered.
TEST(NameResolverRepeats, EveryChangeToTheFilesIsSeenByTheNextCall) {
    struct Case {
        const char *what;
        std::function<void(const Fixture &)> change;
        const char *expected;  // for keyword gemm after the change
    };
    const auto in_place = [](const Fixture &f) {
        // Same size, same mtime, one byte of the name changed: only the status change tells.
        struct stat before {};
        ASSERT_EQ(::stat(f.sidecar.c_str(), &before), 0);
        sc::Contents read = sc::read(f.sidecar);
        ASSERT_EQ(read.lines.size(), 1u);
        ASSERT_EQ(read.lines[0].name, "_Z4gemmPi");
        read.lines[0].name = "_Z4gemmPf";
        const std::string rewritten = sc::format(read.lines);
        ASSERT_EQ(rewritten.size(), static_cast<std::size_t>(before.st_size));
        const int fd = ::open(f.sidecar.c_str(), O_WRONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, rewritten.data(), rewritten.size(), 0), static_cast<ssize_t>(rewritten.size()));
        ::close(fd);
        struct timespec times[2] = {before.st_atim, before.st_mtim};
        ASSERT_EQ(::utimensat(AT_FDCWD, f.sidecar.c_str(), times, 0), 0);
    };
    const std::vector<Case> cases = {
        {"rewritten in place, mtime kept", in_place, "_Z4gemmPf"},
        {"replaced by a new file", [](const Fixture &f) { write_sidecar_naming(f, "gemm", "_Z4gemmPd"); }, "_Z4gemmPd"},
        {"replaced by a link to a copy",
         [](const Fixture &f) {
             const std::string copy = f.dir.file("copy.name");
             write_file(copy, read_file(f.sidecar));
             ASSERT_EQ(::unlink(f.sidecar.c_str()), 0);
             ASSERT_EQ(::symlink(copy.c_str(), f.sidecar.c_str()), 0);
         },
         "_Z4gemmPf"},  // a link is never followed: scanned
        {"given to another user", [](const Fixture &f) { ASSERT_EQ(::lchown(f.sidecar.c_str(), 12345, 12345), 0); },
         "_Z4gemmPf"},
        {"removed", [](const Fixture &f) { ASSERT_EQ(::unlink(f.sidecar.c_str()), 0); }, "_Z4gemmPf"},
        {"cubin replaced", [](const Fixture &f) { f.put(sources::kPlain, kOld / 2); }, nullptr},
        {"cubin touched", [](const Fixture &f) { set_age(f.cubin, kOld / 2); }, "_Z4gemmPf"},
    };
    std::vector<std::unique_ptr<Fixture>> fixtures;
    std::vector<std::string> sidecars;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        fixtures.push_back(std::make_unique<Fixture>(sources::kPrefixCollision));
        // The sidecar names a kernel the scan would not choose, so an answer tells which was used.
        write_sidecar_naming(*fixtures.back(), "gemm", "_Z4gemmPi");
        sidecars.push_back(fixtures.back()->sidecar);
    }
    wait_until_settled(sidecars);
    for (std::size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE(cases[i].what);
        const Fixture &f = *fixtures[i];
        NameResolver r;
        EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPi");
        EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPi");
        EXPECT_EQ(r.counters().settled_repeats, 1u);
        cases[i].change(f);
        auto name = r.resolve(f.cubin, "gemm");
        if (cases[i].expected) {
            ASSERT_TRUE(name.ok()) << name.error().message;
            EXPECT_EQ(*name, cases[i].expected);
        } else {
            EXPECT_FALSE(name.ok()) << "the replaced cubin has no gemm, yet the answer was " << *name;
        }
        EXPECT_EQ(r.counters().settled_repeats, 1u);
    }
}

// Many threads repeating on settled sidecars of many cubins, each thread with its own reads,
// one resolver: every answer right (run under TSan too).
TEST(NameResolverRepeats, ThreadsRepeatingOnSettledSidecars) {
    std::vector<std::unique_ptr<Fixture>> fixtures;
    std::vector<std::string> sidecars;
    NameResolver r;
    for (int i = 0; i < 4; ++i) {
        fixtures.push_back(std::make_unique<Fixture>(sources::kPrefixCollision));
        EXPECT_EQ(resolve_ok(r, fixtures.back()->cubin, "gemm"), "_Z4gemmPf");
        EXPECT_EQ(resolve_ok(r, fixtures.back()->cubin, "gemm_fp16"), "_Z9gemm_fp16Pf");
        sidecars.push_back(fixtures.back()->sidecar);
    }
    wait_until_settled(sidecars);
    constexpr int kThreads = 8, kRounds = 200;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kRounds; ++i) {
                const Fixture &f = *fixtures[static_cast<std::size_t>((t + i) % 4)];
                const bool fp16 = (i / 4) % 2 == 1;
                EXPECT_EQ(resolve_ok(r, f.cubin, fp16 ? "gemm_fp16" : "gemm"), fp16 ? "_Z9gemm_fp16Pf" : "_Z4gemmPf");
            }
        });
    }
    for (auto &t : threads) t.join();
    // Each thread reads each of the 8 (cubin, keyword) pairs once at most.
    EXPECT_GE(r.counters().settled_repeats, static_cast<std::uint64_t>(kThreads * (kRounds - 8)));
    EXPECT_EQ(r.counters().scans, 8u);
}

// A forked child starts from its parent's reads and still sees a change made after the fork.
TEST(NameResolverRepeats, AForkedChildSeesAChangeMadeAfterTheFork) {
    Fixture f(sources::kPrefixCollision);
    write_sidecar_naming(f, "gemm", "_Z4gemmPi");
    wait_until_settled({f.sidecar});
    NameResolver r;
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPi");
    EXPECT_EQ(resolve_ok(r, f.cubin, "gemm"), "_Z4gemmPi");
    ASSERT_EQ(r.counters().settled_repeats, 1u);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        auto same = r.resolve(f.cubin, "gemm");
        if (!same.ok() || *same != "_Z4gemmPi") ::_exit(11);
        if (r.counters().settled_repeats != 2) ::_exit(12);
        if (!sc::write(f.sidecar, {}).ok()) ::_exit(13);  // a sidecar with no line: scanned
        auto changed = r.resolve(f.cubin, "gemm");
        if (!changed.ok() || *changed != "_Z4gemmPf") ::_exit(14);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "11: wrong name, 12: no repeat in the child, 13: cannot write, "
                                         "14: the change was not seen";
}
