#include "cache/cache.hpp"
#include "api/defaults.hpp"
#include "cache/hit_memo.hpp"
#include "key/dependency_watch.hpp"

#include "batch/batch_compiler.hpp"
#include "compile/compiler.hpp"
#include "store/cache_entry.hpp"
#include "store/compile_lock.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"

#include "cubin/sidecar_store.hpp"
#include "damage_support.hpp"
#include "key/include_macros.hpp"
#include "key/include_scanner.hpp"
#include "resolve/name_resolver.hpp"
#include "test_support.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <thread>

using kjit::Errc;
using kjit::cache::Cache;
using kjit::key::Request;
using namespace kjit_test;

namespace {

const char *const kTemplated = R"(
template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }
template __global__ void gemm<128>(float *);
)";

Request base_request(const std::string &cache_dir) {
    Request r;
    r.source = kTemplated;
    r.keyword = "gemm";
    r.cache_dir = cache_dir;
    r.arch = "sm_90";
    return r;
}

std::string compile_ok(Cache &cache, const Request &r) {
    auto path = cache.compile(r);
    EXPECT_TRUE(path.ok()) << path.error().message;
    return path.ok() ? path->cubin : std::string();
}

// deps.txt read back as a request in `working_dir` (empty: none) with no anchors would.
kjit::Result<std::vector<kjit::key::include_scanner::Dependency>> parse_in(std::string_view text,
                                                                           const std::string &working_dir) {
    kjit::key::include_scanner::Search s;
    s.working_dir = working_dir;
    return kjit::key::include_scanner::parse(text, s);
}

// A search of these include folders only (no working directory).
kjit::key::include_scanner::Search in_folders(std::vector<std::string> dirs) {
    kjit::key::include_scanner::Search s;
    s.include_dirs = std::move(dirs);
    return s;
}

std::string entry_of(const std::string &cubin) { return cubin.substr(0, cubin.rfind('/')); }

// The key of `r` as prepare() computes it: with the NVRTC build in use, which prepare() sets.
std::string key_with_nvrtc(Request r) {
    r.nvrtc_identity = *kjit::compile::compiler::nvrtc_identity();
    return kjit::key::key_of(r);
}

// Every folder below `cache` named like an entry is complete; returns how many there are.
int complete_entries(const std::string &cache) {
    int n = 0;
    for (const std::string &shard : list_dir(cache)) {
        for (const std::string &e : list_dir(cache + "/" + shard)) {
            if (e[0] == '.') continue;                                    // a temp folder left by a killed writer
            if (kjit::store::cache_entry::is_variants_name(e)) continue;  // a source key's list of entries
            const std::string dir = cache + "/" + shard + "/" + e;
            EXPECT_TRUE(exists(dir + "/kernel.cubin")) << dir;
            EXPECT_TRUE(exists(dir + "/kernel.cubin.name")) << dir;
            EXPECT_TRUE(exists(dir + "/manifest.txt")) << dir;
            EXPECT_TRUE(exists(dir + "/source.cu")) << dir;
            ++n;
        }
    }
    return n;
}

}  // namespace

TEST(Cache, MissThenHitWithoutNvrtc) {
    TempDir dir;
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    const std::string path = compile_ok(cache, r);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
    EXPECT_EQ(path.rfind(dir.file("cache") + "/", 0), 0u) << path;
    EXPECT_EQ(path.substr(path.size() - 13), "/kernel.cubin");
    const std::string key = key_with_nvrtc(r);
    EXPECT_EQ(entry_of(path), dir.file("cache") + "/" + key.substr(0, 2) + "/" + key);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
    EXPECT_EQ(cache.counters().compile_hits, 3u);
    // The sidecar was published with the entry: the name is there without a scan.
    const auto sc = kjit::cubin::sidecar::read(kjit::cubin::sidecar::path_for(path));
    ASSERT_EQ(sc.lines.size(), 1u);
    EXPECT_EQ(sc.lines[0].name, "_Z4gemmILi128EEvPf");
    EXPECT_FALSE(sc.lines[0].content_hash.has_value());
    EXPECT_EQ(read_file(entry_of(path) + "/source.cu"), kTemplated);
    const std::string manifest = read_file(entry_of(path) + "/manifest.txt");
    for (const char *field : {"arch: sm_90", "name: _Z4gemmILi128EEvPf", "nvrtc: ", "created: "}) {
        EXPECT_NE(manifest.find(field), std::string::npos) << manifest;
    }
    struct stat st {};
    ASSERT_EQ(::stat(entry_of(path).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat(dir.file("cache").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
}

namespace {

// One request per input of the key, each differing from base_request("/c") in that input alone.
std::vector<Request> one_input_changed() {
    const Request base = base_request("/c");
    std::vector<Request> variants(13, base);
    variants[0].source += " ";
    variants[1].headers = {{"a.h", "#define A 1"}};
    variants[2].headers = {{"a.h", "#define A 2"}};
    variants[3].headers = {{"b.h", "#define A 1"}};
    variants[4].nvrtc_options = {"-DX=1"};
    variants[5].nvrtc_options = {"-DX=1", "-DY=1"};
    variants[6].nvrtc_options = {"-DY=1", "-DX=1"};
    variants[7].include_paths = {"/inc"};
    variants[8].arch = "sm_90a";
    variants[9].name_expression = "gemm<128>";
    variants[10].keyword = "gem";
    variants[11].nvrtc_identity = "13.0 libnvrtc.so.13 1";  // another NVRTC build
    variants[12].program_name = "gemm.cu";
    return variants;
}

}  // namespace

TEST(Cache, KeyChangesWithEachInputAlone) {
    const Request base = base_request("/c");
    const std::vector<Request> variants = one_input_changed();
    std::set<std::string> keys = {kjit::key::key_of(base)};
    for (const Request &v : variants) keys.insert(kjit::key::key_of(v));
    EXPECT_EQ(keys.size(), variants.size() + 1);
    // The cache folder is not an input: a copied cache keeps its keys.
    Request elsewhere = base;
    elsewhere.cache_dir = "/elsewhere";
    EXPECT_EQ(kjit::key::key_of(elsewhere), kjit::key::key_of(base));
    // An empty name expression differs from none; option boundaries are not ambiguous.
    Request empty_expr = base, joined = base, split = base;
    empty_expr.name_expression = "";
    joined.nvrtc_options = {"-DX=1 -DY=1"};
    split.nvrtc_options = {"-DX=1", "-DY=1"};
    EXPECT_NE(kjit::key::key_of(empty_expr), kjit::key::key_of(base));
    EXPECT_NE(kjit::key::key_of(joined), kjit::key::key_of(split));
}

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

TEST(Cache, KeyIsTheSameInAnotherProcess) {
    const Request r = base_request("/c");
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const std::string k = kjit::key::key_of(r);
        ::_exit(::write(fds[1], k.data(), k.size()) == static_cast<ssize_t>(k.size()) ? 0 : 1);
    }
    ::close(fds[1]);
    char buf[64] = {};
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_EQ(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0), kjit::key::key_of(r));
    EXPECT_EQ(kjit::key::key_of(r).size(), 32u);
}

TEST(Cache, CompileErrorCarriesTheLogAndPublishesNothing) {
    TempDir dir;
    Cache cache;
    Request r = base_request(dir.file("cache"));
    r.source = "__global__ void gemm(float *p) {\n  p[0] = undefined_thing;\n}\n";
    auto path = cache.compile(r);
    ASSERT_FALSE(path.ok());
    EXPECT_EQ(path.error().code, Errc::compile);
    EXPECT_NE(path.error().message.find("source.cu(2)"), std::string::npos) << path.error().message;
    EXPECT_NE(path.error().message.find("undefined_thing"), std::string::npos);
    // No entry and no shard: only the compile lock the miss took (compile_lock.hpp).
    EXPECT_EQ(list_dir(dir.file("cache")), std::vector<std::string>{kjit::store::cache_layout::kCompileLockFile});
}

TEST(Cache, BadArchOptionsAndNameExpressions) {
    TempDir dir;
    Cache cache;
    for (const char *arch : {"compute_90", "sm_9", "gfx90a", "sm_90x", ""}) {
        Request r = base_request(dir.file("cache"));
        r.arch = arch;
        auto path = cache.compile(r);
        ASSERT_FALSE(path.ok()) << arch;
        EXPECT_EQ(path.error().code, Errc::invalid_argument) << arch;
    }
    Request virt = base_request(dir.file("cache"));
    virt.arch = "compute_90";
    EXPECT_NE(cache.compile(virt).error().message.find("use sm_90"), std::string::npos);

    Request arch_option = base_request(dir.file("cache"));
    arch_option.nvrtc_options = {"-arch=sm_80"};
    EXPECT_EQ(cache.compile(arch_option).error().code, Errc::invalid_argument);

    Request bad_option = base_request(dir.file("cache"));
    bad_option.nvrtc_options = {"--no-such-option"};
    auto bad = cache.compile(bad_option);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().code, Errc::nvrtc);
    EXPECT_NE(bad.error().message.find("no-such-option"), std::string::npos) << bad.error().message;

    Request mismatch = base_request(dir.file("cache"));
    mismatch.keyword = "attention";
    mismatch.name_expression = "gemm<128>";
    auto m = cache.compile(mismatch);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error().code, Errc::invalid_argument);
    EXPECT_NE(m.error().message.find("gemm<128>"), std::string::npos);
    EXPECT_NE(m.error().message.find("attention"), std::string::npos);
    EXPECT_EQ(list_dir(dir.file("cache")), std::vector<std::string>{kjit::store::cache_layout::kCompileLockFile});
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);  // only the two that reached NVRTC
}

TEST(Cache, NameExpressionGivesTheLoweredName) {
    TempDir dir;
    Cache cache;
    Request r = base_request(dir.file("cache"));
    r.source = "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }\n";
    r.name_expression = "gemm<64>";
    const std::string path = compile_ok(cache, r);
    EXPECT_EQ(kjit::cubin::sidecar::read(kjit::cubin::sidecar::path_for(path)).lines.at(0).name, "_Z4gemmILi64EEvPf");
}

TEST(Cache, AmbiguousKeywordInTheFreshCubin) {
    TempDir dir;
    Cache cache;
    Request r = base_request(dir.file("cache"));
    r.source = sources::kTemplateSeveral;
    r.keyword = "tmpl";
    auto path = cache.compile(r);
    ASSERT_FALSE(path.ok());
    EXPECT_EQ(path.error().code, Errc::ambiguous);
    EXPECT_NE(path.error().message.find("_Z4tmplILi2EEvPf"), std::string::npos);
}

TEST(Cache, HeadersUnderIncludePathsEnterByContent) {
    TempDir dir;
    Cache cache;
    ::mkdir(dir.file("inc1").c_str(), 0755);
    ::mkdir(dir.file("inc2").c_str(), 0755);
    write_file(dir.file("inc2/config.h"), "#pragma once\n#include \"value.h\"\n");
    write_file(dir.file("inc2/value.h"), "#define VALUE 1.0f\n");
    Request r = base_request(dir.file("cache"));
    r.source = "#include \"config.h\"\n__global__ void gemm(float *p) { p[0] = VALUE; }\n";
    r.include_paths = {dir.file("inc1"), dir.file("inc2")};
    const std::string first = compile_ok(cache, r);
    EXPECT_EQ(compile_ok(cache, r), first);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);

    // Rewritten with the same text (a touch, a checkout): still a hit.
    write_file(dir.file("inc2/value.h"), "#define VALUE 1.0f\n");
    EXPECT_EQ(compile_ok(cache, r), first);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);

    // A nested header edited: a miss, and a new entry for the new text beside the first.
    write_file(dir.file("inc2/value.h"), "#define VALUE 2.0f\n");
    const std::string second = compile_ok(cache, r);
    EXPECT_NE(second, first);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    EXPECT_EQ(cache.counters().entries_rebuilt, 0u);
    EXPECT_EQ(compile_ok(cache, r), second);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    // Reverted: the first text's entry answers again, without NVRTC; and back again.
    write_file(dir.file("inc2/value.h"), "#define VALUE 1.0f\n");
    EXPECT_EQ(compile_ok(cache, r), first);
    write_file(dir.file("inc2/value.h"), "#define VALUE 2.0f\n");
    EXPECT_EQ(compile_ok(cache, r), second);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);

    // A header that now shadows one in a later include path: a miss. (inc1/value.h would not:
    // config.h's quoted include finds its own folder's value.h first, and the scan knows it.)
    write_file(dir.file("inc1/value.h"), "#define VALUE 3.0f\n");
    EXPECT_EQ(compile_ok(cache, r), second);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    write_file(dir.file("inc1/config.h"), "#define VALUE 3.0f\n");
    const std::string third = compile_ok(cache, r);
    EXPECT_NE(third, first);
    EXPECT_NE(third, second);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 3u);
    EXPECT_EQ(complete_entries(dir.file("cache")), 3);
    const std::string deps = read_file(entry_of(first) + "/deps.txt");
    // Recorded absent, relative to the first include folder (anchor 0), not by its path.
    EXPECT_NE(deps.find("- 11 :0:config.h\n"), std::string::npos) << deps;
    EXPECT_EQ(deps.find(dir.path()), std::string::npos) << deps;
}

TEST(Cache, DamagedEntriesAreRebuilt) {
    TempDir dir;
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    const std::string path = compile_ok(cache, r);
    ASSERT_EQ(::unlink(path.c_str()), 0);
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    std::string cubin = read_file(path);
    write_file(path, cubin.substr(0, cubin.size() / 3));  // truncated
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 3u);
    EXPECT_EQ(read_file(path), cubin);
    // A damaged sidecar alone costs a rescan, not a compile.
    write_file(kjit::cubin::sidecar::path_for(path), "garbage");
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 3u);
}

TEST(Cache, UncreatableCacheFolderIsIoError) {
    TempDir dir;
    write_file(dir.file("file"), "not a folder");
    Cache cache;
    auto path = cache.compile(base_request(dir.file("file/cache")));
    ASSERT_FALSE(path.ok());
    EXPECT_EQ(path.error().code, Errc::io);
    EXPECT_NE(path.error().message.find(dir.file("file")), std::string::npos) << path.error().message;
}

// Root ignores permission bits: the read-only checks run in a child that became `nobody`.
TEST(Cache, ReadOnlyCacheStillHits) {
    // `nobody` must reach the cache: under /tmp, not a $TMPDIR that may be private (libpam-tmpdir
    // makes /tmp/user/0, mode 0700); its compile's own temporary folders too.
    const ScopedEnv reachable("TMPDIR", "/tmp");
    TempDir dir;
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    const std::string path = compile_ok(cache, r);
    ASSERT_EQ(std::system(("chmod -R a+rX,a-w '" + dir.file("cache") + "'").c_str()), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(10);
        Cache child;
        auto hit = child.compile(r);
        if (!hit.ok() || hit->cubin != path || child.counters().nvrtc_compiles != 0) ::_exit(11);
        Request other = r;
        other.source += "\n// another key";
        auto miss = child.compile(other);
        if (miss.ok() || miss.error().code != Errc::io) ::_exit(12);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child exit " << WEXITSTATUS(status) << " (11: the hit failed, 12: the miss was not an I/O error)";
}

TEST(Cache, EightThreadsOnOneKeyRunNvrtcOnce) {
    TempDir dir;
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    std::vector<std::string> paths(8);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < 8) {
            }
            auto p = cache.compile(r);
            paths[static_cast<std::size_t>(t)] = p.ok() ? p->cubin : p.error().message;
        });
    }
    for (auto &th : threads) th.join();
    for (const auto &p : paths) EXPECT_EQ(p, paths[0]);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
    EXPECT_EQ(complete_entries(dir.file("cache")), 1);
}

// One request compiled at once into two cache folders is two compiles: a shared flight would
// hand one caller a path in the other's folder and leave its own cache empty.
TEST(Cache, SingleFlightIsPerCacheFolder) {
    TempDir dir;
    Cache cache;
    for (int round = 0; round < 3; ++round) {  // the two compiles overlap in every round
        const std::string folders[2] = {dir.file("a" + std::to_string(round)), dir.file("b" + std::to_string(round))};
        std::string paths[2];
        std::atomic<int> ready{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 2; ++t) {
            threads.emplace_back([&, t] {
                Request r = base_request(folders[t]);
                r.source += "// round " + std::to_string(round) + "\n";
                ready.fetch_add(1);
                while (ready.load() < 2) {
                }
                auto p = cache.compile(r);
                paths[t] = p.ok() ? p->cubin : p.error().message;
            });
        }
        for (auto &th : threads) th.join();
        for (int t = 0; t < 2; ++t) {
            EXPECT_EQ(paths[t].rfind(folders[t] + "/", 0), 0u) << "round " << round << ": " << paths[t];
            EXPECT_TRUE(exists(paths[t])) << paths[t];
            EXPECT_EQ(complete_entries(folders[t]), 1) << folders[t];
        }
    }
    EXPECT_EQ(cache.counters().nvrtc_compiles, 6u);
    EXPECT_EQ(cache.counters().compile_shared_waits, 0u);
}

TEST(Cache, EightThreadsOnEightKeysCompileInParallel) {
    TempDir dir;
    Cache cache;
    std::string body = "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }\n";
    for (int i = 0; i < 40; ++i)
        body += "template <int N> __global__ void other" + std::to_string(i) + "(float *p) { p[0] = N; }\n";
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            Request r = base_request(dir.file("cache"));
            r.source = body + "template __global__ void gemm<" + std::to_string(t) + ">(float *);\n";
            if (!cache.compile(r).ok()) failures.fetch_add(1);
        });
    }
    for (auto &th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 8u);
    EXPECT_GE(cache.counters().max_compiles_in_flight.load(), 2) << "compiles of different keys were serialized";
    EXPECT_EQ(complete_entries(dir.file("cache")), 8);
}

TEST(Cache, TwoProcessesOnOneKeyBothGetACompleteEntry) {
    TempDir dir;
    const Request r = base_request(dir.file("cache"));
    std::vector<pid_t> pids;
    for (int p = 0; p < 2; ++p) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            Cache child;
            auto path = child.compile(r);
            ::_exit(path.ok() && exists(path->cubin) && exists(path->cubin + ".name") ? 0 : 1);
        }
        pids.push_back(pid);
    }
    for (pid_t pid : pids) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT_EQ(complete_entries(dir.file("cache")), 1);
    Cache cache;
    compile_ok(cache, r);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 0u);
}

TEST(Cache, WriterKilledMidCompileLeavesAUsableCache) {
    TempDir dir;
    Request slow = base_request(dir.file("cache"));
    slow.source = "template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }\n";
    for (int i = 0; i < 300; ++i) slow.source += "template __global__ void gemm<" + std::to_string(i) + ">(float *);\n";
    slow.keyword = "gemm";
    slow.name_expression = "gemm<7>";
    for (int delay_ms : {50, 150, 400}) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            Cache child;
            (void)child.compile(slow);
            ::_exit(0);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
        complete_entries(dir.file("cache"));  // whatever is there is complete
    }
    Cache cache;
    const std::string path = compile_ok(cache, slow);
    EXPECT_EQ(kjit::cubin::sidecar::read(kjit::cubin::sidecar::path_for(path)).lines.at(0).name, "_Z4gemmILi7EEvPf");
    const auto runs = cache.counters().nvrtc_compiles.load();
    compile_ok(cache, slow);
    EXPECT_EQ(cache.counters().nvrtc_compiles.load(), runs);
    EXPECT_EQ(complete_entries(dir.file("cache")), 1);
}

TEST(Cache, DefaultsFromTheEnvironment) {
    const char *saved[] = {std::getenv("KJIT_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"),
                           std::getenv("KJIT_ARCH"), std::getenv("KJIT_LIBCUDA")};
    const std::string keep[] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : "",
                                saved[3] ? saved[3] : "", saved[4] ? saved[4] : ""};
    ::setenv("KJIT_CACHE_DIR", "/k", 1);
    ::setenv("XDG_CACHE_HOME", "/x", 1);
    ::setenv("HOME", "/h", 1);
    EXPECT_EQ(*kjit::api::defaults::cache_dir(), "/k");
    ::unsetenv("KJIT_CACHE_DIR");
    EXPECT_EQ(*kjit::api::defaults::cache_dir(), "/x/kjit");
    ::setenv("XDG_CACHE_HOME", "", 1);
    EXPECT_EQ(*kjit::api::defaults::cache_dir(), "/h/.cache/kjit");
    ::unsetenv("HOME");
    EXPECT_EQ(kjit::api::defaults::cache_dir().error().code, Errc::invalid_argument);
    ::setenv("KJIT_ARCH", "sm_100a", 1);
    EXPECT_EQ(*kjit::api::defaults::arch(), "sm_100a");
    ::unsetenv("KJIT_ARCH");
    // No GPU here (CI has none): the error says how to set the arch and what the driver said.
    auto arch = kjit::api::defaults::arch();
    if (!arch.ok()) {
        EXPECT_EQ(arch.error().code, Errc::invalid_argument);
        EXPECT_NE(arch.error().message.find("KJIT_ARCH"), std::string::npos);
        EXPECT_NE(arch.error().message.find("libcuda"), std::string::npos) << arch.error().message;
    }
    const char *names[] = {"KJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "KJIT_ARCH", "KJIT_LIBCUDA"};
    for (int i = 0; i < 5; ++i) {
        if (saved[i]) {
            ::setenv(names[i], keep[i].c_str(), 1);
        } else {
            ::unsetenv(names[i]);
        }
    }
}

TEST(IncludeScanner, FollowsIncludesAndRecordsShadowCandidates) {
    TempDir dir;
    ::mkdir(dir.file("a").c_str(), 0755);
    ::mkdir(dir.file("b").c_str(), 0755);
    ::mkdir(dir.file("b/sub").c_str(), 0755);
    write_file(dir.file("b/top.h"), "#include \"sub/inner.h\"\n#include <cuda_fp16.h>\n");
    write_file(dir.file("b/sub/inner.h"),
               "  #  include \"sibling.h\"\n// #include \"commented.h\" is still followed: a superset\n");
    write_file(dir.file("b/sub/sibling.h"), "#define S 1\n");
    const auto deps =
        kjit::key::include_scanner::scan("#include <top.h>\n#include \"mem.h\"\n", {{"mem.h", "#include \"top.h\"\n"}},
                                         in_folders({dir.file("a"), dir.file("b")}));
    ASSERT_TRUE(deps.ok()) << deps.error().message;
    std::set<std::string> present, absent;
    for (const auto &d : *deps) (d.exists ? present : absent).insert(d.path);
    EXPECT_EQ(present,
              (std::set<std::string>{dir.file("b/top.h"), dir.file("b/sub/inner.h"), dir.file("b/sub/sibling.h")}));
    EXPECT_TRUE(absent.count(dir.file("a/top.h")));
    EXPECT_FALSE(absent.count(dir.file("a/sub/inner.h")));  // quoted: the includer's folder comes first
    EXPECT_TRUE(kjit::key::include_scanner::still_current(*deps));
    const auto round = parse_in(kjit::key::include_scanner::format(*deps), "");
    ASSERT_TRUE(round.ok());
    EXPECT_EQ(round->size(), deps->size());
    EXPECT_TRUE(kjit::key::include_scanner::still_current(*round));
    write_file(dir.file("a/top.h"), "");
    EXPECT_FALSE(kjit::key::include_scanner::still_current(*deps));
}

// Headers that include each other with "../" (as some libraries do) are each recorded once:
// "a/../b/y.h" is "b/y.h" when a is a real folder. Before, every spelling was a file of its own
// and the spellings multiplied from header to header (the bench's first tree: 16,596 lines for
// 505 files). Through a folder that is a link, ".." is the target's parent: kept as written.
TEST(IncludeScanner, DotDotIsFoldedThroughRealFoldersOnly) {
    TempDir dir;
    for (const char *f : {"inc", "inc/a", "inc/b", "inc/c", "elsewhere", "elsewhere/real"})
        ::mkdir(dir.file(f).c_str(), 0755);
    write_file(dir.file("inc/a/x.h"), "#pragma once\n#include \"../b/y.h\"\n#include \"./../c/./z.h\"\n");
    write_file(dir.file("inc/b/y.h"), "#pragma once\n#include \"../a/x.h\"\n#include \"../c/z.h\"\n");
    write_file(dir.file("inc/c/z.h"), "#pragma once\n#include \"../a/x.h\"\n#include \"../b/y.h\"\n");
    const auto deps = kjit::key::include_scanner::scan("#include <a/x.h>\n", {}, in_folders({dir.file("inc")}));
    ASSERT_TRUE(deps.ok()) << deps.error().message;
    std::set<std::string> present;
    for (const auto &d : *deps) {
        if (d.exists) present.insert(d.path);
        EXPECT_EQ(d.path.find("/."), std::string::npos) << d.path;
    }
    EXPECT_EQ(present, (std::set<std::string>{dir.file("inc/a/x.h"), dir.file("inc/b/y.h"), dir.file("inc/c/z.h")}));

    // inc/link -> elsewhere/real: "link/../c/z.h" is elsewhere/c/z.h for NVRTC, not inc/c/z.h.
    ASSERT_EQ(::symlink(dir.file("elsewhere/real").c_str(), dir.file("inc/link").c_str()), 0);
    ::mkdir(dir.file("elsewhere/c").c_str(), 0755);
    write_file(dir.file("elsewhere/c/z.h"), "#define FROM_ELSEWHERE 1\n");
    const auto linked =
        kjit::key::include_scanner::scan("#include \"link/../c/z.h\"\n", {}, in_folders({dir.file("inc")}));
    ASSERT_TRUE(linked.ok()) << linked.error().message;
    std::set<std::string> found;
    for (const auto &d : *linked) {
        if (d.exists) found.insert(d.path);
    }
    EXPECT_EQ(found, (std::set<std::string>{dir.file("inc/link/../c/z.h")}));
}

// What a computed include cannot be followed to (a reserved name no scanned file defines, which
// NVRTC may predefine) still makes every file under the include folders a dependency.
TEST(IncludeScanner, ComputedIncludeThatCannotBeFollowedRecordsEveryFile) {
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/x.h"), "");
    write_file(dir.file("inc/y.h"), "");
    for (const char *source :
         {"#include __KJIT_NOWHERE_DEFINED\n", "#define H(x) <__kjit_nowhere/x>\n#include H(x.h)\n",
          "#if __has_include(__KJIT_NOWHERE_DEFINED)\n#endif\n"}) {
        const auto deps = kjit::key::include_scanner::scan(source, {}, in_folders({dir.file("inc")}));
        ASSERT_TRUE(deps.ok());
        EXPECT_EQ(deps->size(), 2u) << source;
    }
}

// Files reached through the working directory are recorded relative to it; what a computed
// include that cannot be followed may read through it cannot be listed, so the scan pins the
// list to that folder: current there, not in another folder with the same files.
TEST(IncludeScanner, AnUnfollowableComputedIncludePinsTheWorkingDirectory) {
    namespace is = kjit::key::include_scanner;
    TempDir dir;
    for (const char *d : {"a", "b"}) ::mkdir(dir.file(d).c_str(), 0755);
    char real[PATH_MAX];
    ASSERT_NE(::realpath(dir.file("a").c_str(), real), nullptr);
    is::Search search;
    search.working_dir = real;
    const auto followed = is::scan("#include \"x.h\"\n", {}, search);
    ASSERT_TRUE(followed.ok());
    ASSERT_EQ(followed->size(), 1u);
    EXPECT_EQ(followed->at(0).relative, "x.h");
    EXPECT_FALSE(followed->at(0).exists);
    EXPECT_FALSE(followed->at(0).pins_working_dir);
    auto pinned = is::scan("#include \"x.h\"\n#if __has_include(__KJIT_NOWHERE_DEFINED)\n#endif\n", {}, search);
    ASSERT_TRUE(pinned.ok());
    ASSERT_FALSE(pinned->empty());
    EXPECT_TRUE(pinned->back().pins_working_dir);
    EXPECT_EQ(pinned->back().path, std::string(real));
    char saved[PATH_MAX];
    ASSERT_NE(::getcwd(saved, sizeof saved), nullptr);
    ASSERT_EQ(::chdir(real), 0);
    const bool current_in_a = is::check(*pinned).current;
    ASSERT_EQ(::chdir(dir.file("b").c_str()), 0);
    const bool current_in_b = is::check(*pinned).current;
    std::vector<is::Dependency> unpinned = *followed;
    const bool followed_in_b = is::check(unpinned).current;
    ASSERT_EQ(::chdir(saved), 0);
    EXPECT_TRUE(current_in_a);
    EXPECT_FALSE(current_in_b) << "a pinned list was current in another folder";
    EXPECT_TRUE(followed_in_b) << "b/ has no x.h either: the same files";
}

// Computed includes are followed through every definition of their macros seen in the scanned
// files and the -D options: object-like and function-like macros, argument substitution inside
// <...>, stringizing through a helper, token pasting, CUTLASS's #if/#else pair (both
// definitions are candidates), a macro defined in another header, definitions on several lines
// (a backslash, a /* comment that goes on), and a computed include in
// `#if 0` whose macro is defined nowhere (NVRTC would fail on it if it were reached). Files no
// expansion names are not dependencies.
TEST(IncludeScanner, ComputedIncludesAreFollowedThroughTheirMacros) {
    namespace is = kjit::key::include_scanner;
    TempDir dir;
    for (const char *d : {"inc", "inc/cuda", "inc/cuda/std", "inc/sub", "inc/cutlass"})
        ::mkdir(dir.file(d).c_str(), 0755);
    for (const char *f :
         {"inc/cuda/std/cstdint", "inc/cuda/std/type_traits", "inc/cfg.h", "inc/unused.h", "inc/sub/deep.h",
          "inc/sub/other.h", "inc/pasted_7.h", "inc/from_option.h", "inc/angle_cfg.h", "inc/after_comment.h"}) {
        write_file(dir.file(f), "");
    }
    write_file(dir.file("inc/cutlass/cutlass.h"), "#if (__CUDACC_VER_MAJOR__ >= 13)\n"
                                                  "  #define CUDA_STD_HEADER(header) <cccl/cuda/std/header>\n"
                                                  "#else\n"
                                                  "  #define CUDA_STD_HEADER(header) <cuda/std/header>\n"
                                                  "#endif\n");
    write_file(dir.file("inc/macros.h"), "#define STR(x) #x\n#define XSTR(x) STR(x)\n"
                                         "#define PASTE(a, b) a ## b\n"
                                         "#define LONG_ONE(x) \\\n   <sub/x> /* a comment */\n");
    const std::string source = "#include <cutlass/cutlass.h>\n"
                               "#include \"macros.h\"\n"
                               "#define CFG \"cfg.h\"\n"
                               "#define ANGLE <angle_cfg.h> // trailing comment\n"
                               "#define DEEP sub/deep.h\n"
                               "#define MULTI /* a comment that goes\n   on */ <after_comment.h>\n"
                               "#include MULTI\n"
                               "#include CUDA_STD_HEADER(cstdint)\n"
                               "#include CFG\n"
                               "#  include   ANGLE\n"
                               "#include XSTR(DEEP)\n"
                               "#include XSTR(PASTE(pasted_, 7).h)\n"
                               "#include FROM_OPTION\n"
                               "#if __has_include(LONG_ONE(deep.h))\n#endif\n"
                               "#if 0\n#include NOT_DEFINED_ANYWHERE\n#include NOT_DEFINED_ANYWHERE(x)\n#endif\n";
    is::Search search = in_folders({dir.file("inc")});
    search.defines = {"FROM_OPTION=\"from_option.h\""};
    const auto deps = is::scan(source, {}, search);
    ASSERT_TRUE(deps.ok()) << deps.error().message;
    std::set<std::string> present, absent;
    for (const auto &d : *deps) (d.exists ? present : absent).insert(d.path);
    EXPECT_EQ(present, (std::set<std::string>{dir.file("inc/cutlass/cutlass.h"), dir.file("inc/macros.h"),
                                              dir.file("inc/cuda/std/cstdint"), dir.file("inc/cfg.h"),
                                              dir.file("inc/angle_cfg.h"), dir.file("inc/sub/deep.h"),
                                              dir.file("inc/pasted_7.h"), dir.file("inc/from_option.h"),
                                              dir.file("inc/after_comment.h")}));
    // CUTLASS's other definition is a candidate too: creating it would be read.
    EXPECT_TRUE(absent.count(dir.file("inc/cccl/cuda/std/cstdint"))) << absent.size();

    // -D in every spelling NVRTC accepts reaches the scan.
    const auto files = is::file_options(
        {"-DA=\"a.h\"", "-D=B", "-D C=1", "-D", "E(x)=<x>", "--define-macro=F", "--define-macro", "G=2", "-DH"});
    ASSERT_TRUE(files.ok()) << files.error().message;
    EXPECT_EQ(files->defines, (std::vector<std::string>{"A=\"a.h\"", "B", "C=1", "E(x)=<x>", "F", "G=2", "H"}));
}

// The expansion itself, on the shapes that must terminate or give up: self- and mutually
// recursive macros end (hide sets), variadic macros and stringized blanks, a hide set lifted
// for a closing parenthesis from outside the expansion, and too many combinations of
// definitions (past the budget: not followed, so the scanner records everything).
TEST(IncludeMacros, ExpansionsTerminateAndGiveUpPastTheirBudget) {
    namespace im = kjit::key::include_macros;
    auto names = [](const std::string &defines, const std::string &operand) {
        im::Table t;
        std::size_t pos = 0;
        while (pos < defines.size()) {
            const std::size_t end = defines.find('\n', pos);
            t.add_directive(defines.substr(pos, end - pos));
            pos = end == std::string::npos ? defines.size() : end + 1;
        }
        const im::Expansion e = im::header_names(operand, t);
        std::vector<std::string> out;
        if (!e.followed) out.push_back("(not followed)");
        for (const auto &h : e.names) out.push_back(h.quoted ? '"' + h.name + '"' : '<' + h.name + '>');
        return out;
    };
    using V = std::vector<std::string>;
    EXPECT_EQ(names(" A A", "A"), V{});
    EXPECT_EQ(names(" A B\n B A", "A"), V{});
    EXPECT_EQ(names(" A(x) A(x)", "A(<a.h>)"), V{});
    EXPECT_EQ(names(" V(...) <__VA_ARGS__>", "V(a.h)"), V{"<a.h>"});
    EXPECT_EQ(names(" V(x, ...) <x/__VA_ARGS__>", "V(dir, a.h)"), V{"<dir/a.h>"});
    EXPECT_EQ(names(" S(x) #x", "S(  a  b.h )"), V{"\"a b.h\""});
    EXPECT_EQ(names(" H(x) <x>", "H(a b.h)"), (V{"<a b.h>", "<ab.h>"}));
    // f(2)(9) as in the standard's example: g's ')' comes from outside f's expansion.
    EXPECT_EQ(names(" f(a) a*g\n g(a) f(a)\n N(x) S(x)\n S(x) #x", "N(f(2)(9))"),
              (V{"\"2*9*g\"", "\"2*f(9)\"", "\"2*g(9)\"", "\"f(2)(9)\""}));  // the first: the standard's answer
    EXPECT_EQ(names(" P(a, b) a ## b\n ab \"pasted.h\"", "P(a, b)"), (V{"\"pasted.h\""}));
    EXPECT_EQ(names("", "__FILE__"), V{"(not followed)"});
    EXPECT_EQ(names(" O(x) __VA_OPT__(x)", "O(a)"), V{"(not followed)"});
    std::string many, operand = "<";
    for (int i = 0; i < 12; ++i) {
        many += " M" + std::to_string(i) + " a\n M" + std::to_string(i) + " b\n";
        operand += "M" + std::to_string(i) + "/";
    }
    EXPECT_EQ(names(many, operand + "x.h>"), V{"(not followed)"});
    std::string nested = "I(";
    for (int i = 0; i < 5000; ++i) nested += "I(";
    nested += "a.h" + std::string(5001, ')') + ")";
    EXPECT_EQ(names(" I(x) x", nested), V{"(not followed)"});  // not a stack overflow
}

// Combinations of two arguments' alternatives are bounded while they are made, not after: 256
// alternatives of each (8 macros that may or may not be defined) made 65536 copies of a long
// replacement list (over 500 MB) before the budget said no.
TEST(IncludeMacros, ArgumentCombinationsStayWithinTheBudgetInMemory) {
    namespace im = kjit::key::include_macros;
    auto table = [](int macros, int filler) {
        im::Table t;
        for (int i = 0; i < macros; ++i) t.add_directive(" M" + std::to_string(i) + " a");
        std::string body = " F(x, y) <x";
        for (int i = 0; i < filler; ++i) body += " t";
        t.add_directive(body + " y>");
        return t;
    };
    auto operand = [](int macros) {
        std::string arg;
        for (int i = 0; i < macros; ++i) arg += " M" + std::to_string(i);
        return "F(" + arg + "," + arg + ")";
    };
    // 8 x 8 alternatives (and as many with F left undefined): within the budget.
    const im::Expansion within = im::header_names(operand(3), table(3, 2));
    EXPECT_TRUE(within.followed);
    EXPECT_EQ(within.names.size(), 2u * 64u);  // each with and without blanks
    struct rusage before {};
    ASSERT_EQ(::getrusage(RUSAGE_SELF, &before), 0);
    const im::Expansion past = im::header_names(operand(8), table(8, 120));
    struct rusage after {};
    ASSERT_EQ(::getrusage(RUSAGE_SELF, &after), 0);
    EXPECT_FALSE(past.followed);
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "peak resident set grew by KiB";
}

// The budget counts the tokens each step copies, not only the steps: a 3.6 KB operand whose
// 800 macros each expand to 1000 names of a function-like macro (never followed by '(') made
// every one of its 100000 steps copy a state of about 1800 tokens (6.6 s at -O2); now it gives
// up within a small part of that.
TEST(IncludeMacros, ExpansionsStayWithinTheBudgetInTime) {
    namespace im = kjit::key::include_macros;
    im::Table t;
    std::string c = " C", a = " A";
    for (int i = 0; i < 1000; ++i) c += " B";
    for (int i = 0; i < 800; ++i) a += " C";
    ASSERT_TRUE(t.add_directive(" B(x) x") && t.add_directive(c) && t.add_directive(a));
    struct rusage before {};
    ASSERT_EQ(::getrusage(RUSAGE_THREAD, &before), 0);
    const im::Expansion e = im::header_names("A", t);
    struct rusage after {};
    ASSERT_EQ(::getrusage(RUSAGE_THREAD, &after), 0);
    EXPECT_FALSE(e.followed);
    auto seconds = [](const struct rusage &r) {
        return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
               static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
    };
    EXPECT_LT(seconds(after) - seconds(before), 2.0) << "CPU seconds";
}

// The include and pre-include options in every spelling NVRTC 13 accepts (measured; see
// docs/cache-layout.md), and the ones it treats ambiguously, refused with the option named.
TEST(IncludeScanner, FileOptionsInEverySpelling) {
    namespace is = kjit::key::include_scanner;
    const auto files =
        is::file_options({"-Ia", "-I=b", "-I c ", "-I", " d", "--include-path=e ", "--include-path", "f", "-include",
                          "p.h", "-include=q.h", "--pre-include=r.h", "--pre-include", "s.h", "-DX=1", "-std=c++17"});
    ASSERT_TRUE(files.ok()) << files.error().message;
    EXPECT_EQ(files->include_dirs, (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
    EXPECT_EQ(files->pre_includes, (std::vector<std::string>{"p.h", "q.h", "r.h", "s.h"}));
    for (const std::vector<std::string> &bad : std::vector<std::vector<std::string>>{{"-I= x"},
                                                                                     {"--include-path= x"},
                                                                                     {"-I\tx"},
                                                                                     {"-I="},
                                                                                     {"-I   "},
                                                                                     {"-include= p.h"},
                                                                                     {"-include", "p.h "},
                                                                                     {"-DX", "-I"},
                                                                                     {"--include-path"},
                                                                                     {"-include"},
                                                                                     {"--pre-include"}}) {
        const auto r = is::file_options(bad);
        ASSERT_FALSE(r.ok()) << bad.back();
        EXPECT_EQ(r.error().code, Errc::invalid_argument);
        EXPECT_NE(r.error().message.find(bad.back().substr(0, 2)), std::string::npos) << r.error().message;
    }
}

// What puts the working directory in the key, from the texts and options alone.
TEST(IncludeScanner, ReachDecidesOnTheWorkingDirectory) {
    namespace is = kjit::key::include_scanner;
    auto reach = [&](const std::string &src, const is::MemoryHeaders &mem = {}, const is::FileOptions &o = {}) {
        return is::reach(src, "", mem, o);
    };
    EXPECT_FALSE(reach("__global__ void k() {}\n").reads_files);
    EXPECT_TRUE(reach("#include <a.h>\n").reads_files);
    EXPECT_FALSE(reach("#include <a.h>\n").uses_working_dir);
    EXPECT_TRUE(reach("#include \"a.h\"\n").uses_working_dir);
    EXPECT_FALSE(reach("#include \"/abs/a.h\"\n").uses_working_dir);
    EXPECT_FALSE(reach("#include \"m.h\"\n", {{"m.h", "#define M 1\n"}}).uses_working_dir);
    EXPECT_TRUE(reach("#include \"m.h\"\n", {{"m.h", "#include \"x.h\"\n"}}).uses_working_dir);
    EXPECT_TRUE(reach("#define H <a.h>\n#include H\n").uses_working_dir);
    EXPECT_TRUE(reach("#if __has_include(<x.h>)\n#endif\n").reads_files);
    is::FileOptions rel;
    rel.include_dirs = {"inc"};
    EXPECT_TRUE(reach("#include <a.h>\n", {}, rel).uses_working_dir);
    is::FileOptions pre;
    pre.pre_includes = {"/abs/p.h"};
    EXPECT_TRUE(reach("", {}, pre).reads_files);
    EXPECT_FALSE(reach("", {}, pre).uses_working_dir);
}

// A pre-included file: the working directory, then the include folders; __has_include operands
// and an in-memory header's quoted names (looked up in the working directory) are recorded.
TEST(IncludeScanner, PreIncludesHasIncludeAndMemoryHeaderFolders) {
    TempDir dir;
    for (const char *p : {"cwd", "cwd/sub", "inc"}) ::mkdir(dir.file(p).c_str(), 0755);
    write_file(dir.file("inc/p.h"), "#define P 1\n");
    write_file(dir.file("cwd/sub/near.h"), "");
    kjit::key::include_scanner::Search s;
    s.working_dir = dir.file("cwd");
    s.include_dirs = {dir.file("inc")};
    s.pre_includes = {"p.h"};
    const auto deps = kjit::key::include_scanner::scan("#if __has_include(\"probe.h\")\n#endif\n",
                                                       {{"sub/m.h", "#include \"near.h\"\n"}}, s);
    ASSERT_TRUE(deps.ok()) << deps.error().message;
    std::set<std::string> present, absent;
    for (const auto &d : *deps) (d.exists ? present : absent).insert(d.path);
    EXPECT_EQ(present, (std::set<std::string>{dir.file("inc/p.h"), dir.file("cwd/sub/near.h")}));
    EXPECT_TRUE(absent.count(dir.file("cwd/p.h")));      // would shadow inc/p.h
    EXPECT_TRUE(absent.count(dir.file("cwd/probe.h")));  // would change what __has_include says
    EXPECT_TRUE(absent.count(dir.file("inc/probe.h")));
}

// #include_next continues after the includer's folder, which the scanner does not track: every
// candidate counts, the found ones by content.
TEST(IncludeScanner, IncludeNextRecordsEveryCandidate) {
    TempDir dir;
    for (const char *p : {"a", "b", "c"}) ::mkdir(dir.file(p).c_str(), 0755);
    write_file(dir.file("a/w.h"), "#include_next <w.h>\n");
    write_file(dir.file("c/w.h"), "#define W 1\n");
    const auto deps = kjit::key::include_scanner::scan("#include <w.h>\n", {},
                                                       in_folders({dir.file("a"), dir.file("b"), dir.file("c")}));
    ASSERT_TRUE(deps.ok()) << deps.error().message;
    std::set<std::string> present;
    for (const auto &d : *deps) {
        if (d.exists) present.insert(d.path);
    }
    EXPECT_EQ(present, (std::set<std::string>{dir.file("a/w.h"), dir.file("c/w.h")}));
}

TEST(IncludeScanner, ParseRejectsDamage) {
    for (const char *bad : {"", "kjit-deps 2\n", "kjit-deps 1\n+ 1 2.000000003 00000000000000ab 50 short\n",
                            "kjit-deps 1\n? 3 abc\n", "kjit-deps 1\n- 3 abcd\n"}) {
        EXPECT_FALSE(parse_in(bad, "/w").ok()) << bad;
    }
    kjit::key::include_scanner::Dependency odd;
    odd.path = "/ path with\nnewline";
    odd.exists = false;
    const auto back = parse_in(kjit::key::include_scanner::format({odd}), "");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->at(0).path, odd.path);
    EXPECT_EQ(back->at(0).relative, "");
}

// A record of a file reached through the working directory is written relative to it and read
// back against the working directory of the reader; the one that pins an entry to its folder
// keeps its absolute path. A relative record with no working directory to take it against, and
// a relative pin, are damage.
TEST(IncludeScanner, RelativeRecordsRoundTripAgainstTheReadersWorkingDirectory) {
    using kjit::key::include_scanner::Dependency;
    Dependency rel;
    rel.path = "/a/proj/ odd\nname.h";
    rel.relative = " odd\nname.h";
    rel.size = 5;
    rel.content_hash = 0xab;
    Dependency up;
    up.path = "/a/x.h";
    up.relative = "../x.h";
    up.exists = false;
    Dependency pin;
    pin.path = "/a/proj";
    pin.pins_working_dir = true;
    const std::string text = kjit::key::include_scanner::format({rel, up, pin});
    EXPECT_EQ(text.find("/a/proj/"), std::string::npos) << text;
    const auto back = parse_in(text, "/elsewhere");
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->size(), 3u);
    EXPECT_EQ(back->at(0).path, "/elsewhere/ odd\nname.h");
    EXPECT_EQ(back->at(0).relative, rel.relative);
    EXPECT_EQ(back->at(0).content_hash, 0xabu);
    EXPECT_EQ(back->at(1).path, "/elsewhere/../x.h");
    EXPECT_FALSE(back->at(1).exists);
    EXPECT_TRUE(back->at(2).pins_working_dir);
    EXPECT_EQ(back->at(2).path, "/a/proj");
    EXPECT_FALSE(parse_in(text, "").ok());
    EXPECT_FALSE(parse_in("kjit-deps 1\n@ 4 proj\n", "/w").ok());
    EXPECT_FALSE(parse_in("kjit-deps 1\n- 0 \n", "/w").ok());
}

// Records relative to an anchor (an include folder the request names) are written ":N:rel" and
// read back under the reader's anchor N; a pin is read back with the reader's location of it,
// which check() compares; a working-directory record that starts with ':' is not taken for one.
// An anchor the reader does not have, or a malformed number, is damage.
TEST(IncludeScanner, AnchoredRecordsAndPinsRoundTripUnderTheReadersFolders) {
    using kjit::key::include_scanner::Dependency;
    Dependency tile;
    tile.path = "/opt/A/inc/tile.h";
    tile.relative = "tile.h";
    tile.anchor = 1;
    tile.size = 7;
    tile.content_hash = 0xcd;
    Dependency colon;
    colon.path = "/w/:1:odd.h";
    colon.relative = ":1:odd.h";
    colon.exists = false;
    Dependency pin;
    pin.pins_anchor = true;
    pin.anchor = 1;
    pin.relative = pin.path = "{base 0}/inc";
    const std::string text = kjit::key::include_scanner::format({tile, colon, pin});
    EXPECT_NE(text.find(" :1:tile.h\n"), std::string::npos) << text;
    EXPECT_NE(text.find(" ./:1:odd.h\n"), std::string::npos) << text;
    EXPECT_NE(text.find("@ 15 :1:{base 0}/inc\n"), std::string::npos) << text;
    kjit::key::include_scanner::Search reader;
    reader.working_dir = "/v";
    reader.anchors = {"/opt/B/other", "/opt/B/inc"};
    reader.base_dirs = {"/opt/B"};
    auto back = kjit::key::include_scanner::parse(text, reader);
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->size(), 3u);
    EXPECT_EQ(back->at(0).path, "/opt/B/inc/tile.h");
    EXPECT_EQ(back->at(0).anchor, 1);
    EXPECT_EQ(back->at(1).path, "/v/:1:odd.h");
    EXPECT_EQ(back->at(1).relative, ":1:odd.h");
    EXPECT_EQ(back->at(1).anchor, -1);
    EXPECT_TRUE(back->at(2).pins_anchor);
    EXPECT_EQ(back->at(2).path, "{base 0}/inc");  // where the reader's anchor 1 is
    EXPECT_EQ(kjit::key::include_scanner::format(*back), text);
    // The same entry read under another base folder: the pin does not hold.
    reader.base_dirs = {"/opt"};
    back = kjit::key::include_scanner::parse(text, reader);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->at(2).path, "{base 0}/B/inc");
    std::vector<Dependency> pins_only = {back->at(2)};
    EXPECT_FALSE(kjit::key::include_scanner::check(pins_only).current);
    reader.anchors.pop_back();
    EXPECT_FALSE(kjit::key::include_scanner::parse(text, reader).ok());
    EXPECT_FALSE(parse_in("kjit-deps 1\n- 4 :x:a\n", "/w").ok());
    EXPECT_FALSE(parse_in("kjit-deps 1\n@ 8 /w/a.h\n- 3 :0:\n", "/w").ok());
}

// Where a folder lies, as a pin and a keyed location record it: relative to the first base
// folder that holds it (component-wise), else as it is.
TEST(IncludeScanner, LocationsAreRelativeToTheFirstBaseFolderThatHoldsThem) {
    using kjit::key::include_scanner::location;
    EXPECT_EQ(location("/opt/A/inc", {}), "/opt/A/inc");
    EXPECT_EQ(location("/opt/A/inc", {"/opt/A"}), "{base 0}/inc");
    EXPECT_EQ(location("/opt/A", {"/opt/A"}), "{base 0}");
    EXPECT_EQ(location("/opt/AB/inc", {"/opt/A"}), "/opt/AB/inc");
    EXPECT_EQ(location("/opt/A/inc", {"/srv", "/opt"}), "{base 1}/A/inc");
    EXPECT_EQ(location("/opt/A/inc", {"/"}), "{base 0}/opt/A/inc");
}

// Which texts may name their own file: the identifiers, not longer ones; NVRTC's assert.
TEST(IncludeScanner, FileNamingIsToldByIdentifiers) {
    using kjit::key::include_scanner::file_naming;
    EXPECT_TRUE(file_naming("return __FILE__;").own_file);
    EXPECT_TRUE(file_naming("#define W __BASE_FILE__\n").own_file);
    EXPECT_TRUE(file_naming("x(__FILE_NAME__)").own_file);
    EXPECT_FALSE(file_naming("MY__FILE__X __FILE__S").own_file);
    EXPECT_TRUE(file_naming("assert(p);").uses_assert);
    EXPECT_FALSE(file_naming("static_assert(1); __assertfail(); assertion").uses_assert);
}

// KJIT_LOG_LEVEL=debug logs each miss and hit with its key (captured here from stderr).
TEST(Cache, DebugLogNamesMissesAndHitsWithTheirKeys) {
    TempDir dir;
    const std::string log_path = dir.file("stderr.txt");
    const int saved = ::dup(2);
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::dup2(fd, 2), 2);
    ::close(fd);
    const auto level = kjit::log().level();
    kjit::log().set_level(spdlog::level::debug);
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    compile_ok(cache, r);
    compile_ok(cache, r);
    kjit::log().flush();
    kjit::log().set_level(level);
    ::dup2(saved, 2);
    ::close(saved);
    const std::string text = read_file(log_path);
    const std::string key = key_with_nvrtc(r);
    EXPECT_NE(text.find("cache miss " + key), std::string::npos) << text;
    EXPECT_NE(text.find("compiled " + key), std::string::npos) << text;
    EXPECT_NE(text.find("cache hit " + key), std::string::npos) << text;
}

// A header edited within one timestamp tick keeps its size and mtime; a young header's content
// is therefore checked on every lookup.
TEST(IncludeScanner, YoungHeaderEditedWithSameSizeAndMtimeIsCaught) {
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/v.h"), "#define V 1\n");
    const auto deps = kjit::key::include_scanner::scan("#include \"v.h\"\n", {}, in_folders({dir.file("inc")}));
    ASSERT_TRUE(deps.ok());
    ASSERT_EQ(deps->size(), 1u);
    EXPECT_TRUE(deps->at(0).verify_content);
    const auto round = parse_in(kjit::key::include_scanner::format(*deps), "");
    ASSERT_TRUE(round.ok());
    EXPECT_TRUE(round->at(0).verify_content);
    struct stat st {};
    ASSERT_EQ(::stat(dir.file("inc/v.h").c_str(), &st), 0);
    write_file(dir.file("inc/v.h"), "#define V 2\n");
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("inc/v.h").c_str(), times, 0), 0);
    EXPECT_FALSE(kjit::key::include_scanner::still_current(*round));
    // An old header is trusted on size and mtime alone.
    write_file(dir.file("inc/old.h"), "#define O 1\n");
    struct timespec past[2];
    past[0].tv_sec = past[1].tv_sec = st.st_mtim.tv_sec - 3600;
    past[0].tv_nsec = past[1].tv_nsec = 0;
    ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("inc/old.h").c_str(), past, 0), 0);
    const auto old = kjit::key::include_scanner::scan("#include \"old.h\"\n", {}, in_folders({dir.file("inc")}));
    ASSERT_TRUE(old.ok());
    EXPECT_FALSE(old->at(0).verify_content);
}

// Once a young header has aged past the window, the next hit stores deps.txt without the mark.
TEST(Cache, YoungHeadersSettleAfterTheWindow) {
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    const std::string header = dir.file("inc/v.h");
    write_file(header, "#define V 1.0f\n");
    struct timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    struct timespec t[2];
    t[0] = t[1] = now;
    t[0].tv_sec = t[1].tv_sec = now.tv_sec - 1;  // young for about one more second
    ASSERT_EQ(::utimensat(AT_FDCWD, header.c_str(), t, 0), 0);
    Cache cache;
    Request r = base_request(dir.file("cache"));
    // Angle: only the include folder is searched, so v.h is deps.txt's first line (a quoted name
    // would first probe the working directory).
    r.source = "#include <v.h>\n__global__ void gemm(float *p) { p[0] = V; }\n";
    r.include_paths = {dir.file("inc")};
    const std::string path = compile_ok(cache, r);
    const std::string deps = entry_of(path) + "/deps.txt";
    EXPECT_EQ(read_file(deps).find("\n* "), std::string("kjit-deps 1").size()) << read_file(deps);
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(read_file(deps).find("\n* "), std::string::npos) << read_file(deps);
    EXPECT_NE(read_file(deps).find("\n+ "), std::string::npos);
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
    for (const auto &n : list_dir(entry_of(path))) EXPECT_EQ(n.find(".deps.tmp-"), std::string::npos) << n;
}

namespace {

// deps.txt's line for `path` (without the path), or "" if it has none.
// The line of `deps_file` that records `path` (absolute), written absolute or relative to the
// folder it was found through (":N:rel"), without its path.
std::string deps_line(const std::string &deps_file, const std::string &path) {
    std::istringstream lines(read_file(deps_file));
    for (std::string line; std::getline(lines, line);) {
        const std::size_t space = line.rfind(' ');
        if (space == std::string::npos) continue;
        std::string recorded = line.substr(space + 1);
        if (recorded.size() > 1 && recorded[0] == ':') recorded = "/" + recorded.substr(recorded.find(':', 1) + 1);
        if (path == recorded || (recorded[0] == '/' && path.size() > recorded.size() &&
                                 path.compare(path.size() - recorded.size(), recorded.size(), recorded) == 0)) {
            return line.substr(0, line.rfind(' ', space - 1));
        }
    }
    return "";
}

std::string mtime_text(std::time_t sec, long nsec) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%lld.%09ld", static_cast<long long>(sec), nsec);
    return buf;
}

}  // namespace

// A same-text rewrite of a header (`touch`, a reinstall, a checkout) changes its mtime: the
// first hit after it hashes the header, finds the same content, and records the new mtime, so
// later hits only stat it (before, every later hit hashed it again, forever). A touch that
// leaves it young is recorded as young ('*': hashed on every hit) until it has aged.
TEST(Cache, TouchedHeadersAreSettledAfterTheFirstHitThatHashesThem) {
    // Every hit checks deps.txt here, as in a new process: without the header watch, which would
    // prove the later hits without reading it (tests/key/dependency_watch_test.cpp).
    ScopedEnv no_watch("KJIT_WATCH_HEADERS", "0");
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    const std::string header = dir.file("inc/v.h");
    write_file(header, "#define V 1.0f\n");
    struct timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    ASSERT_TRUE(set_mtime(header, now.tv_sec - 100, 5));
    Cache cache;
    Request r = base_request(dir.file("cache"));
    r.source = "#include <v.h>\n__global__ void gemm(float *p) { p[0] = V; }\n";
    r.include_paths = {dir.file("inc")};
    const std::string path = compile_ok(cache, r);
    const std::string deps = entry_of(path) + "/deps.txt";
    EXPECT_NE(deps_line(deps, header).find("+ 15 " + mtime_text(now.tv_sec - 100, 5)), std::string::npos)
        << read_file(deps);
    auto hashes = [&] { return cache.counters().dependency_hashes.load(); };
    const auto start = hashes();
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start) << "an unchanged old header was hashed";

    // touch: same text, another mtime, old enough not to be young.
    ASSERT_TRUE(set_mtime(header, now.tv_sec - 50, 7));
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start + 1);
    EXPECT_NE(deps_line(deps, header).find("+ 15 " + mtime_text(now.tv_sec - 50, 7)), std::string::npos)
        << read_file(deps);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start + 1) << "the touched header was hashed again on later hits";

    // touch into the young window: recorded young (hashed on each hit), then settled once old.
    // Half a second before a fresh reading of the clock (the one above may be seconds old on a
    // slow sanitizer build): young at the next hit, old 2 s later.
    clock_gettime(CLOCK_REALTIME, &now);
    const std::int64_t young_ns = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec - 500'000'000;
    const std::int64_t young_sec = young_ns / 1'000'000'000;
    const long young_nsec = static_cast<long>(young_ns % 1'000'000'000);
    ASSERT_TRUE(set_mtime(header, young_sec, young_nsec));
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start + 2);
    EXPECT_NE(deps_line(deps, header).find("* 15 " + mtime_text(young_sec, young_nsec)), std::string::npos)
        << read_file(deps);
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    EXPECT_EQ(compile_ok(cache, r), path);  // hashed once more, now old: settled
    EXPECT_EQ(hashes(), start + 3);
    EXPECT_NE(deps_line(deps, header).find("+ 15 " + mtime_text(young_sec, young_nsec)), std::string::npos)
        << read_file(deps);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start + 3);

    // An edit is still a miss, whatever was settled before.
    write_file(header, "#define V 2.0f\n");
    ASSERT_TRUE(set_mtime(header, now.tv_sec - 50, 7));
    EXPECT_NE(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    for (const auto &n : list_dir(entry_of(path))) EXPECT_EQ(n.find(".deps.tmp-"), std::string::npos) << n;
}

TEST(Cache, PublishTempFolderNameTakenInAdvanceIsSkipped) {
    // A killed writer's temp folder whose pid and thread id came back (containers reuse pids),
    // or a planted one: the publish takes the next name. Names are taken from the next sequence
    // number this process draws on.
    TempDir dir;
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    const std::string key = key_with_nvrtc(r);
    const std::string shard = dir.file("cache") + "/" + key.substr(0, 2);
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(shard.c_str(), 0700), 0);
    std::vector<std::string> taken;
    const std::uint64_t next = kjit::unique_suffixes_drawn();
    for (std::uint64_t seq = next; seq < next + 5; ++seq) {
        taken.push_back(shard + "/.tmp-" + key + "-" + std::to_string(::getpid()) + "-" + std::to_string(::gettid()) +
                        "-" + std::to_string(seq));
        ASSERT_EQ(::mkdir(taken.back().c_str(), 0700), 0);
    }
    const std::string path = compile_ok(cache, r);
    EXPECT_FALSE(path.empty());
    for (const std::string &t : taken) EXPECT_TRUE(exists(t)) << "a folder not ours was used or removed: " << t;
    EXPECT_EQ(complete_entries(dir.file("cache")), 1);
    EXPECT_GE(kjit::unique_suffixes_drawn(), next + 6) << "the names taken were not where the publish looked";
}

// ---------------------------------------------------------------------------------------------
// Integrity: an entry serves the bytes that were published, and the name recorded for them.

namespace {

// The keyword rule alone picks _Z4gemmPf here (both are entries; its identifier is exactly
// "gemm"); the name expression picks the other kernel, which also passes the rule.
const char *const kTwoGemms = R"(
__global__ void gemm(float *p) { p[threadIdx.x] = 1; }
template <int N> __global__ void gemm_big(float *p) { p[threadIdx.x] = N; }
template __global__ void gemm_big<2>(float *);
)";
constexpr const char *kGemmBig = "_Z8gemm_bigILi2EEvPf";

// The name, or the error text (so a failure shows it instead of reading an empty result).
std::string resolved(kjit::resolve::NameResolver &r, const std::string &cubin, const char *keyword) {
    auto name = r.resolve(cubin, keyword);
    return name.ok() ? *name : "error: " + name.error().message;
}

Request two_gemms_request(const std::string &cache_dir) {
    Request r = base_request(cache_dir);
    r.source = kTwoGemms;
    r.name_expression = "gemm_big<2>";
    return r;
}

}  // namespace

// Item 5: a byte flipped in the cubin's code in place (same size, so only its mtime shows it):
// the next kjit_compile must rebuild, never answer with the damaged cubin.
TEST(CacheIntegrity, CubinDamagedInPlaceIsAMissThatRebuilds) {
    TempDir dir;
    Cache cache;
    const Request r = base_request(dir.file("cache"));
    const std::string path = compile_ok(cache, r);
    ASSERT_TRUE(flip_text_byte(path, /*keep_mtime=*/false));
    const std::string damaged = read_file(path);
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u) << "the damaged cubin was served as a hit";
    EXPECT_TRUE(read_file(path) != damaged) << "the damaged cubin is still there";
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);  // the rebuilt entry hits again
}

// Of its kind: resolving a damaged entry's cubin directly is a clear error, and its sidecar is
// not rewritten for the damaged bytes.
TEST(CacheIntegrity, ResolvingADamagedEntryIsBadCubinAndWritesNoSidecar) {
    TempDir dir;
    Cache cache;
    const std::string path = compile_ok(cache, base_request(dir.file("cache")));
    const std::string sidecar_before = read_file(kjit::cubin::sidecar::path_for(path));
    ASSERT_TRUE(flip_text_byte(path, /*keep_mtime=*/false));
    kjit::resolve::NameResolver resolver;
    auto name = resolver.resolve(path, "gemm");
    ASSERT_FALSE(name.ok()) << "resolved a damaged cache entry";
    EXPECT_EQ(name.error().code, Errc::bad_cubin);
    EXPECT_NE(name.error().message.find(path), std::string::npos) << name.error().message;
    EXPECT_NE(name.error().message.find("kjit cache verify --fix"), std::string::npos) << name.error().message;
    EXPECT_EQ(read_file(kjit::cubin::sidecar::path_for(path)), sidecar_before);
}

// Item 7: an entry built with a name expression keeps answering the recorded kernel after
// `cp -r` (new mtimes, so its sidecar is stale and the cubin is rescanned).
TEST(CacheIntegrity, NameExpressionEntrySurvivesCpR) {
    TempDir dir;
    Cache cache;
    const std::string path = compile_ok(cache, two_gemms_request(dir.file("cache")));
    kjit::resolve::NameResolver resolver;
    auto name = resolver.resolve(path, "gemm");
    ASSERT_TRUE(name.ok()) << name.error().message;
    ASSERT_EQ(*name, kGemmBig);
    const std::string script = "cp -r '" + dir.file("cache") + "' '" + dir.file("copy") + "'";
    ASSERT_EQ(std::system(script.c_str()), 0);
    const std::string copied = dir.file("copy") + path.substr(dir.file("cache").size());
    kjit::resolve::NameResolver fresh;
    auto copied_name = fresh.resolve(copied, "gemm");
    ASSERT_TRUE(copied_name.ok()) << copied_name.error().message;
    EXPECT_EQ(*copied_name, kGemmBig) << "the rescan re-chose by the keyword rule";
    EXPECT_EQ(fresh.counters().scans, 1u);
    // A compile through the copy hits and its name is still the recorded one.
    Cache other;
    EXPECT_EQ(compile_ok(other, two_gemms_request(dir.file("copy"))), copied);
    EXPECT_EQ(other.counters().nvrtc_compiles, 0u);
    EXPECT_EQ(resolved(fresh, copied, "gemm"), kGemmBig);
    // Another keyword follows the plain rule.
    EXPECT_EQ(resolved(fresh, copied, "gemm_big"), kGemmBig);
}

// Of its kind: any lost sidecar (deleted, torn after a crash, garbage) of a name-expression
// entry is rescanned the same way: the recorded name, never the rule's choice.
TEST(CacheIntegrity, NameExpressionEntryRescansToTheRecordedName) {
    TempDir dir;
    Cache cache;
    const std::string path = compile_ok(cache, two_gemms_request(dir.file("cache")));
    const std::string sidecar = kjit::cubin::sidecar::path_for(path);
    for (const char *damage : {"", "kjit-sidecar 1\ngemm 1 2.000000000 - _Z4gemmPf 0000", "garbage\n"}) {
        SCOPED_TRACE(damage);
        write_file(sidecar, damage);
        kjit::resolve::NameResolver resolver;
        auto name = resolver.resolve(path, "gemm");
        ASSERT_TRUE(name.ok()) << name.error().message;
        EXPECT_EQ(*name, kGemmBig);
    }
    ASSERT_EQ(::unlink(sidecar.c_str()), 0);
    kjit::resolve::NameResolver resolver;
    EXPECT_EQ(resolved(resolver, path, "gemm"), kGemmBig);
}

// Issue 19 item 2: every state of the headers a request was compiled against keeps its entry
// (ccache's direct mode: source key -> the keys of its results by the content of what they
// read), so a revert hits. The variants file only makes that fast: an entry it no longer lists is
// found by the miss's scan, without NVRTC, and listed again.
TEST(Cache, AVariantNoLongerListedIsFoundWithoutACompile) {
    TempDir dir;
    Cache cache;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/v.h"), "#define V 1.0f\n");
    Request r = base_request(dir.file("cache"));
    r.source = "#include <v.h>\n__global__ void gemm(float *p) { p[0] = V; }\n";
    r.include_paths = {dir.file("inc")};
    const std::string first = compile_ok(cache, r);
    write_file(dir.file("inc/v.h"), "#define V 2.0f\n");
    const std::string second = compile_ok(cache, r);
    ASSERT_NE(first, second);
    ASSERT_EQ(cache.counters().nvrtc_compiles, 2u);

    auto prepared = kjit::key::key_request(r);
    ASSERT_TRUE(prepared.ok());
    const std::string list = kjit::store::cache_entry::variants_file_for(prepared->request.cache_dir, prepared->key);
    const std::string first_key = entry_of(first).substr(entry_of(first).size() - 32);
    const std::string second_key = entry_of(second).substr(entry_of(second).size() - 32);
    EXPECT_EQ(kjit::store::cache_entry::read_variants(list), (std::vector<std::string>{second_key, first_key}));
    // The manifest says whose result it is.
    auto manifest = kjit::store::cache_entry::read_manifest(entry_of(first));
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    EXPECT_EQ(manifest->key, first_key);
    EXPECT_EQ(manifest->source_key, prepared->key);

    // The list lost (or written over by another process's at the same moment): still no compile.
    ASSERT_EQ(::unlink(list.c_str()), 0);
    write_file(dir.file("inc/v.h"), "#define V 1.0f\n");
    EXPECT_EQ(compile_ok(cache, r), first);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    EXPECT_EQ(kjit::store::cache_entry::read_variants(list), (std::vector<std::string>{first_key}));
    // A damaged list: the same.
    write_file(list, "kjit-variants 1\nnot a key\n\x01\x02garbage");
    write_file(dir.file("inc/v.h"), "#define V 2.0f\n");
    EXPECT_EQ(compile_ok(cache, r), second);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
    EXPECT_EQ(complete_entries(dir.file("cache")), 2);
}

// A variants file leads only to entries of its own request and of the files as they are now:
// each key it lists must come back from the entry's own header list and source key. Another
// request's list planted (or a copy gone wrong) costs a scan, never its cubin.
TEST(Cache, AVariantsFileLeadsOnlyToEntriesOfItsOwnRequest) {
    TempDir dir;
    Cache cache;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/v.h"), "#define V 1.0f\n");
    Request one = base_request(dir.file("cache"));
    one.source = "#include <v.h>\n__global__ void gemm(float *p) { p[0] = V; }\n";
    one.include_paths = {dir.file("inc")};
    Request two = one;
    two.source = "#include <v.h>\n__global__ void gemm(float *p) { p[1] = V; }\n";
    const std::string one_cubin = compile_ok(cache, one);
    const std::string two_cubin = compile_ok(cache, two);
    ASSERT_NE(one_cubin, two_cubin);
    auto p1 = kjit::key::key_request(one);
    auto p2 = kjit::key::key_request(two);
    ASSERT_TRUE(p1.ok() && p2.ok());
    const std::string list1 = kjit::store::cache_entry::variants_file_for(p1->request.cache_dir, p1->key);
    const std::string list2 = kjit::store::cache_entry::variants_file_for(p2->request.cache_dir, p2->key);
    write_file(list2, read_file(list1));
    EXPECT_EQ(compile_ok(cache, two), two_cubin);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);

    // An entry of this request whose header list was edited to look current is not served
    // either: its list no longer gives its key back.
    write_file(dir.file("inc/v.h"), "#define V 2.0f\n");
    const std::string two_new = compile_ok(cache, two);
    ASSERT_NE(two_new, two_cubin);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 3u);
    write_file(entry_of(two_cubin) + "/deps.txt", read_file(entry_of(two_new) + "/deps.txt"));
    write_file(list2, "kjit-variants 1\n" + entry_of(two_cubin).substr(entry_of(two_cubin).size() - 32) + "\n");
    EXPECT_EQ(compile_ok(cache, two), two_new);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 3u);
}

TEST(Cache, VariantsFileKeepsTheMostRecentKeys) {
    TempDir dir;
    const std::string list = dir.file("00/00000000000000000000000000000000.variants");
    ::mkdir(dir.file("00").c_str(), 0700);
    auto key = [](int i) {
        char k[33];
        std::snprintf(k, sizeof k, "%032x", i);
        return std::string(k);
    };
    EXPECT_TRUE(kjit::store::cache_entry::read_variants(list).empty());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(kjit::store::cache_entry::record_variant(list, key(i), false));
    std::vector<std::string> expected;
    for (int i = 19; i > 19 - static_cast<int>(kjit::store::cache_entry::kMaxVariants); --i) expected.push_back(key(i));
    EXPECT_EQ(kjit::store::cache_entry::read_variants(list), expected);
    // Found again: first, once.
    ASSERT_TRUE(kjit::store::cache_entry::record_variant(list, key(10), false));
    EXPECT_EQ(kjit::store::cache_entry::read_variants(list).front(), key(10));
    EXPECT_EQ(kjit::store::cache_entry::read_variants(list).size(), kjit::store::cache_entry::kMaxVariants);
    for (const std::string &n : list_dir(dir.file("00"))) EXPECT_EQ(n.find(".tmp-"), std::string::npos) << n;
    // Not through a link.
    ASSERT_EQ(::symlink(list.c_str(), dir.file("00/11111111111111111111111111111111.variants").c_str()), 0);
    EXPECT_TRUE(
        kjit::store::cache_entry::read_variants(dir.file("00/11111111111111111111111111111111.variants")).empty());
    EXPECT_TRUE(kjit::store::cache_entry::is_variants_name("00000000000000000000000000000000.variants"));
    EXPECT_FALSE(kjit::store::cache_entry::is_variants_name("0000000000000000000000000000000.variants"));
    EXPECT_FALSE(kjit::store::cache_entry::is_variants_name("00000000000000000000000000000000.variant"));
}

// "Check each dependency file once per call, not once per item" (issue 19): the items of a batch
// over one header tree share its files, and a batch of hits stats each once.
TEST(Cache, ABatchChecksEachDependencyFileOncePerCall) {
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/common.h"), "#pragma once\n#include \"v.h\"\n");
    write_file(dir.file("inc/v.h"), "#define V 1.0f\n");
    auto items = [&] {
        std::vector<kjit::Result<Request>> out;
        for (int i = 0; i < 6; ++i) {
            Request r = base_request(dir.file("cache"));
            r.source = "#include <common.h>\n__global__ void gemm(float *p) { p[" + std::to_string(i) + "] = V; }\n";
            r.include_paths = {dir.file("inc")};
            out.emplace_back(std::move(r));
        }
        return out;
    };
    kjit::batch::batch_compiler::Options options;
    options.workers = 2;
    std::vector<std::string> cubins;
    for (auto &result : kjit::batch::batch_compiler::compile(items(), options)) {
        ASSERT_TRUE(result.ok()) << result.error().message;
        cubins.push_back(result->cubin);
    }
    const std::string deps = read_file(entry_of(cubins[0]) + "/deps.txt");
    const auto files = static_cast<std::uint64_t>(std::count(deps.begin(), deps.end(), '\n') - 1);
    ASSERT_GE(files, 2u) << deps;
    auto &counters = Cache::instance().counters();
    const std::uint64_t stats_before = counters.dependency_stats.load();
    const std::uint64_t hits_before = counters.compile_hits.load();
    const auto again = kjit::batch::batch_compiler::compile(items(), options);
    for (std::size_t i = 0; i < again.size(); ++i) {
        ASSERT_TRUE(again[i].ok()) << again[i].error().message;
        EXPECT_EQ(again[i]->cubin, cubins[i]);
    }
    EXPECT_EQ(counters.compile_hits.load(), hits_before + 6);
    EXPECT_EQ(counters.dependency_stats.load() - stats_before, files) << deps;
    // An edit between two calls is seen by the next call.
    write_file(dir.file("inc/v.h"), "#define V 2.0f\n");
    const std::uint64_t runs_before = counters.nvrtc_compiles.load();
    const auto edited = kjit::batch::batch_compiler::compile(items(), options);
    for (std::size_t i = 0; i < edited.size(); ++i) {
        ASSERT_TRUE(edited[i].ok()) << edited[i].error().message;
        EXPECT_NE(edited[i]->cubin, cubins[i]);
    }
    EXPECT_EQ(counters.nvrtc_compiles.load(), runs_before + 6);
}

// ---------------------------------------------------------------------------------------------
// Entry stores: the cache asks its stores in order and offers every compile to each
// (entry_store.hpp), so that a new tier is a new store.

namespace {

// A tier that answers from a map of key -> cubin path and records what it is offered.
class RecordingStore final : public kjit::cache::EntryStore {
public:
    const char *name() const override { return "recording"; }
    kjit::Result<std::optional<kjit::cache::Found>> find(const kjit::key::KeyedRequest &keyed, kjit::cache::Call &,
                                                         kjit::key::include_scanner::FileMemo *,
                                                         std::string *) override {
        ++finds;
        if (auto it = answers.find(keyed.key); it != answers.end())
            return std::optional<kjit::cache::Found>(it->second);
        return std::optional<kjit::cache::Found>();
    }
    kjit::Result<std::optional<kjit::cache::Found>> find_variant(const kjit::key::KeyedRequest &, kjit::cache::Call &,
                                                                 const std::string &, std::string *) override {
        return std::optional<kjit::cache::Found>();
    }
    kjit::Result<std::optional<std::string>> publish(const kjit::key::KeyedRequest &keyed, kjit::cache::Call &,
                                                     const kjit::store::cache_entry::NewEntry &entry) override {
        offered.emplace_back(keyed.key, entry.manifest.name);
        cubin_sizes.push_back(entry.cubin.size());
        if (fail_publish) return kjit::Error{kjit::Errc::io, "the recording store is full"};
        return std::optional<std::string>();
    }

    std::map<std::string, kjit::cache::Found> answers;
    std::vector<std::pair<std::string, std::string>> offered;  // (key, kernel name)
    std::vector<std::size_t> cubin_sizes;
    int finds = 0;
    bool fail_publish = false;
};

}  // namespace

// The local store checks the cache folder (its owner, its parents, whether the caller can write
// it) once per call and hands the check down to the call's later steps: before, a miss asked for
// it at the look-up, the compile lock, the second look-up, the publish check, the publish and the
// sweep after it (6 times; 7 when it created the folder).
TEST(Cache, ACallChecksTheCacheFolderOnceAndAgainOnlyAfterCreatingIt) {
    TempDir dir;
    const Request first = base_request(dir.file("cache"));
    Request second = first;
    second.source += "\n// another kernel source, another key\n";
    Cache cache;
    std::uint64_t before = kjit::folder_trust::checks_on_this_thread();
    compile_ok(cache, first);  // a miss that creates the cache folder
    EXPECT_EQ(kjit::folder_trust::checks_on_this_thread() - before, 2u);
    before = kjit::folder_trust::checks_on_this_thread();
    compile_ok(cache, second);  // a miss in a folder that exists
    EXPECT_EQ(kjit::folder_trust::checks_on_this_thread() - before, 1u);
    Cache fresh;  // no hit memo: a hit through the store
    before = kjit::folder_trust::checks_on_this_thread();
    compile_ok(fresh, first);
    EXPECT_EQ(kjit::folder_trust::checks_on_this_thread() - before, 1u);
    EXPECT_EQ(fresh.counters().compile_hits.load(), 1u);
}

TEST(Cache, AMissIsAskedOfEveryStoreAndItsResultOfferedToEach) {
    TempDir dir;
    Cache cache;
    RecordingStore tier;
    cache.add_store(tier);
    const Request r = base_request(dir.file("cache"));
    const std::string path = compile_ok(cache, r);
    // Asked once by the lookup and once more by the build (another process may have published).
    EXPECT_EQ(tier.finds, 2);
    ASSERT_EQ(tier.offered.size(), 1u);
    EXPECT_EQ(tier.offered[0].first, kjit::key::key_request(r)->key);
    EXPECT_EQ(tier.offered[0].second, "_Z4gemmILi128EEvPf");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(tier.cubin_sizes[0], static_cast<std::size_t>(st.st_size));
    // The local store answers first: the tier is not asked on a hit there.
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(tier.finds, 2);
}

TEST(Cache, ALaterStoreAnswersWhatTheLocalOneMisses) {
    TempDir dir;
    Cache first;
    const Request r = base_request(dir.file("cache"));
    const std::string elsewhere = compile_ok(first, base_request(dir.file("other")));
    Cache cache;
    RecordingStore tier;
    tier.answers[kjit::key::key_request(r)->key] = kjit::cache::Found{elsewhere, "_Z4gemmILi128EEvPf"};
    cache.add_store(tier);
    EXPECT_EQ(compile_ok(cache, r), elsewhere);
    EXPECT_EQ(cache.counters().compile_hits, 1u);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 0u);
    EXPECT_TRUE(tier.offered.empty());
}

TEST(Cache, AStoreThatCannotTakeAnEntryCostsNoResult) {
    TempDir dir;
    Cache cache;
    RecordingStore tier;
    tier.fail_publish = true;
    cache.add_store(tier);
    const std::string path = compile_ok(cache, base_request(dir.file("cache")));
    EXPECT_TRUE(exists(path));
    EXPECT_EQ(tier.offered.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// One compile per key on the node (compile_lock.hpp).

TEST(CompileLock, ProcessesMissingOneKeyAtOnceCompileItOnce) {
    TempDir dir;
    const Request r = base_request(dir.file("cache"));
    constexpr int kProcesses = 4;
    int go[2], out[2];
    ASSERT_EQ(::pipe(go), 0);
    ASSERT_EQ(::pipe(out), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < kProcesses; ++i) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::close(go[1]);
            char c = 0;
            (void)::read(go[0], &c, 1);  // returns when the parent closes its end: all start at once
            Cache cache;
            auto path = cache.compile(r);
            const std::uint64_t runs = cache.counters().nvrtc_compiles.load();
            const bool written = ::write(out[1], &runs, sizeof runs) == static_cast<ssize_t>(sizeof runs);
            ::_exit(path.ok() && written ? 0 : 1);
        }
        children.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);
    ::close(out[1]);
    for (pid_t pid : children) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    std::uint64_t total = 0, runs = 0;
    int reports = 0;
    while (::read(out[0], &runs, sizeof runs) == static_cast<ssize_t>(sizeof runs)) {
        total += runs;
        ++reports;
    }
    ::close(out[0]);
    EXPECT_EQ(reports, kProcesses);
    EXPECT_EQ(total, 1u) << "every process that missed the key compiled it";
    EXPECT_EQ(complete_entries(dir.file("cache")), 1);
}

namespace {

// Holds the compile lock of `key` in `cache_dir` through a descriptor of its own, as another
// process would (OFD locks conflict between open file descriptions, even in one process).
struct ForeignHolder {
    kjit::LockFd fd;
    ForeignHolder(const std::string &cache_dir, const std::string &key)
        : fd(::open((cache_dir + "/" + kjit::store::cache_layout::kCompileLockFile).c_str(),
                    O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = static_cast<off_t>(std::strtoull(key.substr(0, 15).c_str(), nullptr, 16));
        fl.l_len = 1;
        locked = fd.valid() && ::fcntl(fd.get(), F_OFD_SETLK, &fl) == 0;
    }
    bool locked = false;
};

}  // namespace

TEST(CompileLock, AHolderThatTakesTooLongIsNotWaitedOnForEver) {
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    Request r = base_request(dir.file("cache"));
    r.compile_wait = std::chrono::milliseconds(200);
    ForeignHolder holder(dir.file("cache"), kjit::key::key_request(r)->key);
    ASSERT_TRUE(holder.locked);
    Cache cache;
    const std::string path = compile_ok(cache, r);
    EXPECT_FALSE(path.empty());
    EXPECT_EQ(cache.counters().compile_lock_waits, 1u);
    EXPECT_EQ(cache.counters().compile_lock_timeouts, 1u);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
}

TEST(CompileLock, OtherKeysAndAReleasedLockAreNotWaitedFor) {
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    Request r = base_request(dir.file("cache"));
    r.compile_wait = std::chrono::milliseconds(60'000);
    Request other = r;
    other.source += "\n// another key\n";
    {
        ForeignHolder holder(dir.file("cache"), kjit::key::key_request(other)->key);
        ASSERT_TRUE(holder.locked);
        Cache cache;
        compile_ok(cache, r);
        EXPECT_EQ(cache.counters().compile_lock_waits, 0u) << "a lock of another key was waited for";
    }
    // The holder closed its descriptor (as a process that dies does): the key is free.
    Cache cache;
    compile_ok(cache, other);
    EXPECT_EQ(cache.counters().compile_lock_waits, 0u);
}

TEST(CompileLock, ReleasingTheLockDoesNotWaitForOtherCopiesOfItsDescriptor) {
    // A child forked between the lock file's open and the descriptor's registration keeps a copy
    // of it that the fork handler does not close: the release must not depend on every copy
    // being closed. Here the copy is a dup() of the held descriptor, found in /proc/self/fd.
    TempDir dir;
    ASSERT_EQ(::mkdir(dir.file("cache").c_str(), 0700), 0);
    auto folder = kjit::folder_trust::check_cache_folder_now(dir.file("cache"));
    ASSERT_TRUE(folder.ok()) << folder.error().message;
    const std::string key(32, 'a');
    const std::string lock_path = dir.file("cache") + "/" + kjit::store::cache_layout::kCompileLockFile;
    kjit::store::compile_lock::Waited waited;
    auto held =
        kjit::store::compile_lock::acquire(dir.file("cache"), *folder, key, std::chrono::milliseconds(0), &waited);
    ASSERT_TRUE(held.has_value());
    const int copy = dup_of_descriptor_on(lock_path);
    ASSERT_GE(copy, 0) << "the held lock file's descriptor was not found";
    ForeignHolder blocked(dir.file("cache"), key);
    EXPECT_FALSE(blocked.locked) << "the lock was not held";
    held.reset();
    ForeignHolder after(dir.file("cache"), key);
    EXPECT_TRUE(after.locked) << "the lock lived on in another copy of its descriptor";
    ::close(copy);
}

// ---------------------------------------------------------------------------------------------
// The hit memo (hit_memo.hpp): a repeat answered from memory, never past a change that could
// alter the answer. Each test gives its cache a long revalidation interval, so that what it
// checks never depends on the machine's speed: only the checks at each repeat can stop the memo.

namespace {

// A cache whose memo serves for a minute.
struct MemoCache {
    Cache cache;
    MemoCache() { cache.hit_memo().set_revalidate_ns(60'000'000'000); }
    std::uint64_t answers() const { return cache.counters().memo_answers.load(); }
};

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
