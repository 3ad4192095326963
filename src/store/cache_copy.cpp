#include "store/cache_copy.hpp"

#include "store/cache_entry.hpp"
#include "store/cache_inventory.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"

#include <optional>
#include <utility>

namespace kjit::store::cache_maintenance {

namespace {

// The destination folder, made when missing, checked, and writable by the caller.
Result<folder_trust::CacheFolder> ready_destination(const std::string &to) {
    auto folder = folder_trust::check_cache_folder_now(to);
    if (!folder) return folder;
    if (!folder->exists) {
        if (auto made = make_folders(to, folder_trust::folder_mode(*folder), "the destination folder"); !made) {
            return std::move(made).error();
        }
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
    const std::string &to;
    folder_trust::CacheFolder &folder;
    const std::string &arch;
    CopyReport &report;

    void refuse(Finding f) {
        f.action = "not copied";
        report.refused.findings.push_back(std::move(f));
    }

    // One entry `entry` of key `key` of the source.
    void copy(const std::string &entry, const std::string &key) {
        ++report.refused.entries_checked;
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
        if (!entry_damage(place, key)) {
            ++report.present;
        } else {
            const auto source = entry_file(entry, cache_entry::kSourceFile);
            cache_entry::NewEntry copy;
            copy.cubin = read->bytes;
            // A view of `source` itself: "source ? *source : std::string()" would be a temporary.
            copy.source = source ? std::string_view(*source) : std::string_view();
            copy.manifest = manifest;
            copy.deps_text = entry_file(entry, cache_entry::kDepsFile);
            // Reached only when the entry there is damaged (checked just above) or was just put there.
            auto published = cache_entry::publish(to, folder, copy, [&](std::string *why) -> Result<bool> {
                const auto damage = entry_damage(place, key);
                if (damage) *why = damage->detail;
                return !damage;
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
    auto source = open_root(from);
    if (!source) return std::move(source).error();
    if (!source->folder.exists) return Error{Errc::io, "cache folder '" + from + "' does not exist"};
    auto folder = ready_destination(to);
    if (!folder) return std::move(folder).error();
    if (folder->real_path == source->folder.real_path) {
        return Error{Errc::invalid_argument, "'" + from + "' and '" + to + "' are the same folder"};
    }
    CopyReport report;
    Copier copier{to, *folder, arch, report};
    auto root = list_dir(source->path, IfMissing::error);
    if (!root) return std::move(root).error();
    for (const DirEntry &shard : *root) {
        if (!cache_entry::is_shard(shard.name) || !S_ISDIR(shard.st.st_mode)) continue;
        auto listing = list_dir(source->path + "/" + shard.name, IfMissing::empty);
        if (!listing) return std::move(listing).error();
        for (const DirEntry &e : *listing) {
            if (!cache_entry::is_key(e.name) || e.name.compare(0, 2, shard.name) != 0) continue;
            copier.copy(source->path + "/" + shard.name + "/" + e.name, e.name);
        }
    }
    return report;
}

}  // namespace kjit::store::cache_maintenance
