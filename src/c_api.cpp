// The C ABI: argument checks, status codes, the thread-local error text. The only file that
// knows the public C types; no C++ type or exception crosses this boundary.
#include "kjit/kjit.h"

#include "name_resolver.hpp"
#include "status.hpp"

#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace {

using kjit::Errc;

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
#undef KJIT_SAME_VALUE

// The calling thread's detail text for its last failure. A fixed-size fallback keeps
// kjit_last_error() meaningful even when storing the text itself runs out of memory.
thread_local std::string t_last_error;
thread_local const char *t_last_error_fallback = nullptr;

kjit_status fail(kjit_status status, const char *message) noexcept {
    try {
        t_last_error.assign(message);
        t_last_error_fallback = nullptr;
    } catch (...) {
        t_last_error_fallback = "out of memory while recording the error text";
    }
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
                     std::to_string(value.size() + 1) + " are needed (name and NUL)")
                        .c_str());
    }
    std::memcpy(buf, value.data(), value.size());
    buf[value.size()] = '\0';
    return KJIT_OK;
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

KJIT_API kjit_status kjit_resolve_name(const char *cubin_path, const char *keyword, char *name,
                                       size_t name_size, size_t *name_len) {
    return guarded("kjit_resolve_name", [&]() -> kjit_status {
        if (!cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: cubin_path is NULL");
        if (!*cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: cubin_path is empty");
        if (!keyword) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: keyword is NULL");
        if (!name && name_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_resolve_name: name is NULL but name_size is not 0");
        }
        auto resolved = kjit::NameResolver::instance().resolve(cubin_path, keyword);
        if (!resolved) return fail(resolved.error());
        return copy_out(*resolved, name, name_size, name_len, "name");
    });
}

}  // extern "C"
