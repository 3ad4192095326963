#include "storage/local_store.hpp"

#include "key/dependency_watch.hpp"
#include "key/include_scanner.hpp"
#include "resolve/name_resolver.hpp"
#include "store/cache_entry.hpp"
#include "store/cache_eviction.hpp"
#include "store/cache_inventory.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/log.hpp"
#include "util/size_units.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

namespace kjit::storage {

namespace {

// A deps.txt larger than this is not ours.
constexpr std::size_t kMaxDepsFileSize = 64u << 20;

void list_variant(const key::Request &request, const std::string &source_key, const std::string &entry_key,
                  folder_trust::CacheFolder &folder) {
    const std::string shard = request.cache_dir + "/" + source_key.substr(0, 2);
    const std::string variants = store::cache_entry::variants_file_for(request.cache_dir, source_key);
    if (auto ready = store::cache_entry::ready_shard(request.cache_dir, shard, folder); !ready) {
        log().debug("variant {} of {} not listed: {}", entry_key, source_key, ready.error().message);
    } else if (!store::cache_entry::record_variant(variants, entry_key, folder_trust::shared(folder))) {
        log().debug("variant {} of {} not listed: cannot write '{}'", entry_key, source_key, variants);
    }
}

// A cache folder that cannot take a new entry: say so before compiling, not with the errno of
// the first mkdir that fails.
Error not_writable(const std::string &cache_dir, const folder_trust::CacheFolder &folder) {
    return Error{Errc::io, "cache folder '" + cache_dir + "' is not writable by you (" + folder.owner_text +
                               "): it serves the kernels already in it, and this one is not; use a cache folder "
                               "of your own for it (KJIT_CACHE_DIR), or have the cache's owner compile it there"};
}

// The cache folder could not be made: `why` (naming the folder and what failed), and for the
// default folder, where it came from and what to set instead ($HOME without room for it, or a
// HOME=/nonexistent of a service account).
Error cannot_create(const key::Request &request, Error why) {
    if (request.cache_dir_origin) {
        why.message += std::string("; it is the default cache folder, from ") + request.cache_dir_origin +
                       ": set $KJIT_CACHE_DIR to a folder you can write, or pass one in kjit_compile_options.cache_dir";
    }
    return why;
}

}  // namespace

Lookup check_entry(const EntryContext &at, const std::string &entry, std::string_view source_key, std::string *why,
                   ReadOnlyCheck *read_only) {
    const key::Request &request = at.request;
    const folder_trust::CacheFolder &folder = at.folder;
    Counters &counters = at.counters;
    key::include_scanner::FileMemo *memo = at.memo;
    struct stat st {};
    if (::lstat(entry.c_str(), &st) != 0) return Lookup::absent;
    if (!S_ISDIR(st.st_mode)) {  // a link or file planted where the entry goes: never followed
        *why = S_ISLNK(st.st_mode) ? "the entry is a symbolic link" : "the entry is not a folder";
        return Lookup::unusable;
    }
    // Whoever owns the entry, or its shard (who can move entries around in it), chose its cubin;
    // in a seed, whoever owns a file in it too (cache_entry.hpp: the rule import and export apply).
    if (auto untrusted = store::cache_entry::untrusted_entry(folder, entry, st, read_only != nullptr)) {
        *why = std::move(untrusted->message);
        return Lookup::foreign;
    }
    // Recency for eviction: at most one utimensat per entry per kRecencyStepNs, usually none.
    if (!read_only) store::cache_entry::note_use(entry, st, realtime_ns());
    if (!request.reads_files) return Lookup::hit;
    // Checked earlier in this process, and nothing it depends on changed since (inotify,
    // dependency_watch.hpp): no deps.txt to read, no file to stat.
    const std::string proof_key = key::proof_context(request, source_key);
    if (!read_only && key::dependency_watch::proven(entry, st, proof_key)) {
        counters.dependency_proofs.fetch_add(1, std::memory_order_relaxed);
        return Lookup::hit;
    }
    const auto text = read_small_file(entry + "/" + store::cache_entry::kDepsFile, kMaxDepsFileSize);
    auto deps = text ? key::include_scanner::parse(*text, request.search)
                     : Result<std::vector<key::include_scanner::Dependency>>(Error{Errc::io, "missing"});
    if (!deps) {
        *why = "its header list is missing or damaged";
        return Lookup::unusable;
    }
    if (!source_key.empty() &&
        key::variant_key(source_key, *deps) != std::string_view(entry).substr(entry.size() - 32)) {
        *why = "its header list does not give its key back (damaged, or another request's)";
        return Lookup::unusable;
    }
    // Records relative to a folder are compared by content, unless origin.txt says they were
    // proven where the request's folders are now: then size and mtime stand for the content,
    // as for an absolute record (a header tree found through -I is otherwise read whole at
    // each process's first check).
    const std::string origin_here = key::include_scanner::origin(*text, *deps, request.search);
    const auto recorded_origin =
        origin_here.empty() ? std::nullopt : read_small_file(entry + "/" + store::cache_entry::kOriginFile, 256);
    const bool at_origin = recorded_origin && *recorded_origin == origin_here;
    // Watched from before the check: a change during it is seen by the next lookup. Files
    // another entry's check found as recorded since the last change are not stat'ed again.
    key::include_scanner::FileMemo own_memo;
    key::include_scanner::FileMemo *files = memo ? memo : &own_memo;
    std::optional<std::uint64_t> watched;
    std::vector<bool> proven;
    if (!read_only) watched = key::dependency_watch::arm(*deps, &proven);
    const key::include_scanner::Check checked = key::include_scanner::check(*deps, files, at_origin, &proven);
    counters.dependency_hashes.fetch_add(checked.hashed, std::memory_order_relaxed);
    counters.dependency_stats.fetch_add(checked.stated, std::memory_order_relaxed);
    if (!checked.current) {
        *why = "a file it may read changed, appeared or went away (deps.txt)";
        if (read_only) read_only->files_changed = true;
        return Lookup::unusable;
    }
    if (read_only) {
        read_only->deps = std::move(*deps);  // as checked: the copy published from it records them so
        return Lookup::hit;
    }
    const unsigned mode = folder_trust::shared(folder) ? kGroupWritable : 0;
    const std::string temp_stem = entry + "/" + std::string(store::cache_entry::kDepsTempPrefix);
    std::string refreshed;  // deps.txt's new text, when it was rewritten
    bool rewritten = false;
    if (key::include_scanner::settle(*deps) || checked.refreshed) {
        // Headers that were young when recorded are verified and old now, or were found
        // with the same content under a new mtime (a touch, a reinstall): store the list
        // again (temp file and rename in the entry) so later hits only stat them. Best
        // effort: a read-only cache keeps checking their content.
        refreshed = key::include_scanner::format(*deps);
        rewritten = replace_file(entry + "/" + store::cache_entry::kDepsFile, temp_stem, {}, refreshed, mode).ok();
    }
    // Every relative record was just proven here (by content, or here already): say so for the
    // list as it now is on disk, so that later checks here stat them only. After deps.txt, so a
    // reader between the two renames finds an origin for another text: a content check.
    if (!origin_here.empty() && (!at_origin || rewritten)) {
        const std::string_view on_disk = rewritten ? std::string_view(refreshed) : std::string_view(*text);
        (void)replace_file(entry + "/" + store::cache_entry::kOriginFile, temp_stem, {},
                           key::include_scanner::origin(on_disk, *deps, request.search), mode);
    }
    // Young headers too: an edit within their timestamp tick, which size and mtime cannot
    // show, still raises an event. They are settled by the next full check once old.
    if (watched) {
        key::dependency_watch::note_checked(*deps, *watched, &proven);
        key::dependency_watch::remember(entry, st, proof_key, *watched);
    }
    return Lookup::hit;
}

void record_dependencies(store::cache_entry::NewEntry &entry, const key::Request &request,
                         const std::vector<key::include_scanner::Dependency> &deps) {
    entry.deps_text = key::include_scanner::format(deps);
    std::string origin = key::include_scanner::origin(*entry.deps_text, deps, request.search);
    if (!origin.empty()) entry.origin_text = std::move(origin);
}

namespace {

// What a look-up of an entry (or of a source key's variants) found: a hit, with the cubin's path,
// its kernel's name and the cubin file as proved; absent; unusable or foreign, `why` saying why.
struct Looked {
    Lookup lookup = Lookup::absent;
    std::string cubin;
    std::string name;
    FileIdentity proven;
    std::string why;
};

// Whether the entry at `entry` answers `at.request`: check_entry (its owner, every file it may
// read unchanged), then its cubin and sidecar intact. Reads the sidecar, stats the cubin; no
// cubin read, no scan, unless the sidecar does not match the cubin as it is (damaged, lost, or
// the cubin's size or mtime changed). Then the resolver rescans, which first confirms the
// cubin's bytes against the hash its manifest recorded: a cubin changed on disk makes the entry
// unusable, so it is rebuilt, never served. (A whole-second mtime also hashes the cubin on each
// hit: sidecar-format.md. A cubin written before this boot is confirmed so once, in a cache the
// caller may write: cache_entry::written_before_boot.) foreign: the entry or its shard is owned
// by someone the folder does not trust (`why` is the error's text). `source_key`: the entry is a
// variant of that source key, else empty.
Looked look_up(const EntryContext &at, const std::string &entry, std::string_view source_key) {
    Looked out;
    out.lookup = check_entry(at, entry, source_key, &out.why);
    if (out.lookup != Lookup::hit) return out;
    out.cubin = entry + "/" + store::cache_entry::kCubinFile;
    auto resolved = resolve::NameResolver::instance().resolve(out.cubin, at.request.keyword, &out.proven,
                                                              resolve::NameResolver::Repeats::not_expected);
    if (!resolved) {
        out.why = resolved.error().message;
        out.lookup = Lookup::unusable;
        return out;
    }
    // A cubin from before this boot may be the right size of zeros, if its publish skipped the
    // fsync and the power went: read it once, then its ctime says it was read back. Only where
    // the caller may write: a read-only cache was filled by a copy (export, an image layer) that
    // read the bytes back, and cannot keep the proof, so every process would read every cubin.
    if (at.folder.writable && store::cache_entry::written_before_boot(out.proven, realtime_ns())) {
        if (auto confirmed = store::cache_entry::confirm_after_boot(entry, out.proven); !confirmed) {
            out.why = confirmed.error().message;
            out.lookup = Lookup::unusable;
            return out;
        }
    }
    out.name = std::move(*resolved);
    return out;
}

// The first variant of `source_key` that its variants file lists and that answers `at.request`
// (look_up): a hit; foreign when one belongs to someone the folder does not trust; else absent
// (none listed) or unusable (`why`: the first's reason). The one found goes first in the list, so
// the next lookup of this state of the files tries it first: a write only when the files changed
// back to an earlier state.
Looked look_up_variants(const EntryContext &at, const std::string &source_key) {
    const std::string list = store::cache_entry::variants_file_for(at.request.cache_dir, source_key);
    // The entry this process found last, tried first: proven by the header watch, a hit reads
    // no variants file and no deps.txt.
    const std::string last = key::dependency_watch::last_variant(list);
    if (!last.empty()) {
        Looked found = look_up(at, last, source_key);
        if (found.lookup == Lookup::hit) return found;
    }
    const std::vector<std::string> keys = store::cache_entry::read_variants(list);
    Looked result;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::string entry = store::cache_entry::folder_for(at.request.cache_dir, keys[i]);
        if (entry == last) continue;  // not a hit just now
        Looked found = look_up(at, entry, source_key);
        if (found.lookup == Lookup::foreign) return found;
        if (found.lookup == Lookup::hit) {
            if (i > 0 && at.folder.writable)
                store::cache_entry::record_variant(list, keys[i], folder_trust::shared(at.folder));
            key::dependency_watch::note_variant(list, entry);
            return found;
        }
        if (result.lookup == Lookup::absent && found.lookup == Lookup::unusable) result = std::move(found);
    }
    return result;
}

// A lookup's answer as the store's: a hit's path and name, a miss (`*why` set to why, when it
// was not absent), or the refusal to serve.
Result<std::optional<Found>> answer(Looked found, std::string *why) {
    if (found.lookup == Lookup::foreign) {
        *why = found.why;
        return Error{Errc::io, std::move(found.why)};
    }
    if (found.lookup == Lookup::hit) {
        return std::optional<Found>(Found{std::move(found.cubin), std::move(found.name), found.proven});
    }
    *why = found.lookup == Lookup::absent ? std::string() : std::move(found.why);
    return std::optional<Found>();
}

// Whether a publish that failed with `e` may succeed once room is made under the size limit.
bool out_of_room(const Error &e) { return e.sys_errno == ENOSPC || e.sys_errno == EDQUOT; }

}  // namespace

Result<folder_trust::CacheFolder> &LocalStore::folder(const key::KeyedRequest &keyed, Call &call) {
    if (!call.local_folder) call.local_folder.emplace(folder_trust::check_cache_folder(keyed.request.cache_dir));
    return *call.local_folder;
}

Result<std::optional<Found>> LocalStore::find(const key::KeyedRequest &keyed, Call &call,
                                              key::include_scanner::FileMemo *memo, std::string *why) {
    const auto &folder = LocalStore::folder(keyed, call);
    if (!folder) return folder.error();
    const EntryContext at{keyed.request, *folder, counters_, memo};
    return answer(keyed.request.reads_files ? look_up_variants(at, keyed.key) : look_up(at, keyed.entry, {}), why);
}

Result<std::optional<Found>> LocalStore::find_variant(const key::KeyedRequest &keyed, Call &call,
                                                      const std::string &variant_key, std::string *why) {
    const key::Request &request = keyed.request;
    auto &folder = LocalStore::folder(keyed, call);
    if (!folder) return folder.error();
    const std::string entry = store::cache_entry::folder_for(request.cache_dir, variant_key);
    Looked found = look_up(EntryContext{request, *folder, counters_, nullptr}, entry, keyed.key);
    if (found.lookup == Lookup::hit && folder->writable) list_variant(request, keyed.key, variant_key, *folder);
    return answer(std::move(found), why);
}

Status LocalStore::can_publish(const key::KeyedRequest &keyed, Call &call) {
    auto &folder = LocalStore::folder(keyed, call);
    if (!folder) return folder.error();
    // A cache others filled for us to read (root's, a read-only mount) serves hits only.
    if (folder->exists && !folder->writable) return not_writable(keyed.request.cache_dir, *folder);
    if (!folder->exists) {
        // Not made by lock_for_compile (which says nothing): make it now, to say why before compiling.
        const key::Request &request = keyed.request;
        if (auto made = make_folders(request.cache_dir, folder_trust::folder_mode(*folder), "the cache folder");
            !made) {
            return cannot_create(request, std::move(made).error());
        }
        folder = folder_trust::check_cache_folder_now(request.cache_dir);
        if (!folder) return folder.error();
    }
    return Ok{};
}

std::optional<store::compile_lock::Held> LocalStore::lock_for_compile(const key::KeyedRequest &keyed, Call &call) {
    const key::Request &request = keyed.request;
    auto &folder = LocalStore::folder(keyed, call);
    if (!folder || (folder->exists && !folder->writable)) return std::nullopt;
    if (!folder->exists) {
        if (!make_folders(request.cache_dir, folder_trust::folder_mode(*folder), "cache folder")) return std::nullopt;
        folder = folder_trust::check_cache_folder_now(request.cache_dir);  // as it is now, for the rest of the call
        if (!folder || !folder->writable) return std::nullopt;
    }
    store::compile_lock::Waited waited;
    auto held = store::compile_lock::acquire(request.cache_dir, *folder, keyed.key, request.compile_wait, &waited);
    if (waited.waited) counters_.compile_lock_waits.fetch_add(1, std::memory_order_relaxed);
    if (waited.timed_out) counters_.compile_lock_timeouts.fetch_add(1, std::memory_order_relaxed);
    return held;
}

Result<std::optional<std::string>> LocalStore::publish(const key::KeyedRequest &keyed, Call &call,
                                                       const store::cache_entry::NewEntry &entry) {
    const key::Request &request = keyed.request;
    auto &folder = LocalStore::folder(keyed, call);  // publishing updates it when it creates the folder
    if (!folder) return folder.error();
    const std::string &source_key = entry.manifest.source_key;
    // An entry already in place: another process won the race (it serves), or it is stale or
    // damaged (replaced).
    const std::string place = store::cache_entry::folder_for(request.cache_dir, entry.manifest.key);
    const auto existing_serves = [&](std::string *why) -> Result<bool> {
        Looked there = look_up(EntryContext{request, *folder, counters_, nullptr}, place, source_key);
        *why = std::move(there.why);
        if (there.lookup == Lookup::foreign) return Error{Errc::io, *why};
        return there.lookup == Lookup::hit;
    };
    auto published = store::cache_entry::publish(request.cache_dir, *folder, entry, existing_serves);
    // Under a size limit, a full disk (or quota) is room to make: eviction runs only after a
    // publish, so on a full disk it would never run. Evict least recently used entries and try
    // once more; the second failure is the error.
    if (!published && request.max_cache_bytes && out_of_room(published.error())) {
        const std::uint64_t needed = entry.cubin.size() + entry.source.size() + 32 * 1024;
        const store::cache_eviction::Freed freed =
            store::cache_eviction::make_room(request.cache_dir, *request.max_cache_bytes, needed);
        log().info("publishing {} failed ({}): evicted {} entries ({}) and trying again", entry.manifest.key,
                   published.error().message, freed.entries, size_units::format_size(freed.bytes));
        published = store::cache_entry::publish(request.cache_dir, *folder, entry, existing_serves);
        if (!published) {
            Error e = std::move(published).error();
            e.message += " (the disk was full: libkjit evicted " + std::to_string(freed.entries) +
                         " least recently used entries (" + size_units::format_size(freed.bytes) +
                         ") under the cache's size limit and tried again)";
            return e;
        }
    }
    if (!published) return std::move(published).error();
    using Outcome = store::cache_entry::Published::Outcome;
    if (published->outcome != Outcome::found) {
        counters_.entries_published.fetch_add(1, std::memory_order_relaxed);
        log().debug("published {} [{}] -> {}", entry.manifest.key, entry.manifest.keyword, entry.manifest.name);
    }
    if (published->outcome == Outcome::replaced) counters_.entries_rebuilt.fetch_add(1, std::memory_order_relaxed);
    // A variant is listed once its entry is in place.
    if (request.reads_files) list_variant(request, source_key, entry.manifest.key, *folder);
    if (published->bytes_written > 0) {
        // What the limit counts: disk space, as du does (the bytes written round up to blocks).
        const std::uint64_t bytes = std::max(published->bytes_written, store::cache_inventory::disk_usage(place));
        // Sweeping and eviction run after a publish, never on a hit, and are throttled.
        store::cache_eviction::after_publish(request.cache_dir, *folder, request.max_cache_bytes, bytes);
    }
    return std::optional<std::string>(std::move(published->cubin_path));
}

}  // namespace kjit::storage
