// Caches that move with the install (docs/cache-layout.md, "Folders by number"): the same header
// tree under two prefixes shares entries wherever NVRTC's output cannot name the folder, and
// never where it can. Each case first proves its premise against plain NVRTC (the same request
// compiled under both prefixes gives the same bytes, or not), then checks libkjit: a hit exactly
// where the bytes agree, and where they do not, a compile whose cubin is this prefix's bytes.
// Through libkjit.so, as users link it.
#include "compile/compiler.hpp"
#include "kjit/kjit.h"
#include "kjit/kjit_cache.h"

#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

using namespace kjit_test;

namespace {

// One compile through the C ABI: the cubin's path, or the status and message.
struct Answer {
    kjit_status status = KJIT_OK;
    std::string cubin;
    std::string error;
};

struct Call {
    Call(std::string s, std::vector<std::string> o, std::vector<std::string> i, std::string p,
         std::vector<std::string> b = {})
        : source(std::move(s)), options(std::move(o)), include_paths(std::move(i)), program_name(std::move(p)),
          base_dirs(std::move(b)) {}
    std::string source;
    std::vector<std::string> options;
    std::vector<std::string> include_paths;
    std::string program_name;  // empty: none
    std::vector<std::string> base_dirs;
};

Answer compile(const std::string &cache, const Call &c) {
    std::vector<const char *> opts, incs, bases;
    for (const auto &o : c.options) opts.push_back(o.c_str());
    for (const auto &p : c.include_paths) incs.push_back(p.c_str());
    for (const auto &b : c.base_dirs) bases.push_back(b.c_str());
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.nvrtc_options = opts.data();
    o.nvrtc_option_count = opts.size();
    o.include_paths = incs.data();
    o.include_path_count = incs.size();
    o.program_name = c.program_name.empty() ? nullptr : c.program_name.c_str();
    o.base_dirs = bases.data();
    o.base_dir_count = bases.size();
    Answer a;
    char path[4096];
    a.status = kjit_compile(c.source.c_str(), "gemm", &o, path, sizeof path, nullptr);
    if (a.status == KJIT_OK) {
        a.cubin = path;
    } else {
        a.error = kjit_last_error();
    }
    return a;
}

// The same request compiled by NVRTC itself, as libkjit passes it (include_paths last).
std::string plain_nvrtc(const Call &c) {
    kjit::compile::compiler::Program r;
    r.source = c.source;
    r.program_name = c.program_name.empty() ? "source.cu" : c.program_name;
    r.options = {"-arch=sm_90"};
    r.options.insert(r.options.end(), c.options.begin(), c.options.end());
    for (const std::string &p : c.include_paths) r.options.push_back("-I" + p);
    auto out = kjit::compile::compiler::compile(r);
    EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message);
    return out.ok() ? out->cubin : std::string();
}

std::uint64_t nvrtc_runs() {
    kjit_stats s = KJIT_STATS_INIT;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_OK);
    return s.nvrtc_compiles;
}

void make_dirs(const std::string &path) {
    for (std::size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
        ::mkdir(path.substr(0, at).c_str(), 0755);
    }
    ::mkdir(path.c_str(), 0755);
}

// Two installs of one header tree: <dir>/A/inc and <dir>/B/inc hold the same files.
struct Installs {
    TempDir dir;
    std::string a = dir.file("A/inc"), b = dir.file("B/inc");
    std::string cache = dir.file("cache");
    Installs() {
        make_dirs(a);
        make_dirs(b);
    }
    void write(const std::string &name, const std::string &text) const {
        for (const std::string &root : {a, b}) {
            const std::size_t slash = name.rfind('/');
            if (slash != std::string::npos) make_dirs(root + "/" + name.substr(0, slash));
            write_file(root + "/" + name, text);
        }
    }
};

// `call_a` (under A) then `call_b` (under B) on one cache, after checking what plain NVRTC says
// of them: `same_bytes` true, the second is a hit on the first's entry; false, it compiles, and
// its cubin holds B's bytes, not A's; and A again hits its own entry.
void expect_relocation(const Installs &in, const Call &call_a, const Call &call_b, bool same_bytes) {
    const std::string bytes_a = plain_nvrtc(call_a), bytes_b = plain_nvrtc(call_b);
    ASSERT_FALSE(bytes_a.empty());
    ASSERT_EQ(bytes_a == bytes_b, same_bytes) << "the premise: plain NVRTC's bytes under the two prefixes";
    const std::uint64_t before = nvrtc_runs();
    const Answer first = compile(in.cache, call_a);
    ASSERT_EQ(first.status, KJIT_OK) << first.error;
    EXPECT_EQ(nvrtc_runs(), before + 1);
    EXPECT_TRUE(read_file(first.cubin) == bytes_a) << "the cubin is not plain NVRTC's bytes";
    const Answer second = compile(in.cache, call_b);
    ASSERT_EQ(second.status, KJIT_OK) << second.error;
    if (same_bytes) {
        EXPECT_EQ(nvrtc_runs(), before + 1) << "the relocated request compiled again";
        EXPECT_EQ(second.cubin, first.cubin);
    } else {
        EXPECT_EQ(nvrtc_runs(), before + 2) << "the relocated request was handed the other prefix's cubin";
        EXPECT_NE(second.cubin, first.cubin);
        EXPECT_TRUE(read_file(second.cubin) == bytes_b) << "the cubin is not plain NVRTC's bytes";
        const Answer again = compile(in.cache, call_a);
        EXPECT_EQ(again.cubin, first.cubin);
        EXPECT_EQ(nvrtc_runs(), before + 2);
    }
}

const char *const kGemm = "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                          "template __global__ void gemm<CFG>(float *);\n";

std::string with_include(const std::string &header) { return "#include \"" + header + "\"\n" + kGemm; }

}  // namespace

// The probe of the issue: a plain tree, every spelling of its include folder.
TEST(Relocation, AHeaderTreeHitsUnderAnotherPrefixInEverySpelling) {
    const auto spellings = [](const std::string &inc) {
        return std::vector<std::vector<std::string>>{{"-I" + inc}, {"-I=" + inc},           {"--include-path=" + inc},
                                                     {"-I", inc},  {"--include-path", inc}, {"-I" + inc + "/"}};
    };
    for (std::size_t i = 0; i < spellings("").size(); ++i) {
        Installs in;
        in.write("tile.h", "#include \"detail/cfg.h\"\n");
        in.write("detail/cfg.h", "#define CFG 126\n");
        expect_relocation(in, {with_include("tile.h"), spellings(in.a)[i], {}, {}},
                          {with_include("tile.h"), spellings(in.b)[i], {}, {}}, true);
    }
    Installs in;
    in.write("tile.h", "#define CFG 127\n");
    expect_relocation(in, {with_include("tile.h"), {}, {in.a}, {}}, {with_include("tile.h"), {}, {in.b}, {}}, true);
}

// What is found is what counts: another header under B, or one that shadows it, is a miss.
TEST(Relocation, DifferentFilesUnderTheOtherPrefixMiss) {
    Installs in;
    make_dirs(in.dir.file("A/first"));
    make_dirs(in.dir.file("B/first"));
    in.write("tile.h", "#define CFG 3\n");
    const Call a{with_include("tile.h"), {"-I" + in.dir.file("A/first"), "-I" + in.a}, {}, {}};
    const Call b{with_include("tile.h"), {"-I" + in.dir.file("B/first"), "-I" + in.b}, {}, {}};
    ASSERT_EQ(compile(in.cache, a).status, KJIT_OK);
    write_file(in.dir.file("B/first/tile.h"), "#define CFG 4\n");  // shadows B/inc/tile.h
    const std::uint64_t before = nvrtc_runs();
    const Answer shadowed = compile(in.cache, b);
    EXPECT_EQ(nvrtc_runs(), before + 1);
    EXPECT_TRUE(read_file(shadowed.cubin) == plain_nvrtc(b)) << "the cubin is not plain NVRTC's bytes";
    ::unlink(in.dir.file("B/first/tile.h").c_str());
    write_file(in.b + "/tile.h", "#define CFG 5\n");  // edited
    const Answer edited = compile(in.cache, b);
    EXPECT_EQ(nvrtc_runs(), before + 2);
    EXPECT_TRUE(read_file(edited.cubin) == plain_nvrtc(b)) << "the cubin is not plain NVRTC's bytes";
    write_file(in.b + "/tile.h", "#define CFG 3\n");  // as under A again
    EXPECT_EQ(compile(in.cache, b).cubin, compile(in.cache, a).cubin);
    EXPECT_EQ(nvrtc_runs(), before + 2);
}

// __FILE__ in a header names its folder in the cubin: the entry serves that prefix only.
// A header under B of the same size and mtime as A's but other text (written in the same
// timestamp tick, or extracted from archives with the same date) is another file, not A's: size
// and mtime stand for the content only of the file a record was made from. Old enough that
// neither is young, so nothing else makes its content be read.
TEST(Relocation, AnotherFileOfTheSameSizeAndMtimeUnderTheOtherPrefixMisses) {
    Installs in;
    write_file(in.a + "/tile.h", "#define CFG 6\n");
    write_file(in.b + "/tile.h", "#define CFG 7\n");
    const struct timespec old[2] = {{1'600'000'000, 123'456'789}, {1'600'000'000, 123'456'789}};
    for (const std::string &root : {in.a, in.b})
        ASSERT_EQ(::utimensat(AT_FDCWD, (root + "/tile.h").c_str(), old, 0), 0);
    expect_relocation(in, {with_include("tile.h"), {}, {in.a}, {}}, {with_include("tile.h"), {}, {in.b}, {}}, false);
}

TEST(Relocation, FileMacroInAHeaderKeepsThePrefix) {
    Installs in;
    in.write("where.h", "#define CFG 9\n__device__ const char *where() { return __FILE__; }\n");
    const std::string source = "#include \"where.h\"\n"
                               "template <int V> __global__ void gemm(const char **p) { p[V] = where(); }\n"
                               "template __global__ void gemm<CFG>(const char **);\n";
    expect_relocation(in, {source, {"-I" + in.a}, {}, {}}, {source, {"-I" + in.b}, {}, {}}, false);
}

// ... and so does __FILE__ in a macro defined in one header and expanded in another.
TEST(Relocation, FileMacroFromAnotherHeaderKeepsThePrefix) {
    Installs in;
    in.write("macros.h", "#define HERE __FILE__\n");
    in.write("use.h", "#include <macros.h>\n#define CFG 10\n__device__ const char *where() { return HERE; }\n");
    const std::string source = "#include <use.h>\n"
                               "template <int V> __global__ void gemm(const char **p) { p[V] = where(); }\n"
                               "template __global__ void gemm<CFG>(const char **);\n";
    expect_relocation(in, {source, {"-I" + in.a}, {}, {}}, {source, {"-I" + in.b}, {}, {}}, false);
}

// NVRTC's built-in assert names the file it is expanded in, unless NDEBUG is defined.
TEST(Relocation, AssertKeepsThePrefixUnlessNdebug) {
    Installs in;
    in.write("check.h", "#define CFG 11\n__device__ void check(float *p) { assert(p != 0); }\n");
    const std::string source = "#include \"check.h\"\n"
                               "template <int V> __global__ void gemm(float *p) { check(p); p[0] = V; }\n"
                               "template __global__ void gemm<CFG>(float *);\n";
    expect_relocation(in, {source, {"-I" + in.a}, {}, {}}, {source, {"-I" + in.b}, {}, {}}, false);
    Installs quiet;
    quiet.write("check.h", "#define CFG 12\n__device__ void check(float *p) { assert(p != 0); }\n");
    expect_relocation(quiet, {source, {"-DNDEBUG", "-I" + quiet.a}, {}, {}},
                      {source, {"-DNDEBUG", "-I" + quiet.b}, {}, {}}, true);
    // NVRTC defines its assert before it reads the source: a later #undef NDEBUG changes nothing.
    Installs undone;
    undone.write("check.h", "#undef NDEBUG\n#define CFG 13\n__device__ void check(float *p) { assert(p != 0); }\n");
    expect_relocation(undone, {source, {"-DNDEBUG", "-I" + undone.a}, {}, {}},
                      {source, {"-DNDEBUG", "-I" + undone.b}, {}, {}}, true);
    // But -UNDEBUG after it does.
    Installs loud;
    loud.write("check.h", "#define CFG 21\n__device__ void check(float *p) { assert(p != 0); }\n");
    expect_relocation(loud, {source, {"-DNDEBUG", "-UNDEBUG", "-I" + loud.a}, {}, {}},
                      {source, {"-DNDEBUG", "-UNDEBUG", "-I" + loud.b}, {}, {}}, false);
}

// #line renames the file, with a name of its own: the bytes agree, and so does the key.
TEST(Relocation, LineDirectiveAloneDoesNotKeepThePrefix) {
    Installs in;
    in.write("line.h", "#line 40 \"fixed.h\"\n#define CFG 14\n__device__ float twice(float x) { return 2 * x; }\n");
    expect_relocation(in, {with_include("line.h"), {"-I" + in.a}, {}, {}},
                      {with_include("line.h"), {"-I" + in.b}, {}, {}}, true);
}

// Device debug information names each file by its path: the prefix stays in the key.
TEST(Relocation, LineInformationKeepsThePrefix) {
    Installs in;
    in.write("code.h", "#define CFG 15\n__device__ float twice(float x) {\n  return 2 * x;\n}\n");
    const std::string source = "#include \"code.h\"\n"
                               "template <int V> __global__ void gemm(float *p) { p[0] = twice(V); }\n"
                               "template __global__ void gemm<CFG>(float *);\n";
    expect_relocation(in, {source, {"-G", "-I" + in.a}, {}, {}}, {source, {"-G", "-I" + in.b}, {}, {}}, false);
    // -lineinfo: NVRTC 13.0 gives this kernel the same bytes under both prefixes, but a line
    // table may name the files, so libkjit keeps the prefix (a needless miss, never a wrong hit).
    Installs lines;
    lines.write("code.h", "#define CFG 22\n__device__ float twice(float x) {\n  return 2 * x;\n}\n");
    const Call a{source, {"-lineinfo", "-I" + lines.a}, {}, {}}, b{source, {"-lineinfo", "-I" + lines.b}, {}, {}};
    const std::uint64_t before = nvrtc_runs();
    EXPECT_TRUE(read_file(compile(lines.cache, a).cubin) == plain_nvrtc(a)) << "the cubin is not plain NVRTC's bytes";
    EXPECT_TRUE(read_file(compile(lines.cache, b).cubin) == plain_nvrtc(b)) << "the cubin is not plain NVRTC's bytes";
    EXPECT_EQ(nvrtc_runs(), before + 2);
}

// An absolute name in the text is that file wherever the request comes from: it stays keyed by
// its path and content, not relative to a folder.
TEST(Relocation, AbsoluteHasIncludeStaysAbsolute) {
    Installs in;
    const std::string optional = in.a + "/opt.h";
    in.write("tile.h", "#if __has_include(\"" + optional + "\")\n#define CFG 16\n#else\n#define CFG 17\n#endif\n");
    write_file(optional, "\n");
    expect_relocation(in, {with_include("tile.h"), {"-I" + in.a}, {}, {}},
                      {with_include("tile.h"), {"-I" + in.b}, {}, {}}, true);
    // Gone: B's request reads another answer from the same text.
    ::unlink(optional.c_str());
    const Call b{with_include("tile.h"), {"-I" + in.b}, {}, {}};
    const std::uint64_t before = nvrtc_runs();
    const Answer gone = compile(in.cache, b);
    EXPECT_EQ(nvrtc_runs(), before + 1);
    EXPECT_TRUE(read_file(gone.cubin) == plain_nvrtc(b)) << "the cubin is not plain NVRTC's bytes";
}

// An absolute pre-included file and an absolute program name are folders of their own.
TEST(Relocation, AbsolutePreIncludeAndProgramNameMoveToo) {
    Installs in;
    in.write("pre.h", "#define CFG 18\n");
    expect_relocation(in, {kGemm, {"-include", in.a + "/pre.h"}, {}, {}},
                      {kGemm, {"-include", in.b + "/pre.h"}, {}, {}}, true);
    Installs named;
    named.write("cfg.h", "#define CFG 19\n");
    expect_relocation(named, {with_include("cfg.h"), {}, {}, named.a + "/gemm.cu"},
                      {with_include("cfg.h"), {}, {}, named.b + "/gemm.cu"}, true);
    // __FILE__ in the source names the program's absolute name: that prefix only.
    Installs file;
    file.write("cfg.h", "#define CFG 20\n");
    const std::string source = "#include \"cfg.h\"\n"
                               "template <int V> __global__ void gemm(const char **p) { p[V] = __FILE__; }\n"
                               "template __global__ void gemm<CFG>(const char **);\n";
    expect_relocation(file, {source, {}, {}, file.a + "/gemm.cu"}, {source, {}, {}, file.b + "/gemm.cu"}, false);
}

// Base folders, as ccache's base_dir: a pinned tree (DeepGEMM's asserts name __FILE__) hits under
// another prefix when both lie at the same place under their base folder, and the cubin then
// names the folder it was built in (the documented difference); without them it compiles.
TEST(Relocation, BaseFoldersMoveWhatNamesItsFolder) {
    Installs in;
    in.write("dg/assert.h", "#define DG_HERE __FILE__\n");
    in.write("dg/gemm.h",
             "#include \"assert.h\"\n#define CFG 23\n__device__ const char *where() { return DG_HERE; }\n");
    const std::string source = "#include <dg/gemm.h>\n"
                               "template <int V> __global__ void gemm(const char **p) { p[V] = where(); }\n"
                               "template __global__ void gemm<CFG>(const char **);\n";
    const Call a{source, {"-I" + in.a}, {}, {}, {in.dir.file("A")}};
    const Call b{source, {"-I" + in.b}, {}, {}, {in.dir.file("B/")}};  // a trailing '/' is the same folder
    ASSERT_NE(plain_nvrtc(a), plain_nvrtc(b));
    const std::uint64_t before = nvrtc_runs();
    const Answer built = compile(in.cache, a);
    ASSERT_EQ(built.status, KJIT_OK) << built.error;
    const Answer moved = compile(in.cache, b);
    ASSERT_EQ(moved.status, KJIT_OK) << moved.error;
    EXPECT_EQ(nvrtc_runs(), before + 1);
    EXPECT_EQ(moved.cubin, built.cubin);
    EXPECT_TRUE(read_file(moved.cubin) == plain_nvrtc(a)) << "the cubin names the folder it was built in";
    // Without base folders, or with one that holds the folders at another place: a compile.
    Call bare = b, elsewhere = b;
    bare.base_dirs.clear();
    elsewhere.base_dirs = {in.dir.path()};  // B/inc is "{base 0}/B/inc" here, A's "{base 0}/inc"
    EXPECT_TRUE(read_file(compile(in.cache, bare).cubin) == plain_nvrtc(b)) << "another prefix's cubin";
    EXPECT_EQ(nvrtc_runs(), before + 2);
    EXPECT_TRUE(read_file(compile(in.cache, elsewhere).cubin) == plain_nvrtc(b)) << "another prefix's cubin";
    EXPECT_EQ(nvrtc_runs(), before + 3);
    // Device debug information likewise: its locations keyed relative to the base folder.
    Call debug_a = a, debug_b = b;
    debug_a.options.push_back("-G");
    debug_b.options.push_back("-G");
    const Answer debug_built = compile(in.cache, debug_a);
    EXPECT_EQ(compile(in.cache, debug_b).cubin, debug_built.cubin);
    EXPECT_EQ(nvrtc_runs(), before + 4);
}

// A base folder must be absolute: a relative one would mean another folder in each process.
TEST(Relocation, ARelativeBaseFolderIsRefused) {
    Installs in;
    in.write("tile.h", "#define CFG 24\n");
    const Answer refused = compile(in.cache, {with_include("tile.h"), {"-I" + in.a}, {}, {}, {"venv"}});
    EXPECT_EQ(refused.status, KJIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(refused.error.find("base folder 'venv' is not absolute"), std::string::npos) << refused.error;
}
