#include "util/environment.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace kjit::environment {

namespace {

struct Entry {
    Variable variable;
    std::string_view name;  // a literal: NUL-terminated, its length known without a strlen
};

// The list tests/check_environment.sh reads: one variable per line, in Variable's order.
constexpr Entry kVariables[] = {
    {Variable::cache_dir, "KJIT_CACHE_DIR"},
    {Variable::xdg_cache_home, "XDG_CACHE_HOME"},
    {Variable::home, "HOME"},
    {Variable::arch, "KJIT_ARCH"},
    {Variable::cache_max_size, "KJIT_CACHE_MAX_SIZE"},
    {Variable::jobs, "KJIT_JOBS"},
    {Variable::worker_kind, "KJIT_WORKER_KIND"},
    {Variable::worker, "KJIT_WORKER"},
    {Variable::hit_memo, "KJIT_HIT_MEMO"},
    {Variable::compile_wait, "KJIT_COMPILE_WAIT"},
    {Variable::durability, "KJIT_DURABILITY"},
    {Variable::remote_storage, "KJIT_REMOTE_STORAGE"},
    {Variable::cache_seed, "KJIT_CACHE_SEED"},
    {Variable::base_dirs, "KJIT_BASE_DIRS"},
    {Variable::no_compile, "KJIT_NO_COMPILE"},
    {Variable::record, "KJIT_RECORD"},
    {Variable::watch_headers, "KJIT_WATCH_HEADERS"},
    {Variable::log_level, "KJIT_LOG_LEVEL"},
    {Variable::libcuda, "KJIT_LIBCUDA"},
    {Variable::libnvrtc, "KJIT_LIBNVRTC"},
    {Variable::libnvjitlink, "KJIT_LIBNVJITLINK"},
    {Variable::tmpdir, "TMPDIR"},
};

constexpr bool in_order() {
    for (std::size_t i = 0; i < sizeof kVariables / sizeof kVariables[0]; ++i) {
        if (static_cast<std::size_t>(kVariables[i].variable) != i) return false;
    }
    return sizeof kVariables / sizeof kVariables[0] == static_cast<std::size_t>(Variable::count);
}
static_assert(in_order(), "kVariables must list every Variable once, in its order");

}  // namespace

const char *name(Variable v) { return kVariables[static_cast<std::size_t>(v)].name.data(); }

namespace {
thread_local Snapshot *current_snapshot = nullptr;  // the innermost on this thread
}  // namespace

Snapshot::Snapshot(const Variable *variables, std::size_t count) : outer_(current_snapshot) {
    const char *found[static_cast<std::size_t>(Variable::count)];
    count = std::min(count, static_cast<std::size_t>(Variable::count));
    get_all(variables, count, found);
    for (std::size_t i = 0; i < count; ++i) {
        values_[static_cast<std::size_t>(variables[i])] = found[i];
        taken_[static_cast<std::size_t>(variables[i])] = true;
    }
    current_snapshot = this;
}

Snapshot::~Snapshot() { current_snapshot = outer_; }

const char *get(Variable v) {
    const auto i = static_cast<std::size_t>(v);
    for (const Snapshot *snapshot = current_snapshot; snapshot; snapshot = snapshot->outer_) {
        if (snapshot->taken_[i]) return snapshot->values_[i];
    }
    return std::getenv(name(v));
}

void get_all(const Variable *variables, std::size_t count, const char **values) {
    // The names' first bytes, so that the pass looks at each entry once (most match none): a
    // repeat of the hit memo pays this pass.
    bool first_byte[256] = {};
    for (std::size_t i = 0; i < count; ++i) {
        values[i] = nullptr;
        first_byte[static_cast<unsigned char>(name(variables[i])[0])] = true;
    }
    for (char **e = environ; e && *e; ++e) {
        const char *entry = *e;
        if (!first_byte[static_cast<unsigned char>(entry[0])]) continue;
        for (std::size_t i = 0; i < count; ++i) {
            if (values[i]) continue;
            const std::string_view n = kVariables[static_cast<std::size_t>(variables[i])].name;
            if (entry[1] != n[1]) continue;  // every name has two bytes; most entries differ there
            if (std::strncmp(entry, n.data(), n.size()) == 0 && entry[n.size()] == '=')
                values[i] = entry + n.size() + 1;
        }
    }
}

}  // namespace kjit::environment
