// Every file NVRTC may read is in the key by content, whichever way it was reached (DESIGN.md,
// "Trust"): the working directory, an absolute #include, -I / --include-path among the NVRTC
// options (every spelling, relative ones too), -include / --pre-include, and a header's own
// folder. Through libkjit.so, as users link it. Each test edits a header and expects a cubin
// built from the new text: the kernel's mangled name carries the header's constant.
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

// gemm<CFG> with CFG from a header: the mangled name says which header text was compiled.
const char *const kQuoted = "#include \"cfg.h\"\n"
                            "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                            "template __global__ void gemm<CFG>(float *);\n";
const char *const kAngle = "#include <cfg.h>\n"
                           "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                           "template __global__ void gemm<CFG>(float *);\n";
const char *const kNoInclude = "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                               "template __global__ void gemm<CFG>(float *);\n";

std::string name_for(int cfg) { return "_Z4gemmILi" + std::to_string(cfg) + "EEvPf"; }
std::string cfg_text(int cfg) { return "#define CFG " + std::to_string(cfg) + "\n"; }

struct Answer {
    kjit_status status = KJIT_OK;
    std::string cubin;
    std::string name;  // resolved from the cubin for "gemm"
    std::string error;
};

// kjit_compile through the C ABI, then the name the cubin holds.
Answer compile(const std::string &cache, const std::string &source, const std::vector<std::string> &options,
               const std::vector<std::string> &include_paths = {},
               const std::vector<std::pair<std::string, std::string>> &headers = {},
               const char *program_name = nullptr) {
    std::vector<const char *> opts, incs;
    std::vector<kjit_header> hdrs;
    for (const auto &o : options) opts.push_back(o.c_str());
    for (const auto &p : include_paths) incs.push_back(p.c_str());
    for (const auto &h : headers) hdrs.push_back(kjit_header{h.first.c_str(), h.second.c_str()});
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.nvrtc_options = opts.data();
    o.nvrtc_option_count = opts.size();
    o.include_paths = incs.data();
    o.include_path_count = incs.size();
    o.headers = hdrs.data();
    o.header_count = hdrs.size();
    o.program_name = program_name;
    Answer a;
    char path[4096];
    a.status = kjit_compile(source.c_str(), "gemm", &o, path, sizeof path, nullptr);
    if (a.status != KJIT_OK) {
        a.error = kjit_last_error();
        return a;
    }
    a.cubin = path;
    char name[512];
    const kjit_status st = kjit_resolve_name(path, "gemm", name, sizeof name, nullptr);
    if (st == KJIT_OK) {
        a.name = name;
    } else {
        a.status = st;
        a.error = kjit_last_error();
    }
    return a;
}

// The working directory for one scope.
class InFolder {
public:
    explicit InFolder(const std::string &dir) {
        if (::getcwd(saved_, sizeof saved_) == nullptr) saved_[0] = '\0';
        EXPECT_EQ(::chdir(dir.c_str()), 0) << dir;
    }
    InFolder(const InFolder &) = delete;
    InFolder &operator=(const InFolder &) = delete;
    ~InFolder() {
        if (saved_[0] != '\0') {
            EXPECT_EQ(::chdir(saved_), 0);
        }
    }

private:
    char saved_[PATH_MAX];
};

kjit_stats stats() {
    kjit_stats s = KJIT_STATS_INIT;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_OK);
    return s;
}

void make_dir(const std::string &path) { ::mkdir(path.c_str(), 0755); }

// The compile succeeded and its cubin holds gemm<cfg>.
void expect_name(const Answer &a, int cfg) {
    EXPECT_EQ(a.status, KJIT_OK) << kjit_status_string(a.status) << ": " << a.error;
    EXPECT_EQ(a.name, name_for(cfg));
}

}  // namespace

// NVRTC searches the working directory for the source's quoted includes (its program is named
// "source.cu", whose folder is "."): an edit there is a miss.
TEST(Headers, WorkingDirectoryHeaderEnters) {
    TempDir dir;
    make_dir(dir.file("proj"));
    write_file(dir.file("proj/cfg.h"), cfg_text(1));
    InFolder in(dir.file("proj"));
    const Answer first = compile(dir.file("cache"), kQuoted, {});
    expect_name(first, 1);
    // Unchanged: a hit on the same entry (the checks cost no needless miss).
    const kjit_stats before = stats();
    EXPECT_EQ(compile(dir.file("cache"), kQuoted, {}).cubin, first.cubin);
    EXPECT_EQ(stats().compile_hits, before.compile_hits + 1);
    EXPECT_EQ(stats().compile_misses, before.compile_misses);
    write_file(dir.file("proj/cfg.h"), cfg_text(22));
    expect_name(compile(dir.file("cache"), kQuoted, {}), 22);
    write_file(dir.file("proj/cfg.h"), cfg_text(1));  // reverted: the old text again
    expect_name(compile(dir.file("cache"), kQuoted, {}), 1);
}

// NVRTC looks the source's quoted names up in its program name's folder first (taken against the
// working directory when relative), as it does for a header: a program named "sub/mod.cu" reads
// sub/cfg.h, not ./cfg.h, and an edit there is a miss.
TEST(Headers, ProgramNameFolderIsSearchedFirst) {
    TempDir dir;
    make_dir(dir.file("proj"));
    make_dir(dir.file("proj/sub"));
    write_file(dir.file("proj/cfg.h"), cfg_text(1));
    write_file(dir.file("proj/sub/cfg.h"), cfg_text(2));
    InFolder in(dir.file("proj"));
    expect_name(compile(dir.file("cache"), kQuoted, {}, {}, {}, "sub/mod.cu"), 2);
    expect_name(compile(dir.file("cache"), kQuoted, {}, {}, {}, nullptr), 1);
    write_file(dir.file("proj/sub/cfg.h"), cfg_text(5));
    expect_name(compile(dir.file("cache"), kQuoted, {}, {}, {}, "sub/mod.cu"), 5);
    // The working directory's cfg.h now shadows nothing for that program: it is not its folder.
    ::unlink(dir.file("proj/sub/cfg.h").c_str());
    EXPECT_NE(compile(dir.file("cache"), kQuoted, {}, {}, {}, "sub/mod.cu").status, KJIT_OK);
}

// An absolute program name: its folder, wherever the call is made from. The working directory
// then plays no part, so two folders share the entry; an edit of the header is a miss.
TEST(Headers, AbsoluteProgramNameIsTheSameFromEveryFolder) {
    TempDir dir;
    make_dir(dir.file("lib"));
    make_dir(dir.file("a"));
    make_dir(dir.file("b"));
    write_file(dir.file("lib/cfg.h"), cfg_text(4));
    write_file(dir.file("a/cfg.h"), cfg_text(7));  // never read: not the program's folder
    const std::string program = dir.file("lib/mod.cu");
    Answer from_a, from_b;
    {
        InFolder in(dir.file("a"));
        from_a = compile(dir.file("cache"), kQuoted, {}, {}, {}, program.c_str());
    }
    {
        InFolder in(dir.file("b"));
        from_b = compile(dir.file("cache"), kQuoted, {}, {}, {}, program.c_str());
    }
    expect_name(from_a, 4);
    expect_name(from_b, 4);
    EXPECT_EQ(from_a.cubin, from_b.cubin);
    write_file(dir.file("lib/cfg.h"), cfg_text(8));
    InFolder in(dir.file("b"));
    expect_name(compile(dir.file("cache"), kQuoted, {}, {}, {}, program.c_str()), 8);
}

// The same source and options from two projects, each with its own cfg.h: two answers, two
// entries (a shared entry would be replaced under the other project's feet).
TEST(Headers, TwoProjectsWithTheirOwnCfgDoNotShareAnEntry) {
    TempDir dir;
    make_dir(dir.file("a"));
    make_dir(dir.file("b"));
    write_file(dir.file("a/cfg.h"), cfg_text(1));
    write_file(dir.file("b/cfg.h"), cfg_text(2));
    Answer a1, b1, a2;
    {
        InFolder in(dir.file("a"));
        a1 = compile(dir.file("cache"), kQuoted, {"-std=c++17"});
    }
    {
        InFolder in(dir.file("b"));
        b1 = compile(dir.file("cache"), kQuoted, {"-std=c++17"});
    }
    {
        InFolder in(dir.file("a"));
        a2 = compile(dir.file("cache"), kQuoted, {"-std=c++17"});
    }
    expect_name(a1, 1);
    expect_name(b1, 2);
    expect_name(a2, 1);
    EXPECT_NE(a1.cubin, b1.cubin);
    EXPECT_EQ(a1.cubin, a2.cubin);
}

// Issue 35 item 2: a generated source's `#include "builtin.h"`, found through an include path,
// is first looked up in the working directory. What that probe found (nothing) is recorded
// relative to the working directory, not the folder itself: the same request from another
// folder with no builtin.h of its own hits the same entry, with no NVRTC run; one whose folder
// holds a builtin.h misses and compiles against it; once that file is gone, the first entry
// hits again. The in-process proofs (the hit memo, the header watch) follow the folder too.
TEST(Headers, SecondWorkingDirectoryHitsWhenItsFilesAreTheSame) {
    TempDir dir;
    for (const char *p : {"inc", "a", "b"}) make_dir(dir.file(p));
    write_file(dir.file("inc/cfg.h"), cfg_text(1));
    const std::string cache = dir.file("cache");
    const std::vector<std::string> inc = {dir.file("inc")};
    const kjit_stats start = stats();
    Answer first;
    {
        InFolder in(dir.file("a"));
        first = compile(cache, kQuoted, {}, inc);
        expect_name(first, 1);
        EXPECT_EQ(compile(cache, kQuoted, {}, inc).cubin, first.cubin);  // a repeat, proven in a/
    }
    {
        InFolder in(dir.file("b"));
        const Answer from_b = compile(cache, kQuoted, {}, inc);
        expect_name(from_b, 1);
        EXPECT_EQ(from_b.cubin, first.cubin);
        EXPECT_EQ(stats().compile_misses, start.compile_misses + 1) << "the second folder compiled again";
        // A shadowing header appears in b/: a miss, compiled against it.
        write_file(dir.file("b/cfg.h"), cfg_text(2));
        const Answer shadowed = compile(cache, kQuoted, {}, inc);
        expect_name(shadowed, 2);
        EXPECT_NE(shadowed.cubin, first.cubin);
        EXPECT_EQ(compile(cache, kQuoted, {}, inc).cubin, shadowed.cubin);
    }
    {
        // Back in a/, which has no cfg.h: the first entry, though b/'s was the last answer.
        InFolder in(dir.file("a"));
        const Answer again = compile(cache, kQuoted, {}, inc);
        expect_name(again, 1);
        EXPECT_EQ(again.cubin, first.cubin);
    }
    {
        InFolder in(dir.file("b"));
        ::unlink(dir.file("b/cfg.h").c_str());
        const Answer removed = compile(cache, kQuoted, {}, inc);
        expect_name(removed, 1);
        EXPECT_EQ(removed.cubin, first.cubin);
    }
    EXPECT_EQ(stats().compile_misses, start.compile_misses + 2);
}

// A relative include folder among the NVRTC options is recorded relative too: two folders whose
// inc/cfg.h say the same share one entry, and one whose inc/cfg.h differs gets its own; a
// header reached with "../" from the working directory is checked in each folder's parent.
TEST(Headers, RelativeLookupsAreSharedAcrossFoldersWithTheSameFiles) {
    TempDir dir;
    for (const char *p : {"p1", "p1/wd", "p1/wd/inc", "p2", "p2/wd", "p2/wd/inc", "p3", "p3/wd", "p3/wd/inc"}) {
        make_dir(dir.file(p));
    }
    for (const char *p : {"p1", "p2", "p3"}) {
        write_file(dir.file(std::string(p) + "/wd/inc/cfg.h"), cfg_text(std::string(p) == "p3" ? 4 : 3));
        write_file(dir.file(std::string(p) + "/up.h"), std::string(p) == "p2" ? "#define UP 20\n" : "#define UP 0\n");
    }
    const std::string cache = dir.file("cache");
    const std::string source = "#include \"../up.h\"\n#include <cfg.h>\n"
                               "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                               "template __global__ void gemm<CFG + UP>(float *);\n";
    Answer in1, in2, in3;
    {
        InFolder in(dir.file("p1/wd"));
        in1 = compile(cache, source, {"-Iinc"});
    }
    const kjit_stats after_first = stats();
    {
        InFolder in(dir.file("p3/wd"));
        in3 = compile(cache, source, {"-Iinc"});
    }
    {
        InFolder in(dir.file("p2/wd"));
        in2 = compile(cache, source, {"-Iinc"});
    }
    expect_name(in1, 3);
    expect_name(in3, 4);   // its own inc/cfg.h
    expect_name(in2, 23);  // its own ../up.h
    EXPECT_NE(in3.cubin, in1.cubin);
    EXPECT_NE(in2.cubin, in1.cubin);
    EXPECT_EQ(stats().compile_misses, after_first.compile_misses + 2);
    write_file(dir.file("p2/up.h"), "#define UP 0\n");  // now p2 is p1's twin
    const kjit_stats before_twin = stats();
    InFolder in(dir.file("p2/wd"));
    const Answer twin = compile(cache, source, {"-Iinc"});
    expect_name(twin, 3);
    EXPECT_EQ(twin.cubin, in1.cubin);
    EXPECT_EQ(stats().compile_misses, before_twin.compile_misses);
}

// Line information names the program's file by its absolute path (the working directory's):
// with -lineinfo or -G, two folders never share an entry, even over the same files.
TEST(Headers, LineInformationKeepsTheWorkingDirectoryInTheKey) {
    TempDir dir;
    for (const char *p : {"inc", "a", "b"}) make_dir(dir.file(p));
    write_file(dir.file("inc/cfg.h"), cfg_text(5));
    const std::string cache = dir.file("cache");
    for (const char *option : {"-lineinfo", "--generate-line-info", "-G"}) {
        SCOPED_TRACE(option);
        Answer from_a, from_b;
        {
            InFolder in(dir.file("a"));
            from_a = compile(cache, kQuoted, {option}, {dir.file("inc")});
        }
        {
            InFolder in(dir.file("b"));
            from_b = compile(cache, kQuoted, {option}, {dir.file("inc")});
        }
        expect_name(from_a, 5);
        expect_name(from_b, 5);
        EXPECT_NE(from_a.cubin, from_b.cubin);
        const std::string cubin = read_file(from_b.cubin);
        EXPECT_NE(cubin.find(dir.file("b")), std::string::npos) << "the cubin does not name its folder";
    }
}

// A header in the working directory shadows one under include_paths for a quoted include:
// creating it later must be a miss.
TEST(Headers, NewHeaderInTheWorkingDirectoryShadowsAnIncludePath) {
    TempDir dir;
    make_dir(dir.file("proj"));
    make_dir(dir.file("inc"));
    write_file(dir.file("inc/cfg.h"), cfg_text(1));
    InFolder in(dir.file("proj"));
    expect_name(compile(dir.file("cache"), kQuoted, {}, {dir.file("inc")}), 1);
    write_file(dir.file("proj/cfg.h"), cfg_text(33));
    expect_name(compile(dir.file("cache"), kQuoted, {}, {dir.file("inc")}), 33);
}

TEST(Headers, AbsoluteIncludeEnters) {
    TempDir dir;
    make_dir(dir.file("lib"));
    write_file(dir.file("lib/cfg.h"), cfg_text(4));
    const std::string source = "#include \"" + dir.file("lib/cfg.h") + "\"\n" + kNoInclude;
    expect_name(compile(dir.file("cache"), source, {}), 4);
    write_file(dir.file("lib/cfg.h"), cfg_text(44));
    expect_name(compile(dir.file("cache"), source, {}), 44);
}

// Every spelling NVRTC accepts for an include folder among its options.
TEST(Headers, IncludeFolderAmongNvrtcOptionsEnters) {
    TempDir dir;
    make_dir(dir.file("inc"));
    const std::string inc = dir.file("inc");
    const std::vector<std::vector<std::string>> spellings = {
        {"-I" + inc}, {"-I", inc}, {"--include-path=" + inc}, {"--include-path", inc}, {"-std=c++17", "-I " + inc}};
    int cfg = 5;
    for (const auto &options : spellings) {
        SCOPED_TRACE(options.back());
        write_file(dir.file("inc/cfg.h"), cfg_text(cfg));
        expect_name(compile(dir.file("cache"), kAngle, options), cfg);
        write_file(dir.file("inc/cfg.h"), cfg_text(cfg + 100));
        expect_name(compile(dir.file("cache"), kAngle, options), cfg + 100);
        ++cfg;
    }
}

// A relative include folder is relative to the working directory: two projects, two answers.
TEST(Headers, RelativeIncludeFolderAmongNvrtcOptions) {
    TempDir dir;
    for (const char *p : {"a", "a/inc", "b", "b/inc"}) make_dir(dir.file(p));
    write_file(dir.file("a/inc/cfg.h"), cfg_text(6));
    write_file(dir.file("b/inc/cfg.h"), cfg_text(7));
    {
        InFolder in(dir.file("a"));
        expect_name(compile(dir.file("cache"), kAngle, {"-Iinc"}), 6);
        write_file(dir.file("a/inc/cfg.h"), cfg_text(66));
        expect_name(compile(dir.file("cache"), kAngle, {"-Iinc"}), 66);
    }
    {
        InFolder in(dir.file("b"));
        expect_name(compile(dir.file("cache"), kAngle, {"-Iinc"}), 7);
    }
}

// -include / --pre-include: found in the working directory first, then the include folders.
TEST(Headers, PreIncludedFileEnters) {
    TempDir dir;
    make_dir(dir.file("inc"));
    make_dir(dir.file("proj"));
    const std::string abs = dir.file("inc/cfg.h");
    const std::vector<std::vector<std::string>> spellings = {
        {"-include", abs}, {"-include=" + abs}, {"--pre-include=" + abs}, {"--pre-include", abs}};
    int cfg = 8;
    for (const auto &options : spellings) {
        SCOPED_TRACE(options.front());
        write_file(abs, cfg_text(cfg));
        expect_name(compile(dir.file("cache"), kNoInclude, options), cfg);
        write_file(abs, cfg_text(cfg + 100));
        expect_name(compile(dir.file("cache"), kNoInclude, options), cfg + 100);
        ++cfg;
    }
    // Relative: the working directory's cfg.h; once it is gone, the include folder's.
    InFolder in(dir.file("proj"));
    write_file(dir.file("proj/cfg.h"), cfg_text(12));
    expect_name(compile(dir.file("cache"), kNoInclude, {"-I" + dir.file("inc"), "-include", "cfg.h"}), 12);
    write_file(dir.file("proj/cfg.h"), cfg_text(13));
    expect_name(compile(dir.file("cache"), kNoInclude, {"-I" + dir.file("inc"), "-include", "cfg.h"}), 13);
    ::unlink(dir.file("proj/cfg.h").c_str());
    expect_name(compile(dir.file("cache"), kNoInclude, {"-I" + dir.file("inc"), "-include", "cfg.h"}), cfg + 99);
}

// A header found in one folder includes a quoted name found in its own folder (another
// folder than any include folder), and an in-memory header's quoted include is looked up
// relative to the working directory.
TEST(Headers, HeaderFromAHeaderInAnotherFolderEnters) {
    TempDir dir;
    for (const char *p : {"lib", "lib/detail", "proj"}) make_dir(dir.file(p));
    write_file(dir.file("lib/top.h"), "#include \"detail/cfg.h\"\n");
    write_file(dir.file("lib/detail/cfg.h"), cfg_text(14));
    const std::string source = "#include \"" + dir.file("lib/top.h") + "\"\n" + kNoInclude;
    expect_name(compile(dir.file("cache"), source, {}), 14);
    write_file(dir.file("lib/detail/cfg.h"), cfg_text(15));
    expect_name(compile(dir.file("cache"), source, {}), 15);

    write_file(dir.file("lib/detail/inner.h"), "#include \"cfg.h\"\n");  // its own folder: detail/
    expect_name(compile(dir.file("cache"), "#include <detail/inner.h>\n" + std::string(kNoInclude),
                        {"-I", dir.file("lib")}),
                15);
    write_file(dir.file("lib/detail/cfg.h"), cfg_text(16));
    expect_name(compile(dir.file("cache"), "#include <detail/inner.h>\n" + std::string(kNoInclude),
                        {"-I", dir.file("lib")}),
                16);

    InFolder in(dir.file("proj"));
    write_file(dir.file("proj/cfg.h"), cfg_text(17));
    const std::vector<std::pair<std::string, std::string>> memory = {{"mem.h", "#include \"cfg.h\"\n"}};
    const std::string via_memory = "#include <mem.h>\n" + std::string(kNoInclude);
    expect_name(compile(dir.file("cache"), via_memory, {}, {}, memory), 17);
    write_file(dir.file("proj/cfg.h"), cfg_text(18));
    expect_name(compile(dir.file("cache"), via_memory, {}, {}, memory), 18);
}

// kjit_compile_batch looks requests up and compiles them the same way.
TEST(Headers, BatchSeesIncludeFoldersAmongNvrtcOptions) {
    TempDir dir;
    make_dir(dir.file("inc"));
    const std::string cache = dir.file("cache");
    const std::string inc = "-I" + dir.file("inc");
    auto batch_name = [&]() {
        const char *opts[] = {inc.c_str()};
        kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
        o.cache_dir = cache.c_str();
        o.arch = "sm_90";
        o.nvrtc_options = opts;
        o.nvrtc_option_count = 1;
        kjit_compile_request r = KJIT_COMPILE_REQUEST_INIT;
        r.source = kAngle;
        r.keyword = "gemm";
        r.options = &o;
        const kjit_compile_request *items[] = {&r};
        kjit_batch_result *result = nullptr;
        const kjit_status st = kjit_compile_batch(items, 1, nullptr, &result);
        EXPECT_EQ(st, KJIT_OK) << kjit_last_error();
        std::string name;
        if (result && kjit_batch_result_status(result, 0) == KJIT_OK) {
            char buf[512];
            if (kjit_resolve_name(kjit_batch_result_cubin_path(result, 0), "gemm", buf, sizeof buf, nullptr) ==
                KJIT_OK) {
                name = buf;
            }
        }
        kjit_batch_result_release(result);
        return name;
    };
    write_file(dir.file("inc/cfg.h"), cfg_text(19));
    EXPECT_EQ(batch_name(), name_for(19));
    write_file(dir.file("inc/cfg.h"), cfg_text(20));
    EXPECT_EQ(batch_name(), name_for(20));
}

// An include folder or pre-include option without its value would take the next option (one
// libkjit adds) as its value: refused, naming the option.
TEST(Headers, FileOptionWithoutValueIsRefused) {
    TempDir dir;
    for (const char *bad : {"-I", "--include-path", "-include", "--pre-include"}) {
        const Answer a = compile(dir.file("cache"), kQuoted, {"-std=c++17", bad});
        EXPECT_EQ(a.status, KJIT_ERROR_INVALID_ARGUMENT) << bad;
        EXPECT_NE(a.error.find(bad), std::string::npos) << a.error;
    }
}

namespace {

// The folders of NVRTC's PCHs this process has made, one per header identity, under
// $TMPDIR/kjit-pch-<pid>-* (docs/batch.md).
std::size_t pch_identities() {
    const char *tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : "/tmp";
    const std::string prefix = "kjit-pch-" + std::to_string(::getpid()) + "-";
    std::size_t n = 0;
    for (const std::string &name : list_dir(base)) {
        if (name.compare(0, prefix.size(), prefix) == 0) n += list_dir(base + "/" + name).size();
    }
    return n;
}

}  // namespace

// `--pch` among the NVRTC options (DeepGEMM passes it by default) goes through libkjit's PCH
// folders, one per header identity: NVRTC itself would reuse the PCH it made before a header
// edit, compile the miss against the old header and publish that under the new key. Every
// spelling; the kernel name carries the header's value. The PCH is not in the key: with and
// without `--pch` is one entry.
TEST(Headers, PchOptionNeverCompilesAgainstAnOldHeader) {
    TempDir dir;
    make_dir(dir.file("inc"));
    const std::string cccl = std::string("-I") + KJIT_TEST_CUDA_INCLUDE + "/cccl";
    // Heavy enough that NVRTC makes a PCH of it: the configuration, then a CCCL header.
    const std::string source = "#include <cfg.h>\n#include <cuda/std/cstdint>\n" + std::string(kNoInclude);
    const std::size_t identities_before = pch_identities();
    int cfg = 30;
    for (const std::vector<std::string> &pch : std::vector<std::vector<std::string>>{
             {"--pch"}, {"-pch"}, {"-pch", "--pch-messages=false", "-pch-verbose", "true"}}) {
        SCOPED_TRACE(pch.front() + (pch.size() > 1 ? " ..." : ""));
        std::vector<std::string> options = {cccl, "-std=c++17"};
        options.insert(options.end(), pch.begin(), pch.end());
        write_file(dir.file("inc/cfg.h"), cfg_text(cfg));
        const Answer first = compile(dir.file("cache"), source, options, {dir.file("inc")});
        expect_name(first, cfg);
        write_file(dir.file("inc/cfg.h"), cfg_text(cfg + 1));
        expect_name(compile(dir.file("cache"), source, options, {dir.file("inc")}), cfg + 1);
        // Not in the key: the same request without the PCH is the same entry, a hit.
        const Answer plain = compile(dir.file("cache"), source, {cccl, "-std=c++17"}, {dir.file("inc")});
        expect_name(plain, cfg + 1);
        write_file(dir.file("inc/cfg.h"), cfg_text(cfg));  // reverted: the old text again
        const Answer reverted = compile(dir.file("cache"), source, options, {dir.file("inc")});
        expect_name(reverted, cfg);
        EXPECT_EQ(reverted.cubin, first.cubin);
        cfg += 10;
    }
    // Through libkjit's PCH folders: one per header identity under this process's root (each
    // header text of the loop: six; the plain compiles made none).
    EXPECT_EQ(pch_identities() - identities_before, 6u);
}

// PCH options that name files or folders of the caller's (NVRTC would read or reuse a PCH
// libkjit cannot tie to the headers it was made from) are refused, naming the option, in every
// spelling: `=value`, separate value, short and long.
TEST(Headers, PchOptionsNamingFilesAreRefused) {
    TempDir dir;
    make_dir(dir.file("inc"));
    write_file(dir.file("inc/cfg.h"), cfg_text(1));
    const std::string pch = dir.file("x.pch");
    for (const std::vector<std::string> &bad :
         std::vector<std::vector<std::string>>{{"--create-pch=" + pch},
                                               {"-create-pch", pch},
                                               {"--use-pch=" + pch},
                                               {"-use-pch=" + pch},
                                               {"--use-pch", pch},
                                               {"--pch-dir=" + dir.path()},
                                               {"-pch-dir", dir.path()},
                                               {"--pch", "-pch-dir=" + dir.path()},
                                               {"--pch-messages=maybe"},
                                               {"--pch", "--pch-verbose"},
                                               {"--pch=true"}}) {
        std::vector<std::string> options = {"-std=c++17"};
        options.insert(options.end(), bad.begin(), bad.end());
        const Answer a = compile(dir.file("cache"), kAngle, options, {dir.file("inc")});
        SCOPED_TRACE(options.back());
        EXPECT_EQ(a.status, KJIT_ERROR_INVALID_ARGUMENT) << kjit_status_string(a.status);
        const std::string named = bad.back().substr(0, bad.back().find('='));
        const std::string option = bad.back()[0] == '-' ? named : bad[bad.size() - 2];
        EXPECT_NE(a.error.find("'" + option), std::string::npos) << a.error;
    }
    // Accepted: the PCH itself, and the options that only change its notes or its content.
    for (const std::vector<std::string> &good :
         std::vector<std::vector<std::string>>{{"--pch", "--instantiate-templates-in-pch=false"},
                                               {"-instantiate-templates-in-pch", "true"},
                                               {"-pch-messages=true", "--pch-verbose", "false"}}) {
        std::vector<std::string> options = {"-std=c++17"};
        options.insert(options.end(), good.begin(), good.end());
        SCOPED_TRACE(good.front());
        expect_name(compile(dir.file("cache"), kAngle, options, {dir.file("inc")}), 1);
    }
}

// A computed include (`#include MACRO`, as CUTLASS's `#include CUDA_STD_HEADER(cstdint)`) is
// followed through its macro's definitions: editing a header that no expansion names is still
// a hit, editing the one it names is a miss. Before, one computed include (even in `#if 0`) made
// every file under the include folders a dependency.
TEST(Headers, ComputedIncludeIsFollowedThroughItsMacro) {
    TempDir dir;
    for (const char *p : {"proj", "inc", "inc/cfgs"}) make_dir(dir.file(p));
    write_file(dir.file("inc/cfgs/value.h"), "#define CFG_VALUE 1\n");
    write_file(dir.file("inc/cfgs/other.h"), "#define CFG_VALUE 1000\n");
    write_file(dir.file("inc/offset.h"), "#define OFFSET 0\n");
    write_file(dir.file("inc/unused.h"), "#define UNUSED 0\n");
    const std::string source = "#define STD_HEADER(x) <cfgs/x>\n"
                               "#define CFG \"offset.h\"\n"
                               "#include STD_HEADER(value.h)\n"
                               "#include CFG\n"
                               "#if 0\n#include NOT_DEFINED_ANYWHERE\n#endif\n"
                               "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                               "template __global__ void gemm<CFG_VALUE + OFFSET>(float *);\n";
    InFolder in(dir.file("proj"));
    const std::string cache = dir.file("cache");
    const Answer first = compile(cache, source, {}, {dir.file("inc")});
    expect_name(first, 1);
    for (const char *unrelated : {"inc/unused.h", "inc/cfgs/other.h"}) {
        SCOPED_TRACE(unrelated);
        write_file(dir.file(unrelated), "#define EDITED 1\n");
        const kjit_stats before = stats();
        const Answer again = compile(cache, source, {}, {dir.file("inc")});
        expect_name(again, 1);
        EXPECT_EQ(again.cubin, first.cubin);
        EXPECT_EQ(stats().compile_hits, before.compile_hits + 1);
        EXPECT_EQ(stats().compile_misses, before.compile_misses) << "a header no expansion names made a miss";
    }
    write_file(dir.file("inc/cfgs/value.h"), "#define CFG_VALUE 2\n");
    expect_name(compile(cache, source, {}, {dir.file("inc")}), 2);
    write_file(dir.file("inc/offset.h"), "#define OFFSET 10\n");
    expect_name(compile(cache, source, {}, {dir.file("inc")}), 12);
}

// Issue 19 item 2: an edit is a miss built from the new text; the revert (a branch switch, an
// A/B experiment) hits the earlier cubin without NVRTC, and so does each state seen before; a
// `touch` and an edit to a header nothing includes are hits.
TEST(Headers, RevertingAnEditHitsTheEarlierCubin) {
    TempDir dir;
    make_dir(dir.file("inc"));
    write_file(dir.file("inc/cfg.h"), cfg_text(1));
    write_file(dir.file("inc/unused.h"), "#define UNUSED 1\n");
    const std::string cache = dir.file("cache");
    const Answer first = compile(cache, kAngle, {}, {dir.file("inc")});
    expect_name(first, 1);
    write_file(dir.file("inc/cfg.h"), cfg_text(22));
    const Answer second = compile(cache, kAngle, {}, {dir.file("inc")});
    expect_name(second, 22);
    EXPECT_NE(second.cubin, first.cubin);

    const kjit_stats before = stats();
    for (int round = 0; round < 2; ++round) {
        write_file(dir.file("inc/cfg.h"), cfg_text(1));
        const Answer reverted = compile(cache, kAngle, {}, {dir.file("inc")});
        expect_name(reverted, 1);
        EXPECT_EQ(reverted.cubin, first.cubin);
        write_file(dir.file("inc/cfg.h"), cfg_text(22));
        EXPECT_EQ(compile(cache, kAngle, {}, {dir.file("inc")}).cubin, second.cubin);
    }
    // touch: the same text under a new mtime.
    write_file(dir.file("inc/cfg.h"), cfg_text(22));
    EXPECT_EQ(compile(cache, kAngle, {}, {dir.file("inc")}).cubin, second.cubin);
    // A header in the include folder that nothing includes.
    write_file(dir.file("inc/unused.h"), "#define UNUSED 2\n");
    EXPECT_EQ(compile(cache, kAngle, {}, {dir.file("inc")}).cubin, second.cubin);
    EXPECT_EQ(stats().nvrtc_compiles, before.nvrtc_compiles);
    EXPECT_EQ(stats().compile_hits, before.compile_hits + 6);

    // A batch sees the same entries.
    write_file(dir.file("inc/cfg.h"), cfg_text(1));
    const std::string inc_dir = dir.file("inc");
    const char *inc = inc_dir.c_str();
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.include_paths = &inc;
    o.include_path_count = 1;
    kjit_compile_request item = KJIT_COMPILE_REQUEST_INIT;
    item.source = kAngle;
    item.keyword = "gemm";
    item.options = &o;
    const kjit_compile_request *items[] = {&item};
    kjit_batch_result *result = nullptr;
    ASSERT_EQ(kjit_compile_batch(items, 1, nullptr, &result), KJIT_OK) << kjit_last_error();
    ASSERT_EQ(kjit_batch_result_status(result, 0), KJIT_OK) << kjit_batch_result_error(result, 0);
    EXPECT_EQ(std::string(kjit_batch_result_cubin_path(result, 0)), first.cubin);
    kjit_batch_result_release(result);
    EXPECT_EQ(stats().nvrtc_compiles, before.nvrtc_compiles);
}

// Issue 35 item 4: options that only name a file NVRTC writes key by their presence, not their
// path. Two processes' per-process -time files share one entry; the compile writes its file,
// and a hit creates its own as NVRTC starts one (the CSV's header), never truncating one that
// is there; the same for --fdevice-time-trace (FILE.json). Without the option: another entry.
TEST(Headers, OutputFileOptionsKeyByPresenceNotPath) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const auto lines = [](const std::string &path) {
        const std::string text = read_file(path);
        return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    };
    const kjit_stats start = stats();
    const Answer first = compile(cache, kNoInclude, {"-DCFG=1", "-time=" + dir.file("a.csv")});
    expect_name(first, 1);
    EXPECT_GT(lines(dir.file("a.csv")), 1u) << "the compile did not write its phase times";
    const Answer second = compile(cache, kNoInclude, {"-DCFG=1", "-time=" + dir.file("b.csv")});
    EXPECT_EQ(second.cubin, first.cubin);
    EXPECT_EQ(stats().compile_misses, start.compile_misses + 1) << "the path split the key";
    EXPECT_EQ(read_file(dir.file("b.csv")), "File name, phase name, metric, unit\n");
    write_file(dir.file("c.csv"), "kept\n");
    EXPECT_EQ(compile(cache, kNoInclude, {"-DCFG=1", "--time=" + dir.file("c.csv")}).status, KJIT_OK);
    EXPECT_EQ(read_file(dir.file("c.csv")), "kept\n");

    const Answer traced = compile(cache, kNoInclude, {"-DCFG=1", "--fdevice-time-trace=" + dir.file("t1")});
    expect_name(traced, 1);
    EXPECT_NE(read_file(dir.file("t1.json")).find("\"traceEvents\""), std::string::npos);
    const kjit_stats before_trace_hit = stats();
    const Answer trace_hit = compile(cache, kNoInclude, {"-DCFG=1", "--fdevice-time-trace=" + dir.file("t2")});
    EXPECT_EQ(trace_hit.cubin, traced.cubin);
    EXPECT_EQ(stats().compile_misses, before_trace_hit.compile_misses);
    EXPECT_NE(read_file(dir.file("t2.json")).find("\"traceEvents\""), std::string::npos);

    const Answer plain = compile(cache, kNoInclude, {"-DCFG=1"});
    expect_name(plain, 1);
    EXPECT_NE(plain.cubin, first.cubin) << "the option's presence is not in the key";
}
