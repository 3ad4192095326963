// Writes the fuzzers' seed corpora: cubins compiled by NVRTC from the test kernels (each with a
// keyword-selector byte in front) and sidecars in every shape the store knows.
// Usage: make_seeds SCANNER_DIR SIDECAR_DIR CACHE_KEY_DIR MANIFEST_DIR
#include "cache_entry.hpp"
#include "sidecar_store.hpp"
#include "test_support.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s SCANNER_DIR SIDECAR_DIR CACHE_KEY_DIR MANIFEST_DIR\n", argv[0]);
        return 2;
    }
    const std::string scanner_dir = argv[1], sidecar_dir = argv[2], key_dir = argv[3], manifest_dir = argv[4];
    for (const std::string &d : {scanner_dir, sidecar_dir, key_dir, manifest_dir}) std::filesystem::create_directories(d);
    using namespace kjit_test::sources;
    const std::vector<std::pair<const char *, std::vector<std::string>>> sources = {
        {kPlain, {}}, {kTemplateOne, {}}, {kTemplateSeveral, {}}, {kPrefixCollision, {}},
        {kDeviceFunction, {"-rdc=true"}}, {kExternC, {}}, {kNamespaces, {}}};
    int n = 0;
    for (const auto &s : sources) {
        const std::string &cubin = kjit_test::cubin_for(s.first, s.second);
        for (char selector = 0; selector < 10; selector += 3) {
            kjit_test::write_file(scanner_dir + "/seed" + std::to_string(n++), std::string(1, selector) + cubin);
        }
    }
    kjit::sidecar::Line a;
    a.keyword = "gemm";
    a.cubin_size = 3824;
    a.mtime_sec = 1764694000;
    a.mtime_nsec = 5;
    a.name = "_Z4gemmPf";
    kjit::sidecar::Line b = a;
    b.keyword = "gemm_fp16";
    b.name = "_Z9gemm_fp16Pf";
    b.content_hash = 0xfeedfacecafebeefULL;
    const std::vector<std::string> sidecars = {kjit::sidecar::format({a}), kjit::sidecar::format({a, b}),
                                               kjit::sidecar::format({}), "_Z4gemmPf\n", "kjit-sidecar 2\n", ""};
    for (std::size_t i = 0; i < sidecars.size(); ++i) {
        kjit_test::write_file(sidecar_dir + "/seed" + std::to_string(i), sidecars[i]);
    }
    // Cache keys: pairs of requests that differ in one input, and equal pairs.
    using namespace std::string_literals;
    const std::vector<std::string> keys = {
        "src\0gemm\0sm_90\0\0o-DX=1\x01src\0gemm\0sm_90\0\0o-DX=1"s,
        "src\0gemm\0sm_90\0\0o-DX=1 -DY=1\x01src\0gemm\0sm_90\0\0o-DX=1\0o-DY=1"s,
        "src\0gemm\0sm_90a\0=gemm<1>\0ha.h\0#define A\0i/inc\x01src\0gemm\0sm_90a\0\0ha.h\0#define A\0i/inc"s,
        "a\0b\x01" "ab\0"s};
    for (std::size_t i = 0; i < keys.size(); ++i) kjit_test::write_file(key_dir + "/seed" + std::to_string(i), keys[i]);
    kjit::cache_entry::Manifest m;
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
    const std::string full = kjit::cache_entry::format_manifest(m);
    m.name_expression.reset();
    m.options.clear();
    const std::string plain = kjit::cache_entry::format_manifest(m);
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
    std::printf("wrote %d scanner, %zu sidecar, %zu cache key and %zu manifest seeds\n", n, sidecars.size(), keys.size(),
                manifests.size());
    return 0;
}
