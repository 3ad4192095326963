// Hit memo: the in-process layer in front of the entry stores. A repeat of a request this
// process has answered (the same source, keyword, cache folder, arch, NVRTC options, include
// paths, in-memory headers, name expression and program name, after defaults) is answered from
// memory: no keying, no trust checks, no sidecar read. Never where something could have changed
// the answer (docs/cache-layout.md, "The hit memo"); at every repeat:
//
//   - The cubin: the very file the full look-up proved (device, inode, size, mtime and ctime to
//     the nanosecond). A removed entry (eviction, prune, clear, rm), a replaced or rewritten
//     cubin, even one touched, is looked up in full. Proven by one lstat at the first repeat,
//     which then also watches the cubin and every folder on its path (dependency_watch.hpp's
//     inotify watch, placed before a second lstat that must agree); later repeats ask the
//     watch's queue instead (key::dependency_watch::still_at: one ioctl without a lock, while
//     nothing is queued; a change that finished before the call always shows there), and after
//     any event that matters go back to the lstat. For a request that reads files, that one
//     look also proves its files: the watch is only trusted for the cubin where the files were
//     proven at the very generation the cubin's watch was armed at, so "no event that matters
//     since" covers both. Where the
//     watch cannot vouch (network or FUSE file systems, KJIT_WATCH_HEADERS=0, no inotify),
//     every repeat takes the lstat. A cubin whose mtime has no sub-second part (a file system
//     or copy that keeps whole seconds, where an edit within the second cannot show) is never
//     remembered, as the name resolver trusts no sidecar for it without hashing.
//   - The files the request may read (include paths, the working directory): proven unchanged
//     by the header watch (dependency_watch.hpp), one non-blocking read of the inotify queue;
//     where the watch cannot vouch for them, the answer is not remembered.
//   - The link inputs (kjit_compile_options::link_inputs), keyed by content: each path's stat
//     (device, inode, size, mtime and ctime to the nanosecond) must be that of the file read.
//   - The working directory, when the answer depends on it (a relative folder, or NVRTC
//     searching it): compared.
//   - Any entry this process began to remove since the look-up: every answer is looked up again.
//
// And at most kRevalidateNs after the full look-up that proved it, an answer is proved again in
// full (the trust checks, the sidecar, recording the entry's use for other processes' eviction).
//
// Refusals: a serving process that refuses to compile (key::CompileMode::never) asks again for
// what it was refused; a header-heavy request's refusal costs a scan of its include tree
// (milliseconds). The memo refuses a repeat from memory (microseconds) under the same conditions
// as an answer (its link inputs, working directory, removals by this process, kRevalidateNs;
// with a cluster tier, that is how often the tier is asked again), and while nothing could make
// it a hit: the same mode (and where it came from), seeds and tier (the caller's context); every
// path where an entry that answers it would appear (RefusalProof: its entry folder, or its
// variants file and the entry of its files' state, in the cache folder and every seed) as it was,
// one lstat each; and the files it reads unchanged, by one look at the header watch's queue. A
// refusal the watch cannot vouch for, or one with an entry there that could not serve, is not
// remembered. An answer remembered for the same request replaces its refusal.
//
// Knows the cache key's Request (its raw fields), the entry stores' Found, the header watch and
// the cache entry's retirement count.
#pragma once

#include "key/cache_key.hpp"
#include "storage/entry_store.hpp"
#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kjit::cache {

class HitMemo {
public:
    // How long a remembered answer serves before a full look-up proves it again: 1 s.
    static constexpr std::int64_t kRevalidateNs = 1'000'000'000;
    // Another interval for this memo (tests: a long one, so that what they check never depends
    // on the machine's speed).
    void set_revalidate_ns(std::int64_t ns) { revalidate_ns_ = ns; }
    // The most answers (and, apart, refusals) remembered; when full, all are forgotten (the next
    // repeats refill it).
    static constexpr std::size_t kMaxAnswers = 16384;

    // 128 bits over the request's raw fields, as the caller gave them (defaults resolved).
    struct Digest {
        std::uint64_t low = 0, high = 0;
        bool operator==(const Digest &o) const { return low == o.low && high == o.high; }
    };
    static Digest digest(const key::Request &request);

    // The digest built field by field: each field with its length first (a list with its count
    // first), so that no two requests hash the same bytes. Which fields and in what order is
    // digest_fields' to say, the one description both digests follow. Uses a buffer of the
    // calling thread: one Fields at a time per thread.
    class Fields {
    public:
        Fields();
        void field(std::string_view s) {
            count(s.size());
            append(s.data(), s.size());
        }
        void count(std::size_t n) {
            const std::uint64_t v = n;
            append(&v, sizeof v);
        }
        Digest digest();

        // The thread's buffer: grown, never shrunk but past kKeptCapacity (a huge source's).
        struct Buffer {
            std::unique_ptr<char[]> data;
            std::size_t size = 0, capacity = 0;
        };

    private:
        // Inline, without std::string's checks per call: a repeat appends a dozen fields.
        void append(const void *p, std::size_t n) {
            if (b_.capacity - b_.size < n) grow(n);
            std::memcpy(b_.data.get() + b_.size, p, n);
            b_.size += n;
        }
        void grow(std::size_t n);
        Buffer &b_;
    };

    // The request's fields in the digest, in their one order, from any reader of a request: the
    // one description both digests follow, so that they agree by construction. digest(Request)
    // reads a key::Request; the C ABI's memo_digest_of reads kjit_compile's arguments as they
    // come, without building one (api/memo_digest.cpp). A reader has one member per field,
    // returning it as one of four kinds: a text (a std::string_view, a std::string, or a
    // const char * where null fails), a list of texts and the headers (size() and operator[]; a
    // header a pair of name and text), an optional text (std::optional<std::string>, or a const
    // char * where null is none). A field added here fails to build until every reader gives it;
    // which fields are here: compile_options::kFields' keyed and digest_only ones, which
    // tests/api/compile_options_test.cpp checks field by field. False where a reader's value is
    // null: the full look-up then says what is wrong.
    template <class Reader>
    static bool digest_fields(const Reader &r, Fields &f) {
        return text(f, r.source()) && text(f, r.keyword()) && text(f, r.cache_dir()) && text(f, r.arch()) &&
               texts(f, r.nvrtc_options()) && texts(f, r.include_paths()) && headers(f, r.headers()) &&
               optional_text(f, r.name_expression()) && text(f, r.program_name()) && texts(f, r.link_inputs()) &&
               texts(f, r.link_options()) && texts(f, r.base_dirs());
    }

    // What a full look-up proved about an answer, to serve it again from memory.
    struct Proof {
        std::uint64_t retirements_before = 0;  // store::cache_entry::retirements() read before the look-up
    };
    static Proof before_look_up();

    // Whether the memo serves at all: not when $KJIT_HIT_MEMO is "0" (read at each call, so
    // turning it off takes effect at once).
    static bool enabled();

    // The remembered answer for `digest`, when it may still be served (see above); else none.
    // `*by_watch` says whether the header watch proved the files it reads. Thread safe (a
    // shared lock).
    std::optional<storage::Found> recall(const Digest &digest, bool *by_watch) const;
    // The same, without copying the answer out: calls `use(const Found &)` with the remembered
    // answer, under the shared lock (`use` must not call into the memo), and returns true; false
    // (and `use` not called) when there is none to serve.
    template <typename Use>
    bool recall_with(const Digest &digest, bool *by_watch, Use &&use) const {
        std::shared_lock<std::shared_mutex> lock(mutex_);
        const Answer *a = serving(digest, by_watch);
        if (!a) return false;
        use(a->found);
        return true;
    }

    // Remembers `found`, the answer a full look-up of `keyed` just gave (raw request `digest`).
    // Nothing is remembered where it could not be served right later (the header watch cannot
    // vouch for the files the request reads). Thread safe.
    void remember(const Digest &digest, const key::KeyedRequest &keyed, const storage::Found &found,
                  const Proof &proof);

    // The refusal remembered for `digest` (an Errc::not_cached error), when it may still be
    // served (see above) to a request of `context` (what Cache says of its mode, seeds and tier);
    // else none. Thread safe (a shared lock).
    std::optional<Error> recall_refusal(const Digest &digest, std::string_view context) const;
    // Remembers `refusal`, what a full look-up of `keyed` (raw request `digest`, of `context`)
    // just answered in never mode, with what it saw (`seen`). Nothing is remembered where the
    // proof is not complete (see above). Thread safe.
    void remember_refusal(const Digest &digest, const key::KeyedRequest &keyed, const Error &refusal,
                          std::string context, const storage::RefusalProof &seen, const Proof &proof);

    // Forgets everything (tests; a forked child renews the memo instead).
    void clear();
    // In a forked child: the lock made anew, the answers kept (the files are the same).
    void renew_in_forked_child();

    std::size_t size() const;
    // How many answers the cubin's watch proved without an lstat (tests, the bench).
    std::uint64_t answers_by_watch() const { return answers_by_watch_.load(std::memory_order_relaxed); }

private:
    // digest_fields' writers, one per kind of field.
    static bool text(Fields &f, std::string_view s) {
        f.field(s);
        return true;
    }
    static bool text(Fields &f, const char *s) {
        if (!s) return false;
        f.field(s);
        return true;
    }
    template <class List>
    static bool texts(Fields &f, const List &list) {
        f.count(list.size());
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (!text(f, list[i])) return false;
        }
        return true;
    }
    template <class List>
    static bool headers(Fields &f, const List &list) {
        f.count(list.size());
        for (std::size_t i = 0; i < list.size(); ++i) {
            const auto &[name, source] = list[i];
            if (!text(f, name) || !text(f, source)) return false;
        }
        return true;
    }
    static bool optional_text(Fields &f, const std::optional<std::string> &s) {
        f.count(s ? 1 : 0);
        if (s) f.field(*s);
        return true;
    }
    static bool optional_text(Fields &f, const char *s) {
        f.count(s ? 1 : 0);
        if (s) f.field(s);
        return true;
    }

    struct DigestHash {
        std::size_t operator()(const Digest &d) const { return static_cast<std::size_t>(d.low); }
    };
    // The watch generation that proves an answer's cubin (0: none yet), set by a recall under
    // the shared lock; copied like a plain number.
    struct WatchedAt {
        mutable std::atomic<std::uint64_t> generation{0};
        WatchedAt() = default;
        WatchedAt(const WatchedAt &o) : generation(o.generation.load(std::memory_order_relaxed)) {}
        WatchedAt &operator=(const WatchedAt &o) {
            generation.store(o.generation.load(std::memory_order_relaxed), std::memory_order_relaxed);
            return *this;
        }
    };
    // What an answer and a refusal alike must find unchanged at a repeat.
    struct Conditions {
        std::string working_dir;  // when the answer depends on it; else empty
        // Each link input (absolute path) as the look-up read it: a repeat stats each.
        std::vector<std::pair<std::string, FileIdentity>> link_files;
        std::int64_t proven_ns = 0;  // the coarse monotonic clock (a repeat reads it: no system call)
        std::uint64_t retirements = 0;

        // Of `keyed`'s look-up, which began at `proof`; false where they cannot be told.
        bool take(const key::KeyedRequest &keyed, const Proof &proof);
        // Whether they still hold, at most `revalidate_ns` after the look-up.
        bool hold(std::int64_t revalidate_ns) const;
    };
    struct Answer {
        storage::Found found;
        WatchedAt cubin_watched;  // the cubin's watch, armed at the first repeat
        FileIdentity cubin;       // the cubin as the look-up proved it
        std::string entry;        // the entry folder, for the header watch
        struct stat entry_st {};  // as the look-up saw it
        std::string source_key;   // when it reads files: key::proof_context of the request's key
        bool reads_files = false;
        Conditions conditions;
    };
    struct Refusal {
        Error error;
        std::string context;  // the caller's, compared at each repeat
        storage::RefusalProof seen;
        Conditions conditions;
    };

    // The answer for `digest` when it may be served now (the checks above), else null. With
    // mutex_ held (shared).
    const Answer *serving(const Digest &digest, bool *by_watch) const;

    std::int64_t revalidate_ns_ = kRevalidateNs;
    mutable std::shared_mutex mutex_;
    mutable std::atomic<std::uint64_t> answers_by_watch_{0};
    std::unordered_map<Digest, Answer, DigestHash> answers_;
    std::unordered_map<Digest, Refusal, DigestHash> refusals_;
};

}  // namespace kjit::cache
