// The file system module (src/util/filesystem.hpp): the plumbing every module writes files with.
#include "util/filesystem.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

std::string read_all(const std::string &path) { return kjit::read_small_file(path, 1 << 20).value_or("<unreadable>"); }

// A umask that strips the group's write bit, as most logins have, for one scope.
class ScopedUmask {
public:
    explicit ScopedUmask(mode_t mask) : saved_(::umask(mask)) {}
    ~ScopedUmask() { ::umask(saved_); }

private:
    mode_t saved_;
};

}  // namespace

TEST(Filesystem, WriteNewFileNeverWritesOverAFileOrThroughALink) {
    TempDir dir;
    const std::string taken = dir.file("taken");
    ASSERT_TRUE(kjit::write_new_file(taken, "first").ok());
    auto again = kjit::write_new_file(taken, "second");
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, kjit::Errc::io);
    EXPECT_EQ(again.error().sys_errno, EEXIST);
    EXPECT_NE(again.error().message.find(taken), std::string::npos) << again.error().message;
    EXPECT_EQ(read_all(taken), "first");

    const std::string link = dir.file("link");
    ASSERT_EQ(::symlink(dir.file("target").c_str(), link.c_str()), 0);
    EXPECT_FALSE(kjit::write_new_file(link, "through").ok());
    EXPECT_FALSE(exists(dir.file("target"))) << "written through a dangling link";
}

TEST(Filesystem, WriteNewFileFlagsSetModeAndMtime) {
    TempDir dir;
    ScopedUmask umask(022);
    struct stat st {};
    ASSERT_TRUE(kjit::write_new_file(dir.file("plain"), "x").ok());
    ASSERT_EQ(::stat(dir.file("plain").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);
    ASSERT_TRUE(kjit::write_new_file(dir.file("team"), "x", kjit::kGroupWritable).ok());
    ASSERT_EQ(::stat(dir.file("team").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0664u) << "group-writable whatever the umask";
    {
        ScopedUmask wide(002);
        ASSERT_TRUE(kjit::write_new_file(dir.file("user"), "x", kjit::kUmaskMode).ok());
        ASSERT_EQ(::stat(dir.file("user").c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0664u) << "0666 less the umask";
    }
    const std::int64_t before = kjit::realtime_ns();
    ASSERT_TRUE(kjit::write_new_file(dir.file("old"), "x", kjit::kBackdated | kjit::kDurable).ok());
    ASSERT_EQ(::stat(dir.file("old").c_str(), &st), 0);
    const std::int64_t age = before - kjit::mtime_ns(st);
    EXPECT_GT(age, (kjit::kBackdateSeconds - 2) * 1'000'000'000LL);
    EXPECT_LT(age, (kjit::kBackdateSeconds + 60) * 1'000'000'000LL);
    EXPECT_FALSE(kjit::young_at(st.st_mtim.tv_sec, static_cast<std::uint32_t>(st.st_mtim.tv_nsec), before));
}

TEST(Filesystem, UniqueSuffixesAreNeverReusedInAProcess) {
    const std::uint64_t drawn = kjit::unique_suffixes_drawn();
    const std::string a = kjit::unique_suffix();
    const std::string b = kjit::unique_suffix();
    EXPECT_NE(a, b);
    EXPECT_EQ(kjit::unique_suffixes_drawn(), drawn + 2);
    const std::string prefix = std::to_string(::getpid()) + "-" + std::to_string(::gettid()) + "-";
    EXPECT_EQ(a, prefix + std::to_string(drawn));
}

TEST(Filesystem, CreateUniqueSkipsNamesTakenInAdvance) {
    TempDir dir;
    const std::string stem = dir.file("t-");
    const std::string prefix = stem + std::to_string(::getpid()) + "-" + std::to_string(::gettid()) + "-";
    const std::uint64_t next = kjit::unique_suffixes_drawn();
    for (std::uint64_t seq = next; seq < next + 3; ++seq) {
        ASSERT_EQ(::mkdir((prefix + std::to_string(seq) + ".x").c_str(), 0700), 0);
    }
    auto made = kjit::create_unique(stem, ".x", "test folder",
                                    [](const std::string &name) { return ::mkdir(name.c_str(), 0700); });
    ASSERT_TRUE(made.ok()) << made.error().message;
    EXPECT_EQ(*made, prefix + std::to_string(next + 3) + ".x");
    EXPECT_EQ(list_dir(dir.path()).size(), 4u);

    // Every name taken: an io error naming the last one tried, nothing removed.
    const std::uint64_t from = kjit::unique_suffixes_drawn();
    for (std::uint64_t seq = from; seq < from + kjit::kUniqueNameAttempts; ++seq) {
        ASSERT_EQ(::mkdir((prefix + std::to_string(seq)).c_str(), 0700), 0);
    }
    auto refused = kjit::create_unique(stem, {}, "test folder",
                                       [](const std::string &name) { return ::mkdir(name.c_str(), 0700); });
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, kjit::Errc::io);
    EXPECT_NE(refused.error().message.find("cannot create test folder"), std::string::npos) << refused.error().message;
    EXPECT_EQ(list_dir(dir.path()).size(), 4u + kjit::kUniqueNameAttempts);
}

TEST(Filesystem, ReplaceFileSwapsTheWholeFileAndLeavesNoTempFile) {
    TempDir dir;
    const std::string path = dir.file("list");
    ASSERT_TRUE(kjit::replace_file(path, dir.file(".tmp-"), ".list", "one\n").ok());
    ASSERT_TRUE(kjit::replace_file(path, dir.file(".tmp-"), ".list", "two\n").ok());
    EXPECT_EQ(read_all(path), "two\n");
    EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"list"});

    // A folder in the way: the rename fails, the temp file goes, the folder stays.
    const std::string blocked = dir.file("blocked");
    ASSERT_EQ(::mkdir(blocked.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((blocked + "/inside").c_str(), 0700), 0);
    auto st = kjit::replace_file(blocked, dir.file(".tmp-"), {}, "three\n");
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, kjit::Errc::io);
    EXPECT_NE(st.error().message.find(blocked), std::string::npos) << st.error().message;
    auto names = list_dir(dir.path());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"blocked", "list"}));
}

TEST(Filesystem, FolderReaderListsNamesAndSaysWhatItCannotOpen) {
    TempDir dir;
    for (const char *name : {"a", "b", "c"}) ASSERT_TRUE(kjit::write_new_file(dir.file(name), "").ok());
    auto reader = kjit::FolderReader::open(dir.path());
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    std::vector<std::string> names;
    for (auto d = reader->next(); d && *d; d = reader->next()) names.emplace_back((*d)->d_name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c"}));

    auto missing = kjit::FolderReader::open(dir.file("missing"));
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().sys_errno, ENOENT);
    EXPECT_NE(missing.error().message.find(dir.file("missing")), std::string::npos);
    auto file = kjit::FolderReader::open(dir.file("a"));
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.error().sys_errno, ENOTDIR);
}

TEST(Filesystem, MakeFoldersCreatesParentsAndNamesAFileInTheWay) {
    TempDir dir;
    ASSERT_TRUE(kjit::make_folders(dir.file("x/y/z"), 0700, "cache folder").ok());
    struct stat st {};
    ASSERT_EQ(::stat(dir.file("x/y/z").c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_TRUE(kjit::make_folders(dir.file("x/y/z"), 0700, "cache folder").ok()) << "an existing folder is fine";
    ASSERT_TRUE(kjit::write_new_file(dir.file("file"), "").ok());
    auto blocked = kjit::make_folders(dir.file("file/sub"), 0700, "cache folder");
    ASSERT_FALSE(blocked.ok());
    EXPECT_EQ(blocked.error().sys_errno, ENOTDIR);
    // The folder asked for, then the part of its path that failed ("cannot create cache folder
    // '<parent>'" read as if the parent were the folder wanted).
    EXPECT_EQ(blocked.error().message, "cannot create cache folder '" + dir.file("file/sub") + "': '" +
                                           dir.file("file") + "' exists and is not a folder");
    auto denied = kjit::make_folders("/proc/kjit-test/sub", 0700, "cache folder");
    ASSERT_FALSE(denied.ok());
    EXPECT_EQ(denied.error().message.rfind("cannot create cache folder '/proc/kjit-test/sub': cannot create "
                                           "'/proc/kjit-test': ",
                                           0),
              0u)
        << denied.error().message;
}

// absolute_folder answers a folder that is already absolute and normal without std::filesystem:
// for every such spelling and every near miss, the same answer as the general path gives.
TEST(Filesystem, AbsoluteFolderOfANormalFolderIsTheGeneralAnswer) {
    const auto general = [](const std::string &folder) {
        std::string a = std::filesystem::absolute(folder).lexically_normal().string();
        while (a.size() > 1 && a.back() == '/') a.pop_back();
        return a;
    };
    const std::vector<std::string> parts = {"", "/", "a", "b.c", ".", "..", "...", ".a", "a.", "//", "/./", "/../"};
    std::vector<std::string> folders = {"/", "//", "///", "/.", "/..", "/tmp/pc", "/a/./b", "/a/../b", "/a//b"};
    for (const std::string &x : parts) {
        for (const std::string &y : parts) {
            for (const std::string &z : parts) folders.push_back("/" + x + y + "/" + z);
        }
    }
    for (const std::string &folder : folders) {
        auto got = kjit::absolute_folder(folder);
        ASSERT_TRUE(got.ok()) << folder;
        EXPECT_EQ(*got, general(folder)) << folder;
    }
}

TEST(Filesystem, AbsoluteFolderFoldsDotsAndTrailingSlashes) {
    EXPECT_EQ(*kjit::absolute_folder("/a/b/../c/./"), "/a/c");
    EXPECT_EQ(*kjit::absolute_folder("/"), "/");
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
    EXPECT_EQ(*kjit::absolute_folder("rel/dir/"), std::string(cwd) + "/rel/dir");
}

TEST(Filesystem, ReadSmallFileRefusesLinksAndFilesOverItsLimit) {
    TempDir dir;
    ASSERT_TRUE(kjit::write_new_file(dir.file("small"), "12345").ok());
    EXPECT_EQ(kjit::read_small_file(dir.file("small"), 5).value_or("-"), "12345");
    EXPECT_FALSE(kjit::read_small_file(dir.file("small"), 4).has_value());
    ASSERT_EQ(::symlink(dir.file("small").c_str(), dir.file("link").c_str()), 0);
    EXPECT_FALSE(kjit::read_small_file(dir.file("link"), 100).has_value());
    EXPECT_FALSE(kjit::read_small_file(dir.file("missing"), 100).has_value());
}

TEST(Filesystem, WalkLinksNamesEveryLinkOnTheWay) {
    TempDir dir;
    char real_dir[4096];
    ASSERT_NE(::realpath(dir.path().c_str(), real_dir), nullptr);
    const std::string w = real_dir;
    // The update-alternatives layout: cuda -> alternatives/cuda (relative) -> cuda-A (absolute),
    // and a header inside that is a link to a link.
    ASSERT_EQ(::mkdir((w + "/alternatives").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((w + "/cuda-A").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((w + "/cuda-A/include").c_str(), 0755), 0);
    write_file(w + "/cuda-A/include/real.h", "x");
    ASSERT_EQ(::symlink("alternatives/cuda", (w + "/cuda").c_str()), 0);
    ASSERT_EQ(::symlink((w + "/cuda-A").c_str(), (w + "/alternatives/cuda").c_str()), 0);
    ASSERT_EQ(::symlink("middle.h", (w + "/cuda-A/include/cfg.h").c_str()), 0);
    ASSERT_EQ(::symlink("../include/./real.h", (w + "/cuda-A/include/middle.h").c_str()), 0);

    auto walk = kjit::walk_links(w + "/cuda/include/cfg.h");
    ASSERT_TRUE(walk.has_value());
    EXPECT_TRUE(walk->found);
    EXPECT_EQ(walk->resolved, w + "/cuda-A/include/real.h");
    ASSERT_EQ(walk->links.size(), 4u);
    EXPECT_EQ(walk->links[0].path, w + "/cuda");
    EXPECT_EQ(walk->links[0].target, "alternatives/cuda");
    EXPECT_EQ(walk->links[1].path, w + "/alternatives/cuda");
    EXPECT_EQ(walk->links[1].target, w + "/cuda-A");
    EXPECT_EQ(walk->links[2].path, w + "/cuda-A/include/cfg.h");
    EXPECT_EQ(walk->links[3].path, w + "/cuda-A/include/middle.h");

    // ".." after a link goes up from where the link led, as the kernel's lookup does.
    walk = kjit::walk_links(w + "/cuda/../alternatives/cuda/./include");
    ASSERT_TRUE(walk.has_value());
    EXPECT_EQ(walk->resolved, w + "/cuda-A/include");  // w/cuda-A/.. is w

    // A missing name: the rest is appended as spelled, and the links before it are named.
    walk = kjit::walk_links(w + "/cuda/missing/deeper/cfg.h");
    ASSERT_TRUE(walk.has_value());
    EXPECT_FALSE(walk->found);
    EXPECT_EQ(walk->resolved, w + "/cuda-A/missing/deeper/cfg.h");
    EXPECT_EQ(walk->links.size(), 2u);

    // No link at all; a relative path; a loop.
    walk = kjit::walk_links(w + "/cuda-A/include/real.h");
    ASSERT_TRUE(walk.has_value());
    EXPECT_TRUE(walk->links.empty());
    EXPECT_EQ(walk->resolved, w + "/cuda-A/include/real.h");
    EXPECT_FALSE(kjit::walk_links("relative/path").has_value());
    ASSERT_EQ(::symlink("loop-b", (w + "/loop-a").c_str()), 0);
    ASSERT_EQ(::symlink("loop-a", (w + "/loop-b").c_str()), 0);
    EXPECT_FALSE(kjit::walk_links(w + "/loop-a/x").has_value());
}

// A walk that starts below a folder known to hold no link (the header watch's watched ones)
// finds what the walk from '/' finds for every path under it, links below it included; a
// "link-free" folder the path does not begin with (a prefix of a name, another folder) is not
// taken, and the walk starts at '/'.
TEST(Filesystem, WalkLinksFromALinkFreeFolderFindsWhatTheWholeWalkFinds) {
    TempDir dir;
    char real_dir[4096];
    ASSERT_NE(::realpath(dir.path().c_str(), real_dir), nullptr);
    const std::string w = real_dir;
    for (const char *f : {"/cache", "/cache/ab", "/elsewhere", "/elsewhere/entry"}) {
        ASSERT_EQ(::mkdir((w + f).c_str(), 0755), 0) << f;
    }
    write_file(w + "/elsewhere/entry/kernel.cubin", "x");
    ASSERT_EQ(::symlink((w + "/elsewhere/entry").c_str(), (w + "/cache/ab/entry").c_str()), 0);
    for (const std::string &path :
         {w + "/cache/ab/entry/kernel.cubin", w + "/cache/ab/../ab/entry", w + "/cache/ab/missing/kernel.cubin"}) {
        SCOPED_TRACE(path);
        const auto whole = kjit::walk_links(path);
        ASSERT_TRUE(whole.has_value());
        for (const std::string &link_free :
             {w + "/cache", w + "/cache/ab", w, w + "/cach", w + "/elsewhere", w + "/cache/", std::string("/")}) {
            SCOPED_TRACE(link_free);
            const auto part = kjit::walk_links(path, link_free);
            ASSERT_TRUE(part.has_value());
            EXPECT_EQ(part->resolved, whole->resolved);
            EXPECT_EQ(part->found, whole->found);
            ASSERT_EQ(part->links.size(), whole->links.size());
            for (std::size_t i = 0; i < part->links.size(); ++i) {
                EXPECT_EQ(part->links[i].path, whole->links[i].path);
                EXPECT_EQ(part->links[i].target, whole->links[i].target);
            }
        }
    }
    const auto linked = kjit::walk_links(w + "/cache/ab/entry/kernel.cubin", w + "/cache/ab");
    ASSERT_TRUE(linked.has_value());
    ASSERT_EQ(linked->links.size(), 1u);  // the link below the folder is still found
    EXPECT_EQ(linked->resolved, w + "/elsewhere/entry/kernel.cubin");
}
