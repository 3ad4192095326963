// Environment: every variable libkjit reads, in one list, and the one place that reads them. A
// module that needs a setting from the environment names its Variable here; no other file calls
// getenv or walks environ. docs/environment.md's table "Read by libkjit" names the same variables
// (tests/check_environment.sh compares the two, and fails on a getenv anywhere else in src/).
// What a value means, and its default, stays with the module that reads it (the C ABI's
// defaults for most: api/defaults.hpp).
#pragma once

#include <cstddef>

namespace kjit::environment {

enum class Variable {
    cache_dir,       // KJIT_CACHE_DIR
    xdg_cache_home,  // XDG_CACHE_HOME
    home,            // HOME
    arch,            // KJIT_ARCH
    cache_max_size,  // KJIT_CACHE_MAX_SIZE
    jobs,            // KJIT_JOBS
    worker_kind,     // KJIT_WORKER_KIND
    worker,          // KJIT_WORKER
    hit_memo,        // KJIT_HIT_MEMO
    compile_wait,    // KJIT_COMPILE_WAIT
    durability,      // KJIT_DURABILITY
    remote_storage,  // KJIT_REMOTE_STORAGE
    cache_seed,      // KJIT_CACHE_SEED
    base_dirs,       // KJIT_BASE_DIRS
    no_compile,      // KJIT_NO_COMPILE
    record,          // KJIT_RECORD
    watch_headers,   // KJIT_WATCH_HEADERS
    log_level,       // KJIT_LOG_LEVEL
    libcuda,         // KJIT_LIBCUDA
    libnvrtc,        // KJIT_LIBNVRTC
    libnvjitlink,    // KJIT_LIBNVJITLINK
    tmpdir,          // TMPDIR
    count
};

// The variable's name ("KJIT_CACHE_DIR").
const char *name(Variable v);

// Its value as the environment holds it now (after any setenv), or null when unset; while a
// Snapshot lives on the calling thread, its value when the Snapshot was made. An empty value is
// returned as such: the reader says what it means (mostly: unset). Thread safe as getenv is.
const char *get(Variable v);

// The values of `count` variables from one pass over the environment (get_all), taken when it
// is made, which get() answers for them on this thread while it lives (others as before): for a
// call that settles many settings at once (the C ABI's request of a compile reads seven), where
// a getenv each walks the whole environment once each, and so that they come from one moment.
// Made and destroyed on one thread, in scope order (the innermost answers, for its variables).
// Another thread's get() does not see it. `variables` is only read while it is made.
class Snapshot {
public:
    Snapshot(const Variable *variables, std::size_t count);
    ~Snapshot();
    Snapshot(const Snapshot &) = delete;
    Snapshot &operator=(const Snapshot &) = delete;

private:
    friend const char *get(Variable v);
    const char *values_[static_cast<std::size_t>(Variable::count)] = {};
    bool taken_[static_cast<std::size_t>(Variable::count)] = {};
    Snapshot *outer_;
};

// The values of `count` variables found in one pass over the environment, into `values` (null
// where unset; the first of a name wins, as with getenv): for a caller that reads several at
// every call (the hit memo's repeat), where a getenv each walks the environment each time.
void get_all(const Variable *variables, std::size_t count, const char **values);

}  // namespace kjit::environment
