// Compile lock: one NVRTC run per key on a node. Processes that miss the same key at once would
// each compile it (and on an 8-GPU node with a process per GPU, every kernel eight times at
// start-up); instead the first takes the key's lock, compiles and publishes, and the others wait
// for it and then find its entry. Within a process, the cache's single flight already makes
// threads wait for one compile; this lock is taken by that one thread.
//
// The lock is a one-byte range of <cache>/.kjit-compile-lock at an offset taken from the key,
// held as an open file description lock (F_OFD_SETLK): the kernel releases it when its holder
// closes it or dies, so there is no stale lock to guess about, and the file is never removed
// (no lock file per key to clean up). Two keys share a byte only if their first 60 bits agree.
// The lock only saves work: a publish is atomic whoever holds it, so a process that compiles
// without it (a wait that ran out, a file it cannot open) costs a duplicate compile, never a
// wrong entry.
#pragma once

#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace kjit::store::compile_lock {

// What acquire() did.
struct Waited {
    bool waited = false;     // another process held the key when it asked
    bool timed_out = false;  // and still did after `max_wait`: the caller compiles anyway
};

// A held key lock; released on destruction (and closed in a forked child: filesystem.hpp's
// LockFd). Released by an explicit unlock before the close: a child forked between the lock
// file's open and its registration keeps a copy of the descriptor, and an OFD lock released
// only by closing would live on in that copy (the child would then wait on its own lock).
class Held {
public:
    Held(LockFd fd, off_t offset) : fd_(std::move(fd)), offset_(offset) {}
    Held(Held &&other) noexcept = default;
    Held &operator=(Held &&) = delete;
    Held(const Held &) = delete;
    Held &operator=(const Held &) = delete;
    ~Held();

private:
    LockFd fd_;
    off_t offset_;
};

// Takes the lock of `key` (32 hex digits) in the cache at `cache_dir` (as `folder` checked it;
// it exists and is writable), waiting at most `max_wait` for another process that holds it
// (polling, so a holder that hangs is not waited on for ever). Returns the held lock, or nullopt
// when there is none to hold: the wait ran out (*waited says so), or the lock file cannot be
// used (it cannot be created, is not a regular file, or belongs to someone `folder` does not
// trust: never wait on a lock someone else can hold for ever). The caller compiles either way.
// Thread safe; never fails (problems are logged at debug level).
std::optional<Held> acquire(const std::string &cache_dir, const folder_trust::CacheFolder &folder,
                            const std::string &key, std::chrono::milliseconds max_wait, Waited *waited);

}  // namespace kjit::store::compile_lock
