#include "cache_maintenance.hpp"

#include "cache_entry.hpp"
#include "folder_trust.hpp"
#include "fork_guard.hpp"
#include "hashing.hpp"
#include "log.hpp"
#include "name_matcher.hpp"
#include "filesystem.hpp"
#include "sidecar_store.hpp"
#include "symbol_scanner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <list>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace kjit::cache_maintenance {

namespace {

using cache_entry::kCubinFile;
using cache_entry::kDepsFile;
using cache_entry::kManifestFile;
using cache_entry::kSourceFile;

constexpr const char *kLockFile = ".kjit-lock";
constexpr const char *kUsageFile = ".kjit-usage";
constexpr std::string_view kUsageTempPrefix = ".kjit-usage.tmp-";
constexpr std::string_view kDepsTempPrefix = ".deps.tmp-";
constexpr std::size_t kMaxManifestBytes = 1u << 20;

std::atomic<unsigned long> usage_sequence{0};

Error io_error(const std::string &what, const std::string &path, int err) {
    return Error{Errc::io, what + " '" + path + "': " + errno_text(err)};
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

struct DirEntry {
    std::string name;
    struct stat st;
};

// The entries of folder `path` (not . and ..), each lstat'ed. Errors: io; ENOENT is reported
// as an empty list when `missing_ok`.
Result<std::vector<DirEntry>> list_dir(const std::string &path, bool missing_ok) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && missing_ok) return std::vector<DirEntry>{};
        return io_error("cannot open folder", path, errno);
    }
    DIR *dir = ::fdopendir(fd);
    if (!dir) {
        const int err = errno;
        ::close(fd);
        return io_error("cannot read folder", path, err);
    }
    std::vector<DirEntry> out;
    for (;;) {
        errno = 0;
        const struct dirent *d = ::readdir(dir);
        if (!d) {
            const int err = errno;
            if (err != 0) {
                ::closedir(dir);
                return io_error("cannot read folder", path, err);
            }
            break;
        }
        if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0) continue;
        DirEntry e;
        e.name = d->d_name;
        if (::fstatat(::dirfd(dir), d->d_name, &e.st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
        out.push_back(std::move(e));
    }
    ::closedir(dir);
    return out;
}

// What the disk holds for one file or folder, as du counts it (st_blocks is in 512-byte units
// whatever the file system's block size).
std::uint64_t disk_bytes(const struct stat &st) { return static_cast<std::uint64_t>(st.st_blocks) * 512; }

// The disk space of what a folder tree holds, not counting the folder itself (entries are flat;
// transit folders may hold an old entry in a subfolder).
std::uint64_t tree_bytes(const std::string &path, int depth = 0) {
    auto listing = list_dir(path, true);
    if (!listing) return 0;
    std::uint64_t n = 0;
    for (const DirEntry &e : *listing) {
        n += disk_bytes(e.st);
        if (S_ISDIR(e.st.st_mode) && depth < 2) n += tree_bytes(path + "/" + e.name, depth + 1);
    }
    return n;
}

bool is_transit_name(std::string_view name) {
    return starts_with(name, cache_entry::kTempPrefix) || starts_with(name, cache_entry::kTrashPrefix);
}

bool is_own_root_file(std::string_view name) {
    return name == kLockFile || name == kUsageFile || starts_with(name, kUsageTempPrefix);
}

// The cache folder as maintenance works on it: checked as kjit_compile checks it (a foreign
// folder is refused), and, when it is a link, the folder it points to, so that every listing
// below can refuse links (list_dir opens with O_NOFOLLOW). A missing folder keeps its path.
struct Root {
    std::string path;
    folder_trust::CacheFolder folder;
};

Result<Root> open_root(const std::string &cache_dir) {
    auto folder = folder_trust::check_cache_folder(cache_dir);
    if (!folder) return std::move(folder).error();
    Root root;
    root.path = folder->exists ? folder->real_path : cache_dir;
    root.folder = std::move(*folder);
    return root;
}

// The cache lock's descriptors open in this process, as fd + 1 (0: a free slot). A forked child
// inherits every descriptor, and a flock belongs to the open file, not the process: it is let go
// only once every descriptor on that file is closed. A child that lived on (a pool worker) with
// one that a parent's thread had open, locked or waiting, would hold the lock after that thread
// released it, for as long as it lives, and every prune, clear and eviction of the cache would
// wait for (or skip) a process that knows nothing of it. So the child closes them
// (fork_guard.hpp); the parent's thread releases the lock as usual. More than kLockSlots
// descriptors open at once (as many caches maintained at once) are not registered.
constexpr std::size_t kLockSlots = 64;
std::array<std::atomic<int>, kLockSlots> lock_fds{};

void close_lock_fds_in_forked_child() {
    for (std::atomic<int> &slot : lock_fds) {
        if (const int v = slot.exchange(0, std::memory_order_relaxed); v > 0) ::close(v - 1);
    }
}
[[maybe_unused]] const bool lock_fork_handler_registered = fork_guard::at_fork_child(close_lock_fds_in_forked_child);

// A descriptor of the cache lock's file, registered in lock_fds from its open to its close.
class LockFd {
public:
    explicit LockFd(int fd) : fd_(fd) {
        if (fd_ < 0) return;
        for (std::size_t i = 0; i < kLockSlots; ++i) {
            int expected = 0;
            if (lock_fds[i].compare_exchange_strong(expected, fd_ + 1, std::memory_order_relaxed)) {
                slot_ = static_cast<int>(i);
                return;
            }
        }
    }
    LockFd(LockFd &&other) noexcept : fd_(other.fd_), slot_(other.slot_) {
        other.fd_ = -1;
        other.slot_ = -1;
    }
    LockFd &operator=(LockFd &&other) noexcept {
        if (this != &other) {
            reset();
            fd_ = other.fd_;
            slot_ = other.slot_;
            other.fd_ = -1;
            other.slot_ = -1;
        }
        return *this;
    }
    LockFd(const LockFd &) = delete;
    LockFd &operator=(const LockFd &) = delete;
    ~LockFd() { reset(); }
    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }

private:
    void reset() {
        const int fd = fd_;
        fd_ = -1;
        if (fd < 0) return;
        if (slot_ >= 0) {
            int expected = fd + 1;
            const auto slot = static_cast<std::size_t>(slot_);
            slot_ = -1;
            // Not ours any more: this is a forked child, which closed it (its number may be
            // another file's now). Only a thread that forked holding the lock gets here so.
            if (!lock_fds[slot].compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return;
        }
        ::close(fd);
    }

    int fd_ = -1;
    int slot_ = -1;
};

// The exclusive cache lock: held by whoever removes things, so removers never race.
class CacheLock {
public:
    // Errors: io. With `wait` false, nullopt when another holds it.
    static Result<std::optional<CacheLock>> acquire(const Root &root, bool wait) {
        const std::string path = root.path + "/" + kLockFile;
        const bool shared = folder_trust::shared(root.folder);
        LockFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, shared ? 0660 : 0600));
        struct stat st {};
        if (!fd.valid()) {
            const int err = errno;
            // Say whose it is when that is why (not the bare EACCES).
            if (::lstat(path.c_str(), &st) == 0 && !folder_trust::trusted_owner(root.folder, st.st_uid)) {
                return folder_trust::foreign_error(root.folder, "cache lock", path, st);
            }
            return io_error("cannot open the cache lock", path, err);
        }
        if (::fstat(fd.get(), &st) != 0) return io_error("cannot stat the cache lock", path, errno);
        // A lock someone untrusted owns is theirs to hold forever (or to swap for a link we
        // would have refused): never wait on it.
        if (!folder_trust::trusted_owner(root.folder, st.st_uid)) {
            return folder_trust::foreign_error(root.folder, "cache lock", path, st);
        }
        // Every member of a team takes this lock: group-writable whatever the umask (this also
        // repairs a lock made 0600 before the cache became a team cache, when it is ours).
        if (shared && st.st_uid == ::geteuid() && (st.st_mode & 0060) != 0060 && ::fchmod(fd.get(), 0660) != 0) {
            return io_error("cannot make the cache lock group-writable", path, errno);
        }
        while (::flock(fd.get(), LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
            if (errno == EINTR) continue;
            if (errno == EWOULDBLOCK && !wait) return std::optional<CacheLock>{};
            return io_error("cannot lock", path, errno);
        }
        return std::optional<CacheLock>(CacheLock(std::move(fd)));
    }

private:
    explicit CacheLock(LockFd fd) : fd_(std::move(fd)) {}
    LockFd fd_;  // closing it releases the lock
};

bool folder_exists(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The usage record: the cache's size at its last measurement. Its mtime is when.
struct Usage {
    std::uint64_t bytes = 0;
    std::int64_t measured_ns = 0;
};

std::optional<Usage> read_usage(const std::string &cache_dir) {
    const std::string path = cache_dir + "/" + kUsageFile;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    auto text = read_small_file(path, 4096);
    unsigned long long bytes = 0;
    if (!text || std::sscanf(text->c_str(), "kjit-usage 1\nbytes %llu\n", &bytes) != 1) return std::nullopt;
    return Usage{bytes, mtime_ns(st)};
}

void write_usage(const std::string &cache_dir, const Inventory &inv, bool shared) {
    const std::string path = cache_dir + "/" + kUsageFile;
    const std::string temp = cache_dir + "/" + std::string(kUsageTempPrefix) + std::to_string(::getpid()) + "-" +
                             std::to_string(::gettid()) + "-" + std::to_string(usage_sequence.fetch_add(1));
    const std::string text = "kjit-usage 1\nbytes " + std::to_string(inv.entry_bytes) + "\nentries " +
                             std::to_string(inv.entries.size()) + "\n";
    if (auto st = write_new_file(temp, text, shared ? kGroupWritable : 0); !st) {
        ::unlink(temp.c_str());
        log().debug("cannot record the cache's usage: {}", st.error().message);
        return;
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        log().debug("cannot record the cache's usage in '{}': {}", path, errno_text(errno));
        ::unlink(temp.c_str());
    }
}

// Removes entries of `inv` by recency (see prune()); updates `inv` to what is left.
void remove_by_recency(Inventory &inv, const PruneOptions &options, std::int64_t now_ns, PruneReport &report) {
    // A record in the future counts as now, and ages from now on (cache_entry::effective_recency).
    for (EntryInfo &e : inv.entries) {
        if (e.last_used_ns > now_ns) {
            cache_entry::rewrite_future_mtime(e.path, e.last_used_ns, now_ns);
            e.last_used_ns = now_ns;
        }
    }
    std::sort(inv.entries.begin(), inv.entries.end(),
              [](const EntryInfo &a, const EntryInfo &b) { return a.last_used_ns < b.last_used_ns; });
    std::vector<EntryInfo> kept;
    std::size_t i = 0;
    for (; i < inv.entries.size(); ++i) {
        const EntryInfo &e = inv.entries[i];
        const bool too_old =
            options.everything || (options.older_than_ns && e.last_used_ns < now_ns - *options.older_than_ns);
        const bool over = options.max_bytes && inv.entry_bytes > *options.max_bytes;
        if (!too_old && !over) break;  // sorted: every later entry is more recent
        // A running batch of this process handed it out (its record may be old): not this one,
        // but a more recent one may go.
        if (options.spare_in_use && cache_entry::pinned(e.key)) {
            ++report.spared_in_use;
            kept.push_back(e);
            continue;
        }
        auto retired = cache_entry::retire(e.path, options.spare_in_use);
        if (!retired) {
            log().warn("{}", retired.error().message);
            kept.push_back(e);
            continue;
        }
        if (*retired == cache_entry::Retired::in_use) {
            // Later entries are more recent still: in use too.
            report.spared_in_use += inv.entries.size() - i;
            break;
        }
        inv.entry_bytes -= e.bytes;
        if (*retired == cache_entry::Retired::removed) {
            ++report.removed_entries;
            report.removed_bytes += e.bytes;
            log().debug("removed cache entry {} ({} bytes)", e.path, e.bytes);
        }
    }
    kept.insert(kept.end(), inv.entries.begin() + static_cast<std::ptrdiff_t>(i), inv.entries.end());
    inv.entries = std::move(kept);
    report.kept_entries = inv.entries.size();
    report.kept_bytes = inv.entry_bytes;
}

// take_inventory() of a folder already checked (open_root).
Result<Inventory> inventory_of(const std::string &cache_dir);

// Removes the variants files of `inv` that list no entry left in it (after remove_by_recency):
// they could only send a lookup to entries that are gone. With `keep_young`, one written within
// the last kRecencyStepNs is kept: a publish may be listing an entry made after the inventory.
void remove_orphan_variants(Inventory &inv, std::int64_t now_ns, bool keep_young, PruneReport &report) {
    std::unordered_set<std::string> keys;
    for (const EntryInfo &e : inv.entries) keys.insert(e.key);
    std::vector<VariantsInfo> kept;
    for (VariantsInfo &v : inv.variants) {
        bool orphan = !keep_young || v.mtime_ns < now_ns - cache_entry::kRecencyStepNs;
        if (orphan) {
            for (const std::string &k : cache_entry::read_variants(v.path)) {
                if (keys.count(k)) {
                    orphan = false;
                    break;
                }
            }
        }
        if (orphan && ::unlink(v.path.c_str()) == 0) {
            inv.entry_bytes -= std::min(inv.entry_bytes, v.bytes);
            ++report.removed_variants;
            continue;
        }
        kept.push_back(std::move(v));
    }
    inv.variants = std::move(kept);
    report.kept_bytes = inv.entry_bytes;
}

void sweep_stale_transit(const Inventory &inv, std::int64_t now_ns, PruneReport &report) {
    for (const TransitInfo &t : inv.in_transit) {
        cache_entry::rewrite_future_mtime(t.path, t.mtime_ns, now_ns);  // then it goes stale in time
        if (t.mtime_ns < now_ns - kStaleTempNs) {
            remove_tree(t.path);
            ++report.removed_in_transit;
        }
    }
}

Result<PruneReport> remove_entries(const std::string &cache_dir, const PruneOptions &options) {
    PruneReport report;
    auto root = open_root(cache_dir);
    if (!root) return std::move(root).error();
    if (!folder_exists(root->path)) return report;
    auto lock = CacheLock::acquire(*root, true);
    if (!lock) return std::move(lock).error();
    auto inv = inventory_of(root->path);
    if (!inv) return std::move(inv).error();
    const std::int64_t now = realtime_ns();
    remove_by_recency(*inv, options, now, report);
    // clear (everything, in use or not) takes the young ones too.
    remove_orphan_variants(*inv, now, !(options.everything && !options.spare_in_use), report);
    sweep_stale_transit(*inv, now, report);
    write_usage(root->path, *inv, folder_trust::shared(root->folder));
    return report;
}

// Per-process throttle state of after_publish, per cache folder. A forked child starts its
// own, as a new process would (fork_guard.hpp): its lock may have been held at the fork.
struct EvictionState {
    std::int64_t last_sweep_ns = 0;       // when this process last swept stale temp folders
    std::int64_t last_measured_ns = 0;    // the usage record this process last saw
    std::uint64_t published_since = 0;    // bytes this process published since then
};

// The states of the kMaxEvictionStates cache folders published to last (a long-lived process
// may publish into any number of folders over its life).
class EvictionStates {
public:
    // The state of `cache_dir`, made the most recent; a new one (all zero) may push the least
    // recent out.
    EvictionState &of(const std::string &cache_dir) {
        if (auto found = index_.find(cache_dir); found != index_.end()) {
            order_.splice(order_.begin(), order_, found->second);
            return found->second->second;
        }
        order_.emplace_front(cache_dir, EvictionState{});
        index_.emplace(cache_dir, order_.begin());
        if (order_.size() > kMaxEvictionStates) {
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        return order_.front().second;
    }
    std::size_t size() const { return order_.size(); }

private:
    std::list<std::pair<std::string, EvictionState>> order_;  // most recent first
    std::unordered_map<std::string, std::list<std::pair<std::string, EvictionState>>::iterator> index_;
};
std::mutex eviction_mutex;
EvictionStates eviction_states;

void renew_eviction_state_in_forked_child() {
    fork_guard::renew(eviction_mutex);
    fork_guard::renew(eviction_states);
}
[[maybe_unused]] const bool eviction_fork_handler_registered =
    fork_guard::at_fork_child(renew_eviction_state_in_forked_child);

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
    const std::string s(text);
    auto bad = [&](const std::string &why) {
        return Error{Errc::invalid_argument, "size '" + s + "' is not a size (" + why +
                                                 "): use a decimal number of bytes, or one followed by K, M, G or T "
                                                 "(powers of 1024, optionally followed by B or iB), e.g. 5G, 512M or "
                                                 "1.5G"};
    };
    auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    if (s.empty()) return bad("it is empty");
    if (s[0] == '-') return bad("it is negative");
    std::size_t i = 0;
    std::uint64_t whole = 0;
    bool overflow = false;
    for (; i < s.size() && is_digit(s[i]); ++i) {
        overflow = overflow || __builtin_mul_overflow(whole, 10u, &whole) ||
                   __builtin_add_overflow(whole, static_cast<std::uint64_t>(s[i] - '0'), &whole);
    }
    if (i == 0) return bad("it does not start with a digit");
    if (i < s.size() && (s[i] == 'x' || s[i] == 'X')) return bad("hexadecimal is not accepted");
    // Up to 18 decimals count (the rest cannot change a size below 2^64 by a whole byte).
    std::uint64_t fraction = 0;
    std::uint64_t denominator = 1;
    if (i < s.size() && s[i] == '.') {
        const std::size_t first = ++i;
        for (; i < s.size() && is_digit(s[i]); ++i) {
            if (i - first < 18) {
                fraction = fraction * 10 + static_cast<std::uint64_t>(s[i] - '0');
                denominator *= 10;
            }
        }
        if (i == first) return bad("no digit after the decimal point");
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E') && i + 1 < s.size() &&
        (is_digit(s[i + 1]) || s[i + 1] == '+' || s[i + 1] == '-')) {
        return bad("an exponent is not accepted");
    }
    const std::string given_unit = s.substr(i);
    std::string unit = given_unit;
    for (char &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::uint64_t scale = 1;
    if (!unit.empty() && std::string_view("KMGT").find(unit[0]) != std::string_view::npos) {
        scale = std::uint64_t{1} << (10 * (std::string_view("KMGT").find(unit[0]) + 1));
        unit.erase(0, 1);
        if (unit == "IB") unit = "B";
    }
    if (!unit.empty() && unit != "B") return bad("unknown unit '" + given_unit + "'");
    std::uint64_t bytes = 0;
    __extension__ typedef unsigned __int128 Wide;  // fraction (< 10^18) times scale (<= 2^40)
    const Wide part = static_cast<Wide>(fraction) * scale / denominator;
    if (overflow || __builtin_mul_overflow(whole, scale, &bytes) ||
        __builtin_add_overflow(bytes, static_cast<std::uint64_t>(part), &bytes)) {
        return bad("it is too large: at most 18446744073709551615 bytes, just under 16 EiB");
    }
    return bytes;
}

Result<std::int64_t> parse_age(std::string_view text) {
    const std::string s(text);
    constexpr std::int64_t kMaxSeconds = std::numeric_limits<std::int64_t>::max() / 1'000'000'000;
    auto bad = [&](const std::string &why) {
        return Error{Errc::invalid_argument,
                     "age '" + s + "' is not an age (" + why + "): use a whole number with s, m, h, d or w, e.g. 30d or 12h"};
    };
    std::size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    if (digits == 0) return bad("it does not start with a digit");
    if (digits + 1 != s.size()) return bad(digits == s.size() ? "it has no unit" : "its unit is not one letter");
    std::int64_t unit_s = 0;
    switch (s.back()) {
        case 's': unit_s = 1; break;
        case 'm': unit_s = 60; break;
        case 'h': unit_s = 3600; break;
        case 'd': unit_s = 86400; break;
        case 'w': unit_s = 7 * 86400; break;
        default: return bad("unknown unit '" + s.substr(digits) + "'");
    }
    // Nanoseconds in an int64: under 292 years. 20000w wrapped around to a negative age, which
    // made `prune --older-than` remove every entry.
    std::int64_t n = 0;
    bool overflow = false;
    for (std::size_t i = 0; i < digits; ++i) {
        overflow = overflow || __builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, s[i] - '0', &n);
    }
    if (overflow || n > kMaxSeconds / unit_s) {
        return bad("it is too large: at most " + std::to_string(kMaxSeconds / unit_s) + s.substr(digits) +
                   ", about 292 years");
    }
    return n * unit_s * 1'000'000'000;
}

std::string format_size(std::uint64_t bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    if (u == 0) {
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    } else {
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    }
    return buf;
}

Result<Inventory> take_inventory(const std::string &cache_dir) {
    auto root = open_root(cache_dir);
    if (!root) return std::move(root).error();
    return inventory_of(root->path);
}

namespace {

Result<Inventory> inventory_of(const std::string &cache_dir) {
    Inventory inv;
    auto root = list_dir(cache_dir, true);
    if (!root) return std::move(root).error();
    for (const DirEntry &shard : *root) {
        if (!cache_entry::is_shard(shard.name) || !S_ISDIR(shard.st.st_mode)) {
            if (!is_own_root_file(shard.name)) ++inv.foreign;
            continue;
        }
        const std::string shard_path = cache_dir + "/" + shard.name;
        auto listing = list_dir(shard_path, true);
        if (!listing) return std::move(listing).error();
        for (const DirEntry &e : *listing) {
            const std::string path = shard_path + "/" + e.name;
            if (is_transit_name(e.name) && (S_ISDIR(e.st.st_mode) || S_ISREG(e.st.st_mode))) {
                inv.in_transit.push_back({path, disk_bytes(e.st) + (S_ISDIR(e.st.st_mode) ? tree_bytes(path) : 0),
                                          mtime_ns(e.st)});
                continue;
            }
            if (cache_entry::is_variants_name(e.name) && e.name.compare(0, 2, shard.name) == 0 &&
                S_ISREG(e.st.st_mode)) {
                inv.variants.push_back({path, disk_bytes(e.st), mtime_ns(e.st)});
                inv.entry_bytes += disk_bytes(e.st);
                continue;
            }
            if (!cache_entry::is_key(e.name) || e.name.compare(0, 2, shard.name) != 0 || !S_ISDIR(e.st.st_mode)) {
                ++inv.foreign;
                continue;
            }
            EntryInfo info;
            info.key = e.name;
            info.path = path;
            info.bytes = disk_bytes(e.st) + tree_bytes(path);
            info.last_used_ns = mtime_ns(e.st);
            inv.entry_bytes += info.bytes;
            inv.entries.push_back(std::move(info));
        }
    }
    return inv;
}

}  // namespace

std::uint64_t disk_usage(const std::string &folder) {
    struct stat st {};
    if (::lstat(folder.c_str(), &st) != 0) return 0;
    return disk_bytes(st) + (S_ISDIR(st.st_mode) ? tree_bytes(folder) : 0);
}

Result<Summary> summarize(const std::string &cache_dir) {
    auto inv = take_inventory(cache_dir);
    if (!inv) return std::move(inv).error();
    Summary s;
    s.entries = inv->entries.size();
    s.bytes = inv->entry_bytes;
    s.foreign = inv->foreign;
    for (const TransitInfo &t : inv->in_transit) {
        ++s.in_transit;
        s.in_transit_bytes += t.bytes;
    }
    for (const EntryInfo &e : inv->entries) {
        const std::string manifest_path = e.path + "/" + kManifestFile;
        std::string arch = "unknown";
        if (auto text = read_small_file(manifest_path, kMaxManifestBytes)) {
            if (auto m = cache_entry::parse_manifest(*text, manifest_path)) {
                arch = m->arch;
                if (!m->created.empty()) {
                    if (s.oldest_created.empty() || m->created < s.oldest_created) s.oldest_created = m->created;
                    if (s.newest_created.empty() || m->created > s.newest_created) s.newest_created = m->created;
                }
            }
        }
        ArchSummary &a = s.by_arch[arch];
        ++a.entries;
        a.bytes += e.bytes;
        if (s.least_recent_use_ns == 0 || e.last_used_ns < s.least_recent_use_ns) s.least_recent_use_ns = e.last_used_ns;
        s.most_recent_use_ns = std::max(s.most_recent_use_ns, e.last_used_ns);
    }
    return s;
}

std::size_t eviction_state_count() {
    std::lock_guard<std::mutex> lock(eviction_mutex);
    return eviction_states.size();
}

Result<PruneReport> prune(const std::string &cache_dir, const PruneOptions &options) {
    return remove_entries(cache_dir, options);
}

Result<PruneReport> clear(const std::string &cache_dir) {
    PruneOptions all;
    all.everything = true;
    all.spare_in_use = false;
    return remove_entries(cache_dir, all);
}

namespace {

// Removes the stale folders in transit of every shard (a listing of the top folder and of each
// shard; entries are not opened). Returns how many went.
std::size_t sweep_shards(const std::string &cache_dir, std::int64_t now_ns) {
    std::size_t removed = 0;
    auto root = list_dir(cache_dir, true);
    if (!root) return 0;
    for (const DirEntry &r : *root) {
        const std::string path = cache_dir + "/" + r.name;
        if (starts_with(r.name, kUsageTempPrefix) && mtime_ns(r.st) < now_ns - kStaleTempNs) {
            if (::unlink(path.c_str()) == 0) ++removed;
            continue;
        }
        if (!cache_entry::is_shard(r.name) || !S_ISDIR(r.st.st_mode)) continue;
        auto listing = list_dir(path, true);
        if (!listing) continue;
        for (const DirEntry &e : *listing) {
            const bool transit = is_transit_name(e.name) && (S_ISDIR(e.st.st_mode) || S_ISREG(e.st.st_mode));
            if (transit) cache_entry::rewrite_future_mtime(path + "/" + e.name, mtime_ns(e.st), now_ns);
            if (transit &&
                mtime_ns(e.st) < now_ns - kStaleTempNs) {
                remove_tree(path + "/" + e.name);
                ++removed;
            }
        }
    }
    return removed;
}

}  // namespace

void after_publish(const std::string &given_dir, std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes) {
    const std::int64_t now = realtime_ns();
    // Through a link, eviction works on the folder it points to (list_dir refuses links).
    auto root = open_root(given_dir);
    if (!root) {
        log().warn("no sweep or eviction: {}", root.error().message);
        return;
    }
    const std::string &cache_dir = root->path;
    bool sweep_due = false;
    bool measure_due = false;
    Usage usage{};
    bool have_usage = false;
    if (max_bytes) {
        if (const std::optional<Usage> read = read_usage(cache_dir)) {
            usage = *read;
            have_usage = true;
        }
    }
    {
        std::lock_guard<std::mutex> lock(eviction_mutex);
        EvictionState &state = eviction_states.of(cache_dir);
        if (now - state.last_sweep_ns > kSweepIntervalNs) {
            state.last_sweep_ns = now;
            sweep_due = true;
        }
        if (max_bytes) {
            const std::int64_t measured = have_usage ? usage.measured_ns : 0;
            if (measured != state.last_measured_ns) {  // measured again, by anyone: count from there
                state.last_measured_ns = measured;
                state.published_since = 0;
            }
            state.published_since += entry_bytes;
            // A record from the future (a clock ahead) is due too: it would never be 30 s old.
            measure_due = !have_usage || usage.measured_ns > now || now - usage.measured_ns > kEvictionIntervalNs ||
                          usage.bytes + state.published_since > *max_bytes;
        }
    }
    if (!sweep_due && !measure_due) return;
    auto lock = CacheLock::acquire(*root, false);
    if (!lock) {
        log().debug("no sweep or eviction: {}", lock.error().message);
        return;
    }
    if (!*lock) return;  // another process is sweeping, measuring or evicting
    if (sweep_due) {
        const std::size_t swept = sweep_shards(cache_dir, now);
        counters().swept_transit_folders.fetch_add(swept, std::memory_order_relaxed);
        if (swept > 0) log().info("swept {} stale temp folders left by killed processes in '{}'", swept, cache_dir);
    }
    if (!measure_due) return;
    auto inv = inventory_of(cache_dir);
    if (!inv) {
        log().warn("no eviction: {}", inv.error().message);
        return;
    }
    counters().eviction_runs.fetch_add(1, std::memory_order_relaxed);
    if (inv->entry_bytes > *max_bytes) {
        PruneOptions options;
        options.max_bytes = static_cast<std::uint64_t>(static_cast<double>(*max_bytes) * kEvictionLowWater);
        PruneReport report;
        remove_by_recency(*inv, options, now, report);
        remove_orphan_variants(*inv, now, true, report);
        counters().evicted_entries.fetch_add(report.removed_entries, std::memory_order_relaxed);
        counters().evicted_bytes.fetch_add(report.removed_bytes, std::memory_order_relaxed);
        log().info("cache '{}' over its limit of {}: evicted {} entries ({}), {} in use kept; {} left", cache_dir,
                   format_size(*max_bytes), report.removed_entries, format_size(report.removed_bytes),
                   report.spared_in_use, format_size(inv->entry_bytes));
    }
    write_usage(cache_dir, *inv, folder_trust::shared(root->folder));
}

Freed make_room(const std::string &given_dir, std::uint64_t max_bytes, std::uint64_t needed_bytes) {
    Freed freed;
    auto root = open_root(given_dir);
    if (!root) {
        log().warn("no eviction to make room: {}", root.error().message);
        return freed;
    }
    auto lock = CacheLock::acquire(*root, false);
    if (!lock) {
        log().warn("no eviction to make room: {}", lock.error().message);
        return freed;
    }
    if (!*lock) return freed;  // another process is evicting or pruning: it may free room too
    auto inv = inventory_of(root->path);
    if (!inv) {
        log().warn("no eviction to make room: {}", inv.error().message);
        return freed;
    }
    counters().eviction_runs.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t size = inv->entry_bytes;
    PruneOptions options;
    options.max_bytes = std::min(static_cast<std::uint64_t>(static_cast<double>(std::min(max_bytes, size)) * kEvictionLowWater),
                                 size > needed_bytes ? size - needed_bytes : 0);
    PruneReport report;
    const std::int64_t now = realtime_ns();
    remove_by_recency(*inv, options, now, report);
    remove_orphan_variants(*inv, now, true, report);
    counters().evicted_entries.fetch_add(report.removed_entries, std::memory_order_relaxed);
    counters().evicted_bytes.fetch_add(report.removed_bytes, std::memory_order_relaxed);
    log().info("no room to publish in '{}' (full disk or quota): evicted {} entries ({}), {} in use kept; {} left",
               root->path, report.removed_entries, format_size(report.removed_bytes), report.spared_in_use,
               format_size(inv->entry_bytes));
    write_usage(root->path, *inv, folder_trust::shared(root->folder));
    freed.entries = report.removed_entries;
    freed.bytes = report.removed_bytes;
    return freed;
}

const char *to_string(Damage damage) {
    switch (damage) {
        case Damage::misplaced: return "misplaced";
        case Damage::missing_file: return "missing_file";
        case Damage::bad_manifest: return "bad_manifest";
        case Damage::bad_cubin: return "bad_cubin";
        case Damage::truncated_cubin: return "truncated_cubin";
        case Damage::sidecar_missing: return "sidecar_missing";
        case Damage::sidecar_damaged: return "sidecar_damaged";
        case Damage::sidecar_stale: return "sidecar_stale";
        case Damage::sidecar_wrong_name: return "sidecar_wrong_name";
        case Damage::stale_temp: return "stale_temp";
    }
    return "unknown";
}

bool VerifyReport::clean() const {
    return std::all_of(findings.begin(), findings.end(), [](const Finding &f) { return f.fixed; });
}

namespace {

// What verify concluded about one entry.
struct EntryVerdict {
    std::optional<Finding> fatal;    // the entry cannot serve: remove it
    std::optional<Finding> sidecar;  // the sidecar is wrong: rebuild it from `line`
    sidecar::Line line;              // the correct line for the entry's keyword
    std::vector<sidecar::Line> other_lines;  // other keywords' lines for this cubin version
    std::vector<std::string> stale_temps;    // temp files in the entry left by killed writers
};

Finding finding(const std::string &path, Damage damage, std::string detail) {
    Finding f;
    f.path = path;
    f.damage = damage;
    f.detail = std::move(detail);
    return f;
}

// The resolver's rule (name_resolver.cpp): size and mtime, and for a whole-second mtime a
// content hash that matches (`content` is the cubin's XXH3-64).
bool same_version(const sidecar::Line &l, const struct stat &st, std::uint64_t content) {
    if (l.cubin_size != static_cast<std::uint64_t>(st.st_size) || l.mtime_sec != st.st_mtim.tv_sec) return false;
    if (l.content_hash && *l.content_hash != content) return false;
    if (st.st_mtim.tv_nsec == 0) return l.content_hash.has_value();
    return l.mtime_nsec == static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
}

EntryVerdict check_entry(const std::string &entry, const std::string &key, std::int64_t now_ns) {
    EntryVerdict v;
    auto listing = list_dir(entry, false);
    if (!listing) {
        v.fatal = finding(entry, Damage::misplaced, listing.error().message);
        return v;
    }
    for (const DirEntry &f : *listing) {
        const bool temp = sidecar::is_temp_file_name(f.name) || starts_with(f.name, kDepsTempPrefix);
        if (temp && mtime_ns(f.st) < now_ns - kStaleTempNs) {
            v.stale_temps.push_back(entry + "/" + f.name);
        }
    }
    const std::string manifest_path = entry + "/" + kManifestFile;
    const std::string cubin_path = entry + "/" + kCubinFile;
    struct stat st {};
    if (::lstat(manifest_path.c_str(), &st) != 0) {
        v.fatal = finding(entry, Damage::missing_file, std::string(kManifestFile) + " is missing");
        return v;
    }
    auto text = read_small_file(manifest_path, kMaxManifestBytes);
    if (!text) {
        v.fatal = finding(entry, Damage::bad_manifest, "cannot read '" + manifest_path + "'");
        return v;
    }
    auto manifest = cache_entry::parse_manifest(*text, manifest_path);
    if (!manifest) {
        v.fatal = finding(entry, Damage::bad_manifest, manifest.error().message);
        return v;
    }
    if (manifest->key != key) {
        v.fatal = finding(entry, Damage::bad_manifest,
                          "'" + manifest_path + "' is for key " + manifest->key + ", not this entry's " + key);
        return v;
    }
    std::vector<std::string> required = {kSourceFile, kCubinFile};
    if (!manifest->include_paths.empty()) required.push_back(kDepsFile);
    struct stat cubin_st {};  // kept from the presence check: the cubin is stat'ed once
    for (const std::string &name : required) {
        if (::lstat((entry + "/" + name).c_str(), name == kCubinFile ? &cubin_st : &st) != 0) {
            v.fatal = finding(entry, Damage::missing_file, name + " is missing");
            return v;
        }
    }
    if (!S_ISREG(cubin_st.st_mode)) {
        v.fatal = finding(entry, Damage::bad_cubin, "'" + cubin_path + "' is not a regular file");
        return v;
    }
    if (static_cast<std::uint64_t>(cubin_st.st_size) != manifest->cubin_bytes) {
        v.fatal = finding(entry, Damage::truncated_cubin,
                          "'" + cubin_path + "' has " + std::to_string(cubin_st.st_size) + " bytes; " +
                              std::to_string(manifest->cubin_bytes) + " were published");
        return v;
    }
    auto table = SymbolTable::open_file(cubin_path);
    if (!table) {
        v.fatal = finding(entry, Damage::bad_cubin, table.error().message);
        return v;
    }
    // A same-size change (its mtime put back or not) shows only in the content.
    if (hash128_hex(table->image()) != manifest->cubin_hash) {
        v.fatal = finding(entry, Damage::bad_cubin,
                          "'" + cubin_path + "' does not match the XXH3-128 hash recorded in '" + manifest_path +
                              "' when it was published: it was changed on disk since");
        return v;
    }
    const std::uint64_t content = hash64(table->image());
    const bool has_kernel = std::any_of(table->functions().begin(), table->functions().end(),
                                        [&](const FunctionSymbol &f) { return f.name == manifest->name; });
    if (!has_kernel || !name_matcher::check_keyword(manifest->keyword).ok() ||
        !name_matcher::matches(manifest->name, manifest->keyword)) {
        v.fatal = finding(entry, Damage::bad_cubin,
                          "'" + cubin_path + "' holds no kernel '" + manifest->name + "' for keyword '" +
                              manifest->keyword + "'");
        return v;
    }

    // The line the sidecar must hold, from the cubin as it is and the manifest's name.
    v.line.keyword = manifest->keyword;
    v.line.name = manifest->name;
    v.line.cubin_size = static_cast<std::uint64_t>(cubin_st.st_size);
    v.line.mtime_sec = cubin_st.st_mtim.tv_sec;
    v.line.mtime_nsec = static_cast<std::uint32_t>(cubin_st.st_mtim.tv_nsec);
    if (v.line.mtime_nsec == 0 || young_at(v.line.mtime_sec, v.line.mtime_nsec, now_ns)) v.line.content_hash = content;

    const std::string sidecar_path = sidecar::path_for(cubin_path);
    const sidecar::Contents contents = sidecar::read(sidecar_path);
    if (contents.problem == sidecar::FileProblem::missing) {
        v.sidecar = finding(entry, Damage::sidecar_missing, "'" + sidecar_path + "' is missing");
        return v;
    }
    if (contents.problem != sidecar::FileProblem::none) {
        v.sidecar = finding(entry, Damage::sidecar_damaged,
                            "'" + sidecar_path + "': " + sidecar::to_string(contents.problem) +
                                (contents.detail.empty() ? "" : ": " + contents.detail));
        return v;
    }
    const sidecar::Line *mine = nullptr;
    for (const sidecar::Line &l : contents.lines) {
        if (l.keyword == manifest->keyword) {
            mine = &l;
        } else if (same_version(l, cubin_st, content)) {
            v.other_lines.push_back(l);
        }
    }
    if (!mine) {
        v.sidecar = finding(entry, Damage::sidecar_damaged,
                            "'" + sidecar_path + "' has no valid line for keyword '" + manifest->keyword + "'");
    } else if (!same_version(*mine, cubin_st, content)) {
        v.sidecar = finding(entry, Damage::sidecar_stale,
                            "'" + sidecar_path + "' was written for another version of the cubin");
    } else if (mine->name != manifest->name) {
        v.sidecar = finding(entry, Damage::sidecar_wrong_name,
                            "'" + sidecar_path + "' names '" + mine->name + "'; the kernel is '" + manifest->name + "'");
    }
    return v;
}

}  // namespace

Result<VerifyReport> verify(const std::string &given_dir, bool fix) {
    auto checked = open_root(given_dir);
    if (!checked) return std::move(checked).error();
    const std::string &cache_dir = checked->path;
    std::optional<CacheLock> held;
    if (fix && folder_exists(cache_dir)) {
        auto lock = CacheLock::acquire(*checked, true);
        if (!lock) return std::move(lock).error();
        held = std::move(*lock);
    }
    VerifyReport report;
    const std::int64_t now = realtime_ns();
    auto root = list_dir(cache_dir, true);
    if (!root) return std::move(root).error();
    for (const DirEntry &r : *root) {
        const std::string root_path = cache_dir + "/" + r.name;
        if (starts_with(r.name, kUsageTempPrefix) && mtime_ns(r.st) < now - kStaleTempNs) {
            Finding f = finding(root_path, Damage::stale_temp, "a usage record temp file left by a killed process");
            if (fix) {
                f.fixed = ::unlink(root_path.c_str()) == 0 || errno == ENOENT;
                f.action = "removed it";
            }
            report.findings.push_back(std::move(f));
        }
        if (!cache_entry::is_shard(r.name) || !S_ISDIR(r.st.st_mode)) continue;
        auto listing = list_dir(root_path, true);
        if (!listing) return std::move(listing).error();
        for (const DirEntry &e : *listing) {
            const std::string path = root_path + "/" + e.name;
            if (is_transit_name(e.name)) {
                if (mtime_ns(e.st) >= now - kStaleTempNs) continue;  // live, or nearly
                Finding f = finding(path, Damage::stale_temp, "a temp folder left by a killed writer or remover");
                if (fix) {
                    remove_tree(path);
                    struct stat gone {};
                    f.fixed = ::lstat(path.c_str(), &gone) != 0;
                    f.action = "removed it";
                }
                report.findings.push_back(std::move(f));
                continue;
            }
            if (!cache_entry::is_key(e.name)) continue;  // not the cache's: left alone
            ++report.entries_checked;
            if (e.name.compare(0, 2, r.name) != 0 || !S_ISDIR(e.st.st_mode)) {
                Finding f = finding(path, Damage::misplaced,
                                    S_ISDIR(e.st.st_mode) ? "an entry in shard " + r.name + " for key " + e.name
                                                          : "an entry name that is not a folder");
                if (fix) {
                    if (S_ISDIR(e.st.st_mode)) {
                        f.fixed = cache_entry::retire(path, false).ok();
                    } else {
                        f.fixed = ::unlink(path.c_str()) == 0;
                    }
                    f.action = "removed it";
                }
                report.findings.push_back(std::move(f));
                continue;
            }
            EntryVerdict v = check_entry(path, e.name, now);
            for (const std::string &t : v.stale_temps) {
                Finding f = finding(t, Damage::stale_temp, "a temp file left by a killed writer");
                if (fix) {
                    f.fixed = ::unlink(t.c_str()) == 0 || errno == ENOENT;
                    f.action = "removed it";
                }
                report.findings.push_back(std::move(f));
            }
            if (v.fatal) {
                if (fix) {
                    auto retired = cache_entry::retire(path, false);
                    v.fatal->fixed = retired.ok();
                    v.fatal->action = retired ? "removed the entry (the next kjit_compile rebuilds it)"
                                              : "could not remove the entry: " + retired.error().message;
                }
                report.findings.push_back(std::move(*v.fatal));
                continue;
            }
            if (v.sidecar) {
                if (fix) {
                    std::vector<sidecar::Line> lines = std::move(v.other_lines);
                    lines.push_back(v.line);
                    auto written = sidecar::write(sidecar::path_for(path + "/" + kCubinFile), lines);
                    v.sidecar->fixed = written.ok();
                    v.sidecar->action = written ? "rebuilt the sidecar from the cubin and the manifest"
                                                : "could not rebuild the sidecar: " + written.error().message;
                }
                report.findings.push_back(std::move(*v.sidecar));
                continue;
            }
            ++report.entries_ok;
        }
    }
    return report;
}

namespace {
std::atomic<Counters *> counters_slot{nullptr};
}  // namespace

Counters &counters() {
    // Leaked: usable during exit. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(counters_slot, [] { return new Counters(); });
}

}  // namespace kjit::cache_maintenance
