// The link scenario's sources (issue 37): a device-function library shaped like NVIDIA's MathDx
// ones (cuBLASDx, cuFFTDx), compiled on its own to LTO-IR, and kernels that call it, each a
// program of its own linked with it by nvJitLink.
//
// The library, namespace dxlib, exports non-template __device__ functions, each an
// instantiation of one of eight templates: register-tiled GEMM (gemm_MxNxK), radix-2 FFT in
// place (fft_N), row softmax (softmax_N), tree reduction (reduce_N), Horner polynomial
// (poly_D), dot product (dot_N), inclusive scan (scan_N) and warp-shuffle sum (warp_sum_W).
// The kernel program holds only their declarations, as a client's tile kernel holds only the
// MathDx library's header; variant V (-DLINK_VARIANT=V) calls a different mix of them, so each
// link pulls in other code.
#pragma once

#include <string>
#include <vector>

namespace kjit_bench {

constexpr const char *kLinkKeyword = "link_tile";
// What kjit_resolve_name must find in every linked cubin: link_tile(float*, const float*, int).
constexpr const char *kLinkKernelName = "_Z9link_tilePfPKfi";

// The library's source: the templates and the exported instantiations.
std::string link_library_source();
// How many functions it exports.
int link_library_functions();

// The kernel program (the same text for every variant) and the options that pick variant `v`.
std::string link_kernel_source();
std::vector<std::string> link_kernel_options(int v);
// Variants there are (kernels of the scenario at most).
int link_kernel_variants();

}  // namespace kjit_bench
