#include "api/compile_options.hpp"

#include "api/c_struct.hpp"
#include "api/defaults.hpp"
#include "util/environment.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace kjit::api::compile_options {

using c_struct::invalid;

namespace {

// A NUL-terminated string array from the C side, checked. `where` names the options struct in
// messages ("kjit_compile: options").
Status take_strings(const char *const *items, size_t count, const std::string &where, const char *what,
                    std::vector<std::string> &out) {
    if (count > 0 && !items) {
        return invalid(where + "." + what + " is NULL but its count is " + std::to_string(count));
    }
    for (size_t i = 0; i < count; ++i) {
        if (!items[i]) return invalid(where + "." + what + "[" + std::to_string(i) + "] is NULL");
        out.emplace_back(items[i]);
    }
    return Ok{};
}

// What the caller's options set explicitly; the rest comes from the environment's defaults.
struct GivenSettings {
    const char *cache_dir = nullptr;
    const char *arch = nullptr;
    std::uint64_t max_cache_size = 0;
    bool seed_dirs = false;  // the seed_dirs option was given (possibly "none")
    bool base_dirs = false;  // the base_dirs option was given (possibly "none")
    int compile_mode = KJIT_COMPILE_DEFAULT;
};

// options->headers (in-memory headers), checked.
Status take_headers(const kjit_compile_options *options, key::Request &r, const std::string &where) {
    if (options->header_count > 0 && !options->headers) {
        return invalid(where + ".headers is NULL but header_count is not 0");
    }
    for (size_t i = 0; i < options->header_count; ++i) {
        const kjit_header &h = options->headers[i];
        if (!h.name || !h.source) {
            return invalid(where + ".headers[" + std::to_string(i) + "] has a NULL name or source");
        }
        r.headers.emplace_back(h.name, h.source);
    }
    return Ok{};
}

// The string arrays of the options (NVRTC options, include paths, link inputs and options,
// in-memory headers), those the caller's struct_size holds, checked.
Status take_lists(const kjit_compile_options *options, key::Request &r, const std::string &where) {
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, nvrtc_option_count)) {
        KJIT_TRY(
            take_strings(options->nvrtc_options, options->nvrtc_option_count, where, "nvrtc_options", r.nvrtc_options));
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, include_path_count)) {
        KJIT_TRY(
            take_strings(options->include_paths, options->include_path_count, where, "include_paths", r.include_paths));
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, link_input_count)) {
        KJIT_TRY(take_strings(options->link_inputs, options->link_input_count, where, "link_inputs", r.link_inputs));
        for (const std::string &input : r.link_inputs) {
            if (input.empty()) return invalid(where + ".link_inputs has an empty file name");
        }
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, link_option_count)) {
        if (auto s =
                take_strings(options->link_options, options->link_option_count, where, "link_options", r.link_options);
            !s) {
            return s;
        }
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, header_count)) return take_headers(options, r, where);
    return Ok{};
}

// A folder-list option (seed_dirs, base_dirs) into `out`, checked: no name NULL or empty; "none"
// alone is none, whatever the variable behind the option says (as remote_storage's "none").
// `given` tells the option from the variable: a count of 0 leaves it false.
Status take_folders(const char *const *items, size_t count, const std::string &where, const char *what,
                    std::vector<std::string> &out, bool &given) {
    if (count == 0) return Ok{};
    KJIT_TRY(take_strings(items, count, where, what, out));
    for (const std::string &dir : out) {
        if (dir.empty()) return invalid(where + "." + what + " has an empty folder name");
    }
    if (out.size() == 1 && out[0] == "none") out.clear();
    given = true;
    return Ok{};
}

// The fields of the caller's options (those its struct_size holds): the lists and the name
// expression into `r`, the settings with defaults into `given`.
Status take_options(const kjit_compile_options *options, key::Request &r, const std::string &where,
                    GivenSettings &given) {
    KJIT_TRY(c_struct::check_size(*options, where, "kjit_compile_options"));
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, cache_dir)) given.cache_dir = options->cache_dir;
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, arch)) given.arch = options->arch;
    KJIT_TRY(take_lists(options, r, where));
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, name_expression) && options->name_expression) {
        r.name_expression = options->name_expression;
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, max_cache_size))
        given.max_cache_size = options->max_cache_size;
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, remote_storage) && options->remote_storage &&
        *options->remote_storage) {
        r.remote_spec = options->remote_storage;
        r.remote_origin = "the remote_storage option";
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, program_name) && options->program_name)
        r.program_name = options->program_name;
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, compile_mode)) {
        if (options->compile_mode < KJIT_COMPILE_DEFAULT || options->compile_mode > KJIT_COMPILE_NEVER) {
            return invalid(where + ".compile_mode is " + std::to_string(options->compile_mode) +
                           ": use a kjit_compile_mode (KJIT_COMPILE_DEFAULT, _ALWAYS, _WARN or _NEVER)");
        }
        given.compile_mode = options->compile_mode;
        // Read with compile_mode: a struct that holds the one holds the other.
        if (KJIT_FIELD_PRESENT(kjit_compile_options, options, reserved) && options->reserved != 0) {
            return invalid(where + ".reserved is " + std::to_string(options->reserved) + "; it must be 0");
        }
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, seed_dir_count)) {
        KJIT_TRY(take_folders(options->seed_dirs, options->seed_dir_count, where, "seed_dirs", r.seed_dirs,
                              given.seed_dirs));
    }
    if (KJIT_FIELD_PRESENT(kjit_compile_options, options, base_dir_count)) {
        return take_folders(options->base_dirs, options->base_dir_count, where, "base_dirs", r.base_dirs,
                            given.base_dirs);
    }
    return Ok{};
}

// The cache size limit: the option's, else $KJIT_CACHE_MAX_SIZE's. UINT64_MAX is no limit,
// whatever the environment says; 0 is the default.
Status settle_max_cache_size(std::uint64_t max_cache_size, key::Request &r) {
    if (max_cache_size == UINT64_MAX) return Ok{};
    if (max_cache_size != 0) {
        r.max_cache_bytes = max_cache_size;
        return Ok{};
    }
    KJIT_TRY_ASSIGN(auto from_env, defaults::max_cache_bytes());
    r.max_cache_bytes = from_env;
    return Ok{};
}

// The architecture: the option's when set, else $KJIT_ARCH's or the current GPU's; with where it
// came from, for messages.
Status settle_arch(const char *arch, key::Request &r) {
    if (arch && *arch) {
        r.arch = arch;
        r.arch_origin = "the arch option";
        return Ok{};
    }
    KJIT_TRY_ASSIGN(auto detected, defaults::arch());
    r.arch = detected;
    const char *env = environment::get(environment::Variable::arch);
    r.arch_origin = env && *env ? "KJIT_ARCH" : "the current GPU";
    return Ok{};
}

static_assert(defaults::kCompileAlways == KJIT_COMPILE_ALWAYS && defaults::kCompileWarn == KJIT_COMPILE_WARN &&
                  defaults::kCompileNever == KJIT_COMPILE_NEVER,
              "the defaults' compile modes differ from kjit_compile_mode");

// The compile mode given (KJIT_COMPILE_DEFAULT: $KJIT_NO_COMPILE's) into `r`.
Status settle_compile_mode(int given, key::Request &r) {
    int mode = given;
    if (mode == KJIT_COMPILE_DEFAULT) {
        KJIT_TRY_ASSIGN(auto from_env, defaults::compile_mode());
        mode = from_env;
    } else {
        r.compile_mode_origin = "the compile_mode option";
    }
    using key::CompileMode;
    r.compile_mode = mode == KJIT_COMPILE_NEVER  ? CompileMode::never
                     : mode == KJIT_COMPILE_WARN ? CompileMode::warn
                                                 : CompileMode::always;
    return Ok{};
}

}  // namespace

// The cache folder a call names, into `dir`: `given` when set, else the default (not yet
// absolute; `origin`, if not null, then says where from). The one rule for kjit_compile's
// options and the maintenance calls alike; written into the caller's string, so a hit's
// request takes the folder with one copy, as before.
Status given_or_default_cache_dir(const char *given, std::string &dir, const char **origin) {
    if (given && *given) {
        dir = given;
        return Ok{};
    }
    KJIT_TRY_ASSIGN(auto found, defaults::cache_dir(origin));
    dir = std::move(found);
    return Ok{};
}

// The C options (any struct_size from the first release on) as a cache request.
Status request_from(const kjit_compile_options *options, key::Request &r, const std::string &where) {
    // The variables the defaults below read, in one pass over the environment (a getenv each
    // was a tenth of a first hit's instructions).
    using environment::Variable;
    static constexpr Variable kRead[] = {Variable::remote_storage, Variable::cache_seed,     Variable::base_dirs,
                                         Variable::no_compile,     Variable::cache_max_size, Variable::durability,
                                         Variable::compile_wait};
    const environment::Snapshot settings(kRead, sizeof kRead / sizeof kRead[0]);
    GivenSettings given;
    if (options) {
        KJIT_TRY(take_options(options, r, where, given));
    }
    if (r.remote_spec.empty()) r.remote_spec = defaults::remote_storage();
    if (!given.seed_dirs) r.seed_dirs = defaults::seed_dirs();
    if (!given.base_dirs) r.base_dirs = defaults::base_dirs();
    KJIT_TRY(settle_compile_mode(given.compile_mode, r));
    KJIT_TRY(settle_max_cache_size(given.max_cache_size, r));
    KJIT_TRY_ASSIGN(auto durable, defaults::durable_publish());
    r.durable = durable;
    KJIT_TRY_ASSIGN(auto wait, defaults::compile_wait());
    r.compile_wait = wait;
    KJIT_TRY(given_or_default_cache_dir(given.cache_dir, r.cache_dir, &r.cache_dir_origin));
    // Before the default arch is looked for: without a GPU that fails, and would hide the option.
    KJIT_TRY(key::check_no_target_option(r.nvrtc_options));
    return settle_arch(given.arch, r);
}

}  // namespace kjit::api::compile_options
