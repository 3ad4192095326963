#include "cubin/sidecar.hpp"
#include "util/filesystem.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kjit_test;
namespace sc = kjit::cubin::sidecar;

namespace {

sc::Line make_line(const std::string &keyword, const std::string &name) {
    sc::Line l;
    l.keyword = keyword;
    l.cubin_size = 3824;
    l.mtime_sec = 1764694000;
    l.mtime_nsec = 123456789;
    l.name = name;
    return l;
}

}  // namespace

TEST(Sidecar, FormatParsesBack) {
    sc::Line a = make_line("gemm", "_Z4gemmPf");
    sc::Line b = make_line("ops::norm", "_ZN3ops4normEPf");
    b.content_hash = 0x0123456789abcdefULL;
    const std::string text = sc::format({a, b});
    EXPECT_EQ(text.rfind("kjit-sidecar 1\n", 0), 0u);
    const sc::Contents c = sc::parse(text);
    ASSERT_EQ(c.problem, sc::FileProblem::none);
    EXPECT_EQ(c.rejected_lines, 0u);
    ASSERT_EQ(c.lines.size(), 2u);
    EXPECT_EQ(c.lines[0].keyword, "gemm");
    EXPECT_EQ(c.lines[0].name, "_Z4gemmPf");
    EXPECT_EQ(c.lines[0].cubin_size, 3824u);
    EXPECT_EQ(c.lines[0].mtime_sec, 1764694000);
    EXPECT_EQ(c.lines[0].mtime_nsec, 123456789u);
    EXPECT_FALSE(c.lines[0].content_hash.has_value());
    EXPECT_EQ(c.lines[1].content_hash, 0x0123456789abcdefULL);
}

TEST(Sidecar, WholeFileProblems) {
    EXPECT_EQ(sc::parse("").problem, sc::FileProblem::empty);
    EXPECT_EQ(sc::parse("_Z4gemmPf\n").problem, sc::FileProblem::bare_name);
    EXPECT_EQ(sc::parse("_Z4gemmPf").problem, sc::FileProblem::bare_name);
    EXPECT_EQ(sc::parse("kjit-sidecar 2\ngemm 1 2.000000000 - _Z4gemmPf 0000000000000000\n").problem,
              sc::FileProblem::bad_header);
    EXPECT_EQ(sc::parse("\x7f"
                        "ELF\x02\x01 garbage bytes\n")
                  .problem,
              sc::FileProblem::bad_header);
    EXPECT_EQ(sc::parse("hello world\n").problem, sc::FileProblem::bad_header);
}

TEST(Sidecar, DamagedLinesAreRejected) {
    const std::string good = sc::format({make_line("gemm", "_Z4gemmPf")});
    const std::string header = "kjit-sidecar 1\n";
    const std::string line = good.substr(header.size());
    // Torn: the end of the line is missing.
    for (std::size_t cut = 0; cut < line.size(); ++cut) {
        const sc::Contents c = sc::parse(header + line.substr(0, cut));
        EXPECT_TRUE(c.lines.empty()) << "cut at " << cut;
    }
    // Any one changed byte is caught (by the field syntax or the check).
    for (std::size_t i = 0; i + 1 < line.size(); ++i) {
        std::string damaged = line;
        damaged[i] = damaged[i] == 'x' ? 'y' : 'x';
        const sc::Contents c = sc::parse(header + damaged);
        EXPECT_TRUE(c.lines.empty()) << "byte " << i << ": " << damaged;
        EXPECT_EQ(c.rejected_lines, 1u);
    }
    // A bad line does not hide a good one.
    const sc::Contents mixed = sc::parse(header + "garbage line\n" + line);
    EXPECT_EQ(mixed.rejected_lines, 1u);
    ASSERT_EQ(mixed.lines.size(), 1u);
    EXPECT_EQ(mixed.lines[0].name, "_Z4gemmPf");
}

TEST(Sidecar, WriteThenReadBack) {
    TempDir dir;
    const std::string path = dir.file("k.cubin.name");
    ASSERT_TRUE(sc::write(path, {make_line("gemm", "_Z4gemmPf")}).ok());
    const sc::Contents c = sc::read(path);
    ASSERT_EQ(c.problem, sc::FileProblem::none);
    ASSERT_EQ(c.lines.size(), 1u);
    EXPECT_EQ(c.lines[0].name, "_Z4gemmPf");
    EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"k.cubin.name"});
    // Rewriting replaces the file as a whole.
    ASSERT_TRUE(sc::write(path, {make_line("gemm_fp16", "_Z9gemm_fp16Pf")}).ok());
    EXPECT_EQ(sc::read(path).lines.at(0).keyword, "gemm_fp16");
    EXPECT_TRUE(temp_files_in(dir.path()).empty());
}

// Fields are separated by spaces and lines end in '\n': a keyword or name holding a space or a
// control byte could not be read back, and a newline in a name would forge a line for another
// keyword. write() refuses such lines whole; format() leaves them out.
TEST(Sidecar, NamesItCannotHoldAreNeverWritten) {
    TempDir dir;
    const std::string path = dir.file("k.cubin.name");
    const sc::Line good = make_line("gemm", "_Z4gemmPf");
    sc::Line forged = make_line("gemm", "_Z4gemmPf 0\nvictim 3824 1764694000.123456789 - _Z6victimPf 0");
    for (const std::string &bad_name :
         {std::string("_Z4gemm Pf"), std::string("_Z4gemmPf\n"), std::string("_Z4gemm\tPf"), std::string("_Z4gemm\rPf"),
          std::string("_Z4gemm\x7fPf"), std::string(), forged.name}) {
        sc::Line line = make_line("gemm", bad_name);
        const auto st = sc::write(path, {good, line});
        ASSERT_FALSE(st.ok()) << "wrote a name it cannot hold";
        EXPECT_EQ(st.error().code, kjit::Errc::invalid_argument);
        EXPECT_NE(st.error().message.find(path), std::string::npos) << st.error().message;
        EXPECT_FALSE(exists(path));
        EXPECT_TRUE(temp_files_in(dir.path()).empty());
        const sc::Contents c = sc::parse(sc::format({good, line}));
        ASSERT_EQ(c.lines.size(), 1u) << "format() kept a line it cannot hold";
        EXPECT_EQ(c.lines[0].name, good.name);
    }
    sc::Line bad_keyword = make_line("ge mm", "_Z4gemmPf");
    EXPECT_FALSE(sc::write(path, {bad_keyword}).ok());
    ASSERT_TRUE(sc::write(path, {make_line("gemm", "_Z4gemmPf\xc3\xa9")}).ok()) << "UTF-8 bytes are holdable";
    const sc::Contents back = sc::read(path);
    ASSERT_EQ(back.lines.size(), 1u) << "a name written is a name read back";
    EXPECT_EQ(back.lines[0].name, "_Z4gemmPf\xc3\xa9");
}

TEST(Sidecar, ReadProblems) {
    TempDir dir;
    EXPECT_EQ(sc::read(dir.file("absent.name")).problem, sc::FileProblem::missing);
    EXPECT_EQ(sc::read(dir.path()).problem, sc::FileProblem::unreadable);
    write_file(dir.file("big.name"), std::string(sc::kMaxFileSize + 1, 'a'));
    EXPECT_EQ(sc::read(dir.file("big.name")).problem, sc::FileProblem::too_large);
    // A sidecar just under the limit, of many lines, is read in full.
    std::vector<sc::Line> lines;
    for (int i = 0; i < 500; ++i) lines.push_back(make_line("k" + std::to_string(i), "_Z2k" + std::to_string(i) + "v"));
    ASSERT_TRUE(sc::write(dir.file("many.name"), lines).ok());
    EXPECT_EQ(sc::read(dir.file("many.name")).lines.size(), 500u);
}

TEST(Sidecar, SymlinkIsNotFollowedForReadOrWrite) {
    TempDir dir;
    const std::string target = dir.file("elsewhere.txt");
    write_file(target, sc::format({make_line("gemm", "_Z4gemmPf")}));
    const std::string link = dir.file("k.cubin.name");
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
    EXPECT_EQ(sc::read(link).problem, sc::FileProblem::unreadable);
    // Writing replaces the link itself; the file it pointed at is untouched.
    const std::string before = read_file(target);
    ASSERT_TRUE(sc::write(link, {make_line("gemm_fp16", "_Z9gemm_fp16Pf")}).ok());
    EXPECT_EQ(read_file(target), before);
    struct stat st {};
    ASSERT_EQ(::lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(Sidecar, FailedRenameLeavesNoTempFile) {
    TempDir dir;
    const std::string path = dir.file("k.cubin.name");
    ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);  // the sidecar path is a directory
    const auto st = sc::write(path, {make_line("gemm", "_Z4gemmPf")});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, kjit::Errc::io);
    EXPECT_NE(st.error().message.find(path), std::string::npos) << st.error().message;
    EXPECT_TRUE(temp_files_in(dir.path()).empty());
    EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"k.cubin.name"});
}

TEST(Sidecar, MissingFolderFailsCleanly) {
    TempDir dir;
    const auto st = sc::write(dir.file("no/such/dir/k.cubin.name"), {make_line("gemm", "_Z4gemmPf")});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, kjit::Errc::io);
    EXPECT_TRUE(list_dir(dir.path()).empty());
}

TEST(Sidecar, TempNamesCarryPidAndThreadId) {
    EXPECT_TRUE(sc::is_temp_file_name("k.cubin.name.tmp-123-456-7"));
    EXPECT_FALSE(sc::is_temp_file_name("k.cubin.name"));
    EXPECT_FALSE(sc::is_temp_file_name("k.cubin.name.tmp-123-456"));
    EXPECT_FALSE(sc::is_temp_file_name("k.cubin.tmp-1-2-3"));
    EXPECT_FALSE(sc::is_temp_file_name("k.cubin.name.tmp-1-2-3x"));
}

TEST(Sidecar, TempNameTakenInAdvanceIsNeverUsed) {
    TempDir dir;
    const std::string path = dir.file("k.cubin.name");
    // Take every temp name this thread could use next (the sequence number is per process and
    // small in this test binary), so every O_EXCL open meets an existing entry.
    const std::string prefix = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(::gettid()) + "-";
    const std::uint64_t next = kjit::unique_suffixes_drawn();
    for (std::uint64_t seq = next; seq < next + 4096; ++seq)
        ASSERT_EQ(::mkdir((prefix + std::to_string(seq)).c_str(), 0755), 0);
    const auto st = sc::write(path, {make_line("gemm", "_Z4gemmPf")});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, kjit::Errc::io);
    EXPECT_FALSE(exists(path));
    EXPECT_EQ(list_dir(dir.path()).size(), 4096u);  // nothing planted was touched or removed
}

TEST(Sidecar, FindLineMatchesTheWholeKeywordOnly) {
    sc::Line fp16 = make_line("gemm_fp16", "_Z9gemm_fp16Pf");
    sc::Line gemm = make_line("gemm", "_Z4gemmPf");
    const std::string text = sc::format({fp16, gemm});
    EXPECT_EQ(sc::classify(text), sc::FileProblem::none);
    auto g = sc::find_line(text, "gemm");
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->name, "_Z4gemmPf");
    EXPECT_EQ(sc::find_line(text, "gemm_fp16")->name, "_Z9gemm_fp16Pf");
    EXPECT_FALSE(sc::find_line(text, "gem").has_value());
    EXPECT_FALSE(sc::find_line(text, "gemm_fp").has_value());
    EXPECT_FALSE(sc::find_line(sc::format({fp16}), "gemm").has_value());
    // A damaged line for the keyword is not found, even beside good lines for others.
    std::string damaged = text;
    damaged[damaged.rfind("_Z4gemm") + 3] = '5';
    EXPECT_FALSE(sc::find_line(damaged, "gemm").has_value());
    EXPECT_TRUE(sc::find_line(damaged, "gemm_fp16").has_value());
}

TEST(Sidecar, ReadStopsAtTheLimitEvenForHugeFiles) {
    TempDir dir;
    const std::string path = dir.file("huge.name");
    {
        // 1 GiB, sparse: reading it whole would take seconds and a gigabyte of memory.
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::ftruncate(fd, 1LL << 30), 0);
        ::close(fd);
    }
    sc::FileBuffer buf;
    sc::read_into(path, buf);
    EXPECT_EQ(buf.problem, sc::FileProblem::too_large);
    EXPECT_TRUE(buf.text().empty());
}

TEST(Sidecar, WriteSweepsStaleTempFilesButNotLiveOnes) {
    TempDir dir;
    const std::string stale = dir.file("k.cubin.name.tmp-11-12-13");
    const std::string live = dir.file("k.cubin.name.tmp-11-12-14");
    const std::string other = dir.file("notes.tmp-1-2-3");  // not a sidecar temp: never touched
    for (const std::string &f : {stale, live, other}) write_file(f, "torn");
    for (const std::string &f : {stale, other}) {
        const struct timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
        ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), times, 0), 0);
    }
    sc::Line l;
    l.keyword = "k";
    l.name = "k";
    ASSERT_TRUE(sc::write(dir.file("k.cubin.name"), {l}).ok());
    EXPECT_FALSE(exists(stale));
    EXPECT_TRUE(exists(live));
    EXPECT_TRUE(exists(other));
    // Within the interval the folder is not listed again.
    write_file(stale, "torn");
    const struct timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
    ASSERT_TRUE(sc::write(dir.file("k.cubin.name"), {l}).ok());
    EXPECT_TRUE(exists(stale));
    EXPECT_EQ(sc::sweep_stale_temp_files(dir.path()), 0u);
}
