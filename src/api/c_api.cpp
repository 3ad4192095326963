// The C ABI: argument checks, status codes, the thread-local error text. The only file that
// knows the public C types; no C++ type or exception crosses this boundary.
#include "kjit/kjit.h"

#include "api/c_struct.hpp"
#include "api/compile_options.hpp"
#include "api/defaults.hpp"
#include "api/memo_digest.hpp"
#include "api/request_record.hpp"
#include "batch/batch_compiler.hpp"
#include "cache/cache.hpp"
#include "key/cache_key.hpp"
#include "load/kernel_loader.hpp"
#include "remote/remote_store.hpp"
#include "resolve/name_resolver.hpp"
#include "store/cache_copy.hpp"
#include "store/cache_eviction.hpp"
#include "store/cache_inventory.hpp"
#include "store/cache_verification.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"
#include "util/status.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

// The C handle: a loader reference plus nothing else (the accessors read through it).
struct kjit_kernel {
    explicit kjit_kernel(kjit::load::KernelHandle h) : handle(std::move(h)) {}
    kjit::load::KernelHandle handle;
};

// A prepared request (kjit_prepare): the request as request_from settled it and its hit-memo
// digest, both taken once; immutable afterwards, so any number of threads read it at once.
struct kjit_prepared {
    kjit::key::Request request;
    kjit::cache::HitMemo::Digest digest;
    bool memo = false;  // the memo was on when it was prepared: `digest` is the request's
};

// A batch's per-item results, immutable once returned.
struct kjit_batch_result {
    std::vector<kjit_status> statuses;
    std::vector<std::string> cubin_paths;   // "" for failed items
    std::vector<std::string> kernel_names;  // "" for failed items
    std::vector<std::string> errors;        // "" for items that succeeded
};

// A cache's entries by arch (kjit_cache_summarize), in the summary's (byte) order.
struct kjit_cache_arches {
    std::vector<std::string> names;
    std::vector<std::uint64_t> entries;
    std::vector<std::uint64_t> bytes;
};

// What kjit_cache_verify found, immutable once returned.
struct kjit_verify_report {
    kjit::store::cache_maintenance::VerifyReport report;
};

namespace {

using kjit::Errc;
using kjit::api::c_struct::invalid;
namespace c_struct = kjit::api::c_struct;
namespace compile_options = kjit::api::compile_options;

#define KJIT_SAME_VALUE(errc, status) \
    static_assert(static_cast<int>(Errc::errc) == static_cast<int>(status), "Errc and kjit_status differ")
KJIT_SAME_VALUE(invalid_argument, KJIT_ERROR_INVALID_ARGUMENT);
KJIT_SAME_VALUE(not_found, KJIT_ERROR_NOT_FOUND);
KJIT_SAME_VALUE(ambiguous, KJIT_ERROR_AMBIGUOUS);
KJIT_SAME_VALUE(bad_cubin, KJIT_ERROR_BAD_CUBIN);
KJIT_SAME_VALUE(io, KJIT_ERROR_IO);
KJIT_SAME_VALUE(compile, KJIT_ERROR_COMPILE);
KJIT_SAME_VALUE(nvrtc, KJIT_ERROR_NVRTC);
KJIT_SAME_VALUE(driver_unavailable, KJIT_ERROR_DRIVER_UNAVAILABLE);
KJIT_SAME_VALUE(driver, KJIT_ERROR_DRIVER);
KJIT_SAME_VALUE(buffer_too_small, KJIT_ERROR_BUFFER_TOO_SMALL);
KJIT_SAME_VALUE(out_of_memory, KJIT_ERROR_OUT_OF_MEMORY);
KJIT_SAME_VALUE(internal, KJIT_ERROR_INTERNAL);
KJIT_SAME_VALUE(cancelled, KJIT_ERROR_CANCELLED);
KJIT_SAME_VALUE(link, KJIT_ERROR_LINK);
KJIT_SAME_VALUE(not_cached, KJIT_ERROR_NOT_CACHED);
#undef KJIT_SAME_VALUE

static_assert(static_cast<int>(kjit::resolve::NameResolver::Rejection::count) <= KJIT_STATS_REJECTION_SLOTS,
              "kjit_stats.sidecar_rejections is too small");
static_assert(static_cast<int>(kjit::resolve::NameResolver::Rejection::distrusted) == KJIT_SIDECAR_DISTRUSTED &&
                  static_cast<int>(kjit::resolve::NameResolver::Rejection::unreadable) == KJIT_SIDECAR_UNREADABLE &&
                  static_cast<int>(kjit::resolve::NameResolver::Rejection::stale) == KJIT_SIDECAR_STALE,
              "resolve::NameResolver::Rejection and kjit_sidecar_rejection differ");
static_assert(KJIT_ERROR_NOT_CACHED < KJIT_STATS_STATUS_SLOTS, "kjit_stats.errors is too small");

// verify's Damage is the public kjit_cache_problem: one vocabulary, values checked here.
#define KJIT_SAME_PROBLEM(damage, problem)                                                                       \
    static_assert(static_cast<int>(kjit::store::cache_maintenance::Damage::damage) == static_cast<int>(problem), \
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

// Counters only the C ABI sees: successful loads and every failure returned, by status.
struct ApiCounters {
    std::atomic<std::uint64_t> loads{0};
    std::array<std::atomic<std::uint64_t>, KJIT_STATS_STATUS_SLOTS> errors{};
};
std::atomic<ApiCounters *> api_counters_slot{nullptr};
ApiCounters &api_counters() {
    // Leaked: usable during exit. No once-guard (fork_guard.hpp).
    return kjit::fork_guard::lazy(api_counters_slot, [] { return new ApiCounters(); });
}

// The calling thread's detail text for its last failure. A fixed-size fallback keeps
// kjit_last_error() meaningful even when storing the text itself runs out of memory.
thread_local std::string t_last_error;
thread_local const char *t_last_error_fallback = nullptr;

// Counts a failure in kjit_stats.errors.
void count_failure(kjit_status status) noexcept {
    const auto slot = static_cast<std::size_t>(status);
    if (slot > 0 && slot < KJIT_STATS_STATUS_SLOTS) api_counters().errors[slot].fetch_add(1, std::memory_order_relaxed);
}

// Sets the calling thread's kjit_last_error() text.
void set_last_error(const char *message) noexcept {
    try {
        t_last_error.assign(message);
        t_last_error_fallback = nullptr;
    } catch (...) {
        t_last_error_fallback = "out of memory while recording the error text";
    }
}

kjit_status fail(kjit_status status, const char *message) noexcept {
    count_failure(status);
    set_last_error(message);
    return status;
}

kjit_status fail(const kjit::Error &e) noexcept { return fail(static_cast<kjit_status>(e.code), e.message.c_str()); }

// Runs `body` (which returns a kjit_status), mapping any escaping exception to a status.
template <typename Body>
kjit_status guarded(const char *function, Body &&body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        return fail(KJIT_ERROR_OUT_OF_MEMORY, (std::string(function) + ": out of memory").c_str());
    } catch (const std::exception &e) {
        return fail(KJIT_ERROR_INTERNAL, (std::string(function) + ": internal error: " + e.what()).c_str());
    } catch (...) {
        return fail(KJIT_ERROR_INTERNAL, "internal error: unknown exception");
    }
}

// Copies `value` out under the buffer convention of kjit.h.
kjit_status copy_out(const std::string &value, char *buf, size_t size, size_t *len, const char *what) {
    if (len) *len = value.size();
    if (!buf && size == 0) return KJIT_OK;  // length-only query
    if (size <= value.size()) {
        return fail(KJIT_ERROR_BUFFER_TOO_SMALL,
                    (std::string(what) + " buffer holds " + std::to_string(size) + " bytes; " +
                     std::to_string(value.size() + 1) + " are needed (the string and its NUL)")
                        .c_str());
    }
    std::memcpy(buf, value.data(), value.size());
    buf[value.size()] = '\0';
    return KJIT_OK;
}

// One batch item's C request as a cache request, or why it is not one.
kjit::Result<kjit::key::Request> batch_item_from(const kjit_compile_request *item, size_t index) {
    const std::string where = "kjit_compile_batch: requests[" + std::to_string(index) + "]";
    if (!item) return invalid(where + " is NULL");
    // Every field of the first version is needed: a request has no defaults.
    if (auto st = c_struct::check_size(*item, where, "kjit_compile_request",
                                       offsetof(kjit_compile_request, options) + sizeof(item->options));
        !st) {
        return std::move(st).error();
    }
    if (!item->source) return invalid(where + "->source is NULL");
    if (!item->keyword) return invalid(where + "->keyword is NULL");
    kjit::key::Request r;
    r.source = item->source;
    r.keyword = item->keyword;
    if (auto s = compile_options::request_from(item->options, r, where + "->options"); !s) return std::move(s).error();
    kjit::api::request_record::note(r);
    return r;
}

// The cache folder a maintenance call works on: `given`, else the default, made absolute:
// what kjit_compile works on for the same cache_dir (request_from, then key_request).
kjit::Result<std::string> cache_dir_from(const char *given) {
    std::string dir;
    if (auto st = compile_options::given_or_default_cache_dir(given, dir); !st) return std::move(st).error();
    return kjit::absolute_folder(dir);
}

// A cluster-tier setting a call names: `given` when set, else $KJIT_REMOTE_STORAGE's; with the
// name messages give it (`argument`, or the variable).
std::pair<std::string, const char *> remote_setting(const char *given, const char *argument) {
    if (given && *given) return {given, argument};
    return {kjit::api::defaults::remote_storage(), "KJIT_REMOTE_STORAGE"};
}

// Fills the first `struct_size` bytes of `*out` with `defaults` (an *_INIT macro's value), for
// the *_init functions: a caller built against an older, smaller struct gets nothing past it.
template <typename T>
kjit_status init_struct(T *out, size_t struct_size, T defaults, const char *function, const char *type) {
    if (!out) return fail(KJIT_ERROR_INVALID_ARGUMENT, (std::string(function) + ": the struct is NULL").c_str());
    defaults.struct_size = struct_size;
    if (auto st = c_struct::check_size(defaults, std::string(function) + ": the struct", type); !st)
        return fail(st.error());
    std::memcpy(static_cast<void *>(out), &defaults, struct_size);
    return KJIT_OK;
}

// A caller's kjit_prune_options (any struct_size from the first release on) as prune options.
kjit::Result<kjit::store::cache_maintenance::PruneOptions> prune_options_from(const kjit_prune_options *options) {
    kjit::store::cache_maintenance::PruneOptions out;
    if (!options) return out;
    if (auto st = c_struct::check_size(*options, "kjit_cache_prune: options", "kjit_prune_options"); !st) {
        return std::move(st).error();
    }
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
void fill_prune_report(const kjit::store::cache_maintenance::PruneReport &r, kjit_prune_report *out) {
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
const kjit::store::cache_maintenance::Finding *finding_at(const kjit_verify_report *report, size_t index) {
    if (!report || index >= report->report.findings.size()) return nullptr;
    return &report->report.findings[index];
}

// A batch's options from the caller's (NULL: the defaults), with the worker count resolved.
// Errors: invalid_argument (struct size, pch), or the defaults' ($KJIT_JOBS).
kjit::Result<kjit::batch::batch_compiler::Options> batch_options_from(const kjit_batch_options *options) {
    kjit::batch::batch_compiler::Options batch;
    unsigned workers = 0;
    int pch = KJIT_PCH_DEFAULT;
    int kind = KJIT_WORKERS_DEFAULT;
    if (options) {
        if (auto st = c_struct::check_size(*options, "kjit_compile_batch: options", "kjit_batch_options"); !st) {
            return std::move(st).error();
        }
        if (KJIT_FIELD_PRESENT(kjit_batch_options, options, workers)) workers = options->workers;
        if (KJIT_FIELD_PRESENT(kjit_batch_options, options, pch)) pch = options->pch;
        if (KJIT_FIELD_PRESENT(kjit_batch_options, options, worker_kind)) kind = options->worker_kind;
        if (KJIT_FIELD_PRESENT(kjit_batch_options, options, reserved) && options->reserved != 0) {
            return kjit::Error{kjit::Errc::invalid_argument, "kjit_compile_batch: options->reserved is " +
                                                                 std::to_string(options->reserved) + "; it must be 0"};
        }
    }
    if (pch != KJIT_PCH_DEFAULT && pch != KJIT_PCH_ON && pch != KJIT_PCH_OFF) {
        return kjit::Error{kjit::Errc::invalid_argument, "kjit_compile_batch: options->pch is " + std::to_string(pch) +
                                                             "; use KJIT_PCH_DEFAULT, KJIT_PCH_ON or KJIT_PCH_OFF"};
    }
    if (workers == 0) {
        auto detected = kjit::api::defaults::workers();
        if (!detected) return std::move(detected).error();
        workers = *detected;
    }
    switch (kind) {
        case KJIT_WORKERS_DEFAULT: {
            auto from_env = kjit::api::defaults::worker_kind();
            if (!from_env) return std::move(from_env).error();
            batch.kind = *from_env;
            break;
        }
        case KJIT_WORKERS_THREADS: batch.kind = kjit::batch::batch_compiler::WorkerKind::threads; break;
        case KJIT_WORKERS_PROCESSES: batch.kind = kjit::batch::batch_compiler::WorkerKind::processes; break;
        case KJIT_WORKERS_AUTOMATIC: batch.kind = kjit::batch::batch_compiler::WorkerKind::automatic; break;
        default:
            return kjit::Error{kjit::Errc::invalid_argument,
                               "kjit_compile_batch: options->worker_kind is " + std::to_string(kind) +
                                   "; use KJIT_WORKERS_DEFAULT, KJIT_WORKERS_THREADS, KJIT_WORKERS_PROCESSES or "
                                   "KJIT_WORKERS_AUTOMATIC"};
    }
    batch.workers = workers;
    batch.pch = pch == KJIT_PCH_ON    ? kjit::batch::batch_compiler::Pch::on
                : pch == KJIT_PCH_OFF ? kjit::batch::batch_compiler::Pch::off
                                      : kjit::batch::batch_compiler::Pch::automatic;
    return batch;
}

// The caller's progress callback as the batch compiler calls it. A C++ exception from the
// callback stops here, never crossing the C ABI: it cancels the batch as a non-zero return
// would, the callback is not called again (its state is whatever the throw left), and the batch
// returns KJIT_ERROR_CANCELLED saying what was thrown (kjit.h, kjit_batch_progress_fn).
// Unwinding the batch instead would throw away the result of every item that finished.
struct ProgressBridge {
    bool threw = false;
    size_t at = 0;       // the item reported when it threw
    std::string thrown;  // what it threw, for the message

    kjit::batch::batch_compiler::Progress callback(kjit_batch_progress_fn progress, void *user_data) {
        return [this, progress, user_data](size_t done, size_t total, size_t item,
                                           const kjit::Result<kjit::cache::Found> &r) {
            if (threw) return true;
            const kjit_status status = r ? KJIT_OK : static_cast<kjit_status>(r.error().code);
            try {
                return progress(user_data, done, total, item, status, r ? r->cubin.c_str() : nullptr) != 0;
            } catch (const std::exception &e) {
                threw = true;
                thrown = std::string("a C++ exception (") + e.what() + ")";
            } catch (...) {
                threw = true;
                thrown = "a C++ exception that is not a std::exception";
            }
            at = item;
            return true;
        };
    }
};

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

// How a batch's items ended, for its return status.
struct BatchTally {
    size_t failed = 0;
    size_t not_started = 0;
    size_t first_failed = SIZE_MAX;  // SIZE_MAX: none failed
};

// The caller's result handle for a batch's results (moved out of `done`); counts each failure.
std::unique_ptr<kjit_batch_result> batch_result_of(std::vector<kjit::Result<kjit::cache::Found>> &done,
                                                   BatchTally &tally) {
    auto out = std::make_unique<kjit_batch_result>();
    out->statuses.reserve(done.size());
    out->cubin_paths.reserve(done.size());
    out->kernel_names.reserve(done.size());
    out->errors.reserve(done.size());
    for (size_t i = 0; i < done.size(); ++i) {
        if (done[i]) {
            out->statuses.push_back(KJIT_OK);
            out->cubin_paths.push_back(std::move(done[i]->cubin));
            out->kernel_names.push_back(std::move(done[i]->name));
            out->errors.emplace_back();
            continue;
        }
        const auto status = static_cast<kjit_status>(done[i].error().code);
        out->statuses.push_back(status);
        out->cubin_paths.emplace_back();
        out->kernel_names.emplace_back();
        out->errors.push_back(std::move(done[i]).error().message);
        if (status == KJIT_ERROR_CANCELLED) {
            ++tally.not_started;
            continue;
        }
        count_failure(status);
        ++tally.failed;
        if (tally.first_failed == SIZE_MAX) tally.first_failed = i;
    }
    return out;
}

// The request a compile call (kjit_compile, kjit_compile_named, kjit_compile_and_load,
// kjit_prepare) makes of its arguments, checked; `function` names the call in messages.
kjit::Result<kjit::key::Request> request_of(const char *function, const char *source, const char *keyword,
                                            const kjit_compile_options *options) {
    const std::string f(function);
    if (!source) return invalid(f + ": source is NULL");
    if (!keyword) return invalid(f + ": keyword is NULL");
    kjit::key::Request request;
    request.source = source;
    request.keyword = keyword;
    if (auto s = compile_options::request_from(options, request, f + ": options"); !s) return std::move(s).error();
    return request;
}

// kjit_compile and kjit_compile_named: the request checked and compiled (or found). `digest`:
// the hit memo's, when the caller tried the memo under it (memo_answer), else null.
kjit::Result<kjit::cache::Found> compile_request(const char *function, const char *source, const char *keyword,
                                                 const kjit_compile_options *options,
                                                 const kjit::cache::HitMemo::Digest *digest) {
    auto made = request_of(function, source, keyword, options);
    if (!made) return std::move(made).error();
    kjit::key::Request &request = *made;
    kjit::api::request_record::note(request);
    kjit::cache::Cache &cache = kjit::cache::Cache::instance();
    return digest ? cache.compile_after_recall(std::move(request), *digest) : cache.compile(std::move(request));
}

// A repeat answered by the hit memo straight from the caller's arguments (no Request built, no
// strings copied but the answer's into the caller's buffers): `out(const Found &)` gives the
// call's status. Returns whether the memo answered (then *status is set); when it did not,
// *digest is the memo's digest of the call (for compile_request), or null when the memo is off
// or the call is not one it may answer as it is.
template <typename Out>
bool memo_answer(const char *source, const char *keyword, const kjit_compile_options *options,
                 kjit::cache::HitMemo::Digest &digest_storage, const kjit::cache::HitMemo::Digest *&digest,
                 kjit_status &status, Out &&out) {
    digest = nullptr;
    // While recording, every call takes the full look-up, which records it (a memo hit would not).
    if (kjit::api::request_record::active()) return false;
    if (!kjit::api::memo_digest_of(source, keyword, options, digest_storage)) return false;
    digest = &digest_storage;
    return kjit::cache::Cache::instance().recall_with(digest_storage, keyword,
                                                      [&](const kjit::cache::Found &found) { status = out(found); });
}

// A prepared request answered (kjit_prepared_compile, kjit_prepared_load): `out(const Found &)`
// gives the call's status. A repeat is the memo's recall under the digest taken at
// kjit_prepare (no hashing); otherwise, or while recording, the full look-up of a copy of the
// request (look_up makes its folders absolute in place), remembered under that digest.
template <typename Out>
kjit_status answer_prepared(const kjit_prepared &p, Out &&out) {
    kjit::cache::Cache &cache = kjit::cache::Cache::instance();
    const bool recording = kjit::api::request_record::active();
    kjit_status status = KJIT_OK;
    if (p.memo && !recording &&
        cache.recall_with(p.digest, p.request.keyword, [&](const kjit::cache::Found &found) { status = out(found); })) {
        return status;
    }
    if (recording) kjit::api::request_record::note(p.request);
    auto found = p.memo ? cache.compile_after_recall(p.request, p.digest) : cache.compile(p.request);
    if (!found) return fail(found.error());
    return out(*found);
}

// kjit_compile_named's result: both lengths first, then both strings or neither, so a caller
// retrying with bigger buffers learns everything it needs from one failure.
kjit_status copy_named(const kjit::cache::Found &found, char *cubin_path, size_t cubin_path_size,
                       size_t *cubin_path_len, char *name, size_t name_size, size_t *name_len) {
    if (cubin_path_len) *cubin_path_len = found.cubin.size();
    if (name_len) *name_len = found.name.size();
    const bool path_fits = (!cubin_path && cubin_path_size == 0) || cubin_path_size > found.cubin.size();
    const bool name_fits = (!name && name_size == 0) || name_size > found.name.size();
    if (!path_fits) return copy_out(found.cubin, cubin_path, cubin_path_size, nullptr, "cubin_path");
    if (!name_fits) return copy_out(found.name, name, name_size, nullptr, "name");
    (void)copy_out(found.cubin, cubin_path, cubin_path_size, nullptr, "cubin_path");
    return copy_out(found.name, name, name_size, nullptr, "name");
}

}  // namespace

extern "C" {

KJIT_API const char *kjit_status_string(kjit_status status) {
    // No default: -Wswitch flags a new status without text.
    switch (status) {
        case KJIT_OK: return "ok";
        case KJIT_ERROR_INVALID_ARGUMENT: return "invalid argument";
        case KJIT_ERROR_NOT_FOUND: return "not found";
        case KJIT_ERROR_AMBIGUOUS: return "ambiguous";
        case KJIT_ERROR_BAD_CUBIN: return "bad cubin";
        case KJIT_ERROR_IO: return "I/O error";
        case KJIT_ERROR_COMPILE: return "compile error";
        case KJIT_ERROR_NVRTC: return "NVRTC error";
        case KJIT_ERROR_DRIVER_UNAVAILABLE: return "driver unavailable";
        case KJIT_ERROR_DRIVER: return "driver error";
        case KJIT_ERROR_BUFFER_TOO_SMALL: return "buffer too small";
        case KJIT_ERROR_OUT_OF_MEMORY: return "out of memory";
        case KJIT_ERROR_INTERNAL: return "internal error";
        case KJIT_ERROR_CANCELLED: return "cancelled";
        case KJIT_ERROR_LINK: return "link failed";
        case KJIT_ERROR_NOT_CACHED: return "not cached (compiling refused)";
    }
    return "unknown status";
}

KJIT_API const char *kjit_last_error(void) {
    return t_last_error_fallback ? t_last_error_fallback : t_last_error.c_str();
}

KJIT_API unsigned kjit_version(void) { return KJIT_VERSION_NUMBER; }

KJIT_API const char *kjit_version_string(void) {
#define KJIT_STR2(x) #x
#define KJIT_STR(x) KJIT_STR2(x)
    return KJIT_STR(KJIT_VERSION_MAJOR) "." KJIT_STR(KJIT_VERSION_MINOR) "." KJIT_STR(KJIT_VERSION_PATCH);
#undef KJIT_STR
#undef KJIT_STR2
}

KJIT_API kjit_status kjit_resolve_name(const char *cubin_path, const char *keyword, char *name, size_t name_size,
                                       size_t *name_len) {
    return guarded("kjit_resolve_name", [&]() -> kjit_status {
        if (!cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: cubin_path is NULL");
        if (!*cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: cubin_path is empty");
        if (!keyword) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: keyword is NULL");
        if (!name && name_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: name is NULL but name_size is not 0");
        }
        auto resolved = kjit::resolve::NameResolver::instance().resolve(cubin_path, keyword);
        if (!resolved) return fail(resolved.error());
        return copy_out(*resolved, name, name_size, name_len, "name");
    });
}

KJIT_API kjit_status kjit_compile(const char *source, const char *keyword, const kjit_compile_options *options,
                                  char *cubin_path, size_t cubin_path_size, size_t *cubin_path_len) {
    return guarded("kjit_compile", [&]() -> kjit_status {
        if (!cubin_path && cubin_path_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile: cubin_path is NULL but cubin_path_size is not 0");
        }
        const auto out = [&](const kjit::cache::Found &found) {
            return copy_out(found.cubin, cubin_path, cubin_path_size, cubin_path_len, "cubin_path");
        };
        kjit::cache::HitMemo::Digest storage;
        const kjit::cache::HitMemo::Digest *digest = nullptr;
        kjit_status status = KJIT_OK;
        if (memo_answer(source, keyword, options, storage, digest, status, out)) return status;
        auto found = compile_request("kjit_compile", source, keyword, options, digest);
        if (!found) return fail(found.error());
        return out(*found);
    });
}

KJIT_API kjit_status kjit_compile_named(const char *source, const char *keyword, const kjit_compile_options *options,
                                        char *cubin_path, size_t cubin_path_size, size_t *cubin_path_len, char *name,
                                        size_t name_size, size_t *name_len) {
    return guarded("kjit_compile_named", [&]() -> kjit_status {
        if (!cubin_path && cubin_path_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        "kjit_compile_named: cubin_path is NULL but cubin_path_size is not 0");
        }
        if (!name && name_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile_named: name is NULL but name_size is not 0");
        }
        const auto out = [&](const kjit::cache::Found &found) {
            return copy_named(found, cubin_path, cubin_path_size, cubin_path_len, name, name_size, name_len);
        };
        kjit::cache::HitMemo::Digest storage;
        const kjit::cache::HitMemo::Digest *digest = nullptr;
        kjit_status status = KJIT_OK;
        if (memo_answer(source, keyword, options, storage, digest, status, out)) return status;
        auto found = compile_request("kjit_compile_named", source, keyword, options, digest);
        if (!found) return fail(found.error());
        return out(*found);
    });
}

KJIT_API kjit_status kjit_compile_batch(const kjit_compile_request *const *requests, size_t count,
                                        const kjit_batch_options *options, kjit_batch_result **result) {
    if (result) *result = nullptr;
    return guarded("kjit_compile_batch", [&]() -> kjit_status {
        if (!result) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile_batch: result (the out handle) is NULL");
        if (count > 0 && !requests) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        ("kjit_compile_batch: requests is NULL but count is " + std::to_string(count)).c_str());
        }
        // SIZE_MAX made reserve() throw (KJIT_ERROR_INTERNAL "vector::reserve"), and a count
        // past the caller's array would be read past its end.
        if (count > kjit::batch::batch_compiler::kMaxItems) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        ("kjit_compile_batch: count is " + std::to_string(count) + "; a batch takes at most " +
                         std::to_string(kjit::batch::batch_compiler::kMaxItems) + " requests (split it)")
                            .c_str());
        }
        auto batch = batch_options_from(options);
        if (!batch) return fail(batch.error());
        ProgressBridge bridge;
        if (options && KJIT_FIELD_PRESENT(kjit_batch_options, options, progress) && options->progress) {
            void *user_data = KJIT_FIELD_PRESENT(kjit_batch_options, options, progress_user_data)
                                  ? options->progress_user_data
                                  : nullptr;
            batch->progress = bridge.callback(options->progress, user_data);
        }

        std::vector<kjit::Result<kjit::key::Request>> items;
        items.reserve(count);
        for (size_t i = 0; i < count; ++i) items.push_back(batch_item_from(requests[i], i));
        std::vector<kjit::Result<kjit::cache::Found>> done =
            kjit::batch::batch_compiler::compile(std::move(items), *batch);
        BatchTally tally;
        auto out = batch_result_of(done, tally);
        // The texts are made before the result is handed over: nothing after that can throw.
        if (bridge.threw) {
            // Also when nothing was left to cancel: the caller learns that its callback failed.
            const std::string message =
                "kjit_compile_batch: cancelled: the progress callback threw " + bridge.thrown + " when item " +
                std::to_string(bridge.at) + " was reported, and was not called again; " +
                std::to_string(tally.not_started) + " of " + std::to_string(count) + " items were not started";
            *result = out.release();
            return fail(KJIT_ERROR_CANCELLED, message.c_str());
        }
        if (tally.not_started > 0) {
            // Counted once for the batch, not per item: the caller asked for it.
            const std::string message = "kjit_compile_batch: cancelled by the progress callback; " +
                                        std::to_string(tally.not_started) + " of " + std::to_string(count) +
                                        " items were not started";
            *result = out.release();
            return fail(KJIT_ERROR_CANCELLED, message.c_str());
        }
        if (tally.failed == 0) {
            *result = out.release();
            return KJIT_OK;
        }
        // Each failed item was counted above; the batch's own return repeats the first.
        const kjit_status status = out->statuses[tally.first_failed];
        const std::string message = "kjit_compile_batch: " + std::to_string(tally.failed) + " of " +
                                    std::to_string(count) + " items failed; the first, item " +
                                    std::to_string(tally.first_failed) + ": " + out->errors[tally.first_failed];
        *result = out.release();
        set_last_error(message.c_str());
        return status;
    });
}

KJIT_API size_t kjit_batch_result_count(const kjit_batch_result *result) {
    return result ? result->statuses.size() : 0;
}

KJIT_API kjit_status kjit_batch_result_status(const kjit_batch_result *result, size_t index) {
    if (!result || index >= result->statuses.size()) return KJIT_ERROR_INVALID_ARGUMENT;
    return result->statuses[index];
}

KJIT_API const char *kjit_batch_result_cubin_path(const kjit_batch_result *result, size_t index) {
    if (!result || index >= result->statuses.size() || result->statuses[index] != KJIT_OK) return nullptr;
    return result->cubin_paths[index].c_str();
}

KJIT_API const char *kjit_batch_result_kernel_name(const kjit_batch_result *result, size_t index) {
    if (!result || index >= result->statuses.size() || result->statuses[index] != KJIT_OK) return nullptr;
    return result->kernel_names[index].c_str();
}

KJIT_API const char *kjit_batch_result_error(const kjit_batch_result *result, size_t index) {
    if (!result || index >= result->statuses.size()) return nullptr;
    return result->errors[index].c_str();
}

KJIT_API void kjit_batch_result_release(kjit_batch_result *result) { delete result; }

KJIT_API kjit_status kjit_load_cached(const char *cubin_path, const char *keyword, kjit_kernel **kernel) {
    if (kernel) *kernel = nullptr;
    return guarded("kjit_load_cached", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: kernel (the out handle) is NULL");
        if (!cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: cubin_path is NULL");
        if (!*cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: cubin_path is empty");
        if (!keyword) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: keyword is NULL");
        auto loaded = kjit::load::KernelLoader::instance().load(cubin_path, keyword);
        if (!loaded) return fail(loaded.error());
        *kernel = new kjit_kernel(std::move(*loaded));
        api_counters().loads.fetch_add(1, std::memory_order_relaxed);
        return KJIT_OK;
    });
}

KJIT_API kjit_status kjit_compile_and_load(const char *source, const char *keyword, const kjit_compile_options *options,
                                           kjit_kernel **kernel) {
    if (kernel) *kernel = nullptr;
    return guarded("kjit_compile_and_load", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile_and_load: kernel (the out handle) is NULL");
        auto found = compile_request("kjit_compile_and_load", source, keyword, options, nullptr);
        if (!found) return fail(found.error());
        auto loaded = kjit::load::KernelLoader::instance().load(found->cubin, keyword);
        if (!loaded) return fail(loaded.error());
        *kernel = new kjit_kernel(std::move(*loaded));
        api_counters().loads.fetch_add(1, std::memory_order_relaxed);
        return KJIT_OK;
    });
}

KJIT_API kjit_status kjit_prepare(const char *source, const char *keyword, const kjit_compile_options *options,
                                  kjit_prepared **prepared) {
    if (prepared) *prepared = nullptr;
    return guarded("kjit_prepare", [&]() -> kjit_status {
        if (!prepared) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_prepare: prepared (the out handle) is NULL");
        auto request = request_of("kjit_prepare", source, keyword, options);
        if (!request) return fail(request.error());
        auto p = std::make_unique<kjit_prepared>();
        p->request = std::move(*request);
        // HitMemo::digest of the settled request: what kjit_compile's digest of the same
        // arguments is (tests/api/compile_options_test.cpp holds the two to each other).
        p->memo = kjit::cache::HitMemo::enabled();
        if (p->memo) p->digest = kjit::cache::HitMemo::digest(p->request);
        *prepared = p.release();
        return KJIT_OK;
    });
}

KJIT_API kjit_status kjit_prepared_compile(const kjit_prepared *prepared, char *cubin_path, size_t cubin_path_size,
                                           size_t *cubin_path_len, char *name, size_t name_size, size_t *name_len) {
    return guarded("kjit_prepared_compile", [&]() -> kjit_status {
        if (!prepared) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_prepared_compile: prepared is NULL");
        if (!cubin_path && cubin_path_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        "kjit_prepared_compile: cubin_path is NULL but cubin_path_size is not 0");
        }
        if (!name && name_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_prepared_compile: name is NULL but name_size is not 0");
        }
        return answer_prepared(*prepared, [&](const kjit::cache::Found &found) {
            return copy_named(found, cubin_path, cubin_path_size, cubin_path_len, name, name_size, name_len);
        });
    });
}

KJIT_API kjit_status kjit_prepared_load(const kjit_prepared *prepared, kjit_kernel **kernel) {
    if (kernel) *kernel = nullptr;
    return guarded("kjit_prepared_load", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_prepared_load: kernel (the out handle) is NULL");
        if (!prepared) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_prepared_load: prepared is NULL");
        std::string cubin;  // copied out of the memo's answer: the load runs outside its lock
        const kjit_status found = answer_prepared(*prepared, [&](const kjit::cache::Found &f) {
            cubin = f.cubin;
            return KJIT_OK;
        });
        if (found != KJIT_OK) return found;
        auto loaded = kjit::load::KernelLoader::instance().load(cubin, prepared->request.keyword);
        if (!loaded) return fail(loaded.error());
        *kernel = new kjit_kernel(std::move(*loaded));
        api_counters().loads.fetch_add(1, std::memory_order_relaxed);
        return KJIT_OK;
    });
}

KJIT_API void kjit_prepared_release(kjit_prepared *prepared) { delete prepared; }

KJIT_API const char *kjit_kernel_name(const kjit_kernel *kernel) {
    return kernel ? kernel->handle.name().c_str() : nullptr;
}

KJIT_API const char *kjit_kernel_cubin_path(const kjit_kernel *kernel) {
    return kernel ? kernel->handle.cubin_path().c_str() : nullptr;
}

KJIT_API void *kjit_kernel_cukernel(const kjit_kernel *kernel) {
    return kernel ? static_cast<void *>(kernel->handle.kernel()) : nullptr;
}

KJIT_API void *kjit_kernel_culibrary(const kjit_kernel *kernel) {
    return kernel ? static_cast<void *>(kernel->handle.library()) : nullptr;
}

KJIT_API kjit_status kjit_kernel_cufunction(const kjit_kernel *kernel, void **function) {
    if (function) *function = nullptr;
    return guarded("kjit_kernel_cufunction", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_kernel_cufunction: kernel is NULL");
        if (!function) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_kernel_cufunction: function is NULL");
        auto f = kernel->handle.function();
        if (!f) return fail(f.error());
        *function = static_cast<void *>(*f);
        return KJIT_OK;
    });
}

KJIT_API void kjit_kernel_release(kjit_kernel *kernel) { delete kernel; }

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
        const auto &eviction = kjit::store::cache_maintenance::counters();
        s.eviction_runs = eviction.eviction_runs.load(relaxed);
        s.evicted_entries = eviction.evicted_entries.load(relaxed);
        s.evicted_bytes = eviction.evicted_bytes.load(relaxed);
        for (std::size_t i = 0; i < KJIT_STATS_STATUS_SLOTS; ++i) s.errors[i] = api_counters().errors[i].load(relaxed);
        s.swept_temp_folders = eviction.swept_temp_folders.load(relaxed);
        const auto &remote = kjit::remote::counters();
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

KJIT_API kjit_status kjit_compile_options_init(kjit_compile_options *options, size_t struct_size) {
    return guarded("kjit_compile_options_init", [&]() -> kjit_status {
        return init_struct(options, struct_size, kjit_compile_options KJIT_COMPILE_OPTIONS_INIT,
                           "kjit_compile_options_init", "kjit_compile_options");
    });
}

KJIT_API kjit_status kjit_compile_request_init(kjit_compile_request *request, size_t struct_size) {
    return guarded("kjit_compile_request_init", [&]() -> kjit_status {
        return init_struct(request, struct_size, kjit_compile_request KJIT_COMPILE_REQUEST_INIT,
                           "kjit_compile_request_init", "kjit_compile_request");
    });
}

KJIT_API kjit_status kjit_batch_options_init(kjit_batch_options *options, size_t struct_size) {
    return guarded("kjit_batch_options_init", [&]() -> kjit_status {
        return init_struct(options, struct_size, kjit_batch_options KJIT_BATCH_OPTIONS_INIT, "kjit_batch_options_init",
                           "kjit_batch_options");
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
        auto tier = kjit::remote::Tier::for_spec(spec, origin);
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
        if ((flags & KJIT_REMOTE_CHECK_NO_PASSWORD) && kjit::remote::names_a_password(spec)) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        (std::string(origin) +
                         " names a server with a password, which every user of this machine can read in a "
                         "command line (/proc/PID/cmdline); give the setting in $KJIT_REMOTE_STORAGE instead, or "
                         "the password in a file named by password-file=PATH (readable by its owner only)")
                            .c_str());
        }
        // As a compile would take it: parsed, and refused by a libkjit built without the tier.
        auto tier = kjit::remote::Tier::for_spec(spec, origin);
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
        auto found = kjit::store::cache_maintenance::summarize(*dir);
        if (!found) return fail(found.error());
        auto limit = kjit::api::defaults::max_cache_bytes();
        if (!limit) return fail(limit.error());
        const kjit::store::cache_maintenance::Summary &from = *found;
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
            if (!prune_options) return kjit::Result<kjit::store::cache_maintenance::PruneReport>(prune_options.error());
            return kjit::store::cache_maintenance::prune(dir, *prune_options);
        });
    });
}

KJIT_API kjit_status kjit_cache_clear(const char *cache_dir, kjit_prune_report *report) {
    return guarded("kjit_cache_clear", [&]() -> kjit_status {
        return remove_and_report("kjit_cache_clear", cache_dir, report,
                                 [](const std::string &dir) { return kjit::store::cache_maintenance::clear(dir); });
    });
}

KJIT_API const char *kjit_cache_problem_string(int problem) {
    if (problem < KJIT_CACHE_MISPLACED || problem > KJIT_CACHE_FOREIGN) return "unknown";
    return kjit::store::cache_maintenance::to_string(static_cast<kjit::store::cache_maintenance::Damage>(problem));
}

KJIT_API kjit_status kjit_cache_verify(const char *cache_dir, int fix, kjit_verify_report **report) {
    if (report) *report = nullptr;
    return guarded("kjit_cache_verify", [&]() -> kjit_status {
        if (!report) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_cache_verify: report (the out handle) is NULL");
        auto dir = cache_dir_from(cache_dir);
        if (!dir) return fail(dir.error());
        auto found = kjit::store::cache_maintenance::verify(*dir, fix != 0);
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
    auto copied = kjit::store::cache_maintenance::copy_entries(from, to, arch ? arch : "");
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

KJIT_API kjit_status kjit_record_start(const char *path) {
    return guarded("kjit_record_start", [&]() -> kjit_status {
        if (!path || !*path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_record_start: path is NULL or empty");
        if (auto st = kjit::api::request_record::start(path); !st) return fail(st.error());
        return KJIT_OK;
    });
}

KJIT_API void kjit_record_stop(void) { kjit::api::request_record::stop(); }

}  // extern "C"
