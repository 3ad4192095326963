// The C ABI of kjit_batch.h: many compiles in one call (kjit_compile_batch), their per-item
// results, and the batch structs' init functions.
#include "kjit/kjit_batch.h"

#include "api/c_api_support.hpp"
#include "api/c_struct.hpp"
#include "api/compile_options.hpp"
#include "api/defaults.hpp"
#include "api/request_record.hpp"
#include "batch/compiler.hpp"
#include "cache/cache.hpp"
#include "key/cache_key.hpp"
#include "util/status.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// A batch's per-item results, immutable once returned.
struct kjit_batch_result {
    std::vector<kjit_status> statuses;
    std::vector<std::string> cubin_paths;   // "" for failed items
    std::vector<std::string> kernel_names;  // "" for failed items
    std::vector<std::string> errors;        // "" for items that succeeded
};

namespace {

using kjit::api::c_struct::invalid;
namespace c_struct = kjit::api::c_struct;
namespace compile_options = kjit::api::compile_options;
using namespace kjit::api::c_api_support;  // what the C ABI's files share

// One batch item's C request as a cache request, or why it is not one.
kjit::Result<kjit::key::Request> batch_item_from(const kjit_compile_request *item, size_t index) {
    const std::string where = "kjit_compile_batch: requests[" + std::to_string(index) + "]";
    if (!item) return invalid(where + " is NULL");
    // Every field of the first version is needed: a request has no defaults.
    KJIT_TRY(c_struct::check_size(*item, where, "kjit_compile_request",
                                  offsetof(kjit_compile_request, options) + sizeof(item->options)));
    if (!item->source) return invalid(where + "->source is NULL");
    if (!item->keyword) return invalid(where + "->keyword is NULL");
    kjit::key::Request r;
    r.source = item->source;
    r.keyword = item->keyword;
    KJIT_TRY(compile_options::request_from(item->options, r, where + "->options"));
    kjit::api::request_record::note(r);
    return r;
}
// A batch's options from the caller's (NULL: the defaults), with the worker count resolved.
// Errors: invalid_argument (struct size, pch), or the defaults' ($KJIT_JOBS).
kjit::Result<kjit::batch::compiler::Options> batch_options_from(const kjit_batch_options *options) {
    kjit::batch::compiler::Options batch;
    unsigned workers = 0;
    int pch = KJIT_PCH_DEFAULT;
    int kind = KJIT_WORKERS_DEFAULT;
    if (options) {
        KJIT_TRY(c_struct::check_size(*options, "kjit_compile_batch: options", "kjit_batch_options"));
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
        KJIT_TRY_ASSIGN(auto detected, kjit::api::defaults::workers());
        workers = detected;
    }
    switch (kind) {
        case KJIT_WORKERS_DEFAULT: {
            KJIT_TRY_ASSIGN(auto from_env, kjit::api::defaults::worker_kind());
            batch.kind = from_env;
            break;
        }
        case KJIT_WORKERS_THREADS: batch.kind = kjit::batch::compiler::WorkerKind::threads; break;
        case KJIT_WORKERS_PROCESSES: batch.kind = kjit::batch::compiler::WorkerKind::processes; break;
        case KJIT_WORKERS_AUTOMATIC: batch.kind = kjit::batch::compiler::WorkerKind::automatic; break;
        default:
            return kjit::Error{kjit::Errc::invalid_argument,
                               "kjit_compile_batch: options->worker_kind is " + std::to_string(kind) +
                                   "; use KJIT_WORKERS_DEFAULT, KJIT_WORKERS_THREADS, KJIT_WORKERS_PROCESSES or "
                                   "KJIT_WORKERS_AUTOMATIC"};
    }
    batch.workers = workers;
    batch.pch = pch == KJIT_PCH_ON    ? kjit::batch::compiler::Pch::on
                : pch == KJIT_PCH_OFF ? kjit::batch::compiler::Pch::off
                                      : kjit::batch::compiler::Pch::automatic;
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

    kjit::batch::compiler::Progress callback(kjit_batch_progress_fn progress, void *user_data) {
        return [this, progress, user_data](size_t done, size_t total, size_t item,
                                           const kjit::Result<kjit::storage::Found> &r) {
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
// How a batch's items ended, for its return status.
struct BatchTally {
    size_t failed = 0;
    size_t not_started = 0;
    size_t first_failed = SIZE_MAX;  // SIZE_MAX: none failed
};

// The caller's result handle for a batch's results (moved out of `done`); counts each failure.
std::unique_ptr<kjit_batch_result> batch_result_of(std::vector<kjit::Result<kjit::storage::Found>> &done,
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
}  // namespace

extern "C" {

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
        if (count > kjit::batch::compiler::kMaxItems) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        ("kjit_compile_batch: count is " + std::to_string(count) + "; a batch takes at most " +
                         std::to_string(kjit::batch::compiler::kMaxItems) + " requests (split it)")
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
        std::vector<kjit::Result<kjit::storage::Found>> done = kjit::batch::compiler::compile(std::move(items), *batch);
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
}  // extern "C"
