#include "cache/cache.hpp"
#include "api/defaults.hpp"

#include "batch/compiler.hpp"
#include "compile/compiler.hpp"
#include "store/cache_entry.hpp"
#include "store/cache_layout.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"

#include "cache_test_support.hpp"
#include "cubin/sidecar.hpp"
#include "damage_support.hpp"
#include "key/include_scanner.hpp"
#include "resolve/name_resolver.hpp"
#include "test_support.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

using kjit::Errc;
using kjit::cache::Cache;
using kjit::key::Request;
using namespace kjit_test;

namespace {

std::string entry_of(const std::string &cubin) { return cubin.substr(0, cubin.rfind('/')); }

// A kernel whose value is the macro `macro` of `<header>`, found through the include folder `inc`
// (angle brackets: only the include folder is searched, so the header is deps.txt's first line).
Request through_include(const std::string &cache, const std::string &inc, const std::string &header,
                        const std::string &macro) {
    Request r = base_request(cache);
    r.source = "#include <" + header + ">\n__global__ void gemm(float *p) { p[0] = " + macro + "; }\n";
    r.include_paths = {inc};
    return r;
}

// The key of `r` as prepare() computes it: with the NVRTC build in use, which prepare() sets.
std::string key_with_nvrtc(Request r) {
    r.nvrtc_identity = *kjit::compile::compiler::nvrtc_identity();
    return kjit::key::key_of(r);
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
    // Angle: only the include folder is searched, so v.h is deps.txt's first line (a quoted name
    // would first probe the working directory).
    Request r = through_include(dir.file("cache"), dir.file("inc"), "v.h", "V");
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
    // Named by its absolute path: size and mtime stand for the content only of a record's own
    // file (a record relative to an include folder is compared by content at every full check,
    // as it may be checked against another install's file).
    r.source = "#include \"" + header + "\"\n__global__ void gemm(float *p) { p[0] = V; }\n";
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

// Headers found through an include folder are recorded relative to it, so that the entry serves
// the same tree installed elsewhere, where a file of the same size and mtime may hold other text:
// there they are compared by content. Where the entry was made (origin.txt), size and mtime
// stand for the content as for a header named by its absolute path: a new process's first hit
// of a kernel over ~640 CCCL headers read and hashed every one of them (0.13, 0.14).
TEST(Cache, HeadersFoundThroughAnIncludeFolderAreHashedOnlyAwayFromWhereTheyWereProven) {
    ScopedEnv no_watch("KJIT_WATCH_HEADERS", "0");  // every hit checks deps.txt, as a new process does
    TempDir dir;
    for (const char *inc : {"inc", "moved"}) {
        ::mkdir(dir.file(inc).c_str(), 0755);
        write_file(dir.file(std::string(inc) + "/v.h"), "#include <w.h>\n#define V W\n");
        write_file(dir.file(std::string(inc) + "/w.h"), "#define W 1.0f\n");
    }
    struct timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    for (const char *f : {"inc/v.h", "inc/w.h"}) ASSERT_TRUE(set_mtime(dir.file(f), now.tv_sec - 100, 5));
    for (const char *f : {"moved/v.h", "moved/w.h"}) ASSERT_TRUE(set_mtime(dir.file(f), now.tv_sec - 90, 5));
    Cache cache;
    Request r = through_include(dir.file("cache"), dir.file("inc"), "v.h", "V");
    const std::string path = compile_ok(cache, r);
    const std::string origin = entry_of(path) + "/origin.txt";
    EXPECT_TRUE(exists(origin)) << "the entry made here does not say where its records were proven";
    auto hashes = [&] { return cache.counters().dependency_hashes.load(); };
    const auto start = hashes();
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start) << "headers were hashed where the entry was made";

    // The same tree elsewhere: compared by content once, then stat'ed only.
    Request moved = r;
    moved.include_paths = {dir.file("moved")};
    EXPECT_EQ(compile_ok(cache, moved), path);
    EXPECT_EQ(hashes(), start + 2);
    EXPECT_EQ(compile_ok(cache, moved), path);
    EXPECT_EQ(hashes(), start + 2) << "the moved tree was hashed again after it was proven";
    // And back: the first place is compared by content again, once.
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start + 4);
    EXPECT_EQ(compile_ok(cache, r), path);
    EXPECT_EQ(hashes(), start + 4);
    EXPECT_EQ(cache.counters().nvrtc_compiles, 1u);
    for (const auto &n : list_dir(entry_of(path))) EXPECT_EQ(n.find(".deps.tmp-"), std::string::npos) << n;
}

// origin.txt vouches for the header list it was written for, no other. An older libkjit (which
// knows no origin file) checking the entry under another prefix, where w.h has another mtime,
// rewrites deps.txt with that mtime and leaves origin.txt. Back here w.h now has that very size
// and mtime, and other text: the stale origin must not let size and mtime stand for it.
TEST(Cache, AnOriginWrittenForAnotherHeaderListIsNotTrusted) {
    ScopedEnv no_watch("KJIT_WATCH_HEADERS", "0");
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/w.h"), "#define W 1.0f\n");
    struct timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    ASSERT_TRUE(set_mtime(dir.file("inc/w.h"), now.tv_sec - 100, 5));
    Cache cache;
    Request r = through_include(dir.file("cache"), dir.file("inc"), "w.h", "W");
    const std::string path = compile_ok(cache, r);
    const std::string deps = entry_of(path) + "/deps.txt";
    ASSERT_TRUE(exists(entry_of(path) + "/origin.txt"));
    const std::string old_mtime = mtime_text(now.tv_sec - 100, 5), new_mtime = mtime_text(now.tv_sec - 60, 7);
    std::string text = read_file(deps);
    const auto at = text.find(" " + old_mtime + " ");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at + 1, old_mtime.size(), new_mtime);
    write_file(deps, text);                               // as the older reader elsewhere stored it
    write_file(dir.file("inc/w.h"), "#define W 2.0f\n");  // same size
    ASSERT_TRUE(set_mtime(dir.file("inc/w.h"), now.tv_sec - 60, 7));
    const std::string again = compile_ok(cache, r);
    EXPECT_NE(again, path) << "the entry of the old text answered the edited header";
    EXPECT_EQ(cache.counters().nvrtc_compiles, 2u);
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
    Request r = through_include(dir.file("cache"), dir.file("inc"), "v.h", "V");
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
    kjit::batch::compiler::Options options;
    options.workers = 2;
    std::vector<std::string> cubins;
    for (auto &result : kjit::batch::compiler::compile(items(), options)) {
        ASSERT_TRUE(result.ok()) << result.error().message;
        cubins.push_back(result->cubin);
    }
    const std::string deps = read_file(entry_of(cubins[0]) + "/deps.txt");
    const auto files = static_cast<std::uint64_t>(std::count(deps.begin(), deps.end(), '\n') - 1);
    ASSERT_GE(files, 2u) << deps;
    auto &counters = Cache::instance().counters();
    const std::uint64_t stats_before = counters.dependency_stats.load();
    const std::uint64_t hits_before = counters.compile_hits.load();
    const auto again = kjit::batch::compiler::compile(items(), options);
    for (std::size_t i = 0; i < again.size(); ++i) {
        ASSERT_TRUE(again[i].ok()) << again[i].error().message;
        EXPECT_EQ(again[i]->cubin, cubins[i]);
    }
    EXPECT_EQ(counters.compile_hits.load(), hits_before + 6);
    EXPECT_EQ(counters.dependency_stats.load() - stats_before, files) << deps;
    // An edit between two calls is seen by the next call.
    write_file(dir.file("inc/v.h"), "#define V 2.0f\n");
    const std::uint64_t runs_before = counters.nvrtc_compiles.load();
    const auto edited = kjit::batch::compiler::compile(items(), options);
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
class RecordingStore final : public kjit::storage::EntryStore {
public:
    const char *name() const override { return "recording"; }
    kjit::Result<std::optional<kjit::storage::Found>> find(const kjit::key::KeyedRequest &keyed, kjit::storage::Call &,
                                                           kjit::key::include_scanner::FileMemo *,
                                                           std::string *) override {
        ++finds;
        if (auto it = answers.find(keyed.key); it != answers.end())
            return std::optional<kjit::storage::Found>(it->second);
        return std::optional<kjit::storage::Found>();
    }
    kjit::Result<std::optional<kjit::storage::Found>> find_variant(const kjit::key::KeyedRequest &,
                                                                   kjit::storage::Call &, const std::string &,
                                                                   std::string *) override {
        return std::optional<kjit::storage::Found>();
    }
    kjit::Result<std::optional<std::string>> publish(const kjit::key::KeyedRequest &keyed, kjit::storage::Call &,
                                                     const kjit::store::cache_entry::NewEntry &entry) override {
        offered.emplace_back(keyed.key, entry.manifest.name);
        cubin_sizes.push_back(entry.cubin.size());
        if (fail_publish) return kjit::Error{kjit::Errc::io, "the recording store is full"};
        return std::optional<std::string>();
    }

    std::map<std::string, kjit::storage::Found> answers;
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
    tier.answers[kjit::key::key_request(r)->key] = kjit::storage::Found{elsewhere, "_Z4gemmILi128EEvPf"};
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
