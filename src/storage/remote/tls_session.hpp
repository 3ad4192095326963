// TLS session: a TLS client over a connected, non-blocking socket that the caller owns and polls
// (rediss:// servers, redis_client.cpp). Knows OpenSSL only, and nothing of Redis.
//
// OpenSSL's libssl is opened at run time (dlopen "libssl.so.3", else "libssl.so.1.1", each with
// the libcrypto of its release), as NVRTC and the CUDA driver are: libkjit.so and the Python
// wheel neither link nor carry OpenSSL, a host without it loads libkjit and uses every other
// feature, and a host that uses OpenSSL itself (Python's ssl module) shares its one copy. The
// handful of functions used are declared here with opaque types and OpenSSL's stable numeric
// constants, so no OpenSSL header is needed to build. Where libssl cannot be opened, a session
// cannot start, with one error saying what was looked for.
//
// Every step is non-blocking: handshake(), read() and write() do what the socket allows and say
// which way it must become ready (Io::want_read, Io::want_write) for the caller's poll(); the
// caller owns the deadline. SIGPIPE is blocked in the calling thread around each OpenSSL call
// (OpenSSL writes with write(), not send(MSG_NOSIGNAL)): a server that went away is an error
// returned, never a signal that kills the host.
//
// One Context (an SSL_CTX) per distinct key, the caller's server and settings: made at the first
// context_for() and kept for the process, with the last session ticket the server gave, which
// the next session to that server offers (resumption: a reconnect costs one round trip and no
// certificate check). A forked child makes its own contexts (fork_guard: the parent's are
// forgotten, leaked), and abandons the sessions it inherited rather than free them: OpenSSL's
// objects of the parent may hold locks of a thread that the child does not have.
#pragma once

#include "storage/remote/tls_settings.hpp"
#include "util/status.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kjit::storage::remote::tls {

// What one step did.
struct Io {
    enum class Kind {
        done,        // the handshake is complete, or `bytes` were read or written
        want_read,   // nothing moved: call again once the socket is readable
        want_write,  // nothing moved: call again once the socket is writable
        closed,      // the server closed the connection (read: end of stream)
        failed,      // `error` says why; the session is unusable
    } kind = Kind::done;
    std::size_t bytes = 0;
    std::string error;
    // failed: a fault of the set-up (a certificate refused, a client certificate missing) that no
    // retry mends, rather than of the link.
    bool lasting = false;
};

class Context;

// The context of `key` (a server and its settings: one per distinct pair), made from `settings`
// at its first call and kept for the process. Thread safe. Errors (io): libssl cannot be opened
// (naming what was looked for), or a file of `settings` is refused by OpenSSL (naming it, and
// why); nothing is kept then, so the next call tries again.
Result<Context *> context_for(const std::string &key, const TlsSettings &settings);

class Session {
public:
    // A session on `fd` (connected and non-blocking; it stays the caller's, who closes it after
    // the session) with `context`, for the server `host`: a host name is sent as SNI and checked
    // against the certificate's names, an IP address literal against its addresses (unless the
    // context skips verification). Offers the context's last session for resumption. Errors: io.
    static Result<std::unique_ptr<Session>> start(Context &context, int fd, const std::string &host);
    // Says goodbye (close_notify, if the socket takes it at once) and frees the session.
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // One step of the handshake: done, want_*, or failed (a refused certificate: why, from
    // OpenSSL's verification result, and lasting).
    Io handshake();
    // Up to `size` bytes of the server's stream; closed at its end.
    Io read(char *buffer, std::size_t size);
    // Some of `data` (at least one byte when done). After a want_*, call again with the same
    // unsent bytes (the buffer may have moved).
    Io write(const char *data, std::size_t size);
    // Whether decrypted bytes wait inside the session, which a poll() of the socket cannot see:
    // read() before polling for reads.
    bool pending() const;
    // Whether the handshake resumed an earlier session (no certificate sent nor checked).
    bool resumed() const;
    // In a forked child: forget the session without touching it (it is the parent's: leaked).
    void abandon();

private:
    struct State;
    explicit Session(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

// The libraries tried, in order, each a libssl with the libcrypto of its release.
struct LibraryPair {
    std::string ssl;
    std::string crypto;
};
const std::vector<LibraryPair> &default_libraries();
// Tries `pairs` as the process does at its first context (for tests: the message where none
// opens). "" when one opens and has every function used.
std::string open_error(const std::vector<LibraryPair> &pairs);

}  // namespace kjit::storage::remote::tls
