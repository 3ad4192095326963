// Backend: one server of the cluster tier, whatever protocol it speaks, behind the few
// operations the tier's single flight needs (tier.hpp). The tier owns what holds for every
// kind of server: the keys and their order over the servers, the envelope and its
// verification (entry.hpp), the lease's life and its renewal thread, the waits and their
// back-off, the counters and the logs of what a caller sees. A backend owns its wire: its
// connections, its circuit breaker, how it makes each operation atomic (Redis: Lua scripts) and
// what it does when the server is full. So a TLS transport, Redis Cluster or an HTTP/S3 store is
// a new backend file and a row of the scheme table (backend.cpp), not an edit of the tier.
//
// A backend counts its link's failures and timeouts in counters() (counters.hpp); the tier counts
// the rest. Every operation fails open in one of two ways, which the tier tells apart:
// - the link failed (refused, timed out, the breaker open): the operation's Result is an error,
//   and the tier goes on with the key's next server;
// - the server answered but refused a command (an ACL, a renamed command, a full server): a
//   `Refusal` in the answer, which the tier counts and logs; the link is fine.
// This header names no type of any client library (no hiredis): the seam compiles without one.
#pragma once

#include "storage/remote/config.hpp"
#include "storage/remote/counters.hpp"
#include "util/status.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::storage::remote {

// A command the server refused, with what it said.
struct Refusal {
    std::string command;  // "GET", "the lease script", ...
    std::string text;     // the server's reply
};

// The three keys of one cache key on a server (tier.hpp: the entry, its lease, its failure).
struct KeySet {
    std::string entry, lease, failure;
};

// What a look-up found and, unless read-only, what its claim of the lease decided, in one
// atomic step on the server.
struct Claim {
    enum class Kind {
        entry,     // `value` is the entry's value (not yet verified)
        appeared,  // the entry was stored between the read and the claim: read it again
        owner,     // the lease was free and is now the caller's (token)
        held,      // another node holds the lease (read-only: the lease is there)
        free,      // read-only only: no entry, no lease, no failure
        failed,    // `value` is another node's compile error, shared for a while
        unstored,  // `value` is the marker the lease's holder left: it could not store the entry
        refused,   // `refusal` says what the server refused
    } kind = Kind::free;
    std::string value;
    Refusal refusal;
};

// What a waiter's poll of a lease's holder found, in one round trip.
struct HolderState {
    bool entry_there = false;
    std::optional<std::string> failure;  // the shared compile error, if any
    std::optional<std::string> lease;    // the lease's value; nullopt: free
    std::int64_t lease_left_ms = -1;     // its time to live; -1: unknown
    std::optional<Refusal> refusal;      // the server refused the poll
};

// A value read by a plain GET: the value, none (nullopt), or a refusal.
struct Fetched {
    std::optional<std::string> value;
    std::optional<Refusal> refusal;
};

// What a store of an entry came to.
struct Stored {
    bool added = false;              // stored now (false with no refusal: another writer's was there)
    std::optional<Refusal> refusal;  // refused (full with nothing of this namespace to remove, an ACL)
};

class Backend {
public:
    virtual ~Backend() = default;

    // The server as every message names it (its password hidden: display()), and its id for
    // ranking servers (Server::id).
    virtual const Server &server() const = 0;

    // Whether the breaker lets an operation through now, and while the server is in the quick
    // probes of a young outage the steady-clock time (ns) when it may again (0: none); both as
    // ServerLink's (redis_client.hpp). Cheap; thread safe.
    virtual bool usable() const = 0;
    virtual std::int64_t quick_retry_at_ns() const = 0;

    // Reads the entry and, in the same atomic step, claims the lease for `token` for `lease_ms`
    // (read-only: only reads the lease and the failure, never takes it). Errors: the link.
    virtual Result<Claim> look_up_and_claim(const KeySet &keys, const std::string &token, std::int64_t lease_ms,
                                            bool read_only) = 0;
    // A waiter's poll: whether the entry is there, the failure, the lease and its time to live.
    virtual Result<HolderState> poll_holder(const KeySet &keys) = 0;
    // The values of `entry_keys`, in order, in as few round trips as the server allows.
    virtual Result<std::vector<Fetched>> fetch(const std::vector<std::string> &entry_keys) = 0;
    // Stores `value` under `entry_key` unless a value is there (the first writer wins). A full
    // server gets room made as the backend can, only ever from the entries of the setting's
    // namespace (key_layout.hpp), never another project's keys.
    virtual Result<Stored> put_if_absent(const std::string &entry_key, const std::string &value) = 0;
    // Stores a compile error's text under `failure_key` for `seconds`. Refusal: not stored.
    virtual Result<std::optional<Refusal>> put_failure(const std::string &failure_key, const std::string &text,
                                                       int seconds) = 0;
    // Deletes `key` if it still holds `value` (a lease's token at its release, a value that
    // failed verification). Failures are the tier's to ignore.
    virtual Status remove_if_same(const std::string &key, const std::string &value) = 0;
    // Replaces lease `lease_key` held by `token` by `marker` for `marker_ms` (its holder could
    // not store the entry: tier.hpp), or releases it where the server cannot.
    virtual Status leave_marker(const std::string &lease_key, const std::string &token, const std::string &marker,
                                std::int64_t marker_ms) = 0;
    // Extends each lease (key, token) still held by its token to `lease_ms`, in one round trip.
    // Called by the tier's one renewal thread per server, on a connection of its own.
    virtual Status renew(const std::vector<std::pair<std::string, std::string>> &leases, std::int64_t lease_ms) = 0;
    // What the server says of itself and how many entries of the setting's namespace it holds,
    // for `kjit cache stats --remote`: lines beginning with two blanks ("  unreachable: ..."
    // when it cannot be reached and "  refused: ..." when it wants a password, both counted as
    // errors; "  limited: ..." for what an ACL hides).
    virtual std::string describe() = 0;
};

// A server's backend, chosen by its scheme (Server::scheme) in the one table of schemes
// (backend.cpp). Errors: invalid_argument naming the server, for a scheme no backend speaks.
Result<std::unique_ptr<Backend>> make_backend(const Server &server, const Config &config);

}  // namespace kjit::storage::remote
