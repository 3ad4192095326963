/*
 * libkjit: JIT-compile CUDA C++ with NVRTC into an on-disk cubin cache and load cached
 * kernels fast. This header is the whole public C ABI. It compiles as strict C99 and as C++.
 *
 * Conventions shared by every function below:
 *  - Every function returns a kjit_status; KJIT_OK (0) is success. On failure the calling
 *    thread's detail text is available from kjit_last_error().
 *  - Out strings are written NUL-terminated into caller buffers. The matching `*_len` out
 *    parameter (may be NULL) receives the full length without the NUL, also when the buffer
 *    is too small (KJIT_ERROR_BUFFER_TOO_SMALL). Passing a NULL buffer with size 0 asks for
 *    the length only and returns KJIT_OK.
 *  - No function throws, aborts or longjmps across this boundary.
 *  - All functions may be called from any number of threads at once, and any number of
 *    processes may share one cache folder.
 */
#ifndef KJIT_KJIT_H
#define KJIT_KJIT_H

#include <stddef.h>

/** @name Version of this header (compile time). Compare with kjit_version() at run time. */
/** @{ */
#define KJIT_VERSION_MAJOR 0
#define KJIT_VERSION_MINOR 1
#define KJIT_VERSION_PATCH 0
/** The version as one number: major * 10000 + minor * 100 + patch. */
#define KJIT_VERSION_NUMBER (KJIT_VERSION_MAJOR * 10000 + KJIT_VERSION_MINOR * 100 + KJIT_VERSION_PATCH)
/** @} */

/** Marks a function as part of the exported ABI; everything else in libkjit is hidden. */
#if defined(_WIN32)
#  define KJIT_API
#elif defined(__GNUC__) || defined(__clang__)
#  define KJIT_API __attribute__((visibility("default")))
#else
#  define KJIT_API
#endif

#ifdef __cplusplus
#  define KJIT_BEGIN_DECLS extern "C" {
#  define KJIT_END_DECLS }
#else
#  define KJIT_BEGIN_DECLS
#  define KJIT_END_DECLS
#endif

KJIT_BEGIN_DECLS

/**
 * Result of every libkjit call. Values are fixed: new codes are only ever appended and a
 * retired value is never reused.
 */
typedef enum kjit_status {
    KJIT_OK = 0,                        /**< Success. */
    KJIT_ERROR_INVALID_ARGUMENT = 1,    /**< A NULL pointer, an empty or malformed keyword, ... */
    KJIT_ERROR_NOT_FOUND = 2,           /**< No symbol in the cubin matches the keyword. */
    KJIT_ERROR_AMBIGUOUS = 3,           /**< Several symbols match; candidates in kjit_last_error(). */
    KJIT_ERROR_BAD_CUBIN = 4,           /**< The file is not a well-formed CUDA ELF with a symbol table. */
    KJIT_ERROR_IO = 5,                  /**< A file could not be opened or read (missing, a directory, no permission). */
    KJIT_ERROR_COMPILE = 6,             /**< NVRTC rejected the source; the log is in kjit_last_error(). */
    KJIT_ERROR_NVRTC = 7,               /**< NVRTC failed for another reason (bad option, ...). */
    KJIT_ERROR_DRIVER_UNAVAILABLE = 8,  /**< No usable CUDA driver (libcuda.so.1 missing or cuInit failed). */
    KJIT_ERROR_DRIVER = 9,              /**< The CUDA driver reported an error. */
    KJIT_ERROR_BUFFER_TOO_SMALL = 10,   /**< An out buffer is too small; the needed length was reported. */
    KJIT_ERROR_OUT_OF_MEMORY = 11,      /**< An allocation failed. */
    KJIT_ERROR_INTERNAL = 12            /**< A bug in libkjit; please report it with kjit_last_error(). */
} kjit_status;

/**
 * @brief Names a status code.
 * @param status Any value; values this version does not know give "unknown status".
 * @return A static, NUL-terminated English string (e.g. "not found"). Never NULL; owned by
 *         the library, valid for the life of the process.
 * @note Thread safe. Does not change kjit_last_error().
 */
KJIT_API const char *kjit_status_string(kjit_status status);

/**
 * @brief Detail text for the calling thread's most recent failed libkjit call.
 *
 * The text names the file and what was wrong: the path and errno text for I/O errors, libelf's
 * message for a malformed cubin, the candidate list for an ambiguous keyword.
 * @return A NUL-terminated string, never NULL; "" when this thread has had no failure. Owned by
 *         the library; valid until the calling thread's next libkjit call.
 * @note Thread safe: each thread has its own text. Successful calls do not clear it.
 */
KJIT_API const char *kjit_last_error(void);

/**
 * @brief The run-time library version, as KJIT_VERSION_NUMBER encodes it.
 *
 * Compare with the KJIT_VERSION_NUMBER your code was compiled against to detect a mismatched
 * libkjit.so at run time.
 * @note Thread safe.
 */
KJIT_API unsigned kjit_version(void);

/**
 * @brief The run-time library version as text, e.g. "0.1.0".
 * @return A static string, never NULL, owned by the library.
 * @note Thread safe.
 */
KJIT_API const char *kjit_version_string(void);

/**
 * @brief Finds the mangled name of the kernel `keyword` in a cubin.
 *
 * Candidates are the STT_FUNC symbols of the cubin's .symtab, chosen by the keyword rule:
 * a symbol matches when its name is `_Z<digits><keyword>...` (keyword as literal text) or
 * equals `keyword` exactly (extern "C" kernels). A namespaced keyword `ns::kernel` matches
 * `_ZN2ns<digits>kernel...`. One match wins; among several, kernel entries are kept, then
 * those whose identifier is exactly `keyword`; if not exactly one is left the result is
 * KJIT_ERROR_AMBIGUOUS.
 *
 * The answer is kept in a sidecar file `<cubin_path>.name` bound to the keyword and to the
 * cubin's size and modification time, so later calls read one small file and stat the cubin
 * instead of scanning it. A missing, damaged, stale or foreign sidecar is ignored, the cubin is
 * scanned and the sidecar is rewritten atomically. Failing to write the sidecar (read-only
 * folder, ...) never fails the call; the answer is then remembered in this process.
 *
 * @param[in]  cubin_path Path of the cubin (NUL-terminated). Not retained.
 * @param[in]  keyword    Kernel identifier: `[A-Za-z0-9_]+`, optionally `ns::...::kernel`.
 * @param[out] name       Caller buffer that receives the NUL-terminated mangled name; may be
 *                        NULL only when name_size is 0.
 * @param[in]  name_size  Size of `name` in bytes, including room for the NUL.
 * @param[out] name_len   If not NULL, receives strlen of the name, also on
 *                        KJIT_ERROR_BUFFER_TOO_SMALL.
 * @return KJIT_OK; KJIT_ERROR_INVALID_ARGUMENT (NULL cubin_path or keyword, bad keyword, NULL
 *         name with non-zero name_size); KJIT_ERROR_IO (cubin missing, a directory,
 *         unreadable); KJIT_ERROR_BAD_CUBIN (not a CUDA ELF, truncated, no .symtab);
 *         KJIT_ERROR_NOT_FOUND; KJIT_ERROR_AMBIGUOUS; KJIT_ERROR_BUFFER_TOO_SMALL (nothing
 *         but the length is written); KJIT_ERROR_OUT_OF_MEMORY; KJIT_ERROR_INTERNAL.
 * @note Thread safe; safe with other processes resolving or replacing the same cubin (a
 *       replaced cubin never yields the old name).
 */
KJIT_API kjit_status kjit_resolve_name(const char *cubin_path, const char *keyword,
                                       char *name, size_t name_size, size_t *name_len);

KJIT_END_DECLS

#endif /* KJIT_KJIT_H */
