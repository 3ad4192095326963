// The NVRTC probe (src/compile/nvrtc_probe.hpp): a process that only hits takes NVRTC's identity from
// the record a process that loaded NVRTC left in the cache folder, and never maps NVRTC; any
// change to what the dynamic linker would find, and any record that is not this user's or not
// whole, makes it load NVRTC; a record that was wrong all the same costs one failed compile,
// never a cubin under another NVRTC's key. Each step runs in a fresh process (probe_worker),
// since libkjit keeps NVRTC, once loaded, for the life of the process.
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace kjit_test;

namespace {

// What a probe_worker run printed: "status" (the last one), "path", "name", "error", "nvrtc";
// "status1" holds the first status when the worker was asked to retry.
using Lines = std::map<std::string, std::string>;
const std::string kOk = std::to_string(KJIT_OK);

// Runs probe_worker CACHE N [retry] [ARGS] with `env` ("NAME=value ...", may be empty) in front;
// `args` is passed on as it is (e.g. "'preload:FILE'").
Lines run_worker(const std::string &cache, int n, const std::string &env = "", bool retry = false,
                 const std::string &args = "") {
    const char *worker = std::getenv("KJIT_PROBE_WORKER");
    if (!worker) ADD_FAILURE() << "KJIT_PROBE_WORKER is not set";
    const std::string command = "env " + env + " '" + (worker ? worker : "") + "' '" + cache + "' " +
                                std::to_string(n) + (retry ? " retry" : "") + " " + args + " 2>&1";
    Lines lines;
    int status = 0;
    std::string all;
    for (const std::string &line : output_lines_of(command, &status)) {
        all += line + "\n";
        const std::size_t space = line.find(' ');
        const std::string key = line.substr(0, space);
        const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
        if (key == "status" && lines.count("status")) lines["status1"] = lines["status"];
        lines[key] = value;
    }
    lines["all"] = all;
    EXPECT_EQ(status, 0) << all;
    return lines;
}

// The NVRTC records in `cache` (file names).
std::vector<std::string> records_in(const std::string &cache) {
    std::vector<std::string> records;
    for (const std::string &name : list_dir(cache)) {
        if (name.rfind(".kjit-nvrtc-", 0) == 0 && name.find(".tmp-") == std::string::npos) records.push_back(name);
    }
    return records;
}

std::string only_record(const std::string &cache) {
    const std::vector<std::string> records = records_in(cache);
    EXPECT_EQ(records.size(), 1u);
    return records.empty() ? "" : cache + "/" + records.front();
}

class NvrtcProbe : public ::testing::Test {
protected:
    TempDir dir;
    std::string cache = dir.file("cache");
};

TEST_F(NvrtcProbe, AProcessThatOnlyHitsNeverMapsNvrtc) {
    const Lines first = run_worker(cache, 1);
    ASSERT_EQ(first.at("status"), kOk) << first.at("all");
    EXPECT_EQ(first.at("nvrtc"), "mapped");
    const std::string record = only_record(cache);
    const std::string text = read_file(record);
    EXPECT_NE(text.find("\nidentity "), std::string::npos) << text;
    EXPECT_NE(text.find("/libnvrtc."), std::string::npos) << text;

    const Lines hit = run_worker(cache, 1);
    ASSERT_EQ(hit.at("status"), kOk) << hit.at("all");
    EXPECT_EQ(hit.at("path"), first.at("path"));
    EXPECT_EQ(hit.at("name"), "_Z4gemmILi1EEvPf");
    EXPECT_EQ(hit.at("nvrtc"), "absent") << "a process that only hits loaded NVRTC";
    EXPECT_EQ(read_file(record), text) << "a valid record was rewritten";

    // A miss in such a process loads NVRTC then, and compiles under the same identity.
    const Lines miss = run_worker(cache, 2);
    ASSERT_EQ(miss.at("status"), kOk) << miss.at("all");
    EXPECT_EQ(miss.at("nvrtc"), "mapped");
    EXPECT_EQ(miss.at("name"), "_Z4gemmILi2EEvPf");
}

TEST_F(NvrtcProbe, AChangeInAFolderTheLinkerSearchesLoadsNvrtc) {
    const std::string libs = dir.file("libs");
    ASSERT_EQ(::mkdir(libs.c_str(), 0755), 0);
    const std::string env = "LD_LIBRARY_PATH=" + libs;
    ASSERT_EQ(run_worker(cache, 1, env).at("status"), kOk);
    ASSERT_EQ(run_worker(cache, 1, env).at("nvrtc"), "absent");

    // Another library appearing there could be a libnvrtc.so that the search now finds first.
    write_file(libs + "/libother.so", "not a library");
    const Lines after = run_worker(cache, 1, env);
    ASSERT_EQ(after.at("status"), kOk) << after.at("all");
    EXPECT_EQ(after.at("nvrtc"), "mapped");
    // ... and that process wrote the record again for the folder as it is now.
    EXPECT_EQ(run_worker(cache, 1, env).at("nvrtc"), "absent");

    // A glibc-hwcaps subfolder is searched before its folder.
    ASSERT_EQ(::mkdir((libs + "/glibc-hwcaps").c_str(), 0755), 0);
    ASSERT_EQ(run_worker(cache, 1, env).at("nvrtc"), "mapped");
    ASSERT_EQ(run_worker(cache, 1, env).at("nvrtc"), "absent");
    ASSERT_EQ(::mkdir((libs + "/glibc-hwcaps/x86-64-v3").c_str(), 0755), 0);
    EXPECT_EQ(run_worker(cache, 1, env).at("nvrtc"), "mapped");

    // Another search path is another context, with a record of its own.
    EXPECT_EQ(run_worker(cache, 1).at("nvrtc"), "mapped");
    EXPECT_EQ(run_worker(cache, 1).at("nvrtc"), "absent");
    EXPECT_EQ(records_in(cache).size(), 2u);
}

TEST_F(NvrtcProbe, ARewrittenLibraryLoadsNvrtc) {
    // A copy of the toolkit's NVRTC with its builtins, pinned by KJIT_LIBNVRTC.
    const std::string from = KJIT_TOOLKIT_NVRTC;
    const std::string lib = dir.file(from.substr(from.rfind('/') + 1));
    const std::string folder = from.substr(0, from.rfind('/'));
    ASSERT_EQ(std::system(("cp '" + from + "' '" + lib + "' && cp '" + folder + "'/libnvrtc-builtins.so.* '" +
                           dir.path() + "/'")
                              .c_str()),
              0);
    const std::string env = "KJIT_LIBNVRTC=" + lib;
    const Lines first = run_worker(cache, 1, env);
    ASSERT_EQ(first.at("status"), kOk) << first.at("all");
    ASSERT_EQ(run_worker(cache, 1, env).at("nvrtc"), "absent");

    // The same bytes and size, so the same identity and the same entry; but the file changed.
    ASSERT_EQ(std::system(("touch '" + lib + "'").c_str()), 0);
    const Lines after = run_worker(cache, 1, env);
    ASSERT_EQ(after.at("status"), kOk) << after.at("all");
    EXPECT_EQ(after.at("nvrtc"), "mapped");
    EXPECT_EQ(after.at("path"), first.at("path"));
}

// Links reached through links (issue 32): an NVRTC named through `libnvrtc -> alternatives/nvrtc
// -> build-A/libnvrtc`, re-pointed at either level to another build, is loaded again.
namespace {

// `ln -sfn target link`: a new link renamed over.
void repoint(const std::string &link, const std::string &target) {
    const std::string temp = link + ".new";
    ASSERT_EQ(::symlink(target.c_str(), temp.c_str()), 0) << temp;
    ASSERT_EQ(::rename(temp.c_str(), link.c_str()), 0) << link;
}

// A copy of the toolkit's NVRTC and its builtins in `folder`, made another build by `extra`
// bytes at its end (another size: another identity, another key); its path.
std::string nvrtc_build(const std::string &folder, int extra) {
    const std::string from = KJIT_TOOLKIT_NVRTC;
    const std::string name = from.substr(from.rfind('/') + 1);
    EXPECT_EQ(::mkdir(folder.c_str(), 0755), 0) << folder;
    EXPECT_EQ(std::system(("cp '" + from + "' '" + folder + "/' && cp '" + from.substr(0, from.rfind('/')) +
                           "'/libnvrtc-builtins.so.* '" + folder + "/' && head -c " + std::to_string(extra) +
                           " /dev/zero >> '" + folder + "/" + name + "'")
                              .c_str()),
              0);
    return folder + "/" + name;
}

// `path` with its links resolved, as /proc/self/maps names a file mapped from it.
std::string resolved(const std::string &path) {
    char buffer[PATH_MAX];
    EXPECT_NE(::realpath(path.c_str(), buffer), nullptr) << path;
    return buffer;
}

// Runs the worker with `env` until a record proves NVRTC (NVRTC not mapped); the cubin's path.
std::string proven_path(const std::string &cache, const std::string &env) {
    const Lines first = run_worker(cache, 1, env);
    EXPECT_EQ(first.at("status"), kOk) << first.at("all");
    const Lines hit = run_worker(cache, 1, env);
    EXPECT_EQ(hit.at("status"), kOk) << hit.at("all");
    EXPECT_EQ(hit.at("nvrtc"), "absent") << "no record proved NVRTC";
    EXPECT_EQ(hit.at("path"), first.at("path"));
    return hit.at("path");
}

// After a link was re-pointed to another build: NVRTC is loaded, and keys another entry.
void expect_loaded_again(const std::string &cache, const std::string &env, const std::string &before,
                         const char *what) {
    const Lines after = run_worker(cache, 1, env);
    ASSERT_EQ(after.at("status"), kOk) << after.at("all");
    EXPECT_EQ(after.at("nvrtc"), "mapped") << what << ": the old build's record was used";
    EXPECT_NE(after.at("path"), before) << what << ": the old build's entry was hit";
}

}  // namespace

// Issue 51: a host that loaded NVRTC before libkjit's first compile (numba-cuda, cuda.core, CuPy,
// torch) leaves a record when the NVRTC it loaded is the file libkjit's search finds, by
// whatever name the host opened it: a later process that only hits maps no NVRTC.
TEST_F(NvrtcProbe, AHostThatLoadedTheNvrtcTheSearchFindsLeavesARecord) {
    // The file a process of libkjit's own finds (links resolved, as /proc/self/maps names it).
    const Lines plain = run_worker(dir.file("plain"), 1);
    ASSERT_EQ(plain.at("status"), kOk) << plain.at("all");
    const std::string found = plain.at("nvrtc-file");
    const std::string toolkit = KJIT_TOOLKIT_NVRTC;
    const std::string bare = toolkit.substr(toolkit.rfind('/') + 1);
    // By that path (numba-cuda's and cuda.core's pathfinder), then by the bare name (ctypes.CDLL).
    for (const std::string &preload : {found, bare}) {
        SCOPED_TRACE("preloaded as " + preload);
        for (const std::string &record : records_in(cache)) ASSERT_EQ(::unlink((cache + "/" + record).c_str()), 0);
        const Lines host = run_worker(cache, 1, "", false, "'preload:" + preload + "'");
        ASSERT_EQ(host.at("status"), kOk) << host.at("all");
        ASSERT_EQ(host.at("preloaded"), found) << host.at("all");
        EXPECT_EQ(records_in(cache).size(), 1u) << "the host left no record";

        const Lines hit = run_worker(cache, 1);
        ASSERT_EQ(hit.at("status"), kOk) << hit.at("all");
        EXPECT_EQ(hit.at("path"), host.at("path"));
        EXPECT_EQ(hit.at("nvrtc"), "absent") << "a process that only hits loaded NVRTC after a host had";
    }
}

// A host that loaded another file (a copy of another build, by its path: the bare name then
// answers with the copy, which has the same soname) leaves no record, which would key a later
// process's hits with the copy's identity; that process loads the NVRTC its search finds.
TEST_F(NvrtcProbe, AHostThatLoadedAnotherNvrtcLeavesNoRecord) {
    const std::string copy = resolved(nvrtc_build(dir.file("wheel"), 1));
    const Lines host = run_worker(cache, 1, "", false, "'preload:" + copy + "'");
    ASSERT_EQ(host.at("status"), kOk) << host.at("all");
    ASSERT_EQ(host.at("preloaded"), copy) << host.at("all");
    EXPECT_EQ(host.at("nvrtc-file"), copy);
    EXPECT_TRUE(records_in(cache).empty()) << "a record names the host's NVRTC: " << read_file(only_record(cache));

    const Lines later = run_worker(cache, 1);
    ASSERT_EQ(later.at("status"), kOk) << later.at("all");
    EXPECT_EQ(later.at("nvrtc"), "mapped") << "the copy's identity was taken for the NVRTC the search finds";
    EXPECT_NE(later.at("nvrtc-file"), copy);
    EXPECT_NE(later.at("path"), host.at("path")) << "the copy's entry was hit";
    // ... which then leaves the record of its own NVRTC.
    const Lines hit = run_worker(cache, 1);
    EXPECT_EQ(hit.at("path"), later.at("path"));
    EXPECT_EQ(hit.at("nvrtc"), "absent");
}

// A host that loaded the NVRTC in a folder of LD_LIBRARY_PATH, which the search finds first: a
// later process keys with that NVRTC, from the host's record or by loading it. (Where ldconfig's
// cache names another file, the host cannot tell whether the folder is searched before the cache
// or is a system folder, searched after: it leaves no record then.)
TEST_F(NvrtcProbe, AHostThatLoadedTheNvrtcOfASearchedFolderKeysAsTheSearchFinds) {
    const std::string copy = resolved(nvrtc_build(dir.file("libs"), 3));
    const std::string env = "LD_LIBRARY_PATH=" + dir.file("libs");
    const Lines host = run_worker(cache, 1, env, false, "'preload:" + copy + "'");
    ASSERT_EQ(host.at("status"), kOk) << host.at("all");
    ASSERT_EQ(host.at("preloaded"), copy) << host.at("all");
    const Lines later = run_worker(cache, 1, env);
    ASSERT_EQ(later.at("status"), kOk) << later.at("all");
    EXPECT_EQ(later.at("path"), host.at("path")) << "keyed with another NVRTC than the search finds";
    if (later.at("nvrtc") == "mapped") {
        EXPECT_EQ(later.at("nvrtc-file"), copy);
    }
    EXPECT_EQ(run_worker(cache, 1, env).at("nvrtc"), "absent");
}

// KJIT_LIBNVRTC pins the file: a host that loaded that file first leaves a record too.
TEST_F(NvrtcProbe, AHostThatLoadedThePinnedNvrtcLeavesARecord) {
    const std::string pinned = resolved(nvrtc_build(dir.file("pinned"), 2));
    const std::string env = "KJIT_LIBNVRTC=" + pinned;
    const Lines host = run_worker(cache, 1, env, false, "'preload:" + pinned + "'");
    ASSERT_EQ(host.at("status"), kOk) << host.at("all");
    ASSERT_EQ(host.at("preloaded"), pinned) << host.at("all");
    EXPECT_EQ(records_in(cache).size(), 1u) << "the host left no record";
    const Lines hit = run_worker(cache, 1, env);
    EXPECT_EQ(hit.at("path"), host.at("path"));
    EXPECT_EQ(hit.at("nvrtc"), "absent") << "a process that only hits loaded the pinned NVRTC after a host had";
}

TEST_F(NvrtcProbe, KjitLibnvrtcThroughALinkToALinkIsProvenAtEveryLevel) {
    const std::string a = nvrtc_build(dir.file("build-A"), 1);
    const std::string b = nvrtc_build(dir.file("build-B"), 2);
    const std::string c = nvrtc_build(dir.file("build-C"), 3);
    const std::string name = a.substr(a.rfind('/') + 1);
    ASSERT_EQ(::mkdir(dir.file("lib").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(dir.file("alternatives").c_str(), 0755), 0);
    ASSERT_EQ(::symlink(a.c_str(), dir.file("alternatives/nvrtc").c_str()), 0);
    ASSERT_EQ(::symlink("../alternatives/nvrtc", dir.file("lib/" + name).c_str()), 0);
    const std::string env = "KJIT_LIBNVRTC=" + dir.file("lib/" + name);

    std::string before = proven_path(cache, env);
    repoint(dir.file("alternatives/nvrtc"), "../build-B/" + name);  // the second level
    expect_loaded_again(cache, env, before, "the second level re-pointed");

    before = proven_path(cache, env);
    ASSERT_EQ(::symlink(c.c_str(), dir.file("alternatives/nvrtc-c").c_str()), 0);
    repoint(dir.file("lib/" + name), dir.file("alternatives/nvrtc-c"));  // the first level
    expect_loaded_again(cache, env, before, "the first level re-pointed");
    (void)b;
}

TEST_F(NvrtcProbe, ASearchedLibraryThroughALinkToALinkIsProvenAtEveryLevel) {
    const std::string a = nvrtc_build(dir.file("build-A"), 1);
    const std::string b = nvrtc_build(dir.file("build-B"), 2);
    const std::string name = a.substr(a.rfind('/') + 1);
    ASSERT_EQ(::mkdir(dir.file("libs").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(dir.file("alternatives").c_str(), 0755), 0);
    ASSERT_EQ(::symlink("../build-A", dir.file("alternatives/nvrtc").c_str()), 0);
    ASSERT_EQ(::symlink(dir.file("alternatives/nvrtc/" + name).c_str(), dir.file("libs/" + name).c_str()), 0);
    const std::string env = "LD_LIBRARY_PATH=" + dir.file("libs");

    const std::string before = proven_path(cache, env);
    repoint(dir.file("alternatives/nvrtc"), "../build-B");  // a folder link behind the entry's link
    expect_loaded_again(cache, env, before, "the folder behind the link re-pointed");
    (void)b;
}

TEST_F(NvrtcProbe, ARecordThatIsNotThisUsersOrNotWholeIsNotUsed) {
    ASSERT_EQ(run_worker(cache, 1).at("status"), kOk);
    const std::string record = only_record(cache);
    const std::string text = read_file(record);

    // Another user's record (a file they made, renamed into place).
    if (::geteuid() == 0) {
        ASSERT_EQ(::chown(record.c_str(), 65534, 65534), 0);
        EXPECT_EQ(run_worker(cache, 1).at("nvrtc"), "mapped");
        EXPECT_EQ(run_worker(cache, 1).at("nvrtc"), "absent") << "the user's own record was not written back";
    }
    const std::vector<std::string> damaged = damaged_probe_records(text);
    for (const std::string &bad : damaged) {
        write_file(record, bad);
        const Lines run = run_worker(cache, 1);
        EXPECT_EQ(run.at("status"), kOk) << run.at("all");
        EXPECT_EQ(run.at("nvrtc"), "mapped") << "a damaged record was used:\n" << bad;
        EXPECT_EQ(read_file(record), text) << "the damaged record was not replaced";
    }
    // A link in its place is not followed.
    const std::string elsewhere = dir.file("elsewhere");
    write_file(elsewhere, text);
    ASSERT_EQ(::unlink(record.c_str()), 0);
    ASSERT_EQ(::symlink(elsewhere.c_str(), record.c_str()), 0);
    EXPECT_EQ(run_worker(cache, 1).at("nvrtc"), "mapped");
}

TEST_F(NvrtcProbe, AWrongRecordFailsOneCompileAndNeverStoresUnderItsKey) {
    ASSERT_EQ(run_worker(cache, 1).at("status"), kOk);
    const std::string record = only_record(cache);
    std::string text = read_file(record);
    const std::size_t at = text.find("\nidentity ");
    ASSERT_NE(at, std::string::npos);
    const std::size_t end = text.find('\n', at + 1);
    const std::string real = text.substr(at + 10, end - at - 10);
    text = text.substr(0, at) + "\nidentity 13.0 libnvrtc.so.13 1" + text.substr(end);
    write_file(record, text);

    // The forged identity keys a miss; the compile loads NVRTC, which says otherwise.
    const Lines run = run_worker(cache, 3, "", true);
    EXPECT_EQ(run.at("status1"), std::to_string(KJIT_ERROR_NVRTC)) << run.at("all");
    EXPECT_NE(run.at("all").find("retry the compile"), std::string::npos) << run.at("all");
    EXPECT_EQ(run.at("status"), kOk) << "the retry in the same process failed: " << run.at("all");
    // The record is the real one again, and the retry's cubin is where a fresh process finds it.
    EXPECT_NE(read_file(only_record(cache)).find("\nidentity " + real + "\n"), std::string::npos);
    const Lines fresh = run_worker(cache, 3);
    EXPECT_EQ(fresh.at("path"), run.at("path"));
    EXPECT_EQ(fresh.at("nvrtc"), "absent");
}

}  // namespace
