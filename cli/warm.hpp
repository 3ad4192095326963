// `kjit warm RECORD... [--arch A]... [-j N] [--workers K] [--seed DIR]... [--base-dir DIR]...
// [--remote-storage S]`: every request of request records (kjit_record_start, $KJIT_RECORD:
// docs/serving.md, "The record") compiled ahead of time as one kjit_compile_batch, for each arch
// given (else the arch each was recorded with), into the cache (--cache-dir); seeds and the
// cluster tier are asked first, as for any miss. Prints what it did: hits, compiled, failed with
// each error.
#pragma once

#include <string>
#include <vector>

namespace kjit_cli {

struct WarmArgs {
    std::vector<std::string> records;  // the record files, in order
    std::vector<std::string> archs;    // each request for each of these; none: as recorded
    unsigned jobs = 0;                 // the batch's workers (0: its default)
    std::string workers;               // "threads", "processes" or "auto" ("": $KJIT_WORKER_KIND)
    std::vector<std::string> seed_dirs;
    std::vector<std::string> base_dirs;  // --base-dir, in order (none: $KJIT_BASE_DIRS)
    std::string remote_storage;          // "": $KJIT_REMOTE_STORAGE
    std::string cache_dir;               // "": the default
    bool json = false;
};

// Runs it: exit status 0 when every request is in the cache afterwards; 64 for a record that
// cannot be read or holds no request; else the status of the first request that failed (each
// failure printed). Lines of a record that are not requests (a line cut short by a killed
// writer, another format) are skipped and counted.
int run_warm(const WarmArgs &a);

}  // namespace kjit_cli
