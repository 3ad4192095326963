#include "util/folder_trust.hpp"

#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace kjit::folder_trust {

namespace {

// How long a checked cache folder is taken as checked by a thread: a hit then pays a string
// comparison, and a folder changed by hand is seen within a minute.
constexpr std::int64_t kCheckIntervalNs = 60'000'000'000;

std::string mode_text(mode_t mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
    return buf;
}

std::string describe(const struct stat &st) {
    return user_text(st.st_uid) + ", group " + group_text(st.st_gid) + ", mode " + mode_text(st.st_mode);
}

// The passwd entry's name and primary group of `uid`, if it has one.
bool passwd_of(uid_t uid, std::string *name, gid_t *gid) {
    long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buf(static_cast<std::size_t>(size > 0 ? size : 16384));
    struct passwd pw {};
    struct passwd *found = nullptr;
    while (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == ERANGE && buf.size() < (1u << 20)) {
        buf.resize(buf.size() * 2);
    }
    if (!found) return false;
    if (name) *name = pw.pw_name;
    if (gid) *gid = pw.pw_gid;
    return true;
}

bool self_in_group(gid_t gid) {
    if (::getegid() == gid) return true;
    const int n = ::getgroups(0, nullptr);
    if (n <= 0) return false;
    std::vector<gid_t> groups(static_cast<std::size_t>(n));
    const int got = ::getgroups(n, groups.data());
    return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) != groups.begin() + got;
}

bool other_in_group(uid_t uid, gid_t gid) {
    std::string name;
    gid_t primary = 0;
    if (!passwd_of(uid, &name, &primary)) return false;
    if (primary == gid) return true;
    int n = 64;
    std::vector<gid_t> groups;
    for (int attempt = 0; attempt < 8; ++attempt) {
        groups.resize(static_cast<std::size_t>(n));
        int count = n;
        if (::getgrouplist(name.c_str(), primary, groups.data(), &count) >= 0) {
            return std::find(groups.begin(), groups.begin() + count, gid) != groups.begin() + count;
        }
        n = std::max(count, n * 2);
    }
    return false;
}

// Whether `st` (an ancestor of the cache folder) lets someone the caller does not trust rename
// the folder below it away: owned by such a user, or writable by others without the sticky bit.
// Returns the reason, or empty.
std::string unsafe_parent(const struct stat &st, const CacheFolder &folder) {
    if (!trusted_owner(folder, st.st_uid)) {
        return "is owned by " + user_text(st.st_uid) + ", who could swap the cache folder for one of theirs";
    }
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
        return "is writable by others without the sticky bit (mode " + mode_text(st.st_mode) +
               "): anyone could swap the cache folder for one of theirs";
    }
    return {};
}

// Checks the folder `first` (absolute, links resolved) and each folder above it up to /.
Status check_from(const std::string &first, const std::string &cache_dir, const CacheFolder &folder) {
    std::string p = first;
    for (;;) {
        struct stat st {};
        if (::stat(p.c_str(), &st) != 0) return io_error("cannot check a parent of the cache folder", p, errno);
        const std::string why = unsafe_parent(st, folder);
        if (!why.empty()) {
            return Error{Errc::io, "'" + p + "', a parent of cache folder '" + cache_dir + "', " + why +
                                       "; use a cache folder elsewhere (KJIT_CACHE_DIR), or make the parent safe "
                                       "(chmod o-w or +t; docs/troubleshooting.md)"};
        }
        if (p == "/") return Ok{};
        const std::size_t slash = p.find_last_of('/');
        p = slash == 0 || slash == std::string::npos ? std::string("/") : p.substr(0, slash);
    }
}

// The folder `path` lies in ("/" for "/x").
std::string parent_of(const std::string &path) {
    const std::size_t slash = path.find_last_of('/');
    return slash == 0 || slash == std::string::npos ? std::string("/") : path.substr(0, slash);
}

std::string real_path_of(const std::string &path) {
    std::unique_ptr<char, decltype(&::free)> real(::realpath(path.c_str(), nullptr), &::free);
    return real ? std::string(real.get()) : std::string();
}

Result<CacheFolder> check_uncached(const std::string &cache_dir) {
    CacheFolder folder;
    struct stat link_st {};
    if (::lstat(cache_dir.c_str(), &link_st) != 0) {
        const int err = errno;
        if (err != ENOENT && err != ENOTDIR) return io_error("cannot check cache folder", cache_dir, err);
        // Not there yet: kjit_compile creates it (private). Its nearest existing ancestor and
        // those above must be safe, or someone could create it first or swap it later. (A file
        // on its path, ENOTDIR: HOME=/dev/null, then creating it fails and says why.)
        std::string existing = cache_dir;
        std::string real;
        while (real.empty() && existing != "/") {
            existing = parent_of(existing);
            real = real_path_of(existing);
        }
        if (real.empty()) return folder;
        // Nothing can be made in a file (a HOME of /dev/null): no one can swap what cannot be.
        struct stat existing_st {};
        if (::stat(real.c_str(), &existing_st) == 0 && !S_ISDIR(existing_st.st_mode)) return folder;
        KJIT_TRY(check_from(real, cache_dir, folder));
        return folder;
    }
    if (S_ISLNK(link_st.st_mode)) {
        // A link (~/.cache -> /data/cache) is fine when it is the caller's or root's, as are the
        // folders it lies in: whoever owns the link, or can replace it, chooses the cache.
        if (link_st.st_uid != ::geteuid() && link_st.st_uid != 0) {
            return Error{Errc::io, "cache folder '" + cache_dir + "' is a symbolic link owned by " +
                                       user_text(link_st.st_uid) +
                                       ", not by you: its owner chooses where your kernels come from; remove it and "
                                       "use a folder of your own (KJIT_CACHE_DIR)"};
        }
        const std::string link_parent = real_path_of(parent_of(cache_dir));
        if (link_parent.empty()) return io_error("cannot resolve the folder of", cache_dir, errno);
        KJIT_TRY(check_from(link_parent, cache_dir, folder));
    }
    folder.real_path = real_path_of(cache_dir);
    if (folder.real_path.empty()) return io_error("cannot resolve cache folder", cache_dir, errno);
    struct stat st {};
    if (::stat(folder.real_path.c_str(), &st) != 0) return io_error("cannot check cache folder", cache_dir, errno);
    if (!S_ISDIR(st.st_mode)) return Error{Errc::io, "cache folder '" + cache_dir + "' is not a folder"};
    folder.exists = true;
    folder.owner_text = describe(st);
    if (st.st_mode & S_IWOTH) {
        return Error{Errc::io, "cache folder '" + cache_dir + "' is writable by others (mode " + mode_text(st.st_mode) +
                                   "): anyone could plant a kernel in it; use a private folder or chmod o-w"};
    }
    const bool team_shape = is_team_folder(st);
    const bool owner_trusted = st.st_uid == ::geteuid() || st.st_uid == 0;
    if (team_shape && self_in_group(st.st_gid) && (owner_trusted || is_member(st.st_uid, st.st_gid))) {
        folder.mode = Mode::team;
        folder.group = st.st_gid;
    } else if (!owner_trusted) {
        if (team_shape && !self_in_group(st.st_gid)) {
            return Error{Errc::io, "cache folder '" + cache_dir + "' is a team cache of group " +
                                       group_text(st.st_gid) + " (" + folder.owner_text +
                                       "), which you are not in: ask for membership (usermod -aG " +
                                       group_text(st.st_gid) +
                                       " <you>, then log in again) or use a folder of your own (KJIT_CACHE_DIR)"};
        }
        return Error{Errc::io, "cache folder '" + cache_dir + "' is owned by " + user_text(st.st_uid) + " (" +
                                   folder.owner_text +
                                   "), not by you: whoever owns it can plant kernels you would load. Use a folder of "
                                   "your own (KJIT_CACHE_DIR or kjit_compile_options.cache_dir), remove it if it "
                                   "should not be there, or make it a team cache (group-writable and setgid, of a "
                                   "group you are in: docs/cache-layout.md)"};
    }
    KJIT_TRY(check_from(parent_of(folder.real_path), cache_dir, folder));
    folder.writable = ::faccessat(AT_FDCWD, folder.real_path.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
    return folder;
}

// Keyed by the effective uid too: what a folder is to us depends on who we are, and a process
// may change it (a daemon dropping root, a child forked to run as another user).
struct Memo {
    uid_t uid = 0;
    std::string dir;
    std::int64_t checked_ns = 0;
    CacheFolder folder;
    std::uint64_t checks_asked = 0;  // checks_on_this_thread()
};

Memo &thread_memo() {
    thread_local Memo memo;
    return memo;
}

}  // namespace

std::uint64_t checks_on_this_thread() noexcept { return thread_memo().checks_asked; }

Result<CacheFolder> check_cache_folder_now(const std::string &cache_dir) {
    Memo &memo = thread_memo();
    ++memo.checks_asked;
    memo.dir.clear();
    auto folder = check_uncached(cache_dir);
    if (folder && folder->exists) {
        memo.uid = ::geteuid();
        memo.dir = cache_dir;
        memo.checked_ns = realtime_ns();
        memo.folder = *folder;
    }
    return folder;
}

Result<CacheFolder> check_cache_folder(const std::string &cache_dir) {
    Memo &memo = thread_memo();
    if (cache_dir == memo.dir && realtime_ns() - memo.checked_ns < kCheckIntervalNs && memo.uid == ::geteuid()) {
        ++memo.checks_asked;
        return memo.folder;
    }
    return check_cache_folder_now(cache_dir);
}

Result<CacheFolder> check_folder_unmemoised(const std::string &dir) { return check_uncached(dir); }

bool trusted_owner(const CacheFolder &folder, uid_t uid) {
    if (uid == ::geteuid() || uid == 0) return true;
    return folder.mode == Mode::team && is_member(uid, folder.group);
}

Error foreign_error(const CacheFolder &folder, const std::string &what, const std::string &path,
                    const struct stat &st) {
    const std::string trusted =
        folder.mode == Mode::team ? "by a member of group " + group_text(folder.group) + " or root" : "by you or root";
    return Error{Errc::io, what + " '" + path + "' is owned by " + user_text(st.st_uid) + ", not " + trusted +
                               ": someone who can write the cache folder could have planted it; remove it (rm -rf '" +
                               path + "') and check who can write the cache folder (docs/troubleshooting.md)"};
}

bool trusted_file(const std::string &path, uid_t uid, gid_t gid) {
    if (uid == ::geteuid() || uid == 0) return true;
    const std::size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? std::string(".")
                            : slash == 0               ? std::string("/")
                                                       : path.substr(0, slash);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !is_team_folder(st) || st.st_gid != gid) return false;
    if (!self_in_group(gid) || !is_member(uid, gid)) return false;
    return st.st_uid == ::geteuid() || st.st_uid == 0 || is_member(st.st_uid, gid);
}

std::string user_text(uid_t uid) {
    std::string name;
    if (passwd_of(uid, &name, nullptr)) return name + " (uid " + std::to_string(uid) + ")";
    return "uid " + std::to_string(uid);
}

std::string group_text(gid_t gid) {
    long size = ::sysconf(_SC_GETGR_R_SIZE_MAX);
    std::vector<char> buf(static_cast<std::size_t>(size > 0 ? size : 16384));
    struct group gr {};
    struct group *found = nullptr;
    while (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == ERANGE && buf.size() < (1u << 22)) {
        buf.resize(buf.size() * 2);
    }
    return found ? std::string(gr.gr_name) : "gid " + std::to_string(gid);
}

// Group membership of other users, asked once per process: the user and group databases may be
// remote (LDAP, sssd). A forked child starts its own (fork_guard.hpp).
std::mutex membership_mutex;
std::map<std::pair<uid_t, gid_t>, bool> membership_memo;

void renew_membership_memo_in_forked_child() {
    fork_guard::renew(membership_mutex);
    fork_guard::renew(membership_memo);
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::group_membership, renew_membership_memo_in_forked_child);

bool is_member(uid_t uid, gid_t gid) {
    if (uid == ::geteuid()) return self_in_group(gid);
    {
        std::lock_guard<std::mutex> lock(membership_mutex);
        if (auto it = membership_memo.find({uid, gid}); it != membership_memo.end()) return it->second;
    }
    const bool member = other_in_group(uid, gid);
    std::lock_guard<std::mutex> lock(membership_mutex);
    if (membership_memo.size() > 4096) membership_memo.clear();
    membership_memo[{uid, gid}] = member;
    return member;
}

}  // namespace kjit::folder_trust
