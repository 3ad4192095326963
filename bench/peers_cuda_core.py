#!/usr/bin/env python3
"""kjit.cuda_core against cuda.core's own ways to cache a compiled templated kernel: lines of code
and hit times, for the README's comparison table.

    python3 bench/peers_cuda_core.py [--runs 7] [--repeats 2000] [--kernels 24] [--arch sm_90] [--json OUT]

Run it with a Python that has cuda-core (1.0 or newer) and cuda-bindings, kjit (python/ of this
tree is put first on sys.path) and libkjit (KJIT_LIBRARY, or kjit's own search). NVRTC only, no
GPU: nothing is loaded onto a device. Each way below ends with a cuda.core ObjectCode holding
the cubin of scale<3> (a small templated kernel) and knowing its mangled name:

- kjit:      kjit.cuda_core.compile (the 2 lines of docs/python.md, section "cuda.core");
- by hand:   Program.compile with name expressions, kept in cuda.core's FileStreamProgramCache
             under make_program_cache_key, with the symbol_mapping stored beside the cubin (that
             cache does not keep it): what a careful cuda.core user writes;
- cuda.core: Program.compile(cache=FileStreamProgramCache): refuses name expressions, so here the
             source instantiates scale<3> explicitly and the caller writes the mangled name.

The lines column counts the non-blank lines of each way's code as written below (imports
included, the cuda.core imports the program has anyway left out), without the line that gets the
kernel (``get_kernel``) that every way needs. CuPy is counted, not run: it needs a GPU (RawModule
compiles at get_function, for the device's arch).

Timing: every way's cache is filled first. "repeat" is the median time of one more call in a warm
process (median over --repeats calls, then over the processes); "fresh" is the first call in a
fresh process, after its imports (median over --runs processes, the ways interleaved); "next
kernels" is what each of --kernels more instantiations (scale<4>, scale<5>, ...) costs when
first asked in that process, right after (their mean, then the median over the processes). Each
process also says whether NVRTC was mapped into it (/proc/self/maps) after its calls. All caches
live under one temporary XDG_CACHE_HOME. Prints a table and kjit's speed-ups over cuda.core's
cache; --json writes the figures.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = r"""
template <int N> __global__ void scale(float *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= N;
}
"""
# For Program.compile(cache=), which takes no name expressions: the instantiation in the source.
INSTANTIATION = "template __global__ void scale<{}>(float *, int);\n"
MANGLED = "_Z5scaleILi3EEvPfi"

# Each way: (setup code, the call of scale<N>). Lines are counted on both; the call is what is
# timed, for N = 3 (the first call and the repeats) and for --kernels more N (first calls).
WAYS = {
    "kjit": ("""
import kjit.cuda_core
""", 'kjit.cuda_core.compile(SOURCE, options, (f"scale<{N}>",))'),
    "by hand": ("""
import json
from cuda.core.utils import FileStreamProgramCache, make_program_cache_key
cache = FileStreamProgramCache()
def compile_cached(code, options, name_expressions):
    key = make_program_cache_key(code=code, code_type="c++", options=options, target_type="cubin",
                                 name_expressions=name_expressions)
    cubin, names = cache.get(key), cache.get(key + b"/names")  # both, or compile again
    if cubin is None or names is None:
        obj = Program(code, "c++", options).compile("cubin", name_expressions=name_expressions)
        cache[key] = obj
        cache[key + b"/names"] = json.dumps({k: v.decode() for k, v in obj.symbol_mapping.items()}).encode()
        return obj
    mapping = {k: v.encode() for k, v in json.loads(names).items()}
    return ObjectCode.from_cubin(cubin, name=options.name, symbol_mapping=mapping)
""", 'compile_cached(SOURCE, options, (f"scale<{N}>",))'),
    "cuda.core cache": ("""
from cuda.core.utils import FileStreamProgramCache
cache = FileStreamProgramCache()
""", 'Program(SOURCE + INSTANTIATION.format(N), "c++", options).compile("cubin", cache=cache)'),
}
CUPY = """
import cupy
mod = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=("scale<3>",))
"""
# Lines every way has beyond the ones counted: getting the kernel.
GET_KERNEL = {"kjit": 'get_kernel("scale<3>")', "by hand": 'get_kernel("scale<3>")',
              "cuda.core cache": f'get_kernel("{MANGLED}")', "CuPy": 'get_function("scale<3>")'}


def count_lines(*parts):
    return sum(1 for part in parts for line in part.splitlines() if line.strip())


def child(way, arch, repeats, kernels):
    """One fresh process: imports, the first call (scale<3>), the first calls of `kernels` more
    instantiations (each new to the process: what an autotuned program's start-up asks), then
    repeats of the first. Prints one JSON line."""
    from cuda.core import ObjectCode, Program, ProgramOptions  # noqa: F401 (the snippets use them)
    setup, call = WAYS[way]
    ns = {"SOURCE": SOURCE, "INSTANTIATION": INSTANTIATION, "ObjectCode": ObjectCode,
          "Program": Program, "options": ProgramOptions(arch=arch, name="bench")}
    exec(setup, ns)  # noqa: S102 (the bench's own snippets)
    fn = eval("lambda N: " + call, ns)  # noqa: S307
    started = time.perf_counter_ns()
    mod = fn(3)
    first_ns = time.perf_counter_ns() - started
    expected = MANGLED if way == "cuda.core cache" else mod.symbol_mapping["scale<3>"].decode()
    assert expected == MANGLED, expected
    started = time.perf_counter_ns()
    for n in range(4, 4 + kernels):
        fn(n)
    next_ns = time.perf_counter_ns() - started
    times = []
    for _ in range(repeats):
        started = time.perf_counter_ns()
        fn(3)
        times.append(time.perf_counter_ns() - started)
    maps = pathlib.Path("/proc/self/maps").read_text()
    print(json.dumps({"first_us": first_ns / 1e3, "next_kernel_us": next_ns / 1e3 / kernels if kernels else None,
                      "repeat_us": statistics.median(times) / 1e3 if times else None,
                      "nvrtc_mapped": "libnvrtc.so" in maps, "bytes": len(bytes(mod.code))}))


def run_child(way, arch, repeats, env, kernels):
    out = subprocess.run([sys.executable, __file__, "--child", way, "--arch", arch, "--repeats", str(repeats),
                          "--kernels", str(kernels)],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{way}: the child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per way (default 7)")
    parser.add_argument("--repeats", type=int, default=2000, help="calls timed in each warm process (default 2000)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--kernels", type=int, default=24,
                        help="instantiations each fresh process asks for after its first call (default 24)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "python"))
    if args.child:
        return child(args.child, args.arch, args.repeats, args.kernels)

    import cuda.core
    import kjit
    with tempfile.TemporaryDirectory(prefix="kjit-peers-cuda-core-") as cache_home:
        env = dict(os.environ, XDG_CACHE_HOME=cache_home, PYTHONDONTWRITEBYTECODE="1")
        env.pop("KJIT_CACHE_DIR", None)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pathlib.Path(kjit.__file__).parent.parent),
                                                          env.get("PYTHONPATH")]))
        for way in WAYS:  # fill every cache: every measured call is a hit
            run_child(way, args.arch, 0, env, args.kernels)
        samples = {way: [] for way in WAYS}
        for _ in range(args.runs):
            for way in WAYS:
                samples[way].append(run_child(way, args.arch, args.repeats, env, args.kernels))
    rows = []
    for way, (setup, call) in WAYS.items():
        s = samples[way]
        rows.append({"way": way, "lines": count_lines(setup, call),
                     "fresh_first_call_us": statistics.median(x["first_us"] for x in s),
                     "fresh_next_kernel_us": (statistics.median(x["next_kernel_us"] for x in s)
                                              if args.kernels else None),
                     "in_process_repeat_us": statistics.median(x["repeat_us"] for x in s),
                     "nvrtc_mapped": any(x["nvrtc_mapped"] for x in s), "get_kernel": GET_KERNEL[way],
                     "fresh_first_call_us_samples": [round(x["first_us"], 1) for x in s]})
    rows.append({"way": "CuPy (counted, not run)", "lines": count_lines(CUPY), "get_kernel": GET_KERNEL["CuPy"]})
    print(f"cuda-core {cuda.core.__version__}, kjit {kjit.version_string()}, python {sys.version.split()[0]}, "
          f"{args.runs} fresh processes per way, {args.kernels} more kernels and {args.repeats} repeats each")
    print(f"{'way':<26}{'lines':>6}{'fresh first call':>18}{'next kernels, each':>20}{'in-process repeat':>19}"
          "  NVRTC mapped")
    for r in rows:
        if "fresh_first_call_us" in r:
            nxt = f"{r['fresh_next_kernel_us']:>17.1f} us" if r["fresh_next_kernel_us"] is not None else f"{'-':>20}"
            print(f"{r['way']:<26}{r['lines']:>6}{r['fresh_first_call_us']:>15.0f} us{nxt}"
                  f"{r['in_process_repeat_us']:>16.1f} us  {'yes' if r['nvrtc_mapped'] else 'no'}")
        else:
            print(f"{r['way']:<26}{r['lines']:>6}{'-':>18}{'-':>20}{'-':>19}  -")
    kjit_row, core_row = rows[0], rows[2]  # WAYS' order: kjit, by hand, cuda.core cache
    ratios = {"fresh_first_call": core_row["fresh_first_call_us"] / kjit_row["fresh_first_call_us"],
              "in_process_repeat": core_row["in_process_repeat_us"] / kjit_row["in_process_repeat_us"]}
    if args.kernels:
        ratios["fresh_next_kernel"] = core_row["fresh_next_kernel_us"] / kjit_row["fresh_next_kernel_us"]
    print(f"kjit against cuda.core's cache: {ratios['fresh_first_call']:.1f}x as fast in a fresh process, "
          + (f"{ratios['fresh_next_kernel']:.1f}x on each next kernel there, " if args.kernels else "")
          + f"{ratios['in_process_repeat']:.1f}x on an in-process repeat")
    if args.json:
        figures = {"cuda_core": cuda.core.__version__, "kjit": kjit.version_string(), "runs": args.runs,
                   "repeats": args.repeats, "rows": rows, "kjit_speedup_over_cuda_core_cache": ratios}
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
