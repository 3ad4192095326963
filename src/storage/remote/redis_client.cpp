#include "storage/remote/redis_client.hpp"

#include "storage/remote/cluster_router.hpp"
#include "storage/remote/tls_session.hpp"

#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace kjit::storage::remote {

namespace {

// What a reply may hold beyond the largest stored value: the RESP framing, a shared compile
// error (64 KiB of log), a SCAN page or INFO text. More than that is no answer libkjit asked for.
constexpr std::uint64_t kReplyEnvelopeBytes = 1ull << 20;
constexpr std::size_t kReadChunk = 64 * 1024;
// Failed probes at the breaker's first back-off before it starts doubling.
constexpr std::int64_t kSteadyProbes = 4;
// How soon a caller waiting for a probe under way looks again (quick_retry_at_ns).
constexpr std::int64_t kProbePollNs = 5'000'000;

// Milliseconds left until `deadline_ns` for poll(), rounded up; 0 when it has passed.
int ms_left(std::int64_t deadline_ns) {
    const std::int64_t left = deadline_ns - steady_ns();
    if (left <= 0) return 0;
    return static_cast<int>(std::min<std::int64_t>((left + 999'999) / 1'000'000, 1 << 30));
}

enum class Ready { yes, timeout, cancelled, error };

// Waits until `fd` has one of `events` (or an error or hang-up, which the next call on it
// reports), `cancel_fd` (when >= 0) is readable, or `deadline_ns` passes.
Ready wait_for(int fd, short events, std::int64_t deadline_ns, int cancel_fd, short *revents) {
    for (;;) {
        const int timeout = ms_left(deadline_ns);
        if (timeout == 0) return Ready::timeout;
        pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
        const int n = ::poll(fds, cancel_fd >= 0 ? 2 : 1, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            return Ready::error;
        }
        if (n == 0) continue;  // rounding: the loop's ms_left says whether time is up
        if (cancel_fd >= 0 && fds[1].revents != 0) return Ready::cancelled;
        *revents = fds[0].revents;
        return Ready::yes;
    }
}

Error link_error(LinkFailure *failure, LinkFailure why, std::string text) {
    *failure = why;
    return Error{Errc::io, std::move(text)};
}

// A socket for `address`, connected by `deadline_ns`: close-on-exec and non-blocking from the
// call that makes it. Errors: why not (*failure: timeout or broken).
Result<UniqueFd> connect_to(const sockaddr *address, socklen_t length, std::int64_t deadline_ns, int cancel_fd,
                            LinkFailure *failure) {
    UniqueFd fd(::socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return link_error(failure, LinkFailure::broken, "socket: " + errno_text(errno));
    if (::connect(fd.get(), address, length) != 0) {
        // A Unix socket whose backlog is full says EAGAIN; TCP says EINPROGRESS.
        if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR) {
            return link_error(failure, LinkFailure::broken, errno_text(errno));
        }
        short revents = 0;
        switch (wait_for(fd.get(), POLLOUT, deadline_ns, cancel_fd, &revents)) {
            case Ready::yes: break;
            case Ready::timeout:
                return link_error(failure, LinkFailure::timeout, "no connection within connect-timeout");
            case Ready::cancelled: return link_error(failure, LinkFailure::cancelled, "abandoned");
            case Ready::error: return link_error(failure, LinkFailure::broken, "poll: " + errno_text(errno));
        }
        int err = 0;
        socklen_t err_length = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_length) != 0) err = errno;
        if (err != 0) return link_error(failure, LinkFailure::broken, errno_text(err));
    }
    if (address->sa_family == AF_INET || address->sa_family == AF_INET6) {
        const int on = 1;
        (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // pipelines are small writes
    }
    return Result<UniqueFd>(std::move(fd));
}

// Host names resolved under the caller's deadline. getaddrinfo has none of its own: a DNS
// server that does not answer costs resolv.conf's timeout times attempts times servers (10 s
// and more) inside the call, where every other step of an exchange is bounded by the operation's
// timeout. A numeric address is resolved at once (AI_NUMERICHOST, no DNS); a name by a thread
// of its own that the caller waits for, with its cancel descriptor, until the deadline: then it
// gives up as for a server that does not answer (a timeout), and the thread's answer, when it
// comes, is dropped. One lookup per name and port at a time in the process: callers that come
// while one is under way wait for it instead of starting another, so a dead DNS holds at most
// one thread per name however many calls time out on it. (getaddrinfo_a does the same with
// threads of glibc's and needs glibc 2.34 for being in libc; this needs nothing.)
struct Address {
    sockaddr_storage storage{};
    socklen_t length = 0;
};

struct HostLookup {
    std::mutex mutex;
    bool done = false;
    int rc = 0;
    std::vector<Address> addresses;
    UniqueFd ready;  // an eventfd, readable from the moment the lookup is done
};

// The lookups in flight, by "host:port". Leaked: a lookup thread may outlive main.
struct HostLookups {
    std::mutex mutex;
    std::map<std::string, std::shared_ptr<HostLookup>> in_flight;
};
HostLookups *host_lookups = new HostLookups;

// A forked child has none of the parent's lookup threads: it forgets their lookups (leaking
// them, as fork_guard.hpp says) and starts its own.
[[maybe_unused]] const bool host_lookups_renewed_in_child =
    fork_guard::at_fork_child(fork_guard::State::host_lookups, [] { host_lookups = new HostLookups; });

std::vector<Address> addresses_of(const addrinfo *found) {
    std::vector<Address> out;
    for (const addrinfo *a = found; a; a = a->ai_next) {
        if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
        Address address;
        std::memcpy(&address.storage, a->ai_addr, a->ai_addrlen);
        address.length = a->ai_addrlen;
        out.push_back(address);
    }
    return out;
}

// The lookup of `host`:`port` under way, or a new one on a thread of its own; null when no
// thread can be started (the caller then resolves in its own thread, unbounded, as before).
std::shared_ptr<HostLookup> lookup_of(const std::string &host, const std::string &port) {
    HostLookups &lookups = *host_lookups;
    const std::string name = host + ":" + port;
    std::lock_guard<std::mutex> lock(lookups.mutex);
    if (auto it = lookups.in_flight.find(name); it != lookups.in_flight.end()) return it->second;
    auto lookup = std::make_shared<HostLookup>();
    lookup->ready = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!lookup->ready.valid()) return nullptr;
    try {
        std::thread([lookup, host, port, name, table = &lookups] {
            addrinfo hints{};
            hints.ai_family = AF_UNSPEC;
            hints.ai_socktype = SOCK_STREAM;
            addrinfo *found = nullptr;
            const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
            {
                std::lock_guard<std::mutex> done(lookup->mutex);
                lookup->rc = rc;
                if (rc == 0) lookup->addresses = addresses_of(found);
                lookup->done = true;
            }
            if (found) ::freeaddrinfo(found);
            const std::uint64_t one = 1;
            (void)!::write(lookup->ready.get(), &one, sizeof one);
            // Gone from the table (unless a forked child's table replaced it: then not there).
            std::lock_guard<std::mutex> held(table->mutex);
            if (auto it = table->in_flight.find(name); it != table->in_flight.end() && it->second == lookup) {
                table->in_flight.erase(it);
            }
        }).detach();
    } catch (const std::system_error &) {
        return nullptr;
    }
    lookups.in_flight.emplace(name, lookup);
    return lookup;
}

// The addresses of `server` (a host name or a numeric address), by `deadline_ns`. Errors:
// broken (the name does not resolve), timeout (no answer by the deadline), cancelled.
Result<std::vector<Address>> resolve(const Server &server, std::int64_t deadline_ns, int cancel_fd,
                                     LinkFailure *failure) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const std::string port = std::to_string(server.port);
    auto answer = [&](int rc, addrinfo *found) -> Result<std::vector<Address>> {
        if (rc != 0) {
            return link_error(failure, LinkFailure::broken,
                              std::string("cannot resolve the host: ") + ::gai_strerror(rc));
        }
        std::vector<Address> out = addresses_of(found);
        ::freeaddrinfo(found);
        return out;
    };
    addrinfo *found = nullptr;
    hints.ai_flags = AI_NUMERICHOST;
    if (const int rc = ::getaddrinfo(server.host.c_str(), port.c_str(), &hints, &found); rc != EAI_NONAME) {
        return answer(rc, found);
    }
    hints.ai_flags = 0;
    const std::shared_ptr<HostLookup> lookup = lookup_of(server.host, port);
    if (!lookup) return answer(::getaddrinfo(server.host.c_str(), port.c_str(), &hints, &found), found);
    short revents = 0;
    switch (wait_for(lookup->ready.get(), POLLIN, deadline_ns, cancel_fd, &revents)) {
        case Ready::yes: break;
        case Ready::timeout:
            return link_error(failure, LinkFailure::timeout,
                              "the host name did not resolve within connect-timeout (no answer from DNS)");
        case Ready::cancelled: return link_error(failure, LinkFailure::cancelled, "abandoned");
        case Ready::error: return link_error(failure, LinkFailure::broken, "poll: " + errno_text(errno));
    }
    std::lock_guard<std::mutex> lock(lookup->mutex);
    if (lookup->rc != 0) {
        return link_error(failure, LinkFailure::broken,
                          std::string("cannot resolve the host: ") + ::gai_strerror(lookup->rc));
    }
    return lookup->addresses;
}

// A connected socket to `server` by `deadline_ns` (every address of a name tried in turn).
Result<UniqueFd> open_socket(const Server &server, std::int64_t deadline_ns, int cancel_fd, LinkFailure *failure) {
    if (server.kind == Server::Kind::unix_socket) {
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        if (server.path.size() >= sizeof address.sun_path) {
            return link_error(failure, LinkFailure::broken,
                              "socket path longer than " + std::to_string(sizeof address.sun_path - 1) + " bytes");
        }
        std::memcpy(address.sun_path, server.path.c_str(), server.path.size() + 1);
        return connect_to(reinterpret_cast<const sockaddr *>(&address), sizeof address, deadline_ns, cancel_fd,
                          failure);
    }
    KJIT_TRY_ASSIGN(auto addresses, resolve(server, deadline_ns, cancel_fd, failure));
    Error last{Errc::io, "no address"};
    for (const Address &a : addresses) {
        auto fd = connect_to(reinterpret_cast<const sockaddr *>(&a.storage), a.length, deadline_ns, cancel_fd, failure);
        if (fd) return fd;
        last = std::move(fd).error();
        if (*failure != LinkFailure::broken) break;  // out of time, or abandoned
    }
    return last;
}

// `commands` in the Redis protocol, one after another (a pipeline).
Result<std::string> format_pipeline(const std::vector<Command> &commands) {
    std::string out;
    std::vector<const char *> argv;
    std::vector<std::size_t> lens;
    for (const Command &cmd : commands) {
        argv.clear();
        lens.clear();
        for (std::string_view w : cmd) {
            argv.push_back(w.data());
            lens.push_back(w.size());
        }
        char *formatted = nullptr;
        const int n = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(), lens.data());
        if (n < 0) return Error{Errc::out_of_memory, "out of memory formatting a command"};
        out.append(formatted, static_cast<std::size_t>(n));
        redisFreeCommand(formatted);
    }
    return out;
}

}  // namespace

void ReplyFree::operator()(redisReply *reply) const noexcept { freeReplyObject(reply); }

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
    UniqueFd socket;
    redisReader *reader = nullptr;  // hiredis's parser of this connection's replies
    std::uint64_t fork_generation = 0;
    std::unique_ptr<tls::Session> tls;  // a rediss:// server's: the stream goes through it
    bool lasting = false;               // the last failure is one of the set-up (a TLS refusal)

    // Sends `commands` and reads one reply per command, all by `deadline_ns`. Errors: the link
    // failed (*failure says how; the connection is then out of step and must be closed).
    Result<std::vector<Reply>> exchange(const std::vector<Command> &commands, std::int64_t deadline_ns,
                                        std::uint64_t max_reply_bytes, int cancel_fd, LinkFailure *failure);
    // One read or write of the stream, through the TLS session or on the socket itself.
    tls::Io read_some(char *buffer, std::size_t size);
    tls::Io write_some(const char *data, std::size_t size);
};

namespace {

// What a recv() or send() of `n` bytes (errno when negative) means, as a TLS step would say it.
tls::Io plain_io(ssize_t n, tls::Io::Kind again, const char *call) {
    tls::Io io;
    if (n > 0) {
        io.bytes = static_cast<std::size_t>(n);
    } else if (n == 0) {
        io.kind = tls::Io::Kind::closed;
        io.error = "the server closed the connection";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        io.kind = again;
    } else {
        io.kind = tls::Io::Kind::failed;
        io.error = std::string(call) + ": " + errno_text(errno);
    }
    return io;
}

// The poll() events that a step's want asks for.
short events_of(tls::Io::Kind want) { return want == tls::Io::Kind::want_write ? POLLOUT : POLLIN; }

}  // namespace

tls::Io ServerLink::Connection::read_some(char *buffer, std::size_t size) {
    if (tls) return tls->read(buffer, size);
    return plain_io(::recv(socket.get(), buffer, size, MSG_DONTWAIT), tls::Io::Kind::want_read, "recv");
}

tls::Io ServerLink::Connection::write_some(const char *data, std::size_t size) {
    if (tls) return tls->write(data, size);
    return plain_io(::send(socket.get(), data, size, MSG_NOSIGNAL | MSG_DONTWAIT), tls::Io::Kind::want_write, "send");
}

Result<std::vector<Reply>> ServerLink::Connection::exchange(const std::vector<Command> &commands,
                                                            std::int64_t deadline_ns, std::uint64_t max_reply_bytes,
                                                            int cancel_fd, LinkFailure *failure) {
    auto out = format_pipeline(commands);
    if (!out) {
        *failure = LinkFailure::broken;
        return std::move(out).error();
    }
    std::vector<Reply> replies;
    replies.reserve(commands.size());
    std::size_t sent = 0;
    std::uint64_t reply_bytes = 0;                     // read since the last whole reply
    short read_wants = POLLIN, write_wants = POLLOUT;  // a TLS step may ask for the other way
    char chunk[kReadChunk];
    while (replies.size() < commands.size()) {
        void *raw = nullptr;
        if (redisReaderGetReply(reader, &raw) != REDIS_OK) {
            return link_error(failure, LinkFailure::broken, std::string("a malformed reply: ") + reader->errstr);
        }
        if (raw) {
            replies.emplace_back(static_cast<redisReply *>(raw));
            reply_bytes = 0;
            continue;
        }
        // Reads while it writes: a long pipeline's first replies must not wait for its last command.
        // Bytes a TLS session decrypted already are not the socket's to show: read them first.
        short revents = 0;
        const bool buffered = tls && tls->pending();
        const short events = static_cast<short>(read_wants | (sent < out->size() ? write_wants : 0));
        switch (buffered ? Ready::yes : wait_for(socket.get(), events, deadline_ns, cancel_fd, &revents)) {
            case Ready::yes: break;
            case Ready::timeout:
                return link_error(failure, LinkFailure::timeout,
                                  "no whole reply within operation-timeout (" + std::to_string(replies.size()) +
                                      " of " + std::to_string(commands.size()) + " replies, " +
                                      std::to_string(reply_bytes) + " bytes of the next)");
            case Ready::cancelled: return link_error(failure, LinkFailure::cancelled, "abandoned");
            case Ready::error: return link_error(failure, LinkFailure::broken, "poll: " + errno_text(errno));
        }
        if ((revents & write_wants) && sent < out->size()) {
            const tls::Io io = write_some(out->data() + sent, out->size() - sent);
            if (io.kind == tls::Io::Kind::closed || io.kind == tls::Io::Kind::failed) {
                lasting = io.lasting;
                return link_error(failure, LinkFailure::broken, io.error);
            }
            sent += io.bytes;
            write_wants = io.kind == tls::Io::Kind::done ? POLLOUT : events_of(io.kind);
        }
        if (!buffered && !(revents & (read_wants | POLLHUP | POLLERR))) continue;
        const tls::Io io = read_some(chunk, sizeof chunk);
        if (io.kind == tls::Io::Kind::closed || io.kind == tls::Io::Kind::failed) {
            lasting = io.lasting;
            return link_error(failure, LinkFailure::broken, io.error);
        }
        read_wants = io.kind == tls::Io::Kind::done ? POLLIN : events_of(io.kind);
        if (io.bytes == 0) continue;
        reply_bytes += io.bytes;
        if (reply_bytes > max_reply_bytes) {
            return link_error(failure, LinkFailure::broken,
                              "a reply of more than " + std::to_string(max_reply_bytes) +
                                  " bytes (max-entry-size and its envelope)");
        }
        if (redisReaderFeed(reader, chunk, io.bytes) != REDIS_OK) {
            return link_error(failure, LinkFailure::broken, "out of memory reading a reply");
        }
    }
    // Bytes past the last reply answer no command of ours: the link is out of step, and they
    // would be taken for the next command's reply (a TLS session's decrypted bytes included).
    if (reader->len > reader->pos || (tls && tls->pending())) {
        return link_error(failure, LinkFailure::broken, "more replies than commands");
    }
    return replies;
}

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
    // In a forked child the socket is a copy of the parent's: closing this copy is all that is
    // safe, and all this does (nothing is sent); its TLS session is the parent's too, abandoned
    // (leaked) rather than freed. Else the session says goodbye before its socket closes.
    if (c->tls && c->fork_generation != fork_guard::generation()) c->tls->abandon();
    c->tls.reset();
    c->socket.reset();
    if (c->reader) redisReaderFree(c->reader);
    c->reader = nullptr;
}

ThreadConnections::~ThreadConnections() {
    for (ServerLink::Connection *c : open) {
        close_connection(c);
        delete c;
    }
}

}  // namespace

ServerLink::ServerLink(Server server, const Config &config, Role role)
    : server_(std::move(server)), config_(config), role_(role), tls_(config.tls),
      tls_key_(server_.id + " " + config.tls.canonical()), connect_timeout_ms_(config.connect_timeout.count()),
      operation_timeout_ms_(config.operation_timeout.count()), breaker_ms_(config.breaker.count()),
      max_reply_bytes_(config.max_entry_bytes + kReplyEnvelopeBytes) {}

bool ServerLink::usable() const {
    const std::int64_t until = open_until_ns_.load(std::memory_order_relaxed);
    return until == 0 || (steady_ns() >= until && !probing_.load(std::memory_order_relaxed));
}

std::int64_t ServerLink::quick_retry_at_ns() const {
    if (const ClusterRouter *cluster = router_.load(std::memory_order_acquire)) return cluster->quick_retry_at_ns();
    const std::int64_t until = open_until_ns_.load(std::memory_order_relaxed);
    if (until == 0 || failed_probes_.load(std::memory_order_relaxed) >= kSteadyProbes) return 0;
    const std::int64_t now = steady_ns();
    if (probing_.load(std::memory_order_relaxed)) return now + kProbePollNs;
    return std::max(until, now);
}

bool ServerLink::admit(bool *probe) {
    *probe = false;
    const std::int64_t until = open_until_ns_.load(std::memory_order_acquire);
    if (until == 0) return true;
    if (steady_ns() < until) return false;
    // Half open: one round trip, the first to come, probes the server; the others wait for it.
    bool expected = false;
    if (!probing_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return false;
    *probe = true;
    return true;
}

Error ServerLink::trip(Error why, LinkFailure failure, std::uint64_t epoch, bool probe) {
    why.message = "remote cache " + display(server_) + ": " + why.message;
    const char *timed_out = failure == LinkFailure::timeout ? " (timed out)" : "";
    const std::int64_t cap = std::max<std::int64_t>(kMaxBreaker.count(), breaker_ms_);
    if (probe) {
        // The first probes come at the first back-off's pace (a restart takes a second or so),
        // then less and less often.
        const std::int64_t failed = failed_probes_.fetch_add(1, std::memory_order_relaxed) + 1;
        const std::int64_t last = backoff_ms_.load(std::memory_order_relaxed);
        const std::int64_t next =
            failed < kSteadyProbes ? breaker_ms_ : std::clamp<std::int64_t>(last * 2, breaker_ms_, cap);
        backoff_ms_.store(next, std::memory_order_relaxed);
        epoch_.fetch_add(1, std::memory_order_relaxed);
        open_until_ns_.store(steady_ns() + next * 1'000'000, std::memory_order_release);
        probing_.store(false, std::memory_order_release);
        log().debug("{}{}; still failing: the next try in {} ms", why.message, timed_out, next);
        return why;
    }
    // A round trip that began before the breaker last opened (or while it is open) is the same
    // outage's: of threads failing at once, one opens it.
    std::int64_t closed = 0;
    if (epoch_.load(std::memory_order_relaxed) != epoch ||
        !open_until_ns_.compare_exchange_strong(closed, steady_ns() + breaker_ms_ * 1'000'000,
                                                std::memory_order_acq_rel)) {
        return why;
    }
    epoch_.fetch_add(1, std::memory_order_relaxed);
    backoff_ms_.store(breaker_ms_, std::memory_order_relaxed);
    failed_probes_.store(0, std::memory_order_relaxed);
    // One warning per outage: a thread that finds the breaker open says nothing, a failed probe
    // says it at debug.
    log().warn("{}{}; its keys go to the next server named, or are compiled and cached locally, until it "
               "answers again (tried again in {} ms, then less and less often, up to every {} s)",
               why.message, timed_out, breaker_ms_, cap / 1000);
    return why;
}

void ServerLink::reset_breaker() {
    if (open_until_ns_.load(std::memory_order_acquire) == 0) return;
    backoff_ms_.store(0, std::memory_order_relaxed);
    open_until_ns_.store(0, std::memory_order_release);
    probing_.store(false, std::memory_order_release);
    log().info("remote cache {}: reachable again", display(server_));
}

namespace {

// The TLS session of `c`, on its new socket to `server`, with the context of `key` (`settings`),
// its handshake done by `deadline_ns`. Errors: why not (*failure: timeout, broken or cancelled),
// and c.lasting when no retry mends it.
Status start_tls(ServerLink::Connection &c, const Server &server, const std::string &key, const TlsSettings &settings,
                 std::int64_t deadline_ns, int cancel_fd, LinkFailure *failure) {
    auto context = tls::context_for(key, settings);
    if (!context) {
        c.lasting = true;
        return link_error(failure, LinkFailure::broken, context.error().message);
    }
    auto session = tls::Session::start(**context, c.socket.get(), server.host);
    if (!session) return link_error(failure, LinkFailure::broken, session.error().message);
    c.tls = std::move(*session);
    for (;;) {
        const tls::Io io = c.tls->handshake();
        if (io.kind == tls::Io::Kind::done) return Ok{};
        if (io.kind != tls::Io::Kind::want_read && io.kind != tls::Io::Kind::want_write) {
            c.lasting = io.lasting;
            return link_error(failure, LinkFailure::broken, io.error);
        }
        short revents = 0;
        switch (wait_for(c.socket.get(), events_of(io.kind), deadline_ns, cancel_fd, &revents)) {
            case Ready::yes: break;
            case Ready::timeout:
                return link_error(failure, LinkFailure::timeout,
                                  "no TLS handshake within operation-timeout (does the server speak TLS on that "
                                  "port?)");
            case Ready::cancelled: return link_error(failure, LinkFailure::cancelled, "abandoned");
            case Ready::error: return link_error(failure, LinkFailure::broken, "poll: " + errno_text(errno));
        }
    }
}

}  // namespace

Result<ServerLink::Connection *> ServerLink::connection(std::int64_t deadline_ns, int cancel_fd, LinkFailure *failure,
                                                        bool *lasting) {
    Connection *mine = nullptr;
    for (Connection *c : thread_connections.open) {
        if (c->link == this) mine = c;
    }
    if (!mine) {
        mine = new Connection;
        mine->link = this;
        thread_connections.open.push_back(mine);
    }
    if (mine->socket.valid() && mine->fork_generation != fork_guard::generation()) close_connection(mine);
    // A kept connection has nothing to read between round trips (every reply was read): if it
    // has, the server closed it (a restart, an idle timeout) or is out of step. A new one then,
    // rather than a failure that would open the breaker of a server that is up.
    if (mine->socket.valid()) {
        pollfd idle{mine->socket.get(), POLLIN, 0};
        if (::poll(&idle, 1, 0) == 0) return mine;
        close_connection(mine);
    }

    const std::int64_t connect_deadline = std::min(deadline_ns, steady_ns() + connect_timeout_ms_ * 1'000'000);
    auto socket = open_socket(server_, connect_deadline, cancel_fd, failure);
    if (!socket) {
        Error e = std::move(socket).error();
        if (*failure != LinkFailure::cancelled) e.message = "cannot connect: " + e.message;
        return e;
    }
    mine->reader = redisReaderCreate();
    if (!mine->reader) return link_error(failure, LinkFailure::broken, "no memory for a connection");
    mine->socket = std::move(*socket);
    mine->fork_generation = fork_guard::generation();
    mine->lasting = false;
    if (server_.tls) {
        if (auto st = start_tls(*mine, server_, tls_key_, tls_, deadline_ns, cancel_fd, failure); !st) {
            *lasting = mine->lasting;
            close_connection(mine);
            return std::move(st).error();
        }
        log().debug("remote cache {}: connected with TLS ({})", display(server_),
                    mine->tls->resumed() ? "a session resumed" : "a full handshake");
    }
    // AUTH and SELECT before anything else, in one round trip.
    const std::string db_text = std::to_string(server_.db);
    std::vector<Command> hello;
    if (!server_.password.empty()) {
        if (server_.user.empty()) hello.push_back({"AUTH", server_.password});
        else hello.push_back({"AUTH", server_.user, server_.password});
    }
    if (server_.db != 0) hello.push_back({"SELECT", db_text});
    if (hello.empty()) return mine;
    auto replies = mine->exchange(hello, deadline_ns, max_reply_bytes_, cancel_fd, failure);
    if (!replies) {
        *lasting = mine->lasting;
        close_connection(mine);
        return std::move(replies).error();
    }
    for (std::size_t i = 0; i < hello.size(); ++i) {
        if (is_error(*(*replies)[i])) {
            Error e = link_error(failure, LinkFailure::broken,
                                 std::string(i == 0 && !server_.password.empty() ? "AUTH" : "SELECT") +
                                     " refused: " + std::string(text_of(*(*replies)[i])));
            close_connection(mine);
            return e;
        }
    }
    return mine;
}

namespace {

// A reply of a server in Redis Cluster mode that does not hold the key's slot (MOVED, ASK) or
// whose cluster is not whole (CLUSTERDOWN).
bool is_cluster_reply(const redisReply &r) {
    if (!is_error(r)) return false;
    const std::string_view text = text_of(r);
    return text.rfind("MOVED ", 0) == 0 || text.rfind("ASK ", 0) == 0 || text.rfind("CLUSTERDOWN", 0) == 0;
}

}  // namespace

ClusterRouter *ServerLink::router(std::vector<Reply> *seed_replies) {
    if (ClusterRouter *known = router_.load(std::memory_order_acquire)) return known;
    if (!seed_replies) return nullptr;
    auto *made = new ClusterRouter(server_, config_);
    ClusterRouter *expected = nullptr;
    if (router_.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) return made;
    delete made;  // another thread's came first
    return expected;
}

Result<std::vector<Reply>> ServerLink::run(const std::vector<Command> &commands, LinkFailure *failure, int cancel_fd) {
    if (ClusterRouter *cluster = router(nullptr)) return cluster->run(commands, nullptr, failure, cancel_fd);
    bool probe = false;
    if (!admit(&probe)) {
        *failure = LinkFailure::open_breaker;
        return Error{Errc::io, "remote cache " + display(server_) + ": not tried (it failed moments ago)"};
    }
    const std::uint64_t epoch = epoch_.load(std::memory_order_relaxed);
    const std::int64_t deadline = steady_ns() + operation_timeout_ms_ * 1'000'000;
    bool lasting = false;  // set up wrong (cluster mode, a TLS refusal), not restarting
    auto conn = connection(deadline, cancel_fd, failure, &lasting);
    if (conn) {
        auto replies = (*conn)->exchange(commands, deadline, max_reply_bytes_, cancel_fd, failure);
        if (!replies) {
            lasting = (*conn)->lasting;
            close_connection(*conn);  // out of step now: a late reply would answer the next command
            conn = std::move(replies).error();
        } else {
            reset_breaker();
            // A named server that answers as a cluster node: the router takes these replies
            // (some commands ran) and every round trip from now on. A node's redirects are its
            // router's to follow.
            if (role_ == Role::named_server &&
                std::any_of(replies->begin(), replies->end(), [](const Reply &r) { return is_cluster_reply(*r); })) {
                return router(&*replies)->run(commands, &*replies, failure, cancel_fd);
            }
            return replies;
        }
    }
    Error e = std::move(conn).error();
    if (*failure == LinkFailure::cancelled) {
        if (probe) probing_.store(false, std::memory_order_release);
        return e;
    }
    Error tripped = trip(std::move(e), *failure, epoch, probe);
    // A server whose TLS set-up is refused is set up wrong, not restarting: no call waits for its
    // quick probes (quick_retry_at_ns), and it is probed less and less often from the first.
    if (lasting) failed_probes_.store(kSteadyProbes, std::memory_order_relaxed);
    return tripped;
}

}  // namespace kjit::storage::remote
