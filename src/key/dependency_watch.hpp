// Dependency watch: lets a hit on an entry whose files were checked earlier in this process skip
// the check (parsing deps.txt and a stat per file: 700 for a CUTLASS kernel, about a millisecond)
// when the kernel proves nothing has changed since. A header-heavy hit then costs what a
// header-free one does.
//
// The proof is Linux inotify: before an entry's files are checked, every file they list is
// watched (content, attributes, removal, rename: IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE,
// IN_DELETE_SELF, IN_MOVE_SELF; on the inode, so a write through a hard link elsewhere counts),
// and so is every folder on their paths up to `/` (a name created, removed or renamed there:
// a new header shadowing one, an absent candidate appearing, an include folder or a link on the
// path swapped). Every symbolic link on a path is watched where it is (kjit::walk_links follows
// them one at a time): its own folder, for its name, and every folder above that one, then the
// folders of where it leads, so a link reached through another link (`/usr/local/cuda ->
// /etc/alternatives/cuda -> /usr/local/cuda-13.0`, a header linked to a link) re-pointed at any
// level is an event. A path whose links cannot all be watched (a loop, a link re-pointed while
// its watches were being placed) proves nothing: its hits check, as without the watch. The
// folders are watched by the paths they resolve to; a hit reads no link. After a check that passed, the entry is
// remembered with the watch's generation; a later hit first reads the inotify queue (one non-blocking read) and, when
// no event that matters came since, the entry is proven. An event matters when it is a watched file's, a watched
// folder's own (removed, moved), or names, in a folder, a dependency or the next folder on a dependency's path: a file
// created beside a header or elsewhere in /tmp does not. One that matters moves the generation on and makes every
// remembered entry be checked again (coarse, never wrong). Events are queued by the kernel inside the system call that
// changes the file, so a change that finished before the hit began is always seen; watches are placed before the check,
// so a change during it is seen by the next hit.
//
// Where inotify cannot see every change, nothing is remembered and every hit checks, as without
// the watch: files on a network or FUSE file system (changes made on another machine raise no
// event), a full watch table (fs.inotify.max_user_watches), no inotify at all, or
// KJIT_WATCH_HEADERS=0 (read at each lookup). Not seen, as documented (docs/cache-layout.md): a write through a shared
// writable mmap (Linux raises no inotify event for it) and a file system mounted over a folder on
// a path.
//
// A forked child shares its parent's inotify descriptor, and events one of them reads are gone
// for the other: the child closes its copy and starts with no watch and nothing remembered.
// Thread safe.
#pragma once

#include "key/include_scanner.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

namespace kjit::key::dependency_watch {

// Whether the entry at `entry` (whose folder `entry_st` describes, from the caller's lstat) was
// checked in this process as a variant of `source_key` (local_store.cpp's look_up: its deps.txt gave
// its key back), its files found as recorded, and no watched file or folder changed since. A
// replaced entry folder (another inode) is not proven, nor one checked for another source key.
bool proven(const std::string &entry, const struct stat &entry_st, std::string_view source_key);
// The same, with the generation it is proven at: while still_at() that generation, it stays
// proven (the hit memo's repeats look once for the cubin and the files). Nothing when not proven.
std::optional<std::uint64_t> proven_at(const std::string &entry, const struct stat &entry_st,
                                       std::string_view source_key);

// Before checking the files `deps` lists for the entry at `entry`: watches them. Returns the
// generation to pass to remember() once the check passed; nothing when the watch cannot vouch
// for them (see above), and then nothing is to be remembered. With `proven` (made deps' size),
// true for each file that another entry's check found as recorded since the last change
// (note_checked) and that `deps` records the same way, which is not watched again: check() takes
// it as current without a stat or a look in its memo, so another kernel over the same headers (a
// tuning sweep's next) costs nothing per header but this look.
std::optional<std::uint64_t> arm(const std::vector<key::include_scanner::Dependency> &deps,
                                 std::vector<bool> *proven = nullptr);

// Watches the file at `path` (absolute) and every folder on its path, as arm() watches a
// dependency (the hit memo's cubins). Returns the generation before the watches were placed:
// the caller then proves the file as it wants it (an lstat) and, while still_at() that
// generation, knows it unchanged, renamed, replaced or removed by nobody. Nothing where the
// watch cannot vouch for it.
std::optional<std::uint64_t> arm_file(const std::string &path);

// Whether no event that matters came since `generation` was current (asks the queue first, one
// epoll_wait with no timeout, and reads it only when something is queued; not with
// read_queue false, where the caller just read it through proven()). False where the watch is
// off or broken.
bool still_at(std::uint64_t generation, bool read_queue = true);

// After a check of `deps` that passed at `generation` (arm()'s): each file is as its record
// says until the next event that matters (nothing is noted when one came since). Thread safe.
// `already` (arm()'s `proven` for this list) flags the records noted so already, which are skipped.
void note_checked(const std::vector<key::include_scanner::Dependency> &deps, std::uint64_t generation,
                  const std::vector<bool> *already = nullptr);

// After the check passed: the entry is proven until the next event.
void remember(const std::string &entry, const struct stat &entry_st, std::string_view source_key,
              std::uint64_t generation);

// The entry last proven for a request that reads files, by its variants file (cache_entry.hpp):
// a lookup tries it first, without reading the variants file. Empty when none; a stale one is
// harmless (it is only tried, and must be proven).
std::string last_variant(const std::string &variants_file);
void note_variant(const std::string &variants_file, const std::string &entry);

// What the watch did, for tests and the bench.
struct Stats {
    std::uint64_t watches = 0;     // inotify watches added
    std::uint64_t generation = 0;  // events drained move it on
    bool usable = false;           // inotify available and not turned off
};
Stats stats();

}  // namespace kjit::key::dependency_watch
