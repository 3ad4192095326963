// Requests and checks shared by the tests of the cache and of the modules it drives
// (cache_test.cpp, hit_memo_test.cpp, tests/store/compile_lock_test.cpp): a templated kernel's
// request, a compile that must succeed, the request with one input of the key changed at a time,
// and the number of complete entries in a cache folder.
#pragma once

#include "cache/cache.hpp"
#include "key/cache_key.hpp"
#include "store/cache_entry.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kjit_test {

const char *const kTemplated = R"(
template <int N> __global__ void gemm(float *p) { p[threadIdx.x] = N; }
template __global__ void gemm<128>(float *);
)";

inline kjit::key::Request base_request(const std::string &cache_dir) {
    kjit::key::Request r;
    r.source = kTemplated;
    r.keyword = "gemm";
    r.cache_dir = cache_dir;
    r.arch = "sm_90";
    return r;
}

inline std::string compile_ok(kjit::cache::Cache &cache, const kjit::key::Request &r) {
    auto path = cache.compile(r);
    EXPECT_TRUE(path.ok()) << path.error().message;
    return path.ok() ? path->cubin : std::string();
}

// Every folder below `cache` named like an entry is complete; returns how many there are.
inline int complete_entries(const std::string &cache) {
    int n = 0;
    for (const std::string &shard : list_dir(cache)) {
        for (const std::string &e : list_dir(cache + "/" + shard)) {
            if (e[0] == '.') continue;                                    // a temp folder left by a killed writer
            if (kjit::store::cache_entry::is_variants_name(e)) continue;  // a source key's list of entries
            const std::string dir = cache + "/" + shard + "/" + e;
            EXPECT_TRUE(exists(dir + "/kernel.cubin")) << dir;
            EXPECT_TRUE(exists(dir + "/kernel.cubin.name")) << dir;
            EXPECT_TRUE(exists(dir + "/manifest.txt")) << dir;
            EXPECT_TRUE(exists(dir + "/source.cu")) << dir;
            ++n;
        }
    }
    return n;
}

// One request per input of the key, each differing from base_request("/c") in that input alone.
inline std::vector<kjit::key::Request> one_input_changed() {
    const kjit::key::Request base = base_request("/c");
    std::vector<kjit::key::Request> variants(13, base);
    variants[0].source += " ";
    variants[1].headers = {{"a.h", "#define A 1"}};
    variants[2].headers = {{"a.h", "#define A 2"}};
    variants[3].headers = {{"b.h", "#define A 1"}};
    variants[4].nvrtc_options = {"-DX=1"};
    variants[5].nvrtc_options = {"-DX=1", "-DY=1"};
    variants[6].nvrtc_options = {"-DY=1", "-DX=1"};
    variants[7].include_paths = {"/inc"};
    variants[8].arch = "sm_90a";
    variants[9].name_expression = "gemm<128>";
    variants[10].keyword = "gem";
    variants[11].nvrtc_identity = "13.0 libnvrtc.so.13 1";  // another NVRTC build
    variants[12].program_name = "gemm.cu";
    return variants;
}

}  // namespace kjit_test
