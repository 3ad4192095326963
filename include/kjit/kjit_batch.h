/**
 * @file kjit_batch.h
 * @brief libkjit's batch compile (since 0.3): kjit_compile_batch() compiles an autotuner's cold
 *        sweep into the cache at once, with its request, options and result types.
 *
 * Part of the public C ABI of kjit.h, whose conventions (status codes, out buffers, ownership,
 * threads) apply here too. It may be included alone: it includes kjit.h first, which declares
 * the rest of the ABI. docs/batch.md explains when a batch pays off, the worker kinds and the
 * precompiled header, with measurements.
 */
#ifndef KJIT_KJIT_BATCH_H
#define KJIT_KJIT_BATCH_H

#include "kjit.h"

KJIT_BEGIN_DECLS

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
#define KJIT_COMPILE_REQUEST_INIT \
    { sizeof(kjit_compile_request), NULL, NULL, NULL }

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
 *    python/kjit/ catches it (and Ctrl-C) for you (docs/python.md).
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
    KJIT_PCH_DEFAULT = 0, /**< The library's choice: on where enough misses that
                               `#include` the same headers compile in one process, off for the
                               rest (see kjit_batch_options::pch). */
    KJIT_PCH_ON = 1,      /**< Every compile of the batch passes `-pch`. */
    KJIT_PCH_OFF = 2      /**< Plain compiles. */
} kjit_pch_mode;

/** @brief Where a batch's misses compile (kjit_batch_options::worker_kind; since 0.5). */
typedef enum kjit_worker_kind {
    KJIT_WORKERS_DEFAULT = 0,   /**< $KJIT_WORKER_KIND ("threads", "processes" or "auto"), else
                                     #KJIT_WORKERS_AUTOMATIC. */
    KJIT_WORKERS_THREADS = 1,   /**< Threads of the calling process. */
    KJIT_WORKERS_PROCESSES = 2, /**< Worker processes: the helper `kjit-worker` installed beside
                                     libkjit.so (or $KJIT_WORKER), one per worker, ended with the
                                     batch. Only NVRTC runs there; an item whose worker dies is
                                     compiled once more on a fresh one. Without the helper, every
                                     miss is #KJIT_ERROR_NOT_FOUND. How they work:
                                     docs/batch.md, "Worker processes". */
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
    /** A ::kjit_pch_mode; #KJIT_PCH_DEFAULT (0) uses NVRTC's automatic precompiled header
        where at least two misses with the same headers compile in one process (a PCH's
        creation costs about what one later use saves), or as many as the prices measured for
        those headers and recorded in the cache folder say repay it (none where using one was
        slower than a plain compile; every batch records what its compiles took), and sends
        those misses to one worker;
        `--pch` among an item's NVRTC options changes nothing then (0.7 and before: it asked for
        a PCH as #KJIT_PCH_ON would). Each distinct set of headers gets PCHs of its own,
        under `$TMPDIR/kjit-pch-<pid>-*`, removed at exit. Not in the cache key. When it pays
        off, and the measurements: docs/batch.md, "Precompiled headers". */
    int pch;
    /** Called for each finished item; NULL for none. */
    kjit_batch_progress_fn progress;
    /** Passed to `progress` untouched; never read or freed by libkjit. */
    void *progress_user_data;
    /** A ::kjit_worker_kind: threads or worker processes (since 0.5); default
        #KJIT_WORKERS_DEFAULT (0). */
    int worker_kind;
    /** 0 (since 0.5). Keeps the struct free of padding; any other value is refused
        (#KJIT_ERROR_INVALID_ARGUMENT), so a later release may give it a meaning. */
    int reserved;
} kjit_batch_options;

/** @brief Initializer for ::kjit_batch_options: the size set, everything else default. */
#define KJIT_BATCH_OPTIONS_INIT \
    { sizeof(kjit_batch_options), 0, KJIT_PCH_DEFAULT, NULL, NULL, KJIT_WORKERS_DEFAULT, 0 }

/**
 * @brief Fills a ::kjit_batch_options as #KJIT_BATCH_OPTIONS_INIT does (since 0.4).
 * @param[out] options     The struct to fill (the first `struct_size` bytes only).
 * @param[in]  struct_size `sizeof(kjit_batch_options)` as the caller was compiled with it.
 * @return #KJIT_OK, or #KJIT_ERROR_INVALID_ARGUMENT for a NULL `options` or a struct_size
 *         below `sizeof(size_t)` or above this library's (nothing is written).
 * @note Thread safe.
 */
KJIT_API kjit_status kjit_batch_options_init(kjit_batch_options *options, size_t struct_size);

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

KJIT_END_DECLS

#endif /* KJIT_KJIT_BATCH_H */
