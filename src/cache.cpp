#include "cache.hpp"

#include "cache_entry.hpp"
#include "cache_maintenance.hpp"

#include "compiler.hpp"
#include "dependency_watch.hpp"
#include "driver.hpp"
#include "folder_trust.hpp"
#include "fork_guard.hpp"
#include "hashing.hpp"
#include "include_scanner.hpp"
#include "log.hpp"
#include "name_matcher.hpp"
#include "name_resolver.hpp"
#include "pch_folders.hpp"
#include "posix_file.hpp"
#include "sidecar_store.hpp"
#include "symbol_scanner.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <memory>

namespace kjit::cache {

namespace {

constexpr std::size_t kMaxDepsFileSize = 64u << 20;

using cache_entry::kCubinFile;
using cache_entry::kDepsFile;
using cache_entry::kManifestFile;
using cache_entry::kSourceFile;
using cache_entry::read_small_file;
using cache_entry::remove_tree;
using cache_entry::write_new_file;

std::atomic<unsigned long> temp_sequence{0};

std::string env(const char *name) {
    const char *v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// Feeds one labelled, length-prefixed field of the key encoding to the hash: no two
// different inputs encode alike. Streaming keeps a large source from being copied on a hit.
void field(XXH3_state_t *state, const char *label, std::string_view value) {
    XXH3_128bits_update(state, label, std::strlen(label) + 1);  // with its NUL
    unsigned char len[8];
    std::uint64_t n = value.size();
    for (unsigned char &b : len) {
        b = static_cast<unsigned char>(n & 0xff);
        n >>= 8;
    }
    XXH3_128bits_update(state, len, sizeof len);
    XXH3_128bits_update(state, value.data(), value.size());
}

using HashState = std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>;

// A fresh XXH3-128 stream.
HashState new_hash_state() {
    HashState state(XXH3_createState(), &XXH3_freeState);
    if (!state) throw std::bad_alloc();
    XXH3_128bits_reset(state.get());
    return state;
}

// The 32 hex digits of a finished XXH3-128 stream.
std::string hex_digest(XXH3_state_t *state) {
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, static_cast<std::uint64_t>(h.high64),
                  static_cast<std::uint64_t>(h.low64));
    return hex;
}

std::atomic<Cache *> instance_slot{nullptr};

// The files a compile may read, by content: each path with its XXH3-64, or "absent" (not sizes
// or mtimes, which a touch changes).
void deps_fields(XXH3_state_t *state, const std::vector<include_scanner::Dependency> &deps) {
    field(state, "deps", std::to_string(deps.size()));
    for (const auto &d : deps) {
        field(state, "dep.path", d.path);
        field(state, "dep.content", d.exists ? std::to_string(d.content_hash) : std::string("absent"));
    }
}

// What a PCH made while compiling `r` was made from: its header identity (pch_texts, below)
// and every file the compile may read, by content (`deps`, the same list the entry records),
// however it was reached.
std::string pch_identity(const Request &r, const std::vector<include_scanner::Dependency> &deps) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-pch", std::to_string(kFormatVersion));
    field(state, "texts", pch_texts(r));
    deps_fields(state, deps);
    return hex_digest(state);
}

// The key of one result of a request that reads files (a variant, cache_entry.hpp): its source
// key and the content of every file its compile may read (path, and XXH3-64 or absent, in the
// order deps.txt lists them; not their sizes or mtimes, which a touch changes). The same request
// over the same files gets the same key in every process, so builds of one state meet in one
// entry; and an entry's deps.txt gives its key back, which look_up checks: a variants file can
// only lead to entries of its own request and of the files as they are.
std::string variant_key(std::string_view source_key, const std::vector<include_scanner::Dependency> &deps) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-variant", std::to_string(kFormatVersion));
    field(state, "source_key", source_key);
    deps_fields(state, deps);
    return hex_digest(state);
}

Error io_error(const std::string &what, const std::string &path, int err) {
    return Error{Errc::io, what + " '" + path + "': " + errno_text(err), err};
}

// mkdir -p with `mode` for the folders it creates; an existing non-folder is an error.
Status make_dirs(const std::string &path, mode_t mode) {
    std::string partial;
    std::size_t pos = 0;
    while (pos != std::string::npos) {
        pos = path.find('/', pos + 1);
        partial = path.substr(0, pos);
        if (partial.empty()) continue;
        if (::mkdir(partial.c_str(), mode) == 0) continue;
        const int err = errno;
        struct stat st {};
        if (err == EEXIST && ::stat(partial.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
        return io_error("cannot create cache folder", partial, err == EEXIST ? ENOTDIR : err);
    }
    return Ok{};
}

Status fsync_dir(const std::string &path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid() || ::fsync(fd.get()) != 0) return io_error("cannot fsync folder", path, errno);
    return Ok{};
}

std::string manifest_text(const Request &r, const std::string &key, const std::string &source_key,
                          const std::string &name, std::string_view cubin, double compile_seconds) {
    char created[32];
    const std::time_t now = std::time(nullptr);
    struct tm utc {};
    gmtime_r(&now, &utc);
    std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &utc);
    cache_entry::Manifest m;
    m.key = key;
    m.source_key = source_key;
    m.keyword = r.keyword;
    m.name = name;
    m.arch = r.arch;
    m.nvrtc = r.nvrtc_identity;
    m.options = r.nvrtc_options;
    m.include_paths = r.include_paths;
    for (const auto &h : r.headers) m.headers.push_back(h.first);
    m.name_expression = r.name_expression;
    m.cubin_bytes = cubin.size();
    m.cubin_hash = hash128_hex(cubin);
    m.compile_seconds = compile_seconds;
    m.created = created;
    return cache_entry::format_manifest(m);
}

// Makes the shard folder `shard` of the cache at `cache_dir` (as `folder` checked it; rechecked
// when this creates it) ready to take a new entry or file: created when missing, never a link nor
// owned by someone untrusted, and group-writable in a team cache. Errors: io naming the folder.
Status ready_shard(const std::string &cache_dir, const std::string &shard, folder_trust::CacheFolder &folder) {
    if (auto made = make_dirs(shard, folder_trust::folder_mode(folder)); !made) return std::move(made).error();
    if (!folder.exists) {
        // Created just now (by us, or by someone faster): check it as it is.
        auto now = folder_trust::check_cache_folder_now(cache_dir);
        if (!now) return std::move(now).error();
        folder = std::move(*now);
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

// Puts `entry_key` first in the variants file of `source_key` (cache_entry::record_variant),
// making its shard ready first: the variant's own entry may lie in another shard. Best effort
// (a miss's scan finds an entry the file does not list): a failure is logged.
void list_variant(const Request &request, const std::string &source_key, const std::string &entry_key,
                  folder_trust::CacheFolder &folder) {
    const std::string shard = request.cache_dir + "/" + source_key.substr(0, 2);
    const std::string variants = cache_entry::variants_file_for(request.cache_dir, source_key);
    if (auto ready = ready_shard(request.cache_dir, shard, folder); !ready) {
        log().debug("variant {} of {} not listed: {}", entry_key, source_key, ready.error().message);
    } else if (!cache_entry::record_variant(variants, entry_key, folder_trust::shared(folder))) {
        log().debug("variant {} of {} not listed: cannot write '{}'", entry_key, source_key, variants);
    }
}

enum class Lookup { hit, absent, unusable, foreign };

// A cache folder that cannot take a new entry: say so before compiling, not with the errno of
// the first mkdir that fails.
Error not_writable(const std::string &cache_dir, const folder_trust::CacheFolder &folder) {
    return Error{Errc::io, "cache folder '" + cache_dir + "' is not writable by you (" + folder.owner_text +
                               "): it serves the kernels already in it, and this one is not; use a cache folder "
                               "of your own for it (KJIT_CACHE_DIR), or have the cache's owner compile it there"};
}

// Whether the entry at `entry` answers `request`: every file it may read unchanged (deps.txt,
// whenever the request may read any) and its cubin and sidecar intact. Reads the sidecar,
// stats the cubin (and each recorded file); no cubin read, no scan, unless the sidecar does not
// match the cubin as it is (damaged, lost, or the cubin's size or mtime changed). Then the
// resolver rescans, which first confirms the cubin's bytes against the hash its manifest
// recorded: a cubin changed on disk makes the entry unusable, so it is rebuilt, never served. (A
// whole-second mtime also hashes the cubin on each hit: sidecar-format.md.) foreign: the entry
// or its shard is owned by someone `folder` does not trust (*why is the error's text). Counts
// the recorded files it hashes in `counters`. `source_key`: the entry is a variant of that source
// key (then its deps.txt must give its key back: variant_key), else empty. `memo`: the call's
// FileMemo (a batch's), or null.
Lookup look_up(const Request &request, const std::string &entry, std::string_view source_key,
               const folder_trust::CacheFolder &folder, Cache::Counters &counters, include_scanner::FileMemo *memo,
               std::string *why) {
    const std::string cubin = entry + "/" + kCubinFile;
    struct stat st {};
    if (::lstat(entry.c_str(), &st) != 0) return Lookup::absent;
    if (!S_ISDIR(st.st_mode)) {  // a link or file planted where the entry goes: never followed
        *why = S_ISLNK(st.st_mode) ? "the entry is a symbolic link" : "the entry is not a folder";
        return Lookup::unusable;
    }
    // Whoever owns the entry, or its shard (who can move entries around in it), chose its cubin.
    if (!folder_trust::trusted_owner(folder, st.st_uid)) {
        *why = folder_trust::foreign_error(folder, "cache entry", entry, st).message;
        return Lookup::foreign;
    }
    const std::string shard = entry.substr(0, entry.find_last_of('/'));
    struct stat shard_st {};
    if (::lstat(shard.c_str(), &shard_st) == 0 && !folder_trust::trusted_owner(folder, shard_st.st_uid)) {
        *why = folder_trust::foreign_error(folder, "cache shard folder", shard, shard_st).message;
        return Lookup::foreign;
    }
    // Recency for eviction: at most one utimensat per entry per kRecencyStepNs, usually none.
    cache_entry::note_use(entry, st, realtime_ns());
    // Checked earlier in this process, and nothing it depends on changed since (inotify,
    // dependency_watch.hpp): no deps.txt to read, no file to stat.
    if (request.reads_files && dependency_watch::proven(entry, st, source_key)) {
        counters.dependency_proofs.fetch_add(1, std::memory_order_relaxed);
    } else if (request.reads_files) {
        const auto text = read_small_file(entry + "/" + kDepsFile, kMaxDepsFileSize);
        auto deps = text ? include_scanner::parse(*text) : Result<std::vector<include_scanner::Dependency>>(
                                                                 Error{Errc::io, "missing"});
        if (!deps) {
            *why = "its header list is missing or damaged";
            return Lookup::unusable;
        }
        if (!source_key.empty() &&
            variant_key(source_key, *deps) != std::string_view(entry).substr(entry.size() - 32)) {
            *why = "its header list does not give its key back (damaged, or another request's)";
            return Lookup::unusable;
        }
        // Watched from before the check: a change during it is seen by the next lookup.
        const std::optional<std::uint64_t> watched = dependency_watch::arm(*deps);
        const include_scanner::Check checked = include_scanner::check(*deps, memo);
        counters.dependency_hashes.fetch_add(checked.hashed, std::memory_order_relaxed);
        counters.dependency_stats.fetch_add(checked.stated, std::memory_order_relaxed);
        if (!checked.current) {
            *why = "a file it may read changed, appeared or went away (deps.txt)";
            return Lookup::unusable;
        }
        if (include_scanner::settle(*deps) || checked.refreshed) {
            // Headers that were young when recorded are verified and old now, or were found
            // with the same content under a new mtime (a touch, a reinstall): store the list
            // again (temp file and rename in the entry) so later hits only stat them. Best
            // effort: a read-only cache keeps checking their content.
            const std::string temp = entry + "/.deps.tmp-" + std::to_string(::getpid()) + "-" +
                                     std::to_string(::gettid()) + "-" + std::to_string(temp_sequence.fetch_add(1));
            if (write_new_file(temp, include_scanner::format(*deps), false, false, folder_trust::shared(folder)).ok()) {
                if (::rename(temp.c_str(), (entry + "/" + kDepsFile).c_str()) != 0) ::unlink(temp.c_str());
            } else {
                ::unlink(temp.c_str());
            }
        }
        // Young headers too: an edit within their timestamp tick, which size and mtime cannot
        // show, still raises an event. They are settled by the next full check once old.
        if (watched) dependency_watch::remember(entry, st, source_key, *watched);
    }
    auto name = NameResolver::instance().resolve(cubin, request.keyword);
    if (!name) {
        *why = name.error().message;
        return Lookup::unusable;
    }
    return Lookup::hit;
}

// The first variant of `source_key` that its variants file lists and that answers `request`
// (look_up): hit, with the cubin's path in *cubin; foreign when one belongs to someone `folder`
// does not trust (*why says who); else absent (none listed) or unusable (*why: the first's
// reason). The one found goes first in the list, so the next lookup of this state of the files
// tries it first: a write only when the files changed back to an earlier state.
Lookup look_up_variants(const Request &request, const std::string &source_key, const folder_trust::CacheFolder &folder,
                        Cache::Counters &counters, include_scanner::FileMemo *memo, std::string *cubin,
                        std::string *why) {
    const std::string list = cache_entry::variants_file_for(request.cache_dir, source_key);
    // The entry this process found last, tried first: proven by the header watch, a hit reads
    // no variants file and no deps.txt.
    const std::string last = dependency_watch::last_variant(list);
    if (!last.empty()) {
        std::string reason;
        const Lookup found = look_up(request, last, source_key, folder, counters, memo, &reason);
        if (found == Lookup::hit) {
            *cubin = last + "/" + kCubinFile;
            return found;
        }
    }
    const std::vector<std::string> keys = cache_entry::read_variants(list);
    Lookup result = Lookup::absent;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::string entry = cache_entry::folder_for(request.cache_dir, keys[i]);
        if (entry == last) continue;  // not a hit just now
        std::string reason;
        const Lookup found = look_up(request, entry, source_key, folder, counters, memo, &reason);
        if (found == Lookup::foreign) {
            *why = std::move(reason);
            return found;
        }
        if (found == Lookup::hit) {
            *cubin = entry + "/" + kCubinFile;
            if (i > 0 && folder.writable) cache_entry::record_variant(list, keys[i], folder_trust::shared(folder));
            dependency_watch::note_variant(list, entry);
            return found;
        }
        if (result == Lookup::absent && found == Lookup::unusable) {
            result = found;
            *why = std::move(reason);
        }
    }
    return result;
}

}  // namespace

Result<std::string> default_cache_dir() {
    if (std::string v = env("KJIT_CACHE_DIR"); !v.empty()) return v;
    if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/kjit";
    if (std::string v = env("HOME"); !v.empty()) return v + "/.cache/kjit";
    return Error{Errc::invalid_argument,
                 "no cache folder: set kjit_compile_options.cache_dir, $KJIT_CACHE_DIR, $XDG_CACHE_HOME or $HOME"};
}

Status check_arch(const std::string &arch) {
    if (arch.compare(0, 8, "compute_") == 0) {
        return Error{Errc::invalid_argument, "arch '" + arch +
                                                 "' is a virtual architecture (NVRTC makes PTX only for it) and "
                                                 "kjit_compile needs a cubin: use sm_" +
                                                 arch.substr(8)};
    }
    std::size_t digits = 0;
    while (3 + digits < arch.size() && arch[3 + digits] >= '0' && arch[3 + digits] <= '9') ++digits;
    const std::size_t rest = arch.size() - 3 - digits;
    const bool suffix_ok = rest == 0 || (rest == 1 && (arch.back() == 'a' || arch.back() == 'f'));
    if (arch.compare(0, 3, "sm_") != 0 || digits < 2 || !suffix_ok) {
        return Error{Errc::invalid_argument,
                     "arch '" + arch + "' is not a GPU target such as sm_90, sm_90a or sm_100a"};
    }
    return Ok{};
}

Result<std::string> default_arch() {
    if (std::string v = env("KJIT_ARCH"); !v.empty()) return v;
    auto detected = driver::current_device_arch();
    if (detected) return detected;
    return Error{Errc::invalid_argument, "no target arch: set kjit_compile_options.arch or $KJIT_ARCH (e.g. sm_90a); "
                                         "it could not be taken from a GPU either: " +
                                             detected.error().message};
}

std::string key_of(const Request &r) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-cache-key", std::to_string(kFormatVersion));
    field(state, "nvrtc", r.nvrtc_identity);
    field(state, "source", r.source);
    field(state, "headers", std::to_string(r.headers.size()));
    for (const auto &h : r.headers) {
        field(state, "header.name", h.first);
        field(state, "header.source", h.second);
    }
    field(state, "options", std::to_string(r.nvrtc_options.size()));
    for (const auto &o : r.nvrtc_options) field(state, "option", o);
    field(state, "include_paths", std::to_string(r.include_paths.size()));
    for (const auto &p : r.include_paths) field(state, "include_path", p);
    // Empty unless names may be looked up relative to it (include_scanner::reach): then the
    // same text compiled in another folder may read other files, and must not share the entry.
    field(state, "working_dir", r.search.working_dir);
    field(state, "arch", r.arch);
    field(state, "name_expression", r.name_expression ? "1" + *r.name_expression : std::string("0"));
    field(state, "keyword", r.keyword);
    return hex_digest(state);
}

std::string pch_texts(const Request &r) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-pch-texts", std::to_string(kFormatVersion));
    field(state, "arch", r.arch);
    field(state, "options", std::to_string(r.nvrtc_options.size()));
    for (const auto &o : r.nvrtc_options) field(state, "option", o);
    field(state, "pch_options", std::to_string(r.pch_options.size()));
    for (const auto &o : r.pch_options) field(state, "pch_option", o);
    field(state, "include_paths", std::to_string(r.include_paths.size()));
    for (const auto &p : r.include_paths) field(state, "include_path", p);
    field(state, "working_dir", r.search.working_dir);
    field(state, "headers", std::to_string(r.headers.size()));
    for (const auto &h : r.headers) {
        field(state, "header.name", h.first);
        field(state, "header.source", h.second);
    }
    const std::size_t last_include = r.source.rfind("#include");
    std::size_t prefix = 0;
    if (last_include != std::string::npos) {
        const std::size_t eol = r.source.find('\n', last_include);
        prefix = eol == std::string::npos ? r.source.size() : eol + 1;
    }
    field(state, "source.prefix", std::string_view(r.source).substr(0, prefix));
    return hex_digest(state);
}

Cache &Cache::instance() {
    return fork_guard::lazy(instance_slot, [] { return new Cache(); });  // leaked: usable during exit
}

const bool Cache::fork_handler_registered_ = fork_guard::at_fork_child(&Cache::renew_in_forked_child);

void Cache::renew_in_forked_child() {
    Cache *cache = instance_slot.load(std::memory_order_relaxed);
    if (!cache) return;
    fork_guard::renew(cache->flights_mutex_);
    fork_guard::renew(cache->flights_);
    cache->counters_.compiles_in_flight.store(0, std::memory_order_relaxed);
}

Result<std::string> Cache::compile(Request request) {
    auto prepared = prepare(std::move(request));
    if (!prepared) return std::move(prepared).error();
    auto found = find(*prepared);
    if (!found) return std::move(found).error();
    if (*found) return std::move(**found);
    return build(*prepared);
}

void Cache::count_merged(bool hit, std::uint64_t n) {
    if (hit) {
        counters_.hits.fetch_add(n, std::memory_order_relaxed);
    } else {
        counters_.misses.fetch_add(n, std::memory_order_relaxed);
        counters_.shared_waits.fetch_add(n, std::memory_order_relaxed);
    }
}

Result<Cache::Prepared> Cache::prepare(Request request) const {
    if (auto st = name_matcher::check_keyword(request.keyword); !st) return std::move(st).error();
    if (auto st = check_arch(request.arch); !st) return std::move(st).error();
    // NVRTC's PCH options never reach it as given: it would reuse a PCH made from headers since
    // edited. `--pch` becomes libkjit's PCH, in a folder per header identity; options naming
    // the caller's PCH files are refused. None of them changes what the cubin does: not in the
    // key, nor in the manifest.
    auto pch = compiler::take_pch_options(request.nvrtc_options);
    if (!pch) return std::move(pch).error();
    request.nvrtc_options = std::move(pch->rest);
    request.pch_requested = pch->automatic;
    request.use_pch = request.use_pch || pch->automatic;
    request.pch_options = std::move(pch->shape);
    for (const std::string &o : request.nvrtc_options) {
        if (o.compare(0, 5, "-arch") == 0 || o.compare(0, 19, "--gpu-architecture") == 0 ||
            o.compare(0, 18, "-gpu-architecture") == 0) {
            return Error{Errc::invalid_argument,
                         "NVRTC option '" + o + "' sets the target: use kjit_compile_options.arch instead"};
        }
    }
    // Relative folders mean different things in different working directories: key and
    // compile with absolute ones.
    std::error_code ec;
    const std::string given_cache_dir = request.cache_dir;
    request.cache_dir = std::filesystem::absolute(given_cache_dir, ec).lexically_normal().string();
    if (ec || request.cache_dir.empty()) return Error{Errc::io, "cannot make '" + given_cache_dir + "' absolute"};
    while (request.cache_dir.size() > 1 && request.cache_dir.back() == '/') request.cache_dir.pop_back();
    for (std::string &p : request.include_paths) p = std::filesystem::absolute(p, ec).lexically_normal().string();

    // Every file NVRTC may read must be in the key by content, however it is reached: find how
    // it looks files up (docs/cache-layout.md). Relative include folders and pre-included files
    // among the NVRTC options, like the source's quoted includes, are looked up relative to the
    // working directory, which then enters the key.
    auto files = include_scanner::file_options(request.nvrtc_options);
    if (!files) return std::move(files).error();
    const include_scanner::Reach reach = include_scanner::reach(request.source, request.headers, *files);
    request.reads_files = reach.reads_files;
    request.search = include_scanner::Search{};
    if (reach.uses_working_dir) {
        std::error_code cwd_ec;
        request.search.working_dir = std::filesystem::current_path(cwd_ec).string();
        if (cwd_ec || request.search.working_dir.empty() || request.search.working_dir[0] != '/') {
            return Error{Errc::io, "cannot tell the working directory, which the source's includes or the NVRTC "
                                   "options make NVRTC search: " +
                                       (cwd_ec ? cwd_ec.message() : "'" + request.search.working_dir + "'")};
        }
    }
    for (const std::string &d : files->include_dirs) {
        request.search.include_dirs.push_back(d[0] == '/' ? d : request.search.working_dir + "/" + d);
    }
    request.search.include_dirs.insert(request.search.include_dirs.end(), request.include_paths.begin(),
                                       request.include_paths.end());
    request.search.pre_includes = std::move(files->pre_includes);
    request.search.defines = std::move(files->defines);

    // NVRTC's build is in the key, so a lookup loads NVRTC too; checked last, so that a bad
    // request says what is wrong with it even where there is no NVRTC.
    auto nvrtc = compiler::nvrtc_identity();
    if (!nvrtc) return std::move(nvrtc).error();
    request.nvrtc_identity = std::move(*nvrtc);

    Prepared prepared;
    prepared.key = key_of(request);
    prepared.entry = cache_entry::folder_for(request.cache_dir, prepared.key);
    prepared.cubin = prepared.entry + "/" + kCubinFile;
    prepared.request = std::move(request);
    return prepared;
}

Result<std::optional<std::string>> Cache::find(const Prepared &prepared, include_scanner::FileMemo *memo) {
    const Request &request = prepared.request;
    auto folder = folder_trust::check_cache_folder(request.cache_dir);
    if (!folder) return std::move(folder).error();
    std::string why;
    std::string cubin = prepared.cubin;
    const Lookup found = request.reads_files
                             ? look_up_variants(request, prepared.key, *folder, counters_, memo, &cubin, &why)
                             : look_up(request, prepared.entry, {}, *folder, counters_, memo, &why);
    if (found == Lookup::foreign) return Error{Errc::io, why};
    if (found == Lookup::hit) {
        counters_.hits.fetch_add(1, std::memory_order_relaxed);
        log().debug("cache hit {} [{}]: {}", prepared.key, request.keyword, cubin);
        return std::optional<std::string>(std::move(cubin));
    }
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    log().debug("cache miss {} [{}]: {}", prepared.key, request.keyword,
                found == Lookup::absent ? std::string("no entry") : "entry unusable: " + why);
    return std::optional<std::string>();
}

Result<std::string> Cache::build(const Prepared &prepared) {
    const Request &request = prepared.request;
    const std::string &key = prepared.key;
    const std::string &entry = prepared.entry;
    // One compile per entry (cache folder and key) in this process; later callers wait for it
    // and share its result. Not per key alone: the result is a path in one cache folder, and a
    // caller of another folder would get that path while its own cache stayed empty.
    std::shared_ptr<Flight> flight;
    bool leader = false;
    {
        std::lock_guard<std::mutex> lock(flights_mutex_);
        auto &slot = flights_[entry];
        if (!slot) {
            slot = std::make_shared<Flight>();
            leader = true;
        }
        flight = slot;
    }
    if (!leader) {
        counters_.shared_waits.fetch_add(1, std::memory_order_relaxed);
        std::unique_lock<std::mutex> lock(flight->mutex);
        flight->done_cv.wait(lock, [&] { return flight->done; });
        return *flight->result;
    }
    Result<std::string> result = [&]() -> Result<std::string> {
        try {
            std::uint64_t published_bytes = 0;
            auto published = compile_and_publish(request, key, entry, &published_bytes);
            // Sweeping and eviction run after a publish, never on a hit, and are throttled.
            if (published && published_bytes > 0) {
                cache_maintenance::after_publish(request.cache_dir, request.max_cache_bytes, published_bytes);
            }
            return published;
        } catch (const std::bad_alloc &) {
            return Error{Errc::out_of_memory, "out of memory while compiling " + key};
        } catch (const std::exception &e) {
            return Error{Errc::internal, std::string("internal error while compiling: ") + e.what()};
        }
    }();
    {
        std::lock_guard<std::mutex> lock(flight->mutex);
        flight->result = result;
        flight->done = true;
    }
    flight->done_cv.notify_all();
    {
        std::lock_guard<std::mutex> lock(flights_mutex_);
        flights_.erase(entry);
    }
    return result;
}

Result<std::string> Cache::compile_and_publish(const Request &request, const std::string &key,
                                               const std::string &entry, std::uint64_t *published_bytes) {
    auto folder = folder_trust::check_cache_folder(request.cache_dir);
    if (!folder) return std::move(folder).error();
    // Another process may have published while this one waited or looked.
    std::string why;
    std::string cubin_path = entry + "/" + kCubinFile;
    const Lookup found = request.reads_files
                             ? look_up_variants(request, key, *folder, counters_, nullptr, &cubin_path, &why)
                             : look_up(request, entry, {}, *folder, counters_, nullptr, &why);
    if (found == Lookup::hit) return cubin_path;
    if (found == Lookup::foreign) return Error{Errc::io, why};

    // Files are recorded before the compile: one edited during it then misses next time. Their
    // content chooses the entry (variant_key): one per state of the files, so an edit and its
    // revert both hit.
    std::vector<include_scanner::Dependency> deps;
    std::string entry_key = key;
    std::string entry_folder = entry;
    std::string source_key;
    if (request.reads_files) {
        auto scanned = include_scanner::scan(request.source, request.headers, request.search);
        if (!scanned) return std::move(scanned).error();
        deps = std::move(*scanned);
        source_key = key;
        entry_key = variant_key(key, deps);
        entry_folder = cache_entry::folder_for(request.cache_dir, entry_key);
        // Built before, but no longer listed (fallen off the variants file, or the file was lost
        // or rewritten by another process at the same time): no compile, and listed again.
        const Lookup there = look_up(request, entry_folder, source_key, *folder, counters_, nullptr, &why);
        if (there == Lookup::foreign) return Error{Errc::io, why};
        if (there == Lookup::hit) {
            if (folder->writable) list_variant(request, key, entry_key, *folder);
            return entry_folder + "/" + kCubinFile;
        }
    }
    // A cache others filled for us to read (root's, a read-only mount) serves hits only.
    if (folder->exists && !folder->writable) return not_writable(request.cache_dir, *folder);

    compiler::Request nvrtc;
    nvrtc.source = request.source;
    nvrtc.program_name = kSourceFile;
    nvrtc.options.push_back("-arch=" + request.arch);
    nvrtc.options.insert(nvrtc.options.end(), request.nvrtc_options.begin(), request.nvrtc_options.end());
    for (const std::string &p : request.include_paths) nvrtc.options.push_back("-I" + p);
    if (request.use_pch) {
        // NVRTC's automatic PCH, in a folder of this header identity's own (pch_folders.hpp
        // says why); its notes ("creating/using precompiled header ...") stay out of the log,
        // so a compile error reads as without it. No folder: a plain compile.
        bool first_of_identity = false;
        auto pch_folder = pch_folders::folder_for(pch_identity(request, deps), &first_of_identity);
        if (pch_folder) {
            counters_.pch_compiles.fetch_add(1, std::memory_order_relaxed);
            if (first_of_identity) counters_.pch_identities.fetch_add(1, std::memory_order_relaxed);
            nvrtc.options.insert(nvrtc.options.end(),
                                 {"-pch", "-pch-dir=" + *pch_folder, "-pch-messages=false", "-pch-verbose=false"});
            nvrtc.options.insert(nvrtc.options.end(), request.pch_options.begin(), request.pch_options.end());
        } else {
            log().debug("compiling {} without a PCH: {}", key, pch_folder.error().message);
        }
    }
    nvrtc.headers = request.headers;
    if (request.name_expression) nvrtc.name_expressions.push_back(*request.name_expression);

    counters_.nvrtc_runs.fetch_add(1, std::memory_order_relaxed);
    const int in_flight = counters_.compiles_in_flight.fetch_add(1) + 1;
    for (int seen = counters_.max_compiles_in_flight.load();
         in_flight > seen && !counters_.max_compiles_in_flight.compare_exchange_weak(seen, in_flight);) {
    }
    const auto started = std::chrono::steady_clock::now();
    auto compiled = compiler::compile(nvrtc);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    counters_.compiles_in_flight.fetch_sub(1);
    counters_.nvrtc_nanoseconds.fetch_add(static_cast<std::uint64_t>(seconds * 1e9), std::memory_order_relaxed);
    if (!compiled) return std::move(compiled).error();
    if (seconds >= 1.0) log().info("slow compile: {} [{}] took {:.2f} s", key, request.keyword, seconds);
    log().debug("compiled {} [{}] in {:.3f} s", key, request.keyword, seconds);

    // The kernel name: the lowered name expression (which must obey the keyword rule), else
    // the keyword rule over the fresh cubin.
    std::string name;
    if (request.name_expression) {
        name = compiled->lowered_names.at(0).second;
        if (!name_matcher::matches(name, request.keyword)) {
            return Error{Errc::invalid_argument, "name expression '" + *request.name_expression + "' lowers to '" +
                                                     name + "', which does not match keyword '" + request.keyword +
                                                     "'"};
        }
    } else {
        auto table = SymbolTable::from_bytes(compiled->cubin, "fresh cubin for " + key);
        if (!table) return std::move(table).error();
        std::vector<name_matcher::Candidate> candidates;
        for (const FunctionSymbol &f : table->functions()) candidates.push_back({f.name, f.is_entry});
        auto chosen = name_matcher::select(candidates, request.keyword);
        if (!chosen) {
            Error e = std::move(chosen).error();
            e.message = "in the compiled source: " + e.message;
            return e;
        }
        name.assign(*chosen);
    }

    // Under a size limit, a full disk (or quota) is room to make: eviction runs only after a
    // publish, so on a full disk it would never run. Evict least recently used entries and try
    // once more; the second failure is the error.
    // A variant is listed once its entry is in place.
    auto listed = [&](Result<std::string> published) {
        if (published && request.reads_files) list_variant(request, key, entry_key, *folder);
        return published;
    };
    Result<std::string> published = publish(request, entry_key, source_key, entry_folder, *folder, compiled->cubin,
                                            name, seconds, deps, published_bytes);
    if (published || !request.max_cache_bytes ||
        (published.error().sys_errno != ENOSPC && published.error().sys_errno != EDQUOT)) {
        return listed(std::move(published));
    }
    const std::uint64_t needed = compiled->cubin.size() + request.source.size() + 32 * 1024;
    const cache_maintenance::Freed freed =
        cache_maintenance::make_room(request.cache_dir, *request.max_cache_bytes, needed);
    log().info("publishing {} failed ({}): evicted {} entries ({}) and trying again", key, published.error().message,
               freed.entries, cache_maintenance::format_size(freed.bytes));
    published = publish(request, entry_key, source_key, entry_folder, *folder, compiled->cubin, name, seconds, deps,
                        published_bytes);
    if (!published) {
        Error e = std::move(published).error();
        e.message += " (the disk was full: libkjit evicted " + std::to_string(freed.entries) + " least recently used " +
                     "entries (" + cache_maintenance::format_size(freed.bytes) +
                     ") under the cache's size limit and tried again)";
        return e;
    }
    return listed(std::move(published));
}

Result<std::string> Cache::publish(const Request &request, const std::string &key, const std::string &source_key,
                                   const std::string &entry,
                                   folder_trust::CacheFolder &folder, const std::string &cubin, const std::string &name,
                                   double seconds, const std::vector<include_scanner::Dependency> &deps,
                                   std::uint64_t *published_bytes) {
    const std::string cubin_path = entry + "/" + kCubinFile;
    std::string why;
    // Folders are created only now: a failed compile leaves nothing behind.
    const std::string shard = request.cache_dir + "/" + key.substr(0, 2);
    if (auto ready = ready_shard(request.cache_dir, shard, folder); !ready) return std::move(ready).error();

    // Build the whole entry in a private temp folder beside its final place, then rename it
    // into place: readers see a complete entry or none. The cubin's mtime is set in the past,
    // so its sidecar line needs no content hash (it is not "young"), and any later change to
    // the file, which would stamp the current time, can never look like this version.
    // A name taken in advance (a killed writer's folder whose pid and thread id came back, as
    // they do in containers, or a planted one) is skipped for the next sequence number.
    std::string temp;
    for (int attempt = 0;; ++attempt) {
        temp = shard + "/" + std::string(cache_entry::kTempPrefix) + key + "-" + std::to_string(::getpid()) + "-" +
               std::to_string(::gettid()) + "-" + std::to_string(temp_sequence.fetch_add(1));
        if (::mkdir(temp.c_str(), folder_trust::folder_mode(folder)) == 0) break;
        if (errno != EEXIST || attempt == 7) return io_error("cannot create cache temp folder", temp, errno);
    }
    auto fail = [&](Error e) -> Result<std::string> {
        remove_tree(temp);
        return e;
    };
    const bool shared = folder_trust::shared(folder);
    // Team members rewrite each other's sidecars and record use in each other's entries.
    if (shared && ::chmod(temp.c_str(), 02770) != 0) {
        return fail(io_error("cannot make the cache entry group-writable", temp, errno));
    }
    // Only the cubin is fsynced: after a power loss a torn or empty sidecar, deps.txt or
    // manifest is a rescan, a rebuild or nothing (they are validated, or informational), and
    // every fsync costs about a millisecond against a compile of tens.
    const std::string temp_cubin = temp + "/" + kCubinFile;
    if (auto st = write_new_file(temp_cubin, cubin, true, true, shared); !st) {
        return fail(std::move(st).error());
    }
    struct stat st {};
    if (::stat(temp_cubin.c_str(), &st) != 0) return fail(io_error("cannot stat", temp_cubin, errno));
    sidecar::Line line;
    line.keyword = request.keyword;
    line.cubin_size = static_cast<std::uint64_t>(st.st_size);
    line.mtime_sec = st.st_mtim.tv_sec;
    line.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
    line.name = name;
    // A filesystem that keeps whole seconds only gives size and mtime that cannot tell versions
    // apart: bind the line to the content (docs/sidecar-format.md).
    if (line.mtime_nsec == 0) line.content_hash = hash64(cubin);
    std::uint64_t bytes = cubin.size();
    for (const auto &file : {std::make_pair(sidecar::path_for(temp_cubin), sidecar::format({line})),
                             std::make_pair(temp + "/" + kSourceFile, request.source),
                             std::make_pair(temp + "/" + kManifestFile,
                                            manifest_text(request, key, source_key, name, cubin, seconds))}) {
        if (auto w = write_new_file(file.first, file.second, false, false, shared); !w) {
            return fail(std::move(w).error());
        }
        bytes += file.second.size();
    }
    if (request.reads_files) {
        const std::string deps_text = include_scanner::format(deps);
        if (auto w = write_new_file(temp + "/" + kDepsFile, deps_text, false, false, shared); !w) {
            return fail(std::move(w).error());
        }
        bytes += deps_text.size();
    }
    if (auto s = fsync_dir(temp); !s) return fail(std::move(s).error());

    // What the limit counts: disk space, as du does (the bytes written round up to blocks).
    *published_bytes = std::max(bytes, cache_maintenance::disk_usage(temp));
    if (::rename(temp.c_str(), entry.c_str()) != 0) {
        const int err = errno;
        if (err != ENOTEMPTY && err != EEXIST && err != ENOTDIR) {
            return fail(io_error("cannot publish cache entry", entry, err));
        }
        // An entry is there already: another process won the race, or it is stale/damaged.
        const Lookup there = look_up(request, entry, source_key, folder, counters_, nullptr, &why);
        if (there == Lookup::foreign) return fail(Error{Errc::io, why});
        if (there == Lookup::hit) {
            *published_bytes = 0;
            remove_tree(temp);
            return cubin_path;
        }
        // Swap ours in atomically; the old entry ends up in `temp` and goes with it.
        if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, entry.c_str(), RENAME_EXCHANGE) != 0) {
            const int xerr = errno;
            if (xerr != EINVAL && xerr != ENOSYS && xerr != EOPNOTSUPP) {
                return fail(io_error("cannot replace cache entry", entry, xerr));
            }
            // No atomic exchange on this filesystem: move the old entry aside, then ours in. A
            // reader in between sees no entry (a miss), never a partial one.
            const std::string aside = temp + ".old";
            if (::rename(entry.c_str(), aside.c_str()) != 0) return fail(io_error("cannot move aside", entry, errno));
            if (::rename(temp.c_str(), entry.c_str()) != 0) return fail(io_error("cannot publish cache entry", entry, errno));
            remove_tree(aside);
            counters_.published_entries.fetch_add(1, std::memory_order_relaxed);
            counters_.rebuilt_entries.fetch_add(1, std::memory_order_relaxed);
            log().debug("replaced unusable cache entry {} (without RENAME_EXCHANGE): {}", entry, why);
            return cubin_path;
        }
        counters_.rebuilt_entries.fetch_add(1, std::memory_order_relaxed);
        log().debug("replaced unusable cache entry {}: {}", entry, why);
        remove_tree(temp);
    }
    counters_.published_entries.fetch_add(1, std::memory_order_relaxed);
    // The shard folder is not fsynced: an entry lost to a power cut is only a miss.
    log().debug("published {} [{}] -> {}", key, request.keyword, name);
    return cubin_path;
}

}  // namespace kjit::cache
