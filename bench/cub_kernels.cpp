#include "cub_kernels.hpp"

#ifndef KJIT_BENCH_CUDA_INCLUDE
#define KJIT_BENCH_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

namespace kjit_bench {

namespace {

constexpr const char *kTypes[] = {"float", "double", "int"};
constexpr int kBlocks[] = {64, 128, 256, 512};
constexpr int kItems[] = {1, 2, 4, 8};
constexpr const char *kAlgorithms[] = {"BLOCK_REDUCE_WARP_REDUCTIONS", "BLOCK_REDUCE_RAKING"};

std::vector<CubConfig> all_configs() {
    std::vector<CubConfig> out;
    for (const char *algorithm : kAlgorithms) {
        for (int items : kItems) {
            for (int block : kBlocks) {
                for (const char *type : kTypes) out.push_back(CubConfig{type, block, items, algorithm});
            }
        }
    }
    // A fixed interleaving (stride coprime to 96), so the first N mix types, sizes and algorithms.
    std::vector<CubConfig> shuffled;
    for (std::size_t i = 0; i < out.size(); ++i) shuffled.push_back(out[(i * 37) % out.size()]);
    return shuffled;
}

}  // namespace

std::string CubConfig::label() const {
    std::string algo(algorithm);
    algo = algo.substr(std::string("BLOCK_REDUCE_").size());
    return std::string(type) + " b" + std::to_string(block) + " i" + std::to_string(items) + " " + algo;
}

int cub_size() { return static_cast<int>(all_configs().size()); }

std::vector<CubConfig> cub_configs(int n) {
    std::vector<CubConfig> all = all_configs();
    if (n < static_cast<int>(all.size())) all.resize(static_cast<std::size_t>(n));
    return all;
}

std::string cub_source(const CubConfig &c) {
    const std::string t = c.type;
    return "#include <cub/block/block_load.cuh>\n"
           "#include <cub/block/block_reduce.cuh>\n"
           "\n"
           "template <typename T, int BLOCK, int ITEMS, cub::BlockReduceAlgorithm ALGO>\n"
           "__global__ void cub_block_reduce(const T *in, T *out, int n) {\n"
           "    using Load = cub::BlockLoad<T, BLOCK, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE>;\n"
           "    using Reduce = cub::BlockReduce<T, BLOCK, ALGO>;\n"
           "    __shared__ union {\n"
           "        typename Load::TempStorage load;\n"
           "        typename Reduce::TempStorage reduce;\n"
           "    } temp;\n"
           "    T items[ITEMS];\n"
           "    const int offset = blockIdx.x * BLOCK * ITEMS;\n"
           "    Load(temp.load).Load(in + offset, items, n - offset, T(0));\n"
           "    __syncthreads();\n"
           "    const T sum = Reduce(temp.reduce).Sum(items);\n"
           "    if (threadIdx.x == 0) out[blockIdx.x] = sum;\n"
           "}\n"
           "\n"
           "template __global__ void cub_block_reduce<" +
           t + ", " + std::to_string(c.block) + ", " + std::to_string(c.items) + ", cub::" + c.algorithm + ">(const " +
           t + " *, " + t + " *, int);\n";
}

std::string cub_large_source() {
    return "#include <cub/block/block_radix_sort.cuh>\n"
           "#include <cub/block/block_scan.cuh>\n"
           "\n"
           "template <int BLOCK, int ITEMS>\n"
           "__global__ void cub_sort_scan(float *data) {\n"
           "    using Sort = cub::BlockRadixSort<float, BLOCK, ITEMS>;\n"
           "    using Scan = cub::BlockScan<float, BLOCK>;\n"
           "    __shared__ union {\n"
           "        typename Sort::TempStorage sort;\n"
           "        typename Scan::TempStorage scan;\n"
           "    } temp;\n"
           "    float keys[ITEMS];\n"
           "    for (int i = 0; i < ITEMS; ++i) keys[i] = data[threadIdx.x * ITEMS + i];\n"
           "    Sort(temp.sort).Sort(keys);\n"
           "    __syncthreads();\n"
           "    Scan(temp.scan).InclusiveSum(keys, keys);\n"
           "    for (int i = 0; i < ITEMS; ++i) data[threadIdx.x * ITEMS + i] = keys[i];\n"
           "}\n"
           "\n"
           "template __global__ void cub_sort_scan<64, 2>(float *);\n"
           "template __global__ void cub_sort_scan<128, 4>(float *);\n"
           "template __global__ void cub_sort_scan<256, 8>(float *);\n"
           "template __global__ void cub_sort_scan<512, 16>(float *);\n";
}

std::vector<std::string> cub_nvrtc_options() {
    return {"-std=c++17", std::string("-I") + KJIT_BENCH_CUDA_INCLUDE + "/cccl",
            std::string("-I") + KJIT_BENCH_CUDA_INCLUDE};
}

}  // namespace kjit_bench
