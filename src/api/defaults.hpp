// Defaults: what a caller that left a setting unset gets, resolved in one place, by the C ABI,
// before anything below it runs (the cache, the batch compiler and the maintenance functions
// receive settled values and never read the environment for them). docs/environment.md lists
// the variables.
#pragma once

#include "batch/worker_kind.hpp"
#include "util/status.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::api::defaults {

// The cache folder: $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else $HOME/.cache/kjit (as
// given, not yet absolute); `origin` (if not null) receives the variable it came from
// ("$HOME"), for messages. Errors: invalid_argument saying what to set when none is set.
Result<std::string> cache_dir(const char **origin = nullptr);

// The target arch: $KJIT_ARCH, else the current GPU's (through the driver, loaded on first
// use). Errors: invalid_argument saying how to set it and what the driver said.
Result<std::string> arch();

// The cache's size limit in bytes: $KJIT_CACHE_MAX_SIZE ("5G", "512M": size_units::parse_size);
// nullopt when unset, empty or 0 (no limit, as in ccache). Errors: invalid_argument naming the
// variable and what it accepts.
Result<std::optional<std::uint64_t>> max_cache_bytes();

// How long a compile waits for another process that compiles the same key (compile_lock.hpp)
// before it compiles too: $KJIT_COMPILE_WAIT in seconds (0: never wait), else 600 s, longer
// than any single compile should take. Errors: invalid_argument naming the variable.
Result<std::chrono::milliseconds> compile_wait();

// Whether a miss's publish fsyncs its cubin and entry folder before the rename that publishes
// it: $KJIT_DURABILITY "entry" (true); unset, "" or "none" (false: no fsync on the miss path, the
// default, since beside a busy disk the fsyncs made a small kernel's miss 1.30x its compile and a
// torn entry is refused anyway: docs/cache-layout.md#durability). Read at every full call, as
// KJIT_NO_COMPILE is; a hit is the same either way. Errors: invalid_argument naming the variable
// and its values.
Result<bool> durable_publish();

// The cluster tier's setting: $KJIT_REMOTE_STORAGE (config.hpp's syntax), or "" for
// none. Checked where it is used (a local miss), so that hits never parse it.
std::string remote_storage();

// The seed caches: $KJIT_CACHE_SEED's folders, separated by ':' (empty ones skipped), in order;
// none when it is unset, empty or "none".
std::vector<std::string> seed_dirs();

// The base folders (key::Request::base_dirs): $KJIT_BASE_DIRS's folders, separated by ':' (empty
// ones skipped), in order; none when it is unset, empty or "none". key_request checks them.
std::vector<std::string> base_dirs();

// The folders of a folder-list variable's value ($KJIT_CACHE_SEED, $KJIT_BASE_DIRS), in order:
// separated by ':', empty ones skipped, none for "none"; `each(std::string_view)` for each. The
// rule of seed_dirs() and base_dirs(), for memo_digest.cpp, which finds the value itself.
template <typename Each>
void for_each_folder(std::string_view value, Each &&each) {
    if (value == "none") return;
    for (std::size_t from = 0; from <= value.size();) {
        std::size_t colon = value.find(':', from);
        if (colon == std::string_view::npos) colon = value.size();
        if (colon > from) each(value.substr(from, colon - from));
        from = colon + 1;
    }
}

// Whether a miss may compile when the caller does not say, as kjit_compile_mode's values (compile_options.cpp
// checks they are the same): $KJIT_NO_COMPILE "1" or "never" is kCompileNever, "warn"
// kCompileWarn, unset, "" or "0" kCompileAlways. Errors: invalid_argument naming the variable and
// its values.
constexpr int kCompileAlways = 1;
constexpr int kCompileWarn = 2;
constexpr int kCompileNever = 3;
Result<int> compile_mode();

// A batch's worker count when the caller asks for none: $KJIT_JOBS (1 to kMaxWorkers of
// batch/worker_kind.hpp; anything else is invalid_argument naming the variable), else the CPUs
// this process may run on.
Result<unsigned> workers();

// The kind when the caller leaves it to the library: $KJIT_WORKER_KIND ("threads", "processes"
// or "auto"), else automatic. Errors: invalid_argument naming the variable and its values.
Result<batch::compiler::WorkerKind> worker_kind();

}  // namespace kjit::api::defaults
