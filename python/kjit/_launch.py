"""Kernel launches: the CUDA driver through ctypes, the marshalling of kernel arguments, streams.

Each kernel argument becomes one C value whose address goes into cuLaunchKernel's
``kernelParams``: a ctypes instance as it is, or an array's device pointer (a PyTorch tensor's
``data_ptr()``, a ``__cuda_array_interface__``'s data, a CuPy memory pointer's ``.ptr``). A bare
Python number has no C type and is refused.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ._abi import Status
from ._errors import DriverError

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

    Dims = Union[int, Sequence[int]]  # grid and block: an int or 1 to 3 of them

# --------------------------------------------------------------------------------------------
# The driver: the one libkjit loads ($KJIT_LIBCUDA, else libcuda.so.1)

class Driver:
    """libcuda through ctypes, with the few entry points a launch needs declared."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.launch_kernel = lib.cuLaunchKernel
        self.launch_kernel.restype = ctypes.c_int
        self.launch_kernel.argtypes = ([ctypes.c_void_p] + [ctypes.c_uint] * 7 +
                                       [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
        self.get_error_name = lib.cuGetErrorName
        self.get_error_name.restype = ctypes.c_int
        self.get_error_name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def error(self, result: int, what: str) -> DriverError:
        """The DriverError of a failed driver call, with the driver's name of ``result``."""
        text = ctypes.c_char_p()
        known = self.get_error_name(result, ctypes.byref(text)) == 0 and text.value
        name = text.value.decode() if known and text.value else f"CUresult {result}"
        return DriverError(Status.ERROR_DRIVER, "driver error", f"{what} failed: {name}", "Kernel.launch")


_driver: Optional[Driver] = None
_driver_lock = threading.Lock()


def driver() -> Driver:
    """The CUDA driver library (``$KJIT_LIBCUDA``, else ``libcuda.so.1``: the one libkjit
    loads), loaded once."""
    global _driver
    with _driver_lock:
        if _driver is None:
            name = os.environ.get("KJIT_LIBCUDA") or "libcuda.so.1"
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                raise DriverError(Status.ERROR_DRIVER_UNAVAILABLE, "driver unavailable",
                                  f"cannot load the CUDA driver {name!r} to launch: {e}", "Kernel.launch") from None
            _driver = Driver(lib)
        return _driver


# --------------------------------------------------------------------------------------------
# Dimensions and streams

def dims(value: Dims, what: str) -> Tuple[int, int, int]:
    """An int or 1 to 3 ints -> three positive ints (the missing ones 1)."""
    given = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(given) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d < 2**32
                                           for d in given):
        raise ValueError(f"{what} must be a positive int or a tuple of 1 to 3 of them, not {value!r}")
    padded = given + (1,) * (3 - len(given))
    return (padded[0], padded[1], padded[2])


def stream_handle(stream: object) -> int:
    """None (the default stream), an int CUstream, or an object that has one -> the CUstream."""
    if stream is None:
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:  # cuda.core's protocol: (version, handle)
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):  # PyTorch, CuPy, others
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise TypeError(f"stream: {type(stream).__name__} is not a CUDA stream (an int CUstream, "
                    "torch.cuda.current_stream(), a CuPy or cuda.core stream)")


# --------------------------------------------------------------------------------------------
# The arguments of one launch

class Arguments:
    """The kernelParams of one launch, made from the caller's arguments; alive as long as it is."""

    def __init__(self, args: Iterable[Any], stream: int) -> None:
        self.stream = stream
        self.values: List[Any] = [_marshal(value, index) for index, value in enumerate(args)]
        count = len(self.values)
        self.params = (ctypes.c_void_p * count)(*[ctypes.addressof(v) for v in self.values]) if count else None

    def __enter__(self) -> Arguments:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _marshal(value: Any, index: int) -> Any:
    """One kernel argument -> a ctypes value whose address goes into kernelParams."""
    if isinstance(value, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
        return value
    data_ptr = getattr(value, "data_ptr", None)
    if callable(data_ptr):  # a PyTorch tensor
        return ctypes.c_void_p(data_ptr())
    interface = getattr(value, "__cuda_array_interface__", None)  # CuPy, Numba, cuda.core
    if interface is not None:
        return ctypes.c_void_p(interface["data"][0])
    pointer = getattr(value, "ptr", None)
    if isinstance(pointer, int):  # a CuPy MemoryPointer
        return ctypes.c_void_p(pointer)
    raise TypeError(f"kernel argument {index}: {type(value).__name__} {value!r} has no C type: pass a ctypes value "
                    "(ctypes.c_int(n), ctypes.c_float(x), ctypes.c_void_p(pointer)) or a device array")
