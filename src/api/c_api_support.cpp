#include "api/c_api_support.hpp"

#include "util/fork_guard.hpp"

namespace kjit::api::c_api_support {

namespace {

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

std::atomic<ApiCounters *> api_counters_slot{nullptr};

// The calling thread's detail text for its last failure. A fixed-size fallback keeps
// kjit_last_error() meaningful even when storing the text itself runs out of memory.
thread_local std::string t_last_error;
thread_local const char *t_last_error_fallback = nullptr;

}  // namespace

ApiCounters &api_counters() {
    // Leaked: usable during exit. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(api_counters_slot, [] { return new ApiCounters(); });
}

void count_failure(kjit_status status) noexcept {
    const auto slot = static_cast<std::size_t>(status);
    if (slot > 0 && slot < KJIT_STATS_STATUS_SLOTS) api_counters().errors[slot].fetch_add(1, std::memory_order_relaxed);
}

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

kjit_status fail(const Error &e) noexcept { return fail(static_cast<kjit_status>(e.code), e.message.c_str()); }

const char *last_error() noexcept { return t_last_error_fallback ? t_last_error_fallback : t_last_error.c_str(); }

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

}  // namespace kjit::api::c_api_support
