// The C ABI: argument checks, status codes, the thread-local error text. The only file that
// knows the public C types; no C++ type or exception crosses this boundary.
#include "kjit/kjit.h"

#include "cache.hpp"
#include "cache_maintenance.hpp"
#include "kernel_loader.hpp"
#include "name_resolver.hpp"
#include "status.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

// The C handle: a loader reference plus nothing else (the accessors read through it).
struct kjit_kernel {
    explicit kjit_kernel(kjit::KernelHandle h) : handle(std::move(h)) {}
    kjit::KernelHandle handle;
};

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

static_assert(static_cast<int>(kjit::NameResolver::Rejection::count) <= KJIT_STATS_REJECTION_SLOTS,
              "kjit_stats.sidecar_rejections is too small");
static_assert(static_cast<int>(kjit::NameResolver::Rejection::distrusted) == KJIT_SIDECAR_DISTRUSTED &&
                  static_cast<int>(kjit::NameResolver::Rejection::unreadable) == KJIT_SIDECAR_UNREADABLE &&
                  static_cast<int>(kjit::NameResolver::Rejection::stale) == KJIT_SIDECAR_STALE,
              "NameResolver::Rejection and kjit_sidecar_rejection differ");
static_assert(KJIT_ERROR_INTERNAL < KJIT_STATS_STATUS_SLOTS, "kjit_stats.errors is too small");

// Counters only the C ABI sees: successful loads and every failure returned, by status.
struct ApiCounters {
    std::atomic<std::uint64_t> loads{0};
    std::array<std::atomic<std::uint64_t>, KJIT_STATS_STATUS_SLOTS> errors{};
};
ApiCounters &api_counters() {
    static ApiCounters *const c = new ApiCounters();  // leaked: usable during exit
    return *c;
}

// The calling thread's detail text for its last failure. A fixed-size fallback keeps
// kjit_last_error() meaningful even when storing the text itself runs out of memory.
thread_local std::string t_last_error;
thread_local const char *t_last_error_fallback = nullptr;

kjit_status fail(kjit_status status, const char *message) noexcept {
    const auto slot = static_cast<std::size_t>(status);
    if (slot > 0 && slot < KJIT_STATS_STATUS_SLOTS) api_counters().errors[slot].fetch_add(1, std::memory_order_relaxed);
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
                     std::to_string(value.size() + 1) + " are needed (the string and its NUL)")
                        .c_str());
    }
    std::memcpy(buf, value.data(), value.size());
    buf[value.size()] = '\0';
    return KJIT_OK;
}

// Whether a caller's options struct (of its own struct_size) holds `field`.
#define KJIT_OPTION_PRESENT(options, field) \
    ((options)->struct_size >= offsetof(kjit_compile_options, field) + sizeof((options)->field))

// A NUL-terminated string array from the C side, checked.
kjit_status take_strings(const char *const *items, size_t count, const char *what, std::vector<std::string> &out) {
    if (count > 0 && !items) {
        return fail(KJIT_ERROR_INVALID_ARGUMENT,
                    ("kjit_compile: options." + std::string(what) + " is NULL but its count is " + std::to_string(count)).c_str());
    }
    for (size_t i = 0; i < count; ++i) {
        if (!items[i]) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        ("kjit_compile: options." + std::string(what) + "[" + std::to_string(i) + "] is NULL").c_str());
        }
        out.emplace_back(items[i]);
    }
    return KJIT_OK;
}

// The C options (any struct_size from the first release on) as a cache request.
kjit_status request_from(const kjit_compile_options *options, kjit::cache::Request &r) {
    const char *cache_dir = nullptr;
    const char *arch = nullptr;
    std::uint64_t max_cache_size = 0;
    if (options) {
        if (options->struct_size < sizeof(size_t) || options->struct_size > sizeof(kjit_compile_options)) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        ("kjit_compile: options->struct_size is " + std::to_string(options->struct_size) +
                         "; set it to sizeof(kjit_compile_options) (" + std::to_string(sizeof(kjit_compile_options)) +
                         " in this libkjit, or smaller from an older header)")
                            .c_str());
        }
        if (KJIT_OPTION_PRESENT(options, cache_dir)) cache_dir = options->cache_dir;
        if (KJIT_OPTION_PRESENT(options, arch)) arch = options->arch;
        if (KJIT_OPTION_PRESENT(options, nvrtc_option_count)) {
            if (kjit_status s = take_strings(options->nvrtc_options, options->nvrtc_option_count, "nvrtc_options",
                                             r.nvrtc_options)) {
                return s;
            }
        }
        if (KJIT_OPTION_PRESENT(options, include_path_count)) {
            if (kjit_status s = take_strings(options->include_paths, options->include_path_count, "include_paths",
                                             r.include_paths)) {
                return s;
            }
        }
        if (KJIT_OPTION_PRESENT(options, header_count)) {
            if (options->header_count > 0 && !options->headers) {
                return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile: options.headers is NULL but header_count is not 0");
            }
            for (size_t i = 0; i < options->header_count; ++i) {
                const kjit_header &h = options->headers[i];
                if (!h.name || !h.source) {
                    return fail(KJIT_ERROR_INVALID_ARGUMENT,
                                ("kjit_compile: options.headers[" + std::to_string(i) + "] has a NULL name or source").c_str());
                }
                r.headers.emplace_back(h.name, h.source);
            }
        }
        if (KJIT_OPTION_PRESENT(options, name_expression) && options->name_expression) {
            r.name_expression = options->name_expression;
        }
        if (KJIT_OPTION_PRESENT(options, max_cache_size)) max_cache_size = options->max_cache_size;
    }
    if (max_cache_size == UINT64_MAX) {
        // no limit, whatever the environment says
    } else if (max_cache_size != 0) {
        r.max_cache_bytes = max_cache_size;
    } else {
        auto from_env = kjit::cache_maintenance::max_size_from_env();
        if (!from_env) return fail(from_env.error());
        r.max_cache_bytes = *from_env;
    }
    if (cache_dir && *cache_dir) {
        r.cache_dir = cache_dir;
    } else {
        auto dir = kjit::cache::default_cache_dir();
        if (!dir) return fail(dir.error());
        r.cache_dir = *dir;
    }
    if (arch && *arch) {
        r.arch = arch;
    } else {
        auto detected = kjit::cache::default_arch();
        if (!detected) return fail(detected.error());
        r.arch = *detected;
    }
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

KJIT_API kjit_status kjit_compile(const char *source, const char *keyword, const kjit_compile_options *options,
                                  char *cubin_path, size_t cubin_path_size, size_t *cubin_path_len) {
    return guarded("kjit_compile", [&]() -> kjit_status {
        if (!source) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile: source is NULL");
        if (!keyword) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile: keyword is NULL");
        if (!cubin_path && cubin_path_size != 0) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile: cubin_path is NULL but cubin_path_size is not 0");
        }
        kjit::cache::Request request;
        request.source = source;
        request.keyword = keyword;
        if (kjit_status s = request_from(options, request)) return s;
        auto path = kjit::cache::Cache::instance().compile(std::move(request));
        if (!path) return fail(path.error());
        return copy_out(*path, cubin_path, cubin_path_size, cubin_path_len, "cubin_path");
    });
}

KJIT_API kjit_status kjit_load_cached(const char *cubin_path, const char *keyword, kjit_kernel **kernel) {
    if (kernel) *kernel = nullptr;
    return guarded("kjit_load_cached", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: kernel (the out handle) is NULL");
        if (!cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: cubin_path is NULL");
        if (!*cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: cubin_path is empty");
        if (!keyword) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: keyword is NULL");
        auto loaded = kjit::KernelLoader::instance().load(cubin_path, keyword);
        if (!loaded) return fail(loaded.error());
        *kernel = new kjit_kernel(std::move(*loaded));
        api_counters().loads.fetch_add(1, std::memory_order_relaxed);
        return KJIT_OK;
    });
}

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
        const size_t size = stats->struct_size;
        if (size < sizeof(size_t) || size > sizeof(kjit_stats)) {
            return fail(KJIT_ERROR_INVALID_ARGUMENT,
                        ("kjit_get_stats: stats->struct_size is " + std::to_string(size) +
                         "; set it to sizeof(kjit_stats) (" + std::to_string(sizeof(kjit_stats)) +
                         " in this libkjit, or smaller from an older header)")
                            .c_str());
        }
        constexpr auto relaxed = std::memory_order_relaxed;
        kjit_stats s{};
        s.struct_size = size;
        const auto &cache = kjit::cache::Cache::instance().counters();
        s.compile_hits = cache.hits.load(relaxed);
        s.compile_misses = cache.misses.load(relaxed);
        s.compile_shared_waits = cache.shared_waits.load(relaxed);
        s.nvrtc_compiles = cache.nvrtc_runs.load(relaxed);
        s.nvrtc_nanoseconds = cache.nvrtc_nanoseconds.load(relaxed);
        s.entries_published = cache.published_entries.load(relaxed);
        s.entries_rebuilt = cache.rebuilt_entries.load(relaxed);
        const auto &resolver = kjit::NameResolver::instance().counters();
        s.sidecar_hits = resolver.sidecar_hits.load(relaxed) + resolver.racy_sidecar_hits.load(relaxed);
        s.sidecar_content_checks = resolver.racy_verifications.load(relaxed);
        s.memo_hits = resolver.memo_hits.load(relaxed);
        s.sidecar_missing = resolver.sidecar_missing.load(relaxed);
        for (std::size_t i = 0; i < resolver.rejections.size(); ++i) s.sidecar_rejections[i] = resolver.rejections[i].load(relaxed);
        s.scans = resolver.scans.load(relaxed);
        s.sidecar_writes = resolver.sidecar_writes.load(relaxed);
        s.sidecar_write_failures = resolver.sidecar_write_failures.load(relaxed);
        const auto &loader = kjit::KernelLoader::instance().counters();
        s.loads = api_counters().loads.load(relaxed);
        s.load_reuses = loader.reuse_hits.load(relaxed);
        s.driver_loads = loader.library_loads.load(relaxed);
        s.load_self_heals = loader.self_heals.load(relaxed);
        const auto &eviction = kjit::cache_maintenance::counters();
        s.eviction_runs = eviction.eviction_runs.load(relaxed);
        s.evicted_entries = eviction.evicted_entries.load(relaxed);
        s.evicted_bytes = eviction.evicted_bytes.load(relaxed);
        for (std::size_t i = 0; i < KJIT_STATS_STATUS_SLOTS; ++i) s.errors[i] = api_counters().errors[i].load(relaxed);
        s.swept_temp_folders = eviction.swept_transit_folders.load(relaxed);
        std::memcpy(static_cast<void *>(stats), &s, size);
        return KJIT_OK;
    });
}

}  // extern "C"
