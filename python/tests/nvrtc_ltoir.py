"""Device-function libraries as LTO-IR for the link tests, made by NVRTC itself through ctypes.

libkjit cannot make a link input (it publishes cubins only), so the tests of ``link_inputs``
(python/tests/test_kjit.py) and of ``kjit compile --link`` (tests/cli_test.sh) compile their
library with NVRTC here: ``-dlto`` with relocatable device code, as a library package ships
it. As a command: ``python3 nvrtc_ltoir.py OUT.ltoir SOURCE.cu [ARCH]`` (exit 1 with NVRTC's
log when the source does not compile).

NVRTC: ``$KJIT_LIBNVRTC`` when set (what libkjit itself would load), else ``libnvrtc.so.13``
through the loader's search, else the toolkit's (``$KJIT_TEST_CUDA_INCLUDE/../lib64``, then
``/usr/local/cuda/lib64``).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import List, Optional

_NVRTC: Optional[ctypes.CDLL] = None


def _candidates() -> List[str]:
    given = os.environ.get("KJIT_LIBNVRTC")
    if given:
        return [given]
    out = ["libnvrtc.so.13"]
    include = os.environ.get("KJIT_TEST_CUDA_INCLUDE")
    if include:
        out.append(os.path.join(include, os.pardir, "lib64", "libnvrtc.so.13"))
    out.append("/usr/local/cuda/lib64/libnvrtc.so.13")
    return out


def nvrtc() -> ctypes.CDLL:
    """NVRTC, loaded once; RuntimeError naming every file tried when none loads."""
    global _NVRTC
    if _NVRTC is not None:
        return _NVRTC
    tried = []
    for candidate in _candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as e:
            tried.append(f"{candidate}: {e}")
            continue
        lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        for name in ("nvrtcGetProgramLogSize", "nvrtcGetLTOIRSize"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        for name in ("nvrtcGetProgramLog", "nvrtcGetLTOIR"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        _NVRTC = lib
        return lib
    raise RuntimeError("no NVRTC to make the link tests' LTO-IR with; tried:\n  " + "\n  ".join(tried))


def _checked(result: int, call: str) -> None:
    if result != 0:
        raise RuntimeError(f"{call} failed with nvrtcResult {result}")


def ltoir(source: str, arch: str = "sm_90", name: str = "library.cu") -> bytes:
    """``source`` compiled by NVRTC to LTO-IR (``-dlto -rdc=true``) for ``arch``; RuntimeError
    with NVRTC's log when it does not compile."""
    lib = nvrtc()
    prog = ctypes.c_void_p()
    _checked(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
             "nvrtcCreateProgram")
    try:
        options = [f"-arch={arch}".encode(), b"-dlto", b"-rdc=true"]
        result = lib.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
        if result != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC did not compile {name}:\n{log.value.decode(errors='replace')}")
        size = ctypes.c_size_t()
        _checked(lib.nvrtcGetLTOIRSize(prog, ctypes.byref(size)), "nvrtcGetLTOIRSize")
        out = ctypes.create_string_buffer(size.value)
        _checked(lib.nvrtcGetLTOIR(prog, out), "nvrtcGetLTOIR")
        return out.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def write_ltoir(path: "os.PathLike[str] | str", source: str, arch: str = "sm_90") -> str:
    """Writes ``source``'s LTO-IR to ``path`` (replacing the file: a new inode, as an editor's
    save or a package upgrade makes it) and returns the path as str."""
    path = os.fspath(path)
    data = ltoir(source, arch)
    temporary = path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)
    return path


def main(argv: List[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 64
    with open(argv[2]) as f:
        source = f.read()
    try:
        write_ltoir(argv[1], source, argv[3] if len(argv) == 4 else "sm_90")
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
