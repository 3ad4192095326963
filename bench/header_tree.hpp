// A header tree with the shape of CUTLASS/CuTe, written by the bench itself (the project ships
// only what it writes), and the kernels compiled over it, for the `headers` scenario.
//
// The tree (about 500 headers under <root>/tree/):
//   tree/prelude.hpp          pre-included (--pre-include=<file>): TREE_HD and the tree's version
//   tree/std/config.hpp       TREE_STD_HEADER(x), a computed include defined two ways under
//                             #if/#else as CUTLASS's CUDA_STD_HEADER is: <tree/std/x.hpp> under
//                             NVRTC, <tree/std_host/x.hpp> elsewhere (those hold an #error: NVRTC
//                             never reads them, the include scanner follows both definitions)
//   tree/std/*.hpp            what `#include TREE_STD_HEADER(type_traits)` and the like reach
//   tree/cute/...,            leaf folders 2-3 levels deep (cute/atom/mma, cutlass/gemm/kernel,
//   tree/cutlass/...          cutlass/detail, ...), each with ~12-24 headers of template code
//                             (structs, constexpr functions, traits) and an all.hpp; a mix of
//                             `#pragma once` and classic guards; headers include earlier headers
//                             of their folder by quoted name, of other folders by quoted relative
//                             name ("../copy/x.hpp") or angle name through -I; some through the
//                             computed include
//   tree/cute/cute.hpp, tree/cutlass/gemm/gemm.hpp, tree/cutlass/epilogue/epilogue.hpp
//                             the umbrellas the kernels include (CuTe, GEMM, epilogue)
//   tree/cutlass/gemm/kernel/tile_params.hpp
//                             a header every kernel includes and whose constant every cubin
//                             carries: the one the edit cycle edits
//   tree/cutlass/conv/..., tree/cutlass/experimental/unused_*.hpp
//                             headers nothing the kernels reach includes (the conv folders
//                             include the rest; nothing includes them)
// Everything is a function of the code alone: the same bytes on every run and machine.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace kjit_bench {

// The keyword of the tree kernels (template tree_gemm<BM, BN, BK, STAGES, T>).
constexpr const char *kTreeKeyword = "tree_gemm";
// The keyword of the humming-style kernels (template hum_kernel<T>).
constexpr const char *kHumKeyword = "hum_kernel";

struct HeaderTree {
    std::string root;           // the -I folder: <root>/tree/... is the tree
    std::string pre_include;    // <root>/tree/prelude.hpp
    std::string edited_header;  // tile_params.hpp: every kernel includes it, every cubin carries its constant
    std::string edit_from;      // text in edited_header that the edit replaces...
    std::string edit_to;        // ...with this (another constant: a different cubin)
    unsigned stamp_before = 0;  // the 32-bit word a cubin built from the text before the edit holds
    unsigned stamp_after = 0;   // and one built from the edited text
    std::string orphan_header;  // a header nothing includes
    int headers = 0;            // .hpp files written (write_header_tree) or expected there

    // -std=c++17, -I<root>, --pre-include=<pre_include>: as DeepGEMM passes its tree.
    std::vector<std::string> nvrtc_options() const;
};

// The paths of a tree at `root`, without writing anything (for child processes).
HeaderTree header_tree_at(const std::string &root);
// Writes the tree under `root`, replacing whatever was there (an edit left by an interrupted run
// included). Throws BenchError when it cannot.
HeaderTree write_header_tree(const std::string &root);

// The tree kernels: distinct configurations of tree_gemm, each its own program and cache entry.
int tree_kernel_count();
std::string tree_kernel_source(int i);

// A kernel manifest (the real clients' format: bench/real_clients/prepare.py) of the tree kernels
// whose sources were written to `sources` (kernel i in sources[i]), compiled against `tree`.
nlohmann::json tree_kernel_manifest(const HeaderTree &tree, const std::vector<std::string> &sources,
                                    const std::string &arch);
std::string tree_kernel_label(int i);  // "128x64x32 s3 float"

// The humming-style kernels: each defines its configuration and then includes an in-memory
// header of its own ("hum_<i>.cuh"), so no two share a precompiled header.
std::string hum_source(int i);
std::pair<std::string, std::string> hum_header(int i);  // name, text

}  // namespace kjit_bench
