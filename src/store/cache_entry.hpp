// Cache entry: what one entry of the cubin cache is on disk, shared by the cache (which builds
// and publishes entries), the loader (which records their use) and cache maintenance (which
// inventories, verifies and removes them). Filesystem only. docs/cache-layout.md describes it:
//
//   <cache>/<k0k1>/<key>/            one entry; the folder's mtime is its last use (recency)
//   <cache>/<k0k1>/.tmp-<key>-...    an entry being built (or left by a killed writer)
//   <cache>/<k0k1>/.trash-<key>-...  an entry being removed (or left by a killed remover)
#pragma once

#include "store/cache_layout.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/status.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::store::cache_entry {

// An entry's files, and the shard-level names of entries in transit (never mistaken for
// entries): named in cache_layout.hpp with every other name in a cache folder.
using cache_layout::kCubinFile;
using cache_layout::kDepsFile;
using cache_layout::kDepsTempPrefix;
using cache_layout::kManifestFile;
using cache_layout::kOriginFile;
using cache_layout::kSourceFile;
using cache_layout::kTempPrefix;
using cache_layout::kTrashPrefix;

// Recency is recorded at most this often per entry: a use sets the folder's mtime to now only
// when it is older than this, so steady-state hits write nothing. Recorded by libkjit itself,
// so it holds on `noatime` and `relatime` mounts.
constexpr std::int64_t kRecencyStepNs = 60'000'000'000;
// The promise (docs/cache-layout.md): an entry used less than this long ago is never evicted.
// A use leaves a record at most kRecencyStepNs old, so an entry is in use while its record is
// younger than this plus kRecencyStepNs (three minutes; before, two, which protected a hit on
// an entry recorded 59 s earlier for 61 s only). A load, from the use it records to its last
// file read, is far shorter; a batch keeps what it handed out in use until it returns (pin,
// and the batch compiler records their use again while it runs and before it returns).
constexpr std::int64_t kInUseWindowNs = 120'000'000'000;

// A cache key: 32 lowercase hex digits.
bool is_key(std::string_view name);
// A shard folder name: 2 lowercase hex digits.
bool is_shard(std::string_view name);
// "<cache_dir>/<key[0..2]>/<key>".
std::string folder_for(const std::string &cache_dir, const std::string &key);
// The entry folder `cubin_path` lies in when it has the shape ".../<k0k1>/<key>/kernel.cubin"
// (shard matching the key); otherwise empty. Pure string work, no system call.
std::string_view entry_of_cubin(std::string_view cubin_path);

// Records a use of the entry at `entry`, whose folder `folder_st` describes (from a stat the
// caller already made): sets its mtime to now when older than kRecencyStepNs, or in the future. Best effort: on a
// filesystem where that fails (read-only, not the owner), attempts on the same device pause for
// kRecencyStepNs, so hits on an old read-only cache do not pay a failing call each. Thread safe.
void note_use(const std::string &entry, const struct stat &folder_st, std::int64_t now_ns);
// The same for a cubin path: when it lies in an entry, stats the entry folder and records the
// use. Costs one stat for a cubin in a cache, nothing for another path.
void note_use_of_cubin(const std::string &cubin_path);

// A recency record (or temp folder mtime) in the future, from a clock that was ahead or a copy
// made on such a machine (`cp -a`), counts as now: it may be a use by a process whose clock is
// ahead. Whoever sees one (a hit, a load, eviction, prune, a sweep) rewrites it to now with
// rewrite_future_mtime, so that it ages from then like any other: otherwise it would be "in use"
// and younger than any age until the clock caught up.
inline std::int64_t effective_recency(std::int64_t recency_ns, std::int64_t now_ns) {
    return recency_ns > now_ns ? now_ns : recency_ns;
}
// Sets the mtime of `path` (not through a link) to now when `mtime` (its mtime as stat'ed) lies
// after `now_ns`. Best effort (a read-only cache keeps it): returns whether it rewrote it.
bool rewrite_future_mtime(const std::string &path, std::int64_t mtime, std::int64_t now_ns);

// Whether an entry last used at `recency_ns` is in use at `now_ns` (see kInUseWindowNs).
inline bool in_use(std::int64_t recency_ns, std::int64_t now_ns) {
    return effective_recency(recency_ns, now_ns) > now_ns - kRecencyStepNs - kInUseWindowNs;
}

// Entries pinned by running batches of this process (batch/compiler.hpp), by key: eviction and
// prune in this process never remove a pinned entry, whatever its recency record says (it may
// be old: not writable, or the batch outlived it). By key alone, so an entry of the same key
// in another cache folder is spared too while the batch runs: a harmless delay. Pins nest
// (counted). Thread safe; pinned() costs an atomic load when nothing is pinned.
void pin(const std::string &key);
void unpin(const std::string &key);
bool pinned(const std::string &key);

enum class Retired { removed, in_use, vanished };
// Whether retire() spares an entry in use (eviction, prune) or removes it whatever (clear, or
// an entry found broken).
enum class InUse { spare, remove };

// Removes the entry at `entry` whole: renames it to a trash name in its shard, in one step, so
// readers see the complete entry or none; then deletes the trash. With InUse::spare, an entry
// found in use or pinned (after the rename too, which closes the race with a reader recording
// its use or a batch pinning it) is renamed back instead and in_use returned. vanished: it was gone already. Errors:
// io.
Result<Retired> retire(const std::string &entry, InUse in_use_entries);
// How many times this process has begun to retire an entry: what remembers entries in memory
// (the cache's hit memo) looks again at disk when it moved on. Relaxed atomic; thread safe.
std::uint64_t retirements();

// Several results per source key (docs/cache-layout.md, "Several results per source key"): a
// request that reads files from disk has one entry per state of those files, each under its own
// key (the source key and the content of every file its compile read: cache_key.hpp's
// variant_key). The source key's variants file lists those keys, most recently found or made
// first, so that a lookup tries them without scanning the headers:
//
//   <cache>/<s0s1>/<source key>.variants   "kjit-variants 1" and one key per line
//
// It only makes hits fast: each key it lists is checked as any entry is (its files as recorded,
// and its key made from them), so a damaged, lost or planted variants file costs a scan or a
// compile, never a wrong hit; a miss that scans finds an entry the file no longer lists.
using cache_layout::kVariantsSuffix;
// At most this many keys are listed: toggling between a few header states (a branch switch, an
// A/B experiment) hits every one of them. Entries that fall off the list stay until evicted and
// are found again by a miss's scan.
constexpr std::size_t kMaxVariants = 16;
// "<cache_dir>/<source_key[0..2]>/<source_key>.variants".
std::string variants_file_for(const std::string &cache_dir, const std::string &source_key);
// A variants file name: 32 lowercase hex digits and ".variants".
bool is_variants_name(std::string_view name);
// The keys the variants file at `path` lists, in order; empty when it is missing, unreadable,
// damaged or not a regular file (never followed through a link). Lines that are not keys are
// skipped.
std::vector<std::string> read_variants(const std::string &path);
// Puts `key` first in the variants file at `path` (its shard folder exists), keeping at most
// kMaxVariants keys: written to a temp file in the shard and renamed over the old one, so a
// reader sees one whole list. Two writers at once may lose one's key (the last rename wins):
// only a later scan then. `shared`: a team cache (the file is made 0664). Best effort: false
// when it could not be written (a read-only cache), with nothing left behind.
bool record_variant(const std::string &path, const std::string &key, bool shared);

// The entry folder at `entry`, opened (O_DIRECTORY, not through a link), so that its cubin and
// its manifest are read from one folder: a rebuild swaps a whole new entry in at the same path
// (RENAME_EXCHANGE), and reads by path could pair the old cubin with the new manifest. Errors:
// io naming the folder and the errno text.
Result<UniqueFd> open_entry(const std::string &entry);

// The fields of manifest.txt, written at publish. Format 2 (docs/cache-layout.md): a header
// line, one "label: value" line per field, and a last line "check: <16 hex digits>", the
// XXH3-64 of all the text before it. The manifest is the entry's source of truth for its
// kernel's name and its cubin's content (`kjit cache verify --fix` rebuilds sidecars from it,
// the resolver confirms rescans against it, loads check the cubin against it), so a manifest
// whose check fails is damaged and never used.
struct Manifest {
    std::string key;
    // For an entry of a request that reads files (a variant, above): the source key it is one
    // result of; empty otherwise.
    std::string source_key;
    std::string keyword;
    std::string name;  // the lowered name expression, else the keyword rule's choice, at publish
    std::string arch;
    std::string nvrtc;
    std::vector<std::string> options;
    std::vector<std::string> include_paths;
    std::vector<std::string> headers;  // in-memory header names
    std::optional<std::string> name_expression;
    std::string program_name;  // the NVRTC program's name when the caller gave one (since 0.7)
    std::uint64_t cubin_bytes = 0;
    std::string cubin_hash;  // XXH3-128 of the published cubin, 32 lowercase hex digits
    double compile_seconds = 0;
    std::string created;  // UTC, "YYYY-MM-DDTHH:MM:SSZ"
};

// A manifest larger than this is not ours (a real one is a few KiB): it is not read.
constexpr std::size_t kMaxManifestBytes = 1u << 20;

std::string format_manifest(const Manifest &m);
// Errors: io, naming `path` and what is wrong (not a manifest of this format, a failing check
// line, a bad line, a missing key, keyword, name or cubin hash).
Result<Manifest> parse_manifest(std::string_view text, const std::string &path);
// Reads and parses `<entry>/manifest.txt` (not through a link; from the open folder `entry_fd`
// when given, see open_entry). Errors: io naming the file (missing, unreadable, too large,
// damaged).
Result<Manifest> read_manifest(const std::string &entry, int entry_fd = AT_FDCWD);

// The entry's manifest, once `bytes` (the whole cubin, as read from `cubin_path` in the entry
// at `entry`, opened as `entry_fd`: open_entry) are confirmed to be what was published: the size
// and XXH3-128 the manifest recorded. Reading both through one open folder makes a mismatch
// damage, never a rebuild racing the read. Errors: bad_cubin naming the cubin, what is wrong (the
// content differs, or the manifest is missing or damaged so the content cannot be confirmed)
// and what to do. Costs one small file read and a hash of `bytes` (about 0.1 ms per MB).
Result<Manifest> confirm_published(const std::string &entry, int entry_fd, const std::string &cubin_path,
                                   std::string_view bytes);

// `manifest` as publish() writes it for `cubin`: its size, XXH3-128 and the time (now) filled in.
Manifest complete_manifest(Manifest manifest, std::string_view cubin);

// A freshly compiled entry, as publish() writes it.
struct NewEntry {
    std::string_view cubin;
    std::string_view source;
    // Every field but cubin_bytes, cubin_hash and created, which publish() fills in. Its key,
    // keyword and name say where the entry goes and what its sidecar line says.
    Manifest manifest;
    // deps.txt (key::include_scanner::format), for a request that may read files; else none.
    std::optional<std::string> deps_text;
    // origin.txt (key::include_scanner::origin), when deps.txt has relative records and they
    // were proven where the request's folders are: made here, or checked by content here.
    std::optional<std::string> origin_text;
    // Whether publish() fsyncs the cubin and the temp entry folder before the rename (the
    // KJIT_DURABILITY=entry setting); without it nothing is fsynced, and an entry that a power
    // cut tore is refused by every read (the sidecar's size and mtime, the manifest's check line
    // and the cubin's XXH3-128; docs/cache-layout.md#durability) and rebuilt.
    bool durable = false;
};

// What publish() did.
struct Published {
    std::string cubin_path;  // <entry>/kernel.cubin
    enum class Outcome {
        placed,    // the entry was put in place
        replaced,  // it replaced an unusable entry at its place
        found,     // an entry at its place serves (another process published it first): it stays
    } outcome = Outcome::placed;
    std::uint64_t bytes_written = 0;  // 0 when found
};

// Decides about an entry already at the place publish() wants (another process may have just
// published it, or it is damaged or stale): true when it serves, then it stays; false, with
// *why saying what is wrong with it, when publish() is to replace it. An error (the entry is
// someone else's) fails the publish.
using ExistingEntryCheck = std::function<Result<bool>(std::string *why)>;

// Whose entries a reader may believe (folder_trust.hpp): the one rule that a seed, `kjit cache
// import` (each entry of the source), `kjit cache export` (an entry already at the destination)
// and `kjit cache verify` apply to an entry they did not write, with `folder` the check of the
// folder the entry lies in.
//
// Why the shard folder `shard` cannot be trusted: a link in a shard's place (libkjit never makes
// one, and it would send readers to folders the check never saw), or a folder owned by someone
// `folder` does not trust (who can move entries around in it); nullopt when it can, or when it
// is not there. Errors name the path, the owner and what to do.
std::optional<Error> untrusted_shard(const folder_trust::CacheFolder &folder, const std::string &shard);
// Why the entry at `entry` (lstat'ed as `entry_st`) cannot be trusted: it, or its shard, is
// someone else's (untrusted_shard), or with `files` a file in it is someone else's or a link;
// nullopt when it can. Whoever owns any of them chose its cubin. `files` costs a listing of the
// entry: the readers of entries from elsewhere (seeds, import, export, verify) pay it, a hit in
// one's own cache does not (its entry folders are made 0700, or 02770 in a team cache).
std::optional<Error> untrusted_entry(const folder_trust::CacheFolder &folder, const std::string &entry,
                                     const struct stat &entry_st, bool files);

// Makes the shard folder `shard` of the cache at `cache_dir` (as `folder` checked it; rechecked
// when this creates it) ready to take a new entry or file: created when missing, never a link nor
// owned by someone untrusted, and group-writable in a team cache. Errors: io naming the folder.
Status ready_shard(const std::string &cache_dir, const std::string &shard, folder_trust::CacheFolder &folder);

// Publishes `entry` under its manifest's key in the cache at `cache_dir` (as `folder` checked
// it): readies its shard, builds the whole entry (cubin, sidecar, source, manifest, deps.txt) in
// a private temp folder beside its final place and renames it into place, so readers see a
// complete entry or none. The cubin is backdated (filesystem.hpp's kBackdated: its sidecar line
// needs no content hash, and any later change to it can never look like this version), and with
// entry.durable it and the temp folder are fsynced before the rename; in a team cache every
// file and folder is group-writable. An entry already at the place is asked about
// (`existing_serves`) and kept, or swapped out atomically
// (RENAME_EXCHANGE; where the file system has none, moved aside first: a reader in between sees
// a miss, never a partial entry). Nothing is left behind on failure. Errors: io naming the
// step and path, with its errno in Error::sys_errno (ENOSPC, EDQUOT: the caller may make room).
Result<Published> publish(const std::string &cache_dir, folder_trust::CacheFolder &folder, const NewEntry &entry,
                          const ExistingEntryCheck &existing_serves);

// Whether the cubin of an entry, whose stat is `cubin`, may hold bytes that never reached the
// disk: it was last changed (its ctime, stamped by its write and backdating, and settable by no
// one) before this boot began, or more than kCtimeAheadNs after `now_ns` (a clock set back since;
// a file server's clock a little ahead is not one). A file written in this boot reads back from
// the page cache whatever reached the disk; one from an earlier boot reads from the disk, where
// a power cut may have left a file that was not fsynced (the manifest; the cubin of a publish
// without fsync, KJIT_DURABILITY=none) as the right size of zeros, which the sidecar's size and
// mtime cannot show.
constexpr std::int64_t kCtimeAheadNs = 300'000'000'000;  // 5 minutes
bool written_before_boot(const FileIdentity &cubin, std::int64_t now_ns);

// Confirms the entry at `entry`, whose cubin `cubin` was written_before_boot, as read_published
// does (the cubin's bytes against its manifest's XXH3-128, the manifest's check line), then
// sets the cubin's mtime to what it is (a no-op for its sidecar line, which keeps matching) so
// that its ctime says this boot and later hits need no read; `cubin` is then its new stat. A
// cubin that cannot be stamped (someone else's) is confirmed again by the next process. Errors:
// read_published's, or bad_cubin when the cubin changed meanwhile: the entry is not to be served.
Status confirm_after_boot(const std::string &entry, FileIdentity &cubin);

// A cubin read whole, and what its cache entry says of it.
struct CubinBytes {
    std::string bytes;
    FileIdentity identity;  // fstat of the file the bytes were read from
    // For a cubin of a cache entry (entry_of_cubin): the entry's manifest, confirmed against the
    // bytes (confirm_published); none for a loose cubin.
    std::optional<Manifest> published;
};

// Reads the cubin at `cubin_path` whole (never mapped: symbol_scanner's read_cubin_at). When it
// lies in a cache entry, first records the entry's use (so eviction spares an entry being
// loaded), then reads the cubin and the manifest through one open folder (a rebuild can swap a
// whole new entry in at the same path meanwhile, and reads by path could pair the old cubin
// with the new manifest) and confirms the bytes are those published: size, mtime and sidecar
// cannot show a same-size change whose mtime was put back, the content hash can. Errors: io,
// bad_cubin (confirm_published). Thread safe.
Result<CubinBytes> read_cubin(const std::string &cubin_path);
// read_cubin's reading of the cubin of the entry at `entry`, without recording its use: nothing
// is written (a seed cache's entry, which is read-only). Errors as read_cubin's.
Result<CubinBytes> read_published(const std::string &entry);

}  // namespace kjit::store::cache_entry
