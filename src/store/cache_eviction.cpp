#include "store/cache_eviction.hpp"

#include "store/cache_entry.hpp"
#include "store/cache_inventory.hpp"
#include "util/filesystem.hpp"
#include "util/folder_trust.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"
#include "util/size_units.hpp"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kjit::store::cache_eviction {

// The inventory's folder walk and lock, shared by the maintenance modules.
using cache_inventory::CacheLock;
using cache_inventory::DirEntry;
using cache_inventory::EntryInfo;
using cache_inventory::folder_exists;
using cache_inventory::IfMissing;
using cache_inventory::Inventory;
using cache_inventory::inventory_of;
using cache_inventory::is_root_temp;
using cache_inventory::is_transit_name;
using cache_inventory::kUsageFile;
using cache_inventory::kUsageTempPrefix;
using cache_inventory::list_dir;
using cache_inventory::open_root;
using cache_inventory::Root;
using cache_inventory::root_of;
using cache_inventory::TransitInfo;
using cache_inventory::VariantsInfo;

using size_units::format_size;

namespace {

struct Usage {
    std::uint64_t bytes = 0;
    std::int64_t measured_ns = 0;
};

std::optional<Usage> read_usage(const std::string &cache_dir) {
    const std::string path = cache_dir + "/" + kUsageFile;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    auto text = read_small_file(path, 4096);
    unsigned long long bytes = 0;
    if (!text || std::sscanf(text->c_str(), "kjit-usage 1\nbytes %llu\n", &bytes) != 1) return std::nullopt;
    return Usage{bytes, mtime_ns(st)};
}

void write_usage(const std::string &cache_dir, const Inventory &inv, bool shared) {
    const std::string path = cache_dir + "/" + kUsageFile;
    const std::string text = "kjit-usage 1\nbytes " + std::to_string(inv.entry_bytes) + "\nentries " +
                             std::to_string(inv.entries.size()) + "\n";
    if (auto st =
            replace_file(path, cache_dir + "/" + std::string(kUsageTempPrefix), {}, text, shared ? kGroupWritable : 0);
        !st) {
        log().debug("cannot record the cache's usage: {}", st.error().message);
    }
}

// Removes entries of `inv` by recency (see prune()); updates `inv` to what is left.
void remove_by_recency(Inventory &inv, const PruneOptions &options, std::int64_t now_ns, PruneReport &report) {
    // A record in the future counts as now, and ages from now on (store::cache_entry::effective_recency).
    for (EntryInfo &e : inv.entries) {
        if (e.last_used_ns > now_ns) {
            store::cache_entry::rewrite_future_mtime(e.path, e.last_used_ns, now_ns);
            e.last_used_ns = now_ns;
        }
    }
    std::sort(inv.entries.begin(), inv.entries.end(),
              [](const EntryInfo &a, const EntryInfo &b) { return a.last_used_ns < b.last_used_ns; });
    std::vector<EntryInfo> kept;
    std::size_t i = 0;
    for (; i < inv.entries.size(); ++i) {
        const EntryInfo &e = inv.entries[i];
        const bool too_old =
            options.everything || (options.older_than_ns && e.last_used_ns < now_ns - *options.older_than_ns);
        const bool over = options.max_bytes && inv.entry_bytes > *options.max_bytes;
        if (!too_old && !over) break;  // sorted: every later entry is more recent
        // A running batch of this process handed it out (its record may be old): not this one,
        // but a more recent one may go.
        if (options.spare_in_use && store::cache_entry::pinned(e.key)) {
            ++report.spared_in_use;
            kept.push_back(e);
            continue;
        }
        auto retired = store::cache_entry::retire(e.path, options.spare_in_use ? store::cache_entry::InUse::spare
                                                                               : store::cache_entry::InUse::remove);
        if (!retired) {
            log().warn("{}", retired.error().message);
            kept.push_back(e);
            continue;
        }
        if (*retired == store::cache_entry::Retired::in_use) {
            // Later entries are more recent still: in use too.
            report.spared_in_use += inv.entries.size() - i;
            break;
        }
        inv.entry_bytes -= e.bytes;
        if (*retired == store::cache_entry::Retired::removed) {
            ++report.removed_entries;
            report.removed_bytes += e.bytes;
            log().debug("removed cache entry {} ({} bytes)", e.path, e.bytes);
        }
    }
    kept.insert(kept.end(), inv.entries.begin() + static_cast<std::ptrdiff_t>(i), inv.entries.end());
    inv.entries = std::move(kept);
    report.kept_entries = inv.entries.size();
    report.kept_bytes = inv.entry_bytes;
}

// Removes the variants files of `inv` that list no entry left in it (after remove_by_recency):
// they could only send a lookup to entries that are gone. With `keep_young`, one written within
// the last kRecencyStepNs is kept: a publish may be listing an entry made after the inventory.
void remove_orphan_variants(Inventory &inv, std::int64_t now_ns, bool keep_young, PruneReport &report) {
    std::unordered_set<std::string> keys;
    for (const EntryInfo &e : inv.entries) keys.insert(e.key);
    std::vector<VariantsInfo> kept;
    for (VariantsInfo &v : inv.variants) {
        bool orphan = !keep_young || v.mtime_ns < now_ns - store::cache_entry::kRecencyStepNs;
        if (orphan) {
            for (const std::string &k : store::cache_entry::read_variants(v.path)) {
                if (keys.count(k)) {
                    orphan = false;
                    break;
                }
            }
        }
        if (orphan && ::unlink(v.path.c_str()) == 0) {
            inv.entry_bytes -= std::min(inv.entry_bytes, v.bytes);
            ++report.removed_variants;
            continue;
        }
        kept.push_back(std::move(v));
    }
    inv.variants = std::move(kept);
    report.kept_bytes = inv.entry_bytes;
}

void sweep_stale_transit(const Inventory &inv, std::int64_t now_ns, PruneReport &report) {
    for (const TransitInfo &t : inv.in_transit) {
        store::cache_entry::rewrite_future_mtime(t.path, t.mtime_ns, now_ns);  // then it goes stale in time
        if (t.mtime_ns < now_ns - kStaleTempNs) {
            remove_tree(t.path);
            ++report.removed_in_transit;
        }
    }
}

Result<PruneReport> remove_entries(const std::string &cache_dir, const PruneOptions &options) {
    PruneReport report;
    KJIT_TRY_ASSIGN(auto root, open_root(cache_dir));
    if (!folder_exists(root.path)) return report;
    auto lock = CacheLock::acquire(root, CacheLock::Wait::until_free);
    if (!lock) return std::move(lock).error();
    KJIT_TRY_ASSIGN(auto inv, inventory_of(root.path));
    const std::int64_t now = realtime_ns();
    remove_by_recency(inv, options, now, report);
    // clear (everything, in use or not) takes the young ones too.
    remove_orphan_variants(inv, now, !(options.everything && !options.spare_in_use), report);
    sweep_stale_transit(inv, now, report);
    write_usage(root.path, inv, folder_trust::shared(root.folder));
    return report;
}

// Per-process throttle state of after_publish, per cache folder. A forked child starts its
// own, as a new process would (fork_guard.hpp): its lock may have been held at the fork.
struct EvictionState {
    std::int64_t last_sweep_ns = 0;     // when this process last swept stale temp folders
    std::int64_t last_measured_ns = 0;  // the usage record this process last saw
    std::uint64_t published_since = 0;  // bytes this process published since then
};

// The states of the kMaxEvictionStates cache folders published to last (a long-lived process
// may publish into any number of folders over its life).
class EvictionStates {
public:
    // The state of `cache_dir`, made the most recent; a new one (all zero) may push the least
    // recent out.
    EvictionState &of(const std::string &cache_dir) {
        if (auto found = index_.find(cache_dir); found != index_.end()) {
            order_.splice(order_.begin(), order_, found->second);
            return found->second->second;
        }
        order_.emplace_front(cache_dir, EvictionState{});
        index_.emplace(cache_dir, order_.begin());
        if (order_.size() > kMaxEvictionStates) {
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        return order_.front().second;
    }
    std::size_t size() const { return order_.size(); }

private:
    std::list<std::pair<std::string, EvictionState>> order_;  // most recent first
    std::unordered_map<std::string, std::list<std::pair<std::string, EvictionState>>::iterator> index_;
};
std::mutex eviction_mutex;
EvictionStates eviction_states;

void renew_eviction_state_in_forked_child() {
    fork_guard::renew(eviction_mutex);
    fork_guard::renew(eviction_states);
}
[[maybe_unused]] const bool eviction_fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::eviction_throttle, renew_eviction_state_in_forked_child);

}  // namespace

std::size_t eviction_state_count() {
    std::lock_guard<std::mutex> lock(eviction_mutex);
    return eviction_states.size();
}

Result<PruneReport> prune(const std::string &cache_dir, const PruneOptions &options) {
    return remove_entries(cache_dir, options);
}

Result<PruneReport> clear(const std::string &cache_dir) {
    PruneOptions all;
    all.everything = true;
    all.spare_in_use = false;
    return remove_entries(cache_dir, all);
}

namespace {

// Removes the stale folders in transit of every shard (a listing of the top folder and of each
// shard; entries are not opened). Returns how many went.
std::size_t sweep_shards(const std::string &cache_dir, std::int64_t now_ns) {
    std::size_t removed = 0;
    auto root = list_dir(cache_dir, IfMissing::empty);
    if (!root) return 0;
    for (const DirEntry &r : *root) {
        const std::string path = cache_dir + "/" + r.name;
        if (is_root_temp(r.name) && mtime_ns(r.st) < now_ns - kStaleTempNs) {
            if (::unlink(path.c_str()) == 0) ++removed;
            continue;
        }
        if (!store::cache_entry::is_shard(r.name) || !S_ISDIR(r.st.st_mode)) continue;
        auto listing = list_dir(path, IfMissing::empty);
        if (!listing) continue;
        for (const DirEntry &e : *listing) {
            const bool transit = is_transit_name(e.name) && (S_ISDIR(e.st.st_mode) || S_ISREG(e.st.st_mode));
            if (transit) store::cache_entry::rewrite_future_mtime(path + "/" + e.name, mtime_ns(e.st), now_ns);
            if (transit && mtime_ns(e.st) < now_ns - kStaleTempNs) {
                remove_tree(path + "/" + e.name);
                ++removed;
            }
        }
    }
    return removed;
}

}  // namespace

namespace {
// The sweep and eviction after a publish, in a cache folder already checked.
void after_publish_in(const Root &checked, std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes);
}  // namespace

void after_publish(const std::string &given_dir, std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes) {
    auto root = open_root(given_dir);
    if (!root) {
        log().warn("no sweep or eviction: {}", root.error().message);
        return;
    }
    after_publish_in(*root, max_bytes, entry_bytes);
}

void after_publish(const std::string &given_dir, const folder_trust::CacheFolder &folder,
                   std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes) {
    after_publish_in(root_of(given_dir, folder), max_bytes, entry_bytes);
}

namespace {

void after_publish_in(const Root &root, std::optional<std::uint64_t> max_bytes, std::uint64_t entry_bytes) {
    const std::int64_t now = realtime_ns();
    const std::string &cache_dir = root.path;
    bool sweep_due = false;
    bool measure_due = false;
    Usage usage{};
    bool have_usage = false;
    if (max_bytes) {
        if (const std::optional<Usage> read = read_usage(cache_dir)) {
            usage = *read;
            have_usage = true;
        }
    }
    {
        std::lock_guard<std::mutex> lock(eviction_mutex);
        EvictionState &state = eviction_states.of(cache_dir);
        if (now - state.last_sweep_ns > kSweepIntervalNs) {
            state.last_sweep_ns = now;
            sweep_due = true;
        }
        if (max_bytes) {
            const std::int64_t measured = have_usage ? usage.measured_ns : 0;
            if (measured != state.last_measured_ns) {  // measured again, by anyone: count from there
                state.last_measured_ns = measured;
                state.published_since = 0;
            }
            state.published_since += entry_bytes;
            // A record from the future (a clock ahead) is due too: it would never be 30 s old.
            measure_due = !have_usage || usage.measured_ns > now || now - usage.measured_ns > kEvictionIntervalNs ||
                          usage.bytes + state.published_since > *max_bytes;
        }
    }
    if (!sweep_due && !measure_due) return;
    auto lock = CacheLock::acquire(root, CacheLock::Wait::not_at_all);
    if (!lock) {
        log().debug("no sweep or eviction: {}", lock.error().message);
        return;
    }
    if (!*lock) return;  // another process is sweeping, measuring or evicting
    if (sweep_due) {
        const std::size_t swept = sweep_shards(cache_dir, now);
        counters().swept_temp_folders.fetch_add(swept, std::memory_order_relaxed);
        if (swept > 0) log().info("swept {} stale temp folders left by killed processes in '{}'", swept, cache_dir);
    }
    if (!measure_due) return;
    auto inv = inventory_of(cache_dir);
    if (!inv) {
        log().warn("no eviction: {}", inv.error().message);
        return;
    }
    counters().eviction_runs.fetch_add(1, std::memory_order_relaxed);
    if (inv->entry_bytes > *max_bytes) {
        PruneOptions options;
        options.max_bytes = static_cast<std::uint64_t>(static_cast<double>(*max_bytes) * kEvictionLowWater);
        PruneReport report;
        remove_by_recency(*inv, options, now, report);
        remove_orphan_variants(*inv, now, true, report);
        counters().evicted_entries.fetch_add(report.removed_entries, std::memory_order_relaxed);
        counters().evicted_bytes.fetch_add(report.removed_bytes, std::memory_order_relaxed);
        log().info("cache '{}' over its limit of {}: evicted {} entries ({}), {} in use kept; {} left", cache_dir,
                   format_size(*max_bytes), report.removed_entries, format_size(report.removed_bytes),
                   report.spared_in_use, format_size(inv->entry_bytes));
    }
    write_usage(cache_dir, *inv, folder_trust::shared(root.folder));
}

}  // namespace

Freed make_room(const std::string &given_dir, std::uint64_t max_bytes, std::uint64_t needed_bytes) {
    Freed freed;
    auto root = open_root(given_dir);
    if (!root) {
        log().warn("no eviction to make room: {}", root.error().message);
        return freed;
    }
    auto lock = CacheLock::acquire(*root, CacheLock::Wait::not_at_all);
    if (!lock) {
        log().warn("no eviction to make room: {}", lock.error().message);
        return freed;
    }
    if (!*lock) return freed;  // another process is evicting or pruning: it may free room too
    auto inv = inventory_of(root->path);
    if (!inv) {
        log().warn("no eviction to make room: {}", inv.error().message);
        return freed;
    }
    counters().eviction_runs.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t size = inv->entry_bytes;
    PruneOptions options;
    options.max_bytes =
        std::min(static_cast<std::uint64_t>(static_cast<double>(std::min(max_bytes, size)) * kEvictionLowWater),
                 size > needed_bytes ? size - needed_bytes : 0);
    PruneReport report;
    const std::int64_t now = realtime_ns();
    remove_by_recency(*inv, options, now, report);
    remove_orphan_variants(*inv, now, true, report);
    counters().evicted_entries.fetch_add(report.removed_entries, std::memory_order_relaxed);
    counters().evicted_bytes.fetch_add(report.removed_bytes, std::memory_order_relaxed);
    log().info("no room to publish in '{}' (full disk or quota): evicted {} entries ({}), {} in use kept; {} left",
               root->path, report.removed_entries, format_size(report.removed_bytes), report.spared_in_use,
               format_size(inv->entry_bytes));
    write_usage(root->path, *inv, folder_trust::shared(root->folder));
    freed.entries = report.removed_entries;
    freed.bytes = report.removed_bytes;
    return freed;
}

namespace {
std::atomic<Counters *> counters_slot{nullptr};
}  // namespace

Counters &counters() {
    // Leaked: usable during exit. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(counters_slot, [] { return new Counters(); });
}

}  // namespace kjit::store::cache_eviction
