/**
 * @file kjit_cache.h
 * @brief libkjit's statistics and cache maintenance: kjit_get_stats() counters, and what
 *        `kjit cache stats`, `prune`, `clear` and `verify` do, for any program.
 *
 * Part of the public C ABI of kjit.h, whose conventions (status codes, out buffers, ownership,
 * threads) apply here too. It may be included alone: it includes kjit.h first, which declares
 * the rest of the ABI. The cache folder's layout, recency and locks: docs/cache-layout.md; the
 * command: docs/cli.md.
 *
 * @par Cache folders
 *  Every maintenance function takes the cache folder as kjit_compile_options::cache_dir does:
 *  NULL or "" is the default folder ($KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else
 *  $HOME/.cache/kjit), a relative folder is taken against the working directory, and a folder
 *  kjit_compile() would refuse (another user's, writable by others, under an unsafe parent) is
 *  refused with #KJIT_ERROR_IO naming it. A folder that does not exist is an empty cache:
 *  nothing to count, check or remove, and it is not created.
 *
 * @par Sizes, removal and locking
 *  Sizes are disk space as `du` counts it (blocks of each entry's folder and files), so a limit
 *  bounds the disk. Entries are removed whole and atomically: a concurrent reader sees the whole
 *  entry or a miss, never part of one, and the next kjit_compile() of a removed entry rebuilds
 *  it. Removers (prune, clear, verify with fix, and the eviction kjit_compile() runs under a
 *  size limit) hold an exclusive lock on `<cache>/.kjit-lock` and wait for each other; hits,
 *  loads and publishes take no lock and are never blocked by them.
 *
 * @par The three maintenance reports
 *  Summary, prune and verify reports are documented in one shape, each in its own group: what
 *  the report is and who owns it; its types; the function that makes it; its accessors; its
 *  release. A report is either the caller's struct (::kjit_cache_summary, ::kjit_prune_report:
 *  its fields are read directly, nothing to release) or an opaque handle the caller releases
 *  once (::kjit_cache_arches, ::kjit_verify_report: read through accessors).
 */
#ifndef KJIT_KJIT_CACHE_H
#define KJIT_KJIT_CACHE_H

#include "kjit.h"

KJIT_BEGIN_DECLS

/**
 * @name Statistics (since 0.2)
 * Process-wide counters of hits, misses, NVRTC time, sidecar use, loads, eviction, the cluster
 * tier and errors by status. Ownership: the caller's struct, with `struct_size` set
 * (#KJIT_STATS_INIT or `sizeof`): the library fills it during the call and keeps nothing, so
 * there is nothing to release.
 * @{
 */

/**
 * @brief Why a sidecar line was not used: the index into kjit_stats::sidecar_rejections.
 *        Append-only, like ::kjit_status.
 */
typedef enum kjit_sidecar_rejection {
    KJIT_SIDECAR_UNREADABLE = 0,      /**< A symlink, a folder, no permission, an I/O error. */
    KJIT_SIDECAR_TOO_LARGE = 1,       /**< Larger than a sidecar can be (not read). */
    KJIT_SIDECAR_EMPTY = 2,           /**< 0 bytes. */
    KJIT_SIDECAR_BARE_NAME = 3,       /**< One bare name, as older Python tools wrote: untrusted. */
    KJIT_SIDECAR_BAD_HEADER = 4,      /**< Not a kjit sidecar, or of another format version. */
    KJIT_SIDECAR_NO_LINE = 5,         /**< No valid line for the keyword asked for. */
    KJIT_SIDECAR_STALE = 6,           /**< The cubin changed since the line was written. */
    KJIT_SIDECAR_NAME_FAILS_RULE = 7, /**< The line's name does not pass the keyword rule. */
    KJIT_SIDECAR_DISTRUSTED = 8       /**< The driver found no symbol of the name it gave. */
} kjit_sidecar_rejection;

/** @brief Number of kjit_stats::sidecar_rejections slots (room for later reasons). */
#define KJIT_STATS_REJECTION_SLOTS 16
/** @brief Number of kjit_stats::errors slots, indexed by ::kjit_status (room for later ones). */
#define KJIT_STATS_STATUS_SLOTS 32

/**
 * @brief Process-wide counters since the library was loaded (since 0.2). They only grow: to
 *        measure a stretch of work, take a snapshot before and after and subtract. A forked
 *        child's go on from its parent's values at the fork.
 *
 * Filled by kjit_get_stats(). Like ::kjit_compile_options, it starts with `struct_size` and only
 * ever gains fields at the end. The counters are relaxed atomics updated without a lock, so
 * they cost nanoseconds and stay on in production; a snapshot taken while other threads work
 * is a consistent value for each counter, not across counters.
 */
typedef struct kjit_stats {
    /** Set by the caller to `sizeof(kjit_stats)`; the library fills that many bytes. */
    size_t struct_size;
    /** kjit_compile() calls answered from the cache (no NVRTC). */
    uint64_t compile_hits;
    /** kjit_compile() calls that found no usable entry. */
    uint64_t compile_misses;
    /** Misses that waited for another thread's compile of the same key and shared its result. */
    uint64_t compile_shared_waits;
    /** NVRTC compiles run (successful or not). */
    uint64_t nvrtc_compiles;
    /** Wall time spent in those NVRTC compiles, in nanoseconds. */
    uint64_t nvrtc_nanoseconds;
    /** Cache entries this process published. */
    uint64_t entries_published;
    /** Of which replaced a stale or damaged entry. */
    uint64_t entries_rebuilt;
    /** Names answered from a sidecar line (kjit_resolve_name(), kjit_load_cached(), hits). */
    uint64_t sidecar_hits;
    /** Sidecar hits that hashed the cubin to prove the line current: a young cubin, or one whose
        mtime has whole seconds (a tar copy). */
    uint64_t sidecar_content_checks;
    /** Names answered from the in-process memo (the sidecar could not be written). */
    uint64_t memo_hits;
    /** Lookups that found no sidecar file at all. */
    uint64_t sidecar_missing;
    /** Sidecars not used, by reason (::kjit_sidecar_rejection). */
    uint64_t sidecar_rejections[KJIT_STATS_REJECTION_SLOTS];
    /** Symbol-table scans (each resolution that no sidecar line or memo answered). */
    uint64_t scans;
    /** Sidecars written (after a scan, or to drop a content hash). */
    uint64_t sidecar_writes;
    /** Sidecar writes that failed (a read-only cache); the call still succeeded. */
    uint64_t sidecar_write_failures;
    /** Successful kjit_load_cached() calls. */
    uint64_t loads;
    /** Of which served from an image already loaded in this process (no file read). */
    uint64_t load_reuses;
    /** Cubins loaded through the driver (cuLibraryLoadData). */
    uint64_t driver_loads;
    /** Sidecar names the driver did not find, rescanned and rewritten. */
    uint64_t load_self_heals;
    /** Measurements of a size-limited cache after a publish. */
    uint64_t eviction_runs;
    /** Entries evicted for the size limit. */
    uint64_t evicted_entries;
    /** Bytes evicted for the size limit. */
    uint64_t evicted_bytes;
    /** Failures returned by kjit_* functions, indexed by ::kjit_status (errors[0] stays 0). */
    uint64_t errors[KJIT_STATS_STATUS_SLOTS];
    /** Stale temp folders (left by killed processes) swept after publishes. */
    uint64_t swept_temp_folders;
    /** Cluster tier (since 0.6; kjit_compile_options::remote_storage): local misses answered
        by an entry another node compiled (fetched, verified and published locally). */
    uint64_t remote_hits;
    /** Local misses the cluster tier had no entry for either. */
    uint64_t remote_misses;
    /** Round trips to a server that failed (down, reset, timed out) and commands it refused
        (e.g. a read-only user, a full server with `noeviction`); each call compiled on. */
    uint64_t remote_errors;
    /** Of remote_errors, timeouts (connect or operation). */
    uint64_t remote_timeouts;
    /** Values that failed verification (damaged, cut short, copied under another key): deleted
        there (unless read-only) and treated as misses. */
    uint64_t remote_corrupt;
    /** Entries this process stored on a server. */
    uint64_t remote_puts;
    /** Value bytes fetched from the servers. */
    uint64_t remote_bytes_in;
    /** Value bytes stored on the servers. */
    uint64_t remote_bytes_out;
    /** Leases this process took: it compiled a kernel for the whole cluster. */
    uint64_t remote_leases_owned;
    /** Misses that waited for another node's compile (its lease) instead of compiling. */
    uint64_t remote_lease_waits;
    /** Of those, waits whose holder vanished without an entry (it died): this process took
        the lease over. */
    uint64_t remote_lease_takeovers;
    /** Compile errors returned from another node's compile of the same key (shared for a
        minute), without running NVRTC here. */
    uint64_t remote_shared_failures;
    /** Seed caches (since 0.9; kjit_compile_options::seed_dirs): local misses answered by an
        entry of a seed folder (verified and published into the local cache). */
    uint64_t seed_hits;
    /** Seed entries that failed verification (damaged, another request's, headers changed
        since) and seed folders refused as untrusted: each left as it is and skipped. */
    uint64_t seed_rejections;
    /** Links run by nvJitLink (since 0.10; kjit_compile_options::link_inputs): misses of requests
        with link inputs that compiled here. Hits run none. */
    uint64_t nvjitlink_links;
    /** Their wall time in nanoseconds (also counted in nvrtc_nanoseconds, the whole compile). */
    uint64_t nvjitlink_nanoseconds;
} kjit_stats;

/** @brief Initializer for ::kjit_stats: the size set, every counter 0. */
#define KJIT_STATS_INIT { sizeof(kjit_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, { 0 }, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, { 0 }, 0, \
                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief Takes a snapshot of the process-wide counters (since 0.2).
 * @param[in,out] stats A struct with struct_size set (#KJIT_STATS_INIT or `sizeof`); the
 *                      library fills the first struct_size bytes. Only written during the call.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The snapshot was written.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `stats`, or a struct_size below `sizeof(size_t)` or
 *                                     above this library's `sizeof(kjit_stats)`.
 * @note Thread safe and lock-free.
 */
KJIT_API kjit_status kjit_get_stats(kjit_stats *stats);

/** @} */

/**
 * @name Cache folder and cluster servers (since 0.4)
 * Which folder a `cache_dir` names, and what the cluster tier's servers say of themselves.
 * @{
 */

/**
 * @brief The absolute cache folder that kjit_compile() and the cache functions below use for a
 *        given `cache_dir` (since 0.4): the default for NULL or "", a relative folder made
 *        absolute against the working directory, `.` and `..` folded, no trailing `/`. Links
 *        are not resolved and nothing is checked or created.
 * @param[in]  cache_dir A folder, or NULL or "" for the default.
 * @param[out] path      Caller buffer for the NUL-terminated folder; may be NULL only when
 *                       path_size is 0.
 * @param[in]  path_size Size of `path` in bytes, including room for the NUL.
 * @param[out] path_len  If not NULL, receives strlen of the folder, also on
 *                       #KJIT_ERROR_BUFFER_TOO_SMALL.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The folder was written (or only its length).
 * @retval KJIT_ERROR_INVALID_ARGUMENT No default: none of $KJIT_CACHE_DIR, $XDG_CACHE_HOME,
 *                                     $HOME is set; NULL `path` with non-zero path_size.
 * @retval KJIT_ERROR_IO               The working directory cannot be found.
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL Nothing but the length is written.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_cache_dir(const char *cache_dir, char *path, size_t path_size, size_t *path_len);

/**
 * @brief What the cluster tier's servers say of themselves (since 0.6), as text for people
 *        (`kjit cache stats --remote`): per server, its URL (password hidden), whether it can be
 *        reached, its Redis version, memory used and limit, eviction policy, evicted keys,
 *        keyspace hits and misses, key count, and the count of libkjit entries in the setting's
 *        namespace (a bounded SCAN).
 * @param[in]  remote_storage A setting as kjit_compile_options::remote_storage takes it; NULL or
 *                            "" for $KJIT_REMOTE_STORAGE.
 * @param[out] text      Caller buffer for the NUL-terminated text; may be NULL only when
 *                       `text_size` is 0 (length query).
 * @param[in]  text_size Size of `text` in bytes.
 * @param[out] text_len  If not NULL, receives the text's length without the NUL (also on
 *                       #KJIT_ERROR_BUFFER_TOO_SMALL).
 * @return #KJIT_OK (a server that cannot be reached, or refuses the commands, e.g. NOAUTH for a
 *         missing password, is said in the text and counted in kjit_stats::remote_errors, not
 *         an error), or:
 * @retval KJIT_ERROR_INVALID_ARGUMENT No setting (none given, $KJIT_REMOTE_STORAGE unset or
 *                                     "none"), a malformed one, or a libkjit built without
 *                                     hiredis; a NULL `text` with a non-zero size.
 * @retval KJIT_ERROR_IO               A password-file that cannot be read.
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL `text_size` is too small: nothing written, `*text_len` set.
 * @note Thread safe. Each call asks the servers again (a few round trips each, within the
 *       setting's timeouts), so two calls may return different lengths: query with a buffer
 *       large enough (e.g. 64 KiB) rather than length first.
 */
KJIT_API kjit_status kjit_remote_describe(const char *remote_storage, char *text, size_t text_size, size_t *text_len);

/** kjit_remote_check() flag: refuse a setting whose server URL names a password. */
#define KJIT_REMOTE_CHECK_NO_PASSWORD 1u

/**
 * @brief Checks a cluster-tier setting as libkjit reads it (since 0.13), without connecting:
 *        for a host that takes the setting from its user and wants to say what is wrong before
 *        the first compile (the `kjit` command checks --remote-storage so).
 * @param[in] remote_storage A setting as kjit_compile_options::remote_storage takes it; NULL or
 *                           "" for $KJIT_REMOTE_STORAGE. "none" (the tier off) is a valid one.
 * @param[in] flags          0, or #KJIT_REMOTE_CHECK_NO_PASSWORD: also refuse a setting whose
 *                           server URL names a user or password (`redis://:secret@host`), for a
 *                           setting that came from a command line, which every user of the
 *                           machine can read (/proc/PID/cmdline); `password-file=` is accepted.
 * @return #KJIT_OK: libkjit would use the setting as it is (or it turns the tier off), or:
 * @retval KJIT_ERROR_INVALID_ARGUMENT A malformed setting (the message names the token, never a
 *                                     password), a password in a URL with
 *                                     #KJIT_REMOTE_CHECK_NO_PASSWORD, a tier asked of a libkjit
 *                                     built without it, or an unknown flag.
 * @retval KJIT_ERROR_IO               A password-file that cannot be read, or that others can.
 * @note Thread safe. No server is asked: kjit_remote_describe() does that.
 */
KJIT_API kjit_status kjit_remote_check(const char *remote_storage, unsigned flags);

/** @} */

/**
 * @name Summary report (since 0.4): what a cache folder holds
 * kjit_cache_summarize() counts a cache folder's entries and their disk space (`kjit cache
 * stats`) into two reports: the totals, a ::kjit_cache_summary, and the breakdown by target
 * architecture, a ::kjit_cache_arches.
 *
 * Ownership: a ::kjit_cache_summary is the caller's struct, with `struct_size` set
 * (#KJIT_CACHE_SUMMARY_INIT or `sizeof`): the library fills it during the call and keeps
 * nothing, so there is nothing to release. A ::kjit_cache_arches is an opaque handle owned by
 * the caller, released once with kjit_cache_arches_release(), after its last use by any thread;
 * the strings of its accessors are owned by the handle and valid until it is released.
 *
 * In order: the types, kjit_cache_summarize(), the accessors (the summary's fields are read
 * directly; the breakdown's through kjit_cache_arches_count() and the others), the release
 * (kjit_cache_arches_release()).
 * @{
 */

/**
 * @brief The totals of kjit_cache_summarize(): what a cache folder holds. The caller's struct,
 *        with `struct_size` set (#KJIT_CACHE_SUMMARY_INIT or `sizeof`): the library fills it
 *        during the call and keeps nothing, so there is nothing to release.
 *
 * Only ever gains fields at the end. Sizes are disk space in bytes; times are nanoseconds since
 * the Unix epoch (UTC), 0 when there is no entry.
 */
typedef struct kjit_cache_summary {
    /** Set by the caller to `sizeof(kjit_cache_summary)`; the library fills that many bytes. */
    size_t struct_size;
    /** Cache entries (one compiled kernel each). */
    uint64_t entries;
    /** Disk space of the entries and their variants files, in bytes: what a size limit bounds. */
    uint64_t bytes;
    /** The size limit kjit_compile() applies here by default: $KJIT_CACHE_MAX_SIZE in bytes,
        0 when there is none (unset, empty or "0"). */
    uint64_t max_size;
    /** Folders and files in transit: entries being written or removed, and those left so by
        killed processes (swept once stale). */
    uint64_t in_transit;
    /** Their disk space, in bytes. */
    uint64_t in_transit_bytes;
    /** Names in the folder that are not of the cache's shape; they are never touched. */
    uint64_t foreign;
    /** When the least recently used entry was last used (its recency record). */
    int64_t least_recent_use_ns;
    /** When the most recently used entry was last used. */
    int64_t most_recent_use_ns;
    /** When the oldest entry was compiled, to the second (from its manifest). */
    int64_t oldest_created_ns;
    /** When the newest entry was compiled, to the second. */
    int64_t newest_created_ns;
} kjit_cache_summary;

/** @brief Initializer for ::kjit_cache_summary: the size set, everything else 0. */
#define KJIT_CACHE_SUMMARY_INIT { sizeof(kjit_cache_summary), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief The breakdown of kjit_cache_summarize(): a cache folder's entries by target
 *        architecture. An opaque handle owned by the caller, released once with
 *        kjit_cache_arches_release(), after its last use by any thread; the strings of its
 *        accessors are owned by the handle and valid until it is released. Read-only, so its
 *        accessors may be used from any thread.
 */
typedef struct kjit_cache_arches kjit_cache_arches;

/**
 * @brief Counts a cache folder's entries and their disk space (what `kjit cache stats` shows).
 *
 * Walks the folder's shards and reads each entry's manifest (for its arch and creation time);
 * no cubin is read and nothing is changed or locked, so it is safe at any time, and the counts
 * are those of a cache other processes may be changing meanwhile.
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (as in kjit_compile()).
 * @param[in,out] summary   A struct with struct_size set (#KJIT_CACHE_SUMMARY_INIT or `sizeof`);
 *                          the library fills the first struct_size bytes.
 * @param[out]    arches    If not NULL, receives a new handle on the per-arch breakdown (release
 *                          it with kjit_cache_arches_release()); NULL on failure.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     `*summary` (and `*arches`) are filled.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `summary`, a struct_size below `sizeof(size_t)` or
 *                                     above this library's, no default folder, or a malformed
 *                                     $KJIT_CACHE_MAX_SIZE.
 * @retval KJIT_ERROR_IO               The folder is not a folder, cannot be read, or is refused as
 *                                     by kjit_compile(); the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_cache_summarize(const char *cache_dir, kjit_cache_summary *summary,
                                          kjit_cache_arches **arches);

/**
 * @brief Number of architectures in a breakdown.
 * @param[in] arches A handle from kjit_cache_summarize(), or NULL.
 * @return How many distinct architectures the entries have; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_cache_arches_count(const kjit_cache_arches *arches);

/**
 * @brief One architecture's name, e.g. "sm_90a"; "unknown" gathers entries whose manifest could
 *        not be read. Names are in ascending byte order.
 * @param[in] arches A handle from kjit_cache_summarize().
 * @param[in] index  0 to kjit_cache_arches_count() - 1.
 * @return NUL-terminated, owned by the handle, valid until it is released; NULL for a NULL
 *         handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_cache_arches_name(const kjit_cache_arches *arches, size_t index);

/**
 * @brief How many entries one architecture has.
 * @param[in] arches A handle from kjit_cache_summarize().
 * @param[in] index  0 to kjit_cache_arches_count() - 1.
 * @return The count; 0 for a NULL handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API uint64_t kjit_cache_arches_entries(const kjit_cache_arches *arches, size_t index);

/**
 * @brief The disk space of one architecture's entries.
 * @param[in] arches A handle from kjit_cache_summarize().
 * @param[in] index  0 to kjit_cache_arches_count() - 1.
 * @return Bytes; 0 for a NULL handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API uint64_t kjit_cache_arches_bytes(const kjit_cache_arches *arches, size_t index);

/**
 * @brief Releases a ::kjit_cache_arches; its strings go with it. NULL is accepted and ignored.
 * @param[in] arches The handle to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each handle is released once, after its last use by any thread.
 */
KJIT_API void kjit_cache_arches_release(kjit_cache_arches *arches);

/** @} */

/**
 * @name Prune report (since 0.4): what was removed
 * kjit_cache_prune() removes entries by recency (`kjit cache prune`) and kjit_cache_clear()
 * removes them all (`kjit cache clear`); both say what they did in a ::kjit_prune_report.
 *
 * Ownership: a ::kjit_prune_report is the caller's struct, with `struct_size` set
 * (#KJIT_PRUNE_REPORT_INIT or `sizeof`): the library fills it during the call and keeps
 * nothing, so there is nothing to release.
 *
 * In order: the types (the report, then the ::kjit_prune_options kjit_cache_prune() takes),
 * kjit_cache_prune() and kjit_cache_clear(); no accessors (the report's fields are read
 * directly) and no release.
 * @{
 */

/**
 * @brief The report of kjit_cache_prune() and kjit_cache_clear(): what was removed and what is
 *        left. The caller's struct, with `struct_size` set (#KJIT_PRUNE_REPORT_INIT or
 *        `sizeof`): the library fills it during the call and keeps nothing, so there is nothing
 *        to release.
 *
 * Only ever gains fields at the end. Sizes are disk space in bytes.
 */
typedef struct kjit_prune_report {
    /** Set by the caller to `sizeof(kjit_prune_report)`; the library fills that many bytes. */
    size_t struct_size;
    /** Entries removed. */
    uint64_t removed_entries;
    /** Their disk space, in bytes. */
    uint64_t removed_bytes;
    /** Entries that would have gone but were in use, and were kept. */
    uint64_t spared_in_use;
    /** Stale folders in transit (left by killed processes) removed. */
    uint64_t removed_in_transit;
    /** Variants files none of whose entries is left, removed. */
    uint64_t removed_variants_files;
    /** Entries left. */
    uint64_t kept_entries;
    /** Disk space of what is left (entries and variants files), in bytes. */
    uint64_t kept_bytes;
} kjit_prune_report;

/** @brief Initializer for ::kjit_prune_report: the size set, every count 0. */
#define KJIT_PRUNE_REPORT_INIT { sizeof(kjit_prune_report), 0, 0, 0, 0, 0, 0, 0 }

/** @brief No bound: the value of kjit_prune_options::max_size and
 *         kjit_prune_options::older_than_s that leaves it out. */
#define KJIT_PRUNE_NO_LIMIT UINT64_MAX

/**
 * @brief Options for kjit_cache_prune(). Set `struct_size = sizeof(kjit_prune_options)` (or
 *        start from #KJIT_PRUNE_OPTIONS_INIT or kjit_prune_options_init()); fields are only
 *        ever appended. NULL options mean all defaults: no bound, so only the sweep of stale
 *        folders in transit and of variants files of removed entries is done.
 */
typedef struct kjit_prune_options {
    /** `sizeof(kjit_prune_options)` as the caller was compiled with it. */
    size_t struct_size;
    /** Remove the least recently used entries until the rest take at most this many bytes
        (0 removes every entry not in use). #KJIT_PRUNE_NO_LIMIT (the default): no size bound. */
    uint64_t max_size;
    /** Remove the entries not used for this many seconds (0: every entry not in use); at most
        9223372036 (about 292 years). #KJIT_PRUNE_NO_LIMIT (the default): no age bound. */
    uint64_t older_than_s;
} kjit_prune_options;

/** @brief Initializer for ::kjit_prune_options: the size set, no bound. */
#define KJIT_PRUNE_OPTIONS_INIT { sizeof(kjit_prune_options), KJIT_PRUNE_NO_LIMIT, KJIT_PRUNE_NO_LIMIT }

/**
 * @brief Fills a ::kjit_prune_options as #KJIT_PRUNE_OPTIONS_INIT does (since 0.4).
 * @param[out] options     The struct to fill (the first `struct_size` bytes only).
 * @param[in]  struct_size `sizeof(kjit_prune_options)` as the caller was compiled with it.
 * @return #KJIT_OK, or #KJIT_ERROR_INVALID_ARGUMENT for a NULL `options` or a struct_size
 *         below `sizeof(size_t)` or above this library's (nothing is written).
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_prune_options_init(kjit_prune_options *options, size_t struct_size);

/**
 * @brief Removes cache entries by recency (what `kjit cache prune` does).
 *
 * First the entries not used for kjit_prune_options::older_than_s, then the least recently used
 * until the rest fit in kjit_prune_options::max_size; stale folders in transit and variants files
 * of removed entries go too. Recency is libkjit's own record, set by hits, loads and running
 * batches (docs/cache-layout.md). An entry in use is never removed (it is counted in
 * kjit_prune_report::spared_in_use): one used within the last two minutes, or handed out by a
 * kjit_compile_batch() of this process that is running or returned less than two minutes ago. An
 * entry whose recency record lies in the future counts as used now, and its record is set to now.
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (as in kjit_compile()).
 * @param[in]     options   NULL for the defaults, else a struct with struct_size set.
 * @param[in,out] report    NULL, or a struct with struct_size set (#KJIT_PRUNE_REPORT_INIT or
 *                          `sizeof`): the library fills its first struct_size bytes.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     Done (also for a folder that does not exist).
 * @retval KJIT_ERROR_INVALID_ARGUMENT A struct_size below `sizeof(size_t)` or above this
 *                                     library's, an older_than_s over 9223372036 other than
 *                                     #KJIT_PRUNE_NO_LIMIT, or no default folder. Nothing is
 *                                     removed.
 * @retval KJIT_ERROR_IO               The folder is not a folder, cannot be read or locked, or is
 *                                     refused as by kjit_compile(); the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe; blocks while another remover (in any process) holds the cache lock.
 */
KJIT_API kjit_status kjit_cache_prune(const char *cache_dir, const kjit_prune_options *options,
                                      kjit_prune_report *report);

/**
 * @brief Removes every cache entry, in use or not, every variants file and every stale folder in
 *        transit (what `kjit cache clear` does). Publishes in progress in other processes are
 *        left to finish; a process holding a loaded kernel keeps it (the driver has its image).
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (as in kjit_compile()).
 * @param[in,out] report    NULL, or a struct with struct_size set: filled as by
 *                          kjit_cache_prune().
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()), as for
 *         kjit_cache_prune().
 * @note Thread safe; blocks while another remover holds the cache lock.
 */
KJIT_API kjit_status kjit_cache_clear(const char *cache_dir, kjit_prune_report *report);

/** @} */

/**
 * @name Verify report (since 0.4): what is wrong with a cache folder
 * kjit_cache_verify() checks every entry of a cache folder and, with `fix`, repairs it (`kjit
 * cache verify`); its findings are a ::kjit_verify_report, one problem (a ::kjit_cache_problem)
 * per path.
 *
 * Ownership: a ::kjit_verify_report is an opaque handle owned by the caller, released once
 * with kjit_verify_report_release(), after its last use by any thread; the strings of its
 * accessors are owned by the handle and valid until it is released.
 *
 * In order: the types (the report, then ::kjit_cache_problem and kjit_cache_problem_string()),
 * kjit_cache_verify(), the accessors (kjit_verify_report_count() and the others), the release
 * (kjit_verify_report_release()).
 * @{
 */

/**
 * @brief The report of kjit_cache_verify(): the problems found, one per path. An opaque handle
 *        owned by the caller, released once with kjit_verify_report_release(), after its last
 *        use by any thread; the strings of its accessors are owned by the handle and valid
 *        until it is released. Read-only, so its accessors may be used from any thread.
 */
typedef struct kjit_verify_report kjit_verify_report;

/**
 * @brief What kjit_cache_verify() found wrong with a path. Append-only, like ::kjit_status;
 *        kjit_cache_problem_string() names each value.
 */
typedef enum kjit_cache_problem {
    KJIT_CACHE_MISPLACED = 0,          /**< An entry in the wrong shard, or an entry name that is
                                            not a folder. */
    KJIT_CACHE_MISSING_FILE = 1,       /**< The manifest, source, cubin or dependency list is missing. */
    KJIT_CACHE_BAD_MANIFEST = 2,       /**< The manifest is unreadable, fails its check line, or is
                                            another entry's. */
    KJIT_CACHE_BAD_CUBIN = 3,          /**< The cubin is not a CUDA ELF, not the bytes published, or
                                            lacks its kernel. */
    KJIT_CACHE_TRUNCATED_CUBIN = 4,    /**< The cubin's size differs from the one published. */
    KJIT_CACHE_SIDECAR_MISSING = 5,    /**< No `kernel.cubin.name` sidecar. */
    KJIT_CACHE_SIDECAR_DAMAGED = 6,    /**< The sidecar is unreadable, garbage, or has no line for
                                            the entry's keyword. */
    KJIT_CACHE_SIDECAR_STALE = 7,      /**< The sidecar's line is for another version of the cubin. */
    KJIT_CACHE_SIDECAR_WRONG_NAME = 8, /**< The sidecar's line names another kernel than the manifest. */
    KJIT_CACHE_STALE_TEMP = 9,         /**< A temp folder or file left by a killed process. */
    KJIT_CACHE_FOREIGN = 10            /**< An entry, its shard or a file in it owned by someone the
                                            folder does not trust, or a link in their place
                                            (since 0.11): never served, copied or counted as
                                            there (docs/cache-layout.md, "Who may write a seed"). */
} kjit_cache_problem;

/**
 * @brief Names a ::kjit_cache_problem as `kjit cache verify` prints it ("truncated_cubin",
 *        "sidecar_damaged", ...: the enumerator's name after `KJIT_CACHE_`, in lower case).
 * @param[in] problem Any value; values this version does not know give "unknown".
 * @return A static string, never NULL, owned by the library.
 * @note Thread safe. Does not change kjit_last_error().
 */
KJIT_API const char *kjit_cache_problem_string(int problem);

/**
 * @brief Checks every entry of a cache folder and, with `fix`, repairs it (what `kjit cache
 *        verify` does).
 *
 * An entry is sound when it is complete, its manifest passes its check line, its cubin is a
 * CUDA ELF of the size and XXH3-128 recorded at publish holding the kernel its manifest names,
 * and its sidecar agrees with the cubin and the manifest. Stale temp folders and files left by
 * killed processes are found too. Without `fix` nothing is changed and no lock is taken. With
 * `fix`, under the cache lock: a damaged sidecar is rebuilt from the manifest's name (only from
 * a manifest that passes its check, with the name in the cubin's symbols and passing the keyword
 * rule), an entry that cannot be repaired is removed (the next kjit_compile() rebuilds it) and
 * stale temps are removed. Entries being published or removed meanwhile are not reported.
 * @param[in]  cache_dir The cache folder; NULL or "" for the default (as in kjit_compile()).
 * @param[in]  fix       Non-zero to repair what is found.
 * @param[out] report    Receives a new report on #KJIT_OK (release it with
 *                       kjit_verify_report_release()), NULL on failure.
 * @return #KJIT_OK also when problems were found (the report lists them), or the failure's
 *         status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     `*report` holds the findings.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `report`, or no default folder.
 * @retval KJIT_ERROR_IO               The folder is not a folder, cannot be read or (with fix)
 *                                     locked, or is
 *                                     refused as by kjit_compile(); the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe; with `fix` it blocks while another remover holds the cache lock.
 */
KJIT_API kjit_status kjit_cache_verify(const char *cache_dir, int fix, kjit_verify_report **report);

/**
 * @brief How many entries were checked (entries of the cache's shape, sound or not).
 * @param[in] report A handle from kjit_cache_verify(), or NULL.
 * @return The count; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_verify_report_entries_checked(const kjit_verify_report *report);

/**
 * @brief How many of the entries checked were sound.
 * @param[in] report A handle from kjit_cache_verify(), or NULL.
 * @return The count; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_verify_report_entries_ok(const kjit_verify_report *report);

/**
 * @brief How many problems were found (0: the cache is sound).
 * @param[in] report A handle from kjit_cache_verify(), or NULL.
 * @return The count; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_verify_report_count(const kjit_verify_report *report);

/**
 * @brief The path a problem was found at: an entry folder, or a temp folder or file.
 * @param[in] report A handle from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return NUL-terminated, owned by the handle, valid until it is released; NULL for a NULL
 *         handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_verify_report_path(const kjit_verify_report *report, size_t index);

/**
 * @brief What a problem is.
 * @param[in] report A handle from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return A ::kjit_cache_problem (a value this header may not know yet, from a newer library:
 *         treat it as damage); -1 for a NULL handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API int kjit_verify_report_kind(const kjit_verify_report *report, size_t index);

/**
 * @brief What exactly is wrong, for people: names the file, e.g. "'.../kernel.cubin' has 100
 *        bytes; 5176 were published".
 * @param[in] report A handle from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return NUL-terminated, owned by the handle, valid until it is released; NULL for a NULL
 *         handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_verify_report_detail(const kjit_verify_report *report, size_t index);

/**
 * @brief Whether a problem was repaired (only with `fix`).
 * @param[in] report A handle from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return 1 when it was, 0 when not (always 0 without `fix`), -1 for a NULL handle or an index
 *         out of range.
 * @note Thread safe.
 */
KJIT_API int kjit_verify_report_fixed(const kjit_verify_report *report, size_t index);

/**
 * @brief What `fix` did about a problem, for people, e.g. "rebuilt the sidecar from the cubin
 *        and the manifest", or why it could not.
 * @param[in] report A handle from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return NUL-terminated, owned by the handle, valid until it is released; "" without `fix`;
 *         NULL for a NULL handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_verify_report_action(const kjit_verify_report *report, size_t index);

/**
 * @brief Releases a ::kjit_verify_report; its strings go with it. NULL is accepted and ignored.
 * @param[in] report The handle to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each handle is released once, after its last use by any thread.
 */
KJIT_API void kjit_verify_report_release(kjit_verify_report *report);

/** @} */

/**
 * @name Export and import (since 0.9): seed caches
 * Whole entries copied between cache folders, each verified first (as kjit_cache_verify()
 * checks it) and written as a compile publishes one; damaged ones are refused and listed. An
 * export holds entries only (no usage record, lock or temp folder): a seed cache
 * (kjit_compile_options::seed_dirs) to bake into a container image or put on a read-only share.
 * docs/cache-layout.md, "Seed caches".
 * @{
 */

/**
 * @brief What kjit_cache_export() or kjit_cache_import() copied (since 0.9). The caller's
 *        struct, with `struct_size` set (#KJIT_COPY_REPORT_INIT or `sizeof`): the library fills
 *        its first struct_size bytes.
 */
typedef struct kjit_copy_report {
    /** Set by the caller to `sizeof(kjit_copy_report)`. */
    size_t struct_size;
    /** Entries written whole into the destination. */
    uint64_t copied_entries;
    /** The bytes of their files. */
    uint64_t copied_bytes;
    /** Entries the destination held already, trusted there and holding the very cubin copied
        (since 0.11; before, any sound entry): left as they were. */
    uint64_t present_entries;
    /** Entries of another arch than the one asked for (kjit_cache_export()'s `arch`). */
    uint64_t skipped_entries;
    /** Entries that failed verification, or of someone the folder read (or, at the destination,
        the folder written) does not trust (#KJIT_CACHE_FOREIGN): not copied (each listed in the
        `refused` report). */
    uint64_t refused_entries;
} kjit_copy_report;

/** @brief Initializer for ::kjit_copy_report: the size set, every count 0. */
#define KJIT_COPY_REPORT_INIT { sizeof(kjit_copy_report), 0, 0, 0, 0, 0 }

/**
 * @brief Writes the cache's sound entries (of one arch, or all) into `dest_dir` as a seed cache
 *        (since 0.9): `kjit cache export`.
 *
 * Each entry is verified first (complete, its manifest passing its check line, its cubin the
 * bytes published holding its kernel); a damaged one is refused and listed, not copied. The
 * copies are published as a compile publishes (a temp folder renamed into place), with a fresh
 * sidecar and their variants file lines; nothing else of the cache is copied. An entry
 * `dest_dir` already holds is left as it is when `dest_dir` trusts its owner (as a seed's reader
 * would) and its cubin is the one exported, so an export can be repeated to top a seed up;
 * another cubin under the key is replaced; an entry, shard or file there of someone `dest_dir`
 * does not trust, or a link in a shard's place, is refused as #KJIT_CACHE_FOREIGN naming its
 * owner, and left for its owner or root to remove (since 0.11; docs/cache-layout.md, "Who may
 * write a seed"). The cache is only read.
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (as in kjit_compile()).
 * @param[in]     dest_dir  The seed folder to write; created (mode 0700) when missing. It is
 *                          checked as a cache folder is (yours or root's, not writable by
 *                          others). Give its readers access yourself (e.g. `chmod -R a+rX`).
 * @param[in]     arch      Only the entries of this arch (e.g. "sm_90a"); NULL or "": all.
 * @param[in,out] report    NULL, or a struct with struct_size set: the counts.
 * @param[out]    refused   NULL, or receives a ::kjit_verify_report (release it with
 *                          kjit_verify_report_release()) whose findings are the refused entries
 *                          (action "not copied"); its entries_checked counts the entries of the
 *                          arch asked for, entries_ok those copied or present. NULL on failure.
 * @return #KJIT_OK (also when entries were refused), or the failure's status:
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL or empty dest_dir, a bad struct_size, the same folder
 *                                     twice.
 * @retval KJIT_ERROR_IO               The cache folder does not exist or is refused (another
 *                                     user's, ...), or `dest_dir` cannot be made or written or is
 *                                     refused; the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe; safe while other processes use either folder.
 */
KJIT_API kjit_status kjit_cache_export(const char *cache_dir, const char *dest_dir, const char *arch,
                                       kjit_copy_report *report, kjit_verify_report **refused);

/**
 * @brief Copies the sound entries of the cache folder `source_dir` (a seed, an export) into the
 *        cache (since 0.9): `kjit cache import`. As kjit_cache_export() the other way, for every
 *        arch: each entry verified first, damaged ones refused and listed, the source only read.
 *        Each entry of `source_dir` is trusted as a seed's is: one whose folder, shard or a file
 *        in it belongs to someone `source_dir` does not trust, or that lies behind a link, is
 *        refused as #KJIT_CACHE_FOREIGN naming its owner (since 0.11; before, it was copied and
 *        became the caller's).
 * @param[in]     source_dir The folder to copy from (checked as a cache folder is); not NULL.
 * @param[in]     cache_dir  The cache folder; NULL or "" for the default (as in kjit_compile()),
 *                           created when missing.
 * @param[in,out] report     As for kjit_cache_export().
 * @param[out]    refused    As for kjit_cache_export().
 * @return As kjit_cache_export().
 * @note Thread safe; safe while other processes use either folder.
 */
KJIT_API kjit_status kjit_cache_import(const char *source_dir, const char *cache_dir, kjit_copy_report *report,
                                       kjit_verify_report **refused);

/** @} */

KJIT_END_DECLS

#endif /* KJIT_KJIT_CACHE_H */
