// Remote store: the cluster tier (docs/remote.md), one compile per key across every node that
// shares a set of Redis servers, behind the local cache folder. The cache consults it only on a
// local miss, under the node's own lock of the key (compile_lock.hpp: one process per node goes
// remote), so a local hit sends no command at all.
//
// Keys ("{key}" is a hash tag: the three live on one server, in one Redis Cluster slot):
//   kjit:<format>:<namespace>:<NVRTC M.m>:<arch>:b:{<key>}   the entry (remote_entry.hpp)
//   kjit:<format>:<namespace>:<NVRTC M.m>:<arch>:l:{<key>}   the lease: who compiles it now
//   kjit:<format>:<namespace>:<NVRTC M.m>:<arch>:f:{<key>}   a compile error, shared for 60 s
// Servers are chosen per key by rendezvous hashing over their ids.
//
// Cluster single flight (settle): GET the entry; none: take the lease atomically (a script: the
// entry there: a hit; a shared failure: that error; the lease free: SET NX PX, the caller owns
// it and compiles, renewing it while it does; else wait). A waiter polls entry, lease and
// failure in one pipeline, backing off from 50 ms to 1 s: the entry: fetched; the failure:
// returned; the lease gone without either (its holder died): it tries to take it; after
// wait-timeout it compiles itself. The lease only saves work: entries are content-addressed and
// put with SET NX (first writer wins), so a duplicate compile costs CPU, never correctness.
//
// Fail open, always: a server that is down, slow, full or read-only makes libkjit slower,
// never wrong and never failing: every problem ends in "compile here" (counted, and logged once
// per breaker trip). A value that fails verification counts as corrupt, is deleted (unless
// read-only) and is a miss. Knows the Redis client, remote entries and the config; nothing of
// the cache above it.
#pragma once

#include "remote/redis_client.hpp"
#include "remote/remote_config.hpp"
#include "remote/remote_entry.hpp"
#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kjit::remote {

// Process-wide counters of the tier (kjit_stats' remote_* fields). Relaxed atomics.
struct Counters {
    std::atomic<std::uint64_t> hits{0};             // entries fetched, verified and published locally
    std::atomic<std::uint64_t> misses{0};           // look-ups that found no entry
    std::atomic<std::uint64_t> errors{0};           // failed round trips and refused commands
    std::atomic<std::uint64_t> timeouts{0};         // of the errors, timeouts
    std::atomic<std::uint64_t> corrupt{0};          // values that failed verification
    std::atomic<std::uint64_t> puts{0};             // entries stored
    std::atomic<std::uint64_t> bytes_in{0};         // value bytes fetched
    std::atomic<std::uint64_t> bytes_out{0};        // value bytes stored
    std::atomic<std::uint64_t> leases_owned{0};     // leases taken (this process compiled for the cluster)
    std::atomic<std::uint64_t> lease_waits{0};      // look-ups that waited on another node's lease
    std::atomic<std::uint64_t> lease_takeovers{0};  // ... and took the lease over when it vanished
    std::atomic<std::uint64_t> shared_failures{0};  // compile errors returned from another node's compile
};
Counters &counters();

class Tier;

// A held lease, renewed in the background (every third of its length) until released by its
// destructor. Renewal failures are ignored: a lapsed lease costs another node a duplicate
// compile at worst. The release never waits on a renewal: one under way is abandoned (its
// round trip polls the lease's wake-up descriptor too), so a server that stalls while the holder
// stores costs the holder one operation timeout, not two.
//
// The release says what the waiters are to do: with the entry (or the compile error) stored
// (stored()), it deletes the lease (compare-and-delete), and they fetch what is there; without,
// it leaves a short marker in the lease's place saying why (not_stored()), and each waiter
// compiles at once, beside the others, rather than waiting for the lease to lapse and taking it
// over one after another. Used by the thread that took the lease.
class Lease {
public:
    Lease(Tier &tier, ServerLink &link, std::string key, std::string token);
    Lease(const Lease &) = delete;
    Lease &operator=(const Lease &) = delete;
    ~Lease();

    // The entry or the compile error is on the server now.
    void stored() { stored_ = true; }
    // Why the holder could not store it (the waiters' log says so).
    void not_stored(std::string why) { why_not_stored_ = std::move(why); }

private:
    void renew_until_released();

    Tier &tier_;
    ServerLink &link_;
    std::string key_;
    std::string token_;
    bool stored_ = false;
    std::string why_not_stored_ = "its compile gave no entry";
    UniqueFd wake_;  // an eventfd, written once by the release: the renewer stops at once
    std::thread renewer_;
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
    // (remote::parse). Thread safe.
    static Result<Tier *> for_spec(const std::string &spec, std::string_view origin);

    explicit Tier(Config config);
    Tier(const Tier &) = delete;
    Tier &operator=(const Tier &) = delete;

    const Config &config() const { return config_; }

    // Looks `expected.key` up on its server and settles who compiles it (see above). With
    // `defer_waits`, a key another node is compiling is `busy` at once instead of waited for (a
    // batch compiles its other keys meanwhile). Never fails: every problem is compile_here.
    // Thread safe.
    Settled settle(const Expected &expected, bool defer_waits = false);

    // The verified entries of `wanted` that the servers hold, fetched in pipelined round trips
    // (one per server per 64 keys) with no lease: what a batch asks before it compiles
    // anything, so that a node joining warm pays one round trip for many kernels. nullopt
    // where a key has no entry (not counted as a miss: settle() asks again and counts), a
    // value fails verification (counted, deleted unless read-only), or its server fails.
    // Thread safe.
    std::vector<std::optional<Entry>> fetch_many(const std::vector<Expected> &wanted);

    // Stores a freshly compiled entry (SET NX: the first writer wins). Not in read-only mode,
    // nor over max-entry-size. Failures are counted and logged, never returned; with `lease`
    // (the caller's, when it holds one), it is told whether the entry is there now.
    void put(const Expected &expected, const store::cache_entry::Manifest &manifest, std::string_view cubin,
             Lease *lease = nullptr);
    // Shares a deterministic compile error for 60 s (its text cut to 64 KiB). Only the lease's
    // owner calls it, and `lease` is told whether it is there now.
    void put_failure(const Expected &expected, const Error &error, Lease &lease);

    // What each server says of itself (INFO and the count of libkjit entries), for
    // `kjit cache stats --remote`: text, one block per server; a server that cannot be reached
    // says so in its block.
    std::string describe_servers();

    // The Redis key of `kind` ('b', 'l' or 'f') for `expected`.
    std::string redis_key(const Expected &expected, char kind) const;

private:
    friend class Lease;
    // One settle() call's state across its round trips.
    struct Settling {
        const Expected &expected;
        std::string entry_key, lease_key, failure_key;
        std::string token;             // this call's, should it take the lease
        std::string lease_ms;          // the lease's length, as the scripts take it
        std::int64_t deadline_ns = 0;  // steady clock: the end of wait-timeout
        bool counted_miss = false;
        bool waited = false;
        int corrupt_values = 0;
        std::chrono::milliseconds poll{};  // the next wait between polls (kFirstPoll, growing)
    };
    enum class Claim {
        settled,  // `out` says what to do
        again,    // the entry appeared, or a bad one was deleted: look it up again
        wait,     // another node holds the lease
    };
    // One round trip: the entry, and the claim of its lease (settle()'s first step).
    Claim look_up_and_claim(ServerLink &link, Settling &s, Settled &out);
    // Polls until the lease's holder is done: true when `out` is settled (a shared failure, the
    // holder's unstored marker, wait-timeout, a server problem); false when the entry is there
    // or the lease went free without it: look it up and claim it again.
    bool wait_for_holder(ServerLink &link, Settling &s, Settled &out);
    ServerLink &link_for(const std::string &key);
    // Runs `commands` on `link`, counting failures; errors as ServerLink::run (with its
    // `cancel_fd`).
    Result<std::vector<Reply>> round_trip(ServerLink &link, const std::vector<Command> &commands, int cancel_fd = -1);
    // A fetched value (`value`, a GET's reply, under `entry_key`) verified for `expected`:
    // counted as a hit, or as corrupt (then deleted there unless read-only, if still the same).
    std::optional<Entry> verify_fetched(ServerLink &link, const redisReply &value, const Expected &expected,
                                        const std::string &entry_key);
    // Counts and logs (at most once per server per minute) a command the server refused.
    void refused(ServerLink &link, const char *what, std::string_view reply_text);

    Config config_;
    std::vector<std::unique_ptr<ServerLink>> links_;
    std::atomic<std::int64_t> last_refusal_log_ns_{0};
};

}  // namespace kjit::remote
