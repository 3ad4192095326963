#!/usr/bin/env python3
"""A hit from Python against the same hit from C, in one run: the repeat, the first call of a
fresh process, and what ``import kjit`` costs.

    python3 bench/python_hits.py --library build/src/libkjit.so.0 [--runs 7] [--repeats 20000]
                                 [--arch sm_90] [--before DIR] [--json OUT]

The C side is a tiny C program built here with ``cc`` against include/kjit/kjit.h, linked with
the library given (as a kernel library links it); the Python side is python/kjit/ of this tree
(or ``--package DIR``), copied into a temporary folder and byte-compiled, as an installed wheel
is. ``--before DIR`` adds another kjit package (e.g. python/ of an older checkout, holding kjit/)
as a third way. NVRTC only, no GPU. Both ask for the same small kernel in the same cache folder,
filled first (one compile, untimed). Each of ``--runs`` rounds starts one fresh process per way,
in turn:

- C: ``first`` (its first kjit_compile_named: the library's one-time set-up and the entry's
  first look-up) and ``repeat`` (the mean of ``--repeats`` more);
- Python: ``import`` (``import kjit``), ``load`` (kjit.load_library: dlopen, which a C program
  pays before main), ``first`` (its first kjit.compile_named), ``repeat`` (the mean of
  ``--repeats`` more) and, where the package has it, ``prepared`` (kjit.prepare's
  compile_named).

Prints the medians over the rounds and Python's excess over C; --json writes every sample.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = """extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""

C_CHILD = r"""#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include "kjit/kjit.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    static char source[1 << 16];
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    size_t n = fread(source, 1, sizeof source - 1, f);
    fclose(f);
    source[n] = '\0';
    kjit_compile_options options = KJIT_COMPILE_OPTIONS_INIT;
    options.cache_dir = argv[2];
    options.arch = argv[3];
    long repeats = atol(argv[4]);
    char path[4096], name[512];
    double t0 = now_us();
    kjit_status s = kjit_compile_named(source, "axpy", &options, path, sizeof path, NULL, name, sizeof name, NULL);
    double first = now_us() - t0;
    if (s != KJIT_OK) {
        fprintf(stderr, "%s\n", kjit_last_error());
        return 1;
    }
    t0 = now_us();
    for (long i = 0; i < repeats; ++i)
        kjit_compile_named(source, "axpy", &options, path, sizeof path, NULL, name, sizeof name, NULL);
    printf("{\"first\": %.3f, \"repeat\": %.4f}\n", first, (now_us() - t0) / (double)repeats);
    return 0;
}
"""

PY_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import kjit
t1 = time.perf_counter()
kjit.load_library(sys.argv[2])
t2 = time.perf_counter()
source = open(sys.argv[3]).read()
options = {"cache_dir": sys.argv[4], "arch": sys.argv[5]}
kjit.compile_named(source, "axpy", **options)
t3 = time.perf_counter()
repeats = int(sys.argv[6])
out = {"import": (t1 - t0) * 1e6, "load": (t2 - t1) * 1e6, "first": (t3 - t2) * 1e6}
t0 = time.perf_counter()
for _ in range(repeats):
    kjit.compile_named(source, "axpy", **options)
out["repeat"] = (time.perf_counter() - t0) * 1e6 / repeats
if hasattr(kjit, "prepare"):
    call = kjit.prepare(source, "axpy", **options).compile_named
    call()
    t0 = time.perf_counter()
    for _ in range(repeats):
        call()
    out["prepared"] = (time.perf_counter() - t0) * 1e6 / repeats
print(json.dumps(out))
"""


def run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def installed_copy(package_dir, into):
    """kjit/ of package_dir copied into a new folder and byte-compiled, as a wheel installs it."""
    into.mkdir()
    shutil.copytree(pathlib.Path(package_dir) / "kjit", into / "kjit")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into)], check=True, capture_output=True)
    return into


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", default=os.environ.get("KJIT_LIBRARY"),
                        help="libkjit.so.0 (default $KJIT_LIBRARY)")
    parser.add_argument("--package", default=str(ROOT / "python"), help="the folder holding kjit/ (default python/)")
    parser.add_argument("--before", help="another folder holding a kjit/ package, measured as a third way")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--runs", type=int, default=7, help="rounds of fresh processes (default 7)")
    parser.add_argument("--repeats", type=int, default=20000, help="repeats timed in each process (default 20000)")
    parser.add_argument("--json", help="write the samples and medians here")
    args = parser.parse_args()
    if not args.library:
        parser.error("--library (or $KJIT_LIBRARY) is needed")
    library = pathlib.Path(args.library).resolve()
    with tempfile.TemporaryDirectory(prefix="kjit-python-hits-") as work:
        work = pathlib.Path(work)
        (work / "k.cu").write_text(SOURCE)
        (work / "child.c").write_text(C_CHILD)
        # Linked by path, with its folder as the rpath: the library given, not another one.
        subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Werror", f"-I{ROOT / 'include'}", str(work / "child.c"),
                        "-o", str(work / "c-child"), str(library), f"-Wl,-rpath,{library.parent}"], check=True)
        (work / "py-child.py").write_text(PY_CHILD)
        ways = {"C": None, "Python": installed_copy(args.package, work / "now")}
        if args.before:
            ways["Python before"] = installed_copy(args.before, work / "before")
        cache = work / "cache"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "KJIT_CACHE_DIR")}

        def child(way, repeats):
            if ways[way] is None:
                return run([str(work / "c-child"), str(work / "k.cu"), str(cache), args.arch, str(repeats)], env)
            return run([sys.executable, str(work / "py-child.py"), str(ways[way]), str(library), str(work / "k.cu"),
                        str(cache), args.arch, str(repeats)], env)

        child("C", 1)  # fills the cache
        samples = {way: [] for way in ways}
        for _ in range(args.runs):
            for way in ways:
                samples[way].append(child(way, args.repeats))
    medians = {way: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for way, runs in samples.items()}
    c = medians["C"]
    print(f"python {sys.version.split()[0]}, {args.runs} rounds of fresh processes, {args.repeats} repeats each, "
          f"library {library}")
    print(f"{'way':<16}{'import':>10}{'load':>10}{'first':>10}{'repeat':>10}{'prepared':>10}   repeat - C")
    for way, m in medians.items():
        cells = [f"{m[k]:>7.0f} us" if k in m else f"{'-':>10}" for k in ("import", "load", "first")]
        cells += [f"{m[k]:>7.2f} us" if k in m else f"{'-':>10}" for k in ("repeat", "prepared")]
        excess = "" if way == "C" else f"   +{m['repeat'] - c['repeat']:.2f} us" + (
            f" (prepared +{m['prepared'] - c['repeat']:.2f} us)" if "prepared" in m else "")
        print(f"{way:<16}" + "".join(cells) + excess)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"samples": samples, "medians": medians}, indent=1) + "\n")


if __name__ == "__main__":
    main()
