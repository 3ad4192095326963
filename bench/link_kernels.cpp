#include "link_kernels.hpp"

namespace kjit_bench {

namespace {

// The templates, in the library's program only: the kernels see the exported functions'
// declarations, never these bodies (nvJitLink's LTO inlines them across the two programs).
constexpr const char *kTemplates = R"(
namespace dxlib {
namespace detail {

template <int N> struct Log2 { static constexpr int value = 1 + Log2<N / 2>::value; };
template <> struct Log2<1> { static constexpr int value = 0; };

// C (M x N) = alpha * A (M x K) B (K x N) + beta * C, with an M x N register tile.
template <int M, int N, int K>
__device__ __forceinline__ void gemm_tile(const float *__restrict__ a, const float *__restrict__ b,
                                          float *__restrict__ c, int lda, int ldb, int ldc, float alpha,
                                          float beta) {
    float acc[M][N];
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int j = 0; j < N; ++j) acc[i][j] = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        float ra[M], rb[N];
#pragma unroll
        for (int i = 0; i < M; ++i) ra[i] = a[i * lda + k];
#pragma unroll
        for (int j = 0; j < N; ++j) rb[j] = b[k * ldb + j];
#pragma unroll
        for (int i = 0; i < M; ++i)
#pragma unroll
            for (int j = 0; j < N; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int j = 0; j < N; ++j) c[i * ldc + j] = alpha * acc[i][j] + beta * c[i * ldc + j];
}

// In-place radix-2 decimation-in-time FFT of N complex points (split real and imaginary parts).
template <int N>
__device__ __forceinline__ void fft_radix2(float *re, float *im) {
    constexpr int bits = Log2<N>::value;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int j = static_cast<int>(__brev(static_cast<unsigned>(i)) >> (32 - bits));
        if (i < j) {
            float t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
#pragma unroll
    for (int len = 2; len <= N; len <<= 1) {
#pragma unroll
        for (int i = 0; i < N; i += len) {
#pragma unroll
            for (int k = 0; k < len / 2; ++k) {
                float s, co;
                __sincosf(-6.28318530718f * static_cast<float>(k) / static_cast<float>(len), &s, &co);
                const int p = i + k, q = i + k + len / 2;
                const float tr = re[q] * co - im[q] * s, ti = re[q] * s + im[q] * co;
                re[q] = re[p] - tr;
                im[q] = im[p] - ti;
                re[p] += tr;
                im[p] += ti;
            }
        }
    }
}

template <int N>
__device__ __forceinline__ void softmax_row(float *x) {
    float m = x[0];
#pragma unroll
    for (int i = 1; i < N; ++i) m = fmaxf(m, x[i]);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        x[i] = __expf(x[i] - m);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] *= inv;
}

template <int N>
__device__ __forceinline__ float tree_sum(const float *x) {
    float v[N];
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = x[i];
#pragma unroll
    for (int w = N / 2; w > 0; w /= 2)
#pragma unroll
        for (int i = 0; i < w; ++i) v[i] += v[i + w];
    return v[0];
}

template <int D>
__device__ __forceinline__ float horner(float x) {
    float r = 1.0f / static_cast<float>(D + 1);
#pragma unroll
    for (int i = D - 1; i >= 0; --i) r = fmaf(r, x, 1.0f / static_cast<float>(i + 1));
    return r;
}

template <int N>
__device__ __forceinline__ float dot(const float *a, const float *b) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i % 4] = fmaf(a[i], b[i], acc[i % 4]);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

template <int N>
__device__ __forceinline__ void inclusive_scan(float *x) {
#pragma unroll
    for (int d = 1; d < N; d *= 2)
#pragma unroll
        for (int i = N - 1; i >= d; --i) x[i] += x[i - d];
}

template <int W>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o, W);
    return v;
}

}  // namespace detail
}  // namespace dxlib
)";

struct Gemm {
    int m, n, k;
};
constexpr Gemm kGemms[] = {{2, 2, 8}, {4, 4, 4}, {4, 4, 8}, {8, 4, 4}, {4, 8, 4}, {8, 4, 8}, {4, 8, 8}, {8, 8, 4}};
constexpr int kFft[] = {4, 8, 16, 32};
constexpr int kSoftmax[] = {8, 16, 32, 64};
constexpr int kReduce[] = {32, 64, 128, 256};
constexpr int kPoly[] = {4, 8, 12, 16};
constexpr int kDot[] = {16, 32, 64, 128};
constexpr int kScan[] = {8, 16, 32, 64};
constexpr int kWarp[] = {32, 16, 8, 4};
constexpr int kVariants = 16;

std::string gemm_name(const Gemm &g) {
    return "gemm_" + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
}

std::string sized(const char *stem, int n) { return std::string(stem) + "_" + std::to_string(n); }

// One exported function: its declaration (`body` empty) or its definition.
struct Export {
    std::string signature;  // "void gemm_4x4x8(const float *a, ...)"
    std::string body;       // "{ detail::gemm_tile<4, 4, 8>(...); }"
};

std::vector<Export> exports() {
    std::vector<Export> out;
    for (const Gemm &g : kGemms) {
        out.push_back({"void " + gemm_name(g) +
                           "(const float *a, const float *b, float *c, int lda, int ldb, int ldc, float alpha, "
                           "float beta)",
                       "{ detail::gemm_tile<" + std::to_string(g.m) + ", " + std::to_string(g.n) + ", " +
                           std::to_string(g.k) + ">(a, b, c, lda, ldb, ldc, alpha, beta); }"});
    }
    for (int n : kFft)
        out.push_back({"void " + sized("fft", n) + "(float *re, float *im)",
                       "{ detail::fft_radix2<" + std::to_string(n) + ">(re, im); }"});
    for (int n : kSoftmax)
        out.push_back(
            {"void " + sized("softmax", n) + "(float *x)", "{ detail::softmax_row<" + std::to_string(n) + ">(x); }"});
    for (int n : kReduce)
        out.push_back({"float " + sized("reduce", n) + "(const float *x)",
                       "{ return detail::tree_sum<" + std::to_string(n) + ">(x); }"});
    for (int n : kPoly)
        out.push_back(
            {"float " + sized("poly", n) + "(float x)", "{ return detail::horner<" + std::to_string(n) + ">(x); }"});
    for (int n : kDot)
        out.push_back({"float " + sized("dot", n) + "(const float *a, const float *b)",
                       "{ return detail::dot<" + std::to_string(n) + ">(a, b); }"});
    for (int n : kScan)
        out.push_back(
            {"void " + sized("scan", n) + "(float *x)", "{ detail::inclusive_scan<" + std::to_string(n) + ">(x); }"});
    for (int n : kWarp)
        out.push_back({"float " + sized("warp_sum", n) + "(float v)",
                       "{ return detail::warp_sum<" + std::to_string(n) + ">(v); }"});
    return out;
}

// The declarations a client's program holds: the library's "header".
std::string declarations() {
    std::string out = "namespace dxlib {\n";
    for (const Export &e : exports()) out += "__device__ " + e.signature + ";\n";
    return out + "}  // namespace dxlib\n";
}

// The calls of variant v: a GEMM tile (two from v = 8 on), then an FFT, a softmax and a scan of
// its output, and a reduction, dot product, polynomial and warp sum into the thread's result.
std::string variant_calls(int v) {
    const Gemm &g = kGemms[v % 8];
    std::string out = "    dxlib::" + gemm_name(g) + "(a, a + 256, c, " + std::to_string(g.k) + ", " +
                      std::to_string(g.n) + ", " + std::to_string(g.n) + ", 1.0f, 0.5f);\n";
    if (v >= 8) {
        const Gemm &h = kGemms[(v + 3) % 8];
        out += "    dxlib::" + gemm_name(h) + "(a + 128, a + 384, c + 64, " + std::to_string(h.k) + ", " +
               std::to_string(h.n) + ", " + std::to_string(h.n) + ", 0.5f, 1.0f);\n";
    }
    out += "    dxlib::" + sized("fft", kFft[v % 4]) + "(c + 128, c + 192);\n";
    out += "    dxlib::" + sized("softmax", kSoftmax[(v + 1) % 4]) + "(c + 256);\n";
    out += "    dxlib::" + sized("scan", kScan[(v + 2) % 4]) + "(c + 320);\n";
    out += "    acc += dxlib::" + sized("reduce", kReduce[(v + 3) % 4]) + "(c);\n";
    out += "    acc += dxlib::" + sized("dot", kDot[(v / 2) % 4]) + "(a, c);\n";
    out += "    acc = dxlib::" + sized("poly", kPoly[(v / 4) % 4]) + "(acc);\n";
    out += "    acc = dxlib::" + sized("warp_sum", kWarp[(v + v / 4) % 4]) + "(acc);\n";
    return out;
}

}  // namespace

std::string link_library_source() {
    std::string out = "// dxlib: the link scenario's device-function library (bench/link_kernels.cpp)\n";
    out += kTemplates;
    out += declarations();
    out += "namespace dxlib {\n";
    for (const Export &e : exports()) out += "__device__ " + e.signature + " " + e.body + "\n";
    return out + "}  // namespace dxlib\n";
}

int link_library_functions() { return static_cast<int>(exports().size()); }

std::string link_kernel_source() {
    std::string out = "// A tile kernel that calls dxlib (bench/link_kernels.cpp); LINK_VARIANT picks the calls.\n";
    out += declarations();
    out += R"(
__global__ void link_tile(float *out, const float *in, int n) {
    const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    // Every lane of the warp takes part (the warp sum shuffles), on a slice that exists.
    const int s = t < n ? t : n - 1;
    const float *a = in + s * 512;
    float *c = out + s * 512;
    float acc = 0.0f;
)";
    for (int v = 0; v < kVariants; ++v) {
        out += std::string(v == 0 ? "#if" : "#elif") + " LINK_VARIANT == " + std::to_string(v) + "\n";
        out += variant_calls(v);
    }
    out += "#else\n#error LINK_VARIANT must be 0 to " + std::to_string(kVariants - 1) + "\n#endif\n";
    out += "    if (t < n) out[static_cast<long>(n) * 512 + t] = acc;\n}\n";
    return out;
}

std::vector<std::string> link_kernel_options(int v) { return {"-DLINK_VARIANT=" + std::to_string(v)}; }

int link_kernel_variants() { return kVariants; }

}  // namespace kjit_bench
