// The compile options' one list of fields (api/compile_options.hpp, kFields) against what each
// field does. For every field of kjit_compile_options, a change of it alone (from options that
// hold every kind of input) must:
//   - give the same hit-memo digest both ways: HitMemo::digest of the request compile_options
//     reads, and the C ABI's digest of the arguments as they are (memo_digest.hpp); were they to
//     differ, a repeat would be answered under another request's digest;
//   - change the key, the digest or neither, as the field's role says (keyed: both, digest_only:
//     the digest, setting: neither).
// A field the list does not name fails the build (compile_options.hpp); one the list names
// without a case here fails the coverage test below.
#include "api/compile_options.hpp"
#include "api/memo_digest.hpp"
#include "cache/hit_memo.hpp"
#include "key/cache_key.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

using kjit::api::compile_options::kFields;
using kjit::api::compile_options::Role;
using kjit::cache::HitMemo;
using namespace kjit_test;

namespace {

// Options that own their strings: every list set through one of these.
struct Options {
    std::string source = "#include <tile.h>\ntemplate <int N> __global__ void scaled(float *p) { p[0] = N * T; }\n"
                         "__global__ void plain(float *p) { p[0] = T; }\n";
    std::string keyword = "scaled";
    std::vector<std::string> strings;  // kept alive (reserve: pointers into it stay valid)
    std::vector<const char *> nvrtc, includes, seeds, inputs, link_options, bases;
    std::vector<kjit_header> headers;
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;

    Options() { strings.reserve(64); }
    const char *keep(const std::string &s) { return strings.emplace_back(s).c_str(); }
    // Points the struct's lists at the vectors (after any change to them).
    void bind() {
        o.nvrtc_options = nvrtc.data();
        o.nvrtc_option_count = nvrtc.size();
        o.include_paths = includes.data();
        o.include_path_count = includes.size();
        o.headers = headers.data();
        o.header_count = headers.size();
        o.seed_dirs = seeds.data();
        o.seed_dir_count = seeds.size();
        o.link_inputs = inputs.data();
        o.link_input_count = inputs.size();
        o.link_options = link_options.data();
        o.link_option_count = link_options.size();
        o.base_dirs = bases.data();
        o.base_dir_count = bases.size();
    }
};

// A request's two digests and its key, as read from `opts`.
struct Read {
    HitMemo::Digest full, c_abi;
    std::string key;
};

Read read(Options &opts) {
    opts.bind();
    Read out;
    kjit::key::Request r;
    r.source = opts.source;
    r.keyword = opts.keyword;
    const auto st = kjit::api::compile_options::request_from(&opts.o, r, "options");
    EXPECT_TRUE(st.ok()) << st.error().message;
    out.full = HitMemo::digest(r);
    EXPECT_TRUE(kjit::api::memo_digest_of(opts.source.c_str(), opts.keyword.c_str(), &opts.o, out.c_abi))
        << "the C ABI's digest refused options request_from took";
    auto keyed = kjit::key::key_request(std::move(r));
    EXPECT_TRUE(keyed.ok()) << keyed.error().message;
    if (keyed) out.key = keyed->key;
    return out;
}

struct Case {
    std::vector<std::string> fields;                   // the fields of kjit_compile_options it changes
    std::function<void(Options &, TempDir &)> before;  // what the fields need to matter (optional)
    std::function<void(Options &, TempDir &)> change;
};

// Options with an include folder (holding a header that names its own file), a cache folder and
// an arch.
void base_options(Options &opts, TempDir &dir) {
    ::mkdir(dir.file("inc").c_str(), 0755);
    ::mkdir(dir.file("other-inc").c_str(), 0755);
    write_file(dir.file("inc/tile.h"), "#define T 2\nstatic const char *where = __FILE__;\n");
    opts.o.cache_dir = opts.keep(dir.file("cache"));
    opts.o.arch = "sm_90";
    opts.includes.push_back(opts.keep(dir.file("inc")));
}

std::vector<Case> cases(const std::string &device_library) {
    return {
        {{"cache_dir"}, nullptr, [](Options &o, TempDir &d) { o.o.cache_dir = o.keep(d.file("another-cache")); }},
        {{"arch"}, nullptr, [](Options &o, TempDir &) { o.o.arch = "sm_80"; }},
        {{"nvrtc_options", "nvrtc_option_count"},
         nullptr,
         [](Options &o, TempDir &) { o.nvrtc.push_back("-DEXTRA=1"); }},
        {{"include_paths", "include_path_count"},
         nullptr,
         [](Options &o, TempDir &d) { o.includes.insert(o.includes.begin(), o.keep(d.file("other-inc"))); }},
        {{"headers", "header_count"},
         nullptr,
         [](Options &o, TempDir &) {
             o.headers.push_back({"extra.h", "#define EXTRA 1\n"});
         }},
        {{"name_expression"}, nullptr, [](Options &o, TempDir &) { o.o.name_expression = "scaled<3>"; }},
        {{"max_cache_size"}, nullptr, [](Options &o, TempDir &) { o.o.max_cache_size = 1ull << 30; }},
        {{"remote_storage"}, nullptr, [](Options &o, TempDir &) { o.o.remote_storage = "redis://127.0.0.1:1"; }},
        {{"program_name"}, nullptr, [](Options &o, TempDir &) { o.o.program_name = "other.cu"; }},
        {{"seed_dirs", "seed_dir_count"},
         nullptr,
         [](Options &o, TempDir &d) { o.seeds.push_back(o.keep(d.file("seed"))); }},
        {{"link_inputs", "link_input_count"},
         nullptr,
         [&device_library](Options &o, TempDir &d) {
             write_file(d.file("lib.ltoir"), device_library);
             o.inputs.push_back(o.keep(d.file("lib.ltoir")));
         }},
        {{"link_options", "link_option_count"},
         [&device_library](Options &o, TempDir &d) {
             write_file(d.file("lib.ltoir"), device_library);
             o.inputs.push_back(o.keep(d.file("lib.ltoir")));
         },
         [](Options &o, TempDir &) { o.link_options.push_back("-O2"); }},
        {{"compile_mode"}, nullptr, [](Options &o, TempDir &) { o.o.compile_mode = KJIT_COMPILE_WARN; }},
        // Folders are keyed by location under -lineinfo (the cubin names them): a base folder
        // makes the location relative to it.
        {{"base_dirs", "base_dir_count"},
         [](Options &o, TempDir &) { o.nvrtc.push_back("-lineinfo"); },
         [](Options &o, TempDir &d) { o.bases.push_back(o.keep(d.path())); }},
        // An older struct reads as the newer one with its later fields at their defaults.
        {{"struct_size"},
         nullptr,
         [](Options &o, TempDir &) { o.o.struct_size = offsetof(kjit_compile_options, link_inputs); }},
    };
}

Role role_of(const std::string &field) {
    for (const auto &f : kFields) {
        if (field == f.name) return f.role;
    }
    ADD_FAILURE() << field << " is not in compile_options::kFields";
    return Role::setting;
}

const char *role_name(Role role) {
    return role == Role::keyed ? "keyed" : role == Role::digest_only ? "digest_only" : "setting";
}

std::string device_library() {
    return device_code_for("__device__ float twice(float x) { return 2 * x; }\n", "sm_90", DeviceCode::ltoir);
}

}  // namespace

TEST(CompileOptions, EachFieldChangesTheKeyAndBothDigestsAsItsRoleSays) {
    const std::string library = device_library();
    for (const Case &c : cases(library)) {
        const Role role = role_of(c.fields.front());
        SCOPED_TRACE(c.fields.front() + " (" + role_name(role) + ")");
        for (const std::string &f : c.fields) EXPECT_EQ(role_of(f), role) << f << " and " << c.fields.front();
        TempDir dir;
        Options opts;
        base_options(opts, dir);
        if (c.before) c.before(opts, dir);
        const Read before = read(opts);
        EXPECT_TRUE(before.full == before.c_abi) << "the two digests differ before the change";
        c.change(opts, dir);
        const Read after = read(opts);
        EXPECT_TRUE(after.full == after.c_abi) << "the two digests differ after the change";
        EXPECT_EQ(after.key != before.key, role == Role::keyed) << "key " << before.key << " -> " << after.key;
        EXPECT_EQ(!(after.full == before.full), role != Role::setting) << "the digest";
    }
}

TEST(CompileOptions, EveryFieldOfTheListHasACase) {
    std::set<std::string> covered;
    const std::string library;  // not read: the cases are only listed
    for (const Case &c : cases(library)) covered.insert(c.fields.begin(), c.fields.end());
    covered.insert("reserved");  // refused unless 0, not read: ReservedIsRefusedByBothReaders
    for (const auto &f : kFields) EXPECT_TRUE(covered.count(f.name)) << f.name << " has no case in this test";
}

// `reserved` must be 0: both readers refuse another value (the full path says why).
TEST(CompileOptions, ReservedIsRefusedByBothReaders) {
    TempDir dir;
    Options opts;
    base_options(opts, dir);
    opts.o.reserved = 1;
    opts.bind();
    kjit::key::Request r;
    r.source = opts.source;
    r.keyword = opts.keyword;
    const auto st = kjit::api::compile_options::request_from(&opts.o, r, "options");
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("options.reserved is 1; it must be 0"), std::string::npos) << st.error().message;
    HitMemo::Digest digest;
    EXPECT_FALSE(kjit::api::memo_digest_of(opts.source.c_str(), opts.keyword.c_str(), &opts.o, digest));
}
