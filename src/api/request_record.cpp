#include "api/request_record.hpp"

#include "key/include_scanner.hpp"
#include "util/environment.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace kjit::api::request_record {

namespace {

// What every line starts with, up to its id: how a line of this format is told from anything else.
constexpr std::string_view kLinePrefix = "{\"kjit_request\":1,\"id\":\"";
constexpr std::size_t kIdDigits = 16;

// Off until $KJIT_RECORD is read or start() is called; then on or off for good (start and stop
// change it).
enum : int { kUnknown = 0, kOff = 1, kOn = 2 };

struct Recorder {
    std::mutex mutex;
    std::string path;
    UniqueFd fd;
    pid_t pid = 0;                          // the process that opened `fd` (a child reopens)
    std::unordered_set<std::uint64_t> ids;  // the lines known to be in the file
    off_t read_to = 0;                      // the file's bytes read for their ids
};

std::atomic<int> state{kUnknown};
Recorder *recorder = new Recorder;  // leaked: used until exit, from any thread
// The file recorded into, for a forked child (a leaked copy, published whole: a child reads it
// without the lock another thread of its parent may have held).
std::atomic<const char *> recorded_path{nullptr};

// A forked child has none of the threads that may have held the lock: a recorder of its own,
// for the same file (reopened at its first record: an flock is per open file, and the parent's
// is shared with it).
[[maybe_unused]] const bool renewed_in_child = fork_guard::at_fork_child(fork_guard::State::request_record, [] {
    recorder = new Recorder;
    if (const char *path = recorded_path.load(std::memory_order_acquire)) recorder->path = path;
});

void append_escaped(std::string &out, std::string_view text) {
    out += '"';
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    out += '"';
}

void append_list(std::string &out, const char *name, const std::vector<std::string> &items) {
    out += ",\"" + std::string(name) + "\":[";
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        append_escaped(out, items[i]);
    }
    out += ']';
}

// `path` absolute, against the working directory: a record is warmed from anywhere.
std::string absolute(const std::string &path) {
    if (path.empty() || path[0] == '/') return path;
    char cwd[4096];
    if (!::getcwd(cwd, sizeof cwd)) return path;
    return std::string(cwd) + "/" + path;
}

// The base folders of `r` as the key takes them (the record notes a request before
// key::key_request normalises them).
std::vector<std::string> base_folders(const key::Request &r) {
    std::vector<std::string> out;
    for (const std::string &b : r.base_dirs) out.push_back(key::normal_base_folder(b));
    return out;
}

// `path` (absolute) as a record writes it: "{base N}/rest" under base folder N, so that a record
// made under one install prefix warms a cache under another (kjit warm --base-dir).
std::string portable(const std::string &path, const std::vector<std::string> &bases) {
    return path.empty() || path[0] != '/' ? path : key::include_scanner::location(path, bases);
}

// The NVRTC options with each absolute include folder or pre-included file under a base folder
// written relative to it (portable).
std::vector<std::string> portable_options(const std::vector<std::string> &options,
                                          const std::vector<std::string> &bases) {
    std::vector<std::string> out = options;
    if (bases.empty()) return out;
    auto files = key::include_scanner::file_options(options);
    if (!files) return out;
    for (const auto &place : files->places) {
        const std::size_t at = out[place.option].rfind(place.value);
        if (at == std::string::npos || place.value[0] != '/') continue;
        out[place.option].replace(at, place.value.size(), portable(place.value, bases));
    }
    return out;
}

// The record line of `r` (with its newline), and its id.
std::string line_of(const key::Request &r, std::uint64_t *id) {
    const std::vector<std::string> bases = base_folders(r);
    std::string body = "\"source\":";
    append_escaped(body, r.source);
    body += ",\"keyword\":";
    append_escaped(body, r.keyword);
    body += ",\"name_expression\":";
    if (r.name_expression) {
        append_escaped(body, *r.name_expression);
    } else {
        body += "null";
    }
    body += ",\"arch\":";
    append_escaped(body, r.arch);
    body += ",\"program_name\":";
    append_escaped(body, portable(r.program_name, bases));
    append_list(body, "nvrtc_options", portable_options(r.nvrtc_options, bases));
    std::vector<std::string> paths;
    for (const std::string &p : r.include_paths) paths.push_back(portable(absolute(p), bases));
    append_list(body, "include_paths", paths);
    body += ",\"headers\":[";
    for (std::size_t i = 0; i < r.headers.size(); ++i) {
        body += i ? ",[" : "[";
        append_escaped(body, r.headers[i].first);
        body += ',';
        append_escaped(body, r.headers[i].second);
        body += ']';
    }
    body += ']';
    paths.clear();
    for (const std::string &p : r.link_inputs) paths.push_back(portable(absolute(p), bases));
    append_list(body, "link_inputs", paths);
    append_list(body, "link_options", r.link_options);
    // How many base folders "{base N}" may name: a warming node needs as many of its own.
    if (!bases.empty()) body += ",\"base_dirs\":" + std::to_string(bases.size());
    *id = hash64(body);
    char hex[kIdDigits + 1];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, *id);
    return std::string(kLinePrefix) + hex + "\"," + body + "}\n";
}

Status open_record(Recorder &rec, const std::string &path) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644));
    if (!fd.valid()) return io_error("cannot open the request record", path, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return io_error("cannot stat the request record", path, errno);
    if (!S_ISREG(st.st_mode)) return Error{Errc::io, "request record '" + path + "' is not a regular file"};
    rec.fd = std::move(fd);
    rec.path = path;
    rec.pid = ::getpid();
    recorded_path.store(::strdup(path.c_str()), std::memory_order_release);  // the old one is leaked
    return Ok{};
}

// The ids of the whole lines appended since rec.read_to (by any process), into rec.ids.
Status read_new_lines(Recorder &rec) {
    std::string text;
    char buf[65536];
    for (off_t at = rec.read_to;;) {
        const ssize_t n = ::pread(rec.fd.get(), buf, sizeof buf, at);
        if (n < 0) {
            if (errno == EINTR) continue;
            return io_error("cannot read the request record", rec.path, errno);
        }
        if (n == 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        at += n;
    }
    std::size_t start = 0;
    for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
        const std::string_view line(text.data() + start, end - start);
        if (line.size() > kLinePrefix.size() + kIdDigits && line.substr(0, kLinePrefix.size()) == kLinePrefix) {
            const std::string hex(line.substr(kLinePrefix.size(), kIdDigits));
            rec.ids.insert(std::strtoull(hex.c_str(), nullptr, 16));
        }
    }
    rec.read_to += static_cast<off_t>(start);  // a line still being written is read next time
    return Ok{};
}

// Appends `line` unless the file has it: under the file's lock, after reading what was added.
Status append_once(Recorder &rec, const std::string &line, std::uint64_t id) {
    if (::flock(rec.fd.get(), LOCK_EX) != 0) return io_error("cannot lock the request record", rec.path, errno);
    Status done = read_new_lines(rec);
    if (done && rec.ids.count(id) == 0) {
        const ssize_t n = ::write(rec.fd.get(), line.data(), line.size());
        if (n != static_cast<ssize_t>(line.size())) {
            done = n < 0 ? io_error("cannot write the request record", rec.path, errno)
                         : Error{Errc::io, "request record '" + rec.path + "': a line was written short (disk full?)"};
        } else {
            rec.ids.insert(id);
            if (const Status again = read_new_lines(rec); !again) done = again;  // past our own line
        }
    }
    (void)::flock(rec.fd.get(), LOCK_UN);
    return done;
}

}  // namespace

Status start(const std::string &path) {
    if (path.empty()) return Error{Errc::invalid_argument, "kjit_record_start: path is empty"};
    Recorder &rec = *recorder;
    std::lock_guard<std::mutex> lock(rec.mutex);
    Recorder fresh_state;
    KJIT_TRY(open_record(fresh_state, absolute(path)));
    rec.fd = std::move(fresh_state.fd);
    rec.path = fresh_state.path;
    rec.pid = fresh_state.pid;
    rec.ids.clear();
    rec.read_to = 0;
    state.store(kOn, std::memory_order_release);
    return Ok{};
}

void stop() {
    Recorder &rec = *recorder;
    std::lock_guard<std::mutex> lock(rec.mutex);
    state.store(kOff, std::memory_order_release);
    rec.fd.reset();
    rec.ids.clear();
    rec.read_to = 0;
}

bool active() {
    const int now = state.load(std::memory_order_acquire);
    if (now != kUnknown) return now == kOn;
    const char *env = environment::get(environment::Variable::record);
    if (!env || !*env) {
        int expected = kUnknown;
        state.compare_exchange_strong(expected, kOff);
        return state.load(std::memory_order_acquire) == kOn;
    }
    Recorder &rec = *recorder;
    std::lock_guard<std::mutex> lock(rec.mutex);
    if (state.load(std::memory_order_acquire) != kUnknown) return state.load() == kOn;
    if (auto opened = open_record(rec, absolute(env)); !opened) {
        std::fprintf(stderr, "[kjit warning] KJIT_RECORD: %s; nothing is recorded\n", opened.error().message.c_str());
        state.store(kOff, std::memory_order_release);
        return false;
    }
    state.store(kOn, std::memory_order_release);
    return true;
}

void note(const key::Request &request) {
    if (!active()) return;
    std::uint64_t id = 0;
    const std::string line = line_of(request, &id);
    Recorder &rec = *recorder;
    std::lock_guard<std::mutex> lock(rec.mutex);
    if (state.load(std::memory_order_acquire) != kOn || rec.ids.count(id)) return;
    Status done = Ok{};
    if (rec.pid != ::getpid()) done = open_record(rec, rec.path);  // a forked child: a lock of its own
    if (done) done = append_once(rec, line, id);
    if (!done) {
        std::fprintf(stderr, "[kjit warning] %s; recording stops\n", done.error().message.c_str());
        state.store(kOff, std::memory_order_release);
        rec.fd.reset();
    }
}

}  // namespace kjit::api::request_record
