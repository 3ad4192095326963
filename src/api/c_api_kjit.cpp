// The C ABI of kjit.h: compile, resolve, load, prepared requests, kernels, the request record.
// Argument checks, then the parts below; every failure a status with its text
// (c_api_support.hpp), every exception caught there.
#include "kjit/kjit.h"

#include "api/c_api_support.hpp"
#include "api/c_struct.hpp"
#include "api/compile_options.hpp"
#include "api/memo_digest.hpp"
#include "api/request_record.hpp"
#include "cache/cache.hpp"
#include "cache/hit_memo.hpp"
#include "key/cache_key.hpp"
#include "load/kernel_loader.hpp"
#include "resolve/name_resolver.hpp"
#include "util/status.hpp"

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

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

namespace {

using kjit::api::c_struct::invalid;
namespace compile_options = kjit::api::compile_options;
using namespace kjit::api::c_api_support;  // what the C ABI's files share

// The request a compile call (kjit_compile, kjit_compile_named, kjit_compile_and_load,
// kjit_prepare) makes of its arguments, checked, into `request` (a new one: made where it is
// used, as a Request is many fields to move); `function` names the call in messages.
kjit::Status request_into(const char *function, const char *source, const char *keyword,
                          const kjit_compile_options *options, kjit::key::Request &request) {
    if (!source) return invalid(std::string(function) + ": source is NULL");
    if (!keyword) return invalid(std::string(function) + ": keyword is NULL");
    request.source = source;
    request.keyword = keyword;
    return compile_options::request_from(options, request, std::string(function) + ": options");
}

// kjit_compile and kjit_compile_named: the request checked and compiled (or found). `digest`:
// the hit memo's, when the caller tried the memo under it (answer_call), else null.
kjit::Result<kjit::storage::Found> compile_request(const char *function, const char *source, const char *keyword,
                                                   const kjit_compile_options *options,
                                                   const kjit::cache::HitMemo::Digest *digest) {
    kjit::key::Request request;
    KJIT_TRY(request_into(function, source, keyword, options, request));
    kjit::api::request_record::note(request);
    kjit::cache::Cache &cache = kjit::cache::Cache::instance();
    return digest ? cache.compile_after_recall(std::move(request), *digest) : cache.compile(std::move(request));
}

// kjit_compile and kjit_compile_named answered: a repeat by the hit memo straight from the
// caller's arguments (no Request built, no strings copied but the answer's into the caller's
// buffers), else the request checked and compiled (or found), remembered under the memo's digest
// of the call when it has one. `out(const Found &)` gives the call's status.
template <typename Out>
kjit_status answer_call(const char *function, const char *source, const char *keyword,
                        const kjit_compile_options *options, Out &&out) {
    kjit::cache::HitMemo::Digest storage;
    const kjit::cache::HitMemo::Digest *digest = nullptr;
    // While recording, every call takes the full look-up, which records it (a memo hit would not).
    // The memo's digest is null when the memo is off or the call is not one it may answer as it is.
    if (!kjit::api::request_record::active() && kjit::api::memo_digest_of(source, keyword, options, storage)) {
        digest = &storage;
        kjit_status status = KJIT_OK;
        if (kjit::cache::Cache::instance().recall_with(storage, keyword, [&](const kjit::storage::Found &found) {
                status = out(found);
            })) {
            return status;
        }
    }
    auto found = compile_request(function, source, keyword, options, digest);
    if (!found) return fail(found.error());
    return out(*found);
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
    if (p.memo && !recording && cache.recall_with(p.digest, p.request.keyword, [&](const kjit::storage::Found &found) {
            status = out(found);
        })) {
        return status;
    }
    if (recording) kjit::api::request_record::note(p.request);
    auto found =
        p.memo ? cache.compile_after_recall(kjit::key::Request(p.request), p.digest) : cache.compile(p.request);
    if (!found) return fail(found.error());
    return out(*found);
}

// kjit_compile_named's result: both lengths first, then both strings or neither, so a caller
// retrying with bigger buffers learns everything it needs from one failure.
kjit_status copy_named(const kjit::storage::Found &found, char *cubin_path, size_t cubin_path_size,
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

// Loads the kernel `keyword` names in `cubin` into a new handle for the caller (`*kernel`), counted
// in kjit_stats.loads: how kjit_load_cached, kjit_compile_and_load and kjit_prepared_load end.
kjit_status load_into(const std::string &cubin, std::string_view keyword, kjit_kernel **kernel) {
    auto loaded = kjit::load::KernelLoader::instance().load(cubin, keyword);
    if (!loaded) return fail(loaded.error());
    *kernel = new kjit_kernel(std::move(*loaded));
    api_counters().loads.fetch_add(1, std::memory_order_relaxed);
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
        case KJIT_ERROR_CANCELLED: return "cancelled";
        case KJIT_ERROR_LINK: return "link failed";
        case KJIT_ERROR_NOT_CACHED: return "not cached (compiling refused)";
    }
    return "unknown status";
}

KJIT_API const char *kjit_last_error(void) { return kjit::api::c_api_support::last_error(); }

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
        const auto out = [&](const kjit::storage::Found &found) {
            return copy_out(found.cubin, cubin_path, cubin_path_size, cubin_path_len, "cubin_path");
        };
        return answer_call("kjit_compile", source, keyword, options, out);
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
        const auto out = [&](const kjit::storage::Found &found) {
            return copy_named(found, cubin_path, cubin_path_size, cubin_path_len, name, name_size, name_len);
        };
        return answer_call("kjit_compile_named", source, keyword, options, out);
    });
}

KJIT_API kjit_status kjit_load_cached(const char *cubin_path, const char *keyword, kjit_kernel **kernel) {
    if (kernel) *kernel = nullptr;
    return guarded("kjit_load_cached", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: kernel (the out handle) is NULL");
        if (!cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: cubin_path is NULL");
        if (!*cubin_path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: cubin_path is empty");
        if (!keyword) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_load_cached: keyword is NULL");
        return load_into(cubin_path, keyword, kernel);
    });
}

KJIT_API kjit_status kjit_compile_and_load(const char *source, const char *keyword, const kjit_compile_options *options,
                                           kjit_kernel **kernel) {
    if (kernel) *kernel = nullptr;
    return guarded("kjit_compile_and_load", [&]() -> kjit_status {
        if (!kernel) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_compile_and_load: kernel (the out handle) is NULL");
        auto found = compile_request("kjit_compile_and_load", source, keyword, options, nullptr);
        if (!found) return fail(found.error());
        return load_into(found->cubin, keyword, kernel);
    });
}

KJIT_API kjit_status kjit_prepare(const char *source, const char *keyword, const kjit_compile_options *options,
                                  kjit_prepared **prepared) {
    if (prepared) *prepared = nullptr;
    return guarded("kjit_prepare", [&]() -> kjit_status {
        if (!prepared) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_prepare: prepared (the out handle) is NULL");
        auto p = std::make_unique<kjit_prepared>();
        if (auto made = request_into("kjit_prepare", source, keyword, options, p->request); !made) {
            return fail(made.error());
        }
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
        return answer_prepared(*prepared, [&](const kjit::storage::Found &found) {
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
        const kjit_status found = answer_prepared(*prepared, [&](const kjit::storage::Found &f) {
            cubin = f.cubin;
            return KJIT_OK;
        });
        if (found != KJIT_OK) return found;
        return load_into(cubin, prepared->request.keyword, kernel);
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

KJIT_API kjit_status kjit_compile_options_init(kjit_compile_options *options, size_t struct_size) {
    return guarded("kjit_compile_options_init", [&]() -> kjit_status {
        return init_struct(options, struct_size, kjit_compile_options KJIT_COMPILE_OPTIONS_INIT,
                           "kjit_compile_options_init", "kjit_compile_options");
    });
}

KJIT_API kjit_status kjit_record_start(const char *path) {
    return guarded("kjit_record_start", [&]() -> kjit_status {
        if (!path || !*path) return fail(KJIT_ERROR_INVALID_ARGUMENT, "kjit_record_start: path is NULL or empty");
        if (auto st = kjit::api::request_record::start(path); !st) return fail(st.error());
        return KJIT_OK;
    });
}

KJIT_API void kjit_record_stop(void) { kjit::api::request_record::stop(); }

}  // extern "C"
