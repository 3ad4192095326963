// Writes the fuzzers' seed corpora: cubins compiled by NVRTC from the test kernels (each with a
// keyword-selector byte in front) and sidecars in every shape the store knows.
// Usage: make_seeds SCANNER_DIR SIDECAR_DIR
#include "sidecar_store.hpp"
#include "test_support.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s SCANNER_DIR SIDECAR_DIR\n", argv[0]);
        return 2;
    }
    const std::string scanner_dir = argv[1], sidecar_dir = argv[2];
    std::filesystem::create_directories(scanner_dir);
    std::filesystem::create_directories(sidecar_dir);
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
    std::printf("wrote %d scanner seeds and %zu sidecar seeds\n", n, sidecars.size());
    return 0;
}
