#include "remote_config.hpp"

#include "size_units.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace kjit::remote {

namespace {

constexpr std::string_view kTcpScheme = "redis://";
constexpr std::string_view kUnixScheme = "redis+unix:";

Error invalid(std::string_view origin, const std::string &what) {
    return Error{Errc::invalid_argument, std::string(origin) + ": " + what};
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A server token as it may appear in a message: "user:***@" in place of its credentials.
std::string hide_password(std::string_view token) {
    if (token.substr(0, kTcpScheme.size()) != kTcpScheme) return std::string(token);
    std::string_view rest = token.substr(kTcpScheme.size());
    const auto at = rest.rfind('@');
    if (at == std::string_view::npos) return std::string(token);
    std::string_view userinfo = rest.substr(0, at);
    const auto colon = userinfo.find(':');
    std::string shown(kTcpScheme);
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

bool parse_int(std::string_view text, int low, int high, int &out) {
    if (text.empty()) return false;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out >= low && out <= high;
}

// Sets `s.id` (its URL without the password) and `s.display` (the password as "***") from its
// fields.
void name_server(Server &s) {
    if (s.kind == Server::Kind::unix_socket) {
        s.id = std::string(kUnixScheme) + s.path + "?db=" + std::to_string(s.db);
        s.display = s.id;
        return;
    }
    const std::string host_shown = s.host.find(':') != std::string::npos ? "[" + s.host + "]" : s.host;
    const std::string place = host_shown + ":" + std::to_string(s.port) + "/" + std::to_string(s.db);
    s.id = std::string(kTcpScheme) + (s.user.empty() ? "" : s.user + "@") + place;
    s.display = std::string(kTcpScheme) + (s.password.empty() ? "" : (s.user.empty() ? "" : s.user + ":") + "***@") + place;
}

Result<Server> parse_tcp(std::string_view token, std::string_view origin) {
    const std::string shown = hide_password(token);
    auto bad = [&](const std::string &what) {
        return invalid(origin, "server '" + shown + "': " + what +
                                   " (expected redis://[[USER:]PASSWORD@]HOST[:PORT][/DB])");
    };
    Server s;
    std::string_view rest = token.substr(kTcpScheme.size());
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
        if (!db.empty() && !parse_int(db, 0, 1 << 20, s.db)) return bad("database '" + std::string(db) + "' is not a number");
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
    if (!port.empty() && !parse_int(port, 1, 65535, s.port)) return bad("port '" + std::string(port) + "' is not 1 to 65535");
    name_server(s);
    return s;
}

Result<Server> parse_unix(std::string_view token, std::string_view origin) {
    Server s;
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
        return invalid(origin, "server '" + std::string(token) + "': the socket path must be absolute (redis+unix:/run/redis.sock)");
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
        const bool ok = !value.empty() && value.size() <= 64 &&
                        std::all_of(value.begin(), value.end(), [](char ch) {
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
    if (name == "read-only") {
        if (value == "true" || value == "1" || value == "yes") {
            c.read_only = true;
        } else if (value == "false" || value == "0" || value == "no") {
            c.read_only = false;
        } else {
            return bad_value("true or false");
        }
        return Ok{};
    }
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
                                      "read-only, max-entry-size, password-file, breaker)"));
}

std::string format_ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

}  // namespace

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
                     "'" + std::string(text) + "' is not a duration (a whole number and ms, s, m or h, e.g. 100ms, 10s)"};
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(n * scale));
}

Result<std::optional<Config>> parse(std::string_view spec, std::string_view origin) {
    std::vector<std::string_view> tokens;
    for (std::size_t i = 0; i < spec.size();) {
        while (i < spec.size() && is_blank(spec[i])) ++i;
        std::size_t j = i;
        while (j < spec.size() && !is_blank(spec[j])) ++j;
        if (j > i) tokens.push_back(spec.substr(i, j - i));
        i = j;
    }
    if (tokens.empty() || (tokens.size() == 1 && tokens[0] == "none")) return std::optional<Config>();
    Config c;
    std::string password_file;
    for (std::string_view token : tokens) {
        // ccache's attributes: "URL|name=value|name=value".
        std::vector<std::string_view> parts;
        for (std::size_t start = 0;;) {
            const auto bar = token.find('|', start);
            parts.push_back(token.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start));
            if (bar == std::string_view::npos) break;
            start = bar + 1;
        }
        std::size_t first_option = 0;
        if (parts[0].substr(0, kTcpScheme.size()) == kTcpScheme || parts[0].substr(0, kUnixScheme.size()) == kUnixScheme) {
            auto server = parts[0].front() == 'r' && parts[0].substr(0, kTcpScheme.size()) == kTcpScheme
                              ? parse_tcp(parts[0], origin)
                              : parse_unix(parts[0], origin);
            if (!server) return std::move(server).error();
            for (const Server &s : c.servers) {
                if (s.id == server->id) return invalid(origin, "server '" + server->display + "' is named twice");
            }
            c.servers.push_back(std::move(*server));
            first_option = 1;
        }
        for (std::size_t p = first_option; p < parts.size(); ++p) {
            const std::string_view part = parts[p];
            const auto eq = part.find('=');
            if (eq == std::string_view::npos) {
                if (part == "none") return invalid(origin, "'none' turns the remote tier off and stands alone");
                return invalid(origin, "'" + hide_password(part) +
                                           "' is neither a server (redis://HOST[:PORT][/DB], redis+unix:PATH) nor an "
                                           "option (name=value)");
            }
            if (auto st = apply_option(c, part.substr(0, eq), part.substr(eq + 1), origin, password_file); !st) {
                return std::move(st).error();
            }
        }
    }
    if (c.servers.empty()) return invalid(origin, "no server (e.g. redis://cache-host:6379; 'none' turns the tier off)");
    if (!password_file.empty()) {
        auto password = read_password_file(password_file, origin);
        if (!password) return std::move(password).error();
        for (Server &s : c.servers) {
            if (!s.password.empty()) continue;  // a URL's own password wins
            s.password = *password;
            name_server(s);
        }
    }
    for (const Server &s : c.servers) c.canonical += s.id + " ";
    c.canonical += "namespace=" + c.name_space + " connect-timeout=" + format_ms(c.connect_timeout) +
                   " operation-timeout=" + format_ms(c.operation_timeout) + " lease=" + format_ms(c.lease) +
                   " wait-timeout=" + format_ms(c.wait_timeout) + " breaker=" + format_ms(c.breaker) +
                   " read-only=" + (c.read_only ? "true" : "false") + " max-entry-size=" + std::to_string(c.max_entry_bytes) +
                   (password_file.empty() ? "" : " password-file=" + password_file);
    return std::optional<Config>(std::move(c));
}

}  // namespace kjit::remote
