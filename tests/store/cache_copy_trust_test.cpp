// Export and import trust what a seed trusts (docs/cache-layout.md, "Who may write a seed"):
// `kjit cache import DIR` copies only entries whose folder, shard and files DIR's owner trusts,
// and `kjit cache export DIR` counts an entry already in DIR as there only when DIR trusts its
// owner and its cubin is the source's; anything else is refused, naming its owner, or replaced.
//
// The plant is the one of issue 45: in a folder the importer owns (0770, her group, no setgid:
// a private cache by the rules, so what group members put in it is not theirs to share), a
// group member puts his kernel's entry under her kernel's key, with a valid manifest whose check
// line he recomputed. Read as a seed it is refused; copied by import, her next compile would be
// a hit on his cubin with no NVRTC run. Also through a link (his shard as a symbolic link), and
// in a team folder, where the foreign owner is one outside the group.
#include "other_users.hpp"

#include "store/cache_entry.hpp"
#include "store/cache_verification.hpp"

#include <sys/stat.h>

using namespace kjit_test;
using namespace kjit_test::other_users;
namespace cache_entry = kjit::store::cache_entry;

namespace {

// The key of the entry whose cubin is at `cubin` (<cache>/<shard>/<key>/kernel.cubin).
std::string key_of(const std::string &cubin) {
    const std::string entry = cubin.substr(0, cubin.rfind('/'));
    return entry.substr(entry.rfind('/') + 1);
}

// The key of alice's request (kSource), from a compile into a scratch cache of root's: a key
// holds the request and NVRTC's build, not who asked.
std::string her_key() {
    TempDir scratch;
    std::string path;
    EXPECT_EQ(compile(scratch.file("cache"), kSource, &path), KJIT_OK) << path;
    return key_of(path);
}

// As `user`: compile kOtherSource into a cache of their own under `staging` (a sticky folder),
// then move its entry to `key`'s place there with its manifest's key changed and its check line
// recomputed: a sound entry for `key` holding the other kernel. Returns the shard folder it is
// in (Outcome::out).
Outcome forge_as(const User &user, const SharedDir &staging, const std::string &key) {
    return run_as(user, [&](std::string &out) {
        const std::string cache = staging.file(user.name + "-cache");
        std::string cubin;
        if (compile(cache, kOtherSource, &cubin) != KJIT_OK) {
            out = "compile: " + cubin;
            return 1;
        }
        const std::string from = cubin.substr(0, cubin.rfind('/'));
        const std::string shard = cache + "/" + key.substr(0, 2);
        const std::string to = shard + "/" + key;
        if ((::mkdir(shard.c_str(), 0755) != 0 && errno != EEXIST) || ::rename(from.c_str(), to.c_str()) != 0) {
            out = "cannot move " + from + " to " + to;
            return 2;
        }
        auto manifest = cache_entry::read_manifest(to);
        if (!manifest) {
            out = manifest.error().message;
            return 3;
        }
        manifest->key = key;
        write_file(to + "/" + cache_entry::kManifestFile, cache_entry::format_manifest(*manifest));
        if (std::system(("chmod -R a+rX '" + cache + "'").c_str()) != 0) return 4;
        out = shard;
        return 0;
    });
}

// A folder `path` of `owner` and group `group` with `mode`, made by root.
void make_folder(const std::string &path, uid_t owner, gid_t group, mode_t mode) {
    ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
    ASSERT_EQ(::chown(path.c_str(), owner, group), 0) << path;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

// What an import or export reported, as one line per count and per refused entry.
struct Copied {
    kjit_status status = KJIT_ERROR_INTERNAL;
    kjit_copy_report counts = KJIT_COPY_REPORT_INIT;
    std::vector<int> kinds;
    std::string details;  // every finding's path and detail
};

Copied copy(bool is_export, const std::string &cache, const std::string &other) {
    Copied c;
    kjit_verify_report *refused = nullptr;
    c.status = is_export ? kjit_cache_export(cache.c_str(), other.c_str(), nullptr, &c.counts, &refused)
                         : kjit_cache_import(other.c_str(), cache.c_str(), &c.counts, &refused);
    if (c.status != KJIT_OK) c.details = kjit_last_error();
    for (size_t i = 0; i < kjit_verify_report_count(refused); ++i) {
        c.kinds.push_back(kjit_verify_report_kind(refused, i));
        c.details +=
            std::string(kjit_verify_report_path(refused, i)) + ": " + kjit_verify_report_detail(refused, i) + "\n";
    }
    kjit_verify_report_release(refused);
    return c;
}

// A child's body: import `seed` into `cache` (or export `cache` to `seed`); writes
// "copied=N present=N refused=N kinds=K,K <details>".
std::function<int(std::string &)> copying(bool is_export, const std::string &cache, const std::string &seed) {
    return [=](std::string &out) {
        const Copied c = copy(is_export, cache, seed);
        std::string kinds;
        for (int k : c.kinds) kinds += (kinds.empty() ? "" : ",") + std::to_string(k);
        out = "status=" + std::to_string(static_cast<int>(c.status)) +
              " copied=" + std::to_string(c.counts.copied_entries) +
              " present=" + std::to_string(c.counts.present_entries) +
              " refused=" + std::to_string(c.counts.refused_entries) + " kinds=" + kinds + " " + c.details;
        return c.status == KJIT_OK ? 0 : 1;
    };
}

// A child's body: compile kSource into `cache` and say what NVRTC did and whose kernel came back.
std::function<int(std::string &)> compiling_hers(const std::string &cache) {
    return [cache](std::string &out) {
        kjit_stats before = KJIT_STATS_INIT;
        kjit_get_stats(&before);
        std::string path;
        const kjit_status st = compile(cache, kSource, &path);
        kjit_stats after = KJIT_STATS_INIT;
        kjit_get_stats(&after);
        out = "nvrtc=" + std::to_string(after.nvrtc_compiles - before.nvrtc_compiles) +
              " name=" + (st == KJIT_OK ? resolve(path) : std::string("error: ") + path);
        return st == KJIT_OK ? 0 : 1;
    };
}

const std::string kForeign = "kinds=" + std::to_string(KJIT_CACHE_FOREIGN) + " ";

// The seed folders of the cases: the one of the issue (alice's, 0770, group team, no setgid),
// and a team folder (root's, 02770, group team).
struct Folders {
    SharedDir top{0755};
    SharedDir staging{01777};
    std::string seed = top.file("seed");
    std::string cache = staging.file("alice-own-cache");  // alice's cache, made by her first use
};

void private_seed(const Folders &f) { make_folder(f.seed, users().alice.uid, users().team_gid, 0770); }
void team_seed(const Folders &f) { make_folder(f.seed, 0, users().team_gid, 02770); }

// bob forges an entry for her key and moves its shard into the seed (he can write it).
void plant_bobs_shard(const Folders &f, const std::string &key) {
    const Outcome forged = forge_as(users().bob, f.staging, key);
    ASSERT_EQ(forged.code, 0) << forged.out;
    const std::string into = f.seed + "/" + key.substr(0, 2);
    const Outcome moved = run_as(users().bob, [&](std::string &out) {
        out = into;
        return ::rename(forged.out.c_str(), into.c_str()) == 0 ? 0 : 1;
    });
    ASSERT_EQ(moved.code, 0) << "bob cannot move his shard into " << moved.out;
}

}  // namespace

// Defect 1: the plant is refused by import, named, and her next compile runs NVRTC for her own
// kernel; the CLI says so and exits 20.
TEST(ImportTrust, AGroupMembersEntryInAPrivateFolderIsRefused) {
    REQUIRE_USERS();
    Folders f;
    private_seed(f);
    const std::string key = her_key();
    plant_bobs_shard(f, key);
    const Outcome imported = run_as(users().alice, copying(false, f.cache, f.seed));
    EXPECT_EQ(imported.code, 0) << imported.out;
    EXPECT_TRUE(contains(imported.out, "copied=0 present=0 refused=1 " + kForeign)) << imported.out;
    EXPECT_TRUE(contains(imported.out, "owned by " + users().bob.name)) << imported.out;
    const Outcome hers = run_as(users().alice, compiling_hers(f.cache));
    EXPECT_EQ(hers.out, "nvrtc=1 name=" + kName) << "alice was handed bob's cubin";
    // verify says the same of the folder: the entry is foreign, not sound.
    const Outcome verified = run_as(users().alice, [&](std::string &out) {
        auto report = kjit::store::cache_verification::verify(f.seed, false);
        if (!report) {
            out = report.error().message;
            return 1;
        }
        for (const auto &finding : report->findings) {
            out += std::string(kjit::store::cache_verification::to_string(finding.damage)) + ": " + finding.detail;
        }
        return 0;
    });
    EXPECT_TRUE(contains(verified.out, "foreign: cache shard folder")) << verified.out;
    EXPECT_TRUE(contains(verified.out, "owned by " + users().bob.name)) << verified.out;

    const std::string cli = stage().cli();
    ASSERT_NE(cli, "") << stage().error();
    const Outcome o = run_as(users().alice, [&](std::string &out) {
        const Outcome c = run_cli({"cache", "import", f.seed, "--cache-dir", f.staging.file("alice-cli-cache")}, cli);
        out = c.out;
        return c.code;
    });
    EXPECT_EQ(o.code, 20) << o.out;
    EXPECT_TRUE(contains(o.out, "foreign")) << o.out;
    EXPECT_TRUE(contains(o.out, users().bob.name)) << o.out;
}

// The same plant one level down: alice's own shard is group-writable, and bob puts his entry
// folder in it; or he replaces the files of her group-writable entry with his.
TEST(ImportTrust, AGroupMembersEntryOrFilesInHerShardAreRefused) {
    REQUIRE_USERS();
    Folders f;
    private_seed(f);
    const std::string key = her_key();
    const std::string shard = f.seed + "/" + key.substr(0, 2);
    make_folder(shard, users().alice.uid, users().team_gid, 0770);
    const Outcome forged = forge_as(users().bob, f.staging, key);
    ASSERT_EQ(forged.code, 0) << forged.out;
    const Outcome moved = run_as(users().bob, [&](std::string &) {
        return ::rename((forged.out + "/" + key).c_str(), (shard + "/" + key).c_str()) == 0 ? 0 : 1;
    });
    ASSERT_EQ(moved.code, 0);
    const Outcome entry = run_as(users().alice, copying(false, f.cache, f.seed));
    EXPECT_TRUE(contains(entry.out, "copied=0 present=0 refused=1 " + kForeign)) << entry.out;
    EXPECT_TRUE(contains(entry.out, "cache entry '" + shard + "/" + key + "' is owned by " + users().bob.name))
        << entry.out;

    // Now the entry folder is hers (group-writable), the files in it his.
    const std::string place = shard + "/" + key;
    const std::string bobs = f.staging.file("bobs-entry");
    ASSERT_EQ(::rename(place.c_str(), bobs.c_str()), 0);
    make_folder(place, users().alice.uid, users().team_gid, 0770);
    for (const std::string &name : list_dir(bobs)) {
        ASSERT_EQ(::rename((bobs + "/" + name).c_str(), (place + "/" + name).c_str()), 0) << name;
    }
    const Outcome files = run_as(users().alice, copying(false, f.staging.file("alice-second"), f.seed));
    EXPECT_TRUE(contains(files.out, "copied=0 present=0 refused=1 " + kForeign)) << files.out;
    EXPECT_TRUE(contains(files.out, "owned by " + users().bob.name)) << files.out;
}

// Through a link: bob's shard in the seed is a symbolic link to his own folder.
TEST(ImportTrust, AShardThatIsALinkToAnotherUsersFolderIsRefused) {
    REQUIRE_USERS();
    Folders f;
    private_seed(f);
    const std::string key = her_key();
    const Outcome forged = forge_as(users().bob, f.staging, key);
    ASSERT_EQ(forged.code, 0) << forged.out;
    const std::string link = f.seed + "/" + key.substr(0, 2);
    ASSERT_EQ(run_as(users().bob, [&](std::string &) { return ::symlink(forged.out.c_str(), link.c_str()); }).code, 0);
    const Outcome imported = run_as(users().alice, copying(false, f.cache, f.seed));
    EXPECT_TRUE(contains(imported.out, "copied=0 present=0 refused=1 " + kForeign)) << imported.out;
    EXPECT_TRUE(contains(imported.out, link)) << imported.out;
    EXPECT_TRUE(contains(imported.out, users().bob.name)) << imported.out;
    EXPECT_EQ(run_as(users().alice, compiling_hers(f.cache)).out, "nvrtc=1 name=" + kName);
}

// A team folder trusts its members (bob's entry is copied: the control) and no one else: a shard
// of carol's, who is not in the group, is refused, naming her.
TEST(ImportTrust, InATeamFolderAMembersEntryIsCopiedAnOutsidersIsRefused) {
    REQUIRE_USERS();
    Folders f;
    team_seed(f);
    const Outcome members = run_as(users().bob, compiling(f.seed, kOtherSource));
    ASSERT_EQ(members.code, 0) << members.out;
    const std::string key = her_key();
    const Outcome forged = forge_as(users().carol, f.staging, key);
    ASSERT_EQ(forged.code, 0) << forged.out;
    const std::string into = f.seed + "/" + key.substr(0, 2);
    if (exists(into)) {  // bob's kernel's shard is hers: carol's entry goes in it, as root puts it
        ASSERT_EQ(::rename((forged.out + "/" + key).c_str(), (into + "/" + key).c_str()), 0);
    } else {
        ASSERT_EQ(::rename(forged.out.c_str(), into.c_str()), 0);
    }
    const Outcome imported = run_as(users().alice, copying(false, f.cache, f.seed));
    EXPECT_TRUE(contains(imported.out, "copied=1 present=0 refused=1 " + kForeign)) << imported.out;
    EXPECT_TRUE(contains(imported.out, "owned by " + users().carol.name)) << imported.out;
    EXPECT_EQ(run_as(users().alice, compiling_hers(f.cache)).out, "nvrtc=1 name=" + kName);
}

// Defect 2: bob's plant in her seed is not "there already": the export refuses it, naming him,
// and fails (exit 20 from the CLI), so an image build that exports does not ship his cubin.
TEST(ExportTrust, AGroupMembersEntryInTheSeedIsRefusedNotCountedAsThere) {
    REQUIRE_USERS();
    Folders f;
    private_seed(f);
    ASSERT_EQ(run_as(users().alice, compiling_hers(f.cache)).out, "nvrtc=1 name=" + kName);
    plant_bobs_shard(f, her_key());
    const Outcome exported = run_as(users().alice, copying(true, f.cache, f.seed));
    EXPECT_TRUE(contains(exported.out, "copied=0 present=0 refused=1 " + kForeign)) << exported.out;
    EXPECT_TRUE(contains(exported.out, "owned by " + users().bob.name)) << exported.out;

    const std::string cli = stage().cli();
    ASSERT_NE(cli, "") << stage().error();
    const Outcome o = run_as(users().alice, [&](std::string &out) {
        const Outcome c = run_cli({"cache", "export", f.seed, "--cache-dir", f.cache}, cli);
        out = c.out;
        return c.code;
    });
    EXPECT_EQ(o.code, 20) << o.out;
    EXPECT_TRUE(contains(o.out, users().bob.name)) << o.out;
}

// Through a link, and in a team folder with an outsider's shard: refused the same way.
TEST(ExportTrust, ALinkedShardOrAnOutsidersShardIsRefused) {
    REQUIRE_USERS();
    for (const bool team : {false, true}) {
        SCOPED_TRACE(team ? "team folder, carol's shard" : "private folder, bob's link");
        Folders f;
        if (team) {
            team_seed(f);
        } else {
            private_seed(f);
        }
        ASSERT_EQ(run_as(users().alice, compiling_hers(f.cache)).out, "nvrtc=1 name=" + kName);
        const std::string key = her_key();
        const User &planter = team ? users().carol : users().bob;
        const Outcome forged = forge_as(planter, f.staging, key);
        ASSERT_EQ(forged.code, 0) << forged.out;
        const std::string into = f.seed + "/" + key.substr(0, 2);
        if (team) {
            ASSERT_EQ(::rename(forged.out.c_str(), into.c_str()), 0);  // as root would move it
        } else {
            ASSERT_EQ(run_as(planter, [&](std::string &) { return ::symlink(forged.out.c_str(), into.c_str()); }).code,
                      0);
        }
        const Outcome exported = run_as(users().alice, copying(true, f.cache, f.seed));
        EXPECT_TRUE(contains(exported.out, "copied=0 present=0 refused=1 " + kForeign)) << exported.out;
        EXPECT_TRUE(contains(exported.out, into)) << exported.out;
        EXPECT_TRUE(contains(exported.out, planter.name)) << exported.out;
    }
}

// An entry the seed's owner trusts but whose cubin is not the source's (here one alice forged
// herself, as an older export of another build would leave) is replaced, not counted as there.
TEST(ExportTrust, ATrustedEntryWithAnotherCubinIsReplaced) {
    REQUIRE_USERS();
    Folders f;
    ASSERT_EQ(run_as(users().alice, [&](std::string &) { return ::mkdir(f.staging.file("seed").c_str(), 0700); }).code,
              0);
    const std::string seed = f.staging.file("seed");
    ASSERT_EQ(run_as(users().alice, compiling_hers(f.cache)).out, "nvrtc=1 name=" + kName);
    const std::string key = her_key();
    const Outcome forged = forge_as(users().alice, f.staging, key);
    ASSERT_EQ(forged.code, 0) << forged.out;
    ASSERT_EQ(run_as(users().alice,
                     [&](std::string &) {
                         return ::rename(forged.out.c_str(), (seed + "/" + key.substr(0, 2)).c_str()) == 0 ? 0 : 1;
                     })
                  .code,
              0);
    const Outcome exported = run_as(users().alice, copying(true, f.cache, seed));
    EXPECT_TRUE(contains(exported.out, "copied=1 present=0 refused=0 kinds= ")) << exported.out;
    const std::string cubin = seed + "/" + key.substr(0, 2) + "/" + key + "/" + cache_entry::kCubinFile;
    EXPECT_EQ(run_as(users().alice,
                     [&](std::string &out) {
                         out = resolve(cubin);
                         return 0;
                     })
                  .out,
              kName);
    // Exported again: now it is there.
    const Outcome again = run_as(users().alice, copying(true, f.cache, seed));
    EXPECT_TRUE(contains(again.out, "copied=0 present=1 refused=0 ")) << again.out;
}
