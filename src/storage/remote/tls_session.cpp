#include "storage/remote/tls_session.hpp"

#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <map>
#include <mutex>
#include <utility>

namespace kjit::storage::remote::tls {

// OpenSSL's types, opaque: only pointers to them are passed around (typedef struct ssl_st SSL,
// and so on, in OpenSSL's headers).
struct ssl_st;
struct ssl_ctx_st;
struct ssl_session_st;
struct ssl_method_st;
struct x509_verify_param_st;

namespace {

// OpenSSL's constants, each checked against /usr/include/openssl of OpenSSL 3.0.19 (Debian 12;
// the file named), and the same in 1.1.1: they are part of the ABI both releases keep.
constexpr int kErrorWantRead = 2;                   // SSL_ERROR_WANT_READ (ssl.h)
constexpr int kErrorWantWrite = 3;                  // SSL_ERROR_WANT_WRITE (ssl.h)
constexpr int kErrorSyscall = 5;                    // SSL_ERROR_SYSCALL (ssl.h)
constexpr int kErrorZeroReturn = 6;                 // SSL_ERROR_ZERO_RETURN (ssl.h)
constexpr int kErrorSsl = 1;                        // SSL_ERROR_SSL (ssl.h)
constexpr int kCtrlMode = 33;                       // SSL_CTRL_MODE (ssl.h): SSL_CTX_set_mode
constexpr int kCtrlSetSessCacheMode = 44;           // SSL_CTRL_SET_SESS_CACHE_MODE (ssl.h)
constexpr int kCtrlSetTlsextHostname = 55;          // SSL_CTRL_SET_TLSEXT_HOSTNAME (ssl.h)
constexpr int kCtrlSetMinProtoVersion = 123;        // SSL_CTRL_SET_MIN_PROTO_VERSION (ssl.h)
constexpr long kTls12Version = 0x0303;              // TLS1_2_VERSION (prov_ssl.h; tls1.h in 1.1.1)
constexpr long kNameTypeHostName = 0;               // TLSEXT_NAMETYPE_host_name (tls1.h)
constexpr long kModeEnablePartialWrite = 0x1;       // SSL_MODE_ENABLE_PARTIAL_WRITE (ssl.h)
constexpr long kModeAcceptMovingWriteBuffer = 0x2;  // SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER (ssl.h)
constexpr long kSessCacheClient = 0x0001;           // SSL_SESS_CACHE_CLIENT (ssl.h)
constexpr long kSessCacheNoInternalStore = 0x0200;  // SSL_SESS_CACHE_NO_INTERNAL_STORE (ssl.h)
constexpr int kVerifyNone = 0x00;                   // SSL_VERIFY_NONE (ssl.h)
constexpr int kVerifyPeer = 0x01;                   // SSL_VERIFY_PEER (ssl.h)
constexpr int kFiletypePem = 1;                     // SSL_FILETYPE_PEM = X509_FILETYPE_PEM (x509.h)
constexpr long kVerifyOk = 0;                       // X509_V_OK (x509_vfy.h)
constexpr int kAppData = 0;                         // the ex_data index of SSL_set_app_data (ssl.h)
constexpr int kOpensslVersion = 0;                  // OPENSSL_VERSION (crypto.h)

// The functions used, as OpenSSL declares them (ssl.h, x509_vfy.h, err.h, crypto.h). The macros
// among what is used (SSL_CTX_set_min_proto_version, SSL_CTX_set_mode,
// SSL_CTX_set_session_cache_mode, SSL_set_tlsext_host_name) are SSL_CTX_ctrl and SSL_ctrl calls.
struct Api {
    // libssl
    const ssl_method_st *(*TLS_client_method)();
    ssl_ctx_st *(*SSL_CTX_new)(const ssl_method_st *);
    void (*SSL_CTX_free)(ssl_ctx_st *);
    long (*SSL_CTX_ctrl)(ssl_ctx_st *, int, long, void *);
    void (*SSL_CTX_set_verify)(ssl_ctx_st *, int, int (*)(int, void *));
    int (*SSL_CTX_set_default_verify_paths)(ssl_ctx_st *);
    int (*SSL_CTX_load_verify_locations)(ssl_ctx_st *, const char *, const char *);
    int (*SSL_CTX_use_certificate_chain_file)(ssl_ctx_st *, const char *);
    int (*SSL_CTX_use_PrivateKey_file)(ssl_ctx_st *, const char *, int);
    int (*SSL_CTX_check_private_key)(const ssl_ctx_st *);
    void (*SSL_CTX_set_default_passwd_cb)(ssl_ctx_st *, int (*)(char *, int, int, void *));
    void (*SSL_CTX_sess_set_new_cb)(ssl_ctx_st *, int (*)(ssl_st *, ssl_session_st *));
    ssl_st *(*SSL_new)(ssl_ctx_st *);
    void (*SSL_free)(ssl_st *);
    int (*SSL_set_fd)(ssl_st *, int);
    long (*SSL_ctrl)(ssl_st *, int, long, void *);
    int (*SSL_set1_host)(ssl_st *, const char *);
    x509_verify_param_st *(*SSL_get0_param)(ssl_st *);
    int (*SSL_set_session)(ssl_st *, ssl_session_st *);
    int (*SSL_session_reused)(const ssl_st *);
    void (*SSL_SESSION_free)(ssl_session_st *);
    int (*SSL_set_ex_data)(ssl_st *, int, void *);
    void *(*SSL_get_ex_data)(const ssl_st *, int);
    int (*SSL_connect)(ssl_st *);
    int (*SSL_read)(ssl_st *, void *, int);
    int (*SSL_write)(ssl_st *, const void *, int);
    int (*SSL_get_error)(const ssl_st *, int);
    int (*SSL_pending)(const ssl_st *);
    int (*SSL_shutdown)(ssl_st *);
    long (*SSL_get_verify_result)(const ssl_st *);
    // libcrypto
    const char *(*OpenSSL_version)(int);
    int (*X509_VERIFY_PARAM_set1_ip_asc)(x509_verify_param_st *, const char *);
    const char *(*X509_verify_cert_error_string)(long);
    unsigned long (*ERR_get_error)();
    void (*ERR_clear_error)();
    const char *(*ERR_reason_error_string)(unsigned long);
};

struct Library {
    Api api{};
    std::string error;  // empty: usable
};

template <typename Fn>
bool bind(void *handle, Fn &fn, const char *symbol, const std::string &file, std::string &why) {
    fn = reinterpret_cast<Fn>(::dlsym(handle, symbol));
    if (!fn) why = "opened, but " + file + " has no " + symbol + " (OpenSSL 1.1.1 or later is needed)";
    return fn != nullptr;
}

std::string dlerror_text() {
    const char *e = ::dlerror();
    return e ? e : "unknown error";
}

// Opens `pair` and fills `a` from it; false with `why`. Handles stay open (never closed: the
// process, or the host, may use the library for something else).
bool open_pair(const LibraryPair &pair, Api &a, std::string &why) {
    void *ssl = ::dlopen(pair.ssl.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!ssl) {
        why = "dlopen(\"" + pair.ssl + "\") failed: " + dlerror_text();
        return false;
    }
    void *crypto = ::dlopen(pair.crypto.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!crypto) {
        why = "dlopen(\"" + pair.crypto + "\") failed: " + dlerror_text();
        return false;
    }
    bool ok = true;  // until a symbol is missing; the rest are then not looked up
    auto from_ssl = [&](auto &fn, const char *symbol) { ok = ok && bind(ssl, fn, symbol, pair.ssl, why); };
    auto from_crypto = [&](auto &fn, const char *symbol) { ok = ok && bind(crypto, fn, symbol, pair.crypto, why); };
#define KJIT_SSL(name) from_ssl(a.name, #name)
#define KJIT_CRYPTO(name) from_crypto(a.name, #name)
    KJIT_SSL(TLS_client_method);
    KJIT_SSL(SSL_CTX_new);
    KJIT_SSL(SSL_CTX_free);
    KJIT_SSL(SSL_CTX_ctrl);
    KJIT_SSL(SSL_CTX_set_verify);
    KJIT_SSL(SSL_CTX_set_default_verify_paths);
    KJIT_SSL(SSL_CTX_load_verify_locations);
    KJIT_SSL(SSL_CTX_use_certificate_chain_file);
    KJIT_SSL(SSL_CTX_use_PrivateKey_file);
    KJIT_SSL(SSL_CTX_check_private_key);
    KJIT_SSL(SSL_CTX_set_default_passwd_cb);
    KJIT_SSL(SSL_CTX_sess_set_new_cb);
    KJIT_SSL(SSL_new);
    KJIT_SSL(SSL_free);
    KJIT_SSL(SSL_set_fd);
    KJIT_SSL(SSL_ctrl);
    KJIT_SSL(SSL_set1_host);
    KJIT_SSL(SSL_get0_param);
    KJIT_SSL(SSL_set_session);
    KJIT_SSL(SSL_session_reused);
    KJIT_SSL(SSL_SESSION_free);
    KJIT_SSL(SSL_set_ex_data);
    KJIT_SSL(SSL_get_ex_data);
    KJIT_SSL(SSL_connect);
    KJIT_SSL(SSL_read);
    KJIT_SSL(SSL_write);
    KJIT_SSL(SSL_get_error);
    KJIT_SSL(SSL_pending);
    KJIT_SSL(SSL_shutdown);
    KJIT_SSL(SSL_get_verify_result);
    KJIT_CRYPTO(OpenSSL_version);
    KJIT_CRYPTO(X509_VERIFY_PARAM_set1_ip_asc);
    KJIT_CRYPTO(X509_verify_cert_error_string);
    KJIT_CRYPTO(ERR_get_error);
    KJIT_CRYPTO(ERR_clear_error);
    KJIT_CRYPTO(ERR_reason_error_string);
#undef KJIT_SSL
#undef KJIT_CRYPTO
    return ok;
}

Library open_first(const std::vector<LibraryPair> &pairs) {
    Library library;
    std::string tried;
    for (const LibraryPair &pair : pairs) {
        Api a{};
        std::string why;
        if (open_pair(pair, a, why)) {
            log().debug("remote cache: TLS by {} ({})", a.OpenSSL_version(kOpensslVersion), pair.ssl);
            library.api = a;
            return library;
        }
        tried += (tried.empty() ? "" : "; ") + why;
    }
    library.error = "rediss:// needs OpenSSL's libssl (3 or 1.1.1), which libkjit opens at run time, and none could "
                    "be used: " +
                    tried + " (Debian and Ubuntu: apt-get install libssl3)";
    return library;
}

// Opened at the first context, under the contexts' lock; kept as it is in a forked child (the
// library stays mapped), never closed.
std::atomic<Library *> library_slot{nullptr};

}  // namespace

// One SSL_CTX for one key (a server and its settings), and the last session the server gave.
class Context {
public:
    const Api *api = nullptr;
    ssl_ctx_st *ctx = nullptr;
    bool verify = true;
    std::string checked_against;  // for messages: "the system CA store", "ca-file=..."
    bool has_identity = false;    // a client certificate is shown when asked for
    std::mutex session_mutex;
    ssl_session_st *session = nullptr;  // offered by the next session (resumption); ours
};

namespace {

// The contexts made in this process, by key. Contexts are never freed: sessions of any thread
// point to theirs.
struct Contexts {
    std::mutex mutex;
    std::map<std::string, Context *> made;
};
std::atomic<Contexts *> contexts_slot{nullptr};

// A forked child forgets the parent's contexts (leaked: another thread of the parent may have
// held a lock of theirs, OpenSSL's or the session's) and makes its own.
void forget_contexts_in_child() { contexts_slot.store(nullptr, std::memory_order_relaxed); }
[[maybe_unused]] const bool contexts_forgotten_in_child =
    fork_guard::at_fork_child(fork_guard::State::tls_contexts, forget_contexts_in_child);

// SIGPIPE blocked in the calling thread for the life of the object, and one that the calls
// meanwhile raised (OpenSSL writes to a socket the server closed) taken off before it is
// unblocked: libpq's way. Any other thread's handling of SIGPIPE is left as it is.
class QuietPipe {
public:
    QuietPipe() {
        ::sigemptyset(&pipe_);
        ::sigaddset(&pipe_, SIGPIPE);
        blocked_ = ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
        sigset_t pending;
        was_pending_ = ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGPIPE) == 1;
    }
    ~QuietPipe() {
        if (!blocked_) return;
        const int saved = errno;
        sigset_t pending;
        if (!was_pending_ && ::sigpending(&pending) == 0 && ::sigismember(&pending, SIGPIPE) == 1) {
            const timespec zero{0, 0};
            while (::sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
            }
        }
        ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
        errno = saved;
    }
    QuietPipe(const QuietPipe &) = delete;
    QuietPipe &operator=(const QuietPipe &) = delete;

private:
    sigset_t pipe_{};
    sigset_t old_{};
    bool blocked_ = false;
    bool was_pending_ = false;
};

// The first reason in this thread's OpenSSL error queue, which is emptied.
std::string queue_text(const Api &a) {
    std::string out;
    for (unsigned long e = a.ERR_get_error(); e != 0; e = a.ERR_get_error()) {
        if (!out.empty()) continue;
        const char *reason = a.ERR_reason_error_string(e);
        out = reason ? reason : "OpenSSL error " + std::to_string(e);
    }
    return out;
}

// A new session ticket from a server (TLS 1.3: after the handshake, read with the first reply;
// TLS 1.2: at its end): kept in the session's context for the next connect, in place of the last.
int keep_session(ssl_st *ssl, ssl_session_st *session) {
    const Library *library = library_slot.load(std::memory_order_acquire);
    if (!library) return 0;
    auto *context = static_cast<Context *>(library->api.SSL_get_ex_data(ssl, kAppData));
    if (!context) return 0;
    ssl_session_st *old = nullptr;
    {
        std::lock_guard<std::mutex> lock(context->session_mutex);
        old = std::exchange(context->session, session);
    }
    if (old) library->api.SSL_SESSION_free(old);
    return 1;  // the reference is ours now
}

// An encrypted key-file is refused rather than asked for on the terminal (OpenSSL's default).
int no_passphrase(char *, int, int, void *) { return 0; }

Error context_error(const Api &a, ssl_ctx_st *ctx, const std::string &what) {
    const std::string why = queue_text(a);
    if (ctx) a.SSL_CTX_free(ctx);
    return Error{Errc::io, "TLS: " + what + (why.empty() ? "" : ": " + why)};
}

Status load_trust(const Api &a, ssl_ctx_st *ctx, const TlsSettings &s, Context &c) {
    if (s.insecure_skip_verify) {
        a.SSL_CTX_set_verify(ctx, kVerifyNone, nullptr);
        c.verify = false;
        c.checked_against = "nothing (insecure-skip-verify=true)";
        static std::atomic<bool> said{false};
        if (!said.exchange(true)) {
            log().warn("remote cache: insecure-skip-verify=true: the certificates and names of rediss:// servers are "
                       "not checked, so anyone on the path can pose as the server (said once per process)");
        }
        return Ok{};
    }
    a.SSL_CTX_set_verify(ctx, kVerifyPeer, nullptr);
    if (s.ca_file.empty() && s.ca_dir.empty()) {
        c.checked_against = "the system CA store";
        if (a.SSL_CTX_set_default_verify_paths(ctx) != 1) return Error{Errc::io, "the system CA store cannot be read"};
        return Ok{};
    }
    c.checked_against = s.ca_file.empty() ? "ca-dir=" + s.ca_dir : "ca-file=" + s.ca_file;
    if (!s.ca_dir.empty() && !s.ca_file.empty()) c.checked_against += " and ca-dir=" + s.ca_dir;
    if (a.SSL_CTX_load_verify_locations(ctx, s.ca_file.empty() ? nullptr : s.ca_file.c_str(),
                                        s.ca_dir.empty() ? nullptr : s.ca_dir.c_str()) != 1) {
        return Error{Errc::io, c.checked_against + " holds no CA certificate OpenSSL can read"};
    }
    return Ok{};
}

Status load_identity(const Api &a, ssl_ctx_st *ctx, const TlsSettings &s) {
    if (s.cert_file.empty()) return Ok{};
    if (a.SSL_CTX_use_certificate_chain_file(ctx, s.cert_file.c_str()) != 1) {
        return Error{Errc::io, "cert-file '" + s.cert_file + "' is not a PEM certificate OpenSSL can use"};
    }
    if (a.SSL_CTX_use_PrivateKey_file(ctx, s.key_file.c_str(), kFiletypePem) != 1) {
        return Error{Errc::io, "key-file '" + s.key_file +
                                   "' is not an unencrypted PEM private key (an encrypted key is refused)"};
    }
    if (a.SSL_CTX_check_private_key(ctx) != 1) {
        return Error{Errc::io, "key-file '" + s.key_file + "' is not the key of cert-file '" + s.cert_file + "'"};
    }
    return Ok{};
}

Result<Context *> make_context(const Api &a, const TlsSettings &s) {
    a.ERR_clear_error();
    ssl_ctx_st *ctx = a.SSL_CTX_new(a.TLS_client_method());
    if (!ctx) return context_error(a, nullptr, "cannot make a context");
    if (a.SSL_CTX_ctrl(ctx, kCtrlSetMinProtoVersion, kTls12Version, nullptr) != 1) {
        return context_error(a, ctx, "cannot require TLS 1.2 or later");
    }
    // Writes of part of a pipeline, retried from where they stopped (the buffer is the caller's).
    (void)a.SSL_CTX_ctrl(ctx, kCtrlMode, kModeEnablePartialWrite | kModeAcceptMovingWriteBuffer, nullptr);
    // Tickets go to keep_session, not to a cache of the context's (one per server is enough).
    (void)a.SSL_CTX_ctrl(ctx, kCtrlSetSessCacheMode, kSessCacheClient | kSessCacheNoInternalStore, nullptr);
    a.SSL_CTX_sess_set_new_cb(ctx, keep_session);
    a.SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    auto context = std::make_unique<Context>();
    context->api = &a;
    if (auto st = load_trust(a, ctx, s, *context); !st) return context_error(a, ctx, st.error().message);
    if (auto st = load_identity(a, ctx, s); !st) return context_error(a, ctx, st.error().message);
    context->has_identity = !s.cert_file.empty();
    context->ctx = ctx;
    return context.release();
}

bool is_address(const std::string &host) {
    in6_addr address{};
    return ::inet_pton(AF_INET, host.c_str(), &address) == 1 || ::inet_pton(AF_INET6, host.c_str(), &address) == 1;
}

// What a refusal by the server at the TLS level most likely means, for the message.
std::string hint_for(const std::string &reason) {
    if (reason.find("certificate required") != std::string::npos) {
        return " (the server asks for a client certificate: cert-file= and key-file=)";
    }
    if (reason.find("wrong version number") != std::string::npos || reason.find("packet length") != std::string::npos) {
        return " (does the server speak TLS on that port?)";
    }
    return "";
}

}  // namespace

const std::vector<LibraryPair> &default_libraries() {
    static const std::vector<LibraryPair> pairs = {{"libssl.so.3", "libcrypto.so.3"},
                                                   {"libssl.so.1.1", "libcrypto.so.1.1"}};
    return pairs;
}

std::string open_error(const std::vector<LibraryPair> &pairs) { return open_first(pairs).error; }

Result<Context *> context_for(const std::string &key, const TlsSettings &settings) {
    Contexts &contexts = fork_guard::lazy(contexts_slot, [] { return new Contexts; });
    std::lock_guard<std::mutex> lock(contexts.mutex);
    if (auto it = contexts.made.find(key); it != contexts.made.end()) return it->second;
    const Library &library =
        fork_guard::lazy(library_slot, [] { return new Library(open_first(default_libraries())); });
    if (!library.error.empty()) return Error{Errc::io, library.error};
    KJIT_TRY_ASSIGN(auto made, make_context(library.api, settings));
    contexts.made.emplace(key, made);
    return made;
}

namespace {

enum class Step { handshake, read, write };

}  // namespace

struct Session::State {
    Context *context = nullptr;
    ssl_st *ssl = nullptr;
    std::string host;
    bool established = false;  // the handshake is done
    bool healthy = true;       // no fatal error: a goodbye may be said
    bool received = false;     // the server has sent data since the handshake

    // What a step that moved nothing means (SSL_get_error of its `rc`).
    Io outcome(int rc, Step step);
};

Session::Session(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<Session>> Session::start(Context &context, int fd, const std::string &host) {
    const Api &a = *context.api;
    a.ERR_clear_error();
    auto state = std::make_unique<State>();
    state->context = &context;
    state->host = host;
    state->ssl = a.SSL_new(context.ctx);
    if (!state->ssl) return Error{Errc::io, "TLS: cannot make a session: " + queue_text(a)};
    std::unique_ptr<Session> session(new Session(std::move(state)));
    ssl_st *ssl = session->state_->ssl;
    const bool address = is_address(host);
    bool ok = a.SSL_set_fd(ssl, fd) == 1 && a.SSL_set_ex_data(ssl, kAppData, &context) == 1;
    // SNI names a host, never an address (RFC 6066, 3).
    if (ok && !address) {
        ok = a.SSL_ctrl(ssl, kCtrlSetTlsextHostname, kNameTypeHostName, const_cast<char *>(host.c_str())) == 1;
    }
    if (ok && context.verify) {
        ok = address ? a.X509_VERIFY_PARAM_set1_ip_asc(a.SSL_get0_param(ssl), host.c_str()) == 1
                     : a.SSL_set1_host(ssl, host.c_str()) == 1;
    }
    if (ok) {
        std::lock_guard<std::mutex> lock(context.session_mutex);
        if (context.session) ok = a.SSL_set_session(ssl, context.session) == 1;
    }
    if (!ok) return Error{Errc::io, "TLS: cannot set up a session for '" + host + "': " + queue_text(a)};
    return session;
}

Session::~Session() {
    if (!state_ || !state_->ssl) return;
    const Api &a = *state_->context->api;
    QuietPipe quiet;
    a.ERR_clear_error();
    // close_notify, if the socket takes it now: the session then stays resumable (OpenSSL marks
    // a session that ended without one as not to be resumed).
    if (state_->established && state_->healthy) (void)a.SSL_shutdown(state_->ssl);
    a.SSL_free(state_->ssl);
    a.ERR_clear_error();
}

void Session::abandon() {
    if (state_) state_->ssl = nullptr;
}

Io Session::State::outcome(int rc, Step step) {
    const Api &a = *context->api;
    const int saved = errno;
    const int e = a.SSL_get_error(ssl, rc);
    Io io;
    if (e == kErrorWantRead || e == kErrorWantWrite) {
        io.kind = e == kErrorWantRead ? Io::Kind::want_read : Io::Kind::want_write;
        return io;
    }
    healthy = false;
    std::string reason = queue_text(a);
    io.kind = Io::Kind::failed;
    // TLS 1.3: a server that wants a client certificate says so after the handshake, in an alert
    // that a reset may overtake (the server closes with the request unread): said either way.
    const std::string unasked = step != Step::handshake && !received && !context->has_identity
                                    ? " (right after the handshake: does the server ask for a client certificate? "
                                      "cert-file= and key-file=)"
                                    : "";
    if (e == kErrorZeroReturn || (reason.empty() && e == kErrorSyscall && saved == 0) ||
        reason.find("unexpected eof") != std::string::npos) {
        io.kind = step == Step::handshake ? Io::Kind::failed : Io::Kind::closed;
        io.error = "the server closed the connection" +
                   std::string(step == Step::handshake ? " during the TLS handshake" : unasked);
        return io;
    }
    const long verified = a.SSL_get_verify_result(ssl);
    if (step == Step::handshake && context->verify && verified != kVerifyOk) {
        io.error =
            "TLS: the server's certificate is refused: " + std::string(a.X509_verify_cert_error_string(verified)) +
            " (checked against " + context->checked_against + ", for " + host + ")";
        io.lasting = true;
        return io;
    }
    if (e == kErrorSyscall) {
        io.error = "TLS: " + (reason.empty() ? errno_text(saved) : reason) + unasked;
        return io;
    }
    io.error = "TLS: " + (reason.empty() ? "error " + std::to_string(e) : reason) + hint_for(reason);
    io.lasting = e == kErrorSsl;
    return io;
}

Io Session::handshake() {
    const Api &a = *state_->context->api;
    QuietPipe quiet;
    a.ERR_clear_error();
    const int rc = a.SSL_connect(state_->ssl);
    if (rc == 1) {
        state_->established = true;
        return Io{};
    }
    return state_->outcome(rc, Step::handshake);
}

Io Session::read(char *buffer, std::size_t size) {
    const Api &a = *state_->context->api;
    QuietPipe quiet;
    a.ERR_clear_error();
    const int rc = a.SSL_read(state_->ssl, buffer, static_cast<int>(std::min<std::size_t>(size, INT_MAX)));
    if (rc > 0) {
        state_->received = true;
        Io io;
        io.bytes = static_cast<std::size_t>(rc);
        return io;
    }
    return state_->outcome(rc, Step::read);
}

Io Session::write(const char *data, std::size_t size) {
    const Api &a = *state_->context->api;
    QuietPipe quiet;
    a.ERR_clear_error();
    const int rc = a.SSL_write(state_->ssl, data, static_cast<int>(std::min<std::size_t>(size, INT_MAX)));
    if (rc > 0) {
        Io io;
        io.bytes = static_cast<std::size_t>(rc);
        return io;
    }
    return state_->outcome(rc, Step::write);
}

bool Session::pending() const { return state_->context->api->SSL_pending(state_->ssl) > 0; }

bool Session::resumed() const { return state_->context->api->SSL_session_reused(state_->ssl) == 1; }

}  // namespace kjit::storage::remote::tls
