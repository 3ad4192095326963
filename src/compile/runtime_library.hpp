// Runtime library: what the two CUDA libraries libkjit dlopens on first need (NVRTC:
// nvrtc_library.hpp, nvJitLink: nvjitlink_library.hpp) have in common: which files to try, how
// one is opened and its entry points bound, and the identity the cache key holds for it.
#pragma once

#include "util/environment.hpp"
#include "util/fork_guard.hpp"
#include "util/log.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kjit::compile::runtime_library {

// What to hand dlopen, in order: `$<env_var>` alone when set and non-empty (a path or a name for
// dlopen's search, so a deployment or a test can pin the library or rule it out), else the bare
// `library_name` (the dynamic linker's search: LD_LIBRARY_PATH, ldconfig's cache, ...) and the
// same name in `toolkit_dir`, the CUDA toolkit's lib folder the build found.
std::vector<std::string> candidates(environment::Variable env_var, const std::string &library_name,
                                    const std::string &toolkit_dir);

// dlopen(`file`, RTLD_NOW | RTLD_LOCAL): the handle, or nullptr with `why` ("failed: <dlerror>").
// `*preexisting` is set when something else had mapped that library already (then dlopen did
// not search, and its file says nothing about what a search finds: library_probe runs the search
// itself before it records that file). The handle is never closed: closing runs the library's
// destructors, and it may be a library the process uses for something else.
void *open(const std::string &file, bool *preexisting, std::string &why);

// dlsym(`handle`, `symbol`) into `fn`; false with `why` naming the symbol and `what` (e.g.
// "nvJitLink") when it is missing.
template <typename Fn>
bool bind(void *handle, Fn &fn, const char *symbol, const char *what, std::string &why) {
    fn = reinterpret_cast<Fn>(::dlsym(handle, symbol));
    if (!fn) {
        why = std::string("opened, but it has no ") + symbol + " (not " + what + ", or a " + what +
              " older than libkjit needs)";
    }
    return fn != nullptr;
}

// "major.minor <file name> <file size>" of the library that holds `symbol`: patch releases
// change code generation, so a cache key needs more than major.minor. The folder is left out, so
// the same toolkit installed elsewhere gives the same identity. `*file` receives the library's
// path, links resolved (left empty where dladdr cannot tell: the identity then ends in
// "unknown-build"). (For NVRTC, the text libkjit has always put in keys and manifests: caches
// made while it linked NVRTC keep their keys.)
std::string identity_of(const std::string &version, const void *symbol, std::string *file);

// What a library's api() publishes once per process: its table, or why there is none.
template <typename Api>
struct Loaded {
    Api api;
    std::string error;
};

// The first of `candidates` that `open_one(file, api, why)` opens (said at debug level, with
// Api::version), else an error "no usable <what>: " listing each file tried and why, in order
// ("(from <env_var>)" when the variable named it), to which the caller adds what to do.
template <typename Api, typename OpenOne>
Loaded<Api> open_first(const std::vector<std::string> &candidates, environment::Variable variable, const char *what,
                       OpenOne &&open_one) {
    const char *env = environment::get(variable);
    const char *env_var = environment::name(variable);
    const bool from_env = env && *env;
    Loaded<Api> loaded;
    std::string tried;
    for (const std::string &file : candidates) {
        Api a;
        std::string why;
        if (open_one(file, a, why)) {
            log().debug("{} ({} {}) loaded{}", file, what, a.version, from_env ? std::string(" from ") + env_var : "");
            loaded.api = std::move(a);
            return loaded;
        }
        if (!tried.empty()) tried += "; ";
        tried += "dlopen(\"" + file + "\")" + (from_env ? std::string(" (from ") + env_var + ") " : " ") + why;
    }
    loaded.error = std::string("no usable ") + what + ": " + tried;
    return loaded;
}

// One library's outcome for the process: opened on the first get(), never closed (what it
// made may be in use) nor forgotten (a forked child keeps it: the library stays mapped there).
template <typename Api>
class Slot {
public:
    // The table when get() opened one, else nullptr; opens nothing. Thread safe.
    const Api *opened() const {
        const Loaded<Api> *published = slot_.load(std::memory_order_acquire);
        return published && published->error.empty() ? &published->api : nullptr;
    }
    // The outcome, from `open()` (a Loaded<Api>) on the first call. `open_mutex` serialises the
    // first open: a library's initialisers run inside dlopen, and a second thread whose dlopen
    // of the same library waited for the first (inside the loader's own lock, which no tool
    // sees) and then used the library at once would use its globals with no ordering
    // ThreadSanitizer can see against their initialisation. Its owner renews it in a forked
    // child (no once-guard, fork_guard.hpp). Thread safe.
    template <typename Open>
    const Loaded<Api> &get(std::mutex &open_mutex, Open &&open) {
        const Loaded<Api> *published = slot_.load(std::memory_order_acquire);
        if (published) return *published;
        std::lock_guard<std::mutex> lock(open_mutex);
        return fork_guard::lazy(slot_, [&] { return new Loaded<Api>(open()); });
    }

private:
    std::atomic<const Loaded<Api> *> slot_{nullptr};
};

}  // namespace kjit::compile::runtime_library
