// Compile options: the C struct kjit_compile_options read into a cache request (key::Request),
// and the one list of its fields (kFields), each with what it is to the cache: keyed (it can
// change the cache key, and both digests of the hit memo hold it), in the digests only (the
// cache folder: another folder is another answer, not another kernel), or a setting (neither:
// how to look and where, never which kernel). The list covers the struct to its end, checked at
// compile time, so a field appended to the struct without a place in the list fails the build;
// tests/api/compile_options_test.cpp checks each field's place against the key, HitMemo::digest
// of the request read here and the C ABI's memo digest (memo_digest.hpp), which must agree or a
// repeat would be answered with another request's cubin.
#pragma once

#include "key/cache_key.hpp"
#include "kjit/kjit.h"
#include "util/status.hpp"

#include <cstddef>
#include <string>

namespace kjit::api::compile_options {

enum class Role {
    keyed,        // may change the key; in both memo digests
    digest_only,  // in both memo digests, never in the key
    setting,      // in neither
};

struct Field {
    const char *name;
    std::size_t offset, size, align;
    Role role;
};

#define KJIT_COMPILE_OPTIONS_FIELD(field, role)                                             \
    Field {                                                                                 \
#field, offsetof(kjit_compile_options, field), sizeof(kjit_compile_options::field), \
            alignof(decltype(kjit_compile_options::field)), Role::role                      \
    }

// Every field of kjit_compile_options, in order. A list and its count have the list's role.
inline constexpr Field kFields[] = {
    KJIT_COMPILE_OPTIONS_FIELD(struct_size, setting),
    KJIT_COMPILE_OPTIONS_FIELD(cache_dir, digest_only),
    KJIT_COMPILE_OPTIONS_FIELD(arch, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(nvrtc_options, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(nvrtc_option_count, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(include_paths, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(include_path_count, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(headers, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(header_count, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(name_expression, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(max_cache_size, setting),
    KJIT_COMPILE_OPTIONS_FIELD(remote_storage, setting),
    KJIT_COMPILE_OPTIONS_FIELD(program_name, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(seed_dirs, setting),
    KJIT_COMPILE_OPTIONS_FIELD(seed_dir_count, setting),
    KJIT_COMPILE_OPTIONS_FIELD(link_inputs, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(link_input_count, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(link_options, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(link_option_count, keyed),
    KJIT_COMPILE_OPTIONS_FIELD(compile_mode, setting),
    KJIT_COMPILE_OPTIONS_FIELD(reserved, setting),  // must be 0
    KJIT_COMPILE_OPTIONS_FIELD(base_dirs, keyed),   // where a folder is pinned or keyed by location
    KJIT_COMPILE_OPTIONS_FIELD(base_dir_count, keyed),
};

#undef KJIT_COMPILE_OPTIONS_FIELD

// Whether kFields lists the struct's every byte but alignment padding: each field where the one
// before it ends (rounded up to its alignment), the last one ending the struct (likewise).
constexpr bool fields_cover_the_struct() {
    std::size_t end = 0;
    for (const Field &f : kFields) {
        if (f.offset != (end + f.align - 1) / f.align * f.align) return false;
        end = f.offset + f.size;
    }
    return (end + alignof(kjit_compile_options) - 1) / alignof(kjit_compile_options) * alignof(kjit_compile_options) ==
           sizeof(kjit_compile_options);
}
static_assert(fields_cover_the_struct(),
              "kjit_compile_options has a field compile_options::kFields does not list: give it its role there "
              "(and a case in tests/api/compile_options_test.cpp)");

// The caller's options (any struct_size from the first release on; null: none) as a cache
// request into `r` (whose source and keyword the caller set), with every unset setting settled
// to its default (the environment's, api/defaults.hpp). `where` names the struct in messages
// ("kjit_compile: options"). Errors: invalid_argument naming the field that is wrong (a struct
// size out of range, a NULL list or entry, an empty folder name, a compile mode that is none, a
// reserved field not 0, a target option NVRTC would take from the arch); a default that cannot
// be settled (no arch and no GPU, a bad variable) as api/defaults.hpp says. Thread safe.
Status request_from(const kjit_compile_options *options, key::Request &r, const std::string &where);

// The cache folder a call names, into `dir`: `given` when set, else the default (not yet
// absolute; `origin`, if not null, then says where from). The one rule for kjit_compile's
// options and the maintenance calls alike. Errors: as defaults::cache_dir.
Status given_or_default_cache_dir(const char *given, std::string &dir, const char **origin = nullptr);

}  // namespace kjit::api::compile_options
