// A cluster-tier entry to test with (entry_test, tier_test): a real cubin (numbered_gemm(4),
// compiled by NVRTC once per build tree), a whole manifest for it, and what a request for it
// expects of a value.
#pragma once

#include "key/cache_key.hpp"
#include "storage/remote/entry.hpp"
#include "test_support.hpp"
#include "util/hashing.hpp"

#include <optional>
#include <string>

namespace kjit_test {

struct SampleEntry {
    std::string cubin;
    kjit::store::cache_entry::Manifest manifest;
    kjit::storage::remote::Expected expected;
};

inline SampleEntry sample_entry() {
    SampleEntry s;
    s.cubin = cubin_for(sources::numbered_gemm(4));
    s.manifest.key = std::string(32, 'a');
    s.manifest.keyword = "gemm";
    s.manifest.name = sources::numbered_gemm_name(4);
    s.manifest.arch = "sm_90";
    s.manifest.nvrtc = "13.0 libnvrtc.so.13 1";
    s.manifest.name_expression = std::nullopt;
    s.manifest.cubin_bytes = s.cubin.size();
    s.manifest.cubin_hash = kjit::hash128_hex(s.cubin);
    s.manifest.created = "2026-12-04T00:00:00Z";
    s.expected = {s.manifest.key, kjit::key::kFormatVersion, s.manifest.nvrtc, "sm_90", "gemm", std::nullopt};
    return s;
}

}  // namespace kjit_test
