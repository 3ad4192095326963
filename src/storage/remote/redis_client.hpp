// Redis client: the cluster tier's link to one Redis server. Each thread has its own connection
// per server, made at its first use and kept. libkjit owns the socket: it is made close-on-exec
// and non-blocking (SOCK_CLOEXEC | SOCK_NONBLOCK) in the call that creates it, so that no child
// a host starts (system(), popen(), subprocess) ever holds a connected, authenticated socket,
// not even one forked by another thread a moment after the connect. hiredis (Debian's 0.14)
// only formats commands and parses replies: every round trip (AUTH and SELECT of a new
// connection included) runs under one deadline, the operation timeout, as a poll() loop that
// writes and reads what the socket takes, so a server that trickles a reply a byte at a time
// or stalls half-way is a timeout, not a wait of days; and a reply larger than the largest
// value libkjit stores (max-entry-size plus 1 MiB of envelope) is a broken link, not an
// allocation. Commands go in pipelines (all sent, then all replies read).
//
// A link that fails (refused, reset, timed out, a reply out of step or too large) is closed, and
// the server's circuit breaker, shared by the process's threads, opens: no thread uses it for a
// short back-off (Config::breaker, 250 ms by default). Then it is half open: the next round trip
// is let through alone, as a probe (the others still find it open); the probe's success closes
// the breaker, its failure opens it again: for the same back-off the first few times (a restart
// takes about a second), then for twice the last, up to kMaxBreaker (or Config::breaker when
// longer). So a server restarted in 0.3 s is used again a quarter of a second after it is
// back, and a server down for good costs one probe (a refused connect, mostly) per 30 s.
// Failures of one outage seen by several threads at once count once: a round trip that began
// before the breaker last opened is the same outage's. One warning per outage, never a password
// (display()); the failed probes after it are said at debug, the recovery at info. A MOVED, ASK
// or CLUSTERDOWN reply of a named server is the sign that it is a node of a Redis Cluster: from
// then on its round trips go through a ClusterRouter (cluster_router.hpp), which sends each
// command to its slot's primary. A forked child never uses its parent's connections (their
// sockets are shared with the parent): it makes its own.
//
// A rediss:// server is spoken to through a TLS session (tls_session.hpp) on the same socket:
// the handshake is part of the connect, under the round trip's deadline, and every read and write
// goes through the session, each waiting in the same poll() loop for the way the session asks.
// A failure that no retry mends (a certificate refused, libssl missing, a client certificate the
// server wants) is said once, as any failure of the link, and the breaker then probes it less and
// less often from the first. Knows hiredis and the TLS session only.
#pragma once

#include "storage/remote/config.hpp"
#include "util/status.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct redisReply;

namespace kjit::storage::remote {

class ClusterRouter;

struct ReplyFree {
    void operator()(redisReply *reply) const noexcept;
};
// One reply of the server; its fields are hiredis's (type, str/len, integer, element).
using Reply = std::unique_ptr<redisReply, ReplyFree>;

// A command's words; binary-safe (a value may hold any byte).
using Command = std::vector<std::string_view>;

// Why a round trip gave no replies.
enum class LinkFailure {
    open_breaker,  // the server failed a moment ago: not tried
    timeout,       // connect or operation timeout
    broken,        // refused, reset, closed, a protocol error, a reply too large, AUTH refused
    cancelled,     // the caller's cancel descriptor became readable: abandoned, not a failure
};

// Reply helpers: whether `r` is an error reply (and its text), a nil, a status/bulk string.
bool is_error(const redisReply &r);
bool is_nil(const redisReply &r);
std::string_view text_of(const redisReply &r);  // a bulk, status or error string; else empty

class ServerLink {
public:
    // What a link is: a server named in the setting, or a node of a Redis Cluster that a
    // ClusterRouter found, whose MOVED and ASK replies are handed back to the router as replies.
    enum class Role { named_server, cluster_node };

    ServerLink(Server server, const Config &config, Role role = Role::named_server);
    ServerLink(const ServerLink &) = delete;
    ServerLink &operator=(const ServerLink &) = delete;

    const Server &server() const { return server_; }

    // Sends `commands` in one pipeline on this thread's connection and returns one reply per
    // command, in order (a reply may be an error reply: the server refused that command, e.g.
    // NOPERM or OOM; the link is fine). The whole call, connecting included, ends within the
    // operation timeout. `cancel_fd` (optional; -1: none) is a descriptor that becomes readable
    // when the caller wants the round trip abandoned at once (a lease's renewer, when its lease
    // is released): then the error's *failure is `cancelled`, the connection is closed and the
    // breaker is left as it was. Errors (io, naming the server, never its password): the link
    // failed or its breaker is open, *failure says which; the breaker opens on a failure.
    // Thread safe (each thread has its own connection).
    Result<std::vector<Reply>> run(const std::vector<Command> &commands, LinkFailure *failure, int cancel_fd = -1);

    // Whether the breaker lets a round trip through now: closed, or half open with no probe
    // under way (cheap: atomic loads). A caller that finds it usable may still be refused, by
    // a probe another thread started a moment before.
    bool usable() const;

    // While the server is in the first, quick probes of an outage (kSteadyProbes of them at the
    // first back-off's pace: a restart takes about a second), the steady-clock time (ns) at which
    // a caller may find it usable again: its next probe, or in a few milliseconds when a probe is
    // under way. 0 when the breaker is closed, or the outage has outlasted its quick probes. A
    // caller that has no server left may wait for it rather than go on without the tier (cheap:
    // atomic loads).
    std::int64_t quick_retry_at_ns() const;

    // This thread's connection to the server (redis_client.cpp).
    struct Connection;

private:
    // This thread's connection, made (connected, TLS, AUTH, SELECT) by `deadline_ns` if it has
    // none. *lasting: the failure is one of the set-up, which no retry mends.
    Result<Connection *> connection(std::int64_t deadline_ns, int cancel_fd, LinkFailure *failure, bool *lasting);
    // Whether a round trip may start now; *probe: it is the half-open breaker's one probe.
    bool admit(bool *probe);
    // Opens the breaker for `why` (the first failure of an outage: a warning) and returns it as
    // the caller's error, naming the server. `epoch` is the breaker's epoch when the round trip
    // began: one that began before the breaker last opened is the same outage's and changes
    // nothing, whatever number of threads saw it. A failed `probe` opens it again, for twice
    // as long.
    Error trip(Error why, LinkFailure failure, std::uint64_t epoch, bool probe);
    void reset_breaker();

    // The router of the cluster this named server turned out to be a node of (made at its first
    // MOVED, ASK or CLUSTERDOWN reply, then used for every round trip; leaked: links live as long
    // as their tier, which lives as long as the process).
    ClusterRouter *router(std::vector<Reply> *seed_replies);

    Server server_;
    Config config_;  // the setting's timeouts and sizes, for a router's nodes; no servers
    Role role_;
    std::atomic<ClusterRouter *> router_{nullptr};
    TlsSettings tls_;      // a rediss:// server's
    std::string tls_key_;  // its TLS context's: the server and its settings
    std::int64_t connect_timeout_ms_;
    std::int64_t operation_timeout_ms_;
    std::int64_t breaker_ms_;
    std::uint64_t max_reply_bytes_;               // max-entry-size plus the envelope: a larger reply is a broken link
    std::atomic<std::int64_t> open_until_ns_{0};  // steady clock; 0: closed
    std::atomic<std::int64_t> backoff_ms_{0};     // the last trip's length; 0: not tripped
    std::atomic<bool> probing_{false};            // half open: the probe is under way
    std::atomic<std::int64_t> failed_probes_{0};  // in a row, in this outage
    std::atomic<std::uint64_t> epoch_{0};         // one more at each opening of the breaker
};

}  // namespace kjit::storage::remote
