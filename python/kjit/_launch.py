"""Kernel launches: the CUDA driver through ctypes, the marshalling of kernel arguments, streams.

Each kernel argument becomes one C value whose address goes into cuLaunchKernel's
``kernelParams`` (the driver copies as many bytes as the kernel's parameter has):

- a ctypes instance, as it is;
- a NumPy scalar, as its own bytes, by dtype (``numpy.float32`` is 4 bytes of float,
  ``numpy.float16`` 2 bytes; nothing widened);
- a PyTorch tensor (``data_ptr()``), an object with ``__cuda_array_interface__`` (CuPy, Numba),
  one with ``__dlpack__`` (DLPack), or a CuPy memory pointer (``.ptr``): its device pointer.

A bare Python number has no C type (``5`` could be an int, a long or a size_t) and is refused,
as is anything else, with a TypeError naming the argument's index and type.
"""

from __future__ import annotations

import ctypes
import operator
import os
import sys
import threading

from ._enums import Status
from ._errors import DriverError

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, Union

    Dims = Union[int, Sequence[int]]  # grid and block: an int or 1 to 3 of them
    ReadOnly = Union[bool, Iterable[int]]  # the arguments that may be read-only arrays: all, none, or these

# ctypes instances taken as they are (a function pointer is not: it is the host's).
_CTYPES = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._Pointer)


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
        self.stream_synchronize = getattr(lib, "cuStreamSynchronize", None)
        if self.stream_synchronize is not None:
            self.stream_synchronize.restype = ctypes.c_int
            self.stream_synchronize.argtypes = [ctypes.c_void_p]

    def error(self, result: int, what: str) -> DriverError:
        """The DriverError of a failed driver call, with the driver's name of ``result``."""
        text = ctypes.c_char_p()
        known = self.get_error_name(result, ctypes.byref(text)) == 0 and text.value
        name = text.value.decode() if known and text.value else f"CUresult {result}"
        return DriverError(Status.ERROR_DRIVER, "driver error", f"{what} failed: {name}", "Kernel.launch")

    def synchronize(self, stream: int, what: str) -> None:
        """cuStreamSynchronize(stream); DriverError when it fails."""
        if self.stream_synchronize is None:
            raise DriverError(Status.ERROR_DRIVER_UNAVAILABLE, "driver unavailable",
                              f"{what}: the CUDA driver has no cuStreamSynchronize", "Kernel.launch")
        result = self.stream_synchronize(ctypes.c_void_p(stream))
        if result != 0:
            raise self.error(result, what)


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


def shared_bytes(value: object) -> int:
    """Dynamic shared memory in bytes: an int (or anything with __index__, as NumPy's) below 2**32."""
    try:
        size = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        size = -1
    if isinstance(value, bool) or not 0 <= size < 2**32:
        raise ValueError(f"shared_mem must be a number of bytes (int), not {value!r}")
    return size


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


def _same_stream(a: int, b: int) -> bool:
    """Whether two stream handles are the same stream: 0 (the NULL stream, which is the legacy
    default stream for cuLaunchKernel) and 1 (CU_STREAM_LEGACY) are one."""
    return (a or 1) == (b or 1)


# --------------------------------------------------------------------------------------------
# NumPy scalars: by dtype (kind, size), never widened. float16 has no ctypes type: its 16 bits.

_NUMPY: Dict[Tuple[str, int], Any] = {
    ("b", 1): ctypes.c_bool,
    ("i", 1): ctypes.c_int8, ("i", 2): ctypes.c_int16, ("i", 4): ctypes.c_int32, ("i", 8): ctypes.c_int64,
    ("u", 1): ctypes.c_uint8, ("u", 2): ctypes.c_uint16, ("u", 4): ctypes.c_uint32, ("u", 8): ctypes.c_uint64,
    ("f", 2): ctypes.c_uint16, ("f", 4): ctypes.c_float, ("f", 8): ctypes.c_double,
    ("c", 8): ctypes.c_float * 2, ("c", 16): ctypes.c_double * 2,
}


def _numpy_scalar(value: Any, index: int) -> Any:
    dtype = value.dtype
    ctype = _NUMPY.get((dtype.kind, dtype.itemsize))
    if ctype is None:
        raise TypeError(f"kernel argument {index}: numpy.{type(value).__name__} (dtype {dtype}) has no C type a "
                        "kernel parameter takes: convert it to a fixed-size integer, bool, float16, float32, "
                        "float64, complex64 or complex128")
    return ctype.from_buffer_copy(value.tobytes())


# --------------------------------------------------------------------------------------------
# DLPack (the Python specification of the array API's __dlpack__ / __dlpack_device__)

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):  # capsule "dltensor"
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):  # capsule "dltensor_versioned" (DLPack 1.0)
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_DL_READ_ONLY, _DL_IS_COPIED = 1 << 0, 1 << 1  # DLPACK_FLAG_BITMASK_*
_DL_CUDA_HOST = 3
# Device types whose memory a CUDA kernel can address: kDLCUDA, kDLCUDAHost (pinned), kDLCUDAManaged.
_DL_CUDA_DEVICES = {2: "kDLCUDA", _DL_CUDA_HOST: "kDLCUDAHost", 13: "kDLCUDAManaged"}
_DL_OTHER_DEVICES = {1: "kDLCPU", 4: "kDLOpenCL", 7: "kDLVulkan", 8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM",
                     11: "kDLROCMHost", 12: "kDLExtDev", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon",
                     17: "kDLMAIA"}

# The CPython capsule API, with prototypes of our own (never ctypes.pythonapi's shared ones,
# whose argtypes other code may set). They hold the GIL and raise what CPython sets.
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
# A capsule keeps the pointer to its name: these live as long as the module.
_USED = {b"dltensor": ctypes.c_char_p(b"used_dltensor"),
         b"dltensor_versioned": ctypes.c_char_p(b"used_dltensor_versioned")}
# A DLPack deleter, called with the GIL held (producers written in Python need it).
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


def _check_device(device_type: int, index: int, value: object) -> None:
    if device_type in _DL_CUDA_DEVICES:
        return
    name = _DL_OTHER_DEVICES.get(device_type, "unknown")
    where = "host memory" if device_type == 1 else f"memory of DLPack device {name}"
    raise TypeError(f"kernel argument {index}: {type(value).__name__} is in {where} (DLPack device type "
                    f"{device_type}), not on a CUDA device: copy it to the GPU first")


# --------------------------------------------------------------------------------------------
# The arguments of one launch

class Arguments:
    """The kernelParams of one launch, made from the caller's arguments. DLPack tensors are
    consumed for the call (their capsules renamed ``used_dltensor``, as the protocol says) and
    handed back by :meth:`release`, which calls their deleters: use it as a context manager
    around the launch."""

    def __init__(self, args: Iterable[Any], stream: int, readonly: ReadOnly = (),
                 get_driver: Callable[[], Driver] = driver) -> None:
        self.stream = stream
        self._get_driver = get_driver
        self._readonly = _readonly_set(readonly)
        self._synchronized: FrozenSet[int] = frozenset()  # CAI streams waited for
        self._held: List[Tuple[int, int, object]] = []  # (deleter, managed tensor address, capsule)
        self.values: List[Any] = []
        try:
            for index, value in enumerate(args):
                self.values.append(self._marshal(value, index))
        except BaseException:
            self.release()
            raise
        count = len(self.values)
        self.params = (ctypes.c_void_p * count)(*[ctypes.addressof(v) for v in self.values]) if count else None

    def __enter__(self) -> Arguments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Calls the deleters of the DLPack tensors consumed, each once; raises the first
        exception one raised, after calling them all."""
        if not self._held:
            return
        held, self._held = self._held, []
        first: Optional[BaseException] = None
        for deleter, address, _capsule in held:
            try:
                _DELETER(deleter)(address)
            except BaseException as e:  # noqa: BLE001 (raised below)
                first = first or e
        if first is not None:
            raise first

    def _readonly_ok(self, index: int) -> bool:
        return self._readonly is True or (isinstance(self._readonly, frozenset) and index in self._readonly)

    def _marshal(self, value: Any, index: int) -> Any:
        """One kernel argument -> a ctypes value whose address goes into kernelParams."""
        if isinstance(value, _CTYPES):
            return value
        numpy = sys.modules.get("numpy")  # a NumPy scalar exists only where NumPy is imported
        if numpy is not None and isinstance(value, numpy.generic):  # before float: numpy.float64 is one
            return _numpy_scalar(value, index)
        if isinstance(value, (bool, int, float, complex)):
            raise TypeError(f"kernel argument {index}: {type(value).__name__} {value!r} has no C type: pass a ctypes "
                            "value (ctypes.c_int(n), ctypes.c_float(x), ctypes.c_void_p(pointer)), a NumPy scalar "
                            "(numpy.int32(n), numpy.float32(x)) or a device array")
        data_ptr = getattr(value, "data_ptr", None)
        if callable(data_ptr):  # a PyTorch tensor
            device = getattr(value, "__dlpack_device__", None)
            if device is not None:
                _check_device(int(device()[0]), index, value)
            return ctypes.c_void_p(data_ptr())
        interface = getattr(value, "__cuda_array_interface__", None)  # CuPy, Numba, ...
        if interface is not None:
            return ctypes.c_void_p(self._array_interface(interface, index, value))
        if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            return ctypes.c_void_p(self._dlpack(value, index))
        pointer = getattr(value, "ptr", None)
        if isinstance(pointer, int):  # a CuPy MemoryPointer
            return ctypes.c_void_p(pointer)
        raise TypeError(f"kernel argument {index}: {type(value).__module__}.{type(value).__qualname__} is not a "
                        "kernel argument: pass a ctypes value, a NumPy scalar, or a device array "
                        "(__cuda_array_interface__, __dlpack__, a PyTorch tensor)")

    def _array_interface(self, interface: Any, index: int, value: object) -> int:
        """The data pointer of a __cuda_array_interface__ (versions 0 to 3), after its checks:
        a read-only array only where the caller allows it, no mask, and its stream (version 3)
        synchronized unless the launch is on it."""
        what = _Naming(index, value, "'s __cuda_array_interface__")  # formatted on errors only
        try:
            version, data = interface["version"], interface["data"]
            pointer, readonly = data
        except (KeyError, TypeError, ValueError):
            raise TypeError(f"{what} lacks 'version' or a 'data' pair (pointer, read-only)") from None
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= 3:
            raise TypeError(f"{what} has version {version!r}; this kjit reads versions 0 to 3")
        if isinstance(pointer, bool) or not isinstance(pointer, int):
            raise TypeError(f"{what} has a data pointer of type {type(pointer).__name__}, not int")
        if interface.get("mask") is not None:
            raise TypeError(f"{what} has a mask: a masked array's data alone is not the array")
        if readonly and not self._readonly_ok(index):
            raise ValueError(f"{what} says the array is read-only: pass readonly={{{index}}} (or readonly=True) "
                             "if the kernel only reads it")
        stream = interface.get("stream") if version >= 3 else None
        if stream is not None:
            self._synchronize(stream, index, what)
        return pointer

    def _synchronize(self, stream: object, index: int, what: _Naming) -> None:
        if isinstance(stream, bool) or not isinstance(stream, int):
            raise TypeError(f"{what} has a stream of type {type(stream).__name__}, not int")
        if stream == 0:
            raise ValueError(f"{what} has stream 0, which the interface disallows (1 is the legacy default stream)")
        if _same_stream(stream, self.stream) or stream in self._synchronized:
            return
        self._get_driver().synchronize(stream, f"cuStreamSynchronize of argument {index}'s stream")
        self._synchronized = self._synchronized | {stream}

    def _dlpack(self, value: Any, index: int) -> int:
        """The device pointer of a DLPack producer (data + byte_offset), its tensor consumed
        for the call. A producer on another device than CUDA's is refused before it exports."""
        device_type = int(value.__dlpack_device__()[0])
        _check_device(device_type, index, value)
        # The stream the kernel runs on, for the producer to order its work before (the
        # protocol's numbering: 1 is the legacy default stream, and 0 is not allowed).
        stream = None if device_type == _DL_CUDA_HOST else (self.stream or 1)
        try:
            # copy=False: a copy would take the kernel's writes away from the caller's array.
            capsule = value.__dlpack__(stream=stream, max_version=(1, 0), copy=False)
        except TypeError:  # a producer of the protocol before DLPack 1.0
            capsule = value.__dlpack__(stream=stream)
        return self._consume(capsule, index, value)

    def _consume(self, capsule: object, index: int, value: object) -> int:
        what = _Naming(index, value, ".__dlpack__()")
        if type(capsule).__name__ != "PyCapsule":
            raise TypeError(f"{what} returned {type(capsule).__name__}, not a PyCapsule")
        name = _capsule_name(capsule)
        if name not in _USED:
            raise TypeError(f"{what} returned a capsule named {name!r}, not an unused DLPack tensor")
        address = _capsule_pointer(capsule, name)
        flags = 0
        managed: Any
        if name == b"dltensor_versioned":
            managed = _DLManagedTensorVersioned.from_address(address)
            if managed.version.major != 1:  # its layout past the version is unknown: not consumed
                raise TypeError(f"{what} gave DLPack {managed.version.major}.{managed.version.minor}; this kjit "
                                "reads 1.x")
            flags = managed.flags
        else:
            managed = _DLManagedTensor.from_address(address)
        tensor = managed.dl_tensor
        _check_device(tensor.device.device_type, index, value)
        if flags & _DL_READ_ONLY and not self._readonly_ok(index):
            raise ValueError(f"{what} says the tensor is read-only: pass readonly={{{index}}} (or readonly=True) if "
                             "the kernel only reads it")
        if flags & _DL_IS_COPIED:
            raise ValueError(f"{what} gave a copy, which the kernel's writes would not reach")
        pointer = (tensor.data or 0) + tensor.byte_offset
        deleter = managed.deleter
        # Ours from here: renamed, its capsule no longer calls the deleter; release() does.
        _capsule_set_name(capsule, _USED[name])
        if deleter:
            self._held.append((deleter, address, capsule))
        return int(pointer)


class _Naming:
    """"kernel argument N: TYPE<suffix>", formatted only when an error message needs it."""

    __slots__ = ("index", "value", "suffix")

    def __init__(self, index: int, value: object, suffix: str) -> None:
        self.index, self.value, self.suffix = index, value, suffix

    def __format__(self, spec: str) -> str:
        return f"kernel argument {self.index}: {type(self.value).__name__}{self.suffix}"


def _readonly_set(readonly: ReadOnly) -> Union[bool, FrozenSet[int]]:
    if isinstance(readonly, bool):
        return readonly
    if isinstance(readonly, tuple) and not readonly:  # the default
        return False
    try:
        indexes = frozenset(readonly)
    except TypeError:
        raise TypeError(f"readonly must be True, False or a collection of argument indexes, not "
                        f"{type(readonly).__name__}") from None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in indexes):
        raise TypeError(f"readonly must hold argument indexes (int), not {sorted(map(repr, indexes))}")
    return indexes
