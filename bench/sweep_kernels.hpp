// The tuning sweep's kernels: instantiations of one GEMM-like templated kernel, each its own
// program (and so its own cache entry), as an autotuner leaves them.
//
//   template <int BM, int BN, int BK, int TM, int TN, int SPLITK> __global__ void gemm_tile(...)
//
// is a shared-memory tiled SGEMM: a BM x BN tile per block, BK-deep slices of A and B staged in
// shared memory, a TM x TN register tile per thread, optional split-K over blockIdx.z. The
// configurations cover BM, BN in {32, 64, 128}, BK in {4, 8, 16}, TM, TN in {1, 2, 4} and SPLITK
// in {1, 2, 4, 8}, kept where the block has 32 to 1024 threads; they are put in a fixed pseudo-random
// order, so the first N of any N are a fair sample of compile times (which grow with BK*TM*TN).
#pragma once

#include <string>
#include <vector>

namespace kjit_bench {

constexpr const char *kSweepKeyword = "gemm_tile";

struct GemmConfig {
    int bm, bn, bk, tm, tn, splitk;
    int threads() const { return (bm / tm) * (bn / tn); }
    std::string label() const;  // "128x64x16 t4x2 s1"
};

// The first `n` configurations of the sweep (at most sweep_size()).
std::vector<GemmConfig> sweep_configs(int n);
int sweep_size();

// The program for one configuration: the template and one explicit instantiation.
std::string sweep_source(const GemmConfig &c);

}  // namespace kjit_bench
