/* The public headers, through kjit.h, as a strict C99 consumer sees them (built with -std=c99
   -pedantic -Wall -Wextra -Werror -Wstrict-prototypes), linked against libkjit.so and run. */
#include "kjit/kjit.h"

#include <stdio.h>
#include <string.h>

int main(void) {
    char name[64];
    size_t len = 0;
    kjit_status st;
    if (kjit_version() != KJIT_VERSION_NUMBER) {
        fprintf(stderr, "header says %d, library says %u\n", KJIT_VERSION_NUMBER, kjit_version());
        return 1;
    }
    st = kjit_resolve_name("/nonexistent/kjit/header-test.cubin", "k", name, sizeof name, &len);
    if (st != KJIT_ERROR_IO || strstr(kjit_last_error(), "header-test.cubin") == NULL) {
        fprintf(stderr, "unexpected: %s: %s\n", kjit_status_string(st), kjit_last_error());
        return 1;
    }
    {
        kjit_kernel *kernel = NULL;
        void *function = NULL;
        st = kjit_load_cached(NULL, "k", &kernel);
        if (st != KJIT_ERROR_INVALID_ARGUMENT || kernel != NULL) {
            fprintf(stderr, "unexpected: %s: %s\n", kjit_status_string(st), kjit_last_error());
            return 1;
        }
        if (kjit_kernel_name(kernel) != NULL || kjit_kernel_cubin_path(kernel) != NULL ||
            kjit_kernel_cukernel(kernel) != NULL || kjit_kernel_culibrary(kernel) != NULL ||
            kjit_kernel_cufunction(kernel, &function) != KJIT_ERROR_INVALID_ARGUMENT) {
            fprintf(stderr, "the kjit_kernel accessors mishandle NULL\n");
            return 1;
        }
        kjit_kernel_release(kernel);
    }
    {
        /* The stats struct and its initializer, as C99 sees them; the two failures above count. */
        kjit_stats stats = KJIT_STATS_INIT;
        kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
        if (kjit_get_stats(&stats) != KJIT_OK || stats.errors[KJIT_ERROR_IO] != 1 ||
            stats.errors[KJIT_ERROR_INVALID_ARGUMENT] < 2 || options.max_cache_size != 0) {
            fprintf(stderr, "unexpected stats: %s\n", kjit_last_error());
            return 1;
        }
    }
    {
        /* The batch types, their initializers and the callback type, as C99 sees them: one NULL
           item fails alone, the batch returns its status, the result says which. */
        kjit_compile_request request = KJIT_COMPILE_REQUEST_INIT;
        const kjit_compile_request *items[2];
        kjit_batch_options options = KJIT_BATCH_OPTIONS_INIT;
        kjit_batch_progress_fn progress = NULL;
        kjit_batch_result *result = NULL;
        items[0] = &request; /* source and keyword NULL */
        items[1] = NULL;
        options.progress = progress;
        options.workers = 1;
        st = kjit_compile_batch(items, 2, &options, &result);
        if (st != KJIT_ERROR_INVALID_ARGUMENT || result == NULL || kjit_batch_result_count(result) != 2 ||
            kjit_batch_result_status(result, 1) != KJIT_ERROR_INVALID_ARGUMENT ||
            kjit_batch_result_cubin_path(result, 0) != NULL ||
            strstr(kjit_batch_result_error(result, 0), "requests[0]->source is NULL") == NULL ||
            options.pch != KJIT_PCH_DEFAULT) {
            fprintf(stderr, "unexpected batch: %s: %s\n", kjit_status_string(st), kjit_last_error());
            return 1;
        }
        kjit_batch_result_release(result);
    }
    {
        /* The cache maintenance types and initializers, as C99 sees them, on a folder that does
           not exist (an empty cache, left uncreated). */
        kjit_cache_summary summary = KJIT_CACHE_SUMMARY_INIT;
        kjit_prune_options prune = KJIT_PRUNE_OPTIONS_INIT;
        kjit_prune_report report = KJIT_PRUNE_REPORT_INIT;
        kjit_cache_arches *arches = NULL;
        kjit_verify_report *verified = NULL;
        const char *missing = "/nonexistent/kjit-header-c-test";
        prune.max_size = 0;
        if (kjit_cache_summarize(missing, &summary, &arches) != KJIT_OK || summary.entries != 0 ||
            kjit_cache_arches_count(arches) != 0 || kjit_cache_prune(missing, &prune, &report) != KJIT_OK ||
            kjit_cache_verify(missing, 0, &verified) != KJIT_OK || kjit_verify_report_count(verified) != 0 ||
            kjit_prune_options_init(&prune, sizeof prune) != KJIT_OK || prune.older_than_s != KJIT_PRUNE_NO_LIMIT ||
            strcmp(kjit_cache_problem_string(KJIT_CACHE_STALE_TEMP), "stale_temp") != 0) {
            fprintf(stderr, "unexpected cache maintenance: %s\n", kjit_last_error());
            return 1;
        }
        kjit_cache_arches_release(arches);
        kjit_verify_report_release(verified);
    }
    printf("C consumer OK: libkjit %s\n", kjit_version_string());
    return 0;
}
