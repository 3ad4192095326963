#include "sweep_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace kjit_bench {

namespace {

std::vector<GemmConfig> all_configs() {
    std::vector<GemmConfig> out;
    for (int bm : {32, 64, 128})
        for (int bn : {32, 64, 128})
            for (int bk : {4, 8, 16})
                for (int tm : {1, 2, 4})
                    for (int tn : {1, 2, 4})
                        for (int splitk : {1, 2, 4, 8}) {
                            const GemmConfig c{bm, bn, bk, tm, tn, splitk};
                            if (c.threads() >= 32 && c.threads() <= 1024) out.push_back(c);
                        }
    // A fixed shuffle (Fisher-Yates with a 64-bit LCG): the same order on every machine.
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;
    for (std::size_t i = out.size(); i > 1; --i) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(out[i - 1], out[static_cast<std::size_t>((state >> 33) % i)]);
    }
    return out;
}

const std::vector<GemmConfig> &configs() {
    static const std::vector<GemmConfig> all = all_configs();
    return all;
}

constexpr const char *kTemplate = R"(
template <int BM, int BN, int BK, int TM, int TN, int SPLITK>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
gemm_tile(float *__restrict__ c, const float *__restrict__ a, const float *__restrict__ b, int m, int n, int k,
          float alpha, float beta) {
    constexpr int kThreads = (BM / TM) * (BN / TN);
    __shared__ float as[BK][BM + 1];
    __shared__ float bs[BK][BN];
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int k_per_split = (k + SPLITK - 1) / SPLITK;
    const int k_begin = blockIdx.z * k_per_split;
    const int k_end = min(k, k_begin + k_per_split);
    float acc[TM][TN] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += kThreads) {
            const int r = i / BK, q = i % BK;
            as[q][r] = (row0 + r < m && k0 + q < k_end) ? a[(row0 + r) * k + k0 + q] : 0.0f;
        }
        for (int i = threadIdx.x; i < BK * BN; i += kThreads) {
            const int r = i / BN, q = i % BN;
            bs[r][q] = (k0 + r < k_end && col0 + q < n) ? b[(k0 + r) * n + col0 + q] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) av[i] = as[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) bv[j] = bs[kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int r = row0 + ty * TM + i, q = col0 + tx * TN + j;
            if (r >= m || q >= n) continue;
            float *out = &c[r * n + q];
            if (SPLITK == 1) *out = alpha * acc[i][j] + beta * *out;
            else atomicAdd(out, alpha * acc[i][j]);
        }
    }
}
)";

}  // namespace

int sweep_size() { return static_cast<int>(configs().size()); }

std::vector<GemmConfig> sweep_configs(int n) {
    const auto count = static_cast<std::size_t>(std::clamp(n, 0, sweep_size()));
    return {configs().begin(), configs().begin() + static_cast<std::ptrdiff_t>(count)};
}

std::string GemmConfig::label() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%dx%dx%d t%dx%d s%d", bm, bn, bk, tm, tn, splitk);
    return buf;
}

std::string sweep_source(const GemmConfig &c) {
    char inst[256];
    std::snprintf(inst, sizeof inst,
                  "template __global__ void gemm_tile<%d, %d, %d, %d, %d, %d>(float *, const float *, const float *, "
                  "int, int, int, float, float);\n",
                  c.bm, c.bn, c.bk, c.tm, c.tn, c.splitk);
    return std::string(kTemplate) + inst;
}

}  // namespace kjit_bench
