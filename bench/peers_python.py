"""The peers scenario's Python child (bench/peers_scenario.cpp): hits through a build's own kjit.py.

    peers_python.py PYTHON_DIR LIBKJIT CACHE ARCH MODE REPEATS REQUESTS_JSON

MODE small | cub (requests: the measured kernel, then another of its kind): prints "process_first
<us>" (the other kernel: the first call after loading the library), "kernel_first <us>" (the
measured kernel's first hit) and "repeat <us>" (mean over REPEATS); MODE sweep: "ready <us>", from before `import kjit` to the 300th kernel's
path and name. Each call gets a loadable cubin's path and its kernel's name: kjit.compile_named
where the build has it, else kjit.compile + kjit.resolve_name. Also prints "api named|two_calls"
and "nvrtc mapped|absent".
"""
import json
import sys
import time


def main():
    python_dir, lib, cache, arch, mode, repeats, requests = sys.argv[1:8]
    with open(requests) as f:
        kernels = json.load(f)[mode]
    sys.path.insert(0, python_dir)
    started = time.perf_counter()
    import kjit  # noqa: E402 (timed: part of a fresh process getting ready)

    kjit.load_library(lib)
    named = getattr(kjit, "compile_named", None)
    calls = []
    for k in kernels:
        options = {"cache_dir": cache, "arch": arch, "nvrtc_options": tuple(k["nvrtc_options"])}
        source, keyword = k["source"], k["keyword"]
        if named:
            calls.append(lambda s=source, w=keyword, o=options: named(s, w, **o))
        else:
            calls.append(lambda s=source, w=keyword, o=options: kjit.resolve_name(kjit.compile(s, w, **o), w))
    if mode == "sweep":
        for call in calls:
            call()
        print("ready %.3f" % ((time.perf_counter() - started) * 1e6))
    else:
        t0 = time.perf_counter()
        calls[1]()
        print("process_first %.3f" % ((time.perf_counter() - t0) * 1e6))
        call = calls[0]
        t0 = time.perf_counter()
        call()
        print("kernel_first %.3f" % ((time.perf_counter() - t0) * 1e6))
        n = int(repeats)
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        print("repeat %.4f" % ((time.perf_counter() - t0) * 1e6 / n))
    with open("/proc/self/maps") as maps:
        mapped = any("/libnvrtc." in line for line in maps)
    print("api %s" % ("named" if named else "two_calls"))
    print("nvrtc %s" % ("mapped" if mapped else "absent"))


if __name__ == "__main__":
    main()
