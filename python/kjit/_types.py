"""kjit.c_type: the C type a kernel spells for a numpy or torch dtype (imported on first use).

The names are NVRTC's own for those types on Linux, as ``nvrtcGetTypeName<T>()`` (and kjit.hpp's
``kjit::type_name<T>()``) gives them for the C++ types that host code uses for the same data:
``std::int64_t`` is ``long`` there (not ``long long``: another type, with another mangled
name), ``std::uint8_t`` is ``unsigned char``, ``__half`` and ``__nv_bfloat16`` come from
``cuda_fp16.h`` and ``cuda_bf16.h``, the 8-bit floats from ``cuda_fp8.h``. So a name expression
built from them here names the instantiation the host code would name.

Neither numpy nor torch is imported: a dtype is read by duck typing.
"""

from __future__ import annotations

import sys

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Optional

# dtype name (numpy's, torch's without "torch.") -> C type, on Linux (LP64).
C_TYPES: Dict[str, str] = {
    "bool": "bool",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long",
    "uint64": "unsigned long",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
    # cuda_fp8.h's types are the "fn" variants (finite: no infinities, one NaN), as torch's and
    # ml_dtypes' float8_e4m3fn; e5m2 has infinities on both sides.
    "float8_e4m3fn": "__nv_fp8_e4m3",
    "float8_e5m2": "__nv_fp8_e5m2",
}

# Names of the same dtypes that some objects carry: numpy 1's bool class is "bool_".
_ALIASES: Dict[str, str] = {"bool_": "bool"}

# Python's own types, as numpy reads them on Linux (np.dtype(int) is int64, float float64, complex
# complex128).
_BUILTINS: Dict[type, str] = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}

_NO_SINGLE_TYPE = ("complex64", "complex128", "complex32", "chalf", "cfloat", "cdouble")


def _name_of(dtype: object) -> str:
    """The dtype's name as numpy or torch spells it (``"float16"``), read without importing
    either; ``""`` when the object gives none."""
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):
        if dtype in _BUILTINS:
            return _BUILTINS[dtype]
        # A numpy scalar type (np.float16, np.longlong) or ml_dtypes' (bfloat16): numpy's dtype of
        # it, where numpy is already imported (it is, whoever holds such a type).
        numpy = sys.modules.get("numpy")
        module = getattr(dtype, "__module__", "") or ""
        if numpy is not None and module.split(".")[0] in ("numpy", "ml_dtypes"):
            try:
                return str(numpy.dtype(dtype).name)
            except TypeError:
                pass
        name = dtype.__name__
    elif isinstance(getattr(dtype, "name", None), str):
        _check_byte_order(dtype)
        name = getattr(dtype, "name")
    else:
        name = str(dtype)  # torch.float16 is "torch.float16"
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _ALIASES.get(name, name)


def _check_byte_order(dtype: object) -> None:
    """A numpy dtype of the other byte order than this machine's holds data no C type here reads."""
    order: Optional[object] = getattr(dtype, "byteorder", None)
    other = ">" if sys.byteorder == "little" else "<"
    if order == other:
        raise ValueError(f"kjit.c_type: dtype {dtype!r} is not in this machine's byte order ({sys.byteorder} endian)")


def c_type(dtype: object) -> str:
    """The C type for ``dtype`` that a kernel's parameter or template argument spells, e.g.
    ``kjit.c_type(np.float16) == "__half"``: NVRTC's name of the C++ type host code uses for
    those values on Linux (``nvrtcGetTypeName``'s, and kjit.hpp's ``kjit::type_name``).

    ``dtype`` may be a numpy dtype (``np.dtype("float32")``, anything with a ``.name`` such as
    ``array.dtype``), a numpy scalar type (``np.float16``), a torch dtype (``torch.bfloat16``,
    whose ``str`` is ``"torch.bfloat16"``), Python's ``bool``, ``int`` or ``float`` (as numpy
    reads them: ``int`` is int64, ``float`` float64), or one of these names as a string:

    ========================== =============================
    dtype                      C type
    ========================== =============================
    bool                       ``bool``
    int8, uint8                ``signed char``, ``unsigned char``
    int16, uint16              ``short``, ``unsigned short``
    int32, uint32              ``int``, ``unsigned int``
    int64, uint64              ``long``, ``unsigned long`` (``std::int64_t`` on Linux)
    float16                    ``__half`` (cuda_fp16.h)
    bfloat16                   ``__nv_bfloat16`` (cuda_bf16.h)
    float32, float64           ``float``, ``double``
    float8_e4m3fn, float8_e5m2 ``__nv_fp8_e4m3``, ``__nv_fp8_e5m2`` (cuda_fp8.h)
    ========================== =============================

    Neither numpy nor torch is imported. Thread safe.

    Raises:
        ValueError: for any other dtype, naming it: complex dtypes (no single C type fits them:
            ``cuda::std::complex<float>``, ``cuFloatComplex`` and ``thrust::complex<float>`` all
            do; spell the one the kernel uses), a numpy dtype in the other byte order, structured
            dtypes, and names such as ``"float"`` or ``"int"`` whose width a string leaves open.
    """
    name = _name_of(dtype)
    found = C_TYPES.get(name)
    if found is not None:
        return found
    if name in _NO_SINGLE_TYPE:
        raise ValueError(f"kjit.c_type: dtype {dtype!r} has no single C type (cuda::std::complex, cuComplex and "
                         "thrust::complex all fit it): spell the one the kernel uses")
    raise ValueError(f"kjit.c_type: no C type for dtype {dtype!r} (known: {', '.join(C_TYPES)})")
