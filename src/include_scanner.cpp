#include "include_scanner.hpp"

#include "hashing.hpp"
#include "posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <set>

namespace kjit::include_scanner {

namespace {

constexpr std::string_view kHeader = "kjit-deps 1\n";
constexpr std::size_t kMaxFilesUnderIncludePaths = 100000;

struct Directive {
    std::string name;
    bool quoted = false;
    bool computed = false;  // #include MACRO
};

bool is_space(char c) { return c == ' ' || c == '\t'; }

// The #include directives of `text`, in order (conditionals ignored: a superset).
std::vector<Directive> directives(std::string_view text) {
    std::vector<Directive> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        std::size_t i = 0;
        while (i < line.size() && is_space(line[i])) ++i;
        if (i >= line.size() || line[i] != '#') continue;
        ++i;
        while (i < line.size() && is_space(line[i])) ++i;
        if (line.compare(i, 7, "include") != 0) continue;
        i += 7;
        if (line.compare(i, 5, "_next") == 0) i += 5;
        if (i < line.size() && !is_space(line[i]) && line[i] != '"' && line[i] != '<') continue;  // #includex
        while (i < line.size() && is_space(line[i])) ++i;
        if (i >= line.size()) continue;
        Directive d;
        const char open = line[i];
        const char close = open == '"' ? '"' : open == '<' ? '>' : '\0';
        if (close == '\0') {
            d.computed = true;
        } else {
            const std::size_t stop = line.find(close, i + 1);
            if (stop == std::string_view::npos) continue;  // malformed; NVRTC will say so
            d.name.assign(line.substr(i + 1, stop - i - 1));
            d.quoted = open == '"';
        }
        out.push_back(std::move(d));
    }
    return out;
}

// Stats, reads (when `content` is wanted) and hashes one header, from one open descriptor.
Result<Dependency> describe(const std::string &path, std::string *content) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
        return Error{Errc::io, "cannot read header '" + path + "': " + errno_text(errno)};
    }
    std::string local;
    std::string &text = content ? *content : local;
    text.clear();
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Error{Errc::io, "cannot read header '" + path + "': " + errno_text(errno)};
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    Dependency d;
    d.path = path;
    const FileIdentity id = FileIdentity::from_stat(st);
    d.size = id.size;
    d.mtime_sec = id.mtime_sec;
    d.mtime_nsec = id.mtime_nsec;
    d.content_hash = hash64(text);
    return d;
}

bool is_regular(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string folder_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

}  // namespace

Result<std::vector<Dependency>> scan(std::string_view source,
                                     const std::vector<std::pair<std::string, std::string>> &memory_headers,
                                     const std::vector<std::string> &include_paths) {
    std::vector<Dependency> deps;
    if (include_paths.empty()) return deps;
    const std::int64_t scan_started = realtime_ns();
    auto mark_young = [&](Dependency &d) { d.verify_content = young_at(d.mtime_sec, d.mtime_nsec, scan_started); };
    struct Pending {
        std::string text;
        std::string folder;  // "" for the source and in-memory headers
    };
    std::deque<Pending> work;
    work.push_back({std::string(source), ""});
    std::set<std::string> seen_files, seen_memory, seen_missing;
    bool computed = false;
    while (!work.empty()) {
        Pending item = std::move(work.front());
        work.pop_front();
        for (const Directive &d : directives(item.text)) {
            if (d.computed) {
                computed = true;
                continue;
            }
            bool in_memory = false;
            for (const auto &h : memory_headers) {
                if (h.first == d.name) {
                    in_memory = true;
                    if (seen_memory.insert(h.first).second) work.push_back({h.second, ""});
                    break;
                }
            }
            if (in_memory || d.name.empty() || d.name[0] == '/') continue;
            std::vector<std::string> candidates;
            if (d.quoted && !item.folder.empty()) candidates.push_back(item.folder + "/" + d.name);
            for (const std::string &dir : include_paths) candidates.push_back(dir + "/" + d.name);
            for (const std::string &candidate : candidates) {
                if (!is_regular(candidate)) {
                    if (seen_missing.insert(candidate).second) {
                        Dependency absent;
                        absent.path = candidate;
                        absent.exists = false;
                        deps.push_back(std::move(absent));
                    }
                    continue;
                }
                if (seen_files.insert(candidate).second) {
                    std::string content;
                    auto dep = describe(candidate, &content);
                    if (!dep) return std::move(dep).error();
                    mark_young(*dep);
                    deps.push_back(std::move(*dep));
                    work.push_back({std::move(content), folder_of(candidate)});
                }
                break;
            }
        }
    }
    if (computed) {
        // A computed include could name any file: record every file under the include paths.
        std::error_code ec;
        for (const std::string &dir : include_paths) {
            for (auto it = std::filesystem::recursive_directory_iterator(
                     dir, std::filesystem::directory_options::skip_permission_denied, ec);
                 !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
                if (!it->is_regular_file(ec)) continue;
                const std::string path = it->path().string();
                if (!seen_files.insert(path).second) continue;
                if (seen_files.size() > kMaxFilesUnderIncludePaths) {
                    return Error{Errc::io, "a computed #include makes every file under the include paths a "
                                           "dependency, and there are over " +
                                               std::to_string(kMaxFilesUnderIncludePaths)};
                }
                auto dep = describe(path, nullptr);
                if (!dep) return std::move(dep).error();
                mark_young(*dep);
                deps.push_back(std::move(*dep));
            }
        }
    }
    return deps;
}

bool still_current(const std::vector<Dependency> &deps) {
    for (const Dependency &d : deps) {
        struct stat st {};
        const bool present = ::stat(d.path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
        if (present != d.exists) return false;
        if (!present) continue;
        if (!d.verify_content && static_cast<std::uint64_t>(st.st_size) == d.size &&
            st.st_mtim.tv_sec == d.mtime_sec && static_cast<std::uint32_t>(st.st_mtim.tv_nsec) == d.mtime_nsec) {
            continue;
        }
        auto h = hash_file64(d.path, nullptr);
        if (!h || *h != d.content_hash) return false;
    }
    return true;
}

bool settle(std::vector<Dependency> &deps) {
    const std::int64_t now = realtime_ns();
    bool changed = false;
    for (Dependency &d : deps) {
        if (d.verify_content && !young_at(d.mtime_sec, d.mtime_nsec, now)) {
            d.verify_content = false;
            changed = true;
        }
    }
    return changed;
}

std::string format(const std::vector<Dependency> &deps) {
    std::string out(kHeader);
    for (const Dependency &d : deps) {
        char fields[128];
        if (d.exists) {
            // '*' marks a young header, whose content is checked on every lookup.
            std::snprintf(fields, sizeof fields, "%c %" PRIu64 " %" PRId64 ".%09" PRIu32 " %016" PRIx64 " %zu ",
                          d.verify_content ? '*' : '+', d.size, d.mtime_sec, d.mtime_nsec, d.content_hash,
                          d.path.size());
        } else {
            std::snprintf(fields, sizeof fields, "- %zu ", d.path.size());
        }
        out += fields;
        out += d.path;  // length-prefixed: any byte may appear in a path
        out += '\n';
    }
    return out;
}

Result<std::vector<Dependency>> parse(std::string_view text) {
    const Error bad{Errc::io, "malformed dependency list"};
    if (text.compare(0, kHeader.size(), kHeader) != 0) return bad;
    text.remove_prefix(kHeader.size());
    std::vector<Dependency> deps;
    while (!text.empty()) {
        Dependency d;
        unsigned long long size = 0, nsec = 0, hash = 0, len = 0;
        long long sec = 0;
        int consumed = 0;
        const std::string head(text.substr(0, std::min<std::size_t>(text.size(), 128)));
        if (head[0] == '+' || head[0] == '*') {
            if (std::sscanf(head.c_str() + 1, " %llu %lld.%9llu %16llx %llu%n", &size, &sec, &nsec, &hash, &len,
                            &consumed) != 5) {
                return bad;
            }
            ++consumed;  // the flag character
            d.verify_content = head[0] == '*';
            d.size = size;
            d.mtime_sec = sec;
            d.mtime_nsec = static_cast<std::uint32_t>(nsec);
            d.content_hash = hash;
        } else if (head[0] == '-') {
            if (std::sscanf(head.c_str(), "- %llu%n", &len, &consumed) != 1) return bad;
            d.exists = false;
        } else {
            return bad;
        }
        // Exactly one space separates the length from the path (which may start with spaces).
        if (static_cast<std::size_t>(consumed) >= text.size() || text[static_cast<std::size_t>(consumed)] != ' ') return bad;
        text.remove_prefix(static_cast<std::size_t>(consumed) + 1);
        if (len >= text.size() || text[len] != '\n') return bad;
        d.path.assign(text.substr(0, len));
        text.remove_prefix(len + 1);
        deps.push_back(std::move(d));
    }
    return deps;
}

}  // namespace kjit::include_scanner
