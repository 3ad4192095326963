/**
 * @file kjit.h
 * @brief libkjit: JIT-compile CUDA C++ with NVRTC into an on-disk cubin cache and load cached
 *        kernels fast. This header is the core of the public C ABI (compile, resolve, load) and
 *        includes the other two, so `#include <kjit/kjit.h>` declares all of it.
 *
 * The public C ABI is three headers, each of which may be included alone or in any order
 * (each includes this one, and this one includes the others at its end):
 *  - kjit.h (this one): statuses and errors, versions, kjit_resolve_name(), kjit_compile() and
 *    its options, kjit_load_cached() and the ::kjit_kernel handle.
 *  - kjit_batch.h: kjit_compile_batch(), a cold sweep compiled at once.
 *  - kjit_cache.h: kjit_get_stats() counters, and looking after a cache folder (summarize,
 *    prune, clear, verify).
 *
 * They compile as strict C99 and as C++, and need no CUDA header: driver handles are returned
 * as `void *`, to be cast to `CUkernel`, `CUlibrary` or `CUfunction`.
 *
 * @par Conventions shared by every function of the three headers
 *  - Every function that can fail returns a ::kjit_status; #KJIT_OK (0) is success. On failure
 *    the calling thread's detail text is available from kjit_last_error(). (The ::kjit_kernel
 *    accessors cannot fail on a valid handle and return their value directly.)
 *  - Out strings are written NUL-terminated into caller buffers. The matching `*_len` out
 *    parameter (may be NULL) receives the full length without the NUL, also when the buffer
 *    is too small (#KJIT_ERROR_BUFFER_TOO_SMALL). Passing a NULL buffer with size 0 asks for
 *    the length only and returns #KJIT_OK.
 *  - Structs the caller passes in start with `struct_size` and only ever gain fields at the
 *    end. Each options struct has a `*_INIT` macro and, directly beside it, a `*_init()`
 *    function that sets exactly the same fields, for callers that cannot use macros (Python's
 *    ctypes, Rust, Julia).
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
 *    kjit_kernel_release(); so does a ::kjit_prepared from kjit_prepare() (kjit_prepared_release()),
 *    a ::kjit_batch_result from kjit_compile_batch(), released
 *    with kjit_batch_result_release(), a ::kjit_cache_arches from kjit_cache_summarize()
 *    (kjit_cache_arches_release()) and a ::kjit_verify_report from kjit_cache_verify()
 *    (kjit_verify_report_release()). The `CUkernel` and `CUlibrary` it hands out are owned by libkjit,
 *    the `CUfunction` of kjit_kernel_cufunction() by the driver.
 */
/**
 * @mainpage libkjit API reference
 *
 * The public C ABI is three headers; `#include <kjit/kjit.h>` declares all of it, and each
 * may also be included alone. The conventions shared by all three (status codes, out buffers,
 * ownership, threads) are on the page of @ref kjit.h.
 *
 * @ref kjit.h, the core:
 *  - kjit_compile(), kjit_compile_named(): compile CUDA C++ with NVRTC into the on-disk cubin
 *    cache, or find it there (options: ::kjit_compile_options, #KJIT_COMPILE_OPTIONS_INIT,
 *    kjit_compile_options_init(), ::kjit_header).
 *  - kjit_resolve_name(): the mangled name of a kernel in a cubin, by keyword.
 *  - kjit_load_cached(), kjit_compile_and_load(): load a cubin's kernel through the CUDA driver
 *    as a ::kjit_kernel; its accessors kjit_kernel_name(), kjit_kernel_cubin_path(),
 *    kjit_kernel_cukernel(), kjit_kernel_culibrary(), kjit_kernel_cufunction();
 *    kjit_kernel_release().
 *  - ::kjit_status, kjit_status_string(), kjit_last_error(): results and their detail.
 *  - kjit_version(), kjit_version_string(), #KJIT_VERSION_NUMBER: versions.
 *
 * @ref kjit_batch.h, batch compile (docs/batch.md):
 *  - kjit_compile_batch(): a cold sweep at once: hits first, duplicates merged, misses on a
 *    pool of workers sharing NVRTC's precompiled header (::kjit_compile_request,
 *    ::kjit_batch_options, ::kjit_batch_progress_fn, ::kjit_batch_result and its accessors).
 *
 * @ref kjit_cache.h, statistics and cache maintenance (docs/cache-layout.md, docs/cli.md):
 *  - kjit_get_stats(), ::kjit_stats: process-wide counters (hits, misses, NVRTC time, sidecar
 *    use, loads, eviction, errors by status).
 *  - kjit_cache_dir(), kjit_remote_describe(), kjit_remote_check(): the cache folder in use,
 *    the cluster servers, a cluster setting checked.
 *  - Three maintenance reports, documented in one shape: kjit_cache_summarize()
 *    (::kjit_cache_summary, ::kjit_cache_arches), kjit_cache_prune() and kjit_cache_clear()
 *    (::kjit_prune_options, ::kjit_prune_report), kjit_cache_verify() (::kjit_verify_report,
 *    ::kjit_cache_problem): what `kjit cache stats/prune/clear/verify` do.
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
#define KJIT_VERSION_MINOR 15
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
    KJIT_ERROR_CANCELLED = 13,          /**< A kjit_compile_batch() item that was not started because the
                                             progress callback cancelled the batch (since 0.3). */
    KJIT_ERROR_LINK = 14,               /**< nvJitLink refused a link (an unresolved function, an input
                                             for another arch, a bad link option: its log, naming the
                                             input, is in kjit_last_error()), or no usable nvJitLink could
                                             be loaded (since 0.10). */
    KJIT_ERROR_NOT_CACHED = 15          /**< A miss where compiling is refused (#KJIT_COMPILE_NEVER:
                                             kjit_compile_options::compile_mode, or $KJIT_NO_COMPILE=1):
                                             no cache, seed or cluster tier holds the kernel, and nothing
                                             was compiled; the message names the request and how to warm
                                             it (since 0.11). */
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
 * A thread's repeat of a call it was answered from a sidecar at least 2 seconds old opens
 * nothing: a stat of the cubin and of the sidecar prove both unchanged (docs/sidecar-format.md).
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
 * @brief Whether a miss may compile (kjit_compile_options::compile_mode; since 0.11). A serving
 *        process refuses to compile: every kernel it needs was compiled ahead of time (a warm
 *        cache, a seed, the cluster tier), and one that was not is an error it can act on, not
 *        seconds of NVRTC in the middle of serving (docs/serving.md).
 */
typedef enum kjit_compile_mode {
    KJIT_COMPILE_DEFAULT = 0, /**< $KJIT_NO_COMPILE: "1" or "never" is #KJIT_COMPILE_NEVER, "warn"
                                   #KJIT_COMPILE_WARN; unset, "" or "0" #KJIT_COMPILE_ALWAYS. */
    KJIT_COMPILE_ALWAYS = 1,  /**< A miss compiles (the behaviour before 0.11). */
    KJIT_COMPILE_WARN = 2,    /**< A miss compiles, and logs one warning per kernel and process
                                   naming it: a staging run that looks for what was not warmed. */
    KJIT_COMPILE_NEVER = 3    /**< A miss is #KJIT_ERROR_NOT_CACHED, at once: the local cache, the
                                   seeds and the cluster tier (a fetch, never a lease) are asked,
                                   NVRTC is neither loaded nor run. */
} kjit_compile_mode;

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
    /** Cache folder. NULL or "" (default): $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else
        $HOME/.cache/kjit. Created (mode 0700) when missing; a relative folder is taken against
        the working directory. An unsafe folder (writable by others, another user's, under a
        parent writable by others) is #KJIT_ERROR_IO unless it is a team cache; which folders,
        links and team caches are trusted: docs/cache-layout.md, "Where". */
    const char *cache_dir;
    /** Target, a real architecture such as "sm_90a" or "sm_100a" (a cubin is required, so
        "compute_XX" is refused). Default (NULL or ""): $KJIT_ARCH, else the current GPU's
        (device 0's compute capability, as plain "sm_XY") through the driver when one is
        present, else #KJIT_ERROR_INVALID_ARGUMENT. */
    const char *arch;
    /** Extra NVRTC options in order, e.g. "-std=c++17", "-DTILE=128"; NULL for none. Not
        -arch (use arch). NVRTC's precompiled-header options are rewritten: `--pch` uses
        libkjit's own PCH (kjit_batch_options::pch), `--create-pch`, `--use-pch` and `--pch-dir`
        are #KJIT_ERROR_INVALID_ARGUMENT; the full table: docs/batch.md, "Precompiled headers". */
    const char *const *nvrtc_options;
    /** Number of entries in nvrtc_options (none may be NULL). */
    size_t nvrtc_option_count;
    /** Folders searched for `#include`, in order. The headers a compile reads from them enter
        the cache key by content: editing one gives a miss, never a stale hit. NULL for none. */
    const char *const *include_paths;
    /** Number of entries in include_paths (none may be NULL). */
    size_t include_path_count;
    /** In-memory headers; NULL for none. */
    const kjit_header *headers;
    /** Number of entries in headers. */
    size_t header_count;
    /** Optional C++ name expression such as "gemm<128, 64>", lowered with
        nvrtcGetLoweredName; the lowered name must pass the keyword rule for `keyword`. */
    const char *name_expression;
    /** Size limit of the cache folder in bytes, as disk space (since 0.2). 0 (default):
        $KJIT_CACHE_MAX_SIZE (e.g. "5G"; K, M, G, T are powers of 1024; "0" or unset: no
        limit; malformed: #KJIT_ERROR_INVALID_ARGUMENT). UINT64_MAX: no limit, whatever the
        variable says. Misses evict the least recently used entries to below it; entries used
        in the last two minutes are spared and hits never evict: docs/cache-layout.md, "Size
        limit and eviction". */
    uint64_t max_cache_size;
    /** The cluster tier (since 0.6): Redis servers shared by a cluster's nodes, asked on a
        local miss only, so each kernel compiles once per cluster. NULL or "" (default):
        $KJIT_REMOTE_STORAGE, else none; "none": none, whatever the environment says. Syntax
        (ccache's): servers such as `redis://HOST[:PORT][/DB]` and options such as
        `namespace=NAME`, separated by blanks. A malformed setting, or any but "none" in a
        build without hiredis, is #KJIT_ERROR_INVALID_ARGUMENT on the first local miss. Fails
        open: a server that is down or slow never fails a call. Syntax, options and behaviour:
        docs/remote.md. */
    const char *remote_storage;
    /** The NVRTC program's name (since 0.7), as the caller's own nvrtcCreateProgram call would
        give it, e.g. "gemm_128x64.cu" or "kernels/gemm.cu": NVRTC's log, device asserts and the
        cubin name it, so the cubin is the one that call makes, and it is in the key. NULL or ""
        (default): "source.cu". As in NVRTC, the source's quoted includes are looked up first
        in the name's folder (taken against the working directory when relative). A name
        ending in '/' is #KJIT_ERROR_INVALID_ARGUMENT. */
    const char *program_name;
    /** Seed caches (since 0.9): cache folders searched, in order, after the local cache and
        before the cluster tier, and never written (no lock, no recency record, no temp file:
        a read-only mount or a folder baked into a container image). An entry found in one is
        verified as a downloaded one is (its manifest's check line, its cubin's size and
        XXH3-128, the kernel's name chosen again; its recorded headers as they are here) and
        published into the local cache, so the next hits are local. NULL with seed_dir_count 0
        (default): $KJIT_CACHE_SEED, folders separated by ':'; the single entry "none": no seed,
        whatever the environment says. Relative folders are taken against the working directory.
        Fails open: a missing seed folder is skipped (said at debug level), one the caller may
        not trust (another user's and not root's, writable by others, a team cache of a group
        the caller is not in) is skipped with a warning saying why, a damaged entry is compiled
        instead (the seed is left as it is). `kjit cache export` makes one: docs/cache-layout.md,
        "Seed caches". */
    const char *const *seed_dirs;
    /** Number of entries in seed_dirs (none may be NULL); 0: $KJIT_CACHE_SEED. */
    size_t seed_dir_count;
    /** Link-time inputs (since 0.10): files linked with the kernel by nvJitLink, each LTO-IR
        (NVRTC's or nvcc's `-dlto` output), a cubin, a fatbin, PTX, a relocatable host object
        (`.o` with device code) or a library of them (`.a`), told apart by their content, not
        their names. With any, the source is compiled to LTO-IR (`-dlto`, relocatable device
        code), linked with them in order for `arch` (`-arch=<arch> -lto`, then link_options),
        and the linked cubin is the entry: its kernel is named and loaded as any other. Each
        file's content (not its path) is in the cache key, so editing one is a miss and putting
        it back hits the earlier entry; the hit memo proves them unchanged by their stat.
        nvJitLink is loaded only by a process that links (the toolkit's `libnvJitLink.so.<major>`,
        or $KJIT_LIBNVJITLINK): docs/link.md. A missing or unreadable file is #KJIT_ERROR_IO, a
        file of no kind above #KJIT_ERROR_INVALID_ARGUMENT, nvJitLink's refusal (an input for
        another arch, an unresolved function) #KJIT_ERROR_LINK with its log naming the input;
        nothing is published then. NULL with link_input_count 0 (default): no link, a plain
        NVRTC compile. */
    const char *const *link_inputs;
    /** Number of entries in link_inputs (none may be NULL or ""). */
    size_t link_input_count;
    /** Extra nvJitLink options in order (since 0.10), e.g. "-O3", "-maxrregcount=128",
        "-ftz=1"; in the key. Not -arch (use arch) nor -lto (always given). NULL for none;
        ignored without link inputs. */
    const char *const *link_options;
    /** Number of entries in link_options (none may be NULL). */
    size_t link_option_count;
    /** Whether a miss may compile (since 0.11): a ::kjit_compile_mode, #KJIT_COMPILE_DEFAULT
        ($KJIT_NO_COMPILE) by default. Not in the key: a hit is the same hit in every mode. */
    int compile_mode;
    /** Must be 0 (since 0.12): keeps the struct free of padding before base_dirs. */
    int reserved;
    /** Base folders (since 0.12), as ccache's base_dir: where the cubin may name the folder a
        header was read from (line information, __FILE__, assert), a folder under one of these
        is keyed by its path relative to it, so a cache built under one install prefix hits
        under another with the same files. Absolute folders, in order (the same list on every
        node that shares entries). NULL with base_dir_count 0 (default): $KJIT_BASE_DIRS,
        folders separated by ':'; the single entry "none": none, whatever the environment
        says. */
    const char *const *base_dirs;
    /** Number of entries in base_dirs (none may be NULL or ""); 0: $KJIT_BASE_DIRS. */
    size_t base_dir_count;
} kjit_compile_options;

/** @brief Initializer for ::kjit_compile_options: the size set, everything else default. */
#define KJIT_COMPILE_OPTIONS_INIT { sizeof(kjit_compile_options), NULL, NULL, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL, 0, 0, 0, NULL, 0 }

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
 * @retval KJIT_ERROR_NOT_FOUND        No symbol of the fresh cubin matches the keyword (for a
 *                                     link, also a linked cubin with no kernel at all).
 * @retval KJIT_ERROR_AMBIGUOUS        Several symbols of the fresh cubin match the keyword.
 * @retval KJIT_ERROR_IO               The cache folder cannot be created or written, or a header
 *                                     under the include paths or a link input cannot be read; a
 *                                     read-only cache still answers hits.
 * @retval KJIT_ERROR_LINK             nvJitLink refused the link (its log, naming the input), or
 *                                     no usable nvJitLink could be loaded (only with link inputs).
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
 * A repeat costs the hit memo's check (one look at the header watch's inotify queue, or an
 * `lstat` of the cubin where it cannot vouch: docs/cache-layout.md, "The hit memo") and the
 * loader's reuse of the library it already loaded (one `stat`, while a handle to it is alive):
 * no sidecar read, no cubin read, no driver call.
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
 * @brief A prepared compile request (since 0.14): kjit_prepare() checks and copies a request
 *        once, and each kjit_prepared_compile() answers it without hashing its source or
 *        options again. Opaque; see kjit_prepare().
 */
typedef struct kjit_prepared kjit_prepared;

/**
 * @brief Prepares a compile request (since 0.14), for a caller that asks for the same kernel
 *        again and again (a kernel library's launch path, as jitify2's `ProgramCache` is used).
 *
 * Checks the arguments as kjit_compile() does and keeps a copy of all of them, with the
 * defaults they leave unset settled now: the cache folder, the arch and the base folders
 * ($KJIT_CACHE_DIR, $KJIT_ARCH or the GPU, $KJIT_BASE_DIRS), the other settings from the
 * environment ($KJIT_COMPILE_WAIT, $KJIT_CACHE_MAX_SIZE, $KJIT_HIT_MEMO), as a compiled regular
 * expression keeps its flags: a variable changed later does not reach a prepared request. It
 * compiles nothing and touches no file: the first kjit_prepared_compile() does.
 *
 * Each kjit_prepared_compile() then gives exactly what kjit_compile_named() of the same
 * arguments would give at that moment: the request's hashes are taken once, here, but every
 * answer is still proven current as a repeat of kjit_compile() is (the header watch over the
 * files the request reads, the cache folder, the entry), so a header edited, a cache folder
 * replaced or an entry removed since gives the new answer, compiled again where needed. A
 * relative include path or cache folder is taken against the working directory of each call.
 *
 * @param[in]  source   NUL-terminated CUDA C++ source. Copied.
 * @param[in]  keyword  The kernel keyword (DESIGN keyword rule). Copied.
 * @param[in]  options  As for kjit_compile(), or NULL for all defaults; every string and list
 *                      it points at is copied, so the caller may free or change them after.
 * @param[out] prepared Receives the new handle (the caller's: kjit_prepared_release()), NULL on
 *                      failure.
 * @return #KJIT_OK, or what kjit_compile() would return for arguments that are wrong (its
 *         detail in kjit_last_error()):
 * @retval KJIT_ERROR_INVALID_ARGUMENT A NULL `source`, `keyword` or `prepared`; an options
 *                                     struct kjit_compile() refuses (the message names the field);
 *                                     a default that cannot be settled (no arch and no GPU, a bad
 *                                     $KJIT_* value).
 * @retval KJIT_ERROR_OUT_OF_MEMORY    The copy could not be made.
 * @note Thread safe. A handle is plain data: it may be used from any number of threads at once,
 *       and in a child forked after it was made (where it answers from the child's own state).
 */
KJIT_API kjit_status kjit_prepare(const char *source, const char *keyword, const kjit_compile_options *options,
                                  kjit_prepared **prepared);

/**
 * @brief The cached cubin's path and the kernel's mangled name for a prepared request (since
 *        0.14): kjit_compile_named() of the arguments given to kjit_prepare(), compiling on a
 *        miss, with the buffer rules of kjit_compile_named().
 * @param[in]  prepared        A handle from kjit_prepare().
 * @param[out] cubin_path      Receives the absolute cubin path; or NULL with size 0.
 * @param[in]  cubin_path_size Size of `cubin_path` in bytes.
 * @param[out] cubin_path_len  Receives the path's length without the NUL; may be NULL.
 * @param[out] name            Receives the kernel's mangled name; or NULL with size 0 (the path
 *                             alone, as kjit_compile()).
 * @param[in]  name_size       Size of `name` in bytes.
 * @param[out] name_len        Receives the name's length without the NUL; may be NULL.
 * @return kjit_compile_named()'s statuses (#KJIT_ERROR_INVALID_ARGUMENT also for a NULL
 *         `prepared`), with its detail in kjit_last_error().
 * @note Thread safe: any number of threads may use one handle at once.
 */
KJIT_API kjit_status kjit_prepared_compile(const kjit_prepared *prepared, char *cubin_path, size_t cubin_path_size,
                                           size_t *cubin_path_len, char *name, size_t name_size, size_t *name_len);

/**
 * @brief kjit_compile_and_load() of a prepared request (since 0.14): its cubin, compiled on a
 *        miss, loaded.
 * @param[in]  prepared A handle from kjit_prepare().
 * @param[out] kernel   Receives the loaded kernel (the caller's: kjit_kernel_release()), NULL
 *                      on failure.
 * @return kjit_compile_and_load()'s statuses (#KJIT_ERROR_INVALID_ARGUMENT also for a NULL
 *         `prepared`), with its detail in kjit_last_error().
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_prepared_load(const kjit_prepared *prepared, kjit_kernel **kernel);

/**
 * @brief Releases a handle from kjit_prepare() (since 0.14). NULL is accepted and ignored.
 *        What it answered stays valid: paths and names were copied out, kernels are released on
 *        their own.
 * @param[in] prepared The handle to release, or NULL. It must not be used afterwards.
 * @note Thread safe, but each handle is released once, after its last use by any thread.
 */
KJIT_API void kjit_prepared_release(kjit_prepared *prepared);

/**
 * @brief Starts recording every distinct request this process makes (since 0.11): each
 *        kjit_compile(), kjit_compile_named(), kjit_compile_and_load() and kjit_compile_batch()
 *        item, hit or miss, is appended once to `path` as one JSON line holding everything
 *        needed to make it again (source, in-memory headers, options, arch, name expression,
 *        keyword, program name, include folders and link inputs, absolute), for `kjit warm` to
 *        compile ahead of time (docs/serving.md, "The record"). $KJIT_RECORD=FILE does the same
 *        from a process's first call.
 *
 * Many threads and processes may record into one file at once: each line is written whole under
 * the file's lock, and a request already there (by any process) is not written again. While a
 * process records, repeats take the full look-up (a few microseconds) instead of the hit memo.
 * A line that cannot be written is said once on stderr and recording stops; a compile never
 * fails for it.
 * @param[in] path The record file: appended to, created (mode 0644) when missing; a relative
 *                 path is taken against the working directory. It replaces a recording under way.
 * @return #KJIT_OK, or:
 * @retval KJIT_ERROR_INVALID_ARGUMENT NULL or empty `path`.
 * @retval KJIT_ERROR_IO               The file cannot be opened for appending (the message names
 *                                     it), or is not a regular file.
 * @note Thread safe; a forked child goes on recording into the same file.
 */
KJIT_API kjit_status kjit_record_start(const char *path);

/**
 * @brief Stops recording (since 0.11); from then on $KJIT_RECORD is not read either. Nothing is
 *        left to flush: each line was written whole. Calling it when not recording does nothing.
 * @note Thread safe.
 */
KJIT_API void kjit_record_stop(void);

KJIT_END_DECLS

/* The rest of the ABI, so that #include <kjit/kjit.h> declares all of it. */
#include "kjit_batch.h"
#include "kjit_cache.h"

#endif /* KJIT_KJIT_H */
