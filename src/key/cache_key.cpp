#include "key/cache_key.hpp"

#include "compile/compiler.hpp"
#include "compile/nvjitlink_probe.hpp"
#include "compile/nvrtc_probe.hpp"
#include "cubin/name_matcher.hpp"
#include "store/cache_entry.hpp"
#include "util/filesystem.hpp"
#include "util/hashing.hpp"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <stdexcept>

namespace kjit::key {

namespace {

// A field's length as the key encoding writes it: 8 bytes, little-endian. field() and
// FieldBuffer both write it so, which the keys of every entry on disk depend on.
void length_bytes(std::uint64_t n, char (&out)[8]) {
    for (char &byte : out) {
        byte = static_cast<char>(n & 0xff);
        n >>= 8;
    }
}

// Feeds one labelled, length-prefixed field of the key encoding to the hash: no two
// different inputs encode alike. Streaming keeps a large source from being copied on a hit.
void field(XXH3_state_t *state, const char *label, std::string_view value) {
    XXH3_128bits_update(state, label, std::strlen(label) + 1);  // with its NUL
    char len[8];
    length_bytes(value.size(), len);
    XXH3_128bits_update(state, len, sizeof len);
    XXH3_128bits_update(state, value.data(), value.size());
}

using HashState = std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>;

// A fresh XXH3-128 stream.
HashState new_hash_state() {
    HashState state(XXH3_createState(), &XXH3_freeState);
    if (!state) throw std::bad_alloc();
    XXH3_128bits_reset(state.get());
    return state;
}

// The 32 hex digits of a finished XXH3-128 stream.
std::string hex_digest(XXH3_state_t *state) {
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, static_cast<std::uint64_t>(h.high64),
                  static_cast<std::uint64_t>(h.low64));
    return hex;
}

// field()'s encoding written into a buffer sized beforehand: the same bytes, so the same hash,
// as field() would feed the stream (deps_fields() hashes a CUB kernel's 700 records in one
// update, not 2,000, and writes them without a capacity check per byte).
class FieldBuffer {
public:
    // Room for `bytes`: what the caller's fields take at most (labels, 8 length bytes, values).
    explicit FieldBuffer(std::size_t bytes) : data_(new char[bytes]), capacity_(bytes) {}
    void field(std::string_view label_with_nul, std::string_view value) {
        if (size_ + label_with_nul.size() + 8 + value.size() > capacity_) {
            throw std::logic_error("key: a dependency's fields outgrew their buffer");  // sized above: never
        }
        char len[8];
        length_bytes(value.size(), len);
        write(label_with_nul);
        write(std::string_view(len, sizeof len));
        write(value);
    }
    std::string_view bytes() const { return std::string_view(data_.get(), size_); }

private:
    void write(std::string_view text) {
        std::memcpy(data_.get() + size_, text.data(), text.size());
        size_ += text.size();
    }
    std::unique_ptr<char[]> data_;
    std::size_t capacity_ = 0, size_ = 0;
};

// A number in decimal, as std::to_string writes it, without a string of its own.
template <typename T>
std::string_view decimal(char (&buf)[24], T value) {
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    (void)ec;  // 24 digits hold any 64-bit value
    return std::string_view(buf, static_cast<std::size_t>(end - buf));
}

// The files a compile may read, by content: each path with its XXH3-64, or "absent" (not sizes
// or mtimes, which a touch changes).
void deps_fields(XXH3_state_t *state, const std::vector<key::include_scanner::Dependency> &deps) {
    // Labels with the NUL field() hashes after each, and the most a record's fields take: 3
    // labels of at most 16 bytes, 3 lengths, a number of at most 20 digits, its path and its
    // relative path.
    using namespace std::string_view_literals;
    constexpr std::string_view kDeps = "deps\0"sv, kWorkingDir = "dep.working_dir\0"sv,
                               kAnchorPin = "dep.anchor_pin\0"sv, kLocation = "dep.location\0"sv,
                               kAnchor = "dep.anchor\0"sv, kPath = "dep.path\0"sv, kContent = "dep.content\0"sv;
    std::size_t bytes = kDeps.size() + 8 + 24;
    for (const auto &d : deps) bytes += 3 * (16 + 8) + 24 + d.path.size() + d.relative.size();
    FieldBuffer encoded(bytes);
    char number[24];
    encoded.field(kDeps, decimal(number, deps.size()));
    for (const auto &d : deps) {
        if (d.pins_working_dir) {
            encoded.field(kWorkingDir, d.path);
            continue;
        }
        if (d.pins_anchor) {  // where the anchor was, as the cubin may name it
            encoded.field(kAnchorPin, decimal(number, d.anchor));
            encoded.field(kLocation, d.relative);
            continue;
        }
        // A file reached through the working directory or an anchor by its path relative to it
        // (the same request from another folder, or another install, over the same files: the
        // same variant).
        if (!d.relative.empty() && d.anchor >= 0) encoded.field(kAnchor, decimal(number, d.anchor));
        encoded.field(kPath, d.relative.empty() ? d.path : d.relative);
        encoded.field(kContent, d.exists ? decimal(number, d.content_hash) : std::string_view("absent"));
    }
    const std::string_view all = encoded.bytes();
    XXH3_128bits_update(state, all.data(), all.size());
}

// Whether the NVRTC options ask for line information or device debug information, which name
// source files by absolute path (measured with NVRTC 13: "-lineinfo" gives `.file 1
// "<working dir>/source.cu"`).
bool asks_for_line_info(const std::vector<std::string> &options) {
    const auto starts = [](const std::string &o, std::string_view prefix) { return o.rfind(prefix, 0) == 0; };
    for (const std::string &o : options) {
        if (o == "-G" || o == "-lineinfo" || starts(o, "--device-debug") || starts(o, "-device-debug") ||
            starts(o, "--generate-line-info") || starts(o, "-generate-line-info") || starts(o, "-G=")) {
            return true;
        }
    }
    return false;
}

}  // namespace

std::string variant_key(std::string_view source_key, const std::vector<key::include_scanner::Dependency> &deps) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-variant", std::to_string(kFormatVersion));
    field(state, "source_key", source_key);
    deps_fields(state, deps);
    return hex_digest(state);
}

std::string proof_context(const Request &request, std::string_view source_key) {
    std::string context(source_key);
    if (!request.search.working_dir.empty()) context.append("\n").append(request.search.working_dir);
    // deps.txt names files relative to the anchors too: a proof holds where they are.
    for (const std::string &a : request.search.anchors) context.append("\n@").append(a);
    // A pin compares the anchors' locations, which the base folders give.
    for (const std::string &b : request.search.base_dirs) context.append("\n{base}").append(b);
    return context;
}

std::string pch_identity(const Request &r, const std::vector<key::include_scanner::Dependency> &deps,
                         bool names_program) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-pch", std::to_string(kFormatVersion));
    field(state, "texts", pch_texts(r));
    if (names_program) field(state, "program_name", r.program_name);
    deps_fields(state, deps);
    return hex_digest(state);
}

Status check_no_target_option(const std::vector<std::string> &nvrtc_options) {
    // (The lengths were once one too long: "--gpu-architecture=sm_80" got through to NVRTC.)
    const auto starts = [](const std::string &o, std::string_view prefix) { return o.rfind(prefix, 0) == 0; };
    for (const std::string &o : nvrtc_options) {
        if (starts(o, "-arch") || starts(o, "--gpu-architecture") || starts(o, "-gpu-architecture")) {
            // The C field's name: the kjit command and the Python module put their own in its place.
            return Error{Errc::invalid_argument, "NVRTC option '" + o +
                                                     "' sets the target: pass the arch in kjit_compile_options.arch, "
                                                     "not as an NVRTC option"};
        }
    }
    return Ok{};
}

Status check_arch(const std::string &arch) {
    if (arch.compare(0, 8, "compute_") == 0) {
        return Error{Errc::invalid_argument, "arch '" + arch +
                                                 "' is a virtual architecture (NVRTC makes PTX only for it) and "
                                                 "kjit_compile needs a cubin: use sm_" +
                                                 arch.substr(8)};
    }
    std::size_t digits = 0;
    while (3 + digits < arch.size() && arch[3 + digits] >= '0' && arch[3 + digits] <= '9') ++digits;
    const std::size_t rest = arch.size() - 3 - digits;
    const bool suffix_ok = rest == 0 || (rest == 1 && (arch.back() == 'a' || arch.back() == 'f'));
    if (arch.compare(0, 3, "sm_") != 0 || digits < 2 || !suffix_ok) {
        return Error{Errc::invalid_argument,
                     "arch '" + arch + "' is not a GPU target such as sm_90, sm_90a or sm_100a"};
    }
    return Ok{};
}

namespace {

// `path` without a trailing '/' (but "/" itself), as an anchor is numbered.
std::string without_trailing_slash(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    return path;
}

// The number of `folder` among `anchors`, added when not there yet.
std::size_t anchor_number(std::vector<std::string> &anchors, const std::string &folder) {
    const auto found = std::find(anchors.begin(), anchors.end(), folder);
    if (found != anchors.end()) return static_cast<std::size_t>(found - anchors.begin());
    anchors.push_back(folder);
    return anchors.size() - 1;
}

std::string anchor_label(std::size_t n) { return "{anchor " + std::to_string(n) + "}"; }

}  // namespace

std::string normal_base_folder(const std::string &folder) {
    return without_trailing_slash(std::filesystem::path(folder).lexically_normal().string());
}

KeyedFolders keyed_folders(const Request &r, const key::include_scanner::FileOptions &files) {
    KeyedFolders k;
    for (const std::string &o : r.nvrtc_options) k.options.push_back(compile::compiler::keyed_option(o));
    for (const auto &place : files.places) {
        int &origin = place.pre_include ? k.pre_include_anchors.emplace_back(KeyedFolders::kRelative)
                                        : k.include_dir_anchors.emplace_back(KeyedFolders::kRelative);
        if (place.value.empty() || place.value[0] != '/') continue;  // relative: keyed as given
        origin = KeyedFolders::kUnanchored;
        const std::string &given = r.nvrtc_options[place.option];
        const std::size_t at = given.rfind(place.value);
        if (at == std::string::npos) continue;
        const std::size_t slash = place.value.rfind('/');
        const std::size_t n = place.pre_include ? anchor_number(k.anchors, place.value.substr(0, slash))
                                                : anchor_number(k.anchors, without_trailing_slash(place.value));
        origin = static_cast<int>(n);
        const std::string label = anchor_label(n) + (place.pre_include ? place.value.substr(slash) : std::string());
        k.options[place.option] = given.substr(0, at) + label + given.substr(at + place.value.size());
    }
    for (const std::string &p : r.include_paths) {
        const bool absolute = !p.empty() && p[0] == '/';
        const std::size_t n = absolute ? anchor_number(k.anchors, without_trailing_slash(p)) : 0;
        k.include_path_anchors.push_back(absolute ? static_cast<int>(n) : KeyedFolders::kRelative);
        k.include_paths.push_back(absolute ? anchor_label(n) : p);
    }
    k.program_name = r.program_name;
    if (!r.program_name.empty() && r.program_name[0] == '/') {
        const std::size_t slash = r.program_name.rfind('/');
        const std::size_t n = anchor_number(k.anchors, slash == 0 ? std::string("/") : r.program_name.substr(0, slash));
        k.program_anchor = static_cast<int>(n);
        k.program_name = anchor_label(n) + r.program_name.substr(slash);
    }
    return k;
}

KeyedFolders keyed_folders(const Request &r) {
    auto files = key::include_scanner::file_options(r.nvrtc_options);
    return keyed_folders(r, files ? *files : key::include_scanner::FileOptions{});
}

std::string key_of(const Request &r) { return key_of(r, keyed_folders(r)); }

std::string key_of(const Request &r, const KeyedFolders &folders) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-cache-key", std::to_string(kFormatVersion));
    field(state, "nvrtc", r.nvrtc_identity);
    field(state, "source", r.source);
    field(state, "headers", std::to_string(r.headers.size()));
    for (const auto &h : r.headers) {
        field(state, "header.name", h.first);
        field(state, "header.source", h.second);
    }
    // The folders it names by number (keyed_folders): what is found through them is in the
    // variant key by content, by paths relative to them.
    field(state, "options", std::to_string(folders.options.size()));
    for (const auto &o : folders.options) field(state, "option", o);
    field(state, "include_paths", std::to_string(folders.include_paths.size()));
    for (const auto &p : folders.include_paths) field(state, "include_path", p);
    // Empty unless the cubin itself may name it (keyed_working_dir). What is looked up relative
    // to it is in the variant key by content, by paths relative to it (variant_key).
    field(state, "working_dir", r.keyed_working_dir);
    // Where the folders are, only when the cubin names them (line information): their locations,
    // relative to the base folders where one holds them (keyed_locations).
    field(state, "locations", std::to_string(r.keyed_locations.size()));
    for (const auto &l : r.keyed_locations) field(state, "location", l);
    field(state, "arch", r.arch);
    field(state, "name_expression", r.name_expression ? "1" + *r.name_expression : std::string("0"));
    field(state, "keyword", r.keyword);
    // Only when given: the keys of requests without it are those of before the option.
    if (!folders.program_name.empty()) field(state, "program_name", folders.program_name);
    // Only with link inputs, likewise: what is linked, by content (a library moved elsewhere is
    // the same library; one edited in place is another), the link options, and nvJitLink.
    if (!r.link_files.empty()) {
        field(state, "nvjitlink", r.nvjitlink_identity);
        field(state, "link_inputs", std::to_string(r.link_files.size()));
        for (const compile::linker::Input &in : r.link_files) {
            field(state, "link_input.kind", compile::linker::kind_name(in.kind));
            field(state, "link_input.content", in.content_hash);
        }
        field(state, "link_options", std::to_string(r.link_options.size()));
        for (const std::string &o : r.link_options) field(state, "link_option", o);
    }
    return hex_digest(state);
}

Status read_link_inputs(Request &request) {
    for (const std::string &o : request.link_options) {
        if (o.rfind("-arch", 0) == 0 || o.rfind("--arch", 0) == 0) {
            return Error{Errc::invalid_argument, "link option '" + o +
                                                     "' sets the target: pass the arch in kjit_compile_options.arch, "
                                                     "which NVRTC and nvJitLink both get"};
        }
    }
    request.link_files.clear();
    for (const std::string &given : request.link_inputs) {
        if (given.empty()) return Error{Errc::invalid_argument, "a link input is an empty file name"};
        std::error_code ec;
        const std::string path =
            given[0] == '/' ? given : std::filesystem::absolute(given, ec).lexically_normal().string();
        if (ec) return Error{Errc::io, "cannot make link input '" + given + "' absolute: " + ec.message()};
        KJIT_TRY_ASSIGN(auto in, compile::linker::read_input(path));
        request.link_files.push_back(std::move(in));
    }
    return Ok{};
}

bool includes_headers(const Request &request) { return request.source.find("#include") != std::string::npos; }

namespace {

// Whether the source or an in-memory header may expand __BASE_FILE__ (the program's name).
bool texts_name_program(const Request &r) {
    if (include_scanner::file_naming(r.source).program) return true;
    return std::any_of(r.headers.begin(), r.headers.end(),
                       [](const auto &h) { return include_scanner::file_naming(h.second).program; });
}

}  // namespace

std::string pch_texts(const Request &r) {
    const HashState owned = new_hash_state();
    XXH3_state_t *state = owned.get();
    field(state, "kjit-pch-texts", std::to_string(kFormatVersion));
    field(state, "arch", r.arch);
    field(state, "options", std::to_string(r.nvrtc_options.size()));
    for (const auto &o : r.nvrtc_options) field(state, "option", compile::compiler::keyed_option(o));
    field(state, "pch_options", std::to_string(r.pch_options.size()));
    for (const auto &o : r.pch_options) field(state, "pch_option", o);
    field(state, "include_paths", std::to_string(r.include_paths.size()));
    for (const auto &p : r.include_paths) field(state, "include_path", p);
    field(state, "working_dir", r.search.working_dir);
    if (!r.program_name.empty() && texts_name_program(r)) field(state, "program_name", r.program_name);
    // A link compiles to LTO-IR (-dlto -rdc=true): a PCH of other options is not its.
    if (!r.link_inputs.empty()) field(state, "lto", "1");
    field(state, "headers", std::to_string(r.headers.size()));
    for (const auto &h : r.headers) {
        field(state, "header.name", h.first);
        field(state, "header.source", h.second);
    }
    const std::size_t last_include = r.source.rfind("#include");
    std::size_t prefix = 0;
    if (last_include != std::string::npos) {
        const std::size_t eol = r.source.find('\n', last_include);
        prefix = eol == std::string::npos ? r.source.size() : eol + 1;
    }
    field(state, "source.prefix", std::string_view(r.source).substr(0, prefix));
    return hex_digest(state);
}

namespace {

// The link's part of the key, with link inputs: each file read, then nvJitLink's build (so a
// missing file is said even where there is no nvJitLink).
Status key_link(Request &request) {
    if (request.link_inputs.empty()) return Ok{};
    KJIT_TRY(read_link_inputs(request));
    KJIT_TRY_ASSIGN(auto nvjitlink, compile::nvjitlink_probe::identity(request.cache_dir));
    request.nvjitlink_identity = std::move(nvjitlink);
    return Ok{};
}

// Whether the NVRTC options define NDEBUG and undefine it nowhere (-U in any spelling).
bool defines_ndebug(const std::vector<std::string> &options, const std::vector<std::string> &defines) {
    const bool defined = std::any_of(defines.begin(), defines.end(), [](const std::string &d) {
        return d.compare(0, 6, "NDEBUG") == 0 && (d.size() == 6 || d[6] == '=');
    });
    const auto undefines = [](const std::string &o) {
        return (o.rfind("-U", 0) == 0 || o.rfind("--undefine-macro", 0) == 0 || o.rfind("-undefine-macro", 0) == 0) &&
               (o.find("NDEBUG") != std::string::npos || o == "-U" || o == "--undefine-macro");
    };
    return defined && std::none_of(options.begin(), options.end(), undefines);
}

// Checks the base folders and makes each absolute and normal (no trailing '/').
Status check_base_dirs(std::vector<std::string> &base_dirs) {
    for (std::string &b : base_dirs) {
        if (b.empty() || b[0] != '/') {
            return Error{Errc::invalid_argument,
                         "base folder '" + b + "' is not absolute: name the install root, e.g. '/opt/venv'"};
        }
        b = normal_base_folder(b);
    }
    return Ok{};
}

// How `request` looks files up (its include folders, each with its anchor; the program's
// folder) and, with line information, the locations the cubin names, in the key; `folders`, the
// request's folders as keyed (keyed_folders), gives every anchor.
Status key_folders(Request &request, const key::include_scanner::FileOptions &files, const KeyedFolders &folders) {
    KJIT_TRY(check_base_dirs(request.base_dirs));
    key::include_scanner::Search &search = request.search;
    search.anchors = folders.anchors;
    search.base_dirs = request.base_dirs;
    for (const std::string &d : files.include_dirs) {
        search.include_dirs.push_back(d[0] == '/' ? d : search.working_dir + "/" + d);
    }
    search.include_dir_anchor = folders.include_dir_anchors;
    search.include_dirs.insert(search.include_dirs.end(), request.include_paths.begin(), request.include_paths.end());
    search.include_dir_anchor.insert(search.include_dir_anchor.end(), folders.include_path_anchors.begin(),
                                     folders.include_path_anchors.end());
    search.pre_include_anchor = folders.pre_include_anchors;
    search.source_folder = key::include_scanner::folder_of_name(request.program_name, search.working_dir);
    search.source_folder_absolute = !request.program_name.empty() && request.program_name[0] == '/';
    search.source_folder_anchor = folders.program_anchor;
    search.quiet_assert = defines_ndebug(request.nvrtc_options, files.defines);
    // Line information names the program's file, and the headers', by absolute path: compiled
    // from another folder, the cubin would name files there. Only then are the working
    // directory and the anchors' locations in the key (relative to the base folders).
    if (asks_for_line_info(request.nvrtc_options)) {
        if (!search.working_dir.empty()) {
            request.keyed_working_dir = key::include_scanner::location(search.working_dir, search.base_dirs);
        }
        for (const std::string &a : search.anchors) {
            request.keyed_locations.push_back(key::include_scanner::location(a, search.base_dirs));
        }
    }
    return Ok{};
}

}  // namespace

Result<KeyedRequest> key_request(Request request) {
    KJIT_TRY(cubin::name_matcher::check_keyword(request.keyword));
    KJIT_TRY(check_arch(request.arch));
    // NVRTC's PCH options never reach it as given: it would reuse a PCH made from headers since
    // edited. `--pch` becomes libkjit's PCH, in a folder per header identity; options naming
    // the caller's PCH files are refused. None of them changes what the cubin does: not in the
    // key, nor in the manifest.
    KJIT_TRY_ASSIGN(auto pch, compile::compiler::take_pch_options(request.nvrtc_options));
    request.nvrtc_options = std::move(pch.rest);
    request.pch_requested = pch.automatic;
    request.use_pch = request.use_pch || pch.automatic;
    request.pch_options = std::move(pch.shape);
    KJIT_TRY(check_no_target_option(request.nvrtc_options));
    // Relative folders mean different things in different working directories: key and
    // compile with absolute ones.
    const auto relative = [](const std::string &p) { return p.empty() || p[0] != '/'; };
    const bool relative_folders = relative(request.cache_dir) ||
                                  std::any_of(request.include_paths.begin(), request.include_paths.end(), relative) ||
                                  std::any_of(request.link_inputs.begin(), request.link_inputs.end(), relative);
    KJIT_TRY_ASSIGN(auto cache_dir, absolute_folder(request.cache_dir));
    request.cache_dir = std::move(cache_dir);
    std::error_code ec;
    for (std::string &p : request.include_paths) p = std::filesystem::absolute(p, ec).lexically_normal().string();
    // Not in the key, nor in relative_folders: a seed only ever gives the entry of this key.
    for (std::string &p : request.seed_dirs) {
        KJIT_TRY_ASSIGN(auto seed, absolute_folder(p));
        p = std::move(seed);
    }

    // Every file NVRTC may read must be in the key by content, however it is reached: find how
    // it looks files up (docs/cache-layout.md). Relative include folders and pre-included files
    // among the NVRTC options, like the source's quoted includes, are looked up relative to the
    // working directory, which then enters the key.
    KJIT_TRY_ASSIGN(auto files, key::include_scanner::file_options(request.nvrtc_options));
    if (request.program_name == kDefaultProgramName) request.program_name.clear();
    if (!request.program_name.empty() && request.program_name.back() == '/') {
        return Error{Errc::invalid_argument,
                     "program_name '" + request.program_name + "' names a folder, not a file such as 'gemm.cu'"};
    }
    const key::include_scanner::Reach reach =
        key::include_scanner::reach(request.source, request.program_name, request.headers, files);
    request.reads_files = reach.reads_files;
    request.search = key::include_scanner::Search{};
    if (reach.uses_working_dir) {
        std::error_code cwd_ec;
        request.search.working_dir = std::filesystem::current_path(cwd_ec).string();
        if (cwd_ec || request.search.working_dir.empty() || request.search.working_dir[0] != '/') {
            return Error{Errc::io, "cannot tell the working directory, which the source's includes or the NVRTC "
                                   "options make NVRTC search: " +
                                       (cwd_ec ? cwd_ec.message() : "'" + request.search.working_dir + "'")};
        }
    }
    // Keyed once: the key and the search both take their anchors from it.
    const KeyedFolders folders = keyed_folders(request, files);
    KJIT_TRY(key_folders(request, files, folders));
    request.search.pre_includes = std::move(files.pre_includes);
    request.search.defines = std::move(files.defines);

    // NVRTC's build is in the key: from the library loaded, or from the record of it in the
    // cache folder, so that a look-up need not load NVRTC (nvrtc_probe.hpp). Checked last, so
    // that a bad request says what is wrong with it even where there is no NVRTC.
    KJIT_TRY_ASSIGN(auto nvrtc, compile::nvrtc_probe::identity(request.cache_dir));
    request.nvrtc_identity = std::move(nvrtc);
    KJIT_TRY(key_link(request));

    KeyedRequest keyed;
    keyed.key = key_of(request, folders);
    keyed.entry = store::cache_entry::folder_for(request.cache_dir, keyed.key);
    keyed.cubin = keyed.entry + "/" + store::cache_entry::kCubinFile;
    keyed.uses_working_dir = relative_folders || !request.search.working_dir.empty();
    keyed.request = std::move(request);
    return keyed;
}

}  // namespace kjit::key
