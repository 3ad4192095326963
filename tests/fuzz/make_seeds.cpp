// Writes the fuzzers' seed corpora: cubins compiled by NVRTC from the test kernels (each with a
// keyword-selector byte in front), sidecars in every shape the store knows, cache keys,
// manifests, and computed includes with the macros they go through.
// Usage: make_seeds SCANNER_DIR SIDECAR_DIR CACHE_KEY_DIR MANIFEST_DIR INCLUDE_MACROS_DIR
#include "cubin/sidecar.hpp"
#include "store/cache_entry.hpp"
#include "test_support.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s SCANNER_DIR SIDECAR_DIR CACHE_KEY_DIR MANIFEST_DIR INCLUDE_MACROS_DIR\n",
                     argv[0]);
        return 2;
    }
    const std::string scanner_dir = argv[1], sidecar_dir = argv[2], key_dir = argv[3], manifest_dir = argv[4],
                      macros_dir = argv[5];
    for (const std::string &d : {scanner_dir, sidecar_dir, key_dir, manifest_dir, macros_dir}) {
        std::filesystem::create_directories(d);
    }
    using namespace kjit_test::sources;
    const std::vector<std::pair<const char *, std::vector<std::string>>> sources = {{kPlain, {}},
                                                                                    {kTemplateOne, {}},
                                                                                    {kTemplateSeveral, {}},
                                                                                    {kPrefixCollision, {}},
                                                                                    {kDeviceFunction, {"-rdc=true"}},
                                                                                    {kExternC, {}},
                                                                                    {kNamespaces, {}}};
    int n = 0;
    for (const auto &s : sources) {
        const std::string &cubin = kjit_test::cubin_for(s.first, s.second);
        for (char selector = 0; selector < 10; selector += 3) {
            kjit_test::write_file(scanner_dir + "/seed" + std::to_string(n++), std::string(1, selector) + cubin);
        }
    }
    kjit::cubin::sidecar::Line a;
    a.keyword = "gemm";
    a.cubin_size = 3824;
    a.mtime_sec = 1764694000;
    a.mtime_nsec = 5;
    a.name = "_Z4gemmPf";
    kjit::cubin::sidecar::Line b = a;
    b.keyword = "gemm_fp16";
    b.name = "_Z9gemm_fp16Pf";
    b.content_hash = 0xfeedfacecafebeefULL;
    const std::vector<std::string> sidecars = {kjit::cubin::sidecar::format({a}),
                                               kjit::cubin::sidecar::format({a, b}),
                                               kjit::cubin::sidecar::format({}),
                                               "_Z4gemmPf\n",
                                               "kjit-sidecar 2\n",
                                               ""};
    for (std::size_t i = 0; i < sidecars.size(); ++i) {
        kjit_test::write_file(sidecar_dir + "/seed" + std::to_string(i), sidecars[i]);
    }
    // Cache keys: pairs of requests that differ in one input, and equal pairs.
    using namespace std::string_literals;
    const std::vector<std::string> keys = {
        "src\0gemm\0sm_90\0\0o-DX=1\x01src\0gemm\0sm_90\0\0o-DX=1"s,
        "src\0gemm\0sm_90\0\0o-DX=1 -DY=1\x01src\0gemm\0sm_90\0\0o-DX=1\0o-DY=1"s,
        "src\0gemm\0sm_90a\0=gemm<1>\0ha.h\0#define A\0i/inc\x01src\0gemm\0sm_90a\0\0ha.h\0#define A\0i/inc"s,
        "a\0b\x01"
        "ab\0"s};
    for (std::size_t i = 0; i < keys.size(); ++i) kjit_test::write_file(key_dir + "/seed" + std::to_string(i), keys[i]);
    kjit::store::cache_entry::Manifest m;
    m.key = "27640f140e33ff97cdc7337de4e3fe2a";
    m.keyword = "gemm";
    m.name = "_Z4gemmPf";
    m.arch = "sm_90a";
    m.nvrtc = "13.0 libnvrtc.so.13 123456";
    m.options = {"-std=c++17", "with\nnewline and \\ backslash"};
    m.include_paths = {"/inc"};
    m.headers = {"a.h"};
    m.name_expression = "gemm<128, 64>";
    m.cubin_bytes = 5192;
    m.cubin_hash = "0123456789abcdef0123456789abcdef";
    m.created = "2026-12-03T12:00:00Z";
    const std::string full = kjit::store::cache_entry::format_manifest(m);
    m.name_expression.reset();
    m.options.clear();
    const std::string plain = kjit::store::cache_entry::format_manifest(m);
    // Good ones, and the damage verify must refuse: a changed name under an old check line, a
    // missing check line, a bad check, a format-1 manifest, text after the check line.
    std::string renamed = plain;
    renamed.replace(renamed.find("_Z4gemmPf"), 9, "_Z4gemmPi");
    const std::string no_check = plain.substr(0, plain.rfind("check: "));
    std::string bad_check = plain;
    bad_check[bad_check.size() - 2] = bad_check[bad_check.size() - 2] == '0' ? '1' : '0';
    std::string format1 = no_check;
    format1.replace(0, 15, "kjit-manifest 1");
    const std::vector<std::string> manifests = {full, plain, renamed, no_check, bad_check, format1, plain + "x: y\n"};
    for (std::size_t i = 0; i < manifests.size(); ++i) {
        kjit_test::write_file(manifest_dir + "/seed" + std::to_string(i), manifests[i]);
    }
    // Computed includes (fuzz_include_macros: definition lines, then the operand): CUTLASS's
    // CUDA_STD_HEADER under either #if branch, stringizing, pasting, variadic and nested
    // function-like macros, self- and mutually referential ones, -D options, continuation lines,
    // comments, reserved names and __VA_OPT__ (not followed), and an argument's closing
    // parenthesis from outside the expansion (the standard's f(2)(9)).
    const std::vector<std::string> macros = {
        "#define CUDA_STD_HEADER(x) <cuda/std/x>\n#define CUDA_STD_HEADER(x) <x>\n#include CUDA_STD_HEADER(cstdint)",
        "#  define CUTLASS_STD_HEADER(h) <cuda/std/h>\n#include CUTLASS_STD_HEADER(type_traits)",
        "#define STR(x) #x\n#define XSTR(x) STR(x)\n#define NAME kernels/gemm.h\n#include XSTR(NAME)",
        "#define STR(x) #x\n#include STR(  a  \"b\\\\c\" d.h )",
        "#define CAT(a, b) a ## b\n#define HDR_fp16 \"gemm_fp16.h\"\n#define HDR_bf16 <gemm_bf16.h>\n#include "
        "CAT(HDR_, fp16)",
        "#define PASTE(a, b, c) <a ## b ## c>\n#include PASTE(, x.h, )",
        "#define FIRST(x, ...) <x/__VA_ARGS__>\n#define ARCH sm90\n#include FIRST(ARCH, gemm.h)",
        "#define V(args...) <args>\n#define W(...) V(__VA_ARGS__)\n#include W(a, b.h)",
        "#define INNER(x) x.h\n#define OUTER(d, x) <d/INNER(x)>\n#define DIR cute\n#include OUTER(DIR, tensor)",
        "#define A A\n#define B C\n#define C B\n#define D(x) D(x) <x>\n#include D(A B)",
        "#define f(a) a*g\n#define g(a) f(a)\n#define N(x) S(x)\n#define S(x) #x\n#include N(f(2)(9))",
        "-DKERNEL_HEADER=\"k.h\"\n-DHDR(x)=<x.h>\n-DFLAG\n#include KERNEL_HEADER",
        "-DHDR(x)=<x.h>\n#define HDR(x) \"x.h\"\nHDR(gemm)",
        "#define LONG_HEADER \\\n  <cuda/std/ \\\n   cstdint>\n#include LONG_HEADER",
        "#define H /* a comment */ <a.h> // another\n#define H \"b.h\"\n#include H",
        "#define H <__FILE__>\n#include H",
        "#define O(x, ...) <x __VA_OPT__(/) __VA_ARGS__>\n#include O(a, b.h)",
        "#define E()\n#define F(x) x\n#include F(E() <e.h>)",
        "#define X +1\n#define Y(\n#include <X>",
        "#include \"plain.h\""};
    for (std::size_t i = 0; i < macros.size(); ++i)
        kjit_test::write_file(macros_dir + "/seed" + std::to_string(i), macros[i]);
    std::printf("wrote %d scanner, %zu sidecar, %zu cache key, %zu manifest and %zu include macro seeds\n", n,
                sidecars.size(), keys.size(), manifests.size(), macros.size());
    return 0;
}
