// What the three files of the C ABI share (c_api_kjit.cpp for kjit.h, c_api_batch.cpp for
// kjit_batch.h, c_api_cache.cpp for kjit_cache.h): a failure returned as its status with the
// calling thread's error text (kjit_last_error) and counted (kjit_stats.errors), every exception
// caught before it crosses the boundary, strings copied out under kjit.h's buffer convention,
// the option structs' init functions, and the counters only the C ABI sees.
#pragma once

#include "api/c_struct.hpp"
#include "kjit/kjit.h"
#include "util/status.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace kjit::api::c_api_support {

// Counters only the C ABI sees: successful loads and every failure returned, by status.
struct ApiCounters {
    std::atomic<std::uint64_t> loads{0};
    std::array<std::atomic<std::uint64_t>, KJIT_STATS_STATUS_SLOTS> errors{};
};
// The process's (made on first use, never freed: usable during exit). Thread safe.
ApiCounters &api_counters();

// Counts a failure of `status` in kjit_stats.errors (KJIT_OK and statuses past its slots: not).
void count_failure(kjit_status status) noexcept;

// Sets the calling thread's kjit_last_error() text to a copy of `message`; when storing it runs
// out of memory, a fixed text says so instead.
void set_last_error(const char *message) noexcept;

// The calling thread's kjit_last_error() text: valid until its next call into libkjit.
const char *last_error() noexcept;

// A failure: counted, its text set, `status` returned.
kjit_status fail(kjit_status status, const char *message) noexcept;
// The same for an error of the parts below (Errc and kjit_status have the same values).
kjit_status fail(const Error &e) noexcept;

// Runs `body` (which returns a kjit_status), mapping any escaping exception to a status:
// KJIT_ERROR_OUT_OF_MEMORY for std::bad_alloc, KJIT_ERROR_INTERNAL for anything else, its text
// naming `function`.
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

// Copies `value` out under the buffer convention of kjit.h: `*len` (if not null) set to its
// length; a NULL `buf` with `size` 0 asks for the length only; a buffer too small for the string
// and its NUL is KJIT_ERROR_BUFFER_TOO_SMALL, naming `what` and the size needed.
kjit_status copy_out(const std::string &value, char *buf, size_t size, size_t *len, const char *what);

// Fills the first `struct_size` bytes of `*out` with `defaults` (an *_INIT macro's value), for
// the *_init functions: a caller built against an older, smaller struct gets nothing past it.
// `function` and `type` name them in messages (a NULL struct, a size out of range).
template <typename T>
kjit_status init_struct(T *out, size_t struct_size, T defaults, const char *function, const char *type) {
    if (!out) return fail(KJIT_ERROR_INVALID_ARGUMENT, (std::string(function) + ": the struct is NULL").c_str());
    defaults.struct_size = struct_size;
    if (auto st = c_struct::check_size(defaults, std::string(function) + ": the struct", type); !st)
        return fail(st.error());
    std::memcpy(static_cast<void *>(out), &defaults, struct_size);
    return KJIT_OK;
}

}  // namespace kjit::api::c_api_support
