// Redis client: the cluster tier's link to one Redis server, over hiredis (Debian's 0.14:
// synchronous, plain C). Each thread has its own connection per server, made at its first use
// (connect timeout, then AUTH and SELECT) and kept; commands go in pipelines (all sent, then
// all replies read), under the operation timeout. A link that fails (refused, reset, timed out,
// a reply out of step) is closed, and the server's circuit breaker, shared by the process's
// threads, keeps every thread off it for a while (Config::breaker, doubling per failure in a
// row up to kMaxBreaker): meanwhile the tier is local-only. One warning per trip, never a
// password (Server::display). A forked child never uses its parent's connections (their
// sockets are shared with the parent): it makes its own. Knows hiredis only.
#pragma once

#include "remote_config.hpp"
#include "status.hpp"

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
    broken,        // refused, reset, closed, a protocol error, AUTH refused
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
    // NOPERM or OOM; the link is fine). Errors (io, naming the server, never its password): the
    // link failed or its breaker is open, *failure says which; the breaker opens on a failure.
    // Thread safe (each thread has its own connection).
    Result<std::vector<Reply>> run(const std::vector<Command> &commands, LinkFailure *failure);

    // Whether the breaker lets a round trip through now (cheap: one atomic load).
    bool usable() const;

    // This thread's connection to the server (redis_client.cpp).
    struct Connection;

private:
    Result<Connection *> connection(LinkFailure *failure);
    // Opens the breaker for `why` (logged once per trip) and returns it as the caller's error,
    // naming the server.
    Error trip(Error why, LinkFailure failure);
    void reset_breaker();

    Server server_;
    std::int64_t connect_timeout_ms_;
    std::int64_t operation_timeout_ms_;
    std::int64_t breaker_ms_;
    std::atomic<std::int64_t> open_until_ns_{0};  // steady clock; 0: closed
    std::atomic<std::int64_t> backoff_ms_{0};      // the last trip's length; 0: not tripped
};

}  // namespace kjit::remote
