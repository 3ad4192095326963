// Cache maintenance: seeing, bounding, checking and cleaning a cubin cache folder, as ccache
// does for its own. Serves the size limit that kjit_compile enforces after a publish, and the
// `kjit cache` command (stats, verify, prune, clear). Knows the entry layout (cache_entry), the
// sidecar store, the symbol scanner and the name matcher; never NVRTC.
//
// Concurrency: every operation here works on a cache that other threads and processes are
// using. Entries are removed whole and atomically (cache_entry::retire), never one that is in
// use (a recent recency record) unless the caller asks for it (clear, or a broken entry), and
// only folders of the cache's own shape are touched: anything else in the folder is left alone.
// Operations that remove things hold an exclusive flock on <cache>/.kjit-lock, so two of them
// never race each other; hits, loads and publishes take no lock.
#pragma once

#include "status.hpp"

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache_maintenance {

// Eviction after a publish brings the cache down to this share of the limit, so that it does
// not run again at the very next publish.
constexpr double kEvictionLowWater = 0.9;
// After a publish, the cache is re-measured at most this often per process unless what this
// process published since the last measurement may have crossed the limit.
constexpr std::int64_t kEvictionIntervalNs = 30'000'000'000;

// "5G", "512M", "1.5G", "2GiB", "100k", "12345" (bytes): a decimal number (digits, optionally a
// point and more digits), then optionally K, M, G or T (powers of 1024, either case), then
// optionally "B" or "iB". Nothing else: no sign, hexadecimal, exponent or space. Errors:
// invalid_argument saying what is wrong and what is accepted (also for more than 2^64 - 1).
Result<std::uint64_t> parse_size(std::string_view text);
// "30d", "12h", "45m", "90s", "2w" as nanoseconds: a whole number and one unit letter. Errors:
// invalid_argument, also for an age that does not fit in int64 nanoseconds (about 292 years).
Result<std::int64_t> parse_age(std::string_view text);
// "1.5 GiB", for people.
std::string format_size(std::uint64_t bytes);

// Sizes here are disk space as du counts it: st_blocks * 512 of each folder and file (a 4 KB
// entry of five small files takes 24 KiB with 4 KiB blocks), so a limit bounds the disk.
struct EntryInfo {
    std::string key;
    std::string path;          // the entry folder
    std::uint64_t bytes = 0;   // disk space of the folder and its files
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
    std::int64_t least_recent_use_ns = 0, most_recent_use_ns = 0;
    std::map<std::string, ArchSummary> by_arch;  // "unknown" for an unreadable manifest
    std::size_t in_transit = 0;
    std::uint64_t in_transit_bytes = 0;
    std::size_t foreign = 0;
};
Result<Summary> summarize(const std::string &cache_dir);

struct PruneOptions {
    std::optional<std::uint64_t> max_bytes;    // remove least recently used entries down to this
    std::optional<std::int64_t> older_than_ns;  // remove entries not used for this long
    bool everything = false;                   // remove every entry (clear)
    bool spare_in_use = true;                  // false: in-use entries go too (clear)
};

struct PruneReport {
    std::size_t removed_entries = 0;
    std::uint64_t removed_bytes = 0;
    std::size_t spared_in_use = 0;  // would have gone, but in use (see cache_entry::kInUseWindowNs)
    std::size_t removed_in_transit = 0;  // stale .tmp-/.trash- folders swept
    // Variants files none of whose keys is left (written over a minute ago: a publish may be
    // listing a key the inventory did not see yet).
    std::size_t removed_variants = 0;
    std::size_t kept_entries = 0;
    std::uint64_t kept_bytes = 0;
};

// Removes entries by recency: those not used within older_than_ns, then the least recently
// used until the rest fit in max_bytes; sweeps stale folders in transit. Blocks on the cache
// lock. Errors: io.
Result<PruneReport> prune(const std::string &cache_dir, const PruneOptions &options);
// Removes every entry (in use or not) and every stale folder in transit; live publishes in
// other processes are left to finish. Blocks on the cache lock. Errors: io.
Result<PruneReport> clear(const std::string &cache_dir);

// After a publish, stale .tmp-/.trash- folders (left by killed processes, older than
// cache_entry::kStaleTempNs) are swept at most this often per process and cache folder.
constexpr std::int64_t kSweepIntervalNs = 600'000'000'000;

// Called by the cache after it published an entry of `entry_bytes`. Sweeps stale folders in
// transit when due (see kSweepIntervalNs; a listing of the shards, no entry is opened) and, under
// a limit of `max_bytes`, re-measures the cache when due (throttled, see kEvictionIntervalNs)
// and evicts least recently used entries down to kEvictionLowWater of the limit. Skips the work
// when another process holds the cache lock. Never fails the publish: problems are logged.
void after_publish(const std::string &cache_dir, std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes);

struct Freed {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
};

// Called by the cache when a publish under a limit of `max_bytes` failed for lack of space
// (ENOSPC, EDQUOT), before it tries once more (eviction after publishes never runs on a full
// disk: the publish fails first). Measures the cache now and evicts least recently used
// entries not in use down to kEvictionLowWater of the limit or of the cache's size, whichever
// is smaller, and at least `needed_bytes` below its size: the disk is full, so room is made
// even in a cache within its limit. Does nothing when another process holds the cache lock (it
// is evicting or pruning). Never fails: problems are logged.
Freed make_room(const std::string &cache_dir, std::uint64_t max_bytes, std::uint64_t needed_bytes);

// after_publish keeps its throttle state (last sweep, last measurement seen, bytes published
// since) for at most this many cache folders per process, the least recently published-to
// forgotten first: forgetting costs one early sweep or measurement. For tests: how many it
// holds now.
constexpr std::size_t kMaxEvictionStates = 64;
std::size_t eviction_state_count();

enum class Damage {
    misplaced,         // an entry folder in the wrong shard, or not a folder
    missing_file,      // manifest.txt, source.cu, kernel.cubin or deps.txt is missing
    bad_manifest,      // manifest.txt unreadable, failing its check line, or not a manifest for this entry
    bad_cubin,         // the cubin is not a CUDA ELF, not the bytes published, or lacks its kernel
    truncated_cubin,   // the cubin's size differs from the one recorded at publish
    sidecar_missing,   // no kernel.cubin.name
    sidecar_damaged,   // unreadable, garbage, or no line for the entry's keyword
    sidecar_stale,     // its line belongs to another version of the cubin
    sidecar_wrong_name,  // its line names another kernel than the manifest
    stale_temp,        // a temp folder or temp file left by a killed writer
};
const char *to_string(Damage damage);

struct Finding {
    std::string path;
    Damage damage;
    std::string detail;
    bool fixed = false;
    std::string action;  // with fix: "removed the entry", "rebuilt the sidecar", ...
};

struct VerifyReport {
    std::size_t entries_checked = 0;
    std::size_t entries_ok = 0;
    std::vector<Finding> findings;
    bool clean() const;  // nothing found, or everything found fixed
};

// Checks every entry: complete, its manifest passing its check line, its cubin a CUDA ELF of the
// recorded size and XXH3-128 holding the kernel its manifest names, its sidecar agreeing with
// the cubin and the manifest; and looks for stale temp folders and files. With `fix`: rebuilds
// damaged sidecars from the manifest's name (only from a manifest that passes its check, with
// the name found in the cubin's function symbols and passing the keyword rule),
// removes entries that cannot be repaired (the next kjit_compile rebuilds them) and sweeps
// stale temps, under the cache lock. Errors: io when the folder cannot be read.
Result<VerifyReport> verify(const std::string &cache_dir, bool fix);

// Process-wide counts of the eviction after publishes (for kjit_get_stats).
struct Counters {
    std::atomic<std::uint64_t> eviction_runs{0};  // measurements of the cache
    std::atomic<std::uint64_t> evicted_entries{0};
    std::atomic<std::uint64_t> evicted_bytes{0};
    std::atomic<std::uint64_t> swept_transit_folders{0};  // stale temp folders swept after publishes
};
Counters &counters();

}  // namespace kjit::cache_maintenance
