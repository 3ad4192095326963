#include "compile/runtime_library.hpp"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>

namespace kjit::compile::runtime_library {

std::vector<std::string> candidates(environment::Variable env_var, const std::string &library_name,
                                    const std::string &toolkit_dir) {
    const char *env = environment::get(env_var);
    if (env && *env) return {env};  // pinned: nothing else, so a test or deployment can rule it out
    return {library_name, toolkit_dir + "/" + library_name};
}

void *open(const std::string &file, bool *preexisting, std::string &why) {
    if (void *mapped = ::dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
        *preexisting = true;
        ::dlclose(mapped);
    }
    void *handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = ::dlerror();
        why = std::string("failed: ") + (e ? e : "unknown error");
    }
    return handle;
}

std::string identity_of(const std::string &version, const void *symbol, std::string *file) {
    std::string id = version;
    Dl_info info{};
    if (::dladdr(symbol, &info) == 0 || !info.dli_fname) return id + " unknown-build";
    char resolved[PATH_MAX];
    const std::string path(::realpath(info.dli_fname, resolved) ? resolved : info.dli_fname);
    struct stat st {};
    id += " " + path.substr(path.rfind('/') + 1);
    if (::stat(path.c_str(), &st) == 0) id += " " + std::to_string(st.st_size);
    *file = path;
    return id;
}

}  // namespace kjit::compile::runtime_library
