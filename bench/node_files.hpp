// What the bench's node programs (kjit-relocation-node, kjit-serving-node) share: they link
// libkjit.so alone, not the bench's support code.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace kjit_bench {

// The whole of the file at `path` into `out`; false when it cannot be read.
inline bool read_text(const std::string &path, std::string &out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream text;
    text << in.rdbuf();
    out = text.str();
    return static_cast<bool>(in) || in.eof();
}

}  // namespace kjit_bench
