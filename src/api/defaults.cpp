#include "api/defaults.hpp"

#include "load/driver.hpp"
#include "util/environment.hpp"
#include "util/size_units.hpp"

#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace kjit::api::defaults {

namespace {

std::string env(environment::Variable name) {
    const char *v = environment::get(name);
    return v ? std::string(v) : std::string();
}

// A folder-list variable's folders (for_each_folder's rule).
std::vector<std::string> folder_list(environment::Variable name) {
    std::vector<std::string> dirs;
    const char *v = environment::get(name);
    if (v) for_each_folder(v, [&](std::string_view dir) { dirs.emplace_back(dir); });
    return dirs;
}

}  // namespace

Result<std::string> cache_dir(const char **origin) {
    const char *unused = nullptr;
    const char *&from = origin ? *origin : unused;
    from = "$KJIT_CACHE_DIR";
    if (std::string v = env(environment::Variable::cache_dir); !v.empty()) return v;
    from = "$XDG_CACHE_HOME";
    if (std::string v = env(environment::Variable::xdg_cache_home); !v.empty()) return v + "/kjit";
    from = "$HOME";
    if (std::string v = env(environment::Variable::home); !v.empty()) return v + "/.cache/kjit";
    from = nullptr;
    return Error{Errc::invalid_argument,
                 "no cache folder: set kjit_compile_options.cache_dir, $KJIT_CACHE_DIR, $XDG_CACHE_HOME or $HOME"};
}

Result<std::string> arch() {
    if (std::string v = env(environment::Variable::arch); !v.empty()) return v;
    auto detected = load::driver::current_device_arch();
    if (detected) return detected;
    return Error{Errc::invalid_argument, "no target arch: set kjit_compile_options.arch or $KJIT_ARCH (e.g. sm_90a); "
                                         "it could not be taken from a GPU either: " +
                                             detected.error().message};
}

Result<std::optional<std::uint64_t>> max_cache_bytes() {
    const std::string v = env(environment::Variable::cache_max_size);
    if (v.empty()) return std::optional<std::uint64_t>{};
    auto size = size_units::parse_size(v);
    if (!size) {
        return Error{Errc::invalid_argument, "$KJIT_CACHE_MAX_SIZE: " + size.error().message + "; 0 means no limit"};
    }
    // As in ccache: 0 is no limit (a limit of 0 bytes would evict every idle entry at each publish).
    if (*size == 0) return std::optional<std::uint64_t>{};
    return std::optional<std::uint64_t>(*size);
}

std::string remote_storage() { return env(environment::Variable::remote_storage); }

std::vector<std::string> seed_dirs() { return folder_list(environment::Variable::cache_seed); }

std::vector<std::string> base_dirs() { return folder_list(environment::Variable::base_dirs); }

Result<std::chrono::milliseconds> compile_wait() {
    constexpr long kDefaultSeconds = 600;
    constexpr long kMaxSeconds = 86'400;
    const std::string v = env(environment::Variable::compile_wait);
    if (v.empty()) return std::chrono::milliseconds(kDefaultSeconds * 1000);
    char *end = nullptr;
    errno = 0;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || n < 0 || n > kMaxSeconds) {
        return Error{Errc::invalid_argument, "$KJIT_COMPILE_WAIT is '" + v +
                                                 "': set it to whole seconds from 0 (never wait for another "
                                                 "process's compile) to " +
                                                 std::to_string(kMaxSeconds)};
    }
    return std::chrono::milliseconds(n * 1000);
}

Result<bool> durable_publish() {
    const char *v = environment::get(environment::Variable::durability);
    if (!v || !*v || std::strcmp(v, "none") == 0) return false;
    if (std::strcmp(v, "entry") == 0) return true;
    return Error{Errc::invalid_argument, std::string("$KJIT_DURABILITY is '") + v +
                                             "': set it to none (a miss publishes without fsync; a torn entry "
                                             "after a power cut is refused and rebuilt) or entry (the cubin and "
                                             "the entry folder are fsynced before the entry is published)"};
}

Result<unsigned> workers() {
    if (const char *jobs = environment::get(environment::Variable::jobs); jobs && *jobs) {
        char *end = nullptr;
        errno = 0;
        const long n = std::strtol(jobs, &end, 10);
        if (errno != 0 || *end != '\0' || n < 1 || n > static_cast<long>(batch::compiler::kMaxWorkers)) {
            return Error{Errc::invalid_argument, std::string("$KJIT_JOBS is '") + jobs +
                                                     "': set it to a worker count from 1 to " +
                                                     std::to_string(batch::compiler::kMaxWorkers)};
        }
        return static_cast<unsigned>(n);
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
        return static_cast<unsigned>(CPU_COUNT(&set));
    }
    const unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? n : 1u;
}

Result<int> compile_mode() {
    const char *v = environment::get(environment::Variable::no_compile);
    if (!v || !*v || std::strcmp(v, "0") == 0) return kCompileAlways;
    if (std::strcmp(v, "1") == 0 || std::strcmp(v, "never") == 0) return kCompileNever;
    if (std::strcmp(v, "warn") == 0) return kCompileWarn;
    return Error{Errc::invalid_argument, std::string("$KJIT_NO_COMPILE is '") + v +
                                             "': set it to 1 (or never: a miss is an error, nothing is compiled), "
                                             "warn (a miss compiles and says so), or 0 (or leave it unset)"};
}

Result<batch::compiler::WorkerKind> worker_kind() {
    using batch::compiler::WorkerKind;
    const char *v = environment::get(environment::Variable::worker_kind);
    if (!v || !*v || std::strcmp(v, "auto") == 0) return WorkerKind::automatic;
    if (std::strcmp(v, "threads") == 0) return WorkerKind::threads;
    if (std::strcmp(v, "processes") == 0) return WorkerKind::processes;
    return Error{Errc::invalid_argument,
                 std::string("$KJIT_WORKER_KIND is '") + v + "': set it to threads, processes or auto"};
}

}  // namespace kjit::api::defaults
