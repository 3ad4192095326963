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
// the server's circuit breaker, shared by the process's threads, keeps every thread off it for a
// while (Config::breaker, doubling per failure in a row up to kMaxBreaker; failures of one outage
// seen by several threads at once count once): meanwhile the tier is local-only. One warning per
// trip, never a password (display()). A forked child never uses its parent's connections
// (their sockets are shared with the parent): it makes its own. Knows hiredis only.
#pragma once

#include "remote/remote_config.hpp"
#include "util/status.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct redisReply;

namespace kjit::remote {

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
    ServerLink(Server server, const Config &config);
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

    // Whether the breaker lets a round trip through now (cheap: one atomic load).
    bool usable() const;

    // This thread's connection to the server (redis_client.cpp).
    struct Connection;

private:
    // This thread's connection, made (connected, AUTH, SELECT) by `deadline_ns` if it has none.
    Result<Connection *> connection(std::int64_t deadline_ns, int cancel_fd, LinkFailure *failure);
    // Opens the breaker for `why` (logged once per trip) and returns it as the caller's error,
    // naming the server. A breaker that another thread opened while this one's round trip was
    // under way is left as it is: one outage is one trip, whatever number of threads saw it.
    Error trip(Error why, LinkFailure failure);
    void reset_breaker();

    Server server_;
    std::int64_t connect_timeout_ms_;
    std::int64_t operation_timeout_ms_;
    std::int64_t breaker_ms_;
    std::uint64_t max_reply_bytes_;               // max-entry-size plus the envelope: a larger reply is a broken link
    std::atomic<std::int64_t> open_until_ns_{0};  // steady clock; 0: closed
    std::atomic<std::int64_t> backoff_ms_{0};     // the last trip's length; 0: not tripped
};

}  // namespace kjit::remote
