// Cache inventory: what a cubin cache folder holds, seen by walking its shards (entries, folders
// in transit, variants files, their disk space) and, for `kjit cache stats`, what the manifests
// say. Also what every maintenance module shares: the cache folder as maintenance opens it
// (checked as kjit_compile checks it, links resolved) and the remover's exclusive lock on
// <cache>/.kjit-lock. Eviction (cache_eviction.hpp) and verification (cache_verification.hpp)
// build on it; it knows neither. Knows the entry layout (cache_entry) and folder trust.
//
// Concurrency: every operation here works on a cache that other threads and processes are
// using. Only folders of the cache's own shape are counted as entries: anything else in the
// folder is counted as foreign and left alone. Operations that remove things hold the cache
// lock, so two of them never race each other; hits, loads and publishes take no lock.
#pragma once

#include "store/cache_layout.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/status.hpp"

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::store::cache_inventory {

// Sizes here are disk space as du counts it: st_blocks * 512 of each folder and file (a 4 KB
// entry of five small files takes 24 KiB with 4 KiB blocks), so a limit bounds the disk.
struct EntryInfo {
    std::string key;
    std::string path;               // the entry folder
    std::uint64_t bytes = 0;        // disk space of the folder and its files
    std::int64_t last_used_ns = 0;  // the folder's mtime: its recency record
};

struct TransitInfo {  // a .tmp- or .trash- folder or file
    std::string path;
    std::uint64_t bytes = 0;
    std::int64_t mtime_ns = 0;
};

// A variants file (cache_entry.hpp): the keys of one source key's results.
struct VariantsInfo {
    std::string path;
    std::uint64_t bytes = 0;
    std::int64_t mtime_ns = 0;  // its last write
};

struct Inventory {
    std::vector<EntryInfo> entries;
    std::vector<TransitInfo> in_transit;  // folders, and temp files of variants files
    std::vector<VariantsInfo> variants;
    // Of the entries and the variants files: what a size limit bounds.
    std::uint64_t entry_bytes = 0;
    std::size_t foreign = 0;  // names in the folder not of the cache's shape (left alone)
};

// The disk space of a folder and everything in it (two levels down), as du counts it; 0 when
// it is gone.
std::uint64_t disk_usage(const std::string &folder);

// Every entry and folder in transit under `cache_dir`, by walking its shards (no file is read).
// A missing cache folder is an empty inventory. Errors: io when the folder cannot be read.
Result<Inventory> take_inventory(const std::string &cache_dir);

struct ArchSummary {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
};

// `kjit cache stats`: the inventory plus what the manifests say.
struct Summary {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
    std::string oldest_created, newest_created;  // manifest times, UTC; empty without entries
    // The same as nanoseconds since the Unix epoch; 0 without entries.
    std::int64_t oldest_created_ns = 0, newest_created_ns = 0;
    std::int64_t least_recent_use_ns = 0, most_recent_use_ns = 0;
    std::map<std::string, ArchSummary> by_arch;  // "unknown" for an unreadable manifest
    std::size_t in_transit = 0;
    std::uint64_t in_transit_bytes = 0;
    std::size_t foreign = 0;
};
Result<Summary> summarize(const std::string &cache_dir);

// ---- Shared by the maintenance modules (eviction, verification); not for other callers ----

// The usage record in the cache folder (cache_eviction.cpp writes it) and its temp files.
using cache_layout::kUsageFile;
using cache_layout::kUsageTempPrefix;
// A manifest larger than this is not read (it is damaged).
constexpr std::size_t kMaxManifestBytes = 1u << 20;

bool starts_with(std::string_view s, std::string_view prefix);
// A temp file of one of the records at the top (usage, the probes of NVRTC and nvJitLink), which a
// killed writer may leave.
bool is_root_temp(std::string_view name);
// A .tmp- or .trash- name: an entry being written or removed.
bool is_transit_name(std::string_view name);
bool folder_exists(const std::string &path);

struct DirEntry {
    std::string name;
    struct stat st;
};

// What list_dir makes of a folder that is not there.
enum class IfMissing { empty, error };
// The entries of folder `path` (not . and ..), each lstat'ed. Errors: io; ENOENT is an empty
// list with IfMissing::empty.
Result<std::vector<DirEntry>> list_dir(const std::string &path, IfMissing if_missing);

// The cache folder as maintenance works on it: checked as kjit_compile checks it (a foreign
// folder is refused), and, when it is a link, the folder it points to, so that every listing
// below can refuse links (list_dir opens with O_NOFOLLOW). A missing folder keeps its path.
struct Root {
    std::string path;
    folder_trust::CacheFolder folder;
};

Result<Root> open_root(const std::string &cache_dir);
// The Root of `cache_dir` as `folder` (its check, made by the caller) says it is.
Root root_of(const std::string &cache_dir, folder_trust::CacheFolder folder);

// take_inventory() of a folder already checked (open_root).
Result<Inventory> inventory_of(const std::string &cache_dir);

// The exclusive cache lock: held by whoever removes things, so removers never race.
class CacheLock {
public:
    enum class Wait { until_free, not_at_all };
    // Errors: io. With Wait::not_at_all, nullopt when another holds it.
    static Result<std::optional<CacheLock>> acquire(const Root &root, Wait wait);

    CacheLock(CacheLock &&) noexcept = default;
    CacheLock &operator=(CacheLock &&other) noexcept;
    CacheLock(const CacheLock &) = delete;
    CacheLock &operator=(const CacheLock &) = delete;
    // Unlocks before the descriptor closes: a flock lives as long as any copy of its open file
    // description, and a child forked between the open and the descriptor's registration
    // (LockFd) keeps one the fork handler cannot close. Closing alone would leave the lock to
    // that child, for its whole life.
    ~CacheLock() { unlock(); }

private:
    explicit CacheLock(LockFd fd) : fd_(std::move(fd)) {}
    void unlock() noexcept;
    LockFd fd_;  // the locked lock file; empty once moved from
};

}  // namespace kjit::store::cache_inventory
