#include "store/cache_verification.hpp"

#include "cubin/name_matcher.hpp"
#include "cubin/sidecar.hpp"
#include "cubin/symbol_scanner.hpp"
#include "store/cache_entry.hpp"
#include "store/cache_inventory.hpp"
#include "util/filesystem.hpp"
#include "util/hashing.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

namespace kjit::store::cache_verification {

// The inventory's folder walk and lock, shared by the maintenance modules.
using cache_inventory::CacheLock;
using cache_inventory::DirEntry;
using cache_inventory::folder_exists;
using cache_inventory::IfMissing;
using cache_inventory::is_root_temp;
using cache_inventory::is_transit_name;
using cache_inventory::kMaxManifestBytes;
using cache_inventory::list_dir;
using cache_inventory::open_root;
using cache_inventory::starts_with;

namespace {

using store::cache_entry::kCubinFile;
using store::cache_entry::kDepsFile;
using store::cache_entry::kDepsTempPrefix;
using store::cache_entry::kManifestFile;
using store::cache_entry::kSourceFile;

}  // namespace

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
        case Damage::foreign: return "foreign";
    }
    return "unknown";
}

bool VerifyReport::clean() const {
    return std::all_of(findings.begin(), findings.end(), [](const Finding &f) { return f.fixed; });
}

namespace {

// What verify concluded about one entry.
struct EntryVerdict {
    std::optional<Finding> fatal;                   // the entry cannot serve: remove it
    std::optional<Finding> sidecar;                 // the sidecar is wrong: rebuild it from `line`
    cubin::sidecar::Line line;                      // the correct line for the entry's keyword
    std::vector<cubin::sidecar::Line> other_lines;  // other keywords' lines for this cubin version
    std::vector<std::string> stale_temps;           // temp files in the entry left by killed writers
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
bool same_version(const cubin::sidecar::Line &l, const struct stat &st, std::uint64_t content) {
    if (l.cubin_size != static_cast<std::uint64_t>(st.st_size) || l.mtime_sec != st.st_mtim.tv_sec) return false;
    if (l.content_hash && *l.content_hash != content) return false;
    if (st.st_mtim.tv_nsec == 0) return l.content_hash.has_value();
    return l.mtime_nsec == static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
}

// The entry's manifest, present, passing its check line and for `key`; else v.fatal says why.
std::optional<store::cache_entry::Manifest> check_manifest(const std::string &entry, const std::string &key,
                                                           EntryVerdict &v) {
    const std::string manifest_path = entry + "/" + kManifestFile;
    struct stat st {};
    if (::lstat(manifest_path.c_str(), &st) != 0) {
        v.fatal = finding(entry, Damage::missing_file, std::string(kManifestFile) + " is missing");
        return std::nullopt;
    }
    auto text = read_small_file(manifest_path, kMaxManifestBytes);
    if (!text) {
        v.fatal = finding(entry, Damage::bad_manifest, "cannot read '" + manifest_path + "'");
        return std::nullopt;
    }
    auto manifest = store::cache_entry::parse_manifest(*text, manifest_path);
    if (!manifest) {
        v.fatal = finding(entry, Damage::bad_manifest, manifest.error().message);
        return std::nullopt;
    }
    if (manifest->key != key) {
        v.fatal = finding(entry, Damage::bad_manifest,
                          "'" + manifest_path + "' is for key " + manifest->key + ", not this entry's " + key);
        return std::nullopt;
    }
    return std::move(*manifest);
}

// The entry's other files present, and its cubin a regular file of the size and XXH3-128
// recorded at publish holding the manifest's kernel; else v.fatal says why. Sets `cubin_st` and
// `content` (the cubin's XXH3-64) for the sidecar's check.
bool check_cubin(const std::string &entry, const store::cache_entry::Manifest &manifest, EntryVerdict &v,
                 struct stat &cubin_st, std::uint64_t &content) {
    const std::string manifest_path = entry + "/" + kManifestFile;
    const std::string cubin_path = entry + "/" + kCubinFile;
    struct stat st {};
    std::vector<std::string> required = {kSourceFile, kCubinFile};
    if (!manifest.include_paths.empty()) required.push_back(kDepsFile);
    for (const std::string &name : required) {  // the cubin is stat'ed once, here
        if (::lstat((entry + "/" + name).c_str(), name == kCubinFile ? &cubin_st : &st) != 0) {
            v.fatal = finding(entry, Damage::missing_file, name + " is missing");
            return false;
        }
    }
    if (!S_ISREG(cubin_st.st_mode)) {
        v.fatal = finding(entry, Damage::bad_cubin, "'" + cubin_path + "' is not a regular file");
        return false;
    }
    if (static_cast<std::uint64_t>(cubin_st.st_size) != manifest.cubin_bytes) {
        v.fatal = finding(entry, Damage::truncated_cubin,
                          "'" + cubin_path + "' has " + std::to_string(cubin_st.st_size) + " bytes; " +
                              std::to_string(manifest.cubin_bytes) + " were published");
        return false;
    }
    auto table = cubin::SymbolTable::open_file(cubin_path);
    if (!table) {
        v.fatal = finding(entry, Damage::bad_cubin, table.error().message);
        return false;
    }
    // A same-size change (its mtime put back or not) shows only in the content.
    if (hash128_hex(table->image()) != manifest.cubin_hash) {
        v.fatal = finding(entry, Damage::bad_cubin,
                          "'" + cubin_path + "' does not match the XXH3-128 hash recorded in '" + manifest_path +
                              "' when it was published: it was changed on disk since");
        return false;
    }
    content = hash64(table->image());
    const bool has_kernel = std::any_of(table->functions().begin(), table->functions().end(),
                                        [&](const cubin::FunctionSymbol &f) { return f.name == manifest.name; });
    if (!has_kernel || !cubin::name_matcher::check_keyword(manifest.keyword).ok() ||
        !cubin::name_matcher::matches(manifest.name, manifest.keyword)) {
        v.fatal = finding(entry, Damage::bad_cubin,
                          "'" + cubin_path + "' holds no kernel '" + manifest.name + "' for keyword '" +
                              manifest.keyword + "'");
        return false;
    }
    return true;
}

// The sidecar of a sound cubin: v.line is the line it must hold; v.sidecar says what is wrong
// with it, if anything; v.other_lines keeps other keywords' lines for this cubin version.
void check_sidecar(const std::string &entry, const store::cache_entry::Manifest &manifest, const struct stat &cubin_st,
                   std::uint64_t content, EntryVerdict &v) {
    const std::string sidecar_path = cubin::sidecar::path_for(entry + "/" + kCubinFile);
    const cubin::sidecar::Contents contents = cubin::sidecar::read(sidecar_path);
    if (contents.problem == cubin::sidecar::FileProblem::missing) {
        v.sidecar = finding(entry, Damage::sidecar_missing, "'" + sidecar_path + "' is missing");
        return;
    }
    if (contents.problem != cubin::sidecar::FileProblem::none) {
        v.sidecar = finding(entry, Damage::sidecar_damaged,
                            "'" + sidecar_path + "': " + cubin::sidecar::to_string(contents.problem) +
                                (contents.detail.empty() ? "" : ": " + contents.detail));
        return;
    }
    const cubin::sidecar::Line *mine = nullptr;
    for (const cubin::sidecar::Line &l : contents.lines) {
        if (l.keyword == manifest.keyword) {
            mine = &l;
        } else if (same_version(l, cubin_st, content)) {
            v.other_lines.push_back(l);
        }
    }
    if (!mine) {
        v.sidecar = finding(entry, Damage::sidecar_damaged,
                            "'" + sidecar_path + "' has no valid line for keyword '" + manifest.keyword + "'");
    } else if (!same_version(*mine, cubin_st, content)) {
        v.sidecar = finding(entry, Damage::sidecar_stale,
                            "'" + sidecar_path + "' was written for another version of the cubin");
    } else if (mine->name != manifest.name) {
        v.sidecar = finding(entry, Damage::sidecar_wrong_name,
                            "'" + sidecar_path + "' names '" + mine->name + "'; the kernel is '" + manifest.name + "'");
    }
}

EntryVerdict check_entry(const std::string &entry, const std::string &key, std::int64_t now_ns) {
    EntryVerdict v;
    auto listing = list_dir(entry, IfMissing::error);
    if (!listing) {
        v.fatal = finding(entry, Damage::misplaced, listing.error().message);
        return v;
    }
    for (const DirEntry &f : *listing) {
        const bool temp = cubin::sidecar::is_temp_file_name(f.name) || starts_with(f.name, kDepsTempPrefix);
        if (temp && mtime_ns(f.st) < now_ns - kStaleTempNs) {
            v.stale_temps.push_back(entry + "/" + f.name);
        }
    }
    const std::optional<store::cache_entry::Manifest> manifest = check_manifest(entry, key, v);
    if (!manifest) return v;
    struct stat cubin_st {};
    std::uint64_t content = 0;
    if (!check_cubin(entry, *manifest, v, cubin_st, content)) return v;

    // The line the sidecar must hold, from the cubin as it is and the manifest's name.
    v.line.keyword = manifest->keyword;
    v.line.name = manifest->name;
    v.line.cubin_size = static_cast<std::uint64_t>(cubin_st.st_size);
    v.line.mtime_sec = cubin_st.st_mtim.tv_sec;
    v.line.mtime_nsec = static_cast<std::uint32_t>(cubin_st.st_mtim.tv_nsec);
    if (v.line.mtime_nsec == 0 || young_at(v.line.mtime_sec, v.line.mtime_nsec, now_ns)) v.line.content_hash = content;
    check_sidecar(entry, *manifest, cubin_st, content, v);
    return v;
}

// A name in a shard of the cache's shape: a stale folder in transit, a misplaced entry, or an
// entry, checked (and with `fix` repaired or removed). Anything else is not the cache's.
void verify_shard_item(const folder_trust::CacheFolder &folder, const std::string &shard, const std::string &shard_path,
                       const DirEntry &e, std::int64_t now, bool fix, VerifyReport &report) {
    const std::string path = shard_path + "/" + e.name;
    if (is_transit_name(e.name)) {
        if (mtime_ns(e.st) >= now - kStaleTempNs) return;  // live, or nearly
        Finding f = finding(path, Damage::stale_temp, "a temp folder left by a killed writer or remover");
        if (fix) {
            remove_tree(path);
            struct stat gone {};
            f.fixed = ::lstat(path.c_str(), &gone) != 0;
            f.action = "removed it";
        }
        report.findings.push_back(std::move(f));
        return;
    }
    if (!store::cache_entry::is_key(e.name)) return;  // not the cache's: left alone
    ++report.entries_checked;
    // Someone else's entry (or a file in it) is what kjit_compile refuses to serve: named, and
    // removed with fix where the caller can (the shard is theirs).
    if (auto untrusted = store::cache_entry::untrusted_entry(folder, path, e.st, S_ISDIR(e.st.st_mode))) {
        Finding f = finding(path, Damage::foreign, untrusted->message);
        if (fix) {
            std::string failure;
            if (S_ISDIR(e.st.st_mode)) {
                if (auto retired = store::cache_entry::retire(path, store::cache_entry::InUse::remove); !retired) {
                    failure = retired.error().message;
                }
            } else if (::unlink(path.c_str()) != 0) {
                failure = io_error("cannot remove", path, errno).message;
            }
            f.fixed = failure.empty();
            f.action = f.fixed ? "removed it" : "could not remove it: " + failure;
        }
        report.findings.push_back(std::move(f));
        return;
    }
    if (e.name.compare(0, 2, shard) != 0 || !S_ISDIR(e.st.st_mode)) {
        Finding f = finding(path, Damage::misplaced,
                            S_ISDIR(e.st.st_mode) ? "an entry in shard " + shard + " for key " + e.name
                                                  : "an entry name that is not a folder");
        if (fix) {
            if (S_ISDIR(e.st.st_mode)) {
                f.fixed = store::cache_entry::retire(path, store::cache_entry::InUse::remove).ok();
            } else {
                f.fixed = ::unlink(path.c_str()) == 0;
            }
            f.action = "removed it";
        }
        report.findings.push_back(std::move(f));
        return;
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
            auto retired = store::cache_entry::retire(path, store::cache_entry::InUse::remove);
            v.fatal->fixed = retired.ok();
            v.fatal->action = retired ? "removed the entry (the next kjit_compile rebuilds it)"
                                      : "could not remove the entry: " + retired.error().message;
        }
        report.findings.push_back(std::move(*v.fatal));
        return;
    }
    if (v.sidecar) {
        if (fix) {
            std::vector<cubin::sidecar::Line> lines = std::move(v.other_lines);
            lines.push_back(v.line);
            auto written = cubin::sidecar::write(cubin::sidecar::path_for(path + "/" + kCubinFile), lines);
            v.sidecar->fixed = written.ok();
            v.sidecar->action = written ? "rebuilt the sidecar from the cubin and the manifest"
                                        : "could not rebuild the sidecar: " + written.error().message;
        }
        report.findings.push_back(std::move(*v.sidecar));
        return;
    }
    ++report.entries_ok;
}

}  // namespace

std::optional<Finding> entry_damage(const std::string &entry, const std::string &key) {
    struct stat st {};
    if (::lstat(entry.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return finding(entry, Damage::misplaced, "an entry name that is not a folder");
    }
    return check_entry(entry, key, realtime_ns()).fatal;
}

Result<VerifyReport> verify(const std::string &given_dir, bool fix) {
    KJIT_TRY_ASSIGN(auto checked, open_root(given_dir));
    const std::string &cache_dir = checked.path;
    std::optional<CacheLock> held;
    if (fix && folder_exists(cache_dir)) {
        KJIT_TRY_ASSIGN(auto lock, CacheLock::acquire(checked, CacheLock::Wait::until_free));
        held = std::move(lock);
    }
    VerifyReport report;
    const std::int64_t now = realtime_ns();
    KJIT_TRY_ASSIGN(auto root, list_dir(cache_dir, IfMissing::empty));
    for (const DirEntry &r : root) {
        const std::string root_path = cache_dir + "/" + r.name;
        if (is_root_temp(r.name) && mtime_ns(r.st) < now - kStaleTempNs) {
            Finding f = finding(root_path, Damage::stale_temp, "a record's temp file left by a killed process");
            if (fix) {
                f.fixed = ::unlink(root_path.c_str()) == 0 || errno == ENOENT;
                f.action = "removed it";
            }
            report.findings.push_back(std::move(f));
        }
        if (!store::cache_entry::is_shard(r.name)) continue;
        if (auto untrusted = store::cache_entry::untrusted_shard(checked.folder, root_path)) {
            // A link in a shard's place, or someone else's shard: its entries are never served.
            Finding f = finding(root_path, Damage::foreign, untrusted->message);
            if (fix && S_ISLNK(r.st.st_mode)) {
                f.fixed = ::unlink(root_path.c_str()) == 0 || errno == ENOENT;
                f.action = f.fixed ? "removed the link" : std::string("could not remove the link");
            }
            report.findings.push_back(std::move(f));
            continue;
        }
        if (!S_ISDIR(r.st.st_mode)) continue;
        KJIT_TRY_ASSIGN(auto listing, list_dir(root_path, IfMissing::empty));
        for (const DirEntry &e : listing) verify_shard_item(checked.folder, r.name, root_path, e, now, fix, report);
    }
    return report;
}

}  // namespace kjit::store::cache_verification
