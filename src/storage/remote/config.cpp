#include "storage/remote/config.hpp"

#include "util/size_units.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <tuple>

namespace kjit::storage::remote {

namespace {

constexpr std::string_view kTcpScheme = "redis://";
constexpr std::string_view kTlsScheme = "rediss://";
constexpr std::string_view kUnixScheme = "redis+unix:";

// The length of the TCP scheme that `token` starts with ("redis://", "rediss://"); 0: none.
std::size_t tcp_scheme_length(std::string_view token) {
    if (token.substr(0, kTcpScheme.size()) == kTcpScheme) return kTcpScheme.size();
    if (token.substr(0, kTlsScheme.size()) == kTlsScheme) return kTlsScheme.size();
    return 0;
}

Error invalid(std::string_view origin, const std::string &what) {
    return Error{Errc::invalid_argument, std::string(origin) + ": " + what};
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A server token as it may appear in a message: "user:***@" in place of its credentials (and
// "***@" before the '@' of any other piece: the tail of a password cut at a blank or '|').
std::string hide_password(std::string_view token) {
    const std::size_t scheme = tcp_scheme_length(token);
    if (scheme == 0) {
        const auto at = token.rfind('@');
        return at == std::string_view::npos ? std::string(token) : "***" + std::string(token.substr(at));
    }
    std::string_view rest = token.substr(scheme);
    const auto at = rest.rfind('@');
    if (at == std::string_view::npos) return std::string(token);
    std::string_view userinfo = rest.substr(0, at);
    const auto colon = userinfo.find(':');
    std::string shown(token.substr(0, scheme));
    if (colon != std::string_view::npos) shown += std::string(userinfo.substr(0, colon)) + ":";
    return shown + "***" + std::string(rest.substr(at));
}

// %XX decoding of a URL's user or password; false on a bad escape.
bool percent_decode(std::string_view in, std::string &out) {
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '%') {
            out += in[i];
            continue;
        }
        if (i + 2 >= in.size()) return false;
        int value = 0;
        const char *first = in.data() + i + 1;
        auto [end, ec] = std::from_chars(first, first + 2, value, 16);
        if (ec != std::errc() || end != first + 2) return false;
        out += static_cast<char>(value);
        i += 2;
    }
    return true;
}

bool parse_bool(std::string_view value, bool &out) {
    if (value == "true" || value == "1" || value == "yes") {
        out = true;
    } else if (value == "false" || value == "0" || value == "no") {
        out = false;
    } else {
        return false;
    }
    return true;
}

bool parse_int(std::string_view text, int low, int high, int &out) {
    if (text.empty()) return false;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out >= low && out <= high;
}

// Where a TCP server is: "host:6379/0" ("[::1]:6379/0").
std::string tcp_place(const Server &s) {
    const std::string host_shown = s.host.find(':') != std::string::npos ? "[" + s.host + "]" : s.host;
    return host_shown + ":" + std::to_string(s.port) + "/" + std::to_string(s.db);
}

// "redis://", "rediss://", or another backend's scheme ("memory://" in a test).
std::string url_scheme(const Server &s) {
    if (s.scheme.empty() || s.scheme == "redis" || s.scheme == "rediss") {
        return std::string(s.tls ? kTlsScheme : kTcpScheme);
    }
    return s.scheme + "://";
}

}  // namespace

void name_server(Server &s) {
    if (s.kind == Server::Kind::unix_socket) {
        s.id = std::string(kUnixScheme) + s.path + "?db=" + std::to_string(s.db);
        return;
    }
    s.id = url_scheme(s) + (s.user.empty() ? "" : s.user + "@") + tcp_place(s);
}

namespace {

Result<Server> parse_tcp(std::string_view token, std::string_view origin) {
    const std::string shown = hide_password(token);
    auto bad = [&](const std::string &what) {
        return invalid(origin,
                       "server '" + shown + "': " + what + " (expected redis[s]://[[USER:]PASSWORD@]HOST[:PORT][/DB])");
    };
    Server s;
    const std::size_t scheme = tcp_scheme_length(token);
    s.tls = scheme == kTlsScheme.size();
    s.scheme = s.tls ? "rediss" : "redis";
    std::string_view rest = token.substr(scheme);
    if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
        std::string_view userinfo = rest.substr(0, at);
        rest = rest.substr(at + 1);
        const auto colon = userinfo.find(':');
        std::string_view user = colon == std::string_view::npos ? std::string_view() : userinfo.substr(0, colon);
        std::string_view password = colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1);
        if (!percent_decode(user, s.user) || !percent_decode(password, s.password)) {
            return bad("a bad %-escape in its user or password");
        }
        if (s.password.empty()) return bad("an empty password before '@'");
    }
    std::string_view hostport = rest;
    if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
        hostport = rest.substr(0, slash);
        std::string_view db = rest.substr(slash + 1);
        if (!db.empty() && !parse_int(db, 0, 1 << 20, s.db))
            return bad("database '" + std::string(db) + "' is not a number");
    }
    std::string_view port;
    if (!hostport.empty() && hostport.front() == '[') {
        const auto close = hostport.find(']');
        if (close == std::string_view::npos) return bad("an IPv6 address without its ']'");
        s.host = std::string(hostport.substr(1, close - 1));
        std::string_view after = hostport.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') return bad("text after the IPv6 address");
            port = after.substr(1);
        }
    } else {
        const auto colon = hostport.rfind(':');
        s.host = std::string(hostport.substr(0, colon));
        if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
    }
    if (s.host.empty()) return bad("no host");
    if (!port.empty() && !parse_int(port, 1, 65535, s.port))
        return bad("port '" + std::string(port) + "' is not 1 to 65535");
    name_server(s);
    return s;
}

Result<Server> parse_unix(std::string_view token, std::string_view origin) {
    Server s;
    s.scheme = "redis+unix";
    s.kind = Server::Kind::unix_socket;
    std::string_view rest = token.substr(kUnixScheme.size());
    if (rest.substr(0, 2) == "//") rest = rest.substr(2);  // redis+unix:///run/redis.sock
    if (const auto q = rest.find('?'); q != std::string_view::npos) {
        std::string_view query = rest.substr(q + 1);
        rest = rest.substr(0, q);
        if (query.substr(0, 3) != "db=" || !parse_int(query.substr(3), 0, 1 << 20, s.db)) {
            return invalid(origin, "server '" + std::string(token) + "': expected redis+unix:PATH[?db=N]");
        }
    }
    if (rest.empty() || rest.front() != '/') {
        return invalid(origin, "server '" + std::string(token) +
                                   "': the socket path must be absolute (redis+unix:/run/redis.sock)");
    }
    s.path = std::string(rest);
    name_server(s);
    return s;
}

// The password in `path`: its first line. The file must be a regular file of the caller's (or
// root's), not readable by others: a password in a world-readable file is no secret.
Result<std::string> read_password_file(const std::string &path, std::string_view origin) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        return Error{Errc::io, std::string(origin) + ": password-file '" + path + "': " + errno_text(errno)};
    }
    struct stat st {};
    std::string text;
    std::string problem;
    if (::fstat(fd, &st) != 0) {
        problem = errno_text(errno);
    } else if (!S_ISREG(st.st_mode)) {
        problem = "not a regular file";
    } else if ((st.st_mode & S_IROTH) != 0) {
        problem = "readable by every user: a password there is no secret; run chmod o-r on it";
    } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
        problem = "owned by another user";
    } else if (st.st_size > 4096) {
        problem = "larger than 4 KiB: not a password file";
    } else {
        char buf[4096];
        ssize_t n;
        while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
        if (n < 0) problem = errno_text(errno);
    }
    ::close(fd);
    if (!problem.empty()) return Error{Errc::io, std::string(origin) + ": password-file '" + path + "': " + problem};
    text = text.substr(0, text.find('\n'));
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) return Error{Errc::io, std::string(origin) + ": password-file '" + path + "' is empty"};
    return text;
}

Status apply_option(Config &c, std::string_view name, std::string_view value, std::string_view origin,
                    std::string &password_file) {
    auto bad_value = [&](const std::string &what) {
        return Status(invalid(origin, "option " + std::string(name) + "='" + std::string(value) + "': " + what));
    };
    auto duration = [&](std::chrono::milliseconds &out, std::chrono::milliseconds low) -> Status {
        auto d = parse_duration(value);
        if (!d) return bad_value(d.error().message);
        if (*d < low) return bad_value("at least " + std::to_string(low.count()) + "ms");
        out = *d;
        return Ok{};
    };
    if (name == "namespace") {
        const bool ok = !value.empty() && value.size() <= 64 && std::all_of(value.begin(), value.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
        });
        if (!ok) return bad_value("1 to 64 of A-Z a-z 0-9 _ - .");
        c.name_space = std::string(value);
        return Ok{};
    }
    if (name == "connect-timeout") return duration(c.connect_timeout, std::chrono::milliseconds(1));
    if (name == "operation-timeout") return duration(c.operation_timeout, std::chrono::milliseconds(1));
    if (name == "lease") return duration(c.lease, std::chrono::milliseconds(300));
    if (name == "wait-timeout") return duration(c.wait_timeout, std::chrono::milliseconds(0));
    if (name == "breaker") return duration(c.breaker, std::chrono::milliseconds(1));
    if (name == "read-only") return parse_bool(value, c.read_only) ? Status(Ok{}) : bad_value("true or false");
    if (name == "max-entry-size") {
        auto size = size_units::parse_size(value);
        if (!size) return bad_value(size.error().message);
        if (*size < 1024 || *size > (512ull << 20)) return bad_value("from 1K to 512M (Redis's largest value)");
        c.max_entry_bytes = *size;
        return Ok{};
    }
    if (name == "password-file") {
        if (value.empty() || value.front() != '/') return bad_value("an absolute path");
        password_file = std::string(value);
        return Ok{};
    }
    return Status(invalid(origin, "unknown option '" + std::string(name) +
                                      "' (known: namespace, connect-timeout, operation-timeout, lease, wait-timeout, "
                                      "read-only, max-entry-size, password-file, breaker, ca-file, ca-dir, cert-file, "
                                      "key-file, insecure-skip-verify)"));
}

bool is_tls_option(std::string_view name) {
    return name == "ca-file" || name == "ca-dir" || name == "cert-file" || name == "key-file" ||
           name == "insecure-skip-verify";
}

// A TLS option (is_tls_option) into `t`; its files are checked later (check_tls).
Status apply_tls_option(TlsSettings &t, std::string_view name, std::string_view value, std::string_view origin) {
    auto bad_value = [&](const std::string &what) {
        return Status(invalid(origin, "option " + std::string(name) + "='" + std::string(value) + "': " + what));
    };
    if (name == "insecure-skip-verify") {
        return parse_bool(value, t.insecure_skip_verify) ? Status(Ok{}) : bad_value("true or false");
    }
    if (value.empty() || value.front() != '/') return bad_value("an absolute path");
    std::string &slot = name == "ca-file"     ? t.ca_file
                        : name == "ca-dir"    ? t.ca_dir
                        : name == "cert-file" ? t.cert_file
                                              : t.key_file;
    slot = std::string(value);
    return Ok{};
}

// Whether the file of TLS option `name` can be read now (`folder`: a folder), naming it if not.
Status check_readable(std::string_view origin, const char *name, const std::string &path, bool folder) {
    if (path.empty()) return Ok{};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (folder ? O_DIRECTORY : 0));
    std::string problem;
    struct stat st {};
    if (fd < 0) {
        problem = errno_text(errno);
    } else if (::fstat(fd, &st) != 0) {
        problem = errno_text(errno);
    } else if (!folder && !S_ISREG(st.st_mode)) {
        problem = "not a regular file";
    }
    if (fd >= 0) ::close(fd);
    if (problem.empty()) return Ok{};
    return Error{Errc::io, std::string(origin) + ": " + name + " '" + path + "': " + problem};
}

// The TLS options of `c` against its servers and files. `first_tls_option`: the first given.
Status check_tls(const Config &c, const std::string &first_tls_option, std::string_view origin) {
    if (first_tls_option.empty()) return Ok{};
    if (std::none_of(c.servers.begin(), c.servers.end(), [](const Server &s) { return s.tls; })) {
        return invalid(origin,
                       "option " + first_tls_option +
                           "= applies to rediss:// servers (TLS), and none is named (rediss://HOST[:PORT][/DB])");
    }
    const TlsSettings &t = c.tls;
    if (t.cert_file.empty() != t.key_file.empty()) {
        return invalid(origin, std::string(t.cert_file.empty() ? "key-file= without cert-file="
                                                               : "cert-file= without key-file=") +
                                   ": a client certificate and its key go together (for a server that asks for one)");
    }
    for (const auto &[name, path, folder] :
         {std::tuple<const char *, const std::string &, bool>{"ca-file", t.ca_file, false},
          {"ca-dir", t.ca_dir, true},
          {"cert-file", t.cert_file, false},
          {"key-file", t.key_file, false}}) {
        KJIT_TRY(check_readable(origin, name, path, folder));
    }
    return Ok{};
}

std::string format_ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

// One piece of a setting: the text between blanks and '|'s.
struct Piece {
    std::string_view text;
    bool after_bar = false;  // an attribute of the token before it ("URL|name=value")
    // Part of a server URL whose user or password holds a blank or '|' and so was cut into
    // pieces: any of them may be a piece of the password, and no message shows it.
    bool cut_userinfo = false;
};

bool starts_server(std::string_view piece) {
    return tcp_scheme_length(piece) != 0 || piece.substr(0, kUnixScheme.size()) == kUnixScheme;
}

// The pieces of `spec`, each marked as above. A redis:// URL's userinfo ends at its last '@':
// the last piece holding one before the next server (a password-file= path aside) closes it.
// `*has_userinfo`: some URL has a user or password.
std::vector<Piece> split_pieces(std::string_view spec, bool *has_userinfo) {
    std::vector<Piece> pieces;
    for (std::size_t i = 0; i < spec.size();) {
        while (i < spec.size() && is_blank(spec[i])) ++i;
        bool after_bar = false;
        while (i < spec.size() && !is_blank(spec[i])) {
            std::size_t j = i;
            while (j < spec.size() && !is_blank(spec[j]) && spec[j] != '|') ++j;
            pieces.push_back(Piece{spec.substr(i, j - i), after_bar});
            after_bar = j < spec.size() && spec[j] == '|';
            i = after_bar ? j + 1 : j;
        }
        if (after_bar) pieces.push_back(Piece{spec.substr(i, 0), true});  // "URL|" ends in an empty attribute
    }
    *has_userinfo = false;
    for (std::size_t first = 0; first < pieces.size(); ++first) {
        if (tcp_scheme_length(pieces[first].text) == 0) continue;
        std::size_t last_at = pieces.size();
        for (std::size_t k = first; k < pieces.size() && (k == first || !starts_server(pieces[k].text)); ++k) {
            if (pieces[k].text.find('@') != std::string_view::npos &&
                pieces[k].text.substr(0, 14) != "password-file=") {
                last_at = k;
            }
        }
        if (last_at == pieces.size()) continue;
        *has_userinfo = true;
        if (last_at == first) continue;  // whole: hide_password masks it
        for (std::size_t k = first; k <= last_at; ++k) pieces[k].cut_userinfo = true;
    }
    return pieces;
}

// The error for a piece that may hold part of a password (Piece::cut_userinfo): what went wrong
// with it is not said, since saying it could show that part.
Error cut_password_error(std::string_view origin, const Piece &piece) {
    const auto at = piece.text.rfind('@');
    const std::string shown = std::string(piece.text.substr(0, tcp_scheme_length(piece.text))) + "***" +
                              (at == std::string_view::npos ? std::string() : std::string(piece.text.substr(at)));
    return invalid(origin, "'" + shown +
                               "' is not understood, and a server's user or password seems to hold a blank or '|', "
                               "which separate settings (not shown here, as it may be part of a password); write it "
                               "percent-encoded (%20 for a blank, %7C for '|', %25 for '%') or give the password in "
                               "a file named by password-file=");
}

}  // namespace

bool names_a_password(std::string_view spec) {
    bool has_userinfo = false;
    (void)split_pieces(spec, &has_userinfo);
    return has_userinfo;
}

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + digits, n);
    const std::string_view unit = text.substr(digits);
    std::uint64_t scale = 0;
    if (unit.empty() || unit == "ms") scale = 1;
    else if (unit == "s") scale = 1000;
    else if (unit == "m") scale = 60'000;
    else if (unit == "h") scale = 3'600'000;
    if (digits == 0 || ec != std::errc() || end != text.data() + digits || scale == 0 ||
        n > (std::uint64_t{1} << 40) / scale) {
        return Error{Errc::invalid_argument,
                     "'" + std::string(text) +
                         "' is not a duration (a whole number and ms, s, m or h, e.g. 100ms, 10s)"};
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(n * scale));
}

Result<std::optional<Config>> parse(std::string_view spec, std::string_view origin) {
    bool has_userinfo = false;
    const std::vector<Piece> pieces = split_pieces(spec, &has_userinfo);
    if (pieces.empty() || (pieces.size() == 1 && pieces[0].text == "none")) return std::optional<Config>();
    Config c;
    std::string password_file;
    std::string first_tls_option;
    for (const Piece &piece : pieces) {
        const std::string_view part = piece.text;
        // A server starts a blank-separated token; ccache's attributes follow it: "URL|name=value".
        if (!piece.after_bar && starts_server(part)) {
            auto server = tcp_scheme_length(part) != 0 ? parse_tcp(part, origin) : parse_unix(part, origin);
            if (!server) return piece.cut_userinfo ? cut_password_error(origin, piece) : std::move(server).error();
            for (const Server &s : c.servers) {
                if (s.id == server->id) return invalid(origin, "server '" + display(*server) + "' is named twice");
            }
            c.servers.push_back(std::move(*server));
            continue;
        }
        const auto eq = part.find('=');
        if (eq == std::string_view::npos) {
            if (piece.cut_userinfo) return cut_password_error(origin, piece);
            if (part == "none") return invalid(origin, "'none' turns the remote tier off and stands alone");
            return invalid(origin, "'" + hide_password(part) +
                                       "' is neither a server (redis://HOST[:PORT][/DB], redis+unix:PATH) nor an "
                                       "option (name=value)");
        }
        const std::string_view name = part.substr(0, eq);
        if (is_tls_option(name) && first_tls_option.empty()) first_tls_option = std::string(name);
        auto st = is_tls_option(name) ? apply_tls_option(c.tls, name, part.substr(eq + 1), origin)
                                      : apply_option(c, name, part.substr(eq + 1), origin, password_file);
        if (!st) return piece.cut_userinfo ? cut_password_error(origin, piece) : std::move(st).error();
    }
    if (c.servers.empty())
        return invalid(origin, "no server (e.g. redis://cache-host:6379; 'none' turns the tier off)");
    KJIT_TRY(check_tls(c, first_tls_option, origin));
    if (!password_file.empty()) {
        auto password = read_password_file(password_file, origin);
        if (!password) return std::move(password).error();
        for (Server &s : c.servers) {
            if (!s.password.empty()) continue;  // a URL's own password wins
            s.password = *password;
            name_server(s);
        }
    }
    for (const Server &s : c.servers) c.canonical += display(s) + " ";
    c.canonical += "namespace=" + c.name_space + " connect-timeout=" + format_ms(c.connect_timeout) +
                   " operation-timeout=" + format_ms(c.operation_timeout) + " lease=" + format_ms(c.lease) +
                   " wait-timeout=" + format_ms(c.wait_timeout) + " breaker=" + format_ms(c.breaker) +
                   " read-only=" + (c.read_only ? "true" : "false") +
                   " max-entry-size=" + std::to_string(c.max_entry_bytes) +
                   (password_file.empty() ? "" : " password-file=" + password_file);
    if (const std::string tls = c.tls.canonical(); !tls.empty()) c.canonical += " " + tls;
    return std::optional<Config>(std::move(c));
}

std::string display(const Server &s) {
    if (s.kind == Server::Kind::unix_socket) return s.id;
    const std::string credentials = s.password.empty() ? "" : (s.user.empty() ? "" : s.user + ":") + "***@";
    return url_scheme(s) + credentials + tcp_place(s);
}

}  // namespace kjit::storage::remote
