// The cache key (key/cache_key.hpp) below the C ABI: golden keys, so that a change to the key's
// encoding (which makes every entry of every cache, seed and Redis tier miss once) is made on
// purpose, with kFormatVersion bumped and the goldens updated in the same commit; and the
// folder-by-number rule (issue 47) on requests that differ only in where their folders lie.
#include "key/cache_key.hpp"

#include "compile/compiler.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using kjit::key::Request;
using kjit::key::include_scanner::Dependency;

// A request with every input the key holds set, and a fixed NVRTC build (key_request would take
// the loaded one's), as key_request leaves it for key_of.
Request full_request() {
    Request r;
    r.source = "template <int N> __global__ void gemm(float *p) { p[0] = N; }\n";
    r.keyword = "gemm";
    r.arch = "sm_90a";
    r.nvrtc_identity = "13.0 libnvrtc.so.13 123456";
    r.nvrtc_options = {"-std=c++17", "-I/opt/A/inc", "-DX=1", "-time=/tmp/t.csv"};
    r.include_paths = {"/opt/A/more"};
    r.headers = {{"cfg.h", "#define CFG 1\n"}};
    r.name_expression = "gemm<128>";
    r.program_name = "/opt/A/src/gemm.cu";
    return r;
}

std::vector<Dependency> some_deps() {
    Dependency tile;
    tile.path = "/opt/A/inc/tile.h";
    tile.relative = "tile.h";
    tile.anchor = 0;
    tile.content_hash = 0x1234;
    Dependency absent;
    absent.path = "/w/cfg.h";
    absent.relative = "cfg.h";
    absent.exists = false;
    Dependency pin;
    pin.pins_anchor = true;
    pin.anchor = 0;
    pin.relative = pin.path = "{base 0}/inc";
    return {tile, absent, pin};
}

}  // namespace

// Format 3's keys. A failure here means every existing entry would miss: if that is meant, bump
// key::kFormatVersion and put the new values here, in the same commit.
TEST(CacheKey, GoldenKeysOfFormat3) {
    EXPECT_EQ(kjit::key::kFormatVersion, 3);
    Request minimal;
    minimal.source = "__global__ void k() {}\n";
    minimal.keyword = "k";
    minimal.arch = "sm_90";
    minimal.nvrtc_identity = "13.0 libnvrtc.so.13 123456";
    EXPECT_EQ(kjit::key::key_of(minimal), "dcf42c79c7d630c9fd7d311c1e995b65");
    EXPECT_EQ(kjit::key::key_of(full_request()), "be2dd04684a98fff9517a365d169f9a3");
    EXPECT_EQ(kjit::key::variant_key("0123456789abcdef0123456789abcdef", some_deps()),
              "5109c0e3ed0e39a5bc39371cd3feb77b");
}

// The same request under another install prefix: the same key (the folders by number); folders
// named in another arrangement, or a relative folder spelled otherwise, another key.
TEST(CacheKey, FoldersAreKeyedByNumberNotPath) {
    const Request a = full_request();
    Request b = a;
    b.nvrtc_options[1] = "-I/srv/B/inc";
    b.include_paths = {"/srv/B/more"};
    b.program_name = "/srv/B/src/gemm.cu";
    EXPECT_EQ(kjit::key::key_of(b), kjit::key::key_of(a));
    Request spelled = a;  // another spelling of the same option
    spelled.nvrtc_options[1] = "--include-path=/srv/B/inc";
    EXPECT_NE(kjit::key::key_of(spelled), kjit::key::key_of(a));
    Request merged = a;  // two folders become one: anchor 1 is anchor 0
    merged.include_paths = {"/opt/A/inc"};
    EXPECT_NE(kjit::key::key_of(merged), kjit::key::key_of(a));
    Request renamed = a;  // the program's own name still counts
    renamed.program_name = "/srv/B/src/other.cu";
    EXPECT_NE(kjit::key::key_of(renamed), kjit::key::key_of(a));
    Request located = a;  // line information: where the folders lie is in the key
    located.keyed_locations = {"/opt/A/inc", "/opt/A/more", "/opt/A/src"};
    EXPECT_NE(kjit::key::key_of(located), kjit::key::key_of(a));
    const kjit::key::KeyedFolders folders = kjit::key::keyed_folders(b);
    EXPECT_EQ(folders.anchors, (std::vector<std::string>{"/srv/B/inc", "/srv/B/more", "/srv/B/src"}));
    EXPECT_EQ(folders.options[1], "-I{anchor 0}");
    EXPECT_EQ(folders.options[3], kjit::compile::compiler::keyed_option("-time=/tmp/t.csv"));
    EXPECT_EQ(folders.include_paths, (std::vector<std::string>{"{anchor 1}"}));
    EXPECT_EQ(folders.program_name, "{anchor 2}/gemm.cu");
}
