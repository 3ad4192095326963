// Runtime library: what the two CUDA libraries libkjit dlopens on first need (NVRTC:
// nvrtc_library.hpp, nvJitLink: nvjitlink_library.hpp) have in common: which files to try, how
// one is opened and its entry points bound, and the identity the cache key holds for it.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace kjit::compile::runtime_library {

// What to hand dlopen, in order: `$<env_var>` alone when set and non-empty (a path or a name for
// dlopen's search, so a deployment or a test can pin the library or rule it out), else the bare
// `library_name` (the dynamic linker's search: LD_LIBRARY_PATH, ldconfig's cache, ...) and the
// same name in `toolkit_dir`, the CUDA toolkit's lib folder the build found.
std::vector<std::string> candidates(const char *env_var, const std::string &library_name,
                                    const std::string &toolkit_dir);

// dlopen(`file`, RTLD_NOW | RTLD_LOCAL): the handle, or nullptr with `why` ("failed: <dlerror>").
// `*preexisting` is set when something else had mapped that library already (then its file says
// nothing about what a search finds). The handle is never closed: closing runs the library's
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

}  // namespace kjit::compile::runtime_library
