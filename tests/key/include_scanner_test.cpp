// The include scanner (src/key/include_scanner.hpp): the files a compile may read, followed from
// the source and its headers through NVRTC's search (include folders, the working directory,
// pre-includes, computed includes through their macros, #include_next), and the dependency list
// written to deps.txt and read back (relative to the working directory or an anchor, pins,
// damage refused), with what is still current.
#include "key/include_scanner.hpp"
#include "util/status.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using kjit::Errc;
using namespace kjit_test;

namespace {

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

}  // namespace

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

// A record's content hash is read as std::from_chars read it in base 16 (its reader is a
// faster one of its own since 0.15): 1 to 16 digits of either case, then exactly one space; no
// sign, no prefix, no 17th digit.
TEST(IncludeScanner, ContentHashesAreReadAsFromCharsReadThem) {
    const auto hash_of = [](const std::string &digits) -> std::optional<std::uint64_t> {
        const auto deps = parse_in("kjit-deps 1\n+ 1 2.000000003 " + digits + " 2 /a\n", "/w");
        if (!deps.ok()) return std::nullopt;
        return deps->at(0).content_hash;
    };
    EXPECT_EQ(hash_of("00000000000000ab"), 0xabu);
    EXPECT_EQ(hash_of("ab"), 0xabu);
    EXPECT_EQ(hash_of("ABCDEF0123456789"), 0xabcdef0123456789u);
    EXPECT_EQ(hash_of("ffffffffffffffff"), 0xffffffffffffffffu);
    for (const char *bad : {"", "0x1f", "-1", "+1", "00000000000000000", "1g", "fffffffffffffffff", " 1"}) {
        EXPECT_EQ(hash_of(bad), std::nullopt) << "'" << bad << "'";
    }
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

namespace {

// A header found through the request's anchor 1, /opt/A/inc.
kjit::key::include_scanner::Dependency anchored_tile() {
    kjit::key::include_scanner::Dependency tile;
    tile.path = "/opt/A/inc/tile.h";
    tile.relative = "tile.h";
    tile.anchor = 1;
    tile.size = 7;
    tile.content_hash = 0xcd;
    return tile;
}

}  // namespace

// Records relative to an anchor (an include folder the request names) are written ":N:rel" and
// read back under the reader's anchor N; a pin is read back with the reader's location of it,
// which check() compares; a working-directory record that starts with ':' is not taken for one.
// An anchor the reader does not have, or a malformed number, is damage.
TEST(IncludeScanner, AnchoredRecordsAndPinsRoundTripUnderTheReadersFolders) {
    using kjit::key::include_scanner::Dependency;
    const Dependency tile = anchored_tile();
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

// origin(): the same list where the same folders are gives the same line; another text, another
// location of a folder a relative record is relative to, or a list with no relative record
// (nothing to prove) does not. A folder no record is relative to plays no part.
TEST(IncludeScanner, AnOriginNamesTheListAndTheFoldersItsRecordsAreRelativeTo) {
    using kjit::key::include_scanner::Dependency;
    using kjit::key::include_scanner::origin;
    const Dependency tile = anchored_tile();
    Dependency absolute;
    absolute.path = "/usr/include/x.h";
    const std::vector<Dependency> deps = {tile, absolute};
    const std::string text = kjit::key::include_scanner::format(deps);
    kjit::key::include_scanner::Search here;
    here.working_dir = "/w";
    here.anchors = {"/opt/A/other", "/opt/A/inc"};
    const std::string line = origin(text, deps, here);
    EXPECT_EQ(line.rfind("kjit-origin 1 ", 0), 0u) << line;
    EXPECT_EQ(line.size(), std::string("kjit-origin 1 ").size() + 17) << line;
    EXPECT_EQ(origin(text, deps, here), line);
    kjit::key::include_scanner::Search elsewhere = here;
    elsewhere.working_dir = "/v";  // no record is relative to it
    elsewhere.anchors[0] = "/opt/B/other";
    EXPECT_EQ(origin(text, deps, elsewhere), line);
    elsewhere.anchors[1] = "/opt/B/inc";
    EXPECT_NE(origin(text, deps, elsewhere), line);
    std::vector<Dependency> touched = deps;
    touched[0].mtime_sec = 1;
    EXPECT_NE(origin(kjit::key::include_scanner::format(touched), touched, here), line);
    // Relative to the working directory: its location counts.
    Dependency local = tile;
    local.anchor = -1;
    const std::vector<Dependency> in_cwd = {local};
    const std::string cwd_text = kjit::key::include_scanner::format(in_cwd);
    elsewhere = here;
    elsewhere.working_dir = "/v";
    EXPECT_NE(origin(cwd_text, in_cwd, here), origin(cwd_text, in_cwd, elsewhere));
    EXPECT_EQ(origin(text, {absolute}, here), "");
    // A list naming a folder the request does not have is not this request's: no origin.
    here.anchors.pop_back();
    EXPECT_EQ(origin(text, deps, here), "");
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
// A directive is a line whose first character other than blanks is '#' (found from each '#',
// not line by line): a '#' after anything else on its line, or a second '#' on it, starts none;
// one after a continued line, on the last line without a newline, or after blanks, does.
TEST(IncludeScanner, DirectivesAreTheLinesThatStartWithAHash) {
    TempDir dir;
    const std::vector<std::string> names = {"no1.h",  "no2.h",  "no3.h",  "no4.h", "no5.h",
                                            "yes1.h", "yes2.h", "yes3.h", "yes4.h"};
    for (const std::string &n : names) write_file(dir.file(n), "");
    const std::string source = "int x; #include \"no1.h\"\n"
                               "#define Q \"#\" # 2 #include \"no2.h\"\n"
                               " \t #\t include \"yes1.h\"\n"
                               "a ## b #include \"no3.h\"\n"
                               "##include \"no4.h\"\n"
                               "x # #include \"no5.h\"\n"
                               "#\n"
                               "x \\\n#include \"yes2.h\"\n"
                               "#include \\\n\"yes3.h\"\n"
                               "#include \"yes4.h\"";
    const auto deps = kjit::key::include_scanner::scan(source, {}, in_folders({dir.path()}));
    ASSERT_TRUE(deps.ok()) << deps.error().message;
    std::set<std::string> present;
    for (const auto &d : *deps) {
        if (d.exists) present.insert(d.path);
    }
    EXPECT_EQ(present,
              (std::set<std::string>{dir.file("yes1.h"), dir.file("yes2.h"), dir.file("yes3.h"), dir.file("yes4.h")}));
}

TEST(IncludeScanner, FileNamingIsToldByIdentifiers) {
    using kjit::key::include_scanner::file_naming;
    EXPECT_TRUE(file_naming("__FILE__").own_file);
    EXPECT_TRUE(file_naming("x __FILE__X; __FILE__").own_file);
    EXPECT_FALSE(file_naming("__FILE_").own_file);
    EXPECT_TRUE(file_naming("assert_x; assert").uses_assert);
    EXPECT_TRUE(file_naming("return __FILE__;").own_file);
    EXPECT_TRUE(file_naming("#define W __BASE_FILE__\n").own_file);
    EXPECT_TRUE(file_naming("x(__FILE_NAME__)").own_file);
    EXPECT_FALSE(file_naming("MY__FILE__X __FILE__S").own_file);
    EXPECT_TRUE(file_naming("assert(p);").uses_assert);
    EXPECT_FALSE(file_naming("static_assert(1); __assertfail(); assertion").uses_assert);
    EXPECT_TRUE(file_naming("#define W __BASE_FILE__\n").program);
    EXPECT_FALSE(file_naming("__FILE__ __FILE_NAME__ assert(p)").program);
}

// scan() says whether a text it read may expand __BASE_FILE__ (the program's name): a file two
// includes deep, not the __FILE__ of another; any file for a computed include it cannot follow.
TEST(IncludeScanner, ScanSaysWhetherATextReadMayNameTheProgram) {
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/outer.h"), "#include \"inner.h\"\n");
    write_file(dir.file("inc/inner.h"), "static const char *base = __BASE_FILE__;\n");
    write_file(dir.file("inc/own.h"), "static const char *own = __FILE__;\n");
    const auto names = [&](const std::string &source) {
        bool named = false;
        EXPECT_TRUE(kjit::key::include_scanner::scan(source, {}, in_folders({dir.file("inc")}), &named).ok());
        return named;
    };
    EXPECT_TRUE(names("#include <outer.h>\n"));
    EXPECT_FALSE(names("#include <own.h>\n"));
    EXPECT_TRUE(names("#include __KJIT_NOWHERE_DEFINED\n")) << "a computed include may read any file";
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
