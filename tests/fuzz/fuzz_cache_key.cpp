// libFuzzer target: the cache key's encoding. Two requests are decoded from the bytes; their
// keys must be equal exactly when every input the key covers is equal (a labelled,
// length-prefixed encoding admits no two inputs that encode alike; XXH3-128 collisions are
// negligible at fuzzing scale). Layout: the two requests are separated by a 0x01 byte; each is
// 0x00-separated tokens: source, keyword, arch, name expression ("" none, "=x" for x), then
// tokens starting with 'o' (an option), 'i' (an include path) or 'h' (a header name, whose
// source is the next token). Options that only name an output file key by presence.
#include "cache/cache.hpp"
#include "compile/compiler.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::vector<std::string> split(std::string_view s, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (;;) {
        const std::size_t at = s.find(sep, start);
        out.emplace_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
        if (at == std::string_view::npos) return out;
        start = at + 1;
    }
}

kjit::key::Request decode(std::string_view bytes) {
    kjit::key::Request r;
    const std::vector<std::string> t = split(bytes, '\0');
    r.source = t[0];
    if (t.size() > 1) r.keyword = t[1];
    if (t.size() > 2) r.arch = t[2];
    if (t.size() > 3 && !t[3].empty() && t[3][0] == '=') r.name_expression = t[3].substr(1);
    for (std::size_t i = 4; i < t.size(); ++i) {
        if (t[i].empty()) continue;
        const std::string v = t[i].substr(1);
        if (t[i][0] == 'o') r.nvrtc_options.push_back(v);
        if (t[i][0] == 'i') r.include_paths.push_back(v);
        if (t[i][0] == 'h') r.headers.emplace_back(v, i + 1 < t.size() ? t[++i] : std::string());
    }
    r.cache_dir = t.size() % 2 ? "/a" : "/b";  // not an input of the key: must not matter
    return r;
}

// The folder-naming inputs as the key covers them (key::keyed_folders): an absolute include
// folder by its number, not its path; an option that only names a file NVRTC writes
// (-time=FILE) by its presence (compile::compiler::keyed_option).
bool same_folders(const kjit::key::Request &a, const kjit::key::Request &b) {
    const kjit::key::KeyedFolders fa = kjit::key::keyed_folders(a), fb = kjit::key::keyed_folders(b);
    return fa.options == fb.options && fa.include_paths == fb.include_paths && fa.program_name == fb.program_name;
}

bool same_inputs(const kjit::key::Request &a, const kjit::key::Request &b) {
    return a.source == b.source && a.keyword == b.keyword && a.arch == b.arch &&
           a.name_expression == b.name_expression && same_folders(a, b) && a.headers == b.headers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char *>(data), size);
    const std::size_t cut = bytes.find('\x01');
    const kjit::key::Request a = decode(bytes.substr(0, cut));
    const kjit::key::Request b = cut == std::string_view::npos ? a : decode(bytes.substr(cut + 1));
    const std::string ka = kjit::key::key_of(a), kb = kjit::key::key_of(b);
    if (ka.size() != 32 || ka != kjit::key::key_of(a)) std::abort();  // well-formed, deterministic
    if ((ka == kb) != same_inputs(a, b)) std::abort();
    return 0;
}
