#include "redis_client.hpp"

#include "filesystem.hpp"
#include "fork_guard.hpp"
#include "log.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <utility>

namespace kjit::remote {

namespace {

timeval to_timeval(std::int64_t ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    return tv;
}

// Whether a failed call on `ctx` (errno saved right after it as `saved_errno`) timed out.
bool timed_out(const redisContext *ctx, int saved_errno) {
    if (ctx->err != REDIS_ERR_IO) return false;
    return saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS;
}

}  // namespace

void ReplyFree::operator()(redisReply *reply) const noexcept { freeReplyObject(reply); }

namespace {

// Sends `commands` on `ctx` in one pipeline and reads one reply per command. Errors: the link
// failed (*failure says how; the connection is then out of step and must be closed), with
// hiredis's text.
Result<std::vector<Reply>> exchange(redisContext *ctx, const std::vector<Command> &commands, LinkFailure *failure) {
    std::vector<const char *> argv;
    std::vector<std::size_t> lens;
    for (const Command &cmd : commands) {
        argv.clear();
        lens.clear();
        for (std::string_view w : cmd) {
            argv.push_back(w.data());
            lens.push_back(w.size());
        }
        if (redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
            *failure = LinkFailure::broken;
            return Error{Errc::out_of_memory, ctx->errstr[0] ? ctx->errstr : "out of memory"};
        }
    }
    std::vector<Reply> replies;
    replies.reserve(commands.size());
    for (std::size_t i = 0; i < commands.size(); ++i) {
        void *raw = nullptr;
        if (redisGetReply(ctx, &raw) != REDIS_OK) {
            *failure = timed_out(ctx, errno) ? LinkFailure::timeout : LinkFailure::broken;
            return Error{Errc::io, ctx->errstr[0] ? ctx->errstr : "connection lost"};
        }
        replies.emplace_back(static_cast<redisReply *>(raw));
    }
    return replies;
}

}  // namespace

bool is_error(const redisReply &r) { return r.type == REDIS_REPLY_ERROR; }
bool is_nil(const redisReply &r) { return r.type == REDIS_REPLY_NIL; }
std::string_view text_of(const redisReply &r) {
    if (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS || r.type == REDIS_REPLY_ERROR) {
        return std::string_view(r.str, r.len);
    }
    return {};
}

// This thread's connection to one server; the thread's table frees them when it ends.
struct ServerLink::Connection {
    const ServerLink *link = nullptr;
    redisContext *context = nullptr;
    std::uint64_t fork_generation = 0;
};

namespace {

struct ThreadConnections {
    std::vector<ServerLink::Connection *> open;
    ThreadConnections() = default;
    ThreadConnections(const ThreadConnections &) = delete;
    ThreadConnections &operator=(const ThreadConnections &) = delete;
    ~ThreadConnections();
};

thread_local ThreadConnections thread_connections;

void close_connection(ServerLink::Connection *c) {
    if (!c->context) return;
    // In a forked child the socket is a copy of the parent's: closing this copy is all that is
    // safe (redisFree sends nothing).
    redisFree(c->context);
    c->context = nullptr;
}

ThreadConnections::~ThreadConnections() {
    for (ServerLink::Connection *c : open) {
        close_connection(c);
        delete c;
    }
}

}  // namespace

ServerLink::ServerLink(Server server, const Config &config)
    : server_(std::move(server)),
      connect_timeout_ms_(config.connect_timeout.count()),
      operation_timeout_ms_(config.operation_timeout.count()),
      breaker_ms_(config.breaker.count()) {}

bool ServerLink::usable() const {
    const std::int64_t until = open_until_ns_.load(std::memory_order_relaxed);
    return until == 0 || steady_ns() >= until;
}

Error ServerLink::trip(Error why, LinkFailure failure) {
    const std::int64_t last = backoff_ms_.load(std::memory_order_relaxed);
    const std::int64_t next = last == 0 ? breaker_ms_ : std::min<std::int64_t>(last * 2, kMaxBreaker.count());
    backoff_ms_.store(next, std::memory_order_relaxed);
    open_until_ns_.store(steady_ns() + next * 1'000'000, std::memory_order_relaxed);
    // One warning per trip: a thread that finds the breaker open says nothing.
    log().warn("remote cache {}: {}{}; compiling and caching locally only for the next {} ms", server_.display, why.message,
               failure == LinkFailure::timeout ? " (timed out)" : "", next);
    why.message = "remote cache " + server_.display + ": " + why.message;
    return why;
}

void ServerLink::reset_breaker() {
    if (backoff_ms_.load(std::memory_order_relaxed) == 0) return;
    backoff_ms_.store(0, std::memory_order_relaxed);
    open_until_ns_.store(0, std::memory_order_relaxed);
    log().info("remote cache {}: reachable again", server_.display);
}

Result<ServerLink::Connection *> ServerLink::connection(LinkFailure *failure) {
    Connection *mine = nullptr;
    for (Connection *c : thread_connections.open) {
        if (c->link == this) mine = c;
    }
    if (!mine) {
        mine = new Connection{this, nullptr, 0};
        thread_connections.open.push_back(mine);
    }
    if (mine->context && mine->fork_generation != fork_guard::generation()) close_connection(mine);
    if (mine->context) return mine;

    redisContext *ctx = server_.kind == Server::Kind::tcp
                            ? redisConnectWithTimeout(server_.host.c_str(), server_.port, to_timeval(connect_timeout_ms_))
                            : redisConnectUnixWithTimeout(server_.path.c_str(), to_timeval(connect_timeout_ms_));
    const int saved_errno = errno;
    if (!ctx) {
        *failure = LinkFailure::broken;
        return Error{Errc::out_of_memory, "no memory for a connection"};
    }
    if (ctx->err) {
        *failure = timed_out(ctx, saved_errno) || saved_errno == ETIMEDOUT ? LinkFailure::timeout : LinkFailure::broken;
        Error e{Errc::io, std::string("cannot connect: ") + ctx->errstr};
        redisFree(ctx);
        return e;
    }
    redisSetTimeout(ctx, to_timeval(operation_timeout_ms_));
    mine->context = ctx;
    mine->fork_generation = fork_guard::generation();
    // AUTH and SELECT before anything else, in one round trip.
    const std::string db_text = std::to_string(server_.db);
    std::vector<Command> hello;
    if (!server_.password.empty()) {
        if (server_.user.empty()) hello.push_back({"AUTH", server_.password});
        else hello.push_back({"AUTH", server_.user, server_.password});
    }
    if (server_.db != 0) hello.push_back({"SELECT", db_text});
    if (hello.empty()) return mine;
    auto replies = exchange(ctx, hello, failure);
    if (!replies) {
        close_connection(mine);
        return std::move(replies).error();
    }
    for (std::size_t i = 0; i < hello.size(); ++i) {
        if (is_error(*(*replies)[i])) {
            *failure = LinkFailure::broken;
            Error e{Errc::io, std::string(i == 0 && !server_.password.empty() ? "AUTH" : "SELECT") +
                                  " refused: " + std::string(text_of(*(*replies)[i]))};
            close_connection(mine);
            return e;
        }
    }
    return mine;
}

Result<std::vector<Reply>> ServerLink::run(const std::vector<Command> &commands, LinkFailure *failure) {
    if (!usable()) {
        *failure = LinkFailure::open_breaker;
        return Error{Errc::io, "remote cache " + server_.display + ": not tried (it failed moments ago)"};
    }
    auto conn = connection(failure);
    if (!conn) return trip(std::move(conn).error(), *failure);
    auto replies = exchange((*conn)->context, commands, failure);
    if (!replies) {
        close_connection(*conn);  // out of step now: a late reply would answer the next command
        return trip(std::move(replies).error(), *failure);
    }
    reset_breaker();
    return replies;
}

}  // namespace kjit::remote
