#!/usr/bin/env python3
"""The lookup libkjit replaces: find a kernel's mangled name with pyelftools, in pure Python.

Usage: pyelftools_lookup.py CUBIN KEYWORD REPEATS

Each lookup opens the cubin, parses it with elftools.elf.elffile.ELFFile, walks every .symtab
symbol and keeps the STT_FUNC names that match r'^_Z\\d+' + re.escape(KEYWORD). One untimed
lookup warms the interpreter and the page cache first; then REPEATS lookups are each timed
(whole lookup: open + ELFFile + scan) with time.perf_counter.

Prints one line of JSON on stdout:
  {"repeats": N, "median_s": ..., "p10_s": ..., "p90_s": ..., "names": [...], "name": "...",
   "symbols": <.symtab entries>, "elftools_version": "...", "python": "..."}
"name" is the single match ("" when there is none or several). Exit status 0 on success,
2 on bad arguments, 3 when elftools cannot be imported (the reason on stderr), 1 otherwise.
"""
import json
import platform
import re
import sys
import time


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default), as kjit-bench does."""
    if not sorted_values:
        return float("nan")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def lookup(path, pattern):
    """One full lookup; returns (matching names, number of .symtab entries)."""
    from elftools.elf.elffile import ELFFile

    names = []
    count = 0
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            raise ValueError("%s has no .symtab" % path)
        for sym in symtab.iter_symbols():
            count += 1
            if sym["st_info"]["type"] == "STT_FUNC" and pattern.match(sym.name):
                names.append(sym.name)
    return names, count


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: pyelftools_lookup.py CUBIN KEYWORD REPEATS\n")
        return 2
    path, keyword = argv[1], argv[2]
    try:
        repeats = int(argv[3])
    except ValueError:
        repeats = 0
    if repeats < 1:
        sys.stderr.write("pyelftools_lookup.py: REPEATS must be a positive integer\n")
        return 2
    try:
        import elftools
    except ImportError as e:
        sys.stderr.write("cannot import elftools with %s: %s\n" % (sys.executable, e))
        return 3

    pattern = re.compile(r"^_Z\d+" + re.escape(keyword))
    names, count = lookup(path, pattern)  # warm-up, not timed
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        names, count = lookup(path, pattern)
        times.append(time.perf_counter() - t0)
    times.sort()
    unique = sorted(set(names))
    print(json.dumps({
        "repeats": repeats,
        "median_s": percentile(times, 0.5),
        "p10_s": percentile(times, 0.1),
        "p90_s": percentile(times, 0.9),
        "names": unique,
        "name": unique[0] if len(unique) == 1 else "",
        "symbols": count,
        "elftools_version": getattr(elftools, "__version__", "unknown"),
        "python": platform.python_version(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
