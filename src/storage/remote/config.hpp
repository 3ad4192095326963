// Remote config: the cluster tier's settings (docs/remote.md), parsed from ccache's syntax as
// KJIT_REMOTE_STORAGE or kjit_compile_options::remote_storage gives them:
//
//   redis://[[USER:]PASSWORD@]HOST[:PORT][/DB]  rediss://... (TLS)  redis+unix:PATH[?db=N]
//                                                                   (one or more servers)
//   namespace=NAME connect-timeout=100ms operation-timeout=10s lease=10s wait-timeout=10m
//   read-only=true|false max-entry-size=64M password-file=PATH breaker=250ms
//   ca-file=PATH ca-dir=PATH cert-file=PATH key-file=PATH insecure-skip-verify=true|false
//
// Tokens are separated by blanks; an option may also follow a server after '|' (ccache's
// attribute syntax, "redis://cache-a|read-only=true"); every option applies to every server, the
// TLS options to every rediss:// server (and need one). "none" (or nothing) turns the tier off. A leaf: no dependency
// but the Error type and size_units, so that the `kjit` command can show settings as libkjit reads them.
//
// Passwords never leave this module in text: every message and display() shows a server
// with its password replaced by "***". A password that holds a blank or '|' is cut into pieces
// by the separators before any URL is parsed, and a piece of it may have no '@' to tell it
// apart: every piece that may be part of such a URL's userinfo is kept out of messages, which
// say to percent-encode it or to use password-file= instead.
#pragma once

#include "storage/remote/tls_settings.hpp"
#include "util/status.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::storage::remote {

struct Server {
    // Which backend speaks to it (backend.cpp's table): "redis", "rediss" or "redis+unix".
    std::string scheme;
    enum class Kind { tcp, unix_socket } kind = Kind::tcp;
    std::string host;  // tcp: a name or an address (IPv6 without its brackets)
    int port = 6379;
    std::string path;  // unix_socket: the socket's path
    int db = 0;
    std::string user;      // empty: the default user (AUTH with the password alone)
    std::string password;  // empty: no AUTH. Never logged (display() hides it)
    bool tls = false;      // tcp: rediss://, TLS with Config::tls
    // The server's identity for sharding (rendezvous hashing) and for the per-server state
    // shared by the process: its URL without the password (rediss:// and redis:// of one host
    // and port are two servers).
    std::string id;
};

struct Config {
    std::vector<Server> servers;         // at least one
    std::string name_space = "default";  // [A-Za-z0-9_.-], at most 64 characters
    std::chrono::milliseconds connect_timeout{100};
    std::chrono::milliseconds operation_timeout{10'000};
    // A lease's length: what a node that dies while it compiles costs the others at most. Short,
    // since it is renewed every third of it on one connection per server for the process.
    std::chrono::milliseconds lease{10'000};
    std::chrono::milliseconds wait_timeout{600'000};
    // How long a server stays unused after a failure (the circuit breaker) before one request
    // probes it; doubling with each failed probe, up to kMaxBreaker (or this, when longer).
    std::chrono::milliseconds breaker{250};
    bool read_only = false;
    std::uint64_t max_entry_bytes = 64ull << 20;
    // How the rediss:// servers are checked and how libkjit proves itself to them. Its files
    // exist and are readable when parse() returns (each is read again at the first connect).
    TlsSettings tls;
    // The settings as text, passwords hidden, in a canonical order: names a config in logs and
    // tells two configs apart (the process keeps one tier per distinct config).
    std::string canonical;
};

constexpr std::chrono::milliseconds kMaxBreaker{30'000};

// Parses `spec` (from `origin`, e.g. "KJIT_REMOTE_STORAGE", for messages). nullopt: the tier is
// off ("none", or only blanks). Errors: invalid_argument naming the origin, the token (password
// hidden) and what is accepted (a TLS option with no rediss:// server, cert-file= without
// key-file= or the reverse); io when password-file cannot be read (it must be a regular file
// that is not readable by others), or a file of a TLS option cannot (naming it).
Result<std::optional<Config>> parse(std::string_view spec, std::string_view origin);

// Whether `spec` names a server with a user or password in its URL (text before an '@' of a
// redis:// or rediss:// URL). The `kjit` command refuses such a setting on its command line, which every
// user can read (/proc/PID/cmdline).
bool names_a_password(std::string_view spec);

// The server as every log line and message names it, the one place that forms it: its URL with
// the password as "***" and the defaults written out ("redis://user:***@host:6379/0",
// "redis://***@host:6379/0", "redis://host:6379/0", "rediss://host:6380/0",
// "redis+unix:/run/r.sock?db=0"). Its id
// (user but no password) is for hashing and the process's state, never shown.
std::string display(const Server &server);

// Sets `server.id` (its URL without the password) from its fields: after parse, or for a server
// made from another (a Redis Cluster node, by host and port, with the seed's credentials).
void name_server(Server &server);

// "100ms", "10s", "10m", "1h", or a plain number of milliseconds. Errors: invalid_argument.
Result<std::chrono::milliseconds> parse_duration(std::string_view text);

}  // namespace kjit::storage::remote
