#include "store/cache_inventory.hpp"

#include "store/compile_lock.hpp"

#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace kjit::store::cache_inventory {

namespace {

using store::cache_entry::kManifestFile;

}  // namespace

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The entries of folder `path` (not . and ..), each lstat'ed. Errors: io; ENOENT is reported
// as an empty list with IfMissing::empty.
Result<std::vector<DirEntry>> list_dir(const std::string &path, IfMissing if_missing) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && if_missing == IfMissing::empty) return std::vector<DirEntry>{};
        return io_error("cannot open folder", path, errno);
    }
    KJIT_TRY_ASSIGN(auto dir, FolderReader::adopt(fd, path));
    std::vector<DirEntry> out;
    for (;;) {
        KJIT_TRY_ASSIGN(auto d, dir.next());
        if (!d) return out;
        DirEntry e;
        e.name = (d)->d_name;
        if (::fstatat(dir.fd(), e.name.c_str(), &e.st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
        out.push_back(std::move(e));
    }
}

namespace {

// What the disk holds for one file or folder, as du counts it (st_blocks is in 512-byte units
// whatever the file system's block size).
std::uint64_t disk_bytes(const struct stat &st) { return static_cast<std::uint64_t>(st.st_blocks) * 512; }

// The disk space of what a folder tree holds, not counting the folder itself (entries are flat;
// transit folders may hold an old entry in a subfolder).
std::uint64_t tree_bytes(const std::string &path, int depth = 0) {
    auto listing = list_dir(path, IfMissing::empty);
    if (!listing) return 0;
    std::uint64_t n = 0;
    for (const DirEntry &e : *listing) {
        n += disk_bytes(e.st);
        if (S_ISDIR(e.st.st_mode) && depth < 2) n += tree_bytes(path + "/" + e.name, depth + 1);
    }
    return n;
}

// A probe's record (NVRTC's or nvJitLink's) or one of its temp files.
bool is_probe_record(std::string_view name) {
    return starts_with(name, cache_layout::kNvrtcRecordPrefix) ||
           starts_with(name, cache_layout::kNvJitLinkRecordPrefix);
}

bool is_own_root_file(std::string_view name) {
    return name == cache_layout::kRemoversLockFile || name == kUsageFile || starts_with(name, kUsageTempPrefix) ||
           name == cache_layout::kCompileLockFile || is_probe_record(name) || name == cache_layout::kPchPricesFile ||
           starts_with(name, cache_layout::kPchPricesTempPrefix);
}

}  // namespace

bool is_root_temp(std::string_view name) {
    return starts_with(name, kUsageTempPrefix) || starts_with(name, cache_layout::kPchPricesTempPrefix) ||
           (is_probe_record(name) && name.find(cache_layout::kRecordTempInfix) != std::string_view::npos);
}

bool is_transit_name(std::string_view name) {
    return starts_with(name, store::cache_entry::kTempPrefix) || starts_with(name, store::cache_entry::kTrashPrefix);
}

Result<Root> open_root(const std::string &cache_dir) {
    KJIT_TRY_ASSIGN(auto folder, folder_trust::check_cache_folder(cache_dir));
    return root_of(cache_dir, std::move(folder));
}

Root root_of(const std::string &cache_dir, folder_trust::CacheFolder folder) {
    Root root;
    root.path = folder.exists ? folder.real_path : cache_dir;
    root.folder = std::move(folder);
    return root;
}

void CacheLock::unlock() noexcept {
    if (fd_.valid()) (void)::flock(fd_.get(), LOCK_UN);
}

CacheLock &CacheLock::operator=(CacheLock &&other) noexcept {
    if (this != &other) {
        unlock();
        fd_ = std::move(other.fd_);
    }
    return *this;
}

Result<std::optional<CacheLock>> CacheLock::acquire(const Root &root, Wait wait) {
    const std::string path = root.path + "/" + cache_layout::kRemoversLockFile;
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
    while (::flock(fd.get(), LOCK_EX | (wait == Wait::until_free ? 0 : LOCK_NB)) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK && wait == Wait::not_at_all) return std::optional<CacheLock>{};
        return io_error("cannot lock", path, errno);
    }
    return std::optional<CacheLock>(CacheLock(std::move(fd)));
}

bool folder_exists(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<Inventory> take_inventory(const std::string &cache_dir) {
    KJIT_TRY_ASSIGN(auto root, open_root(cache_dir));
    return inventory_of(root.path);
}

Result<Inventory> inventory_of(const std::string &cache_dir) {
    Inventory inv;
    KJIT_TRY_ASSIGN(auto root, list_dir(cache_dir, IfMissing::empty));
    for (const DirEntry &shard : root) {
        if (!store::cache_entry::is_shard(shard.name) || !S_ISDIR(shard.st.st_mode)) {
            if (!is_own_root_file(shard.name)) ++inv.foreign;
            continue;
        }
        const std::string shard_path = cache_dir + "/" + shard.name;
        KJIT_TRY_ASSIGN(auto listing, list_dir(shard_path, IfMissing::empty));
        for (const DirEntry &e : listing) {
            const std::string path = shard_path + "/" + e.name;
            if (is_transit_name(e.name) && (S_ISDIR(e.st.st_mode) || S_ISREG(e.st.st_mode))) {
                inv.in_transit.push_back(
                    {path, disk_bytes(e.st) + (S_ISDIR(e.st.st_mode) ? tree_bytes(path) : 0), mtime_ns(e.st)});
                continue;
            }
            if (store::cache_entry::is_variants_name(e.name) && e.name.compare(0, 2, shard.name) == 0 &&
                S_ISREG(e.st.st_mode)) {
                inv.variants.push_back({path, disk_bytes(e.st), mtime_ns(e.st)});
                inv.entry_bytes += disk_bytes(e.st);
                continue;
            }
            if (!store::cache_entry::is_key(e.name) || e.name.compare(0, 2, shard.name) != 0 ||
                !S_ISDIR(e.st.st_mode)) {
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

std::uint64_t disk_usage(const std::string &folder) {
    struct stat st {};
    if (::lstat(folder.c_str(), &st) != 0) return 0;
    return disk_bytes(st) + (S_ISDIR(st.st_mode) ? tree_bytes(folder) : 0);
}

namespace {

// A manifest's `created` ("2025-01-31T12:00:00Z", as store::cache_entry::publish writes it) as nanoseconds since
// the Unix epoch; 0 for text of another shape.
std::int64_t created_ns(const std::string &text) {
    struct tm utc {};
    const char *end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &utc);
    if (!end || *end != '\0') return 0;
    return static_cast<std::int64_t>(::timegm(&utc)) * 1'000'000'000;
}

}  // namespace

Result<Summary> summarize(const std::string &cache_dir) {
    KJIT_TRY_ASSIGN(auto inv, take_inventory(cache_dir));
    Summary s;
    s.entries = inv.entries.size();
    s.bytes = inv.entry_bytes;
    s.foreign = inv.foreign;
    for (const TransitInfo &t : inv.in_transit) {
        ++s.in_transit;
        s.in_transit_bytes += t.bytes;
    }
    for (const EntryInfo &e : inv.entries) {
        const std::string manifest_path = e.path + "/" + kManifestFile;
        std::string arch = "unknown";
        if (auto text = read_small_file(manifest_path, kMaxManifestBytes)) {
            if (auto m = store::cache_entry::parse_manifest(*text, manifest_path)) {
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
        if (s.least_recent_use_ns == 0 || e.last_used_ns < s.least_recent_use_ns)
            s.least_recent_use_ns = e.last_used_ns;
        s.most_recent_use_ns = std::max(s.most_recent_use_ns, e.last_used_ns);
    }
    s.oldest_created_ns = created_ns(s.oldest_created);
    s.newest_created_ns = created_ns(s.newest_created);
    return s;
}

}  // namespace kjit::store::cache_inventory
