/**
 * @file kjit.h
 * @brief libkjit: JIT-compile CUDA C++ with NVRTC into an on-disk cubin cache and load cached
 *        kernels fast. This header is the whole public C ABI.
 *
 * It compiles as strict C99 and as C++, and needs no CUDA header: driver handles are returned
 * as `void *`, to be cast to `CUkernel`, `CUlibrary` or `CUfunction`.
 *
 * @par Conventions shared by every function below
 *  - Every function that can fail returns a ::kjit_status; #KJIT_OK (0) is success. On failure
 *    the calling thread's detail text is available from kjit_last_error(). (The ::kjit_kernel
 *    accessors cannot fail on a valid handle and return their value directly.)
 *  - Out strings are written NUL-terminated into caller buffers. The matching `*_len` out
 *    parameter (may be NULL) receives the full length without the NUL, also when the buffer
 *    is too small (#KJIT_ERROR_BUFFER_TOO_SMALL). Passing a NULL buffer with size 0 asks for
 *    the length only and returns #KJIT_OK.
 *  - No function throws, aborts or longjmps across this boundary.
 *  - All functions may be called from any number of threads at once, and any number of
 *    processes may share one cache folder.
 *
 * @par fork()
 *  A child forked while other threads are inside libkjit (as Python's multiprocessing forks by
 *  default on Linux) starts with clean in-process state: no lock held, no compile or load of
 *  the parent's in flight, no loaded library; its compiles run NVRTC themselves and its loads
 *  go to its own driver (opened and cuInit'ed again in the child; what CUDA then says about a
 *  forked child is what the child gets). A ::kjit_kernel the parent loaded keeps its name and
 *  path in the child, but kjit_kernel_cukernel() and kjit_kernel_culibrary() return NULL,
 *  kjit_kernel_cufunction() fails with #KJIT_ERROR_DRIVER, and kjit_kernel_release() frees it
 *  without unloading anything (the library is the parent's). kjit_get_stats() counters go on
 *  from the parent's values. The price: NVRTC holds a lock of its own inside a compile, so a
 *  fork() waits for the compiles in flight in the process to finish (at most 120 s; a child
 *  forked after that gets #KJIT_ERROR_NVRTC from every compile, never a hang). Children made
 *  with vfork(), clone() or _Fork() run no fork handlers and are not covered.
 *
 * @par Ownership
 *  - Input strings, arrays and structs are only read during the call; none is retained.
 *  - Strings returned by the library (kjit_status_string(), kjit_last_error(),
 *    kjit_version_string(), kjit_cache_problem_string(), kjit_kernel_name(),
 *    kjit_kernel_cubin_path(), the accessors of results and reports) are owned by it;
 *    each function says how long its string stays valid. Never free them.
 *  - A ::kjit_kernel from kjit_load_cached() belongs to the caller, who releases it once with
 *    kjit_kernel_release(); so does a ::kjit_batch_result from kjit_compile_batch(), released
 *    with kjit_batch_result_release(), a ::kjit_cache_arches from kjit_cache_summarize()
 *    (kjit_cache_arches_release()) and a ::kjit_verify_report from kjit_cache_verify()
 *    (kjit_verify_report_release()). The `CUkernel` and `CUlibrary` it hands out are owned by libkjit,
 *    the `CUfunction` of kjit_kernel_cufunction() by the driver.
 */
/**
 * @mainpage libkjit API reference
 *
 * The whole public C ABI is one header, @ref kjit.h (`#include <kjit/kjit.h>`); its conventions
 * (status codes, out buffers, ownership, threads) are on that page.
 *
 *  - kjit_compile(): compile CUDA C++ with NVRTC into the on-disk cubin cache, or find it there
 *    (options: ::kjit_compile_options, #KJIT_COMPILE_OPTIONS_INIT, ::kjit_header).
 *  - kjit_resolve_name(): the mangled name of a kernel in a cubin, by keyword.
 *  - kjit_load_cached(): load a cubin's kernel through the CUDA driver as a ::kjit_kernel;
 *    its accessors kjit_kernel_name(), kjit_kernel_cubin_path(), kjit_kernel_cukernel(),
 *    kjit_kernel_culibrary(), kjit_kernel_cufunction(); kjit_kernel_release().
 *  - ::kjit_status, kjit_status_string(), kjit_last_error(): results and their detail.
 *  - kjit_compile_batch(): a cold sweep at once: hits first, duplicates merged, misses on a
 *    pool of workers sharing NVRTC's precompiled header (::kjit_compile_request,
 *    ::kjit_batch_options, ::kjit_batch_progress_fn, ::kjit_batch_result and its accessors).
 *  - kjit_get_stats(), ::kjit_stats: process-wide counters (hits, misses, NVRTC time, sidecar
 *    use, loads, eviction, errors by status).
 *  - kjit_cache_summarize(), kjit_cache_prune(), kjit_cache_verify(), kjit_cache_clear(),
 *    kjit_cache_dir(): look after a cache folder as `kjit cache stats/prune/verify/clear` do
 *    (::kjit_cache_summary and ::kjit_cache_arches, ::kjit_prune_options and
 *    ::kjit_prune_report, ::kjit_verify_report and its accessors, ::kjit_cache_problem).
 *  - kjit_compile_options_init(), kjit_compile_request_init(), kjit_batch_options_init(),
 *    kjit_prune_options_init(): the `*_INIT` macros as functions, for bindings that cannot use
 *    macros (Python, Rust, Julia).
 *  - kjit_version(), kjit_version_string(), #KJIT_VERSION_NUMBER: versions.
 */
#ifndef KJIT_KJIT_H
#define KJIT_KJIT_H

#include <stddef.h>
#include <stdint.h>

/**
 * @name Version of this header (compile time)
 * Compare with kjit_version() at run time.
 * @{
 */
/** @brief The major version of this header. */
#define KJIT_VERSION_MAJOR 0
/** @brief The minor version of this header. */
#define KJIT_VERSION_MINOR 6
/** @brief The patch version of this header. */
#define KJIT_VERSION_PATCH 0
/** @brief The version as one number: `major * 10000 + minor * 100 + patch` (500 for 0.5.0). */
#define KJIT_VERSION_NUMBER (KJIT_VERSION_MAJOR * 10000 + KJIT_VERSION_MINOR * 100 + KJIT_VERSION_PATCH)
/** @} */

/**
 * @def KJIT_API
 * @brief Marks a function as part of the exported ABI; everything else in libkjit is hidden.
 *
 * `__attribute__((visibility("default")))` with GCC and Clang; empty on Windows and with other
 * compilers.
 */
#if defined(_WIN32)
#  define KJIT_API
#elif defined(__GNUC__) || defined(__clang__)
#  define KJIT_API __attribute__((visibility("default")))
#else
#  define KJIT_API
#endif

/**
 * @def KJIT_BEGIN_DECLS
 * @brief Opens the block of declarations: `extern "C" {` in C++, empty in C.
 */
/**
 * @def KJIT_END_DECLS
 * @brief Closes the block KJIT_BEGIN_DECLS opened: `}` in C++, empty in C.
 */
#ifdef __cplusplus
#  define KJIT_BEGIN_DECLS extern "C" {
#  define KJIT_END_DECLS }
#else
#  define KJIT_BEGIN_DECLS
#  define KJIT_END_DECLS
#endif

KJIT_BEGIN_DECLS

/**
 * @brief Result of every libkjit call that can fail.
 *
 * Values are fixed: new codes are only ever appended and a retired value is never reused.
 * kjit_status_string() names a status; kjit_last_error() gives the detail of a failure.
 */
typedef enum kjit_status {
    KJIT_OK = 0,                        /**< Success. */
    KJIT_ERROR_INVALID_ARGUMENT = 1,    /**< A NULL pointer, an empty or malformed keyword, ... */
    KJIT_ERROR_NOT_FOUND = 2,           /**< No symbol in the cubin matches the keyword (or the driver
                                             finds no kernel of the matching name). */
    KJIT_ERROR_AMBIGUOUS = 3,           /**< Several symbols match; candidates in kjit_last_error(). */
    KJIT_ERROR_BAD_CUBIN = 4,           /**< The file is not a well-formed CUDA ELF with a symbol table. */
    KJIT_ERROR_IO = 5,                  /**< A file could not be opened or read (missing, a directory, no
                                             permission), or a cache folder or file could not be created
                                             or written. */
    KJIT_ERROR_COMPILE = 6,             /**< NVRTC rejected the source; the log is in kjit_last_error(). */
    KJIT_ERROR_NVRTC = 7,               /**< NVRTC failed for another reason (bad option, ...), or no
                                             usable NVRTC could be loaded (libnvrtc or $KJIT_LIBNVRTC). */
    KJIT_ERROR_DRIVER_UNAVAILABLE = 8,  /**< No usable CUDA driver (libcuda.so.1 or $KJIT_LIBCUDA missing,
                                             a driver older than CUDA 12.0, or cuInit failed). */
    KJIT_ERROR_DRIVER = 9,              /**< The CUDA driver reported an error. */
    KJIT_ERROR_BUFFER_TOO_SMALL = 10,   /**< An out buffer is too small; the needed length was reported. */
    KJIT_ERROR_OUT_OF_MEMORY = 11,      /**< An allocation failed. */
    KJIT_ERROR_INTERNAL = 12,           /**< A bug in libkjit; please report it with kjit_last_error(). */
    KJIT_ERROR_CANCELLED = 13           /**< A kjit_compile_batch() item that was not started because the
                                             progress callback cancelled the batch (since 0.3). */
} kjit_status;

/**
 * @brief Names a status code.
 * @param[in] status Any value; values this version does not know give "unknown status".
 * @return A static, NUL-terminated English string (e.g. "not found"). Never NULL; owned by
 *         the library, valid for the life of the process.
 * @note Thread safe. Does not change kjit_last_error().
 */
KJIT_API const char *kjit_status_string(kjit_status status);

/**
 * @brief Detail text for the calling thread's most recent failed libkjit call.
 *
 * The text names the file and what was wrong: the path and errno text for I/O errors, libelf's
 * message for a malformed cubin, the candidate list for an ambiguous keyword, the whole NVRTC
 * log for a compile error.
 * @return A NUL-terminated string, never NULL; "" when this thread has had no failure. Owned by
 *         the library; valid until the calling thread's next libkjit call.
 * @note Thread safe: each thread has its own text. Successful calls do not clear it.
 */
KJIT_API const char *kjit_last_error(void);

/**
 * @brief The run-time library version, as #KJIT_VERSION_NUMBER encodes it.
 *
 * Compare with the #KJIT_VERSION_NUMBER your code was compiled against to detect a mismatched
 * libkjit.so at run time.
 * @return `major * 10000 + minor * 100 + patch` of the loaded library (500 for 0.5.0).
 * @note Thread safe.
 */
KJIT_API unsigned kjit_version(void);

/**
 * @brief The run-time library version as text, e.g. "0.5.0": the three numbers of
 *        kjit_version(), separated by dots.
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
 * #KJIT_ERROR_AMBIGUOUS.
 *
 * The answer is kept in a sidecar file `<cubin_path>.name` bound to the keyword and to the
 * cubin's size and modification time, so later calls read one small file and stat the cubin
 * instead of scanning it. A missing, damaged, stale or foreign sidecar is ignored, the cubin is
 * scanned and the sidecar is rewritten atomically. Failing to write the sidecar (read-only
 * folder, ...) never fails the call; the answer is then remembered in this process.
 *
 * @param[in]  cubin_path Path of the cubin (NUL-terminated, not empty). Not retained.
 * @param[in]  keyword    Kernel identifier: `[A-Za-z0-9_]+`, optionally namespaced
 *                        (`ns::kernel`, `ns::inner::kernel`).
 * @param[out] name       Caller buffer that receives the NUL-terminated mangled name; may be
 *                        NULL only when name_size is 0.
 * @param[in]  name_size  Size of `name` in bytes, including room for the NUL.
 * @param[out] name_len   If not NULL, receives strlen of the name, also on
 *                        #KJIT_ERROR_BUFFER_TOO_SMALL.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The name was written (or, with a NULL `name` and
 *                                     name_size 0, only its length).
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL or empty cubin_path, NULL keyword, bad keyword,
 *                                     NULL name with non-zero name_size.
 * @retval KJIT_ERROR_IO               The cubin is missing, a directory, not a regular file,
 *                                     or unreadable.
 * @retval KJIT_ERROR_BAD_CUBIN        Not a CUDA ELF, truncated, no .symtab.
 * @retval KJIT_ERROR_NOT_FOUND        No function symbol matches the keyword.
 * @retval KJIT_ERROR_AMBIGUOUS        Several match; the candidates are listed in
 *                                     kjit_last_error().
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL Nothing but the length is written.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe; safe with other processes resolving or replacing the same cubin (a
 *       replaced cubin never yields the old name).
 */
KJIT_API kjit_status kjit_resolve_name(const char *cubin_path, const char *keyword,
                                       char *name, size_t name_size, size_t *name_len);

/**
 * @brief An in-memory header offered to NVRTC: `#include "<name>"` in the source finds it.
 */
typedef struct kjit_header {
    const char *name;   /**< Include name, e.g. "tile_config.h". Not NULL. */
    const char *source; /**< Its text (NUL-terminated). Not NULL. */
} kjit_header;

/**
 * @brief Options for kjit_compile().
 *
 * Set `struct_size = sizeof(kjit_compile_options)` (or start from
 * #KJIT_COMPILE_OPTIONS_INIT); fields are only ever appended, so a caller built against an older,
 * smaller struct keeps working. Every pointer may be NULL (and every count 0) for the default.
 * Nothing is retained after the call returns.
 */
typedef struct kjit_compile_options {
    /** Size of this struct as the caller was compiled with it: `sizeof(kjit_compile_options)`.
        Fields past it are taken as defaults; a value below `sizeof(size_t)` or above this
        version's size is #KJIT_ERROR_INVALID_ARGUMENT. */
    size_t struct_size;
    /** Cache folder. Default (NULL or ""): $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else
        $HOME/.cache/kjit. Created (mode 0700) when missing; a relative folder is made absolute
        against the working directory. A folder writable by others (o+w, sticky or not) is
        refused with #KJIT_ERROR_IO: anyone could plant a kernel in it; so are a folder, entry
        or lock another user owns, and a folder under a parent writable by others without the
        sticky bit, unless the folder is a team cache (group-owned, group-writable and setgid,
        of a group the caller is in: docs/cache-layout.md). The folder may be a symbolic link
        (the caller's or root's); links planted for its shard folders or entries are never
        followed for writing (a linked entry is replaced). */
    const char *cache_dir;
    /** Target, a real architecture such as "sm_90a" or "sm_100a" (a cubin is required, so
        "compute_XX" is refused). Default (NULL or ""): $KJIT_ARCH, else the current GPU's
        (device 0's compute capability, as plain "sm_XY") through the driver when one is
        present, else #KJIT_ERROR_INVALID_ARGUMENT. */
    const char *arch;
    /** Extra NVRTC options in order, e.g. "-std=c++17", "-DTILE=128". Not -arch (use arch).
        NVRTC's precompiled-header options never reach NVRTC as given (it would reuse a PCH
        made before a header edit): `--pch` (`-pch`) compiles with libkjit's own automatic PCH,
        kept in a folder per header identity as in a batch (kjit_batch_options::pch);
        `--pch-messages` and `--pch-verbose` (true/false) are accepted and dropped (the PCH's
        notes stay out of the log); `--instantiate-templates-in-pch=<true|false>` is passed
        with libkjit's PCH. None of these is in the cache key. `--create-pch`, `--use-pch` and
        `--pch-dir`, which name PCH files or folders of the caller's, are
        #KJIT_ERROR_INVALID_ARGUMENT naming the option (docs/batch.md). */
    const char *const *nvrtc_options;
    /** Number of entries in nvrtc_options (none may be NULL). */
    size_t nvrtc_option_count;
    /** Folders searched for `#include`, in order. The headers a compile reads from them enter
        the cache key by content: editing one gives a miss, never a stale hit. */
    const char *const *include_paths;
    /** Number of entries in include_paths (none may be NULL). */
    size_t include_path_count;
    /** In-memory headers. */
    const kjit_header *headers;
    /** Number of entries in headers. */
    size_t header_count;
    /** Optional C++ name expression such as "gemm<128, 64>", lowered with
        nvrtcGetLoweredName; the lowered name must pass the keyword rule for `keyword`. */
    const char *name_expression;
    /** Size limit of the cache folder in bytes (since 0.2). 0: $KJIT_CACHE_MAX_SIZE (e.g.
        "5G"; decimal, K, M, G, T are powers of 1024; "0" there means no limit), else no
        limit. UINT64_MAX: no limit, whatever the variable says. After a miss publishes, the
        cache is measured (throttled per process, and at once when this process's publishes
        may have crossed the limit) and, when over, the least recently used entries are
        evicted, whole, to below the limit (docs/cache-layout.md says how often and how far).
        Recency is recorded by libkjit itself, not the file system's access times, so it holds
        on noatime mounts. An entry used in the last two minutes (or handed out by a
        kjit_compile_batch() that returned less than two minutes ago) is never evicted, so a
        fast sweep can briefly exceed the limit. Hits never measure or evict. A publish that
        fails for a full disk or quota evicts and tries once more. A malformed
        $KJIT_CACHE_MAX_SIZE is #KJIT_ERROR_INVALID_ARGUMENT. */
    uint64_t max_cache_size;
    /** The cluster tier (since 0.6; docs/remote.md): Redis servers shared by the nodes of a
        cluster, consulted on a local miss only (a local hit sends no command), so that each
        kernel is compiled once per cluster and a new node starts warm. NULL or "": the
        environment's $KJIT_REMOTE_STORAGE, else none; "none": none, whatever the environment
        says. The syntax is ccache's: one or more servers, `redis://[[USER:]PASSWORD@]HOST[:PORT][/DB]`
        or `redis+unix:PATH[?db=N]` (keys are sharded over them), and options such as
        `namespace=NAME`, `read-only=true`, `connect-timeout=100ms`, `operation-timeout=10s`,
        `lease=30s`, `wait-timeout=10m`, `max-entry-size=64M`, `password-file=PATH`, separated by
        blanks. A malformed setting is #KJIT_ERROR_INVALID_ARGUMENT naming it (never showing a
        password), reported by the first call that misses locally. Fail open: a server that is
        down, slow, full or read-only makes a miss slower, never failing: the call compiles
        here (docs/remote.md). Where libkjit was built without hiredis, any setting but "none"
        is #KJIT_ERROR_INVALID_ARGUMENT saying so. */
    const char *remote_storage;
} kjit_compile_options;

/** @brief Initializer for ::kjit_compile_options: the size set, everything else default. */
#define KJIT_COMPILE_OPTIONS_INIT { sizeof(kjit_compile_options), NULL, NULL, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL }

/**
 * @brief Compiles CUDA C++ with NVRTC into the on-disk cubin cache, or finds it there.
 *
 * The cache key covers everything that changes the cubin: the source, the in-memory headers,
 * the NVRTC options in order, the include paths and the content of every header read through
 * them, the arch, the name expression, the keyword, NVRTC's build and the cache format
 * version. A hit runs no NVRTC, reads no cubin and scans nothing. A miss compiles once, resolves
 * the kernel name (the lowered name expression, else a scan with the keyword rule) and
 * publishes the entry atomically (cubin, `<cubin>.name` sidecar, source and manifest), so the
 * first kjit_resolve_name() or kjit_load_cached() on the result is already a sidecar hit. A failed
 * compile publishes nothing. Layout: `<cache>/<k0k1>/<32 hex key>/kernel.cubin`.
 *
 * NVRTC is not linked: the first call in a process `dlopen`s it (`$KJIT_LIBNVRTC` when set, else
 * `libnvrtc.so.<major>` of the NVRTC libkjit was built against, through the dynamic linker's
 * search, then in the CUDA toolkit's lib folder found at build time). Since NVRTC's build is part
 * of the key, a hit needs NVRTC loaded too; without a usable NVRTC every call returns
 * #KJIT_ERROR_NVRTC (after the argument checks) saying what was tried and what to do. To use a
 * shipped cache without NVRTC, call kjit_load_cached() or kjit_resolve_name() on its cubin paths.
 *
 * @param[in]  source          CUDA C++ source (NUL-terminated). Not retained.
 * @param[in]  keyword         The kernel, as for kjit_resolve_name().
 * @param[in]  options         NULL for all defaults, else a struct with struct_size set.
 * @param[out] cubin_path      Caller buffer for the NUL-terminated absolute path of the cached
 *                             cubin; may be NULL only when cubin_path_size is 0.
 * @param[in]  cubin_path_size Size of `cubin_path` in bytes, including room for the NUL.
 * @param[out] cubin_path_len  If not NULL, receives strlen of the path, also on
 *                             #KJIT_ERROR_BUFFER_TOO_SMALL.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The path was written (or, with a NULL `cubin_path` and
 *                                     cubin_path_size 0, only its length).
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL source or keyword, bad keyword, bad struct_size, no
 *                                     arch or a virtual or malformed one, -arch among the
 *                                     options, a NULL array with a non-zero count or a NULL
 *                                     entry in it, no cache folder (no option,
 *                                     $KJIT_CACHE_DIR, $XDG_CACHE_HOME or $HOME), NULL
 *                                     cubin_path with non-zero cubin_path_size, a name
 *                                     expression whose lowered name does not match the keyword.
 * @retval KJIT_ERROR_COMPILE          NVRTC rejected the source; the whole NVRTC log is in
 *                                     kjit_last_error().
 * @retval KJIT_ERROR_NVRTC            Another NVRTC failure (an unknown option, ...), or no
 *                                     usable NVRTC could be loaded (also for a hit): the files
 *                                     tried, why each failed, and what to do are in
 *                                     kjit_last_error().
 * @retval KJIT_ERROR_NOT_FOUND        No symbol of the fresh cubin matches the keyword.
 * @retval KJIT_ERROR_AMBIGUOUS        Several symbols of the fresh cubin match the keyword.
 * @retval KJIT_ERROR_IO               The cache folder cannot be created or written, or a header
 *                                     under the include paths cannot be read; a read-only cache
 *                                     still answers hits.
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL Nothing but the length is written.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe. Within a process at most one NVRTC run per key happens at a time (other
 *       callers wait for it and share its result); across processes on one node, the first to
 *       miss a key takes its compile lock in the cache folder and the others wait for its entry
 *       (at most $KJIT_COMPILE_WAIT seconds, then they compile too); every one returns a
 *       complete entry. Hits take no lock.
 */
KJIT_API kjit_status kjit_compile(const char *source, const char *keyword, const kjit_compile_options *options,
                                  char *cubin_path, size_t cubin_path_size, size_t *cubin_path_len);

/**
 * @brief kjit_compile() that also gives the kernel's name: the cached cubin's path and the
 *        mangled name kjit_resolve_name() would give for `keyword` (or the lowered name
 *        expression), both from the one look-up that proves the entry (since 0.5).
 *
 * What a caller about to load the kernel needs, without a second look-up: kjit_compile()
 * followed by kjit_resolve_name() stats the cubin and reads its sidecar twice.
 *
 * @param[in]  source, keyword, options, cubin_path, cubin_path_size, cubin_path_len
 *                       As for kjit_compile().
 * @param[out] name      Caller buffer for the NUL-terminated mangled name; may be NULL only when
 *                       name_size is 0.
 * @param[in]  name_size Size of `name` in bytes, including room for the NUL.
 * @param[out] name_len  If not NULL, receives strlen of the name, also on
 *                       #KJIT_ERROR_BUFFER_TOO_SMALL.
 * @return As kjit_compile(), and:
 * @retval KJIT_ERROR_INVALID_ARGUMENT Also for a NULL `name` with a non-zero name_size.
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL Either buffer is too small: neither string is written, both
 *                                     lengths are (where their pointers are not NULL).
 * @note Thread safe, as kjit_compile().
 */
KJIT_API kjit_status kjit_compile_named(const char *source, const char *keyword, const kjit_compile_options *options,
                                        char *cubin_path, size_t cubin_path_size, size_t *cubin_path_len, char *name,
                                        size_t name_size, size_t *name_len);

/**
 * @name Batch compile (since 0.3)
 * @{
 */

/**
 * @brief One item of kjit_compile_batch(): the arguments of kjit_compile().
 *
 * Set `struct_size = sizeof(kjit_compile_request)` (or start from #KJIT_COMPILE_REQUEST_INIT);
 * fields are only ever appended. Only read during the call.
 */
typedef struct kjit_compile_request {
    /** `sizeof(kjit_compile_request)` as the caller was compiled with it. */
    size_t struct_size;
    /** CUDA C++ source (NUL-terminated), as for kjit_compile(). */
    const char *source;
    /** The kernel, as for kjit_compile(). */
    const char *keyword;
    /** NULL for all defaults, else options as for kjit_compile(). Items may share one. */
    const kjit_compile_options *options;
} kjit_compile_request;

/** @brief Initializer for ::kjit_compile_request: the size set, everything else NULL. */
#define KJIT_COMPILE_REQUEST_INIT { sizeof(kjit_compile_request), NULL, NULL, NULL }

/**
 * @brief Progress callback of kjit_compile_batch(), called once for each item that finishes
 *        (a hit, a compile, a duplicate sharing another item's compile, or a failure).
 *
 * It runs on the thread that called kjit_compile_batch(), never concurrently with itself and
 * with no libkjit lock held, so it may call any libkjit function (e.g. kjit_load_cached() on
 * the item just compiled, or another kjit_compile_batch()). Hits are reported first, before
 * any compile starts; compiled items in the order they finish. Items not started after a
 * cancel are not reported. While it runs, the workers go on with what they have started; a
 * cancel takes effect when it returns.
 *
 * It must return normally:
 *  - Never `longjmp()` out of it, nor anything that unwinds by longjmp, such as a Julia
 *    `error()` or `throw` out of a `@cfunction`: catch inside (`try` ... `catch`), keep the
 *    exception, return non-zero, and rethrow it after kjit_compile_batch() returns. A jump
 *    skips libkjit's frames while the batch's worker threads still use them, and the process
 *    crashes (seen: SIGSEGV in a worker once the jump was taken).
 *  - A Rust panic must not leave it (since Rust 1.81 that aborts the process): use
 *    `std::panic::catch_unwind` and return non-zero.
 *  - Not `pthread_exit()` or cancellation of the calling thread: the process aborts.
 *  - A C++ exception thrown out of it is caught by libkjit and goes no further: the batch is
 *    cancelled as by a non-zero return, the callback is not called again (also not for items
 *    still compiling), and kjit_compile_batch() returns #KJIT_ERROR_CANCELLED, with the full
 *    result and with what was thrown (its `what()`) in kjit_last_error().
 *  - Python's ctypes prints an exception raised in a callback and returns an undefined value;
 *    python/kjit.py catches it (and Ctrl-C) for you (docs/python.md).
 *
 * libkjit installs no signal handler. To stop a batch on Ctrl-C, let a SIGINT handler set a
 * `volatile sig_atomic_t` flag and return non-zero from the callback once it is set: the
 * batch stops at the next item that finishes.
 *
 * @param user_data  kjit_batch_options::progress_user_data.
 * @param done       Items finished so far, this one included (1 to `total`).
 * @param total      Items in the batch.
 * @param index      This item's index in the request array.
 * @param status     Its status (#KJIT_OK or the failure's).
 * @param cubin_path Its cached cubin's path on #KJIT_OK, else NULL; valid during the call only.
 * @return 0 to go on; any other value (a negative one too) cancels: items not started yet
 *         end with #KJIT_ERROR_CANCELLED, items compiling now still finish and are reported
 *         (NVRTC cannot be interrupted), and later return values are ignored.
 */
typedef int (*kjit_batch_progress_fn)(void *user_data, size_t done, size_t total, size_t index, kjit_status status,
                                      const char *cubin_path);

/** @brief Whether a batch's compiles use NVRTC's automatic precompiled header (`-pch`). */
typedef enum kjit_pch_mode {
    KJIT_PCH_DEFAULT = 0, /**< The library's choice: on for misses that `#include` the same
                               headers as another miss of the batch, off for the rest (see
                               kjit_batch_options::pch). */
    KJIT_PCH_ON = 1,      /**< Every compile of the batch passes `-pch`. */
    KJIT_PCH_OFF = 2      /**< Plain compiles. */
} kjit_pch_mode;

/** @brief Where a batch's misses compile (kjit_batch_options::worker_kind; since 0.5). */
typedef enum kjit_worker_kind {
    KJIT_WORKERS_DEFAULT = 0,   /**< $KJIT_WORKER_KIND ("threads", "processes" or "auto"), else
                                     #KJIT_WORKERS_AUTOMATIC. */
    KJIT_WORKERS_THREADS = 1,   /**< Threads of the calling process. */
    KJIT_WORKERS_PROCESSES = 2, /**< Worker processes: the helper `kjit-worker`, installed beside
                                     libkjit.so (or $KJIT_WORKER), one per worker, started with
                                     posix_spawn (the caller is never forked) and ended when the
                                     batch returns, or killed when the calling process dies.
                                     Each keeps NVRTC and its own PCHs across its compiles;
                                     keys, look-ups, publishing and progress stay in the calling
                                     process. A worker that dies during a compile fails nothing
                                     else: that item is compiled again once on a fresh worker,
                                     and fails with #KJIT_ERROR_NVRTC saying how both ended if
                                     it dies again. Without the helper, every miss fails with
                                     #KJIT_ERROR_NOT_FOUND saying where it was looked for. */
    KJIT_WORKERS_AUTOMATIC = 3  /**< Processes when more than one worker is asked for and a miss
                                     includes headers (`#include` or in-memory headers): NVRTC
                                     compiles those one at a time within a process, so threads
                                     do not scale (docs/batch.md); threads otherwise, and where
                                     the helper is missing (said in the log). */
} kjit_worker_kind;

/**
 * @brief Options for kjit_compile_batch(). Set `struct_size = sizeof(kjit_batch_options)` (or
 *        start from #KJIT_BATCH_OPTIONS_INIT); fields are only ever appended. NULL options mean
 *        all defaults.
 */
typedef struct kjit_batch_options {
    /** `sizeof(kjit_batch_options)` as the caller was compiled with it. */
    size_t struct_size;
    /** Workers (threads or worker processes: worker_kind) at most. 0: $KJIT_JOBS (1 to 256),
        else the CPUs this process may run on. Fewer start when there are fewer misses; more
        than 256 means 256. */
    unsigned workers;
    /** A ::kjit_pch_mode. With the PCH, NVRTC parses the headers once per process and every
        later compile with the same includes and options starts from the parsed state; the
        compile that creates it costs more than a plain one. The default uses it for the
        misses whose headers (options, include paths, in-memory headers, the source up to its
        last `#include`) are another miss's of the batch, as a PCH used by one compile only
        costs its creation and a header-free source has nothing to precompile
        (docs/batch.md has the measurements). Each distinct set of headers (options,
        in-memory headers, the content of every header read from disk, the source up to its
        last `#include`) gets PCHs of its own, since NVRTC would reuse one made from other
        headers; they live under `$TMPDIR/kjit-pch-<pid>-*`, removed at exit. The PCH is not in
        the cache key, as it does not change what the cubin does. `--pch` among an item's NVRTC
        options asks for the PCH as #KJIT_PCH_ON would, unless this is #KJIT_PCH_OFF. */
    int pch;
    /** Called for each finished item; NULL for none. */
    kjit_batch_progress_fn progress;
    /** Passed to `progress` untouched. */
    void *progress_user_data;
    /** A ::kjit_worker_kind: threads or worker processes (since 0.5). */
    int worker_kind;
    /** 0 (since 0.5). Keeps the struct free of padding; any other value is refused
        (#KJIT_ERROR_INVALID_ARGUMENT), so a later release may give it a meaning. */
    int reserved;
} kjit_batch_options;

/** @brief Initializer for ::kjit_batch_options: the size set, everything else default. */
#define KJIT_BATCH_OPTIONS_INIT { sizeof(kjit_batch_options), 0, KJIT_PCH_DEFAULT, NULL, NULL, KJIT_WORKERS_DEFAULT, 0 }

/**
 * @brief The per-item results of kjit_compile_batch(): an opaque handle owned by the caller,
 *        released once with kjit_batch_result_release(). Read-only after the call, so its
 *        accessors may be used from any thread.
 */
typedef struct kjit_batch_result kjit_batch_result;

/**
 * @brief Compiles many kernels into the cache at once: an autotuner's cold sweep.
 *
 * Each item is what one kjit_compile() call would do, with the same cache entries, keys and
 * errors, done faster together:
 *  - Every request is looked up first, on the calling thread: hits are answered at once and
 *    never wait for a worker or a compile.
 *  - Identical requests (same cache folder and key) compile once and all get its result.
 *  - The misses compile on up to kjit_batch_options::workers workers, in request order:
 *    threads of this process, which share NVRTC's automatic precompiled header
 *    (kjit_batch_options::pch), as NVRTC ties it to the process that made it; or, for
 *    header-heavy sweeps that NVRTC would compile one at a time within a process, worker
 *    processes that each keep their own (kjit_batch_options::worker_kind).
 *  - One item's failure does not affect the others.
 *
 * @param[in]  requests Array of `count` pointers to requests; not retained. A NULL element, or
 *                      one with a bad struct_size, fails that item only
 *                      (#KJIT_ERROR_INVALID_ARGUMENT).
 * @param[in]  count    Number of requests (0 is a valid, empty batch; at most 16777216, 2^24).
 * @param[in]  options  NULL for all defaults, else a struct with struct_size set.
 * @param[out] result   Receives the per-item results whenever the batch ran (also when items
 *                      failed or it was cancelled), NULL when the call itself was refused.
 *                      Release it with kjit_batch_result_release().
 * @return The batch's overall status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     Every item succeeded.
 * @retval KJIT_ERROR_CANCELLED        The progress callback cancelled; `*result` says which
 *                                     items finished (with any status) and which were not
 *                                     started (#KJIT_ERROR_CANCELLED). Also when it threw a C++
 *                                     exception, even with nothing left to cancel; what was
 *                                     thrown is in kjit_last_error().
 * @retval (an item's status)          Otherwise, the status of the first failed item by index
 *                                     (e.g. #KJIT_ERROR_COMPILE), with the number of failed
 *                                     items and that item's text in kjit_last_error(); each
 *                                     item's own status and text are in `*result`.
 * @retval KJIT_ERROR_INVALID_ARGUMENT (with `*result` NULL) NULL `result`, NULL `requests` with
 *                                     a non-zero count, a count over 2^24, a bad options
 *                                     struct_size, an unknown pch mode or worker kind, a
 *                                     non-zero `reserved`, or a malformed $KJIT_JOBS or
 *                                     $KJIT_WORKER_KIND.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    (with `*result` NULL) An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe: batches and kjit_compile() calls in other threads or processes may work
 *       on the same keys at once (within a process one NVRTC run per key; across processes
 *       each gets a complete entry). It returns once every started compile has finished and
 *       been reported, and leaves no thread behind.
 */
KJIT_API kjit_status kjit_compile_batch(const kjit_compile_request *const *requests, size_t count,
                                        const kjit_batch_options *options, kjit_batch_result **result);

/**
 * @brief Number of items in a batch result.
 * @param[in] result A result from kjit_compile_batch(), or NULL.
 * @return The `count` the batch was called with; 0 for a NULL result.
 * @note Thread safe.
 */
KJIT_API size_t kjit_batch_result_count(const kjit_batch_result *result);

/**
 * @brief One item's status.
 * @param[in] result A result from kjit_compile_batch().
 * @param[in] index  The item's index in the request array.
 * @return #KJIT_OK, the item's failure (as kjit_compile() would give it), #KJIT_ERROR_CANCELLED
 *         for an item not started, or #KJIT_ERROR_INVALID_ARGUMENT for a NULL result or an
 *         index out of range. Does not change kjit_last_error().
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_batch_result_status(const kjit_batch_result *result, size_t index);

/**
 * @brief One item's cached cubin path (absolute), as kjit_compile() returns it.
 * @param[in] result A result from kjit_compile_batch().
 * @param[in] index  The item's index in the request array.
 * @return NUL-terminated, owned by the result, valid until it is released; NULL when the item
 *         failed, for a NULL result or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_batch_result_cubin_path(const kjit_batch_result *result, size_t index);

/**
 * @brief The kernel's mangled name in one item's cubin, as kjit_compile_named() gives it (since
 *        0.5).
 * @param[in] result A result from kjit_compile_batch().
 * @param[in] index  The item's index in the request array.
 * @return NUL-terminated, owned by the result, valid until it is released; NULL for an item that
 *         failed, for a NULL result or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_batch_result_kernel_name(const kjit_batch_result *result, size_t index);

/**
 * @brief One item's error text: what kjit_last_error() would say after kjit_compile() failed
 *        on it (the whole NVRTC log for a compile error).
 * @param[in] result A result from kjit_compile_batch().
 * @param[in] index  The item's index in the request array.
 * @return NUL-terminated, owned by the result, valid until it is released; "" for an item that
 *         succeeded; NULL for a NULL result or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_batch_result_error(const kjit_batch_result *result, size_t index);

/**
 * @brief Releases a batch result; its strings go with it. NULL is accepted and ignored.
 * @param[in] result The result to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each result is released once, after its last use by any thread.
 */
KJIT_API void kjit_batch_result_release(kjit_batch_result *result);

/** @} */

/**
 * @brief A kernel loaded through the CUDA driver by kjit_load_cached(): an opaque handle.
 *
 * It holds a reference on the loaded cubin (a `CUlibrary`, shared by every handle on the same
 * cubin version in the process); kjit_kernel_release() drops it, and the library is unloaded
 * with its last handle. A handle may be used from any thread; it must not be used after it is
 * released.
 */
typedef struct kjit_kernel kjit_kernel;

/**
 * @brief Loads the kernel `keyword` of a cubin through the CUDA driver, resolving its mangled
 *        name on the sidecar fast path.
 *
 * The cubin is read once; the name is resolved for exactly those bytes (the sidecar as for
 * kjit_resolve_name(), else a scan of the bytes read, which rewrites the sidecar), and the same
 * bytes are handed to the driver, context-free, with cuLibraryLoadData; the kernel comes from
 * cuLibraryGetKernel. So a cubin replaced on disk while it is loaded never pairs one version's
 * name with the other's image. If the driver finds no symbol of a name the sidecar gave, the
 * sidecar line is dropped, the bytes rescanned, the line rewritten and the lookup retried once.
 * The cubin of a kjit_compile() cache entry is checked against the XXH3-128 its manifest
 * recorded at publish before the driver sees it: a cubin changed on disk since is
 * #KJIT_ERROR_BAD_CUBIN, and for the entry's keyword the name is the one recorded at compile time.
 *
 * In-process reuse: while a handle on a cubin is held, loading the same file version again
 * (same device, inode, size, mtime and ctime) returns a new handle on the already-loaded library
 * without reading the file; a cubin replaced on disk is a new version and is loaded anew (older
 * handles stay valid). Concurrent first loads of one version load it once.
 *
 * The driver is reached through dlopen("libcuda.so.1") (or $KJIT_LIBCUDA) on first use; no
 * current context is needed to load. cubins larger than 1 GiB are refused.
 *
 * @param[in]  cubin_path Path of the cubin (NUL-terminated, not empty). Not retained (the handle
 *                        keeps a copy).
 * @param[in]  keyword    Kernel identifier, as for kjit_resolve_name().
 * @param[out] kernel     Receives the new handle on success, NULL on failure. Release it with
 *                        kjit_kernel_release().
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                       `*kernel` holds a new handle.
 * @retval KJIT_ERROR_INVALID_ARGUMENT   A NULL argument, an empty cubin_path, a bad keyword.
 * @retval KJIT_ERROR_DRIVER_UNAVAILABLE No libcuda.so.1, too old a driver, or cuInit failed;
 *                                       the message says what was tried.
 * @retval KJIT_ERROR_IO                 The cubin is missing, a directory, not a regular file,
 *                                       or unreadable.
 * @retval KJIT_ERROR_BAD_CUBIN          Not a CUDA ELF, headers pointing outside the file,
 *                                       empty, over 1 GiB; a cache entry's cubin that is not
 *                                       what was published (the message says what to run).
 * @retval KJIT_ERROR_NOT_FOUND          No symbol matches the keyword, or the driver finds no
 *                                       kernel of the name a fresh scan gave (e.g. a
 *                                       `__device__` function matched).
 * @retval KJIT_ERROR_AMBIGUOUS          Several symbols match; candidates in kjit_last_error().
 * @retval KJIT_ERROR_DRIVER             The driver rejected the image, e.g.
 *                                       CUDA_ERROR_NO_BINARY_FOR_GPU, with the cubin's target
 *                                       and the device's SM in kjit_last_error().
 * @retval KJIT_ERROR_OUT_OF_MEMORY      An allocation failed.
 * @retval KJIT_ERROR_INTERNAL           A bug in libkjit.
 * @note Thread safe; no global lock on the load path.
 */
KJIT_API kjit_status kjit_load_cached(const char *cubin_path, const char *keyword, kjit_kernel **kernel);

/**
 * @brief kjit_compile() then kjit_load_cached() in one call: the kernel of `source`, found in the
 *        cache (or compiled into it) and loaded, for callers that ask for their kernel at every
 *        launch (since 0.5).
 *
 * A repeat costs the hit memo's check (one `lstat` of the cubin: docs/cache-layout.md, "The hit
 * memo") and the loader's reuse of the library it already loaded (one `stat`, while a handle to
 * it is alive): no sidecar read, no cubin read, no driver call.
 *
 * @param[in]  source, keyword, options As for kjit_compile().
 * @param[out] kernel Receives a new handle on success, NULL on failure. Release each handle with
 *                    kjit_kernel_release(); holding one keeps the library loaded, so that the
 *                    next call reuses it.
 * @return #KJIT_OK, or a failure's status as kjit_compile() gives it for the compile (e.g.
 *         #KJIT_ERROR_COMPILE with the NVRTC log) and kjit_load_cached() for the load (e.g.
 *         #KJIT_ERROR_DRIVER_UNAVAILABLE); #KJIT_ERROR_INVALID_ARGUMENT for a NULL `kernel`.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_compile_and_load(const char *source, const char *keyword, const kjit_compile_options *options,
                                           kjit_kernel **kernel);

/**
 * @brief The mangled name of a loaded kernel.
 * @param[in] kernel A handle from kjit_load_cached(), or NULL.
 * @return NUL-terminated, owned by the handle, valid until it is released; NULL for a NULL handle.
 * @note Thread safe.
 */
KJIT_API const char *kjit_kernel_name(const kjit_kernel *kernel);

/**
 * @brief The cubin path a kernel was loaded from, as given to kjit_load_cached().
 * @param[in] kernel A handle from kjit_load_cached(), or NULL.
 * @return NUL-terminated, owned by the handle, valid until it is released; NULL for a NULL handle.
 * @note Thread safe.
 */
KJIT_API const char *kjit_kernel_cubin_path(const kjit_kernel *kernel);

/**
 * @brief The driver's kernel handle: a `CUkernel` (cast it; this header does not need cuda.h).
 *
 * A CUkernel is context-independent; cuLaunchKernel accepts it cast to CUfunction in the
 * current context (CUDA 12.0 and later).
 * @param[in] kernel A handle from kjit_load_cached(), or NULL.
 * @return Owned by libkjit, valid until the handle is released (do not unload its library);
 *         NULL for a NULL handle, and in a forked child for a handle its parent loaded.
 * @note Thread safe.
 */
KJIT_API void *kjit_kernel_cukernel(const kjit_kernel *kernel);

/**
 * @brief The loaded image the kernel belongs to: a `CUlibrary` (cast it), e.g. for
 *        cuLibraryGetGlobal. Shared by every handle on the same cubin version.
 * @param[in] kernel A handle from kjit_load_cached(), or NULL.
 * @return Owned by libkjit, valid until the handle is released (do not unload it); NULL for a
 *         NULL handle, and in a forked child for a handle its parent loaded.
 * @note Thread safe.
 */
KJIT_API void *kjit_kernel_culibrary(const kjit_kernel *kernel);

/**
 * @brief The kernel as a `CUfunction` in the calling thread's current CUDA context
 *        (cuKernelGetFunction), for APIs that need one (cuFuncSetAttribute, ...).
 * @param[in]  kernel   A handle from kjit_load_cached().
 * @param[out] function Receives the `CUfunction` (cast it), NULL on failure; owned by the
 *                      driver, valid while the handle and the context live.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     `*function` holds the function.
 * @retval KJIT_ERROR_INVALID_ARGUMENT A NULL argument.
 * @retval KJIT_ERROR_DRIVER           No current context, or the driver failed; the CUDA error
 *                                     name is in kjit_last_error(). Also a handle the parent
 *                                     loaded, used in a forked child.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_kernel_cufunction(const kjit_kernel *kernel, void **function);

/**
 * @brief Releases a handle from kjit_load_cached(). The loaded library is unloaded
 *        (cuLibraryUnload) when its last handle is released. NULL is accepted and ignored. In a
 *        forked child, a handle its parent loaded is freed without any driver call.
 * @param[in] kernel The handle to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each handle is released once, after its last use by any thread.
 */
KJIT_API void kjit_kernel_release(kjit_kernel *kernel);

/**
 * @brief Why a sidecar line was not used: the index into kjit_stats::sidecar_rejections.
 *        Append-only, like ::kjit_status.
 */
typedef enum kjit_sidecar_rejection {
    KJIT_SIDECAR_UNREADABLE = 0,      /**< A symlink, a folder, no permission, an I/O error. */
    KJIT_SIDECAR_TOO_LARGE = 1,       /**< Larger than a sidecar can be (not read). */
    KJIT_SIDECAR_EMPTY = 2,           /**< 0 bytes. */
    KJIT_SIDECAR_BARE_NAME = 3,       /**< One bare name, as older Python tools wrote: untrusted. */
    KJIT_SIDECAR_BAD_HEADER = 4,      /**< Not a kjit sidecar, or of another format version. */
    KJIT_SIDECAR_NO_LINE = 5,         /**< No valid line for the keyword asked for. */
    KJIT_SIDECAR_STALE = 6,           /**< The cubin changed since the line was written. */
    KJIT_SIDECAR_NAME_FAILS_RULE = 7, /**< The line's name does not pass the keyword rule. */
    KJIT_SIDECAR_DISTRUSTED = 8       /**< The driver found no symbol of the name it gave. */
} kjit_sidecar_rejection;

/** @brief Number of kjit_stats::sidecar_rejections slots (room for later reasons). */
#define KJIT_STATS_REJECTION_SLOTS 16
/** @brief Number of kjit_stats::errors slots, indexed by ::kjit_status (room for later ones). */
#define KJIT_STATS_STATUS_SLOTS 32

/**
 * @brief Process-wide counters since the library was loaded (since 0.2). They only grow: to
 *        measure a stretch of work, take a snapshot before and after and subtract. A forked
 *        child's go on from its parent's values at the fork.
 *
 * Filled by kjit_get_stats(). Like ::kjit_compile_options, it starts with `struct_size` and only
 * ever gains fields at the end. The counters are relaxed atomics updated without a lock, so
 * they cost nanoseconds and stay on in production; a snapshot taken while other threads work
 * is a consistent value for each counter, not across counters.
 */
typedef struct kjit_stats {
    /** Set by the caller to `sizeof(kjit_stats)`; the library fills that many bytes. */
    size_t struct_size;
    /** kjit_compile() calls answered from the cache (no NVRTC). */
    uint64_t compile_hits;
    /** kjit_compile() calls that found no usable entry. */
    uint64_t compile_misses;
    /** Misses that waited for another thread's compile of the same key and shared its result. */
    uint64_t compile_shared_waits;
    /** NVRTC compiles run (successful or not). */
    uint64_t nvrtc_compiles;
    /** Wall time spent in those NVRTC compiles, in nanoseconds. */
    uint64_t nvrtc_nanoseconds;
    /** Cache entries this process published. */
    uint64_t entries_published;
    /** Of which replaced a stale or damaged entry. */
    uint64_t entries_rebuilt;
    /** Names answered from a sidecar line (kjit_resolve_name(), kjit_load_cached(), hits). */
    uint64_t sidecar_hits;
    /** Sidecar hits that hashed the cubin to prove the line current: a young cubin, or one whose
        mtime has whole seconds (a tar copy). */
    uint64_t sidecar_content_checks;
    /** Names answered from the in-process memo (the sidecar could not be written). */
    uint64_t memo_hits;
    /** Lookups that found no sidecar file at all. */
    uint64_t sidecar_missing;
    /** Sidecars not used, by reason (::kjit_sidecar_rejection). */
    uint64_t sidecar_rejections[KJIT_STATS_REJECTION_SLOTS];
    /** Symbol-table scans (each resolution that no sidecar line or memo answered). */
    uint64_t scans;
    /** Sidecars written (after a scan, or to drop a content hash). */
    uint64_t sidecar_writes;
    /** Sidecar writes that failed (a read-only cache); the call still succeeded. */
    uint64_t sidecar_write_failures;
    /** Successful kjit_load_cached() calls. */
    uint64_t loads;
    /** Of which served from an image already loaded in this process (no file read). */
    uint64_t load_reuses;
    /** Cubins loaded through the driver (cuLibraryLoadData). */
    uint64_t driver_loads;
    /** Sidecar names the driver did not find, rescanned and rewritten. */
    uint64_t load_self_heals;
    /** Measurements of a size-limited cache after a publish. */
    uint64_t eviction_runs;
    /** Entries evicted for the size limit. */
    uint64_t evicted_entries;
    /** Bytes evicted for the size limit. */
    uint64_t evicted_bytes;
    /** Failures returned by kjit_* functions, indexed by ::kjit_status (errors[0] stays 0). */
    uint64_t errors[KJIT_STATS_STATUS_SLOTS];
    /** Stale temp folders (left by killed processes) swept after publishes. */
    uint64_t swept_temp_folders;
    /** Cluster tier (since 0.6; kjit_compile_options::remote_storage): local misses answered
        by an entry another node compiled (fetched, verified and published locally). */
    uint64_t remote_hits;
    /** Local misses the cluster tier had no entry for either. */
    uint64_t remote_misses;
    /** Round trips to a server that failed (down, reset, timed out) and commands it refused
        (e.g. a read-only user, a full server with `noeviction`); each call compiled on. */
    uint64_t remote_errors;
    /** Of remote_errors, timeouts (connect or operation). */
    uint64_t remote_timeouts;
    /** Values that failed verification (damaged, cut short, copied under another key): deleted
        there (unless read-only) and treated as misses. */
    uint64_t remote_corrupt;
    /** Entries this process stored on a server. */
    uint64_t remote_puts;
    /** Value bytes fetched from the servers. */
    uint64_t remote_bytes_in;
    /** Value bytes stored on the servers. */
    uint64_t remote_bytes_out;
    /** Leases this process took: it compiled a kernel for the whole cluster. */
    uint64_t remote_leases_owned;
    /** Misses that waited for another node's compile (its lease) instead of compiling. */
    uint64_t remote_lease_waits;
    /** Of those, waits whose holder vanished without an entry (it died): this process took
        the lease over. */
    uint64_t remote_lease_takeovers;
    /** Compile errors returned from another node's compile of the same key (shared for a
        minute), without running NVRTC here. */
    uint64_t remote_shared_failures;
} kjit_stats;

/** @brief Initializer for ::kjit_stats: the size set, every counter 0. */
#define KJIT_STATS_INIT { sizeof(kjit_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, { 0 }, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, { 0 }, 0, \
                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief Takes a snapshot of the process-wide counters (since 0.2).
 * @param[in,out] stats A struct with struct_size set (#KJIT_STATS_INIT or `sizeof`); the
 *                      library fills the first struct_size bytes. Only written during the call.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The snapshot was written.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `stats`, or a struct_size below `sizeof(size_t)` or
 *                                     above this library's `sizeof(kjit_stats)`.
 * @note Thread safe and lock-free.
 */
KJIT_API kjit_status kjit_get_stats(kjit_stats *stats);

/**
 * @name Option initializers (since 0.4)
 * For callers that cannot use the `*_INIT` macros (Python's ctypes, Rust, Julia): each sets a
 * struct's fields to exactly what its macro sets.
 * @{
 */

/**
 * @brief Fills a ::kjit_compile_options as #KJIT_COMPILE_OPTIONS_INIT does (since 0.4).
 *
 * Only the first `struct_size` bytes are written, so a caller built against an older, smaller
 * struct passes its own `sizeof` and nothing past it is touched.
 * @param[out] options     The struct to fill; its `struct_size` becomes `struct_size`.
 * @param[in]  struct_size `sizeof(kjit_compile_options)` as the caller was compiled with it.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The struct holds the defaults.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `options`, or a struct_size below `sizeof(size_t)` or
 *                                     above this library's `sizeof(kjit_compile_options)`;
 *                                     nothing is written.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_compile_options_init(kjit_compile_options *options, size_t struct_size);

/**
 * @brief Fills a ::kjit_compile_request as #KJIT_COMPILE_REQUEST_INIT does (since 0.4).
 * @param[out] request     The struct to fill (the first `struct_size` bytes only).
 * @param[in]  struct_size `sizeof(kjit_compile_request)` as the caller was compiled with it.
 * @return #KJIT_OK, or #KJIT_ERROR_INVALID_ARGUMENT for a NULL `request` or a struct_size
 *         below `sizeof(size_t)` or above this library's (nothing is written).
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_compile_request_init(kjit_compile_request *request, size_t struct_size);

/**
 * @brief Fills a ::kjit_batch_options as #KJIT_BATCH_OPTIONS_INIT does (since 0.4).
 * @param[out] options     The struct to fill (the first `struct_size` bytes only).
 * @param[in]  struct_size `sizeof(kjit_batch_options)` as the caller was compiled with it.
 * @return #KJIT_OK, or #KJIT_ERROR_INVALID_ARGUMENT for a NULL `options` or a struct_size
 *         below `sizeof(size_t)` or above this library's (nothing is written).
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_batch_options_init(kjit_batch_options *options, size_t struct_size);

/** @} */

/**
 * @name Cache maintenance (since 0.4)
 * What `kjit cache stats`, `prune`, `verify` and `clear` do, for any program: see the size of a
 * cache folder, bound it, check it and empty it. Every function takes the cache folder as
 * kjit_compile_options::cache_dir does: NULL or "" is the default folder ($KJIT_CACHE_DIR, else
 * $XDG_CACHE_HOME/kjit, else $HOME/.cache/kjit), a relative folder is taken against the working
 * directory, and a folder kjit_compile() would refuse (another user's, writable by others, under
 * an unsafe parent) is refused with #KJIT_ERROR_IO naming it. A folder that does not exist is
 * an empty cache: nothing to count, check or remove, and it is not created.
 *
 * Sizes are disk space as `du` counts it (blocks of each entry's folder and files), so a limit
 * bounds the disk. Entries are removed whole and atomically: a concurrent reader sees the whole
 * entry or a miss, never part of one, and the next kjit_compile() of a removed entry rebuilds it.
 * Removers (prune, clear, verify with fix, and the eviction kjit_compile() runs under a size
 * limit) hold an exclusive lock on `<cache>/.kjit-lock` and wait for each other; hits, loads and
 * publishes take no lock and are never blocked by them.
 * @{
 */

/**
 * @brief The absolute cache folder that kjit_compile() and the cache functions below use for a
 *        given `cache_dir` (since 0.4): the default for NULL or "", a relative folder made
 *        absolute against the working directory, `.` and `..` folded, no trailing `/`. Links
 *        are not resolved and nothing is checked or created.
 * @param[in]  cache_dir A folder, or NULL or "" for the default.
 * @param[out] path      Caller buffer for the NUL-terminated folder; may be NULL only when
 *                       path_size is 0.
 * @param[in]  path_size Size of `path` in bytes, including room for the NUL.
 * @param[out] path_len  If not NULL, receives strlen of the folder, also on
 *                       #KJIT_ERROR_BUFFER_TOO_SMALL.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     The folder was written (or only its length).
 * @retval KJIT_ERROR_INVALID_ARGUMENT No default: none of $KJIT_CACHE_DIR, $XDG_CACHE_HOME,
 *                                     $HOME is set; NULL `path` with non-zero path_size.
 * @retval KJIT_ERROR_IO               The working directory cannot be found.
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL Nothing but the length is written.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_cache_dir(const char *cache_dir, char *path, size_t path_size, size_t *path_len);

/**
 * @brief What the cluster tier's servers say of themselves (since 0.6), as text for people
 *        (`kjit cache stats --remote`): per server, its URL (password hidden), whether it can be
 *        reached, its Redis version, memory used and limit, eviction policy, evicted keys,
 *        keyspace hits and misses, key count, and the count of libkjit entries in the setting's
 *        namespace (a bounded SCAN).
 * @param[in]  remote_storage A setting as kjit_compile_options::remote_storage takes it; NULL or
 *                            "" for $KJIT_REMOTE_STORAGE.
 * @param[out] text      Caller buffer for the NUL-terminated text; may be NULL only when
 *                       `text_size` is 0 (length query).
 * @param[in]  text_size Size of `text` in bytes.
 * @param[out] text_len  If not NULL, receives the text's length without the NUL (also on
 *                       #KJIT_ERROR_BUFFER_TOO_SMALL).
 * @return #KJIT_OK (an unreachable server is said in the text, not an error), or:
 * @retval KJIT_ERROR_INVALID_ARGUMENT No setting (none given, $KJIT_REMOTE_STORAGE unset or
 *                                     "none"), a malformed one, or a libkjit built without
 *                                     hiredis; a NULL `text` with a non-zero size.
 * @retval KJIT_ERROR_IO               A password-file that cannot be read.
 * @retval KJIT_ERROR_BUFFER_TOO_SMALL `text_size` is too small: nothing written, `*text_len` set.
 * @note Thread safe. Each call asks the servers again (a few round trips each, within the
 *       setting's timeouts), so two calls may return different lengths: query with a buffer
 *       large enough (e.g. 64 KiB) rather than length first.
 */
KJIT_API kjit_status kjit_remote_describe(const char *remote_storage, char *text, size_t text_size, size_t *text_len);

/**
 * @brief What a cache folder holds, filled by kjit_cache_summarize(). Like ::kjit_stats, it starts
 *        with `struct_size` and only ever gains fields at the end. Times are nanoseconds since the
 *        Unix epoch (UTC), 0 when there is no entry.
 */
typedef struct kjit_cache_summary {
    /** Set by the caller to `sizeof(kjit_cache_summary)`; the library fills that many bytes. */
    size_t struct_size;
    /** Cache entries (one compiled kernel each). */
    uint64_t entries;
    /** Disk space of the entries and their variants files: what a size limit bounds. */
    uint64_t bytes;
    /** The size limit kjit_compile() applies here by default: $KJIT_CACHE_MAX_SIZE in bytes,
        0 when there is none (unset, empty or "0"). */
    uint64_t max_size;
    /** Folders and files in transit: entries being written or removed, and those left so by
        killed processes (swept once stale). */
    uint64_t in_transit;
    /** Their disk space. */
    uint64_t in_transit_bytes;
    /** Names in the folder that are not of the cache's shape; they are never touched. */
    uint64_t foreign;
    /** When the least recently used entry was last used (its recency record). */
    int64_t least_recent_use_ns;
    /** When the most recently used entry was last used. */
    int64_t most_recent_use_ns;
    /** When the oldest entry was compiled, to the second (from its manifest). */
    int64_t oldest_created_ns;
    /** When the newest entry was compiled, to the second. */
    int64_t newest_created_ns;
} kjit_cache_summary;

/** @brief Initializer for ::kjit_cache_summary: the size set, everything else 0. */
#define KJIT_CACHE_SUMMARY_INIT { sizeof(kjit_cache_summary), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief A cache folder's entries by target architecture, from kjit_cache_summarize(): an opaque
 *        handle owned by the caller, released once with kjit_cache_arches_release(). Read-only,
 *        so its accessors may be used from any thread.
 */
typedef struct kjit_cache_arches kjit_cache_arches;

/**
 * @brief Counts a cache folder's entries and their disk space (what `kjit cache stats` shows).
 *
 * Walks the folder's shards and reads each entry's manifest (for its arch and creation time);
 * no cubin is read and nothing is changed or locked, so it is safe at any time, and the counts
 * are those of a cache other processes may be changing meanwhile.
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (see above).
 * @param[in,out] summary   A struct with struct_size set (#KJIT_CACHE_SUMMARY_INIT or `sizeof`);
 *                          the library fills the first struct_size bytes.
 * @param[out]    arches    If not NULL, receives a new handle on the per-arch breakdown (release
 *                          it with kjit_cache_arches_release()); NULL on failure.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     `*summary` (and `*arches`) are filled.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `summary`, a struct_size below `sizeof(size_t)` or
 *                                     above this library's, no default folder, or a malformed
 *                                     $KJIT_CACHE_MAX_SIZE.
 * @retval KJIT_ERROR_IO               The folder is not a folder, cannot be read, or is refused
 *                                     (see above); the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_cache_summarize(const char *cache_dir, kjit_cache_summary *summary,
                                          kjit_cache_arches **arches);

/**
 * @brief Number of architectures in a breakdown.
 * @param[in] arches A handle from kjit_cache_summarize(), or NULL.
 * @return How many distinct architectures the entries have; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_cache_arches_count(const kjit_cache_arches *arches);

/**
 * @brief One architecture's name, e.g. "sm_90a"; "unknown" gathers entries whose manifest could
 *        not be read. Names are in ascending byte order.
 * @param[in] arches A handle from kjit_cache_summarize().
 * @param[in] index  0 to kjit_cache_arches_count() - 1.
 * @return NUL-terminated, owned by the handle, valid until it is released; NULL for a NULL
 *         handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_cache_arches_name(const kjit_cache_arches *arches, size_t index);

/**
 * @brief How many entries one architecture has.
 * @param[in] arches A handle from kjit_cache_summarize().
 * @param[in] index  0 to kjit_cache_arches_count() - 1.
 * @return The count; 0 for a NULL handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API uint64_t kjit_cache_arches_entries(const kjit_cache_arches *arches, size_t index);

/**
 * @brief The disk space of one architecture's entries.
 * @param[in] arches A handle from kjit_cache_summarize().
 * @param[in] index  0 to kjit_cache_arches_count() - 1.
 * @return Bytes; 0 for a NULL handle or an index out of range.
 * @note Thread safe.
 */
KJIT_API uint64_t kjit_cache_arches_bytes(const kjit_cache_arches *arches, size_t index);

/**
 * @brief Releases a breakdown; its names go with it. NULL is accepted and ignored.
 * @param[in] arches The handle to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each handle is released once, after its last use by any thread.
 */
KJIT_API void kjit_cache_arches_release(kjit_cache_arches *arches);

/** @brief No bound: the value of kjit_prune_options::max_size and
 *         kjit_prune_options::older_than_s that leaves it out. */
#define KJIT_PRUNE_NO_LIMIT UINT64_MAX

/**
 * @brief Options for kjit_cache_prune(). Set `struct_size = sizeof(kjit_prune_options)` (or
 *        start from #KJIT_PRUNE_OPTIONS_INIT or kjit_prune_options_init()); fields are only
 *        ever appended. NULL options mean all defaults: no bound, so only the sweep of stale
 *        folders in transit and of variants files of removed entries is done.
 */
typedef struct kjit_prune_options {
    /** `sizeof(kjit_prune_options)` as the caller was compiled with it. */
    size_t struct_size;
    /** Remove the least recently used entries until the rest take at most this many bytes
        (0 removes every entry not in use). #KJIT_PRUNE_NO_LIMIT (the default): no size bound. */
    uint64_t max_size;
    /** Remove the entries not used for this many seconds (0: every entry not in use); at most
        9223372036 (about 292 years). #KJIT_PRUNE_NO_LIMIT (the default): no age bound. */
    uint64_t older_than_s;
} kjit_prune_options;

/** @brief Initializer for ::kjit_prune_options: the size set, no bound. */
#define KJIT_PRUNE_OPTIONS_INIT { sizeof(kjit_prune_options), KJIT_PRUNE_NO_LIMIT, KJIT_PRUNE_NO_LIMIT }

/**
 * @brief Fills a ::kjit_prune_options as #KJIT_PRUNE_OPTIONS_INIT does (since 0.4).
 * @param[out] options     The struct to fill (the first `struct_size` bytes only).
 * @param[in]  struct_size `sizeof(kjit_prune_options)` as the caller was compiled with it.
 * @return #KJIT_OK, or #KJIT_ERROR_INVALID_ARGUMENT for a NULL `options` or a struct_size
 *         below `sizeof(size_t)` or above this library's (nothing is written).
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_prune_options_init(kjit_prune_options *options, size_t struct_size);

/**
 * @brief What kjit_cache_prune() or kjit_cache_clear() did. Filled by the library; like
 *        ::kjit_stats, it starts with `struct_size` and only ever gains fields at the end.
 */
typedef struct kjit_prune_report {
    /** Set by the caller to `sizeof(kjit_prune_report)`; the library fills that many bytes. */
    size_t struct_size;
    /** Entries removed. */
    uint64_t removed_entries;
    /** Their disk space. */
    uint64_t removed_bytes;
    /** Entries that would have gone but were in use, and were kept. */
    uint64_t spared_in_use;
    /** Stale folders in transit (left by killed processes) removed. */
    uint64_t removed_in_transit;
    /** Variants files none of whose entries is left, removed. */
    uint64_t removed_variants_files;
    /** Entries left. */
    uint64_t kept_entries;
    /** Disk space of what is left (entries and variants files). */
    uint64_t kept_bytes;
} kjit_prune_report;

/** @brief Initializer for ::kjit_prune_report: the size set, every count 0. */
#define KJIT_PRUNE_REPORT_INIT { sizeof(kjit_prune_report), 0, 0, 0, 0, 0, 0, 0 }

/**
 * @brief Removes cache entries by recency (what `kjit cache prune` does).
 *
 * First the entries not used for kjit_prune_options::older_than_s, then the least recently used
 * until the rest fit in kjit_prune_options::max_size; stale folders in transit and variants files
 * of removed entries go too. Recency is libkjit's own record, set by hits, loads and running
 * batches (docs/cache-layout.md). An entry in use is never removed (it is counted in
 * kjit_prune_report::spared_in_use): one used within the last two minutes, or handed out by a
 * kjit_compile_batch() of this process that is running or returned less than two minutes ago. An
 * entry whose recency record lies in the future counts as used now, and its record is set to now.
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (see above).
 * @param[in]     options   NULL for the defaults, else a struct with struct_size set.
 * @param[in,out] report    NULL, or a struct with struct_size set (#KJIT_PRUNE_REPORT_INIT or
 *                          `sizeof`): the library fills its first struct_size bytes.
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     Done (also for a folder that does not exist).
 * @retval KJIT_ERROR_INVALID_ARGUMENT A struct_size below `sizeof(size_t)` or above this
 *                                     library's, an older_than_s over 9223372036 other than
 *                                     #KJIT_PRUNE_NO_LIMIT, or no default folder. Nothing is
 *                                     removed.
 * @retval KJIT_ERROR_IO               The folder is not a folder, cannot be read or locked, or is
 *                                     refused (see above); the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe; blocks while another remover (in any process) holds the cache lock.
 */
KJIT_API kjit_status kjit_cache_prune(const char *cache_dir, const kjit_prune_options *options,
                                      kjit_prune_report *report);

/**
 * @brief Removes every cache entry, in use or not, every variants file and every stale folder in
 *        transit (what `kjit cache clear` does). Publishes in progress in other processes are
 *        left to finish; a process holding a loaded kernel keeps it (the driver has its image).
 * @param[in]     cache_dir The cache folder; NULL or "" for the default (see above).
 * @param[in,out] report    NULL, or a struct with struct_size set: filled as by
 *                          kjit_cache_prune().
 * @return #KJIT_OK, or the failure's status (its detail in kjit_last_error()), as for
 *         kjit_cache_prune().
 * @note Thread safe; blocks while another remover holds the cache lock.
 */
KJIT_API kjit_status kjit_cache_clear(const char *cache_dir, kjit_prune_report *report);

/**
 * @brief What kjit_cache_verify() found wrong with a path. Append-only, like ::kjit_status;
 *        kjit_cache_problem_string() names each value.
 */
typedef enum kjit_cache_problem {
    KJIT_CACHE_MISPLACED = 0,          /**< An entry in the wrong shard, or an entry name that is
                                            not a folder. */
    KJIT_CACHE_MISSING_FILE = 1,       /**< The manifest, source, cubin or dependency list is missing. */
    KJIT_CACHE_BAD_MANIFEST = 2,       /**< The manifest is unreadable, fails its check line, or is
                                            another entry's. */
    KJIT_CACHE_BAD_CUBIN = 3,          /**< The cubin is not a CUDA ELF, not the bytes published, or
                                            lacks its kernel. */
    KJIT_CACHE_TRUNCATED_CUBIN = 4,    /**< The cubin's size differs from the one published. */
    KJIT_CACHE_SIDECAR_MISSING = 5,    /**< No `kernel.cubin.name` sidecar. */
    KJIT_CACHE_SIDECAR_DAMAGED = 6,    /**< The sidecar is unreadable, garbage, or has no line for
                                            the entry's keyword. */
    KJIT_CACHE_SIDECAR_STALE = 7,      /**< The sidecar's line is for another version of the cubin. */
    KJIT_CACHE_SIDECAR_WRONG_NAME = 8, /**< The sidecar's line names another kernel than the manifest. */
    KJIT_CACHE_STALE_TEMP = 9          /**< A temp folder or file left by a killed process. */
} kjit_cache_problem;

/**
 * @brief Names a ::kjit_cache_problem as `kjit cache verify` prints it ("truncated_cubin",
 *        "sidecar_damaged", ...: the enumerator's name after `KJIT_CACHE_`, in lower case).
 * @param[in] problem Any value; values this version does not know give "unknown".
 * @return A static string, never NULL, owned by the library.
 * @note Thread safe. Does not change kjit_last_error().
 */
KJIT_API const char *kjit_cache_problem_string(int problem);

/**
 * @brief The findings of kjit_cache_verify(): an opaque handle owned by the caller, released
 *        once with kjit_verify_report_release(). Read-only, so its accessors may be used from
 *        any thread.
 */
typedef struct kjit_verify_report kjit_verify_report;

/**
 * @brief Checks every entry of a cache folder and, with `fix`, repairs it (what `kjit cache
 *        verify` does).
 *
 * An entry is sound when it is complete, its manifest passes its check line, its cubin is a
 * CUDA ELF of the size and XXH3-128 recorded at publish holding the kernel its manifest names,
 * and its sidecar agrees with the cubin and the manifest. Stale temp folders and files left by
 * killed processes are found too. Without `fix` nothing is changed and no lock is taken. With
 * `fix`, under the cache lock: a damaged sidecar is rebuilt from the manifest's name (only from
 * a manifest that passes its check, with the name in the cubin's symbols and passing the keyword
 * rule), an entry that cannot be repaired is removed (the next kjit_compile() rebuilds it) and
 * stale temps are removed. Entries being published or removed meanwhile are not reported.
 * @param[in]  cache_dir The cache folder; NULL or "" for the default (see above).
 * @param[in]  fix       Non-zero to repair what is found.
 * @param[out] report    Receives a new report on #KJIT_OK (release it with
 *                       kjit_verify_report_release()), NULL on failure.
 * @return #KJIT_OK also when problems were found (the report lists them), or the failure's
 *         status (its detail in kjit_last_error()):
 * @retval KJIT_OK                     `*report` holds the findings.
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL `report`, or no default folder.
 * @retval KJIT_ERROR_IO               The folder is not a folder, cannot be read or (with fix)
 *                                     locked, or is refused (see above); the message names it.
 * @retval KJIT_ERROR_OUT_OF_MEMORY    An allocation failed.
 * @retval KJIT_ERROR_INTERNAL         A bug in libkjit.
 * @note Thread safe; with `fix` it blocks while another remover holds the cache lock.
 */
KJIT_API kjit_status kjit_cache_verify(const char *cache_dir, int fix, kjit_verify_report **report);

/**
 * @brief How many entries were checked (entries of the cache's shape, sound or not).
 * @param[in] report A report from kjit_cache_verify(), or NULL.
 * @return The count; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_verify_report_entries_checked(const kjit_verify_report *report);

/**
 * @brief How many of the entries checked were sound.
 * @param[in] report A report from kjit_cache_verify(), or NULL.
 * @return The count; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_verify_report_entries_ok(const kjit_verify_report *report);

/**
 * @brief How many problems were found (0: the cache is sound).
 * @param[in] report A report from kjit_cache_verify(), or NULL.
 * @return The count; 0 for NULL.
 * @note Thread safe.
 */
KJIT_API size_t kjit_verify_report_count(const kjit_verify_report *report);

/**
 * @brief The path a problem was found at: an entry folder, or a temp folder or file.
 * @param[in] report A report from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return NUL-terminated, owned by the report, valid until it is released; NULL for a NULL
 *         report or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_verify_report_path(const kjit_verify_report *report, size_t index);

/**
 * @brief What a problem is.
 * @param[in] report A report from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return A ::kjit_cache_problem (a value this header may not know yet, from a newer library:
 *         treat it as damage); -1 for a NULL report or an index out of range.
 * @note Thread safe.
 */
KJIT_API int kjit_verify_report_kind(const kjit_verify_report *report, size_t index);

/**
 * @brief What exactly is wrong, for people: names the file, e.g. "'.../kernel.cubin' has 100
 *        bytes; 5176 were published".
 * @param[in] report A report from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return NUL-terminated, owned by the report, valid until it is released; NULL for a NULL
 *         report or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_verify_report_detail(const kjit_verify_report *report, size_t index);

/**
 * @brief Whether a problem was repaired (only with `fix`).
 * @param[in] report A report from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return 1 when it was, 0 when not (always 0 without `fix`), -1 for a NULL report or an index
 *         out of range.
 * @note Thread safe.
 */
KJIT_API int kjit_verify_report_fixed(const kjit_verify_report *report, size_t index);

/**
 * @brief What `fix` did about a problem, for people, e.g. "rebuilt the sidecar from the cubin
 *        and the manifest", or why it could not.
 * @param[in] report A report from kjit_cache_verify().
 * @param[in] index  0 to kjit_verify_report_count() - 1.
 * @return NUL-terminated, owned by the report, valid until it is released; "" without `fix`;
 *         NULL for a NULL report or an index out of range.
 * @note Thread safe.
 */
KJIT_API const char *kjit_verify_report_action(const kjit_verify_report *report, size_t index);

/**
 * @brief Releases a verify report; its strings go with it. NULL is accepted and ignored.
 * @param[in] report The report to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each report is released once, after its last use by any thread.
 */
KJIT_API void kjit_verify_report_release(kjit_verify_report *report);

/** @} */

KJIT_END_DECLS

#endif /* KJIT_KJIT_H */
