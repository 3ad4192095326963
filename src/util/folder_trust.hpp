// Folder trust: whose files libkjit may believe. A cubin or a sidecar line is as good as whoever
// could write it, so, like git's "dubious ownership" check and OpenSSH's StrictModes, libkjit
// trusts only what the caller (or root) owns, unless a cache was made a team cache on purpose.
//
//   private cache  the cache folder is the caller's or root's; every parent up to / is owned by
//                  the caller or root and is not writable by others without the sticky bit (else
//                  its owner, or anyone, could swap the cache folder for one of theirs); shards,
//                  entries, sidecars and the lock are the caller's or root's.
//   team cache     the cache folder is group-writable and setgid, its group one the caller is in
//                  (and its owner root, the caller or a member); what members made is trusted:
//                  owned by a member of that group or root. libkjit creates what it makes there
//                  group-readable and writable whatever the umask, so the next member can use it.
//
// A sidecar beside a loose cubin (kjit_resolve_name, kjit_load_cached) follows the same rule with
// its folder in place of the cache folder. Used by the cache, cache maintenance and the name
// resolver; knows the filesystem and the user and group databases only.
#pragma once

#include "util/status.hpp"

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace kjit::folder_trust {

enum class Mode { private_cache, team };

// A cache folder as checked.
struct CacheFolder {
    Mode mode = Mode::private_cache;
    gid_t group = 0;         // team: the folder's group
    bool exists = false;     // false: not there yet (kjit_compile creates it, private)
    bool writable = false;   // by the caller: a miss can be published
    std::string real_path;   // the folder itself, links resolved (empty when it does not exist)
    std::string owner_text;  // "root (uid 0), mode 0755", for messages
};

// Checks the cache folder at `cache_dir` (absolute) and its parents as described above; a
// missing folder is fine when its parents are. Memoised per thread and folder for a minute, so
// a hit pays a string comparison; a missing folder is not memoised (it may be created by anyone
// meanwhile: the caller checks again after creating it). Errors: io, naming the path, its owner
// and what to do.
Result<CacheFolder> check_cache_folder(const std::string &cache_dir);
// The same, never from the memo (and refreshing it): after creating the folder.
Result<CacheFolder> check_cache_folder_now(const std::string &cache_dir);
// The same, never from the memo nor into it: for folders read beside the cache folder (seed
// caches, storage/seed_store.hpp), so that checking them does not push the cache folder's check
// out of this thread's memo.
Result<CacheFolder> check_folder_unmemoised(const std::string &dir);
// How many times this thread asked for a cache folder's check (either function above, from the
// memo or not): the local store checks once per call, and tests count a call's checks with it.
std::uint64_t checks_on_this_thread() noexcept;

// Whether something in `folder` owned by `uid` may be trusted: the caller, root or, in a team
// cache, a member of its group.
bool trusted_owner(const CacheFolder &folder, uid_t uid);
// io: `what` at `path` (described by `st`) is owned by someone `folder` does not trust; says
// whom and what to do.
Error foreign_error(const CacheFolder &folder, const std::string &what, const std::string &path, const struct stat &st);

// Whether a file beside a cubin (its sidecar), owned by `uid` and group `gid`, may be trusted:
// owned by the caller or root, or by a member of the group of a team folder (group-writable,
// setgid, not writable by others) it lies in, when the caller is a member too. Stats the
// folder only for a file the caller does not own.
bool trusted_file(const std::string &path, uid_t uid, gid_t gid);

// "bob (uid 1001)" or "uid 1001".
std::string user_text(uid_t uid);
// "team" or "gid 1234".
std::string group_text(gid_t gid);

// Whether user `uid` is in group `gid` (primary or supplementary). Memoised per process.
bool is_member(uid_t uid, gid_t gid);

// Whether a folder with this stat is a team folder: group-writable and setgid, not writable by
// others.
inline bool is_team_folder(const struct stat &st) {
    return S_ISDIR(st.st_mode) && (st.st_mode & S_ISGID) && (st.st_mode & S_IWGRP) && !(st.st_mode & S_IWOTH);
}

// Modes for what libkjit creates in `folder`: private 0700 folders and 0644 files; in a team
// cache 02770 and 0664, applied with chmod after creation since the umask would strip them.
inline mode_t folder_mode(const CacheFolder &folder) { return folder.mode == Mode::team ? 02770 : 0700; }
inline bool shared(const CacheFolder &folder) { return folder.mode == Mode::team; }

}  // namespace kjit::folder_trust
