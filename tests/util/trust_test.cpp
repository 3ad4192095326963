// Trust between Unix users (docs/hardening.md, "Other users"): a private cache trusts only what
// the caller (or root) owns, a team cache (a group-owned, group-writable, setgid folder) trusts
// its group's members, and a cache folder that is a symbolic link works for maintenance too.
//
// The cases with other users need real ones (tests/support/other_users.hpp): as root, a group
// and three users, each user's part in a child that drops its privileges. Not root: those cases
// are skipped, saying why.
#include "other_users.hpp"

#include "store/cache_eviction.hpp"
#include "store/cache_verification.hpp"
#include "util/hashing.hpp"

using namespace kjit_test;
using namespace kjit_test::other_users;

// A foreign cache folder: one pre-created by another user (mode 0755) with a kernel planted in it.
TEST(PrivateCache, ForeignPrecreatedCacheFolderIsRefused) {
    REQUIRE_USERS();
    SharedDir top(01777);  // as /tmp
    const std::string cache = top.file("cache");
    plant_entry_as(users().bob, cache, kSource);
    const Outcome o = run_as(users().alice, compiling(cache, kSource));
    EXPECT_EQ(o.code, 1) << "alice was handed bob's cubin: " << o.out;
    EXPECT_TRUE(contains(o.out, "status=5 ")) << o.out;
    EXPECT_TRUE(contains(o.out, cache)) << o.out;
    EXPECT_TRUE(contains(o.out, users().bob.name)) << "the message must name the owner: " << o.out;
}

// A foreign cache folder: the cache folder is a link (alice's own) to a folder of another user.
TEST(PrivateCache, LinkToForeignFolderIsRefused) {
    REQUIRE_USERS();
    SharedDir top(01777);  // as /tmp
    const std::string theirs = top.file("theirs");
    plant_entry_as(users().bob, theirs, kSource);
    const std::string link = top.file("alice-cache");
    const Outcome made = run_as(users().alice, [&](std::string &) { return ::symlink(theirs.c_str(), link.c_str()); });
    ASSERT_EQ(made.code, 0);
    const Outcome o = run_as(users().alice, compiling(link, kSource));
    EXPECT_EQ(o.code, 1) << "alice was handed bob's cubin through the link: " << o.out;
    EXPECT_TRUE(contains(o.out, users().bob.name)) << o.out;
    // Maintenance through the link is refused the same way: it would remove bob's files.
    const Outcome prune = run_as(users().alice, [&](std::string &out) {
        auto report = kjit::store::cache_eviction::prune(link, {});
        out = report ? "pruned" : report.error().message;
        return report ? 0 : 1;
    });
    EXPECT_EQ(prune.code, 1) << prune.out;
    EXPECT_TRUE(contains(prune.out, users().bob.name)) << prune.out;
}

// A foreign cache folder: under a parent writable by others without the sticky bit, anyone can rename the
// cache folder away and put one of theirs in its place.
TEST(PrivateCache, ParentWritableByOthersIsRefusedStickyParentIsNot) {
    REQUIRE_USERS();
    SharedDir open_parent(0777);
    const std::string cache = open_parent.file("cache");
    const Outcome o = run_as(users().alice, compiling(cache, kSource));
    EXPECT_EQ(o.code, 1) << o.out;
    EXPECT_TRUE(contains(o.out, open_parent.path())) << "the message must name the parent: " << o.out;
    EXPECT_TRUE(contains(o.out, "writable by others")) << o.out;
    SharedDir sticky(01777);
    const std::string mine = sticky.file("cache");
    const Outcome first = run_as(users().alice, compiling(mine, kSource));
    EXPECT_EQ(first.code, 0) << "a sticky parent such as /tmp is fine: " << first.out;
}

// A foreign cache folder: the folder swapped out of a world-writable non-sticky parent for one with a kernel.
TEST(PrivateCache, FolderSwappedOutOfOpenParentIsRefused) {
    REQUIRE_USERS();
    SharedDir open_parent(0777);
    const std::string cache = open_parent.file("cache");
    ASSERT_EQ(run_as(users().alice, [&](std::string &) { return ::mkdir(cache.c_str(), 0700); }).code, 0);
    const Outcome swap = run_as(users().bob, [&](std::string &out) {
        if (::rename(cache.c_str(), open_parent.file("moved").c_str()) != 0) {
            out = "rename failed";
            return 1;
        }
        return 0;
    });
    ASSERT_EQ(swap.code, 0) << swap.out;
    // libkjit refuses to fill a folder under that parent, so bob fills one elsewhere and moves it.
    SharedDir staging(01777);
    plant_entry_as(users().bob, staging.file("cache"), kSource);
    const Outcome moved =
        run_as(users().bob, [&](std::string &) { return ::rename(staging.file("cache").c_str(), cache.c_str()); });
    ASSERT_EQ(moved.code, 0);
    const Outcome o = run_as(users().alice, compiling(cache, kSource));
    EXPECT_EQ(o.code, 1) << "alice was handed bob's cubin: " << o.out;
}

// Of the same kind: a link used as the cache folder decides where kernels come from, so one
// another user owns (in a sticky folder, they can replace it at will) is refused even when it
// points to the caller's own folder.
TEST(PrivateCache, LinkOwnedByAnotherUserIsRefused) {
    REQUIRE_USERS();
    SharedDir sticky(01777);
    const std::string real = sticky.file("real");
    const std::string link = sticky.file("link");
    ASSERT_EQ(run_as(users().alice, [&](std::string &) { return ::mkdir(real.c_str(), 0700); }).code, 0);
    ASSERT_EQ(run_as(users().bob, [&](std::string &) { return ::symlink(real.c_str(), link.c_str()); }).code, 0);
    const Outcome o = run_as(users().alice, compiling(link, kSource));
    EXPECT_EQ(o.code, 1) << o.out;
    EXPECT_TRUE(contains(o.out, "symbolic link owned by " + users().bob.name)) << o.out;
    EXPECT_TRUE(contains(o.out, "nvrtc=0")) << o.out;
}

// Of the same kind: a private cache its owner made group-writable (not setgid, so not a team
// cache) lets group members add shards, entries and a lock. None of theirs is trusted: a hit on
// their entry and a prune waiting on their lock are refused, naming them.
TEST(PrivateCache, EntryAndLockOfAnotherUserInAGroupWritablePrivateFolderAreRefused) {
    REQUIRE_USERS();
    SharedDir top;
    const std::string cache = top.file("cache");
    ASSERT_EQ(::mkdir(cache.c_str(), 0770), 0);
    ASSERT_EQ(::chmod(cache.c_str(), 0770), 0);
    ASSERT_EQ(::chown(cache.c_str(), users().alice.uid, users().team_gid), 0);
    // bob fills a folder of his own and moves its shard in (libkjit would refuse alice's folder).
    SharedDir staging(01777);
    plant_entry_as(users().bob, staging.file("bobs"), kSource);
    const Outcome moved = run_as(users().bob, [&](std::string &out) {
        for (const std::string &name : list_dir(staging.file("bobs"))) {
            if (name.size() != 2) continue;
            const std::string to = cache + "/" + name;
            if (::rename(staging.file("bobs/" + name).c_str(), to.c_str()) != 0) return 1;
            out = to;
        }
        const int fd = ::open((cache + "/.kjit-lock").c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
        if (fd < 0) return 2;
        ::close(fd);
        return 0;
    });
    ASSERT_EQ(moved.code, 0) << moved.out;
    const Outcome o = run_as(users().alice, compiling(cache, kSource));
    EXPECT_EQ(o.code, 1) << "alice was handed bob's cubin: " << o.out;
    EXPECT_TRUE(contains(o.out, "owned by " + users().bob.name)) << o.out;
    EXPECT_TRUE(contains(o.out, moved.out)) << "the message must name bob's folder: " << o.out;
    const Outcome prune = run_as(users().alice, [&](std::string &out) {
        auto report = kjit::store::cache_eviction::prune(cache, {});
        out = report ? "pruned" : report.error().message;
        return report ? 0 : 1;
    });
    EXPECT_EQ(prune.code, 1) << prune.out;
    EXPECT_TRUE(contains(prune.out, "cache lock")) << prune.out;
    EXPECT_TRUE(contains(prune.out, users().bob.name)) << prune.out;
}

// A planted sidecar: in a sticky folder such as /tmp, another user writes a.cubin.name beside alice's
// a.cubin naming another kernel that passes the keyword rule. It is ignored; the right name
// comes from a scan, and alice (who cannot replace bob's file there) gets it from the memo.
TEST(PrivateCache, PlantedSidecarInStickyFolderIsIgnored) {
    REQUIRE_USERS();
    SharedDir sticky(01777);
    const std::string cubin = sticky.file("a.cubin");
    const std::string &bytes = cubin_for(sources::kPrefixCollision);  // _Z4gemmPf and _Z9gemm_fp16Pf
    ASSERT_EQ(run_as(users().alice,
                     [&](std::string &) {
                         write_file(cubin, bytes);
                         return ::chmod(cubin.c_str(), 0644);
                     })
                  .code,
              0);
    // Bob writes a well-formed line (the check is a plain hash) for alice's cubin version.
    const Outcome planted = run_as(users().bob, [&](std::string &out) {
        struct stat st {};
        if (::stat(cubin.c_str(), &st) != 0) return 1;
        std::string body = "gemm " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + ".";
        char nsec[16];
        std::snprintf(nsec, sizeof nsec, "%09ld", static_cast<long>(st.st_mtim.tv_nsec));
        body += nsec;
        body += " - _Z9gemm_fp16Pf";
        char check[32];
        std::snprintf(check, sizeof check, " %016llx\n", static_cast<unsigned long long>(kjit::hash64(body)));
        const std::string text = "kjit-sidecar 1\n" + body + check;
        const int fd = ::open((cubin + ".name").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0) return 2;
        const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
        ::close(fd);
        out = text;
        return ok ? 0 : 3;
    });
    ASSERT_EQ(planted.code, 0) << planted.out;
    const std::string planted_text = read_file(cubin + ".name");
    const Outcome o = run_as(users().alice, [&](std::string &out) {
        kjit_stats before = KJIT_STATS_INIT;
        kjit_get_stats(&before);
        const std::uint64_t rejected_before = before.sidecar_rejections[KJIT_SIDECAR_UNREADABLE];
        out = resolve(cubin) + " " + resolve(cubin);
        kjit_kernel *k = nullptr;
        const kjit_status st = kjit_load_cached(cubin.c_str(), "gemm", &k);
        out += " " + (st == KJIT_OK ? std::string(kjit_kernel_name(k)) : std::string(kjit_last_error()));
        kjit_kernel_release(k);
        kjit_stats s = KJIT_STATS_INIT;
        kjit_get_stats(&s);
        out +=
            " rejected_unreadable=" + std::to_string(s.sidecar_rejections[KJIT_SIDECAR_UNREADABLE] - rejected_before);
        return 0;
    });
    EXPECT_EQ(o.out, "_Z4gemmPf _Z4gemmPf _Z4gemmPf rejected_unreadable=3");
    EXPECT_EQ(read_file(cubin + ".name"), planted_text) << "bob's file is his; nothing rewrote it";
    // Alice's own rewrite works where she may make one: her folder, bob's file dropped in by
    // someone who could write it (here: root moves it in).
    SharedDir mine(0755);
    const std::string own = mine.file("a.cubin");
    write_file(own, bytes);
    write_file(own + ".name", planted_text);
    ASSERT_EQ(::chown(own.c_str(), users().alice.uid, users().alice.gid), 0);
    ASSERT_EQ(::chown(mine.path().c_str(), users().alice.uid, users().alice.gid), 0);
    ASSERT_EQ(::chown((own + ".name").c_str(), users().bob.uid, users().bob.gid), 0);
    // the cubin's version must match the planted line: same bytes, so copy its mtime
    struct stat st {};
    ASSERT_EQ(::stat(cubin.c_str(), &st), 0);
    const struct timespec times[2] = {st.st_mtim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, own.c_str(), times, 0), 0);
    const Outcome again = run_as(users().alice, [&](std::string &out) {
        out = resolve(own);
        struct stat side {};
        if (::lstat((own + ".name").c_str(), &side) == 0) out += side.st_uid == ::getuid() ? " rewritten" : " foreign";
        return 0;
    });
    EXPECT_EQ(again.out, "_Z4gemmPf rewritten");
}

// Team caches: two members of a team share a team cache: each hits the other's entries, each can
// prune, and a user outside the group is refused with a message that says so.
TEST(TeamCache, MembersShareEntriesAndPruneOutsidersAreRefused) {
    REQUIRE_USERS();
    SharedDir top;
    const std::string cache = top.file("team-cache");
    ASSERT_EQ(::mkdir(cache.c_str(), 0700), 0);
    ASSERT_EQ(::chown(cache.c_str(), 0, users().team_gid), 0);
    ASSERT_EQ(::chmod(cache.c_str(), 02770), 0);

    const Outcome a1 = run_as(users().alice, compiling(cache, kSource));
    ASSERT_EQ(a1.code, 0) << a1.out;
    const Outcome b1 = run_as(users().bob, compiling(cache, kSource));
    EXPECT_EQ(b1.code, 0) << b1.out;
    EXPECT_TRUE(contains(b1.out, "status=0 nvrtc=0 ")) << "bob must hit alice's entry: " << b1.out;
    const Outcome b2 = run_as(users().bob, compiling(cache, kOtherSource));
    EXPECT_EQ(b2.code, 0) << b2.out;
    const Outcome a2 = run_as(users().alice, compiling(cache, kOtherSource));
    EXPECT_TRUE(contains(a2.out, "status=0 nvrtc=0 ")) << "alice must hit bob's entry: " << a2.out;
    // Resolve and load each other's entries.
    const std::string alice_cubin = a1.out.substr(a1.out.rfind(' ') + 1);
    const std::string bob_cubin = b2.out.substr(b2.out.rfind(' ') + 1);
    const Outcome loads = run_as(users().bob, [&](std::string &out) {
        out = resolve(alice_cubin);
        kjit_kernel *k = nullptr;
        const kjit_status st = kjit_load_cached(alice_cubin.c_str(), "gemm", &k);
        out += " " + (st == KJIT_OK ? std::string(kjit_kernel_name(k)) : std::string(kjit_last_error()));
        kjit_kernel_release(k);
        return 0;
    });
    EXPECT_EQ(loads.out, kName + " " + kName);
    const Outcome aload = run_as(users().alice, [&](std::string &out) {
        out = resolve(bob_cubin);
        return 0;
    });
    EXPECT_EQ(aload.out, kOtherName);

    // Files and folders made there are group-readable and writable, whatever the umask.
    struct stat st {};
    ASSERT_EQ(::stat(alice_cubin.c_str(), &st), 0);
    EXPECT_EQ(st.st_gid, users().team_gid);
    EXPECT_EQ(st.st_mode & 0060, 0060u);
    const std::string entry = alice_cubin.substr(0, alice_cubin.rfind('/'));
    ASSERT_EQ(::stat(entry.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 02070, 02070u);

    // Both members prune (and verify): through the same code as `kjit cache prune`.
    for (const User *u : {&users().alice, &users().bob}) {
        const Outcome p = run_as(*u, [&](std::string &out) {
            kjit::store::cache_eviction::PruneOptions older;
            older.older_than_ns = 3600LL * 1'000'000'000;
            auto report = kjit::store::cache_eviction::prune(cache, older);
            if (!report) {
                out = report.error().message;
                return 1;
            }
            auto verified = kjit::store::cache_verification::verify(cache, true);
            if (!verified || !verified->clean()) {
                out = verified ? "verify found damage" : verified.error().message;
                return 1;
            }
            return 0;
        });
        EXPECT_EQ(p.code, 0) << u->name << ": " << p.out;
    }
    // And through the kjit command itself (staged: the build tree may be out of their reach).
    const std::string cli = stage().cli();
    ASSERT_NE(cli, "") << stage().error();
    for (const User *u : {&users().alice, &users().bob}) {
        const Outcome p = run_as(*u, [&](std::string &out) {
            const Outcome o = run_cli({"cache", "prune", "--older-than", "1h", "--cache-dir", cache}, cli);
            out = o.out;
            return o.code;
        });
        EXPECT_EQ(p.code, 0) << u->name << ": kjit cache prune: " << p.out;
    }
    const Outcome cleared = run_as(users().bob, [&](std::string &out) {
        auto report = kjit::store::cache_eviction::clear(cache);
        out = report ? std::to_string(report->removed_entries) : report.error().message;
        return report ? 0 : 1;
    });
    EXPECT_EQ(cleared.out, "2") << "bob removes alice's entry too";

    // carol is not in the group.
    const Outcome c = run_as(users().carol, compiling(cache, kSource));
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, users().team)) << "the message must name the group: " << c.out;
    EXPECT_TRUE(contains(c.out, "nvrtc=0")) << "refused before compiling: " << c.out;
}

// A read-only cache: one filled by root and readable by all serves hits to a user who cannot write
// there; a miss is a clear error before any compile.
TEST(TeamCache, ReadOnlyCacheServesHitsAndAMissSaysWhy) {
    REQUIRE_USERS();
    SharedDir top;
    const std::string cache = top.file("system-cache");
    std::string path;
    ASSERT_EQ(compile(cache, kSource, &path), KJIT_OK) << path;
    ASSERT_EQ(std::system(("chmod -R a+rX '" + cache + "'").c_str()), 0);
    const Outcome hit = run_as(users().alice, compiling(cache, kSource));
    EXPECT_EQ(hit.code, 0) << hit.out;
    EXPECT_TRUE(contains(hit.out, "status=0 nvrtc=0 " + path)) << hit.out;
    const Outcome miss = run_as(users().alice, compiling(cache, kOtherSource));
    EXPECT_EQ(miss.code, 1) << miss.out;
    EXPECT_TRUE(contains(miss.out, "nvrtc=0")) << "a miss that cannot be published is not compiled: " << miss.out;
    EXPECT_TRUE(contains(miss.out, "not writable by you")) << miss.out;
    EXPECT_TRUE(contains(miss.out, cache)) << miss.out;
}

// A cache folder that is a link to the caller's own folder: eviction runs and the
// four cache commands work through it.
TEST(LinkedCacheFolder, EvictionAndCacheCommandsWorkThroughTheLink) {
    TempDir dir;
    const std::string real = dir.file("real");
    ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
    const std::string link = dir.file("link");
    ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
    std::string first;
    ASSERT_EQ(compile(link, kSource, &first), KJIT_OK) << first;
    // Make the first entry old, so eviction may take it (entries in use are spared).
    const std::string entry = first.substr(0, first.rfind('/'));
    struct timespec old[2];
    clock_gettime(CLOCK_REALTIME, &old[0]);
    old[0].tv_sec -= 3600;
    old[1] = old[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, entry.c_str(), old, 0), 0);
    kjit_stats before = KJIT_STATS_INIT;
    kjit_get_stats(&before);
    std::string second;
    ASSERT_EQ(compile(link, kOtherSource, &second, 1), KJIT_OK) << second;  // a 1-byte limit
    kjit_stats after = KJIT_STATS_INIT;
    kjit_get_stats(&after);
    EXPECT_EQ(after.eviction_runs, before.eviction_runs + 1);
    EXPECT_EQ(after.evicted_entries, before.evicted_entries + 1);
    EXPECT_FALSE(exists(entry)) << "the old entry was not evicted through the link";

    for (const std::vector<std::string> &args :
         {std::vector<std::string>{"cache", "stats", "--cache-dir", link},
          std::vector<std::string>{"cache", "verify", "--cache-dir", link},
          std::vector<std::string>{"cache", "prune", "--max-size", "1G", "--cache-dir", link},
          std::vector<std::string>{"cache", "clear", "--cache-dir", link}}) {
        const Outcome o = run_cli(args);
        EXPECT_EQ(o.code, 0) << args[1] << ": " << o.out;
    }
    EXPECT_FALSE(exists(second)) << "clear through the link left the entry";
    EXPECT_TRUE(exists(link)) << "the link itself stays";
}

// Of the same kind: a team-shaped folder (setgid, group-writable) whose owner is not in its
// group is no team cache: its owner could plant kernels for the members.
TEST(TeamCache, FolderOwnedByANonMemberIsRefused) {
    REQUIRE_USERS();
    SharedDir top;
    const std::string cache = top.file("team-cache");
    ASSERT_EQ(::mkdir(cache.c_str(), 0700), 0);
    ASSERT_EQ(::chown(cache.c_str(), users().carol.uid, users().team_gid), 0);
    ASSERT_EQ(::chmod(cache.c_str(), 02770), 0);
    const Outcome o = run_as(users().alice, compiling(cache, kSource));
    EXPECT_EQ(o.code, 1) << o.out;
    EXPECT_TRUE(contains(o.out, "owned by " + users().carol.name)) << o.out;
    EXPECT_TRUE(contains(o.out, "nvrtc=0")) << o.out;
}
