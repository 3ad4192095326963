#!/usr/bin/env python3
"""Kernels that real clients generate, for kjit-bench's `real-clients` scenario (docs/bench.md).

Extracts three source trees, each at the commit bench/sources.txt pins, from git repositories
under $KJIT_BENCH_SOURCES (scripts/get_bench_sources.sh DIR fetches them there; never copied
into this project; nothing is fetched here) into OUT/src, generates kernels with the projects' own generators, and writes one
manifest per set, OUT/deepgemm.json, OUT/humming.json and OUT/warp.json:

  {"set": "deepgemm", "kernels": [{"name", "source" (a file under OUT/kernels), "keyword",
   "program_name", "arch", "options": [NVRTC options], "include_paths": [folders]}]}

- DeepGEMM (deepseek-ai/DeepGEMM): its generators are C++ (`generate_impl` in
  csrc/jit_kernels/impls/*.hpp), each a `fmt::format(R"(...)", ...)` of a raw-string template
  whose arguments come from heuristics that need torch and a GPU. This script reads each
  template out of the header as the header says it and fills its `{}`s in order with a
  configuration chosen here (the same values DeepGEMM's sm90 heuristics would give for the
  shapes named below: 128 TMA threads, 128 or 256 math threads, 128-byte swizzles, 132 SMs);
  `{{`/`}}` are fmt's escapes, which Python's str.format shares. The flags are those of
  csrc/jit/compiler.hpp's NVRTCCompiler (C++20, `--pch`, `-default-device`, ...); the program is
  named `kernel.cu` as there. CUTLASS/CuTe come from the NVIDIA/cutlass repository's include/
  (DeepGEMM's third-party/cutlass submodule is not mirrored). CUDA 13 keeps libcu++ (cuda/std/...,
  which CuTe includes) in include/cccl, so both sets get CUDA's include/cccl and include.
  NVRTC 13.0 has no <utility>, which deep_gemm/common/utils.cuh includes (every kernel reaches
  it) for std::integer_sequence, std::make_integer_sequence and std::is_same_v, and does not
  declare cudaGridDependencySynchronize (CUDA's cuda_device_runtime_api.h does), which every
  sm90 kernel calls: the script writes OUT/nvrtc-std/deepgemm/utility, which takes the first from
  libcu++ and includes the second, and puts that folder first. (std::forward and std::move are
  NVRTC's own.)
- humming (inclusionAI/humming): its generator is Python (humming/kernel/*.py). It imports
  torch, cuda-python, pyelftools and filelock at module level and compiles in its kernels'
  constructors; this script stubs those modules, replaces KernelRuntime.prepare (the compile)
  by a capture of the generated `self.code`, and runs the kernels' own constructors. humming
  compiles with nvcc; its flags (humming/jit/compiler.py) are given as NVRTC takes them. Its
  headers include <cstdint> and <math.h>, and CUDA's cuda.h includes <stdint.h> and
  <stdlib.h>, none of which NVRTC 13.0 has: OUT/nvrtc-std/humming holds minimal ones. Its
  generated code instantiates a kernel with a namespace-scope `auto ptr =
  reinterpret_cast<void*>(&kernel<...>);`, a host variable NVRTC refuses (or, with
  -default-device, a __device__ one it cannot initialize): the script moves that one statement
  into a function, as DeepGEMM's generated code has it (`static void __instantiate_kernel()
  {...}`); the rest is the generator's text. Only its weight
  preparation kernels are in the set: its GEMMs' SharedStorage declares zero-length arrays for
  the features a configuration leaves out (a GNU extension nvcc accepts), which NVRTC refuses
  ("the size of an array must be greater than zero") for every configuration, since the
  group and channel input-scale arrays exclude each other.

- Warp (NVIDIA/warp, the warp-lang wheel bench/sources.txt pins): its generator is Python
  (warp/_src/codegen.py), run as Warp runs it, one CUDA source per Python module of @wp.kernel
  functions: the modules of Warp's own examples (warp/examples/core) that import with NumPy
  alone, each imported and generated in a venv (OUT/warp-venv, installed from the wheels
  get_bench_sources.sh fetched, no index) by Module._run_codegen, the step before Warp's NVRTC
  compile; the driver is never needed. Each module's source includes warp/native/builtin.h
  after the same #defines: thirteen compiles of one header identity, as a Warp program's
  modules are. The flags are those of warp/native/warp.cu's wp_cuda_compile_program with Warp's
  defaults (release, optimization level 3, FMA fusion, CUBIN for sm_90), less its `-pch`
  (NVRTC's automatic PCH, left out as DeepGEMM's `--pch` is); the program is named as Warp names
  it (the module's identifier), and the keyword is the module's first forward kernel.

  python3 bench/real_clients/prepare.py [--out DIR] [--mirrors DIR] [--cuda DIR] [--check]

--check compiles every kernel once with raw NVRTC (ctypes, no libkjit) and fails on an error.
Exit status 0 when the manifests were written; 3 when no sources folder is given, or a repository
or its pinned commit is missing there (nothing written; the message says which).
"""

import argparse
import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (mirror folder under --mirrors, extracted folder under OUT/src, the paths archived: CUTLASS's
# full tree has blobs missing from the mirror, and only its headers are used).
TREES = [
    ("deepseek-ai+DeepGEMM", "deepgemm", []),
    ("inclusionAI+humming", "humming", []),
    ("NVIDIA+cutlass", "cutlass", ["include"]),
]

# DeepGEMM sm90 kernels: (name, the kernel the template instantiates, the template's arguments
# in order). Shapes of DeepSeek-V3's GEMMs; m is 0 (not compiled in), as DeepGEMM's default
# compiled_dims "nk" gives.
IDENTITY = "epilogue::transform::EpilogueIdentity"
BF16 = "cutlass::bfloat16_t"
DEEPGEMM_KERNELS = [
    ("fp8_1d2d_n4096_k7168", "sm90_fp8_gemm_1d2d_impl",
     ["cute::UMMA::Major::K", 0, 4096, 7168, 1, 64, 128, 128, 128, 128, 128, 8, 128, 128, 1, "false", 132,
      "GemmType::Normal", BF16, IDENTITY]),
    ("fp8_1d2d_n7168_k2048", "sm90_fp8_gemm_1d2d_impl",
     ["cute::UMMA::Major::K", 0, 7168, 2048, 1, 128, 128, 128, 128, 128, 128, 5, 128, 256, 2, "false", 132,
      "GemmType::Normal", BF16, IDENTITY]),
    ("fp8_1d2d_grouped_masked", "sm90_fp8_gemm_1d2d_impl",
     ["cute::UMMA::Major::K", 0, 4096, 7168, 4, 64, 128, 128, 128, 128, 128, 8, 128, 128, 1, "false", 132,
      "GemmType::MGroupedMasked", BF16, IDENTITY]),
    ("fp8_1d1d_n4096_k7168", "sm90_fp8_gemm_1d1d_impl",
     [0, 4096, 7168, 1, 128, 128, 128, 128, 128, 5, 128, 256, 1, "false", 132, "GemmType::Normal", "float"]),
    ("fp8_1d1d_k_grouped", "sm90_fp8_gemm_1d1d_impl",
     [4096, 7168, 0, 4, 128, 128, 128, 128, 128, 5, 128, 256, 1, "false", 132, "GemmType::KGroupedContiguous",
      "float"]),
    ("bf16_nt_n4096_k7168", "sm90_bf16_gemm_impl",
     ["cute::UMMA::Major::K", "cute::UMMA::Major::K", 0, 4096, 7168, 1, 128, 128, 64, 128, 128, 128, 6, 128, 256, 1,
      "false", 132, "GemmType::Normal", "false", BF16]),
    ("bf16_grouped_contiguous", "sm90_bf16_gemm_impl",
     ["cute::UMMA::Major::K", "cute::UMMA::Major::K", 0, 7168, 2048, 8, 128, 128, 64, 128, 128, 128, 6, 128, 256, 1,
      "false", 132, "GemmType::MGroupedContiguous", "false", BF16]),
    ("layout_transpose_pack_ue8m0", "transpose_and_pack_fp32_into_ue8m0", [512, 128, 56, 1, "false"]),
    ("layout_transpose_fp32", "transpose_fp32", [512, 128, 56]),
]

# csrc/jit/compiler.hpp, NVRTCCompiler (DG_JIT_CPP_STANDARD 20; -I the library's include and
# CUDA's include go to include_paths; --gpu-architecture to arch).
DEEPGEMM_OPTIONS = ["-std=c++20", "--diag-suppress=39,161,174,177,186,940",
                    "--ptxas-options=--register-usage-level=10", "-default-device", "--pch", "--device-int128"]

# humming/jit/compiler.py's nvcc flags that NVRTC takes, and -default-device (DeepGEMM's NVRTC
# flags have it too), without which NVRTC refuses cuda.h's host API and the instantiating
# function (see HUMMING_INSTANTIATION). Left out: -O3 and the host compiler's
# options (NVRTC optimizes device code by default and compiles no host code), -cubin and
# -gencode (arch), and --expt-relaxed-constexpr / --expt-extended-lambda, which NVRTC 13.0
# refuses as unrecognized in every spelling.
HUMMING_OPTIONS = ["-std=c++17", "--ptxas-options=--register-usage-level=10", "--diag-suppress=39,161,174,177,940,177",
                   "-default-device"]


def pinned_sources():
    """bench/sources.txt's lines: owner+name (or pypi:<name>) -> the words after it (the commit,
    or the version and the wheel's SHA-256); scripts/get_bench_sources.sh fetches each."""
    pins = {}
    with open(os.path.join(ROOT, "bench", "sources.txt")) as f:
        for line in f:
            words = line.split()
            if words and not words[0].startswith("#"):
                pins[words[0].replace("/", "+")] = words[1:]
    return pins


def pinned_commits():
    """owner+name -> the commit bench/sources.txt pins."""
    return {source: words[0] for source, words in pinned_sources().items() if not source.startswith("pypi:")}


def extract(mirrors, out):
    """Extracts the trees, each at its pinned commit, into OUT/src (anew each time); a message
    saying what is missing instead when a repository or its pinned commit is not there."""
    src = os.path.join(out, "src")
    pins = pinned_commits()
    for mirror, folder, paths in TREES:
        git_dir = os.path.join(mirrors, mirror, "repo")
        if not os.path.isdir(git_dir):
            return f"no repository at {git_dir} (scripts/get_bench_sources.sh {mirrors} fetches it)"
        has = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-e", pins[mirror] + "^{commit}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if has.returncode != 0:
            return (f"{git_dir} does not hold the pinned commit {pins[mirror][:12]} "
                    f"(scripts/get_bench_sources.sh {mirrors} fetches it)")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    for mirror, folder, paths in TREES:
        git_dir = os.path.join(mirrors, mirror, "repo")
        dest = os.path.join(src, folder)
        os.makedirs(dest)
        # git names blobs it does not hold (CUTLASS's images) on stderr even for paths it
        # leaves out; only a failure is worth showing.
        commit = pins[mirror]
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", commit, *paths],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if archive.returncode != 0:
            sys.exit(f"prepare: git archive of {git_dir} failed: {archive.stderr.decode(errors='replace')}")
        archive = archive.stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
        print(f"prepare: {mirror} {commit[:12]} from {git_dir} -> {dest}")
    return None


def deepgemm_templates(tree):
    """kernel name -> the raw-string template of the generate_impl that instantiates it."""
    impls = os.path.join(tree, "csrc", "jit_kernels", "impls")
    templates = {}
    for name in sorted(os.listdir(impls)):
        with open(os.path.join(impls, name)) as f:
            text = f.read()
        for m in re.finditer(r'generate_impl\(.*?fmt::format\(R"\((.*?)\)"', text, re.S):
            body = m.group(1)
            kernel = re.search(r"&([\w:]+)<", body)
            if kernel:
                templates[kernel.group(1)] = body
    return templates


# The headers NVRTC 13.0 lacks, as far as each client uses them (see the docstring), written
# into OUT/nvrtc-std/<client>, first on that client's include paths.
NVRTC_CSTDINT = """// Written by libkjit's bench/real_clients/prepare.py: NVRTC 13.0 has no <cstdint>.
#pragma once
#include <cuda/std/cstdint>
#include <cuda/std/type_traits>
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;
using cuda::std::int8_t;
using cuda::std::intptr_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::uint8_t;
using cuda::std::uintptr_t;
namespace std {
using cuda::std::conditional_t;
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;
using cuda::std::int8_t;
using cuda::std::is_same;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::uint8_t;
}  // namespace std
"""
HUMMING_SHIMS = {
    "cstdint": NVRTC_CSTDINT,
    "stdint.h": "#pragma once\n#include <cstdint>\n",  # CUDA's cuda.h includes these two
    "stdlib.h": "#pragma once\n",
    "math.h": "#pragma once\n#include <cuda/std/cmath>\n",
}
DEEPGEMM_SHIMS = {}
DEEPGEMM_SHIMS["utility"] = """// Written by libkjit's bench/real_clients/prepare.py: what DeepGEMM's headers need and NVRTC
// 13.0 lacks (no <utility>; cudaGridDependencySynchronize undeclared).
#pragma once
#include <cuda/std/type_traits>
#include <cuda/std/utility>
#include <cuda_device_runtime_api.h>
namespace std {
using cuda::std::integer_sequence;
using cuda::std::is_same_v;
using cuda::std::make_integer_sequence;
}  // namespace std
"""


def write_shim(out, client, shims):
    """OUT/nvrtc-std/CLIENT with `shims` (name -> text); returns its path."""
    shim = os.path.join(out, "nvrtc-std", client)
    os.makedirs(shim, exist_ok=True)
    for name, text in shims.items():
        with open(os.path.join(shim, name), "w") as f:
            f.write(text)
    return shim


def generate_deepgemm(out):
    tree = os.path.join(out, "src", "deepgemm")
    shim = write_shim(out, "deepgemm", DEEPGEMM_SHIMS)
    templates = deepgemm_templates(tree)
    kernels = []
    for name, kernel, args in DEEPGEMM_KERNELS:
        if kernel not in templates:
            sys.exit(f"prepare: no generate_impl in {tree}/csrc/jit_kernels/impls instantiates {kernel}")
        template = templates[kernel]
        holes = template.replace("{{", "").replace("}}", "").count("{}")
        if holes != len(args):
            sys.exit(f"prepare: {kernel}'s template has {holes} arguments, {len(args)} given for {name}")
        source = template.format(*[str(a) for a in args])
        # The kernels are in namespace deep_gemm (libkjit's keyword names it: a::k matches _ZN1a...).
        kernels.append({"name": name, "keyword": "deep_gemm::" + kernel, "code": source})
    include_paths = [shim, os.path.join(tree, "deep_gemm", "include"), os.path.join(out, "src", "cutlass", "include")]
    return kernels, DEEPGEMM_OPTIONS, include_paths


class _Stub(types.ModuleType):
    """A module (or attribute) whose every attribute is another stub: what humming's imports of
    torch and the CUDA bindings need at import time, and nothing they do."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        return _Stub(f"{self.__name__}()")

    def __hash__(self):
        return hash(self.__name__)

    def __eq__(self, other):
        return isinstance(other, _Stub) and other.__name__ == self.__name__


# humming's namespace-scope instantiation (see the docstring), and the function it goes into.
HUMMING_INSTANTIATION = re.compile(r"^auto ptr = (reinterpret_cast<void\*>\(.*?\));$", re.S | re.M)
INSTANTIATE_IN_FUNCTION = "static void __instantiate_kernel() {\n    auto ptr = \\1;\n}"


def generate_humming(out):
    tree = os.path.join(out, "src", "humming")
    for module in ["torch", "torch.utils", "torch.utils.cpp_extension", "cuda", "cuda.bindings",
                   "cuda.bindings.driver", "elftools", "elftools.elf", "elftools.elf.elffile", "filelock"]:
        sys.modules.setdefault(module, _Stub(module))
    sys.path.insert(0, tree)
    import humming.jit.runtime as runtime
    from humming import dtypes
    from humming.kernel import (DequantKernel, PackWeightKernel, QuantWeightKernel, UnpackWeightKernel,
                                WeightRepackKernel)

    captured = []

    def capture(self):  # replaces KernelRuntime.prepare: the compile, the cubin and its loading
        captured.append((self.name, self.code))
        self.inited = True

    runtime.KernelRuntime.prepare = capture

    # Weight preparation, as humming's layers run it before their GEMMs: quantize, pack,
    # repack for the tensor cores, unpack, dequantize. (humming's GEMMs do not compile with
    # NVRTC: see the docstring.)
    names = []
    QuantWeightKernel(dtypes.float16, dtypes.uint4, 128, True, False, sm_version=90)
    names.append("quant_weight_f16_u4_g128")
    QuantWeightKernel(dtypes.bfloat16, dtypes.uint8, 0, True, False, sm_version=90)
    names.append("quant_weight_bf16_u8_channel")
    PackWeightKernel(4, sm_version=90)
    names.append("pack_weight_4bit")
    WeightRepackKernel(4, 16, True, sm_version=90)
    names.append("repack_weight_4bit_a16")
    UnpackWeightKernel(4, sm_version=90)
    names.append("unpack_weight_4bit")
    DequantKernel(sm_version=90)
    names.append("dequant_fp")
    kernels = []
    for n, (k, c) in zip(names, captured):
        code, found = HUMMING_INSTANTIATION.subn(INSTANTIATE_IN_FUNCTION, c, count=1)
        if found != 1:
            sys.exit(f"prepare: humming's {n} has no namespace-scope `auto ptr = reinterpret_cast<void*>(...);`")
        kernels.append({"name": n, "keyword": k, "code": code})
    include_paths = [write_shim(out, "humming", HUMMING_SHIMS), os.path.join(tree, "humming", "include")]
    return kernels, HUMMING_OPTIONS, include_paths


# Warp's examples whose modules import with NumPy alone (no CuPy, torch, USD or OpenGL).
WARP_MODULES = ["example_alloc_tracker", "example_dem", "example_fdtd_3d", "example_fft_poisson_navier_stokes_2d",
                "example_fluid", "example_graph_capture", "example_nvdb", "example_raymarch", "example_sample_mesh",
                "example_sph", "example_spin_lock", "example_wave", "example_work_queue"]

# warp/native/warp.cu, wp_cuda_compile_program and append_common_nvrtc_compile_options, for
# NVRTC 13.0 with Warp's defaults (mode "release", optimization_level 3 -> --Ofast-compile=0,
# verify_fp and fast_math off, fuse_fp on, no line info, CUBIN); its --include-path=<warp>/native
# goes to include_paths, its -pch is left out. WP_ENABLE_MATHDX is the wheel's (filled in).
WARP_OPTIONS = ["--std=c++17", "--Ofast-compile=0", "--define-macro=NDEBUG", "--undefine-macro=WP_VERIFY_FP",
                "--define-macro=WP_ENABLE_MATHDX={mathdx}", "--fmad=true", "--device-as-default-execution-space",
                "--extra-device-vectorization", "--restrict", "--diag-suppress=177,550"]

# Run in the venv: imports each example module and writes, as JSON to argv[1], each module's
# generated CUDA source and identifier, the wheel's native folder and whether it has MathDx.
WARP_CODEGEN = r"""
import importlib, json, os, sys
import warp as wp
wp.config.quiet = True
wp.init()
from warp._src import context
result = {"native": os.path.join(os.path.dirname(wp.__file__), "native"),
          "mathdx": bool(context.runtime.core.wp_is_mathdx_enabled()), "modules": []}
for name in sys.argv[2:]:
    importlib.import_module("warp.examples.core." + name)
    module = context.get_module("warp.examples.core." + name)
    options = module.resolve_options(wp.config)
    source = module._run_codegen(options, False)[0]
    identifier = module.get_module_identifier(block_dim=options["block_dim"])
    result["modules"].append({"name": name, "identifier": identifier, "code": source})
with open(sys.argv[1], "w") as f:
    json.dump(result, f)
"""

WARP_KERNEL = re.compile(r'^extern "C" __global__ void (\w+_cuda_kernel_forward)\(', re.M)


def warp_pin():
    """(name, version, sha256) of the warp-lang wheel bench/sources.txt pins."""
    words = pinned_sources().get("pypi:warp-lang", [])
    if len(words) != 2:
        sys.exit("prepare: bench/sources.txt pins no pypi:warp-lang <version> <sha256>")
    return "warp-lang", words[0], words[1]


def warp_wheels(mirrors):
    """The folder of the pinned warp-lang wheel (and NumPy's), or a message saying what is missing."""
    name, version, sha256 = warp_pin()
    folder = os.path.join(mirrors, "pypi+" + name)
    prefix = name.replace("-", "_") + "-" + version + "-"
    wheels = [f for f in sorted(os.listdir(folder)) if f.startswith(prefix) and f.endswith(".whl")] \
        if os.path.isdir(folder) else []
    for w in wheels:
        with open(os.path.join(folder, w), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == sha256:
                return folder, None
    return None, (f"no {name} {version} wheel with the pinned SHA-256 in {folder} "
                  f"(scripts/get_bench_sources.sh {mirrors} fetches it)")


def warp_venv(out, wheels):
    """OUT/warp-venv with the pinned warp-lang and NumPy, installed from `wheels` (no index);
    kept while it holds that version. Returns its python."""
    name, version, _ = warp_pin()
    venv = os.path.join(out, "warp-venv")
    python = os.path.join(venv, "bin", "python")
    probe = f"import numpy, importlib.metadata as m; assert m.version('{name}') == '{version}'"
    if os.path.exists(python) and subprocess.run([python, "-c", probe], stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL).returncode == 0:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                                "--find-links", wheels, f"{name}=={version}"], stderr=subprocess.PIPE)
    if installed.returncode != 0:
        sys.exit(f"prepare: installing {name} {version} from {wheels} into {venv} failed:\n"
                 f"{installed.stderr.decode(errors='replace')}")
    return python


def generate_warp(out, wheels):
    python = warp_venv(out, wheels)
    result_path = os.path.join(out, "warp-codegen.json")
    env = dict(os.environ, WARP_CACHE_PATH=os.path.join(out, "warp-cache"))
    run = subprocess.run([python, "-c", WARP_CODEGEN, result_path, *WARP_MODULES], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if run.returncode != 0:
        sys.exit(f"prepare: Warp's code generation failed:\n{run.stdout.decode(errors='replace')[-4000:]}")
    with open(result_path) as f:
        result = json.load(f)
    kernels = []
    for m in result["modules"]:
        forward = WARP_KERNEL.search(m["code"])
        if not forward:
            sys.exit(f"prepare: Warp's module {m['name']} has no forward kernel")
        kernels.append({"name": m["name"], "keyword": forward.group(1), "code": m["code"],
                        "program_name": m["identifier"] + ".cu"})
    options = [o.format(mathdx=int(result["mathdx"])) for o in WARP_OPTIONS]
    return kernels, options, [result["native"]]


def write_set(out, set_name, kernels, options, include_paths, program_name, arch):
    """OUT/SET.json and each kernel's source under OUT/kernels/SET; a kernel's own program_name,
    if it has one, over the set's."""
    folder = os.path.join(out, "kernels", set_name)
    os.makedirs(folder, exist_ok=True)
    entries = []
    for k in kernels:
        path = os.path.join(folder, k["name"] + ".cu")
        with open(path, "w") as f:
            f.write(k["code"])
        entries.append({"name": k["name"], "source": path, "keyword": k["keyword"],
                        "program_name": k.get("program_name", program_name), "arch": arch, "options": list(options),
                        "include_paths": list(include_paths)})
    manifest = os.path.join(out, set_name + ".json")
    with open(manifest + ".tmp", "w") as f:
        json.dump({"set": set_name, "kernels": entries}, f, indent=1)
    os.replace(manifest + ".tmp", manifest)
    print(f"prepare: {manifest}: {len(entries)} kernels")
    return entries


def check(entries, cuda):
    """Compiles each kernel once with raw NVRTC (no libkjit), `--pch` left out (it needs no
    check and would make later compiles of this process reuse a PCH)."""
    nvrtc = ctypes.CDLL(os.path.join(cuda, "lib64", "libnvrtc.so"))
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    for e in entries:
        with open(e["source"]) as f:
            code = f.read()
        opts = [f"-arch={e['arch']}"] + [o for o in e["options"] if o != "--pch"]
        opts += [f"-I{p}" for p in e["include_paths"]]
        prog = ctypes.c_void_p()
        nvrtc.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), e["program_name"].encode(), 0, None, None)
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        started = time.monotonic()
        rc = nvrtc.nvrtcCompileProgram(prog, len(opts), argv)
        took = time.monotonic() - started
        if rc != 0:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(prog, log)
            sys.exit(f"prepare: {e['name']} ({e['source']}) does not compile: "
                     f"{nvrtc.nvrtcGetErrorString(rc).decode()}\n{log.value.decode(errors='replace')[:4000]}")
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
        print(f"prepare: {e['name']}: compiles with raw NVRTC ({took:.1f} s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "real-clients"))
    parser.add_argument("--mirrors", default=os.environ.get("KJIT_BENCH_SOURCES"),
                        help="folder holding <owner>+<name>/repo git repositories at the commits "
                             "bench/sources.txt pins (default: $KJIT_BENCH_SOURCES; "
                             "scripts/get_bench_sources.sh DIR fetches them)")
    parser.add_argument("--cuda", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    parser.add_argument("--check", action="store_true", help="compile each kernel with raw NVRTC")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if not args.mirrors:
        print("prepare: no sources folder (set KJIT_BENCH_SOURCES, or pass --mirrors; "
              "scripts/get_bench_sources.sh DIR fetches them): no real-clients kernels written")
        return 3
    mirrors = os.path.abspath(args.mirrors)
    wheels, missing = warp_wheels(mirrors)
    missing = missing or extract(mirrors, out)
    if missing:
        print(f"prepare: {missing}: no real-clients kernels written")
        return 3
    shutil.rmtree(os.path.join(out, "kernels"), ignore_errors=True)
    entries = []
    # DeepGEMM and humming compile against CUDA's headers (libcu++ in include/cccl), for sm_90a;
    # Warp against its own only (WP_NO_CRT), for sm_90 as Warp asks for an H100.
    cuda_includes = [os.path.join(args.cuda, "include", "cccl"), os.path.join(args.cuda, "include")]
    for set_name, generate, program_name, arch, more_includes in [
            ("deepgemm", generate_deepgemm, "kernel.cu", "sm_90a", cuda_includes),
            ("humming", generate_humming, "kernel.cu", "sm_90a", cuda_includes),
            ("warp", lambda o: generate_warp(o, wheels), None, "sm_90", [])]:
        kernels, options, include_paths = generate(out)
        entries += write_set(out, set_name, kernels, options, include_paths + more_includes, program_name, arch)
    if args.check:
        check(entries, args.cuda)
    return 0


if __name__ == "__main__":
    sys.exit(main())
