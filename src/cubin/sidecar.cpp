#include "cubin/sidecar.hpp"

#include "cubin/name_matcher.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace kjit::cubin::sidecar {

namespace {

constexpr std::string_view kHeader = "kjit-sidecar 1\n";
constexpr std::string_view kHeaderPrefix = "kjit-sidecar ";
constexpr std::string_view kTempMarker = ".tmp-";

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_keyword_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == ':';
}
bool is_name_char(char c) { return c > ' ' && c < 0x7f; }

// A template, not a function pointer, so each predicate inlines into its loop.
template <typename Pred>
bool all_of(std::string_view s, Pred pred) {
    for (char c : s) {
        if (!pred(c)) return false;
    }
    return true;
}

bool parse_u64(std::string_view s, std::uint64_t &out) {
    if (s.empty() || s.size() > 20) return false;
    if (s.size() > 1 && s[0] == '0') return false;  // one spelling per value
    std::uint64_t v = 0;
    for (char c : s) {
        if (!is_digit(c)) return false;
        if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<unsigned>(c - '0'), &v)) {
            return false;
        }
    }
    out = v;
    return true;
}

bool parse_hex64(std::string_view s, std::uint64_t &out) {
    if (s.size() != 16) return false;
    std::uint64_t v = 0;
    for (char c : s) {
        unsigned d;
        if (is_digit(c)) {
            d = static_cast<unsigned>(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            d = static_cast<unsigned>(c - 'a' + 10);
        } else {
            return false;
        }
        v = v << 4 | d;
    }
    out = v;
    return true;
}

bool parse_mtime(std::string_view s, std::int64_t &sec, std::uint32_t &nsec) {
    const bool negative = !s.empty() && s[0] == '-';
    if (negative) s.remove_prefix(1);
    const std::size_t dot = s.find('.');
    if (dot == std::string_view::npos || s.size() - dot - 1 != 9) return false;
    std::uint64_t whole = 0, frac = 0;
    const std::string_view frac_text = s.substr(dot + 1);
    if (!parse_u64(s.substr(0, dot), whole) || !all_of(frac_text, is_digit)) return false;
    for (char c : frac_text) frac = frac * 10 + static_cast<std::uint64_t>(c - '0');
    if (whole > static_cast<std::uint64_t>(INT64_MAX)) return false;
    sec = negative ? -static_cast<std::int64_t>(whole) : static_cast<std::int64_t>(whole);
    nsec = static_cast<std::uint32_t>(frac);
    return true;
}

// Splits `line` (no '\n') at single spaces into exactly `n` non-empty fields.
bool split_fields(std::string_view line, std::string_view *fields, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t sp = line.find(' ');
        const bool last = i + 1 == n;
        if (last != (sp == std::string_view::npos)) return false;
        fields[i] = last ? line : line.substr(0, sp);
        if (fields[i].empty()) return false;
        if (!last) line.remove_prefix(sp + 1);
    }
    return true;
}

std::optional<LineView> parse_line(std::string_view line) {
    std::string_view f[6];
    if (!split_fields(line, f, 6)) return std::nullopt;
    std::uint64_t check = 0;
    if (!parse_hex64(f[5], check)) return std::nullopt;
    const std::string_view body = line.substr(0, line.size() - f[5].size() - 1);
    if (hash64(body) != check) return std::nullopt;

    LineView out;
    if (!all_of(f[0], is_keyword_char) || !parse_u64(f[1], out.cubin_size) ||
        !parse_mtime(f[2], out.mtime_sec, out.mtime_nsec) || !cubin::name_matcher::is_plain_name(f[4])) {
        return std::nullopt;
    }
    if (f[3] != "-") {
        std::uint64_t h = 0;
        if (!parse_hex64(f[3], h)) return std::nullopt;
        out.content_hash = h;
    }
    out.keyword = f[0];
    out.name = f[4];
    return out;
}

bool looks_like_bare_name(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
        text.remove_suffix(1);
    }
    return !text.empty() && all_of(text, is_name_char);
}

}  // namespace

const char *to_string(FileProblem problem) {
    switch (problem) {
        case FileProblem::none: return "none";
        case FileProblem::missing: return "missing";
        case FileProblem::unreadable: return "unreadable";
        case FileProblem::too_large: return "too large";
        case FileProblem::empty: return "empty";
        case FileProblem::bare_name: return "bare name (untrusted legacy format)";
        case FileProblem::bad_header: return "not a kjit sidecar";
    }
    return "unknown";
}

std::string path_for(const std::string &cubin_path) {
    std::string path;
    path.reserve(cubin_path.size() + 5);  // one allocation on the hit path, not two
    path.append(cubin_path).append(".name");
    return path;
}

Line LineView::to_line() const {
    Line l;
    l.keyword.assign(keyword);
    l.cubin_size = cubin_size;
    l.mtime_sec = mtime_sec;
    l.mtime_nsec = mtime_nsec;
    l.content_hash = content_hash;
    l.name.assign(name);
    return l;
}

FileProblem classify(std::string_view text, std::string *detail) {
    if (text.empty()) return FileProblem::empty;
    if (text.compare(0, kHeader.size(), kHeader) == 0) return FileProblem::none;
    if (text.compare(0, kHeaderPrefix.size(), kHeaderPrefix) == 0) {
        if (detail) *detail = "unsupported format version";
        return FileProblem::bad_header;
    }
    if (looks_like_bare_name(text)) return FileProblem::bare_name;
    if (detail) *detail = "no 'kjit-sidecar 1' header";
    return FileProblem::bad_header;
}

std::optional<LineView> find_line(std::string_view text, std::string_view keyword) {
    std::optional<LineView> found;
    if (text.compare(0, kHeader.size(), kHeader) != 0) return found;
    text.remove_prefix(kHeader.size());
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        if (nl == std::string_view::npos) break;  // torn: a line without its end
        const std::string_view line = text.substr(0, nl);
        if (line.size() > keyword.size() && line[keyword.size()] == ' ' &&
            line.compare(0, keyword.size(), keyword) == 0) {
            if (auto parsed = parse_line(line)) found = parsed;
        }
        text.remove_prefix(nl + 1);
    }
    return found;
}

Contents parse(std::string_view text) {
    Contents c;
    c.problem = classify(text, &c.detail);
    if (c.problem != FileProblem::none) return c;
    text.remove_prefix(kHeader.size());
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        if (nl == std::string_view::npos) {  // torn: a line without its end
            ++c.rejected_lines;
            break;
        }
        if (auto line = parse_line(text.substr(0, nl))) {
            c.lines.push_back(line->to_line());
        } else {
            ++c.rejected_lines;
        }
        text.remove_prefix(nl + 1);
    }
    return c;
}

void read_into(const std::string &path, FileBuffer &out) {
    out.problem = FileProblem::none;
    out.size_ = 0;
    out.data_ = out.small_;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) {
        const int err = errno;
        out.problem = err == ENOENT ? FileProblem::missing : FileProblem::unreadable;
        out.detail = errno_text(err);
        return;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        out.problem = FileProblem::unreadable;
        out.detail = errno_text(errno);
        return;
    }
    out.owner_uid = st.st_uid;
    out.owner_gid = st.st_gid;
    out.identity = FileIdentity::from_stat(st);
    out.regular = S_ISREG(st.st_mode);
    // Read at most kMaxFileSize + 1 bytes: enough to know a file is too large, never more.
    char *buf = out.small_;
    std::size_t cap = sizeof out.small_, len = 0;
    for (;;) {
        if (len == cap) {
            if (cap > kMaxFileSize) break;
            out.big_.resize(kMaxFileSize + 1);
            std::memcpy(out.big_.data(), out.small_, len);
            buf = out.big_.data();
            cap = out.big_.size();
        }
        const ssize_t n = ::read(fd.get(), buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            out.problem = FileProblem::unreadable;
            out.detail = errno_text(err);
            return;
        }
        len += static_cast<std::size_t>(n);
        // A short read of a regular file is its end, which saves the read that returns 0. If
        // it was not (a file still being written in place, which sidecars never are), the
        // text is merely torn, and a torn line never validates.
        if (n == 0 || len < cap) break;
    }
    if (len > kMaxFileSize) {
        out.problem = FileProblem::too_large;
        out.detail = "over " + std::to_string(kMaxFileSize) + " bytes";
        return;
    }
    out.data_ = buf;
    out.size_ = len;
}

Contents read(const std::string &path) {
    FileBuffer buf;
    read_into(path, buf);
    if (buf.problem != FileProblem::none) {
        Contents c;
        c.problem = buf.problem;
        c.detail = std::move(buf.detail);
        return c;
    }
    return parse(buf.text());
}

// Whether the format can hold `line`: its keyword and name are single space-free tokens.
bool can_hold(const Line &line) {
    return cubin::name_matcher::is_plain_name(line.keyword) && cubin::name_matcher::is_plain_name(line.name);
}

std::string format(const std::vector<Line> &lines) {
    std::string out(kHeader);
    for (const Line &l : lines) {
        if (!can_hold(l)) continue;
        char fields[96];
        char hash[20] = "-";
        if (l.content_hash) std::snprintf(hash, sizeof hash, "%016" PRIx64, *l.content_hash);
        std::snprintf(fields, sizeof fields, " %" PRIu64 " %" PRId64 ".%09" PRIu32 " %s ", l.cubin_size, l.mtime_sec,
                      l.mtime_nsec, hash);
        std::string body = l.keyword + fields + l.name;
        char check[20];
        std::snprintf(check, sizeof check, " %016" PRIx64 "\n", hash64(body));
        out += body;
        out += check;
    }
    return out;
}

bool is_temp_file_name(std::string_view file_name) {
    const std::size_t pos = file_name.rfind(kTempMarker);
    if (pos == std::string_view::npos || pos < 5 || file_name.compare(pos - 5, 5, ".name") != 0) return false;
    std::string_view rest = file_name.substr(pos + kTempMarker.size());
    for (int field = 0; field < 3; ++field) {
        std::size_t n = 0;
        while (n < rest.size() && is_digit(rest[n])) ++n;
        if (n == 0) return false;
        rest.remove_prefix(n);
        if (field < 2) {
            if (rest.empty() || rest[0] != '-') return false;
            rest.remove_prefix(1);
        }
    }
    return rest.empty();
}

Status write(const std::string &path, const std::vector<Line> &lines) {
    for (const Line &l : lines) {
        if (!can_hold(l)) {
            return Error{Errc::invalid_argument, "refusing to write sidecar '" + path + "': the line for keyword '" +
                                                     l.keyword +
                                                     "' has a keyword or name that is empty or holds a space "
                                                     "or control character, which a sidecar cannot hold"};
        }
    }
    const std::string text = format(lines);
    // In a team folder the next member must be able to read the sidecar whatever our umask (and
    // replace it, which the folder's group write bit allows).
    const std::size_t dir_end = path.find_last_of('/');
    const std::string dir = dir_end == std::string::npos ? std::string(".") : path.substr(0, dir_end);
    unsigned flags = kUmaskMode;
    if (struct stat dir_st{}; ::stat(dir.c_str(), &dir_st) == 0 && folder_trust::is_team_folder(dir_st)) {
        flags |= kGroupWritable;
    }
    if (auto st = replace_file(path, path + std::string(kTempMarker), {}, text, flags); !st) {
        Error e = std::move(st).error();
        e.message = "cannot write sidecar: " + e.message;
        return e;
    }
    const std::size_t slash = path.find_last_of('/');
    sweep_stale_temp_files(slash == std::string::npos ? std::string(".") : path.substr(0, slash));
    return Ok{};
}

namespace {

// When this process last swept each folder. A forked child starts its own (fork_guard.hpp).
std::mutex sweep_mutex;
std::unordered_map<std::string, std::int64_t> last_sweep;

void renew_sweep_memo_in_forked_child() {
    fork_guard::renew(sweep_mutex);
    fork_guard::renew(last_sweep);
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::sidecar_sweep, renew_sweep_memo_in_forked_child);

}  // namespace

std::size_t sweep_stale_temp_files(const std::string &folder) {
    const std::int64_t now = realtime_ns();
    {
        std::lock_guard<std::mutex> lock(sweep_mutex);
        if (last_sweep.size() > 4096) last_sweep.clear();
        std::int64_t &last = last_sweep[folder];
        if (last != 0 && now - last < kTempSweepIntervalNs) return 0;
        last = now;
    }
    auto dir = FolderReader::open(folder);
    if (!dir) return 0;
    std::size_t removed = 0;
    for (auto d = dir->next(); d && *d; d = dir->next()) {
        const char *name = (*d)->d_name;
        if (!is_temp_file_name(name)) continue;
        struct stat st {};
        if (::fstatat(dir->fd(), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (mtime_ns(st) < now - kStaleTempNs && ::unlinkat(dir->fd(), name, 0) == 0) ++removed;
    }
    return removed;
}

}  // namespace kjit::cubin::sidecar
