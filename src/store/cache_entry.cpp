#include "store/cache_entry.hpp"

#include "cubin/sidecar.hpp"
#include "cubin/symbol_scanner.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <unordered_map>

namespace kjit::store::cache_entry {

namespace {

// Devices where recording recency failed lately (see note_use). A torn pair of fields at worst
// costs one more failing call or one skipped record: both harmless.
struct FailedDevice {
    std::atomic<std::uint64_t> dev{0};
    std::atomic<std::int64_t> until_ns{0};
};
constexpr unsigned kFailedDevices = 4;
FailedDevice failed_devices[kFailedDevices];
std::atomic<unsigned> failed_device_next{0};

// Keys pinned by running batches (pin()), with their counts.
struct Pins {
    std::mutex mutex;
    std::unordered_map<std::string, unsigned> counts;
    std::atomic<std::size_t> total{0};
};
// Made while libkjit loads, never freed (usable during exit); no once-guard (fork_guard.hpp).
Pins *const the_pins = new Pins();
Pins &pins() { return *the_pins; }
// A forked child runs none of its parent's batches: it starts with no pins (a batch that goes
// on in a child forked from its callback keeps its entries in use by their records alone).
void renew_pins_in_forked_child() { fork_guard::renew(*the_pins); }
[[maybe_unused]] const bool pins_fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::entry_pins, renew_pins_in_forked_child);

bool is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool all_hex(std::string_view s) {
    for (char c : s) {
        if (!is_hex_lower(c)) return false;
    }
    return true;
}

// Manifest values are one line each: backslash and newline are escaped.
std::string escape_line(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

std::optional<std::string> unescape_line(std::string_view v) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != '\\') {
            out += v[i];
            continue;
        }
        if (++i == v.size()) return std::nullopt;
        if (v[i] == '\\') {
            out += '\\';
        } else if (v[i] == 'n') {
            out += '\n';
        } else {
            return std::nullopt;
        }
    }
    return out;
}

}  // namespace

bool is_key(std::string_view name) { return name.size() == 32 && all_hex(name); }

bool is_shard(std::string_view name) { return name.size() == 2 && all_hex(name); }

std::string folder_for(const std::string &cache_dir, const std::string &key) {
    return cache_dir + "/" + key.substr(0, 2) + "/" + key;
}

std::string_view entry_of_cubin(std::string_view cubin_path) {
    const std::string_view file = kCubinFile;
    // ".../" + 2 + "/" + 32 + "/" + file
    if (cubin_path.size() < file.size() + 36) return {};
    const std::size_t file_at = cubin_path.size() - file.size();
    if (cubin_path.substr(file_at) != file || cubin_path[file_at - 1] != '/') return {};
    const std::string_view key = cubin_path.substr(file_at - 33, 32);
    const std::string_view shard = cubin_path.substr(file_at - 36, 2);
    if (cubin_path[file_at - 34] != '/' || !is_key(key) || shard != key.substr(0, 2)) return {};
    if (file_at - 36 > 0 && cubin_path[file_at - 37] != '/') return {};
    return cubin_path.substr(0, file_at - 1);
}

void note_use(const std::string &entry, const struct stat &folder_st, std::int64_t now_ns) {
    const std::int64_t recorded = mtime_ns(folder_st);
    if (recorded > now_ns - kRecencyStepNs && recorded <= now_ns) return;
    const auto dev = static_cast<std::uint64_t>(folder_st.st_dev);
    for (const FailedDevice &f : failed_devices) {
        if (f.dev.load(std::memory_order_relaxed) == dev && f.until_ns.load(std::memory_order_relaxed) > now_ns) return;
    }
    const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    if (::utimensat(AT_FDCWD, entry.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0) return;
    const int err = errno;
    log().debug("could not record the use of cache entry '{}': {}", entry, errno_text(err));
    if (err == EROFS || err == EPERM || err == EACCES) {
        FailedDevice &slot =
            failed_devices[failed_device_next.fetch_add(1, std::memory_order_relaxed) % kFailedDevices];
        slot.dev.store(dev, std::memory_order_relaxed);
        slot.until_ns.store(now_ns + kRecencyStepNs, std::memory_order_relaxed);
    }
}

bool rewrite_future_mtime(const std::string &path, std::int64_t mtime, std::int64_t now_ns) {
    if (mtime <= now_ns) return false;
    const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
    if (::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
        log().debug("could not set the future mtime of '{}' to now: {}", path, errno_text(errno));
        return false;
    }
    log().debug("'{}' had an mtime {} s in the future: set to now", path, (mtime - now_ns) / 1'000'000'000);
    return true;
}

void note_use_of_cubin(const std::string &cubin_path) {
    const std::string_view entry = entry_of_cubin(cubin_path);
    if (entry.empty()) return;
    const std::string folder(entry);
    struct stat st {};
    if (::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
    note_use(folder, st, realtime_ns());
}

void pin(const std::string &key) {
    Pins &p = pins();
    std::lock_guard<std::mutex> lock(p.mutex);
    ++p.counts[key];
    p.total.fetch_add(1, std::memory_order_release);
}

void unpin(const std::string &key) {
    Pins &p = pins();
    std::lock_guard<std::mutex> lock(p.mutex);
    auto found = p.counts.find(key);
    if (found == p.counts.end()) return;
    if (--found->second == 0) p.counts.erase(found);
    p.total.fetch_sub(1, std::memory_order_release);
}

bool pinned(const std::string &key) {
    Pins &p = pins();
    if (p.total.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> lock(p.mutex);
    return p.counts.count(key) != 0;
}

namespace {
std::atomic<std::uint64_t> retirements_begun{0};
}  // namespace

std::uint64_t retirements() { return retirements_begun.load(std::memory_order_acquire); }

Result<Retired> retire(const std::string &entry, InUse in_use_entries) {
    // Before the entry goes: a memo that reads the count after this sees it moved.
    retirements_begun.fetch_add(1, std::memory_order_acq_rel);
    const bool spare_in_use = in_use_entries == InUse::spare;
    const std::size_t slash = entry.find_last_of('/');
    const std::string shard = slash == std::string::npos ? std::string(".") : entry.substr(0, slash);
    const std::string key = slash == std::string::npos ? entry : entry.substr(slash + 1);
    const std::string trash = shard + "/" + std::string(kTrashPrefix) + key + "-" + unique_suffix();
    struct stat st {};
    if (spare_in_use) {
        if (::lstat(entry.c_str(), &st) != 0) {
            if (errno == ENOENT) return Retired::vanished;
            return io_error("cannot stat cache entry", entry, errno);
        }
        if (in_use(mtime_ns(st), realtime_ns()) || pinned(key)) return Retired::in_use;
    }
    if (::rename(entry.c_str(), trash.c_str()) != 0) {
        if (errno == ENOENT) return Retired::vanished;
        return io_error("cannot move aside cache entry", entry, errno);
    }
    // A reader that recorded its use before the rename shows in the trash's mtime (the rename
    // itself keeps it), a batch of this process that pinned it meanwhile in the pins: give the
    // entry back. One that comes after finds no entry: a miss.
    if (spare_in_use && ::lstat(trash.c_str(), &st) == 0 && (in_use(mtime_ns(st), realtime_ns()) || pinned(key))) {
        if (::rename(trash.c_str(), entry.c_str()) == 0) return Retired::in_use;
        // A new entry was published meanwhile: it serves; this copy goes.
    }
    remove_tree(trash);
    return Retired::removed;
}

std::string variants_file_for(const std::string &cache_dir, const std::string &source_key) {
    return cache_dir + "/" + source_key.substr(0, 2) + "/" + source_key + std::string(kVariantsSuffix);
}

bool is_variants_name(std::string_view name) {
    return name.size() == 32 + kVariantsSuffix.size() && is_key(name.substr(0, 32)) &&
           name.substr(32) == kVariantsSuffix;
}

namespace {
constexpr std::string_view kVariantsHeader = "kjit-variants 1\n";
// A variants file of kMaxVariants keys is under 600 bytes: anything larger is not ours.
constexpr std::size_t kMaxVariantsBytes = 64 * 1024;
}  // namespace

std::vector<std::string> read_variants(const std::string &path) {
    std::vector<std::string> keys;
    const auto text = read_small_file(path, kMaxVariantsBytes);
    if (!text || text->compare(0, kVariantsHeader.size(), kVariantsHeader) != 0) return keys;
    std::string_view rest = std::string_view(*text).substr(kVariantsHeader.size());
    while (!rest.empty() && keys.size() < kMaxVariants) {
        const std::size_t eol = rest.find('\n');
        const std::string_view line = rest.substr(0, eol);
        if (is_key(line) && std::find(keys.begin(), keys.end(), line) == keys.end()) keys.emplace_back(line);
        if (eol == std::string_view::npos) break;
        rest.remove_prefix(eol + 1);
    }
    return keys;
}

bool record_variant(const std::string &path, const std::string &key, bool shared) {
    std::vector<std::string> keys = read_variants(path);
    if (!keys.empty() && keys.front() == key) return true;
    keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
    keys.insert(keys.begin(), key);
    if (keys.size() > kMaxVariants) keys.resize(kMaxVariants);
    std::string text(kVariantsHeader);
    for (const std::string &k : keys) text += k + "\n";
    // A temp name of the shard's transit kind: one left by a killed writer is swept as stale.
    const std::size_t slash = path.find_last_of('/');
    const std::string temp_stem =
        path.substr(0, slash + 1) + std::string(kTempPrefix) + path.substr(slash + 1, 32) + "-";
    return replace_file(path, temp_stem, kVariantsSuffix, text, shared ? kGroupWritable : 0).ok();
}

namespace {

constexpr std::string_view kManifestHeader = "kjit-manifest 2\n";
constexpr std::string_view kCheckLabel = "check: ";

std::string check_line(std::string_view text) {
    char line[40];
    std::snprintf(line, sizeof line, "check: %016" PRIx64 "\n", hash64(text));
    return line;
}

// The cache folder an entry lies in ("<cache>/<k0k1>/<key>"), for messages.
std::string cache_of(const std::string &entry) {
    const std::size_t key_slash = entry.find_last_of('/');
    if (key_slash == std::string::npos || key_slash == 0) return ".";
    const std::size_t shard_slash = entry.find_last_of('/', key_slash - 1);
    if (shard_slash == std::string::npos) return ".";
    return shard_slash == 0 ? std::string("/") : entry.substr(0, shard_slash);
}

}  // namespace

std::string format_manifest(const Manifest &m) {
    std::string out(kManifestHeader);
    auto line = [&](const char *label, std::string_view value) {
        out += label;
        out += ": ";
        out += escape_line(value);
        out += '\n';
    };
    line("key", m.key);
    if (!m.source_key.empty()) line("source_key", m.source_key);
    line("keyword", m.keyword);
    line("name", m.name);
    line("arch", m.arch);
    line("nvrtc", m.nvrtc);
    for (const auto &o : m.options) line("option", o);
    for (const auto &p : m.include_paths) line("include_path", p);
    for (const auto &h : m.headers) line("header", h);
    if (m.name_expression) line("name_expression", *m.name_expression);
    // Written only when given, so that entries without one keep the manifest of 0.6; an older
    // reader takes the line as informational, as every unknown label.
    if (!m.program_name.empty()) line("program_name", m.program_name);
    line("cubin_bytes", std::to_string(m.cubin_bytes));
    line("cubin_hash", m.cubin_hash);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3f", m.compile_seconds);
    line("compile_seconds", secs);
    line("created", m.created);
    out += check_line(out);
    return out;
}

namespace {

// The manifest's header and check line verified: `body` is then everything the check line
// covers. What is wrong, or null.
const char *check_manifest(std::string_view text, std::string_view &body) {
    if (text.substr(0, kManifestHeader.size()) != kManifestHeader) {
        if (text.substr(0, 14) == "kjit-manifest ") {
            return "a manifest of another format (made by another libkjit version), not format 2";
        }
        return "not a kjit manifest of format 2";
    }
    // The check line comes last and covers everything before it: one damaged byte anywhere (a
    // name, the cubin hash) makes the whole manifest untrustworthy, not just that line.
    if (text.empty() || text.back() != '\n') return "its last line is cut short";
    const std::size_t last = text.rfind('\n', text.size() - 2);
    body = text.substr(0, last + 1);
    const std::string_view check = text.substr(last + 1);
    if (check.substr(0, kCheckLabel.size()) != kCheckLabel) return "the check line is missing (truncated?)";
    if (check != check_line(body)) return "damaged: its check line does not match its text";
    return nullptr;
}

// The member a label of one value names, or null.
std::string *text_field(Manifest &m, std::string_view label) {
    if (label == "key") return &m.key;
    if (label == "source_key") return &m.source_key;
    if (label == "keyword") return &m.keyword;
    if (label == "name") return &m.name;
    if (label == "arch") return &m.arch;
    if (label == "nvrtc") return &m.nvrtc;
    if (label == "created") return &m.created;
    if (label == "program_name") return &m.program_name;
    return nullptr;
}

// The list a repeated label adds to, or null.
std::vector<std::string> *list_field(Manifest &m, std::string_view label) {
    if (label == "option") return &m.options;
    if (label == "include_path") return &m.include_paths;
    if (label == "header") return &m.headers;
    return nullptr;
}

std::string read_cubin_bytes(const std::string &value, Manifest &m) {
    char *endp = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(value.c_str(), &endp, 10);
    if (value.empty() || *endp != '\0' || errno != 0) return "cubin_bytes '" + value + "' is not a number";
    m.cubin_bytes = n;
    return {};
}

std::string read_cubin_hash(std::string &value, Manifest &m) {
    if (value.size() != 32 || !all_hex(value)) return "cubin_hash '" + value + "' is not 32 hex digits";
    m.cubin_hash = std::move(value);
    return {};
}

std::string read_compile_seconds(const std::string &value, Manifest &m) {
    // Written with %.3f; anything else (inf, nan, hex, absurd sizes that %.3f cannot give back
    // unchanged) is damage, as the fuzzer found.
    char *endp = nullptr;
    const double v = std::strtod(value.c_str(), &endp);
    if (value.empty() || *endp != '\0' || !(v >= 0 && v < 1e9) || value[0] == ' ') {
        return "compile_seconds '" + value + "' is not a time in seconds";
    }
    m.compile_seconds = v;
    return {};
}

// One line's value stored where its label says: what is wrong with the value, or "" (no
// allocation when nothing is). Unknown labels are from a later minor format, informational.
std::string store_field(Manifest &m, std::string_view label, std::string &value) {
    if (std::string *field = text_field(m, label)) {
        *field = std::move(value);
        return {};
    }
    if (std::vector<std::string> *list = list_field(m, label)) {
        list->push_back(std::move(value));
        return {};
    }
    if (label == "name_expression") {
        m.name_expression = std::move(value);
        return {};
    }
    if (label == "cubin_bytes") return read_cubin_bytes(value, m);
    if (label == "cubin_hash") return read_cubin_hash(value, m);
    if (label == "compile_seconds") return read_compile_seconds(value, m);
    return {};
}

// The "label: value" lines of `body` after its header, into `m`: what is wrong, or "".
std::string read_fields(std::string_view body, Manifest &m) {
    std::size_t pos = kManifestHeader.size();
    int line_no = 1;
    while (pos < body.size()) {
        ++line_no;
        const std::size_t end = body.find('\n', pos);
        const std::string_view line = body.substr(pos, end - pos);
        pos = end + 1;
        const std::size_t colon = line.find(": ");
        if (colon == std::string_view::npos) return "line " + std::to_string(line_no) + " has no 'label: value'";
        auto value = unescape_line(line.substr(colon + 2));
        if (!value) return "line " + std::to_string(line_no) + " has a bad escape";
        if (std::string why = store_field(m, line.substr(0, colon), *value); !why.empty()) return why;
    }
    return {};
}

}  // namespace

Result<Manifest> parse_manifest(std::string_view text, const std::string &path) {
    auto bad = [&](const std::string &why) { return Error{Errc::io, "manifest '" + path + "': " + why}; };
    std::string_view body;
    if (const char *why = check_manifest(text, body)) return bad(why);
    Manifest m;
    if (std::string why = read_fields(body, m); !why.empty()) return bad(why);
    if (m.keyword.empty() || m.name.empty() || m.key.empty() || m.cubin_hash.empty()) {
        return bad("key, keyword, name or cubin_hash is missing");
    }
    return m;
}

std::optional<Error> untrusted_shard(const folder_trust::CacheFolder &folder, const std::string &shard) {
    struct stat st {};
    if (::lstat(shard.c_str(), &st) != 0) return std::nullopt;  // not there: nothing in it to trust
    if (S_ISLNK(st.st_mode)) {
        return Error{Errc::io, "cache shard folder '" + shard + "' is a symbolic link (owned by " +
                                   folder_trust::user_text(st.st_uid) +
                                   "), not a folder: libkjit never makes one, and it would lead readers to a "
                                   "folder no one checked; remove it (rm '" +
                                   shard + "') and check who can write the cache folder (docs/troubleshooting.md)"};
    }
    if (!folder_trust::trusted_owner(folder, st.st_uid)) {
        return folder_trust::foreign_error(folder, "cache shard folder", shard, st);
    }
    return std::nullopt;
}

std::optional<Error> untrusted_entry(const folder_trust::CacheFolder &folder, const std::string &entry,
                                     const struct stat &entry_st, bool files) {
    if (!folder_trust::trusted_owner(folder, entry_st.st_uid)) {
        return folder_trust::foreign_error(folder, "cache entry", entry, entry_st);
    }
    if (auto shard = untrusted_shard(folder, entry.substr(0, entry.find_last_of('/')))) return shard;
    if (!files || !S_ISDIR(entry_st.st_mode)) return std::nullopt;
    KJIT_TRY_ASSIGN(auto dir, open_entry(entry));
    KJIT_TRY_ASSIGN(auto reader, FolderReader::adopt(dir.release(), entry));
    for (;;) {
        KJIT_TRY_ASSIGN(auto next, reader.next());
        if (!next) return std::nullopt;
        const std::string name = (next)->d_name;
        struct stat st {};
        if (name == "." || name == ".." || ::fstatat(reader.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            continue;  // gone meanwhile: nothing to read
        }
        const std::string path = entry + "/" + name;
        if (!folder_trust::trusted_owner(folder, st.st_uid)) {
            return folder_trust::foreign_error(folder, "file", path, st);
        }
        if (S_ISLNK(st.st_mode)) {
            return Error{Errc::io, "'" + path +
                                       "' in a cache entry is a symbolic link: libkjit never makes one, and it "
                                       "would lead readers to a file no one checked; remove the entry (rm -rf '" +
                                       entry + "')"};
        }
    }
}

Status ready_shard(const std::string &cache_dir, const std::string &shard, folder_trust::CacheFolder &folder) {
    KJIT_TRY(make_folders(shard, folder_trust::folder_mode(folder), "cache folder"));
    if (!folder.exists) {
        // Created just now (by us, or by someone faster): check it as it is.
        KJIT_TRY_ASSIGN(auto now, folder_trust::check_cache_folder_now(cache_dir));
        folder = std::move(now);
    }
    // A shard replaced by a link (by someone who can write the cache folder) would send this
    // entry elsewhere: never write through one, nor into one someone untrusted owns.
    struct stat shard_st {};
    if (::lstat(shard.c_str(), &shard_st) != 0 || !S_ISDIR(shard_st.st_mode)) {
        return Error{Errc::io, "cache shard folder '" + shard +
                                   "' is a symbolic link or not a folder: refusing to write through it (remove it)"};
    }
    if (!folder_trust::trusted_owner(folder, shard_st.st_uid)) {
        return folder_trust::foreign_error(folder, "cache shard folder", shard, shard_st);
    }
    // In a team cache, every member must be able to add entries to the shard: the umask
    // (022 by default) strips the group's write bit from the mkdir above.
    if (folder_trust::shared(folder) && shard_st.st_uid == ::geteuid() && (shard_st.st_mode & 02070) != 02070 &&
        ::chmod(shard.c_str(), 02770) != 0) {
        return io_error("cannot make the cache shard folder group-writable", shard, errno);
    }
    return Ok{};
}

namespace {

// "YYYY-MM-DDTHH:MM:SSZ", now.
std::string utc_now() {
    char created[32];
    const std::time_t now = std::time(nullptr);
    struct tm utc {};
    gmtime_r(&now, &utc);
    std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return created;
}

}  // namespace

Manifest complete_manifest(Manifest manifest, std::string_view cubin) {
    manifest.cubin_bytes = cubin.size();
    manifest.cubin_hash = hash128_hex(cubin);
    manifest.created = utc_now();
    return manifest;
}

namespace {

// Writes every file of `entry` into the new folder `temp`; returns the bytes written.
Result<std::uint64_t> write_entry_files(const std::string &temp, const NewEntry &entry, unsigned team) {
    // Durable (KJIT_DURABILITY=entry): only the cubin is fsynced, then the folder; after a power
    // loss a torn or empty sidecar, deps.txt or manifest is a rescan, a rebuild or nothing (they
    // are validated, or informational). Not durable (the default): nothing is, since a torn
    // cubin is refused too (its size against the sidecar, its bytes against the manifest's
    // XXH3-128, and a cubin of an earlier boot is read once), and the two fsyncs cost a miss 1.5
    // to 8 ms, more than all the rest (docs/bench.md, "Durability").
    const unsigned durable = entry.durable ? kDurable : 0;
    const std::string temp_cubin = temp + "/" + kCubinFile;
    KJIT_TRY(write_new_file(temp_cubin, entry.cubin, durable | kBackdated | team));
    struct stat st {};
    if (::stat(temp_cubin.c_str(), &st) != 0) return io_error("cannot stat", temp_cubin, errno);
    cubin::sidecar::Line line;
    line.keyword = entry.manifest.keyword;
    line.cubin_size = static_cast<std::uint64_t>(st.st_size);
    line.mtime_sec = st.st_mtim.tv_sec;
    line.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
    line.name = entry.manifest.name;
    // A filesystem that keeps whole seconds only gives size and mtime that cannot tell versions
    // apart: bind the line to the content (docs/sidecar-format.md).
    if (line.mtime_nsec == 0) line.content_hash = hash64(entry.cubin);
    const Manifest manifest = complete_manifest(entry.manifest, entry.cubin);
    std::vector<std::pair<std::string, std::string>> files = {{cubin::sidecar::path_for(temp_cubin),
                                                               cubin::sidecar::format({line})},
                                                              {temp + "/" + kSourceFile, std::string(entry.source)},
                                                              {temp + "/" + kManifestFile, format_manifest(manifest)}};
    if (entry.deps_text) files.emplace_back(temp + "/" + kDepsFile, *entry.deps_text);
    if (entry.origin_text) files.emplace_back(temp + "/" + kOriginFile, *entry.origin_text);
    std::uint64_t bytes = entry.cubin.size();
    for (const auto &file : files) {
        KJIT_TRY(write_new_file(file.first, file.second, team));
        bytes += file.second.size();
    }
    if (entry.durable) {
        KJIT_TRY(fsync_folder(temp));
    }
    return bytes;
}

// Puts the complete entry `temp` at `place`, where an entry already is (rename failed with
// ENOTEMPTY, EEXIST or ENOTDIR): keeps that one when it serves, else swaps ours in.
Result<Published::Outcome> place_over_existing(const std::string &temp, const std::string &place,
                                               const ExistingEntryCheck &existing_serves) {
    std::string why;
    KJIT_TRY_ASSIGN(auto serves, existing_serves(&why));
    if (serves) return Published::Outcome::found;
    // Swap ours in atomically; the old entry ends up in `temp` and goes with it.
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, place.c_str(), RENAME_EXCHANGE) == 0) {
        log().debug("replaced unusable cache entry {}: {}", place, why);
        return Published::Outcome::replaced;
    }
    const int xerr = errno;
    if (xerr != EINVAL && xerr != ENOSYS && xerr != EOPNOTSUPP)
        return io_error("cannot replace cache entry", place, xerr);
    // No atomic exchange on this filesystem: move the old entry aside, then ours in. A reader
    // in between sees no entry (a miss), never a partial one.
    const std::string aside = temp + ".old";
    if (::rename(place.c_str(), aside.c_str()) != 0) return io_error("cannot move aside", place, errno);
    if (::rename(temp.c_str(), place.c_str()) != 0) return io_error("cannot publish cache entry", place, errno);
    remove_tree(aside);
    log().debug("replaced unusable cache entry {} (without RENAME_EXCHANGE): {}", place, why);
    return Published::Outcome::replaced;
}

}  // namespace

Result<Published> publish(const std::string &cache_dir, folder_trust::CacheFolder &folder, const NewEntry &entry,
                          const ExistingEntryCheck &existing_serves) {
    const std::string &key = entry.manifest.key;
    const std::string place = folder_for(cache_dir, key);
    // Folders are created only now: a failed compile leaves nothing behind.
    const std::string shard = cache_dir + "/" + key.substr(0, 2);
    KJIT_TRY(ready_shard(cache_dir, shard, folder));
    // A private temp folder beside the final place. A name taken in advance (a killed writer's
    // folder whose pid and thread id came back, as they do in containers, or a planted one) is
    // skipped for the next.
    auto made = create_unique(shard + "/" + std::string(kTempPrefix) + key + "-", {}, "cache temp folder",
                              [&](const std::string &candidate) {
                                  return ::mkdir(candidate.c_str(), folder_trust::folder_mode(folder));
                              });
    if (!made) return std::move(made).error();
    const std::string temp = std::move(*made);
    auto fail = [&](Error e) -> Result<Published> {
        remove_tree(temp);
        return e;
    };
    const unsigned team = folder_trust::shared(folder) ? kGroupWritable : 0;
    // Team members rewrite each other's sidecars and record use in each other's entries.
    if (team && ::chmod(temp.c_str(), 02770) != 0) {
        return fail(io_error("cannot make the cache entry group-writable", temp, errno));
    }
    auto written = write_entry_files(temp, entry, team);
    if (!written) return fail(std::move(written).error());
    Published published;
    published.cubin_path = place + "/" + kCubinFile;
    published.bytes_written = *written;
    if (::rename(temp.c_str(), place.c_str()) == 0) return published;
    const int err = errno;
    if (err != ENOTEMPTY && err != EEXIST && err != ENOTDIR)
        return fail(io_error("cannot publish cache entry", place, err));
    auto outcome = place_over_existing(temp, place, existing_serves);
    remove_tree(temp);  // ours when the old one serves, the old one after a swap; gone after a move
    if (!outcome) return std::move(outcome).error();
    published.outcome = *outcome;
    if (*outcome == Published::Outcome::found) published.bytes_written = 0;
    return published;
}

Result<CubinBytes> read_cubin(const std::string &cubin_path) {
    note_use_of_cubin(cubin_path);
    const std::string entry(entry_of_cubin(cubin_path));
    if (entry.empty()) {
        CubinBytes read;
        KJIT_TRY_ASSIGN(auto bytes, cubin::read_cubin_at(AT_FDCWD, cubin_path, cubin_path, read.identity));
        read.bytes = std::move(bytes);
        return read;
    }
    return read_published(entry);
}

Result<CubinBytes> read_published(const std::string &entry) {
    const std::string cubin_path = entry + "/" + kCubinFile;
    CubinBytes read;
    KJIT_TRY_ASSIGN(auto entry_fd, open_entry(entry));
    KJIT_TRY_ASSIGN(auto bytes, cubin::read_cubin_at(entry_fd.get(), kCubinFile, cubin_path, read.identity));
    read.bytes = std::move(bytes);
    KJIT_TRY_ASSIGN(auto confirmed, confirm_published(entry, entry_fd.get(), cubin_path, read.bytes));
    read.published = std::move(confirmed);
    return read;
}

bool written_before_boot(const FileIdentity &cubin, std::int64_t now_ns) {
    const std::int64_t changed = cubin.ctime_sec * 1'000'000'000 + static_cast<std::int64_t>(cubin.ctime_nsec);
    // The tolerance ahead: a cache on a file server whose clock runs seconds ahead stamps every
    // ctime in the future, and would have every hit within those seconds read its cubin.
    return changed < boot_realtime_ns() || changed > now_ns + kCtimeAheadNs;
}

Status confirm_after_boot(const std::string &entry, FileIdentity &cubin) {
    // The file `cubin` names, as it was: its ctime aside, which the stamp below moves.
    const auto same_file_version = [&cubin](const FileIdentity &id) {
        return id.ino == cubin.ino && id.size == cubin.size && id.mtime_sec == cubin.mtime_sec &&
               id.mtime_nsec == cubin.mtime_nsec;
    };
    KJIT_TRY_ASSIGN(auto read, read_published(entry));
    const std::string cubin_path = entry + "/" + kCubinFile;
    if (!same_file_version(read.identity)) {
        return Error{Errc::bad_cubin, "cubin '" + cubin_path + "' changed while it was confirmed"};
    }
    // UTIME_OMIT for both would leave the ctime alone: set the mtime itself, to what it is.
    const struct timespec times[2] = {{0, UTIME_OMIT},
                                      {static_cast<std::time_t>(cubin.mtime_sec), static_cast<long>(cubin.mtime_nsec)}};
    struct stat st {};
    if (::utimensat(AT_FDCWD, cubin_path.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0 ||
        ::stat(cubin_path.c_str(), &st) != 0) {
        log().debug("cubin '{}' confirmed after a restart, not stamped: {}", cubin_path, std::strerror(errno));
        return Ok{};
    }
    const FileIdentity now = FileIdentity::from_stat(st);
    // Someone may have swapped a new entry in since: keep the identity that was confirmed.
    if (same_file_version(now)) cubin = now;
    log().debug("cubin '{}' written before this boot: confirmed against its manifest", cubin_path);
    return Ok{};
}

Result<UniqueFd> open_entry(const std::string &entry) {
    UniqueFd fd(::open(entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return io_error("cannot open cache entry folder", entry, errno);
    return fd;
}

Result<Manifest> read_manifest(const std::string &entry, int entry_fd) {
    const std::string path = entry + "/" + kManifestFile;
    auto text = entry_fd == AT_FDCWD ? read_small_file(path, kMaxManifestBytes)
                                     : read_small_file(kManifestFile, kMaxManifestBytes, entry_fd);
    if (!text) {
        struct stat st {};
        if (::fstatat(entry_fd, entry_fd == AT_FDCWD ? path.c_str() : kManifestFile, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            return io_error("cannot read manifest", path, errno);
        }
        return Error{Errc::io, "cannot read manifest '" + path + "': not a regular file of at most 1 MiB"};
    }
    return parse_manifest(*text, path);
}

Result<Manifest> confirm_published(const std::string &entry, int entry_fd, const std::string &cubin_path,
                                   std::string_view bytes) {
    const std::string what_to_do = "; run `kjit cache verify --fix --cache-dir '" + cache_of(entry) +
                                   "'` to remove the entry (the next kjit_compile rebuilds it)";
    auto manifest = read_manifest(entry, entry_fd);
    if (!manifest) {
        return Error{Errc::bad_cubin, "cubin '" + cubin_path +
                                          "' cannot be confirmed as what its cache entry published: " +
                                          manifest.error().message + what_to_do};
    }
    if (manifest->cubin_bytes != bytes.size() || manifest->cubin_hash != hash128_hex(bytes)) {
        return Error{Errc::bad_cubin, "cubin '" + cubin_path +
                                          "' is damaged: its content does not match the XXH3-128 hash its cache "
                                          "entry recorded when it was published (it was changed on disk since)" +
                                          what_to_do};
    }
    return manifest;
}

}  // namespace kjit::store::cache_entry
