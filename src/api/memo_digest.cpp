#include "api/memo_digest.hpp"

#include "api/c_struct.hpp"
#include "api/defaults.hpp"
#include "util/environment.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace kjit::api {

namespace {

// Whether the caller's options struct (of its own struct_size) holds `field` (c_struct.hpp).
#define KJIT_MEMO_OPTION_PRESENT(options, field) KJIT_FIELD_PRESENT(kjit_compile_options, options, field)

// A string list as Request holds it: its count, then each string. False on a NULL.
bool strings(cache::HitMemo::Fields &f, const char *const *items, std::size_t count) {
    if (count > 0 && !items) return false;
    f.count(count);
    for (std::size_t i = 0; i < count; ++i) {
        if (!items[i]) return false;
        f.field(items[i]);
    }
    return true;
}

// The in-memory headers: their count, then name and text of each. False on a NULL.
bool headers(cache::HitMemo::Fields &f, const kjit_header *items, std::size_t count) {
    if (count > 0 && !items) return false;
    f.count(count);
    for (std::size_t i = 0; i < count; ++i) {
        if (!items[i].name || !items[i].source) return false;
        f.field(items[i].name);
        f.field(items[i].source);
    }
    return true;
}

// The cache folder and the arch: the option when set, else the default (as request_from).
bool settings(cache::HitMemo::Fields &f, const char *cache_dir, const char *arch) {
    if (cache_dir && *cache_dir) {
        f.field(cache_dir);
    } else {
        auto found = defaults::cache_dir();
        if (!found) return false;
        f.field(*found);
    }
    if (arch && *arch) {
        f.field(arch);
    } else {
        auto detected = defaults::arch();
        if (!detected) return false;
        f.field(*detected);
    }
    return true;
}

// The lists, the name expression, the program name and the link lists, those the caller's
// struct_size holds.
bool lists_and_names(cache::HitMemo::Fields &f, const kjit_compile_options *o) {
    const bool has_options = o && KJIT_MEMO_OPTION_PRESENT(o, nvrtc_option_count);
    if (!strings(f, has_options ? o->nvrtc_options : nullptr, has_options ? o->nvrtc_option_count : 0)) return false;
    const bool has_paths = o && KJIT_MEMO_OPTION_PRESENT(o, include_path_count);
    if (!strings(f, has_paths ? o->include_paths : nullptr, has_paths ? o->include_path_count : 0)) return false;
    const bool has_headers = o && KJIT_MEMO_OPTION_PRESENT(o, header_count);
    if (!headers(f, has_headers ? o->headers : nullptr, has_headers ? o->header_count : 0)) return false;
    const char *expression = o && KJIT_MEMO_OPTION_PRESENT(o, name_expression) ? o->name_expression : nullptr;
    f.count(expression ? 1 : 0);
    if (expression) f.field(expression);
    const char *program = o && KJIT_MEMO_OPTION_PRESENT(o, program_name) ? o->program_name : nullptr;
    f.field(program ? program : "");
    const bool has_inputs = o && KJIT_MEMO_OPTION_PRESENT(o, link_input_count);
    if (!strings(f, has_inputs ? o->link_inputs : nullptr, has_inputs ? o->link_input_count : 0)) return false;
    const bool has_link_options = o && KJIT_MEMO_OPTION_PRESENT(o, link_option_count);
    return strings(f, has_link_options ? o->link_options : nullptr, has_link_options ? o->link_option_count : 0);
}

// The base folders as Request holds them (after the link lists): the option's, those the
// caller's struct_size holds ("none" alone: none), else $KJIT_BASE_DIRS's (`from_env`, null when
// unset), as request_from takes them. False on a NULL or empty name: the full look-up says so.
bool base_folders(cache::HitMemo::Fields &f, const kjit_compile_options *o, const char *from_env) {
    if (o && KJIT_MEMO_OPTION_PRESENT(o, base_dir_count) && o->base_dir_count > 0) {
        if (!o->base_dirs) return false;
        for (std::size_t i = 0; i < o->base_dir_count; ++i) {
            if (!o->base_dirs[i] || !*o->base_dirs[i]) return false;
        }
        if (o->base_dir_count == 1 && std::strcmp(o->base_dirs[0], "none") == 0) {
            f.count(0);
            return true;
        }
        return strings(f, o->base_dirs, o->base_dir_count);
    }
    std::size_t count = 0;
    if (from_env) defaults::for_each_folder(from_env, [&](std::string_view) { ++count; });
    f.count(count);
    if (count > 0) defaults::for_each_folder(from_env, [&](std::string_view dir) { f.field(dir); });
    return true;
}

// Whether the caller's compile mode is one (not in the digest: a hit is the same in every mode).
// One that is none goes to the full look-up, which says so.
bool known_compile_mode(const kjit_compile_options *o) {
    return !(o && KJIT_MEMO_OPTION_PRESENT(o, compile_mode) &&
             (o->compile_mode < KJIT_COMPILE_DEFAULT || o->compile_mode > KJIT_COMPILE_NEVER)) &&
           !(o && KJIT_MEMO_OPTION_PRESENT(o, reserved) && o->reserved != 0);
}

// The variables a repeat reads, found in one pass over the environment (environment::get_all):
// a getenv each (a pass each) was a sixth of a repeat's time.
struct MemoSettings {
    const char *hit_memo = nullptr;
    const char *max_cache_size = nullptr;
    const char *compile_wait = nullptr;
    const char *base_dirs = nullptr;
};

MemoSettings memo_settings() {
    using environment::Variable;
    static constexpr Variable kRead[] = {Variable::hit_memo, Variable::cache_max_size, Variable::compile_wait,
                                         Variable::base_dirs};
    const char *values[4];
    environment::get_all(kRead, 4, values);
    return MemoSettings{values[0], values[1], values[2], values[3]};
}

// Whether the memo may answer: it is on (HitMemo::enabled's rule), and the settings request_from
// checks at every call although a hit does not use them are ones it accepts (else the full path
// says what is wrong).
bool memo_may_answer(const MemoSettings &env, std::uint64_t max_cache_size_option) {
    if (env.hit_memo && std::strcmp(env.hit_memo, "0") == 0) return false;
    if (max_cache_size_option == 0 && env.max_cache_size && *env.max_cache_size && !defaults::max_cache_bytes()) {
        return false;
    }
    return !(env.compile_wait && *env.compile_wait && !defaults::compile_wait());
}

}  // namespace

bool memo_digest_of(const char *source, const char *keyword, const kjit_compile_options *options,
                    cache::HitMemo::Digest &out) {
    if (!source || !keyword) return false;
    if (options && (options->struct_size < sizeof(size_t) || options->struct_size > sizeof(kjit_compile_options))) {
        return false;
    }
    const char *cache_dir = options && KJIT_MEMO_OPTION_PRESENT(options, cache_dir) ? options->cache_dir : nullptr;
    const char *arch = options && KJIT_MEMO_OPTION_PRESENT(options, arch) ? options->arch : nullptr;
    const std::uint64_t max_size =
        options && KJIT_MEMO_OPTION_PRESENT(options, max_cache_size) ? options->max_cache_size : 0;
    const MemoSettings env = memo_settings();
    if (!memo_may_answer(env, max_size)) return false;
    cache::HitMemo::Fields f;
    f.field(source);
    f.field(keyword);
    if (!settings(f, cache_dir, arch) || !lists_and_names(f, options) || !base_folders(f, options, env.base_dirs) ||
        !known_compile_mode(options)) {
        return false;
    }
    out = f.digest();
    return true;
}

#undef KJIT_MEMO_OPTION_PRESENT

}  // namespace kjit::api
