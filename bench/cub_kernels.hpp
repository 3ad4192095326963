// The CUB sweep's kernels: a header-heavy kernel as autotuners instantiate it, where most of a
// compile is parsing the same headers (CUB, libcu++) again, which NVRTC's precompiled header
// saves.
//
//   template <typename T, int BLOCK, int ITEMS, cub::BlockReduceAlgorithm ALGO>
//   __global__ void cub_block_reduce(const T *in, T *out, int n)
//
// loads BLOCK x ITEMS values per block with cub::BlockLoad (warp-transpose) and sums them with
// cub::BlockReduce. Configurations: T in {float, double, int}, BLOCK in {64, 128, 256, 512},
// ITEMS in {1, 2, 4, 8}, ALGO in {BLOCK_REDUCE_WARP_REDUCTIONS, BLOCK_REDUCE_RAKING}: 96, in a
// fixed interleaved order so any first N mix them.
#pragma once

#include <string>
#include <vector>

namespace kjit_bench {

constexpr const char *kCubKeyword = "cub_block_reduce";

struct CubConfig {
    const char *type;
    int block, items;
    const char *algorithm;
    std::string label() const;  // "float b128 i4 RAKING"
};

std::vector<CubConfig> cub_configs(int n);
int cub_size();

// The program for one configuration: the template and one explicit instantiation.
std::string cub_source(const CubConfig &c);

// One large program for the --split-compile comparison: four instantiations of a kernel that
// sorts with cub::BlockRadixSort and scans with cub::BlockScan (up to 512 threads x 16 items).
std::string cub_large_source();

// NVRTC options the sources need besides -arch: C++17 and the toolkit's CCCL headers (passed
// as -I, not as include paths: they ship with the toolkit whose NVRTC build is in the key).
std::vector<std::string> cub_nvrtc_options();

}  // namespace kjit_bench
