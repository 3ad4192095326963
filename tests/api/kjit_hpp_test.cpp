// kjit.hpp, the C++ companion: kjit::type_name against the toolkit's own nvrtcGetTypeName
// (nvrtc.h; header-only code, so nothing of NVRTC is linked here), the name expressions of
// kjit::instantiate (and NVRTC's reading of them), and the wrappers through libkjit.so against
// the driver test double (KJIT_LIBCUDA points at it).
#define NVRTC_GET_TYPE_NAME 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nvrtc.h>

#include "kjit/kjit.hpp"

#include "c_api_support.hpp"

#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

using namespace kjit_test;

namespace outer {
namespace inner {
struct Tile {
    int x;
};
template <typename T, int N>
struct Box {};
enum class Layout : int { Row = 0, Col = 1, Odd = -7 };
}  // namespace inner
template <bool B, inner::Layout L, unsigned long long U>
struct Flags {};
enum Plain { kPlainZero, kPlainOne, kPlainTwo };  // underlying type: unsigned int (GCC, Clang)
enum class Small : unsigned char { A = 3, B = 200 };
struct Holder {
    enum Nested { kNested = 5 };
    template <typename T>
    struct Member {};
};
}  // namespace outer
struct Incomplete;

namespace {

// nvrtcGetTypeName<T>'s answer, and kjit::type_name<T>()'s, for each type of the list.
struct Spelling {
    std::string nvrtc, kjit;
};

template <typename T>
Spelling spell() {
    Spelling s;
    EXPECT_EQ(nvrtcGetTypeName<T>(&s.nvrtc), NVRTC_SUCCESS);
    s.kjit = kjit::type_name<T>();
    return s;
}

template <typename... Ts>
std::vector<Spelling> spell_all() {
    return {spell<Ts>()...};
}

}  // namespace

TEST(KjitHpp, TypeNameIsNvrtcGetTypeName) {
    const std::vector<Spelling> spellings = spell_all<
        // builtins, and the fixed-width aliases (the types they name)
        void, bool, char, signed char, unsigned char, short, unsigned short, int, unsigned int, long, unsigned long,
        long long, unsigned long long, float, double, long double, wchar_t, char16_t, char32_t, std::int8_t,
        std::uint8_t, std::int16_t, std::int32_t, std::int64_t, std::uint64_t, std::size_t, std::ptrdiff_t,
        // pointers, const pointee, cv, references
        float *, const float *, float *const, const float *const *, void *, int **, volatile int *,
        const volatile char *, const int, volatile double, float &, const int &, int &&,
        // nested namespaces, class templates with type and value arguments, members
        outer::inner::Tile, outer::inner::Box<float, 64>, outer::inner::Box<outer::inner::Box<int, -3>, 0>,
        outer::Flags<true, outer::inner::Layout::Col, 18446744073709551615ull>,
        outer::Flags<false, outer::inner::Layout::Odd, 0>, outer::Holder::Member<const double *>, std::array<float, 4>,
        std::pair<int, outer::inner::Tile>, Incomplete, Incomplete *,
        // CUDA's half and bfloat16
        __half, __nv_bfloat16, __half2, __nv_bfloat162, const __half *, outer::inner::Box<__nv_bfloat16, 8>,
        // enums
        outer::inner::Layout, outer::Plain, outer::Small, outer::Holder::Nested,
        // arrays, functions, member pointers
        float[4], int[2][3], float(*)[4], const char[8], void(int), int (*)(float, double),
        int outer::inner::Tile::*>();
    ASSERT_GE(spellings.size(), 30u);
    for (const Spelling &s : spellings) EXPECT_EQ(s.kjit, s.nvrtc);

    // And what those spellings are: NVRTC's, on Linux (so that a change on both sides shows).
    EXPECT_EQ(kjit::type_name<float>(), "float");
    EXPECT_EQ(kjit::type_name<std::int64_t>(), "long");
    EXPECT_EQ(kjit::type_name<std::uint8_t>(), "unsigned char");
    EXPECT_EQ(kjit::type_name<const float *>(), "float const*");
    EXPECT_EQ(kjit::type_name<const int>(), "int const");  // top-level const kept, as NVRTC keeps it
    EXPECT_EQ(kjit::type_name<float &>(), "float&");
    EXPECT_EQ(kjit::type_name<__half>(), "__half");
    EXPECT_EQ(kjit::type_name<__nv_bfloat16>(), "__nv_bfloat16");
    // A class template's name ends in a blank: the demangler writes "wrapper<Box<float, 64> >" and
    // nvrtcGetTypeName takes what is before the last '>'. Kept, to be NVRTC's text byte for byte.
    EXPECT_EQ((kjit::type_name<outer::inner::Box<float, 64>>()), "outer::inner::Box<float, 64> ");
    EXPECT_EQ((kjit::type_name<outer::Flags<true, outer::inner::Layout::Col, 5>>()),
              "outer::Flags<true, (outer::inner::Layout)1, 5ull> ");
    EXPECT_EQ(kjit::type_name<float[4]>(), "float [4]");
}

TEST(KjitHpp, AFailedDemangleIsAnError) {
    try {
        kjit::detail::demangle("not a mangled name");
        FAIL() << "no exception";
    } catch (const kjit::Error &e) {
        EXPECT_EQ(e.status(), KJIT_ERROR_INTERNAL);
        EXPECT_NE(std::string(e.what()).find("kjit::type_name: internal error: abi::__cxa_demangle failed"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(e.detail().find("'not a mangled name'"), std::string::npos) << e.detail();
    }
}

TEST(KjitHpp, InstantiateSpellsTypesAndValues) {
    EXPECT_EQ(kjit::instantiate("k", kjit::type<float>, 64), "k<float, 64>");
    EXPECT_EQ(kjit::instantiate("ns::k", kjit::type<outer::inner::Box<int, 2>>), "ns::k<outer::inner::Box<int, 2> >");
    EXPECT_EQ(kjit::instantiate("k"), "k<>");

    const float value = 1.0f;
    const float *pointer = nullptr;
    const std::int64_t wide = 7;
    EXPECT_EQ(kjit::instantiate("k", kjit::type_of(value), kjit::type_of(pointer), kjit::type_of(wide)),
              "k<float, float const*, long>");
    EXPECT_EQ(kjit::instantiate("k", kjit::Type("__half"), kjit::Type::of<__nv_bfloat16>()),
              "k<__half, __nv_bfloat16>");
    EXPECT_EQ(kjit::instantiate("k", kjit::type<const int>), "k<int const>");

    EXPECT_EQ(kjit::instantiate("k", true, false), "k<true, false>");
    EXPECT_EQ(kjit::instantiate("k", 'a', static_cast<signed char>(-1), static_cast<unsigned char>(200)),
              "k<(char)97, (signed char)-1, (unsigned char)200>");
    EXPECT_EQ(kjit::instantiate("k", static_cast<short>(-3), static_cast<unsigned short>(65535)),
              "k<(short)-3, (unsigned short)65535>");
    EXPECT_EQ(kjit::instantiate("k", -5, 7u, 7l, 7ul, -7ll, 7ull), "k<-5, 7u, 7l, 7ul, -7ll, 7ull>");
    EXPECT_EQ(kjit::instantiate("k", INT_MIN, LONG_MIN, LLONG_MIN, INT_MAX, ULLONG_MAX),
              "k<(-2147483647 - 1), (-9223372036854775807l - 1), (-9223372036854775807ll - 1), 2147483647, "
              "18446744073709551615ull>");
    EXPECT_EQ(kjit::instantiate("k", std::uint32_t{9}, std::int8_t{-8}), "k<9u, (signed char)-8>");

    EXPECT_EQ(kjit::instantiate("k", outer::inner::Layout::Col, outer::inner::Layout::Odd, outer::kPlainTwo,
                                outer::Small::B, outer::Holder::kNested),
              "k<(outer::inner::Layout)1, (outer::inner::Layout)-7, (outer::Plain)2u, "
              "(outer::Small)(unsigned char)200, (outer::Holder::Nested)5u>");

    const std::string text = "Tile<64, 64>";
    EXPECT_EQ(kjit::instantiate("k", "sizeof(float)", text, std::string_view("X")),
              "k<sizeof(float), Tile<64, 64>, X>");
}

namespace {

// Templates NVRTC instantiates from kjit::instantiate's text; the enum is the host's
// outer::inner::Layout, spelled alike on both sides.
const char *const kReflected = R"(
#include <cuda_fp16.h>
namespace outer { namespace inner { enum class Layout : int { Row = 0, Col = 1, Odd = -7 }; } }
template <typename T, int N, bool B, outer::inner::Layout L, auto A>
__global__ void reflected(T *p) { p[threadIdx.x] = T(float(N + int(B) + int(L) + int(A))); }
)";

kjit_compile_options options_for(const TempDir &dir, const std::string &cache,
                                 const std::vector<const char *> &include_paths) {
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_90";
    o.include_paths = include_paths.data();
    o.include_path_count = include_paths.size();
    static_cast<void>(dir);
    return o;
}

}  // namespace

// The name expressions compile: NVRTC lowers them to the names the host's types give.
TEST(KjitHpp, NvrtcInstantiatesTheNameExpressions) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    const std::vector<const char *> includes = {KJIT_TEST_CUDA_INCLUDE};
    kjit_compile_options o = options_for(dir, cache, includes);

    struct Case {
        std::string expression, name;
    };
    const std::vector<Case> cases = {
        {kjit::instantiate("reflected", kjit::type<float>, 64, true, outer::inner::Layout::Col, 5l),
         "_Z9reflectedIfLi64ELb1ELN5outer5inner6LayoutE1ELl5EEvPT_"},
        {kjit::instantiate("reflected", kjit::type<__half>, INT_MIN, false, outer::inner::Layout::Odd, 5u),
         "_Z9reflectedI6__halfLin2147483648ELb0ELN5outer5inner6LayoutEn7ELj5EEvPT_"},
        {kjit::instantiate("reflected", kjit::Type("double"), static_cast<short>(3), true, outer::inner::Layout::Row,
                           static_cast<unsigned char>(9)),
         "_Z9reflectedIdLi3ELb1ELN5outer5inner6LayoutE0ELh9EEvPT_"},
    };
    for (const Case &c : cases) {
        o.name_expression = c.expression.c_str();
        const kjit::Compiled compiled = kjit::compile_named(kReflected, "reflected", &o);
        EXPECT_EQ(compiled.kernel_name, c.name) << c.expression;
        EXPECT_EQ(kjit::compile(kReflected, "reflected", &o), compiled.cubin_path);
        EXPECT_EQ(kjit::resolve_name(compiled.cubin_path, "reflected"), c.name);
    }
}

TEST(KjitHpp, ErrorsCarryTheStatusAndTheMessage) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = options_for(dir, cache, {});
    try {
        kjit::compile("__global__ void broken(float *p) { p[0] = nope_not_declared; }\n", "broken", &o);
        FAIL() << "no exception";
    } catch (const kjit::Error &e) {
        EXPECT_EQ(e.status(), KJIT_ERROR_COMPILE);
        EXPECT_NE(e.detail().find("nope_not_declared"), std::string::npos) << e.detail();
        EXPECT_EQ(std::string(e.what()).rfind("kjit_compile: compile error: ", 0), 0u) << e.what();
        const kjit::Error copy = e;  // a copy keeps both
        EXPECT_EQ(copy.status(), KJIT_ERROR_COMPILE);
        EXPECT_EQ(copy.detail(), e.detail());
    }
    try {
        kjit::compile_named("__global__ void k() {}\n", "a.b", &o);
        FAIL() << "no exception";
    } catch (const kjit::Error &e) {
        EXPECT_EQ(e.status(), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_FALSE(e.detail().empty());
    }
    EXPECT_THROW(kjit::resolve_name(dir.file("absent.cubin"), "k"), kjit::Error);
    const kjit::Error made(KJIT_ERROR_IO, "call", "");
    EXPECT_STREQ(made.what(), "call: I/O error");
    EXPECT_EQ(made.detail(), "");
}

// Out strings longer than the first buffer: a path over 600 bytes, a name over 300.
TEST(KjitHpp, BuffersGrowToTheLength) {
    TempDir dir;
    const std::string cache =
        dir.file(std::string(200, 'a') + "/" + std::string(200, 'b') + "/" + std::string(200, 'c'));
    kjit_compile_options o = options_for(dir, cache, {});
    const std::string keyword(300, 'k');
    const std::string source = "extern \"C\" __global__ void " + keyword + "(float *p) { p[0] = 1.0f; }\n";
    const std::string path = kjit::compile(source, keyword, &o);
    EXPECT_GT(path.size(), 600u);
    EXPECT_EQ(path.find('\0'), std::string::npos);
    char raw[4096];
    ASSERT_EQ(kjit_compile(source.c_str(), keyword.c_str(), &o, raw, sizeof raw, nullptr), KJIT_OK);
    EXPECT_EQ(path, raw);
    const kjit::Compiled named = kjit::compile_named(source, keyword, &o);
    EXPECT_EQ(named.cubin_path, path);
    EXPECT_EQ(named.kernel_name, keyword);
    EXPECT_EQ(kjit::resolve_name(path, keyword), keyword);
}

TEST(KjitHpp, KernelOwnsItsHandleOnce) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = options_for(dir, cache, {});
    const std::string expression = kjit::instantiate("tmpl", 4);
    o.name_expression = expression.c_str();
    const kjit::Compiled compiled = kjit::compile_named(sources::kTemplateOne, "tmpl", &o);
    const auto live0 = fake_cuda().counters().live_libraries;
    {
        kjit::Kernel a = kjit::load_cached(compiled.cubin_path, "tmpl");
        ASSERT_TRUE(a);
        EXPECT_EQ(a.name(), compiled.kernel_name);
        EXPECT_EQ(a.cubin_path(), compiled.cubin_path);
        EXPECT_STREQ(fake_cuda().kernel_name(a.cukernel()), "_Z4tmplILi4EEvPf");
        EXPECT_NE(a.culibrary(), nullptr);
        EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + 1);

        kjit::Kernel b(std::move(a));
        EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty
        EXPECT_EQ(a.get(), nullptr);
        EXPECT_EQ(a.name(), "");
        EXPECT_EQ(a.cukernel(), nullptr);
        EXPECT_THROW(a.cufunction(), kjit::Error);
        kjit::Kernel c = kjit::compile_and_load(sources::kTemplateOne, "tmpl", &o);
        EXPECT_EQ(c.cukernel(), b.cukernel());  // one library, two handles
        c = std::move(b);                       // c's first handle released, b's taken
        EXPECT_FALSE(b);                        // NOLINT(bugprone-use-after-move)
        kjit::Kernel &same = c;
        c = std::move(same);  // moving into itself keeps the handle
        ASSERT_TRUE(c);
        EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + 1);

        fake_cuda().make_context_current(true);
        EXPECT_STREQ(fake_cuda().function_name(c.cufunction()), "_Z4tmplILi4EEvPf");
        fake_cuda().make_context_current(false);

        kjit_kernel *raw = c.release();
        EXPECT_FALSE(c);
        kjit::Kernel d;
        d.reset(raw);
        d.reset();
        EXPECT_EQ(fake_cuda().counters().live_libraries, live0);
        d = kjit::load_cached(compiled.cubin_path, "tmpl");
        EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + 1);
    }  // d released here, the moved-from ones release nothing
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0);
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
    static_assert(!std::is_copy_constructible_v<kjit::Kernel> && std::is_nothrow_move_constructible_v<kjit::Kernel>);
}

// Loading without the GPU the cubin was built for: the driver's error, as kjit::Error.
TEST(KjitHpp, ALoadFailureThrowsTheDriversMessage) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = options_for(dir, cache, {});
    const std::string path = kjit::compile(sources::kPlain, "plain_kernel", &o);
    fake_cuda().set_device_sm(80);
    kjit_status load_status = KJIT_OK, both_status = KJIT_OK;
    std::string message;
    try {
        kjit::load_cached(path, "plain_kernel");
    } catch (const kjit::Error &e) {
        load_status = e.status();
        message = e.what();
    }
    try {
        kjit::compile_and_load(sources::kPlain, "plain_kernel", &o);
    } catch (const kjit::Error &e) {
        both_status = e.status();
    }
    fake_cuda().set_device_sm(90);
    EXPECT_EQ(load_status, KJIT_ERROR_DRIVER);
    EXPECT_EQ(both_status, KJIT_ERROR_DRIVER);
    EXPECT_EQ(message.rfind("kjit_load_cached: driver error: ", 0), 0u) << message;
    EXPECT_NE(message.find("CUDA_ERROR_NO_BINARY_FOR_GPU"), std::string::npos) << message;
    EXPECT_NE(message.find("sm_80"), std::string::npos) << message;
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
}

TEST(KjitHpp, BatchResultOwnsItsResult) {
    TempDir dir;
    const std::string cache = dir.file("cache");
    kjit_compile_options o = options_for(dir, cache, {});
    kjit_compile_request good = KJIT_COMPILE_REQUEST_INIT, bad = KJIT_COMPILE_REQUEST_INIT;
    good.source = sources::kPlain;
    good.keyword = "plain_kernel";
    good.options = &o;
    bad.source = "__global__ void plain_kernel() { undeclared_thing(); }\n";
    bad.keyword = "plain_kernel";
    bad.options = &o;
    kjit_status overall = KJIT_OK;
    kjit::BatchResult result = kjit::compile_batch({&good, &bad}, nullptr, &overall);
    EXPECT_EQ(overall, KJIT_ERROR_COMPILE);
    ASSERT_EQ(result.count(), 2u);
    EXPECT_EQ(result.status(0), KJIT_OK);
    EXPECT_EQ(result.cubin_path(0), kjit::compile(sources::kPlain, "plain_kernel", &o));
    EXPECT_EQ(result.kernel_name(0), kjit::resolve_name(result.cubin_path(0), "plain_kernel"));
    EXPECT_EQ(result.error(0), "");
    EXPECT_EQ(result.status(1), KJIT_ERROR_COMPILE);
    EXPECT_EQ(result.cubin_path(1), "");
    EXPECT_NE(result.error(1).find("undeclared_thing"), std::string::npos) << result.error(1);
    EXPECT_THROW(result.status(2), std::out_of_range);

    kjit::BatchResult moved = std::move(result);
    EXPECT_FALSE(result);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(result.count(), 0u);
    EXPECT_THROW(result.error(0), std::out_of_range);
    EXPECT_EQ(moved.count(), 2u);
    result = std::move(moved);
    EXPECT_EQ(result.count(), 2u);
    kjit::BatchResult other(result.release());
    EXPECT_EQ(other.count(), 2u);
    other.reset();
    EXPECT_EQ(other.count(), 0u);

    kjit_batch_options bad_options = KJIT_BATCH_OPTIONS_INIT;
    bad_options.struct_size = 1;  // refused: no result, so kjit::Error
    try {
        kjit::compile_batch({&good}, &bad_options);
        FAIL() << "no exception";
    } catch (const kjit::Error &e) {
        EXPECT_EQ(e.status(), KJIT_ERROR_INVALID_ARGUMENT);
    }
}

// kjit::Prepared over kjit_prepare: the same answers as the free functions, a long path grown
// to, errors thrown (at construction for bad options, at the call for a compile error), the
// handle released once.
TEST(KjitHpp, PreparedOwnsItsRequestAndAnswersAsCompileNamed) {
    TempDir dir;
    const std::string cache =
        dir.file(std::string(200, 'a') + "/" + std::string(200, 'b') + "/" + std::string(200, 'c'));
    kjit_compile_options o = options_for(dir, cache, {});
    const std::string expression = kjit::instantiate("tmpl", 4);
    o.name_expression = expression.c_str();
    kjit::Prepared prepared(sources::kTemplateOne, "tmpl", &o);
    ASSERT_TRUE(prepared);
    const kjit::Compiled named = prepared.compile_named();
    EXPECT_GT(named.cubin_path.size(), 600u);
    EXPECT_EQ(named.kernel_name, "_Z4tmplILi4EEvPf");
    const kjit::Compiled plain = kjit::compile_named(sources::kTemplateOne, "tmpl", &o);
    EXPECT_EQ(named.cubin_path, plain.cubin_path);
    EXPECT_EQ(named.kernel_name, plain.kernel_name);
    EXPECT_EQ(prepared.compile(), plain.cubin_path);
    const auto live0 = fake_cuda().counters().live_libraries;
    {
        kjit::Kernel k = prepared.load();
        EXPECT_EQ(k.name(), "_Z4tmplILi4EEvPf");
        EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + 1);
    }
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0);

    kjit::Prepared moved(std::move(prepared));
    EXPECT_FALSE(prepared);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(moved.compile(), plain.cubin_path);
    try {
        (void)prepared.compile_named();
        ADD_FAILURE() << "an empty kjit::Prepared answered";
    } catch (const kjit::Error &e) {
        EXPECT_EQ(e.status(), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("kjit_prepared_compile"), std::string::npos) << e.what();
    }
    prepared = std::move(moved);
    EXPECT_TRUE(prepared);
    prepared.reset();
    EXPECT_FALSE(prepared);

    const char *with_null[] = {"-DA=1", nullptr};
    kjit_compile_options bad = o;
    bad.nvrtc_options = with_null;
    bad.nvrtc_option_count = 2;
    try {
        kjit::Prepared refused(sources::kTemplateOne, "tmpl", &bad);
        ADD_FAILURE() << "kjit_prepare took a NULL option";
    } catch (const kjit::Error &e) {
        EXPECT_EQ(e.status(), KJIT_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(e.detail().find("nvrtc_options[1] is NULL"), std::string::npos) << e.detail();
    }
    kjit::Prepared broken("__global__ void tmpl() { undeclared(); }", "tmpl", &o);
    EXPECT_THROW((void)broken.compile_named(), kjit::Error);
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
    static_assert(!std::is_copy_constructible_v<kjit::Prepared> &&
                  std::is_nothrow_move_constructible_v<kjit::Prepared>);
}
