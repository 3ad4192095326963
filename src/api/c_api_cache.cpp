// The C ABI of kjit_cache.h: the process's counters (kjit_get_stats), the cache folder and the
// cluster tier described and checked, and the maintenance calls (summarize, prune, clear,
// verify, export, import) with their reports.
#include "kjit/kjit_cache.h"

#include "api/c_api_support.hpp"
#include "api/c_struct.hpp"
#include "api/compile_options.hpp"
#include "api/defaults.hpp"
#include "cache/cache.hpp"
#include "load/kernel_loader.hpp"
#include "resolve/name_resolver.hpp"
#include "storage/remote/tier.hpp"
#include "store/cache_copy.hpp"
#include "store/cache_eviction.hpp"
#include "store/cache_inventory.hpp"
#include "store/cache_verification.hpp"
#include "util/filesystem.hpp"
#include "util/status.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// A cache's entries by arch (kjit_cache_summarize), in the summary's (byte) order.
struct kjit_cache_arches {
    std::vector<std::string> names;
    std::vector<std::uint64_t> entries;
    std::vector<std::uint64_t> bytes;
};

// What kjit_cache_verify found, immutable once returned.
struct kjit_verify_report {
    kjit::store::cache_verification::VerifyReport report;
};

namespace {

using kjit::api::c_struct::invalid;
namespace c_struct = kjit::api::c_struct;
namespace compile_options = kjit::api::compile_options;
using namespace kjit::api::c_api_support;  // what the C ABI's files share

static_assert(static_cast<int>(kjit::resolve::NameResolver::Rejection::count) <= KJIT_STATS_REJECTION_SLOTS,
              "kjit_stats.sidecar_rejections is too small");
static_assert(static_cast<int>(kjit::resolve::NameResolver::Rejection::distrusted) == KJIT_SIDECAR_DISTRUSTED &&
                  static_cast<int>(kjit::resolve::NameResolver::Rejection::unreadable) == KJIT_SIDECAR_UNREADABLE &&
                  static_cast<int>(kjit::resolve::NameResolver::Rejection::stale) == KJIT_SIDECAR_STALE,
              "resolve::NameResolver::Rejection and kjit_sidecar_rejection differ");
static_assert(KJIT_ERROR_NOT_CACHED < KJIT_STATS_STATUS_SLOTS, "kjit_stats.errors is too small");

// verify's Damage is the public kjit_cache_problem: one vocabulary, values checked here.
#define KJIT_SAME_PROBLEM(damage, problem)                                                                        \
    static_assert(static_cast<int>(kjit::store::cache_verification::Damage::damage) == static_cast<int>(problem), \
                  "Damage and kjit_cache_problem differ")
KJIT_SAME_PROBLEM(misplaced, KJIT_CACHE_MISPLACED);
KJIT_SAME_PROBLEM(missing_file, KJIT_CACHE_MISSING_FILE);
KJIT_SAME_PROBLEM(bad_manifest, KJIT_CACHE_BAD_MANIFEST);
KJIT_SAME_PROBLEM(bad_cubin, KJIT_CACHE_BAD_CUBIN);
KJIT_SAME_PROBLEM(truncated_cubin, KJIT_CACHE_TRUNCATED_CUBIN);
KJIT_SAME_PROBLEM(sidecar_missing, KJIT_CACHE_SIDECAR_MISSING);
KJIT_SAME_PROBLEM(sidecar_damaged, KJIT_CACHE_SIDECAR_DAMAGED);
KJIT_SAME_PROBLEM(sidecar_stale, KJIT_CACHE_SIDECAR_STALE);
KJIT_SAME_PROBLEM(sidecar_wrong_name, KJIT_CACHE_SIDECAR_WRONG_NAME);
KJIT_SAME_PROBLEM(stale_temp, KJIT_CACHE_STALE_TEMP);
KJIT_SAME_PROBLEM(foreign, KJIT_CACHE_FOREIGN);
#undef KJIT_SAME_PROBLEM
// The cache folder a maintenance call works on: `given`, else the default, made absolute:
// what kjit_compile works on for the same cache_dir (request_from, then key_request).
kjit::Result<std::string> cache_dir_from(const char *given) {
    std::string dir;
    KJIT_TRY(compile_options::given_or_default_cache_dir(given, dir));
    return kjit::absolute_folder(dir);
}

// A cluster-tier setting a call names: `given` when set, else $KJIT_REMOTE_STORAGE's; with the
// name messages give it (`argument`, or the variable).
std::pair<std::string, const char *> remote_setting(const char *given, const char *argument) {
    if (given && *given) return {given, argument};
    return {kjit::api::defaults::remote_storage(), "KJIT_REMOTE_STORAGE"};
}
// A caller's kjit_prune_options (any struct_size from the first release on) as prune options.
kjit::Result<kjit::store::cache_eviction::PruneOptions> prune_options_from(const kjit_prune_options *options) {
    kjit::store::cache_eviction::PruneOptions out;
    if (!options) return out;
    KJIT_TRY(c_struct::check_size(*options, "kjit_cache_prune: options", "kjit_prune_options"));
    if (KJIT_FIELD_PRESENT(kjit_prune_options, options, max_size) && options->max_size != KJIT_PRUNE_NO_LIMIT) {
        out.max_bytes = options->max_size;
    }
    if (KJIT_FIELD_PRESENT(kjit_prune_options, options, older_than_s) && options->older_than_s != KJIT_PRUNE_NO_LIMIT) {
        // Nanoseconds in an int64, as an age is kept: a larger one would wrap to a negative age,
        // which removes every entry.
        constexpr std::uint64_t kMaxSeconds = INT64_MAX / 1'000'000'000;
        if (options->older_than_s > kMaxSeconds) {
            return invalid("kjit_cache_prune: options->older_than_s is " + std::to_string(options->older_than_s) +
                           "; at most " + std::to_string(kMaxSeconds) +
                           " seconds (about 292 years), or KJIT_PRUNE_NO_LIMIT for no age bound");
        }
        out.older_than_ns = static_cast<std::int64_t>(options->older_than_s) * 1'000'000'000;
    }
    return out;
}

// Copies a prune report into the caller's struct (its struct_size already checked).
void fill_prune_report(const kjit::store::cache_eviction::PruneReport &r, kjit_prune_report *out) {
    if (!out) return;
    kjit_prune_report c{};
    c.struct_size = out->struct_size;
    c.removed_entries = r.removed_entries;
    c.removed_bytes = r.removed_bytes;
    c.spared_in_use = r.spared_in_use;
    c.removed_in_transit = r.removed_in_transit;
    c.removed_variants_files = r.removed_variants;
    c.kept_entries = r.kept_entries;
    c.kept_bytes = r.kept_bytes;
    std::memcpy(static_cast<void *>(out), &c, c.struct_size);
}

// The finding at `index` of a verify report, or NULL.
const kjit::store::cache_verification::Finding *finding_at(const kjit_verify_report *report, size_t index) {
    if (!report || index >= report->report.findings.size()) return nullptr;
    return &report->report.findings[index];
}
// kjit_cache_prune and kjit_cache_clear: every argument checked before anything is removed (the
// report's size here, the rest by `remove`, which runs on the resolved cache folder), then the
// report filled in.
template <typename Remove>
kjit_status remove_and_report(const char *function, const char *cache_dir, kjit_prune_report *report, Remove remove) {
    if (report) {
        if (auto st = c_struct::check_size(*report, std::string(function) + ": report", "kjit_prune_report"); !st) {
            return fail(st.error());
        }
    }
    auto dir = cache_dir_from(cache_dir);
    if (!dir) return fail(dir.error());
    auto done = remove(*dir);
    if (!done) return fail(done.error());
    fill_prune_report(*done, report);
    return KJIT_OK;
}
}  // namespace

extern "C" {

KJIT_API kjit_status kjit_get_stats(kjit_stats *stats) {
    return guarded("kjit_get_stats", [&]() -> kjit_status {
        if (!stats) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_get_stats: stats is NULL");
        if (auto st = c_struct::check_size(*stats, "kjit_get_stats: stats", "kjit_stats"); !st) return fail(st.error());
        const size_t size = stats->struct_size;
        constexpr auto relaxed = std::memory_order_relaxed;
        kjit_stats s{};
        s.struct_size = size;
        const auto &cache = kjit::cache::Cache::instance().counters();
        s.compile_hits = cache.compile_hits.load(relaxed);
        s.compile_misses = cache.compile_misses.load(relaxed);
        s.compile_shared_waits = cache.compile_shared_waits.load(relaxed);
        s.nvrtc_compiles = cache.nvrtc_compiles.load(relaxed);
        s.nvrtc_nanoseconds = cache.nvrtc_nanoseconds.load(relaxed);
        s.entries_published = cache.entries_published.load(relaxed);
        s.entries_rebuilt = cache.entries_rebuilt.load(relaxed);
        const auto &resolver = kjit::resolve::NameResolver::instance().counters();
        s.sidecar_hits = resolver.sidecar_hits.load(relaxed) + resolver.racy_sidecar_hits.load(relaxed);
        s.sidecar_content_checks = resolver.sidecar_content_checks.load(relaxed);
        s.memo_hits = resolver.memo_hits.load(relaxed);
        s.sidecar_missing = resolver.sidecar_missing.load(relaxed);
        for (std::size_t i = 0; i < resolver.rejections.size(); ++i)
            s.sidecar_rejections[i] = resolver.rejections[i].load(relaxed);
        s.scans = resolver.scans.load(relaxed);
        s.sidecar_writes = resolver.sidecar_writes.load(relaxed);
        s.sidecar_write_failures = resolver.sidecar_write_failures.load(relaxed);
        const auto &loader = kjit::load::KernelLoader::instance().counters();
        s.loads = api_counters().loads.load(relaxed);
        s.load_reuses = loader.load_reuses.load(relaxed);
        s.driver_loads = loader.driver_loads.load(relaxed);
        s.load_self_heals = loader.load_self_heals.load(relaxed);
        const auto &eviction = kjit::store::cache_eviction::counters();
        s.eviction_runs = eviction.eviction_runs.load(relaxed);
        s.evicted_entries = eviction.evicted_entries.load(relaxed);
        s.evicted_bytes = eviction.evicted_bytes.load(relaxed);
        for (std::size_t i = 0; i < KJIT_STATS_STATUS_SLOTS; ++i) s.errors[i] = api_counters().errors[i].load(relaxed);
        s.swept_temp_folders = eviction.swept_temp_folders.load(relaxed);
        const auto &remote = kjit::storage::remote::counters();
        s.remote_hits = remote.hits.load(relaxed);
        s.remote_misses = remote.misses.load(relaxed);
        s.remote_errors = remote.errors.load(relaxed);
        s.remote_timeouts = remote.timeouts.load(relaxed);
        s.remote_corrupt = remote.corrupt.load(relaxed);
        s.remote_puts = remote.puts.load(relaxed);
        s.remote_bytes_in = remote.bytes_in.load(relaxed);
        s.remote_bytes_out = remote.bytes_out.load(relaxed);
        s.remote_leases_owned = remote.leases_owned.load(relaxed);
        s.remote_lease_waits = remote.lease_waits.load(relaxed);
        s.remote_lease_takeovers = remote.lease_takeovers.load(relaxed);
        s.remote_shared_failures = remote.shared_failures.load(relaxed);
        s.seed_hits = cache.seed_hits.load(relaxed);
        s.seed_rejections = cache.seed_rejections.load(relaxed);
        s.nvjitlink_links = cache.nvjitlink_links.load(relaxed);
        s.nvjitlink_nanoseconds = cache.nvjitlink_nanoseconds.load(relaxed);
        std::memcpy(static_cast<void *>(stats), &s, size);
        return KJIT_OK;
    });
}
KJIT_API kjit_status kjit_prune_options_init(kjit_prune_options *options, size_t struct_size) {
    return guarded("kjit_prune_options_init", [&]() -> kjit_status {
        return init_struct(options, struct_size, kjit_prune_options KJIT_PRUNE_OPTIONS_INIT, "kjit_prune_options_init",
                           "kjit_prune_options");
    });
}

KJIT_API kjit_status kjit_cache_dir(const char *cache_dir, char *path, size_t path_size, size_t *path_len) {
    return guarded("kjit_cache_dir", [&]() -> kjit_status {
        if (!path && path_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_cache_dir: path is NULL but path_size is not 0");
        }
        auto dir = cache_dir_from(cache_dir);
        if (!dir) return fail(dir.error());
        return copy_out(*dir, path, path_size, path_len, "path");
    });
}

KJIT_API kjit_status kjit_remote_describe(const char *remote_storage, char *text, size_t text_size, size_t *text_len) {
    return guarded("kjit_remote_describe", [&]() -> kjit_status {
        if (!text && text_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_remote_describe: text is NULL but text_size is not 0");
        }
        const auto [spec, origin] = remote_setting(remote_storage, "kjit_remote_describe: remote_storage");
        auto tier = kjit::storage::remote::Tier::for_spec(spec, origin);
        if (!tier) return fail(tier.error());
        if (!*tier) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        (std::string(origin) + " sets no remote cache (e.g. redis://cache-host:6379)").c_str());
        }
        return copy_out((*tier)->describe_servers(), text, text_size, text_len, "text");
    });
}

KJIT_API kjit_status kjit_remote_check(const char *remote_storage, unsigned flags) {
    return guarded("kjit_remote_check", [&]() -> kjit_status {
        if (flags & ~KJIT_REMOTE_CHECK_NO_PASSWORD) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, ("kjit_remote_check: unknown flags " + std::to_string(flags) +
                                                      " (KJIT_REMOTE_CHECK_NO_PASSWORD is the only one)")
                                                         .c_str());
        }
        const auto [spec, origin] = remote_setting(remote_storage, "kjit_remote_check: remote_storage");
        // Before parsing: a malformed setting's message must not be the first to show it.
        if ((flags & KJIT_REMOTE_CHECK_NO_PASSWORD) && kjit::storage::remote::names_a_password(spec)) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        (std::string(origin) +
                         " names a server with a password, which every user of this machine can read in a "
                         "command line (/proc/PID/cmdline); give the setting in $KJIT_REMOTE_STORAGE instead, or "
                         "the password in a file named by password-file=PATH (readable by its owner only)")
                            .c_str());
        }
        // As a compile would take it: parsed, and refused by a libkjit built without the tier.
        auto tier = kjit::storage::remote::Tier::for_spec(spec, origin);
        if (!tier) return fail(tier.error());
        return KJIT_OK;
    });
}

KJIT_API kjit_status kjit_cache_summarize(const char *cache_dir, kjit_cache_summary *summary,
                                          kjit_cache_arches **arches) {
    if (arches) *arches = nullptr;
    return guarded("kjit_cache_summarize", [&]() -> kjit_status {
        if (!summary) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_cache_summarize: summary is NULL");
        if (auto st = c_struct::check_size(*summary, "kjit_cache_summarize: summary", "kjit_cache_summary"); !st) {
            return fail(st.error());
        }
        auto dir = cache_dir_from(cache_dir);
        if (!dir) return fail(dir.error());
        auto found = kjit::store::cache_inventory::summarize(*dir);
        if (!found) return fail(found.error());
        auto limit = kjit::api::defaults::max_cache_bytes();
        if (!limit) return fail(limit.error());
        const kjit::store::cache_inventory::Summary &from = *found;
        std::unique_ptr<kjit_cache_arches> by_arch;
        if (arches) {
            by_arch = std::make_unique<kjit_cache_arches>();
            for (const auto &[name, a] : from.by_arch) {
                by_arch->names.push_back(name);
                by_arch->entries.push_back(a.entries);
                by_arch->bytes.push_back(a.bytes);
            }
        }
        kjit_cache_summary c{};
        c.struct_size = summary->struct_size;
        c.entries = from.entries;
        c.bytes = from.bytes;
        c.max_size = limit->value_or(0);
        c.in_transit = from.in_transit;
        c.in_transit_bytes = from.in_transit_bytes;
        c.foreign = from.foreign;
        c.least_recent_use_ns = from.least_recent_use_ns;
        c.most_recent_use_ns = from.most_recent_use_ns;
        c.oldest_created_ns = from.oldest_created_ns;
        c.newest_created_ns = from.newest_created_ns;
        std::memcpy(static_cast<void *>(summary), &c, c.struct_size);
        if (arches) *arches = by_arch.release();
        return KJIT_OK;
    });
}

KJIT_API size_t kjit_cache_arches_count(const kjit_cache_arches *arches) { return arches ? arches->names.size() : 0; }

KJIT_API const char *kjit_cache_arches_name(const kjit_cache_arches *arches, size_t index) {
    if (!arches || index >= arches->names.size()) return nullptr;
    return arches->names[index].c_str();
}

KJIT_API uint64_t kjit_cache_arches_entries(const kjit_cache_arches *arches, size_t index) {
    if (!arches || index >= arches->entries.size()) return 0;
    return arches->entries[index];
}

KJIT_API uint64_t kjit_cache_arches_bytes(const kjit_cache_arches *arches, size_t index) {
    if (!arches || index >= arches->bytes.size()) return 0;
    return arches->bytes[index];
}

KJIT_API void kjit_cache_arches_release(kjit_cache_arches *arches) { delete arches; }

KJIT_API kjit_status kjit_cache_prune(const char *cache_dir, const kjit_prune_options *options,
                                      kjit_prune_report *report) {
    return guarded("kjit_cache_prune", [&]() -> kjit_status {
        return remove_and_report("kjit_cache_prune", cache_dir, report, [&](const std::string &dir) {
            auto prune_options = prune_options_from(options);
            if (!prune_options) return kjit::Result<kjit::store::cache_eviction::PruneReport>(prune_options.error());
            return kjit::store::cache_eviction::prune(dir, *prune_options);
        });
    });
}

KJIT_API kjit_status kjit_cache_clear(const char *cache_dir, kjit_prune_report *report) {
    return guarded("kjit_cache_clear", [&]() -> kjit_status {
        return remove_and_report("kjit_cache_clear", cache_dir, report,
                                 [](const std::string &dir) { return kjit::store::cache_eviction::clear(dir); });
    });
}

KJIT_API const char *kjit_cache_problem_string(int problem) {
    if (problem < KJIT_CACHE_MISPLACED || problem > KJIT_CACHE_FOREIGN) return "unknown";
    return kjit::store::cache_verification::to_string(static_cast<kjit::store::cache_verification::Damage>(problem));
}

KJIT_API kjit_status kjit_cache_verify(const char *cache_dir, int fix, kjit_verify_report **report) {
    if (report) *report = nullptr;
    return guarded("kjit_cache_verify", [&]() -> kjit_status {
        if (!report) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_cache_verify: report (the out handle) is NULL");
        auto dir = cache_dir_from(cache_dir);
        if (!dir) return fail(dir.error());
        auto found = kjit::store::cache_verification::verify(*dir, fix != 0);
        if (!found) return fail(found.error());
        auto out = std::make_unique<kjit_verify_report>();
        out->report = std::move(*found);
        *report = out.release();
        return KJIT_OK;
    });
}

namespace {

// kjit_cache_export and kjit_cache_import: `from` into `to` (settled, absolute), reported.
kjit_status copy_and_report(const char *function, const std::string &from, const std::string &to, const char *arch,
                            kjit_copy_report *report, kjit_verify_report **refused) {
    if (report) {
        if (auto st = c_struct::check_size(*report, std::string(function) + ": report", "kjit_copy_report"); !st) {
            return fail(st.error());
        }
    }
    auto copied = kjit::store::cache_copy::copy_entries(from, to, arch ? arch : "");
    if (!copied) return fail(copied.error());
    if (report) {
        kjit_copy_report c{};
        c.struct_size = report->struct_size;
        c.copied_entries = copied->copied;
        c.copied_bytes = copied->copied_bytes;
        c.present_entries = copied->present;
        c.skipped_entries = copied->skipped;
        c.refused_entries = copied->refused.findings.size();
        std::memcpy(static_cast<void *>(report), &c, c.struct_size);
    }
    if (refused) {
        auto out = std::make_unique<kjit_verify_report>();
        out->report = std::move(copied->refused);
        *refused = out.release();
    }
    return KJIT_OK;
}

}  // namespace

KJIT_API kjit_status kjit_cache_export(const char *cache_dir, const char *dest_dir, const char *arch,
                                       kjit_copy_report *report, kjit_verify_report **refused) {
    if (refused) *refused = nullptr;
    return guarded("kjit_cache_export", [&]() -> kjit_status {
        if (!dest_dir || !*dest_dir)
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_cache_export: dest_dir is NULL or empty");
        auto from = cache_dir_from(cache_dir);
        if (!from) return fail(from.error());
        auto to = kjit::absolute_folder(dest_dir);
        if (!to) return fail(to.error());
        return copy_and_report("kjit_cache_export", *from, *to, arch, report, refused);
    });
}

KJIT_API kjit_status kjit_cache_import(const char *source_dir, const char *cache_dir, kjit_copy_report *report,
                                       kjit_verify_report **refused) {
    if (refused) *refused = nullptr;
    return guarded("kjit_cache_import", [&]() -> kjit_status {
        if (!source_dir || !*source_dir) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_cache_import: source_dir is NULL or empty");
        }
        auto from = kjit::absolute_folder(source_dir);
        if (!from) return fail(from.error());
        auto to = cache_dir_from(cache_dir);
        if (!to) return fail(to.error());
        return copy_and_report("kjit_cache_import", *from, *to, nullptr, report, refused);
    });
}

KJIT_API size_t kjit_verify_report_entries_checked(const kjit_verify_report *report) {
    return report ? report->report.entries_checked : 0;
}

KJIT_API size_t kjit_verify_report_entries_ok(const kjit_verify_report *report) {
    return report ? report->report.entries_ok : 0;
}

KJIT_API size_t kjit_verify_report_count(const kjit_verify_report *report) {
    return report ? report->report.findings.size() : 0;
}

KJIT_API const char *kjit_verify_report_path(const kjit_verify_report *report, size_t index) {
    const auto *f = finding_at(report, index);
    return f ? f->path.c_str() : nullptr;
}

KJIT_API int kjit_verify_report_kind(const kjit_verify_report *report, size_t index) {
    const auto *f = finding_at(report, index);
    return f ? static_cast<int>(f->damage) : -1;
}

KJIT_API const char *kjit_verify_report_detail(const kjit_verify_report *report, size_t index) {
    const auto *f = finding_at(report, index);
    return f ? f->detail.c_str() : nullptr;
}

KJIT_API int kjit_verify_report_fixed(const kjit_verify_report *report, size_t index) {
    const auto *f = finding_at(report, index);
    return f ? (f->fixed ? 1 : 0) : -1;
}

KJIT_API const char *kjit_verify_report_action(const kjit_verify_report *report, size_t index) {
    const auto *f = finding_at(report, index);
    return f ? f->action.c_str() : nullptr;
}

KJIT_API void kjit_verify_report_release(kjit_verify_report *report) { delete report; }
}  // extern "C"
