// The public C ABI, through libkjit.so, as a user links it.
#include "kjit/kjit.h"

#include "c_api_support.hpp"
#include "cubin/sidecar.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace kjit_test;
namespace sc = kjit::cubin::sidecar;

namespace {

// kjit_resolve_name into a std::string, checking the status.
std::string resolve(const std::string &cubin, const char *keyword, kjit_status expected = KJIT_OK) {
    char name[512];
    size_t len = 0;
    const kjit_status st = kjit_resolve_name(cubin.c_str(), keyword, name, sizeof name, &len);
    EXPECT_EQ(st, expected) << kjit_status_string(st) << ": " << kjit_last_error();
    if (st != KJIT_OK) return {};
    EXPECT_EQ(std::strlen(name), len);
    return name;
}

}  // namespace

TEST(CApi, StatusStringsAreFixed) {
    EXPECT_STREQ(kjit_status_string(KJIT_OK), "ok");
    EXPECT_STREQ(kjit_status_string(KJIT_ERROR_AMBIGUOUS), "ambiguous");
    EXPECT_STREQ(kjit_status_string(KJIT_ERROR_INTERNAL), "internal error");
    EXPECT_STREQ(kjit_status_string(KJIT_ERROR_NOT_CACHED), "not cached (compiling refused)");
    // A value past the last is "unknown status": no C++ value of the enum is (its range ends at
    // 15 now); python/tests/test_kjit.py passes 9999 as a C caller may.
    for (int s = 0; s <= 15; ++s) {
        EXPECT_STRNE(kjit_status_string(static_cast<kjit_status>(s)), "unknown status") << s;
    }
    EXPECT_EQ(KJIT_ERROR_INVALID_ARGUMENT, 1);
    EXPECT_EQ(KJIT_ERROR_BUFFER_TOO_SMALL, 10);
    EXPECT_EQ(KJIT_ERROR_INTERNAL, 12);
}

TEST(CApi, Version) {
    EXPECT_EQ(kjit_version(), static_cast<unsigned>(KJIT_VERSION_NUMBER));
    const std::string expected = std::to_string(KJIT_VERSION_MAJOR) + "." + std::to_string(KJIT_VERSION_MINOR) + "." +
                                 std::to_string(KJIT_VERSION_PATCH);
    EXPECT_EQ(kjit_version_string(), expected);
}

TEST(CApi, KeywordRuleOnRealCubins) {
    Cubin plain(sources::kPlain);
    EXPECT_EQ(resolve(plain.path, "plain_kernel"), "_Z12plain_kernelPf");
    EXPECT_EQ(resolve(plain.path, "plain"), "_Z12plain_kernelPf");  // one prefix match wins

    Cubin one(sources::kTemplateOne);
    EXPECT_EQ(resolve(one.path, "tmpl"), "_Z4tmplILi4EEvPf");

    Cubin several(sources::kTemplateSeveral);
    resolve(several.path, "tmpl", KJIT_ERROR_AMBIGUOUS);
    const std::string err = kjit_last_error();
    for (const char *n : {"_Z4tmplILi1EEvPf", "_Z4tmplILi2EEvPf", "_Z4tmplILi3EEvPf"}) {
        EXPECT_NE(err.find(n), std::string::npos) << err;
    }
    EXPECT_NE(err.find(several.path), std::string::npos);

    Cubin collision(sources::kPrefixCollision);
    EXPECT_EQ(resolve(collision.path, "gemm"), "_Z4gemmPf");
    EXPECT_EQ(resolve(collision.path, "gemm_fp16"), "_Z9gemm_fp16Pf");
    EXPECT_EQ(resolve(collision.path, "gemm_fp"), "_Z9gemm_fp16Pf");
    resolve(collision.path, "gem", KJIT_ERROR_AMBIGUOUS);

    Cubin device(sources::kDeviceFunction, {"-rdc=true"});
    EXPECT_EQ(resolve(device.path, "scale"), "_Z5scalePf");              // the entry, not the helper
    EXPECT_EQ(resolve(device.path, "scale_value"), "_Z11scale_valuef");  // the only match

    Cubin externc(sources::kExternC);
    EXPECT_EQ(resolve(externc.path, "c_kernel"), "c_kernel");
    resolve(externc.path, "c_kern", KJIT_ERROR_NOT_FOUND);  // extern "C" names match only exactly

    Cubin ns(sources::kNamespaces);
    EXPECT_EQ(resolve(ns.path, "ops::norm"), "_ZN3ops4normEPf");
    EXPECT_EQ(resolve(ns.path, "ops2::norm"), "_ZN4ops24normEPf");
    resolve(ns.path, "norm", KJIT_ERROR_NOT_FOUND);
    EXPECT_NE(std::string(kjit_last_error()).find("norm"), std::string::npos);
}

TEST(CApi, BufferTooSmallAndLengthQuery) {
    Cubin c(sources::kPlain);
    size_t len = 0;
    ASSERT_EQ(kjit_resolve_name(c.path.c_str(), "plain_kernel", nullptr, 0, &len), KJIT_OK);
    EXPECT_EQ(len, std::strlen("_Z12plain_kernelPf"));
    char small[8];
    std::memset(small, 'x', sizeof small);
    len = 0;
    EXPECT_EQ(kjit_resolve_name(c.path.c_str(), "plain_kernel", small, sizeof small, &len),
              KJIT_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(len, 18u);
    EXPECT_EQ(small[0], 'x');  // nothing but the length is written
    EXPECT_NE(std::string(kjit_last_error()).find("19"), std::string::npos);
    char exact[19];
    EXPECT_EQ(kjit_resolve_name(c.path.c_str(), "plain_kernel", exact, sizeof exact, nullptr), KJIT_OK);
    EXPECT_STREQ(exact, "_Z12plain_kernelPf");
    char one_short[18];
    EXPECT_EQ(kjit_resolve_name(c.path.c_str(), "plain_kernel", one_short, sizeof one_short, nullptr),
              KJIT_ERROR_BUFFER_TOO_SMALL);
}

TEST(CApi, NullAndMalformedArguments) {
    Cubin c(sources::kPlain);
    char name[64];
    EXPECT_EQ(kjit_resolve_name(nullptr, "plain_kernel", name, sizeof name, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("cubin_path"), std::string::npos);
    EXPECT_EQ(kjit_resolve_name("", "plain_kernel", name, sizeof name, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_resolve_name(c.path.c_str(), nullptr, name, sizeof name, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("keyword"), std::string::npos);
    EXPECT_EQ(kjit_resolve_name(c.path.c_str(), "plain_kernel", nullptr, 16, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    for (const char *bad : {"", "plain.*", "plain kernel", "plain-kernel", "a:b", "pl\xe4in"}) {
        EXPECT_EQ(kjit_resolve_name(c.path.c_str(), bad, name, sizeof name, nullptr), KJIT_ERROR_INVALID_ARGUMENT)
            << bad;
    }
    EXPECT_NE(std::string(kjit_last_error()).find("keyword"), std::string::npos);
}

namespace {

// Runs resolve_worker once on `cubin` with `keyword` (it expects plain_kernel's name) behind
// `env` (a shell prefix: assignments, or `env -u NAME`); its stdout and stderr.
std::string resolve_in_worker(const std::string &env, const std::string &cubin, const std::string &keyword) {
    const char *worker = std::getenv("KJIT_RESOLVE_WORKER");
    if (!worker) {
        ADD_FAILURE() << "KJIT_RESOLVE_WORKER is set by ctest";
        return {};
    }
    const std::string cmd = env + " '" + worker + "' 1 '" + cubin + "' " + keyword + " _Z12plain_kernelPf 2>&1";
    std::string out;
    if (FILE *p = ::popen(cmd.c_str(), "r")) {
        char buf[4096];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
        EXPECT_EQ(::pclose(p), 0) << out;
    }
    return out;
}

}  // namespace

TEST(CApi, BadFilesGetAStatusAndAMessageNamingTheFile) {
    TempDir dir;
    write_file(dir.file("empty.cubin"), "");
    write_file(dir.file("text.cubin"), "not an elf\n");
    std::string truncated = cubin_for(sources::kPlain);
    truncated.resize(truncated.size() / 2);
    write_file(dir.file("half.cubin"), truncated);
    struct Case {
        std::string path;
        kjit_status status;
    };
    for (const Case &c :
         {Case{dir.file("absent.cubin"), KJIT_ERROR_IO}, Case{dir.path(), KJIT_ERROR_IO},
          Case{dir.file("empty.cubin"), KJIT_ERROR_BAD_CUBIN}, Case{dir.file("text.cubin"), KJIT_ERROR_BAD_CUBIN},
          Case{dir.file("half.cubin"), KJIT_ERROR_BAD_CUBIN}}) {
        char name[64];
        EXPECT_EQ(kjit_resolve_name(c.path.c_str(), "plain_kernel", name, sizeof name, nullptr), c.status) << c.path;
        EXPECT_NE(std::string(kjit_last_error()).find(c.path), std::string::npos) << kjit_last_error();
    }
    EXPECT_TRUE(temp_files_in(dir.path()).empty());
    EXPECT_FALSE(exists(dir.file("empty.cubin.name")));
}

// What people pass instead of a cubin is named as what it is, with what to do.
// KJIT_LOG_LEVEL in any case; anything else is said, not taken for "off" in silence. And a
// keyword that is only the start of the identifier it chose is said in the debug log.
TEST(CApi, LogLevelInAnyCaseAndAPrefixKeywordInTheDebugLog) {
    Cubin c(sources::kPlain);
    auto run = [&](const std::string &level, const char *keyword) {
        return resolve_in_worker("KJIT_LOG_LEVEL='" + level + "'", c.path, keyword);
    };
    const std::string upper = run("DEBUG", "plain_ker");
    EXPECT_NE(upper.find("[kjit D"), std::string::npos) << upper;
    EXPECT_NE(upper.find("only starts with it"), std::string::npos) << upper;
    EXPECT_EQ(run("Debug", "plain_kernel").find("only starts with it"), std::string::npos);
    const std::string typo = run("debgu", "plain_kernel");
    EXPECT_NE(typo.find("KJIT_LOG_LEVEL='debgu' is not a level"), std::string::npos) << typo;
    EXPECT_EQ(typo.find("[kjit D"), std::string::npos) << typo;
    EXPECT_EQ(run("off", "plain_kernel"), "");
    EXPECT_EQ(run("Warning", "plain_kernel"), "");  // a level: no complaint, and a hit warns of nothing
}

TEST(CApi, APtxFileAFatbinOrASourcePassedAsACubinIsNamed) {
    TempDir dir;
    struct Case {
        std::string file, bytes, says;
    };
    std::string fatbin(72, '\0');  // the fatbin header's magic, then zeros
    const unsigned char magic[4] = {0x50, 0xed, 0x55, 0xba};
    std::memcpy(&fatbin[0], magic, sizeof magic);
    const std::vector<Case> cases = {
        {"k.ptx", "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.8\n.target sm_90\n.address_size 64\n",
         "it is PTX text"},
        {"k.fatbin", fatbin, "it is a fatbin"},
        {"k.cu", "#include <cuda_fp16.h>\n__global__ void gemm(float *p) { p[0] = 1; }\n", "CUDA C++ source text"},
        {"k.bin", std::string("\x01\x02\x03\0garbage", 11) + std::string(80, 'x'), "not an ELF file (no ELF magic)"},
    };
    for (const Case &c : cases) {
        write_file(dir.file(c.file), c.bytes);
        char name[64];
        EXPECT_EQ(kjit_resolve_name(dir.file(c.file).c_str(), "gemm", name, sizeof name, nullptr),
                  KJIT_ERROR_BAD_CUBIN);
        const std::string error = kjit_last_error();
        EXPECT_NE(error.find(dir.file(c.file)), std::string::npos) << error;
        EXPECT_NE(error.find(c.says), std::string::npos) << error;
    }
}

TEST(CApi, LastErrorIsPerThread) {
    char name[64];
    ASSERT_EQ(kjit_resolve_name(nullptr, "k", name, sizeof name, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    std::string other;
    std::thread([&] { other = kjit_last_error(); }).join();
    EXPECT_EQ(other, "");
    EXPECT_NE(std::string(kjit_last_error()), "");
}

// Sources with several kernels each, so threads and processes race on shared sidecars with
// different keywords (the lost-update case) as well as on the same one.
const std::vector<std::pair<const char *, const char *>> kRaceKeywords = {{"gemm", "_Z4gemmPf"},
                                                                          {"gemm_fp16", "_Z9gemm_fp16Pf"}};

TEST(CApi, EightThreadsOnFreshCubins) {
    for (int round = 0; round < 10; ++round) {
        TempDir dir;
        std::vector<std::string> cubins;
        for (int i = 0; i < 4; ++i) {
            cubins.push_back(dir.file("c" + std::to_string(i) + ".cubin"));
            write_file(cubins.back(), cubin_for(sources::kPrefixCollision));
        }
        std::atomic<int> ready{0}, wrong{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t) {
            threads.emplace_back([&, t] {
                ready.fetch_add(1);
                while (ready.load() < 8) {
                }
                for (int i = 0; i < 50; ++i) {
                    const auto &kw = kRaceKeywords[static_cast<std::size_t>(t + i) % kRaceKeywords.size()];
                    char name[64];
                    const auto &cubin = cubins[static_cast<std::size_t>(i) % cubins.size()];
                    if (kjit_resolve_name(cubin.c_str(), kw.first, name, sizeof name, nullptr) != KJIT_OK ||
                        std::strcmp(name, kw.second) != 0) {
                        wrong.fetch_add(1);
                    }
                }
            });
        }
        for (auto &th : threads) th.join();
        EXPECT_EQ(wrong.load(), 0);
        for (const auto &cubin : cubins) {
            const auto c = sc::read(sc::path_for(cubin));
            EXPECT_EQ(c.problem, sc::FileProblem::none);
            EXPECT_EQ(c.rejected_lines, 0u);
            for (const auto &l : c.lines) {
                bool known = false;
                for (const auto &kw : kRaceKeywords) known |= l.keyword == kw.first && l.name == kw.second;
                EXPECT_TRUE(known) << l.keyword << " " << l.name;
            }
        }
        EXPECT_TRUE(temp_files_in(dir.path()).empty());
    }
}

TEST(CApi, FourProcessesOnFreshCubins) {
    const char *worker = std::getenv("KJIT_RESOLVE_WORKER");
    ASSERT_NE(worker, nullptr) << "KJIT_RESOLVE_WORKER is set by ctest";
    for (int round = 0; round < 3; ++round) {
        TempDir dir;
        std::vector<std::string> args = {worker, "200"};
        for (int i = 0; i < 3; ++i) {
            const std::string cubin = dir.file("p" + std::to_string(i) + ".cubin");
            write_file(cubin, cubin_for(sources::kPrefixCollision));
            for (const auto &kw : kRaceKeywords) {
                args.push_back(cubin);
                args.push_back(kw.first);
                args.push_back(kw.second);
            }
        }
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        std::vector<pid_t> pids;
        for (int p = 0; p < 4; ++p) {
            const pid_t pid = ::fork();
            ASSERT_GE(pid, 0);
            if (pid == 0) {
                ::execv(worker, argv.data());
                ::_exit(127);
            }
            pids.push_back(pid);
        }
        for (pid_t pid : pids) {
            int status = 0;
            ASSERT_EQ(::waitpid(pid, &status, 0), pid);
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker status " << status;
        }
        for (int i = 0; i < 3; ++i) {
            const auto c = sc::read(sc::path_for(dir.file("p" + std::to_string(i) + ".cubin")));
            EXPECT_EQ(c.problem, sc::FileProblem::none);
            EXPECT_EQ(c.rejected_lines, 0u);
        }
        EXPECT_TRUE(temp_files_in(dir.path()).empty());
    }
}

// KJIT_LOG_LEVEL=debug shows the scan and rewrite, then the hit; unset, the library is silent.
TEST(CApi, DebugLogShowsSidecarDecisions) {
    Cubin c(sources::kPlain);
    write_file(c.path + ".name", "_Z12plain_kernelPf\n");  // a bare name: rejected, rewritten
    auto run = [&](const char *level) {
        return resolve_in_worker(level ? std::string("KJIT_LOG_LEVEL=") + level : "env -u KJIT_LOG_LEVEL", c.path,
                                 "plain_kernel");
    };
    const std::string first = run("debug");
    EXPECT_NE(first.find("bare name"), std::string::npos) << first;
    EXPECT_NE(first.find("scanned"), std::string::npos) << first;
    EXPECT_NE(first.find("sidecar rewritten"), std::string::npos) << first;
    const std::string second = run(nullptr);
    EXPECT_EQ(second, "");
    const std::string third = run("debug");
    EXPECT_NE(third.find("sidecar hit"), std::string::npos) << third;
}

namespace {

const char *const kCompileSource = R"(
template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }
template __global__ void gemm<128>(float *);
)";

}  // namespace

// The compile errors a new user meets first say what was wrong and what to do, not only NVRTC's
// words: an arch NVRTC does not take (which value, from where, which it takes), a header not
// found (the folders searched), a name expression that names nothing (that it is the name
// expression).
TEST(CApiCompile, AWrongArchAMissingHeaderAndAWrongNameExpressionSayWhatToDo) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    char path[4096];
    {
        ScopedEnv arch("KJIT_ARCH", "sm_30");
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_NVRTC);
        const std::string e = kjit_last_error();
        EXPECT_NE(e.find("does not compile for arch 'sm_30' (from KJIT_ARCH); it compiles for sm_"), std::string::npos)
            << e;
        EXPECT_NE(e.find("sm_90"), std::string::npos) << e;
    }
    o.arch = "sm_90";
    const std::string inc = dir.file("inc");
    const char *paths[] = {inc.c_str()};
    o.include_paths = paths;
    o.include_path_count = 1;
    EXPECT_EQ(kjit_compile("#include \"absent.h\"\n__global__ void gemm(float *p) {}\n", "gemm", &o, path, sizeof path,
                           nullptr),
              KJIT_ERROR_COMPILE);
    std::string e = kjit_last_error();
    EXPECT_NE(e.find("a header was not found; folders searched for includes: " + inc), std::string::npos) << e;
    EXPECT_NE(e.find("cannot open source file"), std::string::npos) << e;  // NVRTC's log follows
    o.include_paths = nullptr;
    o.include_path_count = 0;
    o.name_expression = "gemm<1, 2>";
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_COMPILE);
    e = kjit_last_error();
    EXPECT_NE(e.find("the name expression 'gemm<1, 2>' names no instantiation"), std::string::npos) << e;
}

// "-arch" among the NVRTC options with kjit_compile_options.arch unset said "no target arch":
// the default arch was looked for first, and on a machine without a GPU there is none. The
// option is what is wrong, arch set or not, and the message says where the arch goes.
TEST(CApiCompile, AnArchAmongTheNvrtcOptionsSaysWhereTheArchGoes) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ScopedEnv no_arch("KJIT_ARCH", ""), no_driver("KJIT_LIBCUDA", "/nonexistent/libcuda.so.1");
    for (const char *option : {"-arch=sm_80", "--gpu-architecture=sm_80", "-arch", "-gpu-architecture"}) {
        for (const char *arch : {static_cast<const char *>(nullptr), "sm_90"}) {
            kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
            o.cache_dir = cache.c_str();
            o.arch = arch;
            const char *options[] = {"-std=c++17", option, "sm_80"};
            o.nvrtc_options = options;
            o.nvrtc_option_count = 3;
            char path[4096];
            EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr),
                      KJIT_ERROR_INVALID_ARGUMENT);
            const std::string e = kjit_last_error();
            const std::string what = std::string("NVRTC option '") + option +
                                     "' sets the target: pass the arch in kjit_compile_options.arch, not as an "
                                     "NVRTC option";
            EXPECT_NE(e.find(what), std::string::npos) << (arch ? arch : "no arch") << ": " << e;
            EXPECT_EQ(e.find("no target arch"), std::string::npos) << e;
        }
    }
    EXPECT_FALSE(exists(cache));
}

// The default cache folder where $HOME (or $XDG_CACHE_HOME) cannot hold it: the message named
// the parent whose mkdir failed ("cannot create cache folder '/proc/.cache'"), after NVRTC had
// run. It names the folder it wanted, why it could not make it, and what to set instead; and
// nothing is compiled for nothing.
TEST(CApiCompile, ADefaultCacheFolderThatCannotBeMadeSaysWhichAndWhatToSet) {
    TempDir dir;
    const std::string file = dir.file("not-a-folder");
    kjit_test::write_file(file, "x");
    ScopedEnv no_cache("KJIT_CACHE_DIR", "");
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.arch = "sm_90";
    char path[4096];
    const struct {
        const char *variable;
        std::string wanted;
    } cases[] = {{"HOME", file + "/.cache/kjit"}, {"XDG_CACHE_HOME", file + "/kjit"}};
    for (const auto &c : cases) {
        ScopedEnv home("HOME", file.c_str());
        ScopedEnv xdg("XDG_CACHE_HOME", std::string(c.variable) == "XDG_CACHE_HOME" ? file.c_str() : "");
        const kjit_stats before = stats_now();
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_IO);
        const std::string e = kjit_last_error();
        EXPECT_NE(e.find("cannot create the cache folder '" + c.wanted + "'"), std::string::npos) << e;
        EXPECT_NE(e.find("'" + file + "' exists and is not a folder"), std::string::npos) << "why: " << e;
        EXPECT_NE(e.find(std::string("from $") + c.variable), std::string::npos) << e;
        EXPECT_NE(e.find("set $KJIT_CACHE_DIR"), std::string::npos) << e;
        EXPECT_NE(e.find("kjit_compile_options.cache_dir"), std::string::npos) << e;
        EXPECT_EQ(stats_now().nvrtc_compiles, before.nvrtc_compiles) << "compiled with nowhere to put it";
    }
    // A folder the caller named is named as such, without the default's advice.
    const std::string given = file + "/sub";
    o.cache_dir = given.c_str();
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_IO);
    const std::string e = kjit_last_error();
    EXPECT_NE(e.find("cannot create the cache folder '" + given + "'"), std::string::npos) << e;
    EXPECT_EQ(e.find("KJIT_CACHE_DIR"), std::string::npos) << e;
}

TEST(CApiCompile, CompilesThenHitsAndTheNameIsWarm) {
    TempDir dir;
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    const std::string cache = dir.file("cache");
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    char path[4096];
    size_t len = 0;
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, &len), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(std::strlen(path), len);
    struct stat first {};
    ASSERT_EQ(::stat(path, &first), 0);
    char again[4096];
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &o, again, sizeof again, nullptr), KJIT_OK);
    EXPECT_STREQ(again, path);
    struct stat second {};
    ASSERT_EQ(::stat(again, &second), 0);
    EXPECT_EQ(first.st_ino, second.st_ino);  // the hit did not republish
    EXPECT_EQ(resolve(path, "gemm"), "_Z4gemmILi128EEvPf");
    // Length-only query and a short buffer.
    size_t need = 0;
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, nullptr, 0, &need), KJIT_OK);
    EXPECT_EQ(need, len);
    char small[8];
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, small, sizeof small, &need), KJIT_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(need, len);
}

// program_name (0.7): the NVRTC program's name, in NVRTC's log, in the cubin (a device assert
// names its file) and in the key; "source.cu", the default, is the entry of no name at all.
TEST(CApiCompile, ProgramNameNamesTheProgramInTheLogTheCubinAndTheKey) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const char *source = "template <int N> __global__ void gemm(float *p) { assert(p[0] > 0); p[0] = N; }\n"
                         "template __global__ void gemm<128>(float *);\n";
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    auto compile_as = [&](const char *program_name) {
        o.program_name = program_name;
        char path[4096];
        const kjit_status st = kjit_compile(source, "gemm", &o, path, sizeof path, nullptr);
        EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
        return st == KJIT_OK ? std::string(path) : std::string();
    };
    const std::string named = compile_as("gemm_module.cu");
    const std::string unnamed = compile_as(nullptr);
    EXPECT_NE(named, unnamed);
    EXPECT_EQ(compile_as("source.cu"), unnamed);
    EXPECT_EQ(compile_as(""), unnamed);
    EXPECT_EQ(compile_as("gemm_module.cu"), named);
    EXPECT_NE(read_file(named).find("gemm_module.cu"), std::string::npos);
    EXPECT_EQ(read_file(unnamed).find("gemm_module.cu"), std::string::npos);
    EXPECT_NE(read_file(unnamed).find("source.cu"), std::string::npos);

    // NVRTC's log names the program.
    o.program_name = "broken_module.cu";
    char path[4096];
    EXPECT_EQ(kjit_compile("__global__ void gemm() { undeclared(); }\n", "gemm", &o, path, sizeof path, nullptr),
              KJIT_ERROR_COMPILE);
    EXPECT_NE(std::string(kjit_last_error()).find("broken_module.cu("), std::string::npos) << kjit_last_error();
    // A folder is not a program name.
    o.program_name = "kernels/";
    EXPECT_EQ(kjit_compile(source, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("program_name 'kernels/'"), std::string::npos) << kjit_last_error();
}

TEST(CApiCompile, OlderSmallerOptionsStructStillWorks) {
    // What a caller built against a header whose struct ended after `arch` passes in.
    struct options_v0 {
        size_t struct_size;
        const char *cache_dir;
        const char *arch;
    };
    TempDir dir;
    const std::string cache = dir.file("cache");
    options_v0 old = {sizeof(options_v0), cache.c_str(), "sm_90"};
    char path[4096];
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", reinterpret_cast<const kjit_compile_options *>(&old), path,
                           sizeof path, nullptr),
              KJIT_OK)
        << kjit_last_error();
    EXPECT_EQ(std::string(path).rfind(cache, 0), 0u);
    kjit_compile_options bad = KJIT_COMPILE_OPTIONS_INIT;
    bad.struct_size = sizeof bad + 8;  // from a newer libkjit than this one
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &bad, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("struct_size"), std::string::npos);
    bad.struct_size = 0;
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &bad, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
}

TEST(CApiCompile, NullOptionsUseTheEnvironment) {
    TempDir dir;
    const std::string cache = dir.file("env-cache");
    ::setenv("KJIT_CACHE_DIR", cache.c_str(), 1);
    ::setenv("KJIT_ARCH", "sm_90", 1);
    char path[4096];
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", nullptr, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(std::string(path).rfind(cache + "/", 0), 0u) << path;
    EXPECT_NE(std::string(path).find("/kernel.cubin"), std::string::npos);
    ::unsetenv("KJIT_ARCH");
    ::setenv("KJIT_LIBCUDA", "/nonexistent/libcuda.so.1", 0);
    if (kjit_compile(kCompileSource, "gemm", nullptr, path, sizeof path, nullptr) != KJIT_OK) {
        EXPECT_NE(std::string(kjit_last_error()).find("KJIT_ARCH"), std::string::npos) << kjit_last_error();
    }
    ::unsetenv("KJIT_CACHE_DIR");
    ::unsetenv("KJIT_LIBCUDA");
}

TEST(CApiCompile, ArgumentChecks) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.arch = "sm_90";
    o.cache_dir = "/tmp/kjit-never-created-by-this-test";
    char path[256];
    EXPECT_EQ(kjit_compile(nullptr, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_compile(kCompileSource, nullptr, &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm.*", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, nullptr, 16, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    o.nvrtc_option_count = 2;  // with a NULL array
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("nvrtc_options"), std::string::npos);
    const char *opts[] = {"-std=c++17", nullptr};
    o.nvrtc_options = opts;
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("nvrtc_options[1]"), std::string::npos);
    o.nvrtc_option_count = 0;
    kjit_header h = {"a.h", nullptr};
    o.headers = &h;
    o.header_count = 1;
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    o.header_count = 0;
    o.arch = "compute_90";
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("sm_90"), std::string::npos);
    EXPECT_FALSE(exists("/tmp/kjit-never-created-by-this-test"));
}

TEST(CApiCompile, HeadersOptionsAndNameExpression) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/scale.h"), "#define SCALE 2.0f\n");
    const std::string inc = dir.file("inc");
    const char *includes[] = {inc.c_str()};
    const char *opts[] = {"-std=c++17", "-DOFFSET=1.0f"};
    kjit_header h = {"tile.h", "template <int T> struct Tile { static constexpr int size = T; };\n"};
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.nvrtc_options = opts;
    o.nvrtc_option_count = 2;
    o.include_paths = includes;
    o.include_path_count = 1;
    o.headers = &h;
    o.header_count = 1;
    o.name_expression = "gemm<Tile<64>::size>";
    const char *src = R"(
#include "tile.h"
#include "scale.h"
template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N * SCALE + OFFSET; }
)";
    char path[4096];
    ASSERT_EQ(kjit_compile(src, "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    EXPECT_EQ(resolve(path, "gemm"), "_Z4gemmILi64EEvPf");
    const char *bad_src = "__global__ void gemm(float *p) { p[0] = NOT_DEFINED; }\n";
    o.name_expression = nullptr;
    EXPECT_EQ(kjit_compile(bad_src, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_COMPILE);
    EXPECT_NE(std::string(kjit_last_error()).find("NOT_DEFINED"), std::string::npos);
}

// kjit_compile_named: the path kjit_compile gives and the name kjit_resolve_name gives, from one
// look-up (one sidecar read on a hit, where kjit_compile + kjit_resolve_name read it twice), on a
// miss and on a hit, by keyword and by name expression, for a request that reads files too.
TEST(CApiCompile, CompileNamedGivesPathAndNameFromOneLookUp) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/scale.h"), "#define SCALE 3\n");
    const std::string inc = dir.file("inc");
    const char *includes[] = {inc.c_str()};
    struct Case {
        const char *source;
        const char *name_expression;
        bool reads_files;
        const char *name;
    };
    const Case cases[] = {
        {kCompileSource, nullptr, false, "_Z4gemmILi128EEvPf"},
        {"template <int N> __global__ void gemm(float *p) { p[0] = N; }\n", "gemm<7>", false, "_Z4gemmILi7EEvPf"},
        {"#include \"scale.h\"\n__global__ void gemm(float *p) { p[0] = SCALE; }\n", nullptr, true, "_Z4gemmPf"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.name);
        kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
        o.cache_dir = cache.c_str();
        o.arch = "sm_90";
        o.name_expression = c.name_expression;
        if (c.reads_files) {
            o.include_paths = includes;
            o.include_path_count = 1;
        }
        for (const char *round : {"miss", "hit"}) {
            SCOPED_TRACE(round);
            char path[4096], name[512];
            size_t path_len = 0, name_len = 0;
            const kjit_stats before = stats_now();
            ASSERT_EQ(kjit_compile_named(c.source, "gemm", &o, path, sizeof path, &path_len, name, sizeof name,
                                         &name_len),
                      KJIT_OK)
                << kjit_last_error();
            const kjit_stats after = stats_now();
            EXPECT_STREQ(name, c.name);
            EXPECT_EQ(name_len, std::strlen(c.name));
            EXPECT_EQ(path_len, std::strlen(path));
            char plain[4096];
            ASSERT_EQ(kjit_compile(c.source, "gemm", &o, plain, sizeof plain, nullptr), KJIT_OK);
            EXPECT_STREQ(path, plain);
            EXPECT_EQ(resolve(path, "gemm"), c.name);
            if (std::string(round) == "hit") {
                // One read of the sidecar at most: none when the hit memo answers (a repeat).
                EXPECT_EQ(after.compile_hits - before.compile_hits, 1u);
                EXPECT_LE(after.sidecar_hits - before.sidecar_hits, 1u);
                EXPECT_EQ(after.scans - before.scans, 0u);
            }
        }
    }
}

// A repeat is answered by the hit memo from the caller's arguments as they are (no request
// built): every argument the caller gives still tells requests apart, a repeat reads no sidecar,
// and what the full path would refuse (a NULL option, a bad setting in the environment) is
// still refused at a repeat, never answered from memory.
TEST(CApiCompile, ARepeatIsAnsweredFromTheArgumentsAndEachArgumentTellsRequestsApart) {
    TempDir dir;
    const std::string cache = dir.file("cache"), other_cache = dir.file("other-cache");
    for (const char *folder : {"inc", "inc2"}) ::mkdir(dir.file(folder).c_str(), 0755);
    write_file(dir.file("inc/scale.h"), "#define SCALE 3\n");
    write_file(dir.file("inc2/scale.h"), "#define SCALE 4\n");
    const std::string inc = dir.file("inc"), inc2 = dir.file("inc2");
    const char *includes[] = {inc.c_str()}, *includes2[] = {inc2.c_str()};
    const char *opts[] = {"-DOFF=1", "-DON=2"}, *joined[] = {"-DOFF=1 -DON=2"};
    kjit_header h = {"tile.h", "#define TILE 8\n"}, h_text = {"tile.h", "#define TILE 9\n"};
    const std::string source = "#include \"scale.h\"\n#include \"tile.h\"\n"
                               "template <int N> __global__ void gemm(float *p) { p[0] = N * SCALE + TILE; }\n"
                               "template __global__ void gemm<3>(float *);\n";
    const std::string other_source = source + "// another text\n";
    kjit_compile_options base = KJIT_COMPILE_OPTIONS_INIT;
    base.cache_dir = cache.c_str();
    base.arch = "sm_90";
    base.nvrtc_options = opts;
    base.nvrtc_option_count = 2;
    base.include_paths = includes;
    base.include_path_count = 1;
    base.headers = &h;
    base.header_count = 1;
    base.name_expression = "gemm<3>";
    const auto named = [](const char *src, const kjit_compile_options &o, std::string *name = nullptr) {
        char path[4096], n[512];
        const kjit_status st = kjit_compile_named(src, "gemm", &o, path, sizeof path, nullptr, n, sizeof n, nullptr);
        EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
        if (name) *name = st == KJIT_OK ? n : "";
        return st == KJIT_OK ? std::string(path) : std::string();
    };
    const std::string path = named(source.c_str(), base);
    ASSERT_EQ(named(source.c_str(), base), path);  // the full look-up the memo remembers
    for (int i = 0; i < 3; ++i) {
        const kjit_stats before = stats_now();
        std::string name;
        EXPECT_EQ(named(source.c_str(), base, &name), path);
        EXPECT_EQ(name, "_Z4gemmILi3EEvPf");
        const kjit_stats after = stats_now();
        EXPECT_EQ(after.compile_hits - before.compile_hits, 1u);
        EXPECT_EQ(after.sidecar_hits - before.sidecar_hits, 0u) << "the repeat read the sidecar";
    }
    struct Variant {
        const char *what;
        std::function<void(kjit_compile_options &)> change;
        bool other_text = false;
    };
    const std::vector<Variant> variants = {
        {"the source", [](kjit_compile_options &) {}, true},
        {"the cache folder", [&](kjit_compile_options &o) { o.cache_dir = other_cache.c_str(); }},
        {"the arch", [](kjit_compile_options &o) { o.arch = "sm_80"; }},
        {"an NVRTC option", [](kjit_compile_options &o) { o.nvrtc_option_count = 1; }},
        {"the options' boundaries",
         [&](kjit_compile_options &o) {
             o.nvrtc_options = joined;
             o.nvrtc_option_count = 1;
         }},
        {"an include path", [&](kjit_compile_options &o) { o.include_paths = includes2; }},
        {"a header's text", [&](kjit_compile_options &o) { o.headers = &h_text; }},
        {"the name expression", [](kjit_compile_options &o) { o.name_expression = nullptr; }},
        {"the program name", [](kjit_compile_options &o) { o.program_name = "gemm.cu"; }},
    };
    for (const Variant &v : variants) {
        SCOPED_TRACE(v.what);
        kjit_compile_options o = base;
        v.change(o);
        const std::string src = v.other_text ? other_source : source;
        const std::string got = named(src.c_str(), o);
        EXPECT_NE(got, path) << "answered with another request's cubin";
        ScopedEnv off("KJIT_HIT_MEMO", "0");
        EXPECT_EQ(named(src.c_str(), o), got) << "the memo's answer is not the full look-up's";
    }
    {
        ScopedEnv off("KJIT_HIT_MEMO", "0");
        const kjit_stats before = stats_now();
        EXPECT_EQ(named(source.c_str(), base), path);
        EXPECT_EQ(stats_now().sidecar_hits - before.sidecar_hits, 1u) << "KJIT_HIT_MEMO=0 did not turn the memo off";
    }
    char p[4096], n[512];
    {
        ScopedEnv bad("KJIT_COMPILE_WAIT", "soon");
        EXPECT_EQ(kjit_compile_named(source.c_str(), "gemm", &base, p, sizeof p, nullptr, n, sizeof n, nullptr),
                  KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(kjit_last_error()).find("KJIT_COMPILE_WAIT"), std::string::npos) << kjit_last_error();
    }
    const char *with_null[] = {"-DOFF=1", nullptr};
    kjit_compile_options o = base;
    o.nvrtc_options = with_null;
    EXPECT_EQ(kjit_compile(source.c_str(), "gemm", &o, p, sizeof p, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("nvrtc_options[1] is NULL"), std::string::npos) << kjit_last_error();
    EXPECT_EQ(named(source.c_str(), base), path);
}

// The base_dirs option (since 0.12): read, checked, "none" alone for none, $KJIT_BASE_DIRS when
// not given (or when the caller's struct predates it), and in the hit memo's digest: a repeat
// that differs only in its base folders, given or from the variable, is not answered with
// another's memoised answer. The folders here hold nothing the kernel reads, so every call hits
// the same entry (the key holds no base folder itself).
TEST(CApiCompile, BaseDirsAreReadCheckedAndTellMemoisedRequestsApart) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    for (const char *folder : {"base-a", "base-b"}) ::mkdir(dir.file(folder).c_str(), 0755);
    const std::string base_a = dir.file("base-a"), base_b = dir.file("base-b");
    const std::string from_env = ":" + base_b + "::";  // empty pieces are skipped: base_b alone
    const char *one[] = {base_a.c_str()}, *two[] = {base_a.c_str(), base_b.c_str()}, *none[] = {"none"};
    const char *b_only[] = {base_b.c_str()};
    const char *empty[] = {base_a.c_str(), ""}, *with_null[] = {base_a.c_str(), nullptr};
    ScopedEnv unset("KJIT_BASE_DIRS", "");
    kjit_compile_options plain = KJIT_COMPILE_OPTIONS_INIT;
    plain.cache_dir = cache.c_str();
    plain.arch = "sm_90";
    const auto with = [&](const char *const *dirs, size_t count, size_t struct_size = sizeof(kjit_compile_options)) {
        kjit_compile_options o = plain;
        o.struct_size = struct_size;
        o.base_dirs = dirs;
        o.base_dir_count = count;
        return o;
    };
    char path[4096];
    // Whether `o` hits `expected`, and whether the memo answered it (no sidecar read).
    const auto memo_answers = [&](const kjit_compile_options &o, const std::string &expected) {
        const kjit_stats before = stats_now();
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
        EXPECT_EQ(std::string(path), expected);
        return stats_now().sidecar_hits == before.sidecar_hits;
    };
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &plain, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    const std::string cubin = path;
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &plain, path, sizeof path, nullptr), KJIT_OK);  // remembered
    EXPECT_TRUE(memo_answers(plain, cubin));
    EXPECT_FALSE(memo_answers(with(one, 1), cubin)) << "base_dirs not in the memo's digest";
    EXPECT_TRUE(memo_answers(with(one, 1), cubin));
    EXPECT_FALSE(memo_answers(with(two, 2), cubin)) << "a second base folder not in the memo's digest";
    EXPECT_TRUE(memo_answers(with(none, 1), cubin)) << "\"none\" is not the same request as no base folder";
    {
        ScopedEnv variable("KJIT_BASE_DIRS", from_env.c_str());
        EXPECT_FALSE(memo_answers(plain, cubin)) << "$KJIT_BASE_DIRS not in the memo's digest";
        EXPECT_TRUE(memo_answers(plain, cubin));
        // The variable's folders as the option gives them: the same request.
        EXPECT_TRUE(memo_answers(with(b_only, 1), cubin)) << "the variable's list differs from the option's";
        // The option wins; "none" alone is none whatever the variable says.
        EXPECT_TRUE(memo_answers(with(one, 1), cubin));
        EXPECT_TRUE(memo_answers(with(none, 1), cubin));
        // A caller's struct before base_dirs (0.11's): the option is not read, the variable is.
        EXPECT_TRUE(memo_answers(with(empty, 2, offsetof(kjit_compile_options, base_dirs)), cubin))
            << kjit_last_error();
    }
    {
        ScopedEnv no_memo("KJIT_HIT_MEMO", "0");
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &plain, path, sizeof path, nullptr), KJIT_OK);
        kjit_compile_options o = with(two, 2);
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
        EXPECT_EQ(std::string(path), cubin);
    }
    // A NULL array with a count, an empty or NULL name: invalid, naming the field, memo or not.
    for (const char *memo : {"1", "0"}) {
        ScopedEnv hit_memo("KJIT_HIT_MEMO", memo);
        kjit_compile_options o = with(nullptr, 1);
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(kjit_last_error()).find("options.base_dirs is NULL but its count is 1"),
                  std::string::npos)
            << kjit_last_error();
        o = with(empty, 2);
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(kjit_last_error()).find("options.base_dirs has an empty folder name"), std::string::npos)
            << kjit_last_error();
        o = with(with_null, 2);
        EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(kjit_last_error()).find("options.base_dirs[1] is NULL"), std::string::npos)
            << kjit_last_error();
    }
}

TEST(CApiCompile, CompileNamedBuffersAndArguments) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    size_t path_len = 0, name_len = 0;
    // Lengths only.
    ASSERT_EQ(kjit_compile_named(kCompileSource, "gemm", &o, nullptr, 0, &path_len, nullptr, 0, &name_len), KJIT_OK)
        << kjit_last_error();
    EXPECT_EQ(name_len, std::strlen("_Z4gemmILi128EEvPf"));
    EXPECT_GT(path_len, cache.size());
    // Either buffer short: neither string written, both lengths are.
    std::string path(path_len + 1, 'x'), name(name_len, 'x');
    const std::string untouched_path = path, untouched_name = name;
    size_t got_path = 0, got_name = 0;
    EXPECT_EQ(kjit_compile_named(kCompileSource, "gemm", &o, path.data(), path.size(), &got_path, name.data(),
                                 name.size(), &got_name),
              KJIT_ERROR_BUFFER_TOO_SMALL);
    EXPECT_NE(std::string(kjit_last_error()).find("name buffer holds"), std::string::npos) << kjit_last_error();
    EXPECT_EQ(got_path, path_len);
    EXPECT_EQ(got_name, name_len);
    EXPECT_EQ(path, untouched_path);
    EXPECT_EQ(name, untouched_name);
    std::string short_path(path_len, 'x'), long_name(name_len + 1, 'x');
    EXPECT_EQ(kjit_compile_named(kCompileSource, "gemm", &o, short_path.data(), short_path.size(), nullptr,
                                 long_name.data(), long_name.size(), nullptr),
              KJIT_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(long_name, std::string(name_len + 1, 'x'));
    // Exactly enough.
    EXPECT_EQ(kjit_compile_named(kCompileSource, "gemm", &o, path.data(), path.size(), nullptr, long_name.data(),
                                 long_name.size(), nullptr),
              KJIT_OK);
    EXPECT_STREQ(long_name.c_str(), "_Z4gemmILi128EEvPf");
    // Bad arguments.
    char buf[64];
    EXPECT_EQ(kjit_compile_named(kCompileSource, "gemm", &o, nullptr, 0, nullptr, nullptr, 8, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("name is NULL but name_size is not 0"), std::string::npos);
    EXPECT_EQ(kjit_compile_named(kCompileSource, "gemm", &o, nullptr, 8, nullptr, buf, sizeof buf, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(kjit_compile_named(nullptr, "gemm", &o, nullptr, 0, nullptr, nullptr, 0, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("kjit_compile_named: source is NULL"), std::string::npos);
    EXPECT_EQ(kjit_compile_named(kCompileSource, "gemm.*", &o, nullptr, 0, nullptr, nullptr, 0, nullptr),
              KJIT_ERROR_INVALID_ARGUMENT);
}

TEST(CApiStats, CountsHitsMissesNvrtcTimeSidecarUseAndErrors) {
    TempDir dir;
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    const std::string cache = dir.file("cache");
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    const kjit_stats before = stats_now();
    char path[4096];
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_OK);
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_OK);
    EXPECT_EQ(resolve(path, "gemm"), "_Z4gemmILi128EEvPf");
    // A garbage sidecar: one rejection (bad header), one scan, one rewrite.
    write_file(sc::path_for(path), "kjit-sidecar 99\ngarbage\n");
    EXPECT_EQ(resolve(path, "gemm"), "_Z4gemmILi128EEvPf");
    // No sidecar at all: counted as missing, not as a rejection.
    ASSERT_EQ(::unlink(sc::path_for(path).c_str()), 0);
    EXPECT_EQ(resolve(path, "gemm"), "_Z4gemmILi128EEvPf");
    resolve(path, "nosuch", KJIT_ERROR_NOT_FOUND);
    EXPECT_EQ(kjit_compile(nullptr, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    const kjit_stats after = stats_now();
    EXPECT_EQ(after.compile_misses - before.compile_misses, 1u);
    EXPECT_EQ(after.compile_hits - before.compile_hits, 2u);
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, 1u);
    EXPECT_GT(after.nvrtc_nanoseconds - before.nvrtc_nanoseconds, 1'000'000u);  // NVRTC takes milliseconds
    EXPECT_EQ(after.entries_published - before.entries_published, 1u);
    // Hits: the first compile hit + the first resolve (the second compile hit is the hit memo's,
    // which reads no sidecar); the rewritten sidecars answer later lookups.
    EXPECT_GE(after.sidecar_hits - before.sidecar_hits, 2u);
    EXPECT_EQ(after.sidecar_rejections[KJIT_SIDECAR_BAD_HEADER] - before.sidecar_rejections[KJIT_SIDECAR_BAD_HEADER],
              1u);
    EXPECT_EQ(after.sidecar_missing - before.sidecar_missing, 1u);
    EXPECT_GE(after.scans - before.scans, 3u);  // garbage, missing, not found
    EXPECT_GE(after.sidecar_writes - before.sidecar_writes, 2u);
    EXPECT_EQ(after.errors[KJIT_ERROR_NOT_FOUND] - before.errors[KJIT_ERROR_NOT_FOUND], 1u);
    EXPECT_EQ(after.errors[KJIT_ERROR_INVALID_ARGUMENT] - before.errors[KJIT_ERROR_INVALID_ARGUMENT], 1u);
    EXPECT_EQ(after.errors[KJIT_OK], 0u);
}

TEST(CApiStats, StructSizeRules) {
    EXPECT_EQ(kjit_get_stats(nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    kjit_stats s = KJIT_STATS_INIT;
    s.struct_size = sizeof s + 8;  // from a newer libkjit than this one
    EXPECT_EQ(kjit_get_stats(&s), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("struct_size"), std::string::npos);
    s.struct_size = 0;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_ERROR_INVALID_ARGUMENT);
    // A caller built against a header whose struct ended before `scans` gets exactly that much.
    const size_t old_size = offsetof(kjit_stats, scans);
    std::vector<unsigned char> bytes(sizeof(kjit_stats), 0xab);
    auto *old = reinterpret_cast<kjit_stats *>(bytes.data());
    old->struct_size = old_size;
    ASSERT_EQ(kjit_get_stats(old), KJIT_OK);
    EXPECT_EQ(old->struct_size, old_size);
    for (size_t i = old_size; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], 0xab) << "byte " << i << " written";
}

TEST(CApiStats, SizeLimitOptionAndEnvironment) {
    TempDir dir;
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    const std::string cache = dir.file("cache");
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    char path[4096];
    ::setenv("KJIT_CACHE_MAX_SIZE", "lots", 1);
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kjit_last_error()).find("KJIT_CACHE_MAX_SIZE"), std::string::npos) << kjit_last_error();
    o.max_cache_size = UINT64_MAX;  // no limit, whatever the variable says
    EXPECT_EQ(kjit_compile(kCompileSource, "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    ::setenv("KJIT_CACHE_MAX_SIZE", "1G", 1);
    o.max_cache_size = 0;
    const kjit_stats before = stats_now();
    const std::string other = std::string(kCompileSource) + "\n// another entry\n";
    EXPECT_EQ(kjit_compile(other.c_str(), "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    ::unsetenv("KJIT_CACHE_MAX_SIZE");
    // Under a limit, a publish measures the cache (the first time: no usage record yet).
    EXPECT_EQ(stats_now().eviction_runs - before.eviction_runs, 1u);
    EXPECT_EQ(stats_now().evicted_entries - before.evicted_entries, 0u);
    struct stat st {};
    EXPECT_EQ(::stat((cache + "/.kjit-usage").c_str(), &st), 0);
}

// KJIT_CACHE_MAX_SIZE=0 is no limit (as ccache's users expect), not a limit of 0 bytes that
// evicted every idle entry at each publish.
TEST(CApiStats, SizeLimitZeroInTheEnvironmentMeansNoLimit) {
    TempDir dir;
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    const std::string cache = dir.file("cache");
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    char first[4096];
    ASSERT_EQ(kjit_compile(kCompileSource, "gemm", &o, first, sizeof first, nullptr), KJIT_OK) << kjit_last_error();
    const std::string entry = std::string(first).substr(0, std::string(first).rfind('/'));
    const struct timespec hour_ago[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, entry.c_str(), hour_ago, AT_SYMLINK_NOFOLLOW), 0);  // idle
    ::setenv("KJIT_CACHE_MAX_SIZE", "0", 1);
    const kjit_stats before = stats_now();
    const std::string other = std::string(kCompileSource) + "\n// another entry, under KJIT_CACHE_MAX_SIZE=0\n";
    char path[4096];
    EXPECT_EQ(kjit_compile(other.c_str(), "gemm", &o, path, sizeof path, nullptr), KJIT_OK) << kjit_last_error();
    ::unsetenv("KJIT_CACHE_MAX_SIZE");
    EXPECT_EQ(stats_now().eviction_runs - before.eviction_runs, 0u);
    EXPECT_EQ(stats_now().evicted_entries - before.evicted_entries, 0u);
    struct stat st {};
    EXPECT_EQ(::stat(first, &st), 0) << "the idle entry was evicted under KJIT_CACHE_MAX_SIZE=0";
}
