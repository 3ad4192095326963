"""The driver test double (tests/fake_cuda, named by $KJIT_LIBCUDA) as the Python tests open it."""
import ctypes
import os

import pytest

LIBCUDA = os.environ.get("KJIT_LIBCUDA")


def open_driver_double(marker):
    """The double, opened from the file libkjit and kjit's launch open (so the same loaded object,
    whose state the test then reads), with its context calls typed. Skips the test, saying why,
    when KJIT_LIBCUDA is unset or names a driver without ``marker`` (a symbol only the double
    has)."""
    if not LIBCUDA:
        pytest.skip("KJIT_LIBCUDA is unset (no driver test double)")
    lib = ctypes.CDLL(LIBCUDA)
    if not hasattr(lib, marker):
        pytest.skip(f"{LIBCUDA} is not the driver test double")
    for name in ("cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"):
        getattr(lib, name).restype = ctypes.c_int
    lib.cuInit.argtypes = [ctypes.c_uint]
    lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    return lib
