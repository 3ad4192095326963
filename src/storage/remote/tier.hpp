// Tier: the cluster tier (docs/remote.md), one compile per key across every node that
// shares a set of Redis servers, behind the local cache folder. The cache consults it only on a
// local miss, under the node's own lock of the key (compile_lock.hpp: one process per node goes
// remote), so a local hit sends no command at all.
//
// Each key has three values on a server: its entry, its lease and its shared failure
// (key_layout.hpp). The tier speaks to each server through a Backend (backend.hpp), chosen by
// the server's scheme: the Redis protocol, its scripts and its full-server handling are
// redis_backend.cpp's; what follows holds for every backend.
//
// Servers are ranked per key by rendezvous hashing over their ids: a key lives on the first of
// its order whose breaker lets it through. A server that is down (refused, timed out, its
// breaker open) hands its keys to the next of their order, the same one on every node, so the
// single flight holds across the outage; when its breaker's probe finds it back, its keys
// return to it (entries stored elsewhere meanwhile are not moved back: a node that lacks one
// compiles it once more, under the lease).
//
// Cluster single flight (settle): read the entry; none: take the lease atomically (the entry
// there: a hit; a shared failure: that error; the lease free: the caller owns it and compiles,
// renewing it while it does; else wait). A waiter polls entry, lease (and its time to live) and
// failure in one round trip, backing off from 50 ms to 1 s but never past the
// lease's end: the entry: fetched; the failure: returned; the lease gone without either (its
// holder died): it tries to take it, so a dead holder costs at most the lease; after
// wait-timeout it compiles itself. The lease only saves work: entries are content-addressed and
// put only where none is (first writer wins), so a duplicate compile costs CPU, never correctness.
// Every lease the process holds on a server is renewed by one thread per server, in one
// round trip, on that thread's one connection: no connection per lease.
//
// A full server is the backend's to survive (redis_backend.cpp: the lease scripts still run, a
// store makes room from this namespace's least recently used entries); where it cannot store,
// the holder says so in its lease (the waiters compile at once).
//
// Fail open, always: a server that is down, slow, full, read-only or a cluster that is down makes
// libkjit slower, never wrong and never failing: every problem ends in "the next server" or
// "compile here" (counted, and logged once per outage). A value that fails verification counts
// as corrupt, is deleted (unless read-only) and is a miss. Knows the backends' seam, remote
// entries and the config; nothing of the cache above it, nor of any protocol.
#pragma once

#include "storage/remote/backend.hpp"
#include "storage/remote/config.hpp"
#include "storage/remote/counters.hpp"
#include "storage/remote/entry.hpp"
#include "util/status.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kjit::storage::remote {

class Tier;
class Renewer;
// One server of a tier: its backend, the renewer of the leases held there (tier.cpp).
struct Shard;
struct ShardFree {
    void operator()(Shard *shard) const noexcept;
};

// A held lease, renewed in the background (every third of its length, by the renewer of its
// server: one thread and one connection per server for the whole process) until released by
// its destructor. Renewal failures are ignored: a lapsed lease costs another node a duplicate
// compile at worst. The release never waits on a renewal: it only takes the lease off the
// renewer's list (a renewal under way compares the token and finds the lease gone or changed),
// so a server that stalls while the holder stores costs the holder one operation timeout.
//
// The release says what the waiters are to do: with the entry (or the compile error) stored
// (stored()), it deletes the lease (compare-and-delete), and they fetch what is there; without,
// it leaves a short marker in the lease's place saying why (not_stored()), and each waiter
// compiles at once, beside the others, rather than waiting for the lease to lapse and taking it
// over one after another. Used by the thread that took the lease.
class Lease {
public:
    Lease(Tier &tier, Shard &shard, std::string key, std::string token);
    Lease(const Lease &) = delete;
    Lease &operator=(const Lease &) = delete;
    ~Lease();

    // The entry or the compile error is on the server now.
    void stored() { stored_ = true; }
    // Why the holder could not store it (the waiters' log says so).
    void not_stored(std::string why) { why_not_stored_ = std::move(why); }
    // The server that holds it (and gets the entry).
    Shard &shard() const { return shard_; }

private:
    Tier &tier_;
    Shard &shard_;
    std::string key_;
    std::string token_;
    bool stored_ = false;
    std::string why_not_stored_ = "its compile gave no entry";
    std::uint64_t renewal_ = 0;  // its place on the renewer's list; 0: not renewed
};

// What settle() decided.
struct Settled {
    enum class Kind {
        fetched,       // `entry` is the verified entry: publish it locally
        owner,         // `lease` is held: compile, publish locally, then put()
        failed,        // `failure` is the error another node's compile of this key gave
        compile_here,  // no entry and no lease (read-only, a wait that ran out, a server problem)
        busy,          // another node holds the lease and the caller asked not to wait (settle's
                       // `defer_waits`): it may do other work and settle this key later
    } kind = Kind::compile_here;
    std::optional<Entry> entry;
    std::unique_ptr<Lease> lease;
    std::optional<Error> failure;
};

class Tier {
public:
    // The process's tier for `spec` (KJIT_REMOTE_STORAGE's syntax, from `origin`), made and
    // kept on first use (one per distinct spec: its servers' breakers and counters are shared
    // by every thread); nullptr when the spec turns the tier off. Errors: a bad spec
    // (remote::parse), a server no backend speaks (make_backend). Thread safe.
    static Result<Tier *> for_spec(const std::string &spec, std::string_view origin);

    // A tier over `backends`, one per server of `config`, in its order (for_spec makes them
    // with make_backend; a test may give its own). Not empty.
    Tier(Config config, std::vector<std::unique_ptr<Backend>> backends);
    ~Tier();
    Tier(const Tier &) = delete;
    Tier &operator=(const Tier &) = delete;

    const Config &config() const { return config_; }

    // Looks `expected.key` up on its server and settles who compiles it (see above). With
    // `defer_waits`, a key another node is compiling is `busy` at once instead of waited for (a
    // batch compiles its other keys meanwhile). Never fails: every problem is compile_here.
    // Thread safe.
    Settled settle(const Expected &expected, bool defer_waits = false);

    // The verified entries of `wanted` that the servers hold, fetched in as few round trips as
    // their backends allow (one per server per 64 keys) with no lease: what a batch asks before
    // it compiles anything, so that a node joining warm pays one round trip for many kernels.
    // nullopt where a key has no entry (not counted as a miss: settle() asks again and counts),
    // a value fails verification (counted, deleted unless read-only), or its server fails.
    // Thread safe.
    std::vector<std::optional<Entry>> fetch_many(const std::vector<Expected> &wanted);

    // Stores a freshly compiled entry (the first writer wins) on the lease's server (or, that
    // one down, or without a lease, the first of the key's order that is up). Not in read-only
    // mode, nor over max-entry-size. Failures are counted and logged, never returned; with
    // `lease` (the caller's, when it holds one), it is told whether the entry is there now.
    void put(const Expected &expected, const store::cache_entry::Manifest &manifest, std::string_view cubin,
             Lease *lease = nullptr);
    // Shares a deterministic compile error for 60 s (its text cut to 64 KiB). Only the lease's
    // owner calls it, and `lease` is told whether it is there now.
    void put_failure(const Expected &expected, const Error &error, Lease &lease);

    // What each server says of itself (Backend::describe), for `kjit cache stats --remote`:
    // text, one block per server ("server <url>" and its lines).
    std::string describe_servers();

    // The server key of `kind` ('b', 'l' or 'f') for `expected` (key_layout.hpp).
    std::string server_key(const Expected &expected, char kind) const;

private:
    friend class Lease;
    friend class Renewer;
    // One settle() call's state across its round trips (and servers, when one fails).
    struct Settling {
        const Expected &expected;
        KeySet keys;
        std::string token;             // this call's, should it take the lease
        std::int64_t deadline_ns = 0;  // steady clock: the end of wait-timeout
        bool counted_miss = false;
        bool waited = false;
        bool link_failed = false;  // the server failed (or its breaker is open): try the next one
        int corrupt_values = 0;
        std::chrono::milliseconds poll{};  // the next wait between polls (kFirstPoll, growing)
        std::int64_t lease_left_ms = -1;   // the lease's time to live at the last poll; -1: unknown
    };
    enum class Step {
        settled,  // `out` says what to do
        again,    // the entry appeared, or a bad one was deleted: look it up again
        wait,     // another node holds the lease
    };
    // settle() on one server: what it decided, or s.link_failed.
    Settled settle_on(Shard &shard, Settling &s, bool defer_waits);
    // One round trip: the entry, and the claim of its lease (settle()'s first step).
    Step look_up_and_claim(Shard &shard, Settling &s, Settled &out);
    // Polls until the lease's holder is done: true when `out` is settled (a shared failure, the
    // holder's unstored marker, wait-timeout, a server problem); false when the entry is there
    // or the lease went free without it: look it up and claim it again.
    bool wait_for_holder(Shard &shard, Settling &s, Settled &out);
    // The servers in `key`'s rendezvous order.
    std::vector<Shard *> order_of(const std::string &key);
    // The first of them whose breaker lets a round trip through (the first of all when none does).
    Shard &first_usable(const std::string &key);
    // When none of `order` is usable but one is in the quick probes of a young outage, sleeps
    // until it may be (Backend::quick_retry_at_ns) and returns true: ask again. False when
    // none is, or that moment is past `deadline_ns` (steady clock): go on without the tier.
    bool wait_for_quick_retry(const std::vector<Shard *> &order, std::int64_t deadline_ns);
    // A fetched `value` (under `entry_key`) verified for `expected`: counted as a hit, or as
    // corrupt (then deleted there unless read-only, if still the same).
    std::optional<Entry> verify_fetched(Backend &backend, const std::string &value, const Expected &expected,
                                        const std::string &entry_key);
    // Counts and logs (at most once per server per minute) a command the server refused.
    void refused(const Backend &backend, const Refusal &refusal);

    Config config_;
    std::vector<std::unique_ptr<Shard, ShardFree>> shards_;
    std::atomic<std::int64_t> last_refusal_log_ns_{0};
};

}  // namespace kjit::storage::remote
