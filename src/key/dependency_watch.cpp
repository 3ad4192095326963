#include "key/dependency_watch.hpp"

#include "util/environment.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace kjit::key::dependency_watch {

namespace {

// A file's content, attributes (a touch, a chmod), its removal, or its rename.
constexpr std::uint32_t kFileMask =
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_MASK_ADD;
// A name created, removed or renamed in a folder, or the folder itself removed or renamed.
constexpr std::uint32_t kFolderMask =
    IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD;
// Bounds on what is remembered (a long-lived process may look up any number of entries).
constexpr std::size_t kMaxRemembered = 1u << 16;
constexpr std::size_t kMaxCheckedFiles = 1u << 18;

// File systems whose every change, by any process of this machine, raises inotify events, and
// that no other machine writes to (statfs f_type; linux/magic.h). NFS, CIFS/SMB, FUSE, Ceph,
// Lustre, GPFS and the like are not here: changes made through another client raise nothing.
bool sees_every_change(long type) {
    switch (static_cast<unsigned long>(type)) {
        case 0xEF53UL:      // ext2, ext3, ext4
        case 0x58465342UL:  // xfs
        case 0x9123683EUL:  // btrfs
        case 0x01021994UL:  // tmpfs
        case 0x858458F6UL:  // ramfs
        case 0x794C7630UL:  // overlayfs (containers: changes through the mount are seen)
        case 0x2FC12FC1UL:  // zfs
        case 0xF2F52010UL:  // f2fs
            return true;
        default: return false;
    }
}

struct Remembered {
    dev_t dev = 0;
    ino_t ino = 0;
    std::string source_key;
    std::uint64_t generation = 0;
};

struct State {
    std::mutex mutex;
    int fd = -2;  // -2: not opened yet; -1: unusable (no inotify, turned off, or broken)
    std::uint64_t generation = 1;
    // For still_at()'s check without the lock (the hit memo's every repeat, on every thread):
    // the descriptor while usable (else -1), the generation as last published, and how many
    // drains are under way (between taking events off the queue and publishing what they did).
    std::atomic<int> quick_fd{-1};
    // An epoll instance over the inotify descriptor (level-triggered, for input), else -1:
    // epoll_wait with no timeout says whether anything is queued for two thirds of FIONREAD's
    // price (no security hook on its path), from the ready list the kernel fills inside the
    // system call that queues the event.
    int epoll_fd = -1;
    std::atomic<int> quick_epoll{-1};
    std::atomic<std::uint64_t> published_generation{1};
    std::atomic<int> draining{0};
    std::uint64_t watches = 0;
    // Paths watched since the last change, with their watch descriptors. Cleared by every
    // change: a path may then lead to another inode (a folder renamed away and another put in
    // its place), so each is watched again, by path, before anything is remembered anew.
    std::unordered_map<std::string, int, PathHash> watched;
    // Folders watched together with every folder above them, since the last change.
    std::unordered_set<std::string> covered;
    // What each watch is for, since the last change: a file's every event; in a folder, only
    // events naming a dependency or the next folder on a dependency's path (a file created
    // beside a header, or elsewhere in /tmp, changes nothing the compile reads).
    struct Interest {
        bool any = false;
        std::unordered_set<std::string> names;
    };
    std::unordered_map<int, Interest> interest;
    // Folders found missing since the last change (their parent's watch sees them appear).
    std::unordered_set<std::string> missing;
    // Dependency folders as spelled -> the folder they lead to, every link on the way watched
    // (watch_path), since the last change: the next header in the same folder walks nothing.
    std::unordered_map<std::string, std::string, PathHash> resolved;
    // Files a check found as their record says, since the last change: path -> that record.
    std::unordered_map<std::string, key::include_scanner::Dependency, PathHash> checked;
    std::unordered_map<std::string, Remembered, PathHash> remembered;  // by entry folder
    std::unordered_map<std::string, std::string, PathHash> variants;   // variants file -> entry folder
};

// Made while libkjit loads, never freed; no once-guard (fork_guard.hpp).
State *const the_state = new State();

// The child's copy of the descriptor is the parent's inotify instance: reading it would take
// events from the parent. Close it; the child opens its own when it needs one.
// Its generations go on from the parent's, never back to 1: a generation the parent handed out
// (the hit memo, which the child keeps, holds some) must not name a state of the child's watch.
void renew_in_forked_child() {
    const int fd = the_state->fd, epoll_fd = the_state->epoll_fd;
    const std::uint64_t next = the_state->generation + 1;
    fork_guard::renew(*the_state);
    the_state->generation = next;
    the_state->published_generation.store(next);
    if (fd >= 0) ::close(fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::header_watch, renew_in_forked_child);

bool turned_off() {
    const char *v = environment::get(environment::Variable::watch_headers);
    return v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0 ||
                 std::strcmp(v, "no") == 0);
}

// With the lock held, the inotify descriptor just opened: the epoll instance over it, where one
// can be made (else still_at asks FIONREAD).
void watch_readiness(State &s) {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return;
    struct epoll_event ev {};
    ev.events = EPOLLIN;
    ev.data.fd = s.fd;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, s.fd, &ev) != 0) {
        ::close(ep);
        return;
    }
    s.epoll_fd = ep;
    s.quick_epoll.store(ep);
}

// With the lock held: whether the watch is usable, opening it on first use. KJIT_WATCH_HEADERS
// is read each time (a getenv), so turning it off takes effect at once.
bool usable(State &s) {
    if (turned_off()) return false;
    if (s.fd == -2) {
        s.fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (s.fd < 0) {
            log().debug("no header watch (inotify_init1: {}): every hit checks its files", std::strerror(errno));
            s.fd = -1;
        }
        s.quick_fd.store(s.fd);
        if (s.fd >= 0) watch_readiness(s);
    }
    return s.fd >= 0;
}

// With the lock held: whether `ev` may change what a remembered entry's compile reads. A watch
// with no interest was not placed again since the last change, so no entry remembered since
// depends on it.
bool relevant(const State &s, const struct inotify_event *ev) {
    if (ev->mask & IN_Q_OVERFLOW) return true;  // events were lost
    const auto it = s.interest.find(ev->wd);
    if (it == s.interest.end()) return false;
    if (it->second.any || ev->len == 0) return true;  // a file's event, or the folder's own (gone, moved)
    return it->second.names.count(std::string(ev->name)) > 0;
}

// With the lock held: reads every queued event; one that matters moves the generation on.
// Marked as draining from before the first read until the generation is published, so that a
// check without the lock that finds the queue empty knows whether events it did not see are
// still being looked at (still_at).
void drain(State &s) {
    alignas(struct inotify_event) char buf[16384];
    bool changed = false;
    s.draining.fetch_add(1);
    for (;;) {
        const ssize_t n = ::read(s.fd, buf, sizeof buf);
        if (n > 0) {
            for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(struct inotify_event)) <= n;) {
                const auto *ev = reinterpret_cast<const struct inotify_event *>(buf + at);
                if (relevant(s, ev)) changed = true;
                at += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) {
            // Not ours any more (closed by someone else?): prove nothing from now on.
            log().debug("header watch stopped (read: {}): every hit checks its files", std::strerror(errno));
            s.fd = -1;
            s.quick_fd.store(-1);
            s.quick_epoll.store(-1);
            changed = true;
        }
        break;
    }
    if (changed) {
        ++s.generation;
        s.watched.clear();
        s.covered.clear();
        s.interest.clear();
        s.missing.clear();
        s.resolved.clear();
        s.checked.clear();
    }
    s.published_generation.store(s.generation);
    s.draining.fetch_sub(1);
}

std::string name_of(const std::string &path) { return path.substr(path.find_last_of('/') + 1); }

std::string parent_of(const std::string &path) {
    const std::size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return std::string();
    return slash == 0 ? std::string("/") : path.substr(0, slash);
}

enum class Watched { yes, missing, no };

// With the lock held: watches `path` with `mask` (*wd: its descriptor). missing: no such file or
// folder (a folder of absent candidates); no: it exists but cannot be watched so that every
// change is seen.
Watched watch(State &s, const std::string &path, std::uint32_t mask, bool check_file_system, int *wd) {
    if (const auto it = s.watched.find(path); it != s.watched.end()) {
        *wd = it->second;
        return Watched::yes;
    }
    if (s.missing.count(path)) return Watched::missing;
    if (check_file_system) {
        struct statfs fs {};
        if (::statfs(path.c_str(), &fs) != 0) {
            if (errno != ENOENT && errno != ENOTDIR) return Watched::no;
            // Only folders are looked up here; one that appears shows in its parent's watch.
            s.missing.insert(path);
            return Watched::missing;
        }
        if (!sees_every_change(static_cast<long>(fs.f_type))) {
            log().debug("header watch: '{}' is on a file system whose changes inotify may not see (type {:#x}): "
                        "hits check its files every time",
                        path, static_cast<unsigned long>(fs.f_type));
            return Watched::no;
        }
    }
    *wd = ::inotify_add_watch(s.fd, path.c_str(), mask);
    if (*wd < 0) {
        const int err = errno;
        if (err == ENOENT || err == ENOTDIR) return Watched::missing;
        log().debug("header watch: cannot watch '{}' ({}): hits check its files every time", path,
                    err == ENOSPC ? "the inotify watch limit fs.inotify.max_user_watches is reached"
                                  : std::strerror(err));
        return Watched::no;
    }
    ++s.watches;
    s.watched.emplace(path, *wd);
    return Watched::yes;
}

// With the lock held: watches `folder` for events naming `name` (a dependency in it), and every
// folder above it up to `/` for events naming the next folder down; a missing folder is skipped
// (its parent's watch sees it appear under its name). False when one that exists cannot be
// watched.
bool watch_folders(State &s, const std::string &folder, std::string name) {
    std::vector<std::string> chain;
    for (std::string f = folder; !f.empty(); f = f == "/" ? std::string() : parent_of(f)) {
        const bool covered = s.covered.count(f) > 0;  // those above are watched for f's name already
        int wd = -1;
        const Watched w = watch(s, f, kFolderMask, true, &wd);
        if (w == Watched::no) return false;
        if (w == Watched::yes) s.interest[wd].names.insert(name);
        if (covered) break;
        chain.push_back(f);
        name = name_of(f);
    }
    s.covered.insert(chain.begin(), chain.end());
    return true;
}

// With the lock held: watches everything `path` (absolute) is resolved through, so that a change
// to what it leads to is an event: every link on the way in its own folder, for its own name
// (and every folder above that one), and every folder up the path it resolves to. Only paths
// with no link in them are handed to inotify, which would otherwise follow a link as it points
// now and watch where it leads, never the folder of a link behind it (`cuda ->
// alternatives/cuda -> cuda-A`: `alternatives` is on no path as spelled). The path is walked
// again once the watches are placed: a link re-pointed before its folder was watched shows as
// another walk, and nothing is proven (the hit checks, and the next one watches anew). Returns
// the path resolved; nothing when a link cannot be walked (a loop) or a folder watched.
std::optional<std::string> watch_path(State &s, const std::string &path) {
    // The longest folder `path` begins with that is watched with every folder above it since
    // the last change: no link on its way (covered folders are resolved ones) and any change to
    // it or above is an event, so the walks start below it (an entry folder in a watched cache
    // folder: two names looked up, not every one from '/').
    std::string_view link_free;
    for (std::size_t slash = path.find_last_of('/'); slash != std::string::npos && slash > 0;
         slash = path.find_last_of('/', slash - 1)) {
        if (s.covered.count(path.substr(0, slash))) {
            link_free = std::string_view(path).substr(0, slash);
            break;
        }
    }
    auto walk = walk_links(path, link_free);
    if (!walk) return std::nullopt;
    for (const LinkWalk::Link &link : walk->links) {
        if (!watch_folders(s, parent_of(link.path), name_of(link.path))) return std::nullopt;
    }
    if (!watch_folders(s, parent_of(walk->resolved), name_of(walk->resolved))) return std::nullopt;
    // Also where the first walk found no link: a folder replaced by one meanwhile would have had
    // the watch follow it, and the folder behind it unwatched.
    const auto again = walk_links(path, link_free);
    if (!again || again->resolved != walk->resolved || again->links.size() != walk->links.size()) return std::nullopt;
    for (std::size_t i = 0; i < walk->links.size(); ++i) {
        if (again->links[i].path != walk->links[i].path || again->links[i].target != walk->links[i].target) {
            return std::nullopt;
        }
    }
    return walk->resolved;
}

// `folder` (absolute, as spelled) with its longest ancestor that was resolved since the last change
// replaced by where it leads: every link on that ancestor's way is watched, so it still leads there,
// and watch_path then walks only what lies below (a header tree reached through a link,
// `/usr/local/cuda -> cuda-13.0`, walked each of its 140 folders from '/' twice). `folder`
// itself when no ancestor was.
std::string resolved_above(const State &s, const std::string &folder) {
    for (std::size_t slash = folder.find_last_of('/'); slash != std::string::npos && slash > 0;
         slash = folder.find_last_of('/', slash - 1)) {
        const auto it = s.resolved.find(folder.substr(0, slash));
        if (it != s.resolved.end()) return (it->second == "/" ? std::string() : it->second) + folder.substr(slash);
    }
    return folder;
}

// Whether `a` and `b` record the same state of one file.
bool same_record(const key::include_scanner::Dependency &a, const key::include_scanner::Dependency &b) {
    return a.exists == b.exists && (!a.exists || (a.size == b.size && a.mtime_sec == b.mtime_sec &&
                                                  a.mtime_nsec == b.mtime_nsec && a.content_hash == b.content_hash));
}

}  // namespace

bool proven(const std::string &entry, const struct stat &entry_st, std::string_view source_key) {
    return proven_at(entry, entry_st, source_key).has_value();
}

std::optional<std::uint64_t> proven_at(const std::string &entry, const struct stat &entry_st,
                                       std::string_view source_key) {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.fd < 0 || turned_off()) return std::nullopt;
    drain(s);
    const auto it = s.remembered.find(entry);
    if (it != s.remembered.end() && it->second.generation == s.generation && it->second.dev == entry_st.st_dev &&
        it->second.ino == entry_st.st_ino && it->second.source_key == source_key) {
        return s.generation;
    }
    return std::nullopt;
}

std::optional<std::uint64_t> arm(const std::vector<key::include_scanner::Dependency> &deps, std::vector<bool> *proven) {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!usable(s)) return std::nullopt;
    drain(s);
    if (s.fd < 0) return std::nullopt;
    // The generation before any watch below is placed: an event from one of them moves it on.
    const std::uint64_t generation = s.generation;
    if (proven) proven->assign(deps.size(), false);
    for (std::size_t i = 0; i < deps.size(); ++i) {
        const key::include_scanner::Dependency &d = deps[i];
        if (d.is_pin()) continue;  // not a file: check() compares it, every time
        if (d.path.empty() || d.path[0] != '/') return std::nullopt;
        if (proven) {
            // Checked as recorded since the last change: it and its folders are watched already.
            const auto it = s.checked.find(d.path);
            if (it != s.checked.end() && same_record(it->second, d)) {
                (*proven)[i] = true;
                continue;
            }
        }
        // Its folder, every link on the way to it watched: once per folder since the last change.
        const std::string spelled = parent_of(d.path);
        auto folder = s.resolved.find(spelled);
        if (folder == s.resolved.end()) {
            auto real = watch_path(s, resolved_above(s, spelled));
            if (!real) return std::nullopt;
            if (s.resolved.size() >= kMaxCheckedFiles) s.resolved.clear();
            folder = s.resolved.emplace(spelled, std::move(*real)).first;
        }
        const std::string path = folder->second == "/" ? "/" + name_of(d.path) : folder->second + "/" + name_of(d.path);
        if (!watch_folders(s, folder->second, name_of(d.path))) return std::nullopt;
        if (!d.exists) continue;
        // On the file's inode: a write through any path (a hard link elsewhere) counts. A header
        // that is a link (to a link...) has each link watched in its folder, and the file it
        // leads to watched. Watched already since the last change (another entry over the same
        // headers): so is every link on the way.
        std::string file = path;
        if (s.watched.count(path) == 0) {
            struct stat st {};
            if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
                auto real = watch_path(s, path);
                if (!real) return std::nullopt;
                file = *real;
            }
        }
        int wd = -1;
        const Watched w = watch(s, file, kFileMask, false, &wd);
        if (w != Watched::yes) return std::nullopt;  // missing: it changed already, the check will say
        s.interest[wd].any = true;
        if (file != path) s.watched.emplace(path, wd);  // the link, resolved and watched
    }
    return generation;
}

std::optional<std::uint64_t> arm_file(const std::string &path) {
    key::include_scanner::Dependency file;
    file.path = path;
    return arm({file});
}

bool still_at(std::uint64_t generation, bool read_queue) {
    State &s = *the_state;
    if (read_queue) {
        // Without the lock, so that repeats on many threads do not queue for it: nothing is
        // queued (one epoll_wait with no timeout, else FIONREAD), no drain is under way before
        // or after that look, and the published generation is the one asked about. An event
        // queued before this call is then either still queued (seen here) or was taken by a
        // drain that, done, has published the generation it moved (seen here), or, not done,
        // is seen under way.
        const int fd = s.quick_fd.load();
        if (fd >= 0 && s.draining.load() == 0 && !turned_off()) {
            const int ep = s.quick_epoll.load();
            struct epoll_event ready {};
            int queued = 0;
            const bool empty =
                ep >= 0 ? ::epoll_wait(ep, &ready, 1, 0) == 0 : ::ioctl(fd, FIONREAD, &queued) == 0 && queued == 0;
            if (empty && s.draining.load() == 0) {
                return s.published_generation.load() == generation;
            }
        }
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.fd < 0 || (read_queue && turned_off())) return false;  // else proven() just asked
    if (read_queue) drain(s);
    return s.fd >= 0 && s.generation == generation;
}

void note_checked(const std::vector<key::include_scanner::Dependency> &deps, std::uint64_t generation,
                  const std::vector<bool> *already) {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.fd < 0) return;
    drain(s);
    if (s.fd < 0 || s.generation != generation) return;
    if (s.checked.size() + deps.size() > kMaxCheckedFiles) {
        s.checked.clear();
        already = nullptr;  // noted before, gone now: noted again
    }
    for (std::size_t i = 0; i < deps.size(); ++i) {
        const key::include_scanner::Dependency &d = deps[i];
        if (d.is_pin() || (already && i < already->size() && (*already)[i])) continue;
        // Most are there already as recorded (another entry over the same headers): no copy.
        const auto [it, added] = s.checked.try_emplace(d.path, d);
        if (!added && !same_record(it->second, d)) it->second = d;
    }
}

void remember(const std::string &entry, const struct stat &entry_st, std::string_view source_key,
              std::uint64_t generation) {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.fd < 0) return;
    if (s.remembered.size() >= kMaxRemembered) s.remembered.clear();
    s.remembered[entry] = Remembered{entry_st.st_dev, entry_st.st_ino, std::string(source_key), generation};
}

std::string last_variant(const std::string &variants_file) {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto it = s.variants.find(variants_file);
    return it == s.variants.end() ? std::string() : it->second;
}

void note_variant(const std::string &variants_file, const std::string &entry) {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.fd < 0) return;
    if (s.variants.size() >= kMaxRemembered) s.variants.clear();
    s.variants[variants_file] = entry;
}

Stats stats() {
    State &s = *the_state;
    std::lock_guard<std::mutex> lock(s.mutex);
    Stats out;
    out.watches = s.watches;
    out.generation = s.generation;
    out.usable = s.fd >= 0 && !turned_off();
    return out;
}

}  // namespace kjit::key::dependency_watch
