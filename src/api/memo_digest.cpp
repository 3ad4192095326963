#include "api/memo_digest.hpp"

#include "api/c_struct.hpp"
#include "api/defaults.hpp"
#include "util/environment.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::api {

namespace {

// Whether the caller's options struct (of its own struct_size) holds `field` (c_struct.hpp).
#define KJIT_MEMO_OPTION_PRESENT(options, field) KJIT_FIELD_PRESENT(kjit_compile_options, options, field)
// The same for CallReader's options (none: no field).
#define KJIT_MEMO_HAS(field) (o_ && KJIT_MEMO_OPTION_PRESENT(o_, field))

// A C list of strings as digest_fields reads a list: its count and each string (null where
// the caller's list or entry is NULL, which fails the digest).
struct CStrings {
    const char *const *items = nullptr;
    std::size_t count = 0;
    std::size_t size() const { return count; }
    const char *operator[](std::size_t i) const { return items ? items[i] : nullptr; }
};

// The in-memory headers likewise: a name and a text each.
struct CHeaders {
    const kjit_header *items = nullptr;
    std::size_t count = 0;
    std::size_t size() const { return count; }
    std::pair<const char *, const char *> operator[](std::size_t i) const {
        return items ? std::make_pair(items[i].name, items[i].source) : std::make_pair(nullptr, nullptr);
    }
};

// digest_fields' reader of kjit_compile's arguments as they come: the fields the caller's
// struct_size holds, the defaults resolved as request_from resolves them (settle() first).
class CallReader {
public:
    CallReader(const char *source, const char *keyword, const kjit_compile_options *o)
        : source_(source), keyword_(keyword), o_(o) {}

    // Resolves the cache folder and the arch (the option when set, else the default) and the
    // base folders (the option's, those the caller's struct_size holds, "none" alone: none;
    // else $KJIT_BASE_DIRS's, `from_env`, null when unset). False where a default cannot be
    // resolved or a base folder is NULL or empty: the full look-up says so.
    bool settle(const char *from_env);

    const char *source() const { return source_; }
    const char *keyword() const { return keyword_; }
    std::string_view cache_dir() const { return cache_dir_; }
    std::string_view arch() const { return arch_; }
    CStrings nvrtc_options() const {
        return KJIT_MEMO_HAS(nvrtc_option_count) ? CStrings{o_->nvrtc_options, o_->nvrtc_option_count} : CStrings{};
    }
    CStrings include_paths() const {
        return KJIT_MEMO_HAS(include_path_count) ? CStrings{o_->include_paths, o_->include_path_count} : CStrings{};
    }
    CHeaders headers() const {
        return KJIT_MEMO_HAS(header_count) ? CHeaders{o_->headers, o_->header_count} : CHeaders{};
    }
    const char *name_expression() const { return KJIT_MEMO_HAS(name_expression) ? o_->name_expression : nullptr; }
    const char *program_name() const {
        const char *name = KJIT_MEMO_HAS(program_name) ? o_->program_name : nullptr;
        return name ? name : "";
    }
    CStrings link_inputs() const {
        return KJIT_MEMO_HAS(link_input_count) ? CStrings{o_->link_inputs, o_->link_input_count} : CStrings{};
    }
    CStrings link_options() const {
        return KJIT_MEMO_HAS(link_option_count) ? CStrings{o_->link_options, o_->link_option_count} : CStrings{};
    }
    const std::vector<std::string_view> &base_dirs() const { return base_dirs_; }

private:
    const char *source_;
    const char *keyword_;
    const kjit_compile_options *o_;
    std::string defaulted_cache_dir_, defaulted_arch_;  // held only when a default is used
    std::string_view cache_dir_, arch_;
    std::vector<std::string_view> base_dirs_;  // empty unless base folders are set (no allocation)
};

bool CallReader::settle(const char *from_env) {
    const char *dir = KJIT_MEMO_HAS(cache_dir) ? o_->cache_dir : nullptr;
    if (dir && *dir) {
        cache_dir_ = dir;
    } else {
        auto found = defaults::cache_dir();
        if (!found) return false;
        defaulted_cache_dir_ = std::move(*found);
        cache_dir_ = defaulted_cache_dir_;
    }
    const char *arch = KJIT_MEMO_HAS(arch) ? o_->arch : nullptr;
    if (arch && *arch) {
        arch_ = arch;
    } else {
        auto detected = defaults::arch();
        if (!detected) return false;
        defaulted_arch_ = std::move(*detected);
        arch_ = defaulted_arch_;
    }
    if (KJIT_MEMO_HAS(base_dir_count) && o_->base_dir_count > 0) {
        if (!o_->base_dirs) return false;
        for (std::size_t i = 0; i < o_->base_dir_count; ++i) {
            if (!o_->base_dirs[i] || !*o_->base_dirs[i]) return false;
        }
        if (o_->base_dir_count == 1 && std::strcmp(o_->base_dirs[0], "none") == 0) return true;
        base_dirs_.assign(o_->base_dirs, o_->base_dirs + o_->base_dir_count);
        return true;
    }
    if (from_env) defaults::for_each_folder(from_env, [&](std::string_view folder) { base_dirs_.push_back(folder); });
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
    const std::uint64_t max_size =
        options && KJIT_MEMO_OPTION_PRESENT(options, max_cache_size) ? options->max_cache_size : 0;
    const MemoSettings env = memo_settings();
    if (!memo_may_answer(env, max_size)) return false;
    CallReader reader(source, keyword, options);
    if (!reader.settle(env.base_dirs) || !known_compile_mode(options)) return false;
    cache::HitMemo::Fields f;
    if (!cache::HitMemo::digest_fields(reader, f)) return false;
    out = f.digest();
    return true;
}

#undef KJIT_MEMO_HAS
#undef KJIT_MEMO_OPTION_PRESENT

}  // namespace kjit::api
