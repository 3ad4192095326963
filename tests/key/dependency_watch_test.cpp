// The header watch (src/key/dependency_watch.hpp): a hit on an entry checked earlier in this process
// skips its deps.txt when inotify proves nothing changed since. Each test proves a hit first
// (Cache::Counters::dependency_proofs moves), then changes what the compile reads one way, and
// expects a cubin built from the new text: a change the watch did not see would be a stale hit,
// whose kernel name still carries the old constant.
#include "key/dependency_watch.hpp"
#include "cache/cache.hpp"
#include "resolve/name_resolver.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

using kjit::cache::Cache;
using kjit::key::Request;
using namespace kjit_test;

namespace {

// gemm<CFG>: the kernel name says which text of cfg.h was compiled.
const char *const kSource = "#include <cfg.h>\n"
                            "template <int V> __global__ void gemm(float *p) { p[0] = V; }\n"
                            "template __global__ void gemm<CFG>(float *);\n";

std::string name_for(int cfg) { return "_Z4gemmILi" + std::to_string(cfg) + "EEvPf"; }
std::string cfg_text(int cfg) { return "#define CFG " + std::to_string(cfg) + "\n"; }

// Writes `bytes` into the existing file in place (same inode): what an editor that truncates
// and writes does, and the only way a write through a hard link reaches the other name.
void overwrite_in_place(const std::string &path, const std::string &bytes) {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(static_cast<bool>(out)) << path;
}

// The kernel the keyword rule picks in `cubin` ("" when none).
std::string kernel_name(const std::string &cubin) {
    auto name = kjit::resolve::NameResolver::instance().resolve(cubin, "gemm");
    return name.ok() ? *name : std::string();
}

class HeaderWatch : public ::testing::Test {
protected:
    Request request(const std::vector<std::string> &include_paths) const {
        Request r;
        r.source = kSource;
        r.keyword = "gemm";
        r.cache_dir = dir_.file("cache");
        r.arch = "sm_90";
        r.include_paths = include_paths;
        return r;
    }

    // The kernel name of the cubin the cache answers.
    std::string compiled_name(const Request &r) {
        auto path = cache_.compile(r);
        EXPECT_TRUE(path.ok()) << path.error().message;
        if (!path.ok()) return {};
        return kernel_name(path->cubin);
    }

    // Compiles `r` until a hit is proven by the watch; the name it holds must be `cfg`'s.
    void expect_proven(const Request &r, int cfg) {
        EXPECT_EQ(compiled_name(r), name_for(cfg));  // a miss, or a hit that checks
        EXPECT_EQ(compiled_name(r), name_for(cfg));  // a hit that checks, and watches
        const auto proofs = cache_.counters().dependency_proofs.load();
        const auto stats = cache_.counters().dependency_stats.load();
        EXPECT_EQ(compiled_name(r), name_for(cfg));
        EXPECT_EQ(cache_.counters().dependency_proofs.load(), proofs + 1) << "the hit was not proven by the watch";
        EXPECT_EQ(cache_.counters().dependency_stats.load(), stats);
    }

    std::string file(const std::string &name) const { return dir_.file(name); }

    TempDir dir_;
    Cache cache_;
};

}  // namespace

TEST_F(HeaderWatch, ASecondHitIsProvenWithoutReadingItsFiles) {
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(1));
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    EXPECT_TRUE(kjit::key::dependency_watch::stats().usable);
    EXPECT_GT(kjit::key::dependency_watch::stats().watches, 0u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(compiled_name(r), name_for(1));
    EXPECT_EQ(cache_.counters().nvrtc_compiles.load(), 1u);

    // Files that change nothing the compile reads: an editor's swap file beside the header, a
    // file created in a folder above it (as other processes do in /tmp all the time), the
    // cache's own writes. The hits stay proven.
    const auto proofs = cache_.counters().dependency_proofs.load();
    write_file(file("inc/.cfg.h.swp"), "x");
    write_file(file("unrelated.txt"), "x");
    ::mkdir(file("another").c_str(), 0755);
    EXPECT_EQ(compiled_name(r), name_for(1));
    EXPECT_EQ(cache_.counters().dependency_proofs.load(), proofs + 1);
}

TEST_F(HeaderWatch, AnEditInPlaceIsSeen) {
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(1));
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    overwrite_in_place(file("inc/cfg.h"), cfg_text(2));
    EXPECT_EQ(compiled_name(r), name_for(2));
    expect_proven(r, 2);
}

TEST_F(HeaderWatch, ARenameOverTheHeaderIsSeen) {
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(1));  // writes a temp file and renames it over
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    write_file(file("inc/cfg.h"), cfg_text(3));
    EXPECT_EQ(compiled_name(r), name_for(3));
}

TEST_F(HeaderWatch, ANewHeaderThatShadowsOneIsSeen) {
    ::mkdir(file("first").c_str(), 0755);
    ::mkdir(file("second").c_str(), 0755);
    write_file(file("second/cfg.h"), cfg_text(1));
    const Request r = request({file("first"), file("second")});
    expect_proven(r, 1);
    write_file(file("first/cfg.h"), cfg_text(4));
    EXPECT_EQ(compiled_name(r), name_for(4));
}

TEST_F(HeaderWatch, AnIncludeFolderCreatedWhereThereWasNoneIsSeen) {
    ::mkdir(file("second").c_str(), 0755);
    write_file(file("second/cfg.h"), cfg_text(1));
    const Request r = request({file("first/deeper"), file("second")});
    expect_proven(r, 1);
    ::mkdir(file("first").c_str(), 0755);
    ::mkdir(file("first/deeper").c_str(), 0755);
    write_file(file("first/deeper/cfg.h"), cfg_text(5));
    EXPECT_EQ(compiled_name(r), name_for(5));
}

TEST_F(HeaderWatch, AnIncludeFolderLinkSwappedIsSeen) {
    // `current -> v1`, then `ln -sfn v2 current` as an install does (a new link renamed over).
    ::mkdir(file("v1").c_str(), 0755);
    ::mkdir(file("v2").c_str(), 0755);
    write_file(file("v1/cfg.h"), cfg_text(1));
    write_file(file("v2/cfg.h"), cfg_text(6));
    ASSERT_EQ(::symlink(file("v1").c_str(), file("current").c_str()), 0);
    const Request r = request({file("current")});
    expect_proven(r, 1);
    ASSERT_EQ(::symlink(file("v2").c_str(), file("current.new").c_str()), 0);
    ASSERT_EQ(::rename(file("current.new").c_str(), file("current").c_str()), 0);
    EXPECT_EQ(compiled_name(r), name_for(6));
}

TEST_F(HeaderWatch, AnIncludeFolderReplacedIsSeen) {
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(1));
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    ASSERT_EQ(::rename(file("inc").c_str(), file("old-inc").c_str()), 0);
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(7));
    EXPECT_EQ(compiled_name(r), name_for(7));
    // The folder moved away still holds the old text, and is still watched: editing it changes
    // nothing the compile reads, and the right answer stays.
    overwrite_in_place(file("old-inc/cfg.h"), cfg_text(8));
    EXPECT_EQ(compiled_name(r), name_for(7));
    overwrite_in_place(file("inc/cfg.h"), cfg_text(9));
    EXPECT_EQ(compiled_name(r), name_for(9));
}

TEST_F(HeaderWatch, AWriteThroughAHardLinkElsewhereIsSeen) {
    ::mkdir(file("inc").c_str(), 0755);
    ::mkdir(file("elsewhere").c_str(), 0755);
    write_file(file("elsewhere/cfg.h"), cfg_text(1));
    ASSERT_EQ(::link(file("elsewhere/cfg.h").c_str(), file("inc/cfg.h").c_str()), 0);
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    overwrite_in_place(file("elsewhere/cfg.h"), cfg_text(10));
    EXPECT_EQ(compiled_name(r), name_for(10));
}

TEST_F(HeaderWatch, TheTargetOfALinkedHeaderReplacedIsSeen) {
    ::mkdir(file("inc").c_str(), 0755);
    ::mkdir(file("real").c_str(), 0755);
    write_file(file("real/cfg.h"), cfg_text(1));
    ASSERT_EQ(::symlink(file("real/cfg.h").c_str(), file("inc/cfg.h").c_str()), 0);
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    write_file(file("real/cfg.h"), cfg_text(11));  // a new file renamed over the link's target
    EXPECT_EQ(compiled_name(r), name_for(11));
    expect_proven(r, 11);
    overwrite_in_place(file("real/cfg.h"), cfg_text(12));
    EXPECT_EQ(compiled_name(r), name_for(12));
}

// Links reached through links (issue 32): every link on the way is watched in its own folder,
// whichever level is re-pointed, however it is spelled (absolute, relative), wherever the path
// comes from (include_paths, -I among the NVRTC options, the working directory).
namespace {

// `ln -sfn target link`, as update-alternatives and installers do it: a new link renamed over.
void repoint(const std::string &link, const std::string &target) {
    const std::string temp = link + ".new";
    ASSERT_EQ(::symlink(target.c_str(), temp.c_str()), 0) << temp;
    ASSERT_EQ(::rename(temp.c_str(), link.c_str()), 0) << link;
}

// A toolkit folder `<name>` holding include/cfg.h with `cfg`'s text.
void make_toolkit(const TempDir &dir, const std::string &name, int cfg) {
    ASSERT_EQ(::mkdir(dir.file(name).c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(dir.file(name + "/include").c_str(), 0755), 0);
    write_file(dir.file(name + "/include/cfg.h"), cfg_text(cfg));
}

}  // namespace

TEST_F(HeaderWatch, AnIncludeFolderReachedThroughALinkToALinkIsSeenAtEveryLevel) {
    // /usr/local/cuda's layout: cuda -> alternatives/cuda -> cuda-A (relative, then absolute).
    for (const auto &[name, cfg] :
         {std::pair<const char *, int>{"cuda-A", 1}, {"cuda-B", 2}, {"cuda-C", 3}, {"cuda-D", 4}}) {
        make_toolkit(dir_, name, cfg);
    }
    ::mkdir(file("alternatives").c_str(), 0755);
    ASSERT_EQ(::symlink(file("cuda-A").c_str(), file("alternatives/cuda").c_str()), 0);
    ASSERT_EQ(::symlink("alternatives/cuda", file("cuda").c_str()), 0);
    const Request r = request({file("cuda/include")});
    expect_proven(r, 1);
    repoint(file("alternatives/cuda"), file("cuda-B"));  // the second level
    EXPECT_EQ(compiled_name(r), name_for(2)) << "a link re-pointed behind another link was not seen";
    expect_proven(r, 2);
    repoint(file("alternatives/cuda"), "../cuda-C");  // the second level, relative
    EXPECT_EQ(compiled_name(r), name_for(3));
    expect_proven(r, 3);
    ::mkdir(file("alternatives2").c_str(), 0755);
    ASSERT_EQ(::symlink("../cuda-D", file("alternatives2/cuda").c_str()), 0);
    repoint(file("cuda"), "alternatives2/cuda");  // the first level
    EXPECT_EQ(compiled_name(r), name_for(4));
    expect_proven(r, 4);
    // The folder the last link leads to replaced by a rename, the link itself untouched.
    ASSERT_EQ(::rename(file("cuda-D").c_str(), file("cuda-D.old").c_str()), 0);
    ASSERT_EQ(::rename(file("cuda-A").c_str(), file("cuda-D").c_str()), 0);
    EXPECT_EQ(compiled_name(r), name_for(1));
    expect_proven(r, 1);
    // A link on the way to the first link: the include folder's own parent.
    ::mkdir(file("v2").c_str(), 0755);
    ASSERT_EQ(::symlink("../cuda-B", file("v2/cuda").c_str()), 0);
    ASSERT_EQ(::symlink(file(".").c_str(), file("top").c_str()), 0);
    const Request through_top = request({file("top/cuda/include")});
    expect_proven(through_top, 1);
    repoint(file("cuda"), "v2/cuda");
    EXPECT_EQ(compiled_name(through_top), name_for(2));
}

// Headers in folders below one reached through a link (CCCL's tree under /usr/local/cuda ->
// cuda-13.0): a folder below one already resolved is walked from where that one leads, not from
// '/'. A link below it re-pointed, and the link above both, are still seen.
TEST_F(HeaderWatch, FoldersBelowAResolvedFolderAreSeenThroughEveryLink) {
    for (const auto &[name, one, two] :
         {std::tuple<const char *, int, int>{"cuda-A", 1, 5}, std::tuple<const char *, int, int>{"cuda-B", 2, 6}}) {
        const std::string root = file(name);
        ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
        ASSERT_EQ(::mkdir((root + "/include").c_str(), 0755), 0);
        write_file(root + "/include/cfg.h", "#include <sub/deep/cfg_value.h>\n");
        for (const auto &[variant, cfg] : {std::pair<const char *, int>{"one", one}, {"two", two}}) {
            const std::string deep = root + "/variants/" + variant + "/deep";
            ASSERT_EQ(::mkdir((root + "/variants").c_str(), 0755) == 0 || errno == EEXIST, true);
            ASSERT_EQ(::mkdir((root + "/variants/" + variant).c_str(), 0755), 0);
            ASSERT_EQ(::mkdir(deep.c_str(), 0755), 0);
            write_file(deep + "/cfg_value.h", cfg_text(cfg));
        }
        ASSERT_EQ(::symlink("../variants/one", (root + "/include/sub").c_str()), 0);
    }
    ASSERT_EQ(::symlink(file("cuda-A").c_str(), file("cuda").c_str()), 0);
    const Request r = request({file("cuda/include")});
    expect_proven(r, 1);
    repoint(file("cuda-A/include/sub"), "../variants/two");  // a link below the resolved folder
    EXPECT_EQ(compiled_name(r), name_for(5)) << "a link below a resolved folder re-pointed was not seen";
    expect_proven(r, 5);
    repoint(file("cuda"), file("cuda-B"));  // the link above both
    EXPECT_EQ(compiled_name(r), name_for(2)) << "the link above a resolved folder re-pointed was not seen";
    expect_proven(r, 2);
    overwrite_in_place(file("cuda-B/variants/one/deep/cfg_value.h"), cfg_text(3));
    EXPECT_EQ(compiled_name(r), name_for(3));
}

TEST_F(HeaderWatch, AHeaderThatIsALinkToALinkIsSeenAtEveryLevel) {
    ::mkdir(file("inc").c_str(), 0755);
    ::mkdir(file("mid").c_str(), 0755);
    for (const auto &[name, cfg] : {std::pair<const char *, int>{"real-A", 1}, {"real-B", 2}, {"real-C", 3}}) {
        ::mkdir(file(name).c_str(), 0755);
        write_file(file(std::string(name) + "/cfg.h"), cfg_text(cfg));
    }
    ASSERT_EQ(::symlink("../real-A/cfg.h", file("mid/cfg.h").c_str()), 0);
    ASSERT_EQ(::symlink(file("mid/cfg.h").c_str(), file("inc/cfg.h").c_str()), 0);
    const Request r = request({file("inc")});
    expect_proven(r, 1);
    repoint(file("mid/cfg.h"), "../real-B/cfg.h");  // the second level
    EXPECT_EQ(compiled_name(r), name_for(2)) << "a header link re-pointed behind another link was not seen";
    expect_proven(r, 2);
    ASSERT_EQ(::symlink("../real-C/cfg.h", file("mid/other.h").c_str()), 0);
    repoint(file("inc/cfg.h"), "../mid/other.h");  // the first level, relative
    EXPECT_EQ(compiled_name(r), name_for(3));
    expect_proven(r, 3);
    write_file(file("real-C/cfg.h"), cfg_text(4));  // the file at the end replaced
    EXPECT_EQ(compiled_name(r), name_for(4));
}

TEST_F(HeaderWatch, ALinkToALinkInAnIncludeOption) {
    make_toolkit(dir_, "cuda-A", 1);
    make_toolkit(dir_, "cuda-B", 2);
    ::mkdir(file("alternatives").c_str(), 0755);
    ASSERT_EQ(::symlink("../cuda-A", file("alternatives/cuda").c_str()), 0);
    ASSERT_EQ(::symlink(file("alternatives/cuda").c_str(), file("cuda").c_str()), 0);
    Request r = request({});
    r.nvrtc_options = {"-I" + file("cuda/include")};
    expect_proven(r, 1);
    repoint(file("alternatives/cuda"), "../cuda-B");
    EXPECT_EQ(compiled_name(r), name_for(2));
}

TEST_F(HeaderWatch, ALinkToALinkUnderTheWorkingDirectory) {
    // A relative include folder, made absolute against the working directory, whose path goes
    // through two links.
    make_toolkit(dir_, "cuda-A", 1);
    make_toolkit(dir_, "cuda-B", 2);
    ::mkdir(file("project").c_str(), 0755);
    ::mkdir(file("alternatives").c_str(), 0755);
    ASSERT_EQ(::symlink("../cuda-A", file("alternatives/cuda").c_str()), 0);
    ASSERT_EQ(::symlink("../alternatives/cuda", file("project/cuda").c_str()), 0);
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
    ASSERT_EQ(::chdir(file("project").c_str()), 0);
    const Request r = request({"cuda/include"});
    expect_proven(r, 1);
    repoint(file("alternatives/cuda"), "../cuda-B");
    const std::string after = compiled_name(r);
    ASSERT_EQ(::chdir(cwd), 0);
    EXPECT_EQ(after, name_for(2));
}

// Files proven across entries: another kernel over the same headers (a tuning sweep's next
// configuration) finds them as the first kernel's check did, without a stat, until an event.
namespace {

// Another kernel over the same headers: another source, so another entry.
Request other_kernel(Request r) {
    r.source = "#include <cfg.h>\n#include <more.h>\n"
               "template <int V> __global__ void gemm(float *p) { p[1] = V + MORE; }\n"
               "template __global__ void gemm<CFG>(float *);\n";
    return r;
}

}  // namespace

TEST_F(HeaderWatch, AnotherEntryOverTheSameHeadersStatsNone) {
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(1));
    write_file(file("inc/more.h"), "#define MORE 0\n");
    Request first = request({file("inc")});
    first.source = std::string("#include <more.h>\n") + kSource;
    expect_proven(first, 1);  // checked once: its files are proven from then on
    const Request second = other_kernel(request({file("inc")}));
    EXPECT_EQ(compiled_name(second), name_for(1));  // a miss
    const auto stats = cache_.counters().dependency_stats.load();
    const auto proofs = cache_.counters().dependency_proofs.load();
    EXPECT_EQ(compiled_name(second), name_for(1));  // its first hit: a check, of proven files
    EXPECT_EQ(cache_.counters().dependency_proofs.load(), proofs) << "the entry itself was proven already";
    EXPECT_EQ(cache_.counters().dependency_stats.load(), stats) << "proven files were stat'ed again";
}

TEST_F(HeaderWatch, AnEditBetweenTwoEntriesIsSeenByTheSecond) {
    ::mkdir(file("inc").c_str(), 0755);
    write_file(file("inc/cfg.h"), cfg_text(1));
    write_file(file("inc/more.h"), "#define MORE 0\n");
    const Request second = other_kernel(request({file("inc")}));
    EXPECT_EQ(compiled_name(second), name_for(1));  // the second kernel's entry, of cfg 1
    Request first = request({file("inc")});
    first.source = std::string("#include <more.h>\n") + kSource;
    expect_proven(first, 1);  // the first kernel's files proven
    // Edited in place, size and mtime kept: only the watch's event (and the content) show it.
    struct stat before {};
    ASSERT_EQ(::stat(file("inc/cfg.h").c_str(), &before), 0);
    overwrite_in_place(file("inc/cfg.h"), cfg_text(4));
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, file("inc/cfg.h").c_str(), times, 0), 0);
    EXPECT_EQ(compiled_name(second), name_for(4)) << "the second kernel was served from the first's proof";
}

// A forked child and the watch: tests/api/fork_test.cpp (label fork), Fork.ChildTakesNoHeaderWatchEventFromItsParent.

TEST(HeaderWatchOff, TurnedOffEveryHitChecksItsFiles) {
    ScopedEnv off("KJIT_WATCH_HEADERS", "0");
    TempDir dir;
    ::mkdir(dir.file("inc").c_str(), 0755);
    write_file(dir.file("inc/cfg.h"), cfg_text(1));
    Cache cache;
    Request r;
    r.source = kSource;
    r.keyword = "gemm";
    r.cache_dir = dir.file("cache");
    r.arch = "sm_90";
    r.include_paths = {dir.file("inc")};
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(cache.compile(r).ok());
    EXPECT_EQ(cache.counters().dependency_proofs.load(), 0u);
    EXPECT_FALSE(kjit::key::dependency_watch::stats().usable);
    EXPECT_EQ(cache.counters().dependency_stats.load(), 3u);  // the three hits each stat cfg.h
}
