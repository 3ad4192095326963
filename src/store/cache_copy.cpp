#include "store/cache_copy.hpp"

#include "store/cache_entry.hpp"
#include "store/cache_inventory.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"

#include <sys/stat.h>

#include <optional>
#include <utility>

namespace kjit::store::cache_copy {

// The inventory's folder walk and lock, shared by the maintenance modules.
using cache_inventory::DirEntry;
using cache_inventory::IfMissing;
using cache_inventory::kMaxManifestBytes;
using cache_inventory::list_dir;
using cache_inventory::open_root;
using cache_verification::Damage;
using cache_verification::entry_damage;
using cache_verification::Finding;

namespace {

// The destination folder, made when missing, checked, and writable by the caller.
Result<folder_trust::CacheFolder> ready_destination(const std::string &to) {
    auto folder = folder_trust::check_cache_folder_now(to);
    if (!folder) return folder;
    if (!folder->exists) {
        KJIT_TRY(make_folders(to, folder_trust::folder_mode(*folder), "the destination folder"));
        folder = folder_trust::check_cache_folder_now(to);
        if (!folder) return folder;
    }
    if (!folder->writable) return Error{Errc::io, "'" + to + "' is not writable by you (" + folder->owner_text + ")"};
    return folder;
}

// The optional file `name` of the entry at `entry` ("" when it is not there).
std::optional<std::string> entry_file(const std::string &entry, const char *name) {
    return read_small_file(entry + "/" + name, kMaxManifestBytes * 64);
}

struct Copier {
    const folder_trust::CacheFolder &source;  // the source folder, as checked
    const std::string &to;
    folder_trust::CacheFolder &folder;  // the destination folder, as checked
    const std::string &arch;
    CopyReport &report;

    void refuse(Finding f) {
        f.action = "not copied";
        report.refused.findings.push_back(std::move(f));
    }

    // Why the entry at `place` in the destination, or its shard, is not to be believed there
    // (the seed's rule: cache_entry::untrusted_entry), or nullopt.
    std::optional<Error> untrusted_at_destination(const std::string &place) const {
        if (auto shard = cache_entry::untrusted_shard(folder, place.substr(0, place.find_last_of('/')))) return shard;
        struct stat st {};
        if (::lstat(place.c_str(), &st) != 0) return std::nullopt;
        return cache_entry::untrusted_entry(folder, place, st, true);
    }

    // Whether the entry at `place` is there already: trusted by the destination, sound, and
    // holding the very cubin copied (its XXH3-128); else *why says what it is not.
    bool serves(const std::string &place, const std::string &key, const cache_entry::Manifest &copied,
                std::string *why) const {
        if (auto untrusted = untrusted_at_destination(place)) {
            *why = untrusted->message;
            return false;
        }
        if (auto damage = entry_damage(place, key)) {
            *why = damage->detail;
            return false;
        }
        auto there = cache_entry::read_manifest(place);
        if (!there || there->cubin_hash != copied.cubin_hash) {
            *why = "its cubin is not the one copied";
            return false;
        }
        return true;
    }

    // One entry `entry` of key `key` of the source.
    void copy(const std::string &entry, const std::string &key) {
        ++report.refused.entries_checked;
        struct stat st {};
        if (::lstat(entry.c_str(), &st) != 0) {  // gone meanwhile
            --report.refused.entries_checked;
            return;
        }
        // Whoever owns it, its shard or a file in it chose its cubin: what a seed refuses is
        // never copied (docs/cache-layout.md, "Who may write a seed").
        if (auto untrusted = cache_entry::untrusted_entry(source, entry, st, true)) {
            return refuse(Finding{entry, Damage::foreign, untrusted->message, false, {}});
        }
        if (auto damage = entry_damage(entry, key)) return refuse(std::move(*damage));
        auto read = cache_entry::read_published(entry);  // what is copied is what was verified
        if (!read) return refuse(Finding{entry, Damage::bad_cubin, read.error().message, false, {}});
        const cache_entry::Manifest &manifest = *read->published;
        if (!arch.empty() && manifest.arch != arch) {
            ++report.skipped;
            --report.refused.entries_checked;
            return;
        }
        ++report.refused.entries_ok;
        const std::string place = cache_entry::folder_for(to, key);
        // Someone else's entry (or shard) at its place is not "there already", and is not
        // ours to remove: refused, naming its owner, so the copy fails and says what to remove.
        if (auto untrusted = untrusted_at_destination(place)) {
            --report.refused.entries_ok;
            return refuse(Finding{place, Damage::foreign, untrusted->message, false, {}});
        }
        std::string why;
        if (serves(place, key, manifest, &why)) {
            ++report.present;
        } else {
            const auto source_text = entry_file(entry, cache_entry::kSourceFile);
            cache_entry::NewEntry copy;
            copy.cubin = read->bytes;
            // A view of `source_text` itself: "source_text ? *source_text : std::string()" would be a temporary.
            copy.source = source_text ? std::string_view(*source_text) : std::string_view();
            copy.manifest = manifest;
            copy.deps_text = entry_file(entry, cache_entry::kDepsFile);
            // An entry at its place that is not the one copied (damaged, stale, another cubin)
            // is replaced, as a compile replaces a stale one; checked again at the swap.
            auto published = cache_entry::publish(to, folder, copy, [&](std::string *reason) -> Result<bool> {
                return serves(place, key, manifest, reason);
            });
            if (!published) {
                --report.refused.entries_ok;
                return refuse(Finding{entry, Damage::missing_file, published.error().message, false, {}});
            }
            ++report.copied;
            report.copied_bytes += published->bytes_written;
        }
        if (!manifest.source_key.empty()) {
            cache_entry::record_variant(cache_entry::variants_file_for(to, manifest.source_key), key,
                                        folder_trust::shared(folder));
        }
    }
};

}  // namespace

Result<CopyReport> copy_entries(const std::string &from, const std::string &to, const std::string &arch) {
    KJIT_TRY_ASSIGN(auto source, open_root(from));
    if (!source.folder.exists) return Error{Errc::io, "cache folder '" + from + "' does not exist"};
    KJIT_TRY_ASSIGN(auto folder, ready_destination(to));
    if (folder.real_path == source.folder.real_path) {
        return Error{Errc::invalid_argument, "'" + from + "' and '" + to + "' are the same folder"};
    }
    CopyReport report;
    Copier copier{source.folder, to, folder, arch, report};
    KJIT_TRY_ASSIGN(auto root, list_dir(source.path, IfMissing::error));
    for (const DirEntry &shard : root) {
        if (!cache_entry::is_shard(shard.name)) continue;
        const std::string shard_path = source.path + "/" + shard.name;
        if (S_ISLNK(shard.st.st_mode)) {  // never followed: named, as a seed's reader would refuse it
            ++report.refused.entries_checked;
            Finding f{shard_path, Damage::foreign, {}, false, "not copied"};
            if (auto untrusted = cache_entry::untrusted_shard(source.folder, shard_path)) f.detail = untrusted->message;
            report.refused.findings.push_back(std::move(f));
            continue;
        }
        if (!S_ISDIR(shard.st.st_mode)) continue;
        KJIT_TRY_ASSIGN(auto listing, list_dir(source.path + "/" + shard.name, IfMissing::empty));
        for (const DirEntry &e : listing) {
            if (!cache_entry::is_key(e.name) || e.name.compare(0, 2, shard.name) != 0) continue;
            copier.copy(source.path + "/" + shard.name + "/" + e.name, e.name);
        }
    }
    return report;
}

}  // namespace kjit::store::cache_copy
