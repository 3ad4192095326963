// The nvJitLink probe (src/compile/nvjitlink_probe.hpp, library_probe.hpp): a process that only
// hits takes nvJitLink's identity from the record a process that loaded nvJitLink left in the
// cache folder, and never maps nvJitLink; another KJIT_LIBNVJITLINK, a library touched or
// replaced, a record that is not this user's or not whole makes it load nvJitLink; a record that
// was wrong all the same fails one link with Errc::link and is removed. Each step runs in a fresh
// process (nvjitlink_probe_worker), since libkjit keeps nvJitLink, once loaded, for the life of
// the process. The cache's walks treat the records as NVRTC's: libkjit's own files, their stale
// temp files swept.
#include "store/cache_inventory.hpp"
#include "store/cache_verification.hpp"
#include "util/filesystem.hpp"
#include "util/status.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

// What a worker run printed, by the first word of each line, and "all".
using Lines = std::map<std::string, std::string>;
const std::string kLinkErrc = std::to_string(static_cast<int>(kjit::Errc::link));

// Runs nvjitlink_probe_worker CACHE STEPS with `env` ("NAME=value ...", may be empty) in front.
Lines run_worker(const std::string &cache, const std::string &steps, const std::string &env = "") {
    const char *worker = std::getenv("KJIT_NVJITLINK_PROBE_WORKER");
    if (!worker) ADD_FAILURE() << "KJIT_NVJITLINK_PROBE_WORKER is not set";
    const std::string command = "env " + env + " '" + (worker ? worker : "") + "' '" + cache + "' " + steps + " 2>&1";
    Lines lines;
    int status = 0;
    std::string all;
    for (const std::string &line : output_lines_of(command, &status)) {
        all += line + "\n";
        const std::size_t space = line.find(' ');
        lines[line.substr(0, space)] = space == std::string::npos ? "" : line.substr(space + 1);
    }
    lines["all"] = all;
    EXPECT_EQ(status, 0) << all;
    return lines;
}

// A line the worker must have printed ("" and a failure when it did not).
std::string line(const Lines &lines, const std::string &key) {
    const auto it = lines.find(key);
    if (it == lines.end()) {
        ADD_FAILURE() << "no '" << key << "' line in:\n" << lines.at("all");
        return "";
    }
    return it->second;
}

// The nvJitLink records in `cache` (file names).
std::vector<std::string> records_in(const std::string &cache) {
    std::vector<std::string> records;
    for (const std::string &name : list_dir(cache)) {
        if (name.rfind(".kjit-nvjitlink-", 0) == 0 && name.find(".tmp-") == std::string::npos) {
            records.push_back(name);
        }
    }
    return records;
}

std::string only_record(const std::string &cache) {
    const std::vector<std::string> records = records_in(cache);
    EXPECT_EQ(records.size(), 1u);
    return records.empty() ? "" : cache + "/" + records.front();
}

// The steps of a process that links (a miss): keys, loads, confirms, records.
constexpr const char *kLinks = "identity load confirm record";
// The steps of a process that only hits: keys, records (nothing when nvJitLink is not loaded).
constexpr const char *kHits = "identity record";

class NvJitLinkProbe : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_EQ(::mkdir(cache.c_str(), 0700), 0); }

    // A copy of the toolkit's nvJitLink in folder `name` of the test's folder, `extra` bytes
    // longer than the toolkit's (another size: another identity); its path.
    std::string copy_of_nvjitlink(const std::string &name, int extra = 0) {
        const std::string from = KJIT_TOOLKIT_NVJITLINK;
        const std::string folder = dir.file(name);
        const std::string to = folder + from.substr(from.rfind('/'));
        EXPECT_EQ(::mkdir(folder.c_str(), 0755), 0) << folder;
        EXPECT_EQ(std::system(("cp '" + from + "' '" + to + "' && head -c " + std::to_string(extra) +
                               " /dev/zero >> '" + to + "'")
                                  .c_str()),
                  0);
        return to;
    }

    // A process that links and records with `env`, then one that proves the identity without
    // loading; the identity.
    std::string proven(const std::string &env) {
        const Lines links = run_worker(cache, kLinks, env);
        EXPECT_EQ(line(links, "confirm"), "ok") << links.at("all");
        EXPECT_EQ(line(links, "nvjitlink"), "mapped");
        const Lines hit = run_worker(cache, kHits, env);
        EXPECT_EQ(line(hit, "identity"), line(links, "identity"));
        EXPECT_EQ(line(hit, "nvjitlink"), "absent") << "no record proved nvJitLink";
        EXPECT_EQ(line(hit, "loaded"), "no");
        return line(hit, "identity");
    }

    TempDir dir;
    std::string cache = dir.file("cache");
};

TEST_F(NvJitLinkProbe, AProcessThatOnlyHitsNeverMapsNvJitLink) {
    // No record yet: the identity loads nvJitLink, and a process that did not record leaves none.
    const Lines first = run_worker(cache, "identity");
    EXPECT_EQ(line(first, "nvjitlink"), "mapped") << first.at("all");
    EXPECT_EQ(line(first, "loaded"), "yes");
    EXPECT_TRUE(records_in(cache).empty());

    const Lines links = run_worker(cache, kLinks);
    ASSERT_EQ(line(links, "confirm"), "ok") << links.at("all");
    EXPECT_EQ(line(links, "identity"), line(first, "identity"));
    const std::string record = only_record(cache);
    const std::string text = read_file(record);
    EXPECT_EQ(text.rfind("kjit-nvjitlink-record 1\n", 0), 0u) << text;
    EXPECT_NE(text.find("\ncontext library libnvJitLink.so."), std::string::npos) << text;
    EXPECT_NE(text.find("\nidentity " + line(first, "identity") + "\nend\n"), std::string::npos) << text;
    EXPECT_NE(text.find("/libnvJitLink."), std::string::npos) << text;

    const Lines hit = run_worker(cache, kHits);
    EXPECT_EQ(line(hit, "identity"), line(first, "identity"));
    EXPECT_EQ(line(hit, "nvjitlink"), "absent") << "a process that only hits loaded nvJitLink";
    EXPECT_EQ(line(hit, "loaded"), "no");
    EXPECT_EQ(read_file(record), text) << "a valid record was rewritten";

    // A miss in such a process loads nvJitLink then, and confirms the identity the record gave.
    const Lines miss = run_worker(cache, kLinks);
    EXPECT_EQ(line(miss, "confirm"), "ok") << miss.at("all");
    EXPECT_EQ(read_file(record), text);
}

TEST_F(NvJitLinkProbe, AnotherKjitLibnvjitlinkLoadsNvJitLink) {
    const std::string a = copy_of_nvjitlink("a", 1);
    const std::string b = copy_of_nvjitlink("b", 2);
    const std::string id_a = proven("KJIT_LIBNVJITLINK=" + a);
    // Another variable is another context, with a record of its own: nvJitLink is loaded.
    const Lines other = run_worker(cache, kLinks, "KJIT_LIBNVJITLINK=" + b);
    EXPECT_EQ(line(other, "nvjitlink"), "mapped") << "the record of another KJIT_LIBNVJITLINK was used";
    EXPECT_NE(line(other, "identity"), id_a);
    EXPECT_EQ(records_in(cache).size(), 2u);
    const Lines unset = run_worker(cache, kHits);
    EXPECT_EQ(line(unset, "nvjitlink"), "mapped") << "the record of a KJIT_LIBNVJITLINK was used without it";
    // Each context's record still proves its own.
    EXPECT_EQ(line(run_worker(cache, kHits, "KJIT_LIBNVJITLINK=" + a), "nvjitlink"), "absent");
}

TEST_F(NvJitLinkProbe, ATouchedOrReplacedLibraryLoadsNvJitLink) {
    const std::string lib = copy_of_nvjitlink("lib");
    const std::string env = "KJIT_LIBNVJITLINK=" + lib;
    const std::string before = proven(env);

    // The same bytes and size, so the same identity; but the file changed.
    ASSERT_EQ(std::system(("touch '" + lib + "'").c_str()), 0);
    const Lines touched = run_worker(cache, kHits, env);
    EXPECT_EQ(line(touched, "nvjitlink"), "mapped") << "a touched library was taken on the record's word";
    EXPECT_EQ(line(touched, "identity"), before);

    // Replaced by another build (renamed over it, as a package manager does).
    EXPECT_EQ(proven(env), before);
    const std::string other = copy_of_nvjitlink("other", 3);
    ASSERT_EQ(::rename(other.c_str(), lib.c_str()), 0);
    const Lines replaced = run_worker(cache, kHits, env);
    EXPECT_EQ(line(replaced, "nvjitlink"), "mapped") << "a replaced library was taken on the record's word";
    EXPECT_NE(line(replaced, "identity"), before);
}

TEST_F(NvJitLinkProbe, ALibraryAddedToAFolderTheLinkerSearchesLoadsNvJitLink) {
    const std::string libs = dir.file("libs");
    ASSERT_EQ(::mkdir(libs.c_str(), 0755), 0);
    const std::string env = "LD_LIBRARY_PATH=" + libs;
    const std::string before = proven(env);
    // An nvJitLink of another build there is what the search now finds first.
    const std::string other = copy_of_nvjitlink("other", 5);
    ASSERT_EQ(::rename(other.c_str(), (libs + other.substr(other.rfind('/'))).c_str()), 0);
    const Lines after = run_worker(cache, kHits, env);
    EXPECT_EQ(line(after, "nvjitlink"), "mapped");
    EXPECT_NE(line(after, "identity"), before) << "the search's new nvJitLink was not the one keyed";
}

// Issue 51: a host that loaded nvJitLink before libkjit's first link (numba-cuda loads it to link
// its LTO-IR) leaves a record when that is the file libkjit's search finds, by whatever name the
// host opened it; a host that loaded another file (the same soname: the bare name then answers
// with it) leaves none, and a later process loads the nvJitLink its search finds.
TEST_F(NvJitLinkProbe, AHostThatLoadedTheNvJitLinkTheSearchFindsLeavesARecord) {
    const std::string found = line(run_worker(dir.file("plain"), "load"), "nvjitlink-file");
    const std::string toolkit = KJIT_TOOLKIT_NVJITLINK;
    for (const std::string &preload : {found, toolkit.substr(toolkit.rfind('/') + 1)}) {
        SCOPED_TRACE("preloaded as " + preload);
        for (const std::string &record : records_in(cache)) ASSERT_EQ(::unlink((cache + "/" + record).c_str()), 0);
        const Lines host = run_worker(cache, "'preload:" + preload + "' " + kLinks);
        ASSERT_EQ(line(host, "preloaded"), found) << host.at("all");
        EXPECT_EQ(line(host, "confirm"), "ok") << host.at("all");
        EXPECT_EQ(records_in(cache).size(), 1u) << "the host left no record";
        const Lines hit = run_worker(cache, kHits);
        EXPECT_EQ(line(hit, "identity"), line(host, "identity"));
        EXPECT_EQ(line(hit, "nvjitlink"), "absent") << "a process that only hits loaded nvJitLink after a host had";
    }
}

TEST_F(NvJitLinkProbe, AHostThatLoadedAnotherNvJitLinkLeavesNoRecord) {
    char buffer[PATH_MAX];
    ASSERT_NE(::realpath(copy_of_nvjitlink("wheel", 1).c_str(), buffer), nullptr);
    const std::string copy = buffer;
    const Lines host = run_worker(cache, "'preload:" + copy + "' " + kLinks);
    ASSERT_EQ(line(host, "preloaded"), copy) << host.at("all");
    EXPECT_EQ(line(host, "confirm"), "ok") << host.at("all");
    EXPECT_TRUE(records_in(cache).empty()) << "a record names the host's nvJitLink";
    const Lines later = run_worker(cache, kHits);
    EXPECT_EQ(line(later, "nvjitlink"), "mapped") << "the copy's identity was taken for the search's nvJitLink";
    EXPECT_NE(line(later, "nvjitlink-file"), copy);
    EXPECT_NE(line(later, "identity"), line(host, "identity"));
}

TEST_F(NvJitLinkProbe, ARecordThatIsNotThisUsersOrNotWholeIsNotUsed) {
    const std::string identity = proven("");
    const std::string record = only_record(cache);
    const std::string text = read_file(record);

    // Another user's record (a file they made, renamed into place).
    if (::geteuid() == 0) {
        ASSERT_EQ(::chown(record.c_str(), 65534, 65534), 0);
        EXPECT_EQ(line(run_worker(cache, kHits), "nvjitlink"), "mapped");
        EXPECT_EQ(line(run_worker(cache, kHits), "nvjitlink"), "absent")
            << "the user's own record was not written back";
    }
    const std::vector<std::string> damaged = damaged_probe_records(text);
    for (const std::string &bad : damaged) {
        write_file(record, bad);
        const Lines run = run_worker(cache, kHits);
        EXPECT_EQ(line(run, "identity"), identity);
        EXPECT_EQ(line(run, "nvjitlink"), "mapped") << "a damaged record was used:\n" << bad;
        EXPECT_EQ(read_file(record), text) << "the damaged record was not replaced";
    }
    // A link in its place is not followed.
    const std::string elsewhere = dir.file("elsewhere");
    write_file(elsewhere, text);
    ASSERT_EQ(::unlink(record.c_str()), 0);
    ASSERT_EQ(::symlink(elsewhere.c_str(), record.c_str()), 0);
    EXPECT_EQ(line(run_worker(cache, "identity"), "nvjitlink"), "mapped");
}

TEST_F(NvJitLinkProbe, AWrongRecordFailsOneLinkAndIsRemoved) {
    const std::string real = proven("");
    const std::string record = only_record(cache);
    std::string text = read_file(record);
    const std::size_t at = text.find("\nidentity ");
    ASSERT_NE(at, std::string::npos);
    const std::string forged = "13.0 libnvJitLink.so.13 1";
    text = text.substr(0, at) + "\nidentity " + forged + text.substr(text.find('\n', at + 1));
    write_file(record, text);

    // The forged identity keys the request; the link loads nvJitLink, which says otherwise.
    const Lines run = run_worker(cache, "identity load confirm");
    EXPECT_EQ(line(run, "identity"), forged) << run.at("all");
    const std::string error = line(run, "confirm-error");
    EXPECT_EQ(error.substr(0, error.find(' ')), kLinkErrc) << run.at("all");
    EXPECT_NE(error.find("nvJitLink " + real), std::string::npos) << error;
    EXPECT_NE(error.find(record), std::string::npos) << error;
    EXPECT_NE(error.find("retry the compile"), std::string::npos) << error;
    EXPECT_TRUE(records_in(cache).empty()) << "the wrong record was kept";

    // The next process loads and keys with the real one, and records it again.
    const Lines next = run_worker(cache, kLinks);
    EXPECT_EQ(line(next, "identity"), real);
    EXPECT_EQ(line(next, "nvjitlink"), "mapped");
    EXPECT_EQ(proven(""), real);
}

TEST_F(NvJitLinkProbe, NoNvJitLinkIsErrcLink) {
    const Lines run = run_worker(cache, "identity", "KJIT_LIBNVJITLINK=" + dir.file("missing.so"));
    const std::string error = line(run, "identity-error");
    EXPECT_EQ(error.substr(0, error.find(' ')), kLinkErrc) << run.at("all");
    EXPECT_NE(error.find("missing.so"), std::string::npos) << error;
    EXPECT_EQ(line(run, "nvjitlink"), "absent");
}

// The cache's own walks: a record is libkjit's (not foreign), a stale temp file of one is
// swept by verify --fix, a live one is left to its writer.
TEST_F(NvJitLinkProbe, RecordsAreTheCachesOwnFilesAndStaleTempsAreSwept) {
    namespace inventory = kjit::store::cache_inventory;
    namespace verification = kjit::store::cache_verification;
    proven("");
    const std::string record = only_record(cache);
    const std::string stale = record + ".tmp-stale", live = record + ".tmp-live";
    write_file(stale, "half");
    write_file(live, "half");
    const std::time_t old = std::time(nullptr) - 86400;
    const struct timespec times[2] = {{old, 0}, {old, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
    EXPECT_TRUE(inventory::is_root_temp(stale.substr(stale.rfind('/') + 1)));
    EXPECT_FALSE(inventory::is_root_temp(record.substr(record.rfind('/') + 1)));

    auto summary = inventory::summarize(cache);
    ASSERT_TRUE(summary.ok()) << summary.error().message;
    EXPECT_EQ(summary->foreign, 0u);
    auto report = verification::verify(cache, true);
    ASSERT_TRUE(report.ok()) << report.error().message;
    ASSERT_EQ(report->findings.size(), 1u);
    EXPECT_EQ(report->findings[0].path, stale);
    EXPECT_EQ(report->findings[0].damage, verification::Damage::stale_temp);
    EXPECT_FALSE(exists(stale));
    EXPECT_TRUE(exists(live));
    EXPECT_TRUE(exists(record));
}

}  // namespace
