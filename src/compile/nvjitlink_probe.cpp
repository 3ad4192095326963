#include "compile/nvjitlink_probe.hpp"

#include "compile/nvjitlink_library.hpp"

namespace kjit::compile::nvjitlink_probe {

Result<std::string> identity(const std::string &) {
    auto loaded = nvjitlink_library::api();
    if (!loaded) return std::move(loaded).error();
    return (*loaded)->identity;
}

void record(const std::string &) {}

Status confirm(const std::string &keyed_identity, const std::string &) {
    auto loaded = nvjitlink_library::api();
    if (!loaded) return std::move(loaded).error();
    if ((*loaded)->identity == keyed_identity) return Ok{};
    return Error{Errc::link, "nvJitLink " + (*loaded)->identity + " (" + (*loaded)->file +
                                 "), loaded for this link, is not the nvJitLink " + keyed_identity +
                                 " that keyed the request: retry the compile"};
}

bool nvjitlink_loaded() { return nvjitlink_library::opened() != nullptr; }

}  // namespace kjit::compile::nvjitlink_probe
