// What the probe workers (probe_worker.cpp, nvjitlink_probe_worker.cpp) do as a host that loads
// a CUDA library for its own use before libkjit does (numba-cuda, cuda.core, torch), and how
// they tell which file of that library the process maps. Header-only: each worker is a program
// of its own.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>

namespace kjit_test {

// The first file /proc/self/maps names whose path holds `fragment` ("/libnvrtc."), or "".
inline std::string mapped_file(const char *fragment) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        if (line.find(fragment) != std::string::npos) return line.substr(line.find('/'));
    }
    return "";
}

// dlopens the first of `files` (comma-separated) that opens, never closed (the host keeps it);
// false when none opens.
inline bool preload_first(const std::string &files) {
    for (std::size_t at = 0; at <= files.size();) {
        const std::size_t comma = std::min(files.find(',', at), files.size());
        const std::string file = files.substr(at, comma - at);
        at = comma + 1;
        if (!file.empty() && ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL)) return true;
    }
    return false;
}

}  // namespace kjit_test
