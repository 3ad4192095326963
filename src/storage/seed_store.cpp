#include "storage/seed_store.hpp"

#include "resolve/name_resolver.hpp"
#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

namespace kjit::storage {

namespace {

// How long a seed folder's trust check holds in this process, as a cache folder's does
// (folder_trust.hpp): a seed mounted, or fixed, meanwhile is seen within a minute.
constexpr std::int64_t kCheckIntervalNs = 60'000'000'000;

// Whether the seed's `manifest` (of the entry `entry_key`, a variant of `source_key` or not)
// was made for `request`: what differs, or "". The key covers all of it; the manifest must say
// the same, as a downloaded entry's must (entry.cpp).
std::string manifest_mismatch(const store::cache_entry::Manifest &m, const key::Request &request,
                              const std::string &entry_key, const std::string &source_key) {
    if (m.key != entry_key) return "its manifest is for key " + m.key;
    if (m.source_key != source_key) return "its manifest is for source key '" + m.source_key + "'";
    if (m.keyword != request.keyword || m.arch != request.arch || m.nvrtc != request.nvrtc_identity ||
        m.name_expression != request.name_expression) {
        return "its manifest does not describe this request (keyword, arch, NVRTC or name expression)";
    }
    return {};
}

}  // namespace

void SeedStore::renew_in_forked_child() {
    fork_guard::renew(mutex_);
    fork_guard::renew(checked_);
}

std::optional<folder_trust::CacheFolder> SeedStore::usable(const std::string &dir) {
    const std::int64_t now = realtime_ns();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = checked_.find(dir);
        if (it != checked_.end() && now - it->second.at_ns < kCheckIntervalNs) return it->second.folder;
    }
    // Outside the lock: the check stats every folder up to / and may ask the group database.
    std::optional<folder_trust::CacheFolder> folder;
    std::string refused;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
        log().debug("seed cache '{}' is not there: skipped", dir);
    } else if (auto checked = folder_trust::check_folder_unmemoised(dir); !checked) {
        refused = checked.error().message;
    } else if (!checked->exists) {
        log().debug("seed cache '{}' is not there: skipped", dir);
    } else {
        folder = std::move(*checked);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Checked &slot = checked_[dir];
    if (!refused.empty() && !slot.warned) {
        slot.warned = true;
        counters_.seed_rejections.fetch_add(1, std::memory_order_relaxed);
        log().warn("seed cache '{}' skipped, as untrusted: {} (a seed is read as a cache folder of yours is: "
                   "docs/cache-layout.md, \"Seed caches\")",
                   dir, refused);
    }
    slot.at_ns = now;
    slot.folder = folder;
    return folder;
}

std::optional<Found> SeedStore::take(const key::KeyedRequest &keyed, Call &call,
                                     const folder_trust::CacheFolder &folder, const std::string &entry,
                                     const std::string &source_key, key::include_scanner::FileMemo *memo) {
    const key::Request &request = keyed.request;
    const std::string entry_key = entry.substr(entry.size() - 32);
    auto refuse = [&](std::string why) -> std::optional<Found> {
        // Not the advice for a cache of one's own: a seed is never written, `verify --fix` included.
        if (const std::size_t advice = why.find("; run `kjit cache verify"); advice != std::string::npos) {
            why.resize(advice);
        }
        counters_.seed_rejections.fetch_add(1, std::memory_order_relaxed);
        log().warn("seed entry '{}' refused, compiling instead (the seed is left as it is; `kjit cache verify "
                   "--cache-dir` on it lists what is damaged): {}",
                   entry, why);
        return std::nullopt;
    };
    std::string why;
    ReadOnlyCheck read;
    const Lookup checked = check_entry(EntryContext{request, folder, counters_, memo}, entry, source_key, &why, &read);
    if (checked == Lookup::absent) return std::nullopt;
    if (checked != Lookup::hit && read.files_changed) {
        log().debug("seed entry '{}' is not for the headers here: {}", entry, why);
        return std::nullopt;
    }
    if (checked != Lookup::hit) return refuse(why);
    // Read once, through one open folder: what is verified is what is published.
    auto bytes = store::cache_entry::read_published(entry);
    if (!bytes) return refuse(bytes.error().message);
    const store::cache_entry::Manifest &manifest = *bytes->published;
    if (std::string bad = manifest_mismatch(manifest, request, entry_key, source_key); !bad.empty()) {
        return refuse(bad);
    }
    const std::string cubin = entry + "/" + store::cache_entry::kCubinFile;
    if (std::string bad = resolve::recorded_name_problem(manifest, bytes->bytes, "seed cubin '" + cubin + "'");
        !bad.empty()) {
        return refuse(bad);
    }
    store::cache_entry::NewEntry copy;
    copy.cubin = bytes->bytes;
    copy.source = request.source;  // the key's: the same text
    copy.manifest = manifest;
    copy.durable = request.durable;
    if (request.reads_files) record_dependencies(copy, request, read.deps);
    auto published = local_.publish(keyed, call, copy);
    if (!published || !*published) {
        log().info("seed entry '{}' could not be copied into the local cache: {}", entry,
                   published ? std::string("no local copy") : published.error().message);
        return std::nullopt;
    }
    counters_.seed_hits.fetch_add(1, std::memory_order_relaxed);
    log().debug("seed hit {} [{}] from '{}'", entry_key, request.keyword, entry);
    return Found{std::move(**published), manifest.name};
}

template <typename TrySeed>
std::optional<Found> SeedStore::each_seed(const key::KeyedRequest &keyed, Call &call, bool variant,
                                          TrySeed &&try_seed) {
    const key::Request &request = keyed.request;
    if (request.seed_dirs.empty() || (call.seeds_missed && !variant)) return std::nullopt;
    // A copy needs a local cache to go to; one that cannot take it says so at the miss.
    if (!local_.can_publish(keyed, call)) return std::nullopt;
    for (const std::string &dir : request.seed_dirs) {
        if (dir == request.cache_dir) continue;  // the local cache itself
        const std::optional<folder_trust::CacheFolder> folder = usable(dir);
        if (!folder) continue;
        if (std::optional<Found> found = try_seed(dir, *folder)) return found;
    }
    if (!variant) call.seeds_missed = true;
    return std::nullopt;
}

Result<std::optional<Found>> SeedStore::find(const key::KeyedRequest &keyed, Call &call,
                                             key::include_scanner::FileMemo *memo, std::string * /*why*/) {
    return each_seed(keyed, call, false, [&](const std::string &dir, const folder_trust::CacheFolder &folder) {
        if (!keyed.request.reads_files) {
            return take(keyed, call, folder, store::cache_entry::folder_for(dir, keyed.key), std::string(), memo);
        }
        // One entry per state of the files: those its variants file lists (a miss's scan then
        // asks find_variant for the one of the files here).
        const std::string list = store::cache_entry::variants_file_for(dir, keyed.key);
        for (const std::string &variant : store::cache_entry::read_variants(list)) {
            if (auto found = take(keyed, call, folder, store::cache_entry::folder_for(dir, variant), keyed.key, memo)) {
                return found;
            }
        }
        return std::optional<Found>();
    });
}

Result<std::optional<Found>> SeedStore::find_variant(const key::KeyedRequest &keyed, Call &call,
                                                     const std::string &variant_key, std::string * /*why*/) {
    return each_seed(keyed, call, true, [&](const std::string &dir, const folder_trust::CacheFolder &folder) {
        return take(keyed, call, folder, store::cache_entry::folder_for(dir, variant_key), keyed.key, nullptr);
    });
}

}  // namespace kjit::storage
