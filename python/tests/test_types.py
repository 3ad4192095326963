"""kjit.c_type: numpy and torch dtypes (and their names) as the C types kernels spell.

numpy and torch are not needed: stand-in objects shaped as theirs are (a numpy dtype has a
``.name`` and a ``.byteorder``, a numpy scalar type is a class named for its dtype, a torch dtype
prints as ``torch.float16``). With numpy installed, one more test uses the real thing.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
if os.environ.get("KJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

import kjit  # noqa: E402

# What each dtype name must give: NVRTC's type names on Linux for the host's types of that data
# (nvrtcGetTypeName<std::int64_t> is "long", tests/api/kjit_hpp_test.cpp checks those).
EXPECTED = {
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
    "float8_e4m3fn": "__nv_fp8_e4m3",
    "float8_e5m2": "__nv_fp8_e5m2",
}


class NumpyLikeDtype:
    """A numpy dtype as c_type reads it: ``.name`` and ``.byteorder``."""

    def __init__(self, name: str, byteorder: str = "=") -> None:
        self.name, self.byteorder = name, byteorder

    def __repr__(self) -> str:
        return f"dtype('{self.name}')"


class TorchLikeDtype:
    """A torch dtype as c_type reads it: no ``.name``, printed as ``torch.<name>``."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __str__(self) -> str:
        return f"torch.{self._name}"

    __repr__ = __str__


def scalar_type(name: str) -> type:
    """A class named as numpy's scalar types are (np.float16's __name__ is "float16")."""
    return type(name, (), {})


@pytest.mark.parametrize("name, c", sorted(EXPECTED.items()))
def test_every_form_of_a_dtype_gives_its_c_type(name: str, c: str) -> None:
    assert kjit.c_type(name) == c
    assert kjit.c_type(f"torch.{name}") == c
    assert kjit.c_type(NumpyLikeDtype(name)) == c
    assert kjit.c_type(TorchLikeDtype(name)) == c
    assert kjit.c_type(scalar_type(name)) == c


def test_the_table_is_the_documented_one() -> None:
    from kjit import _types

    assert _types.C_TYPES == EXPECTED
    for name, c in EXPECTED.items():
        assert c in (kjit.c_type.__doc__ or ""), (name, c)


def test_python_types_and_numpy_aliases() -> None:
    assert kjit.c_type(bool) == "bool"
    assert kjit.c_type(int) == "long"  # numpy reads int as int64
    assert kjit.c_type(float) == "double"
    assert kjit.c_type(scalar_type("bool_")) == "bool"  # numpy 1's np.bool_


@pytest.mark.parametrize("dtype", ["complex64", "torch.complex128", NumpyLikeDtype("complex64"),
                                   TorchLikeDtype("complex32"), complex])
def test_complex_has_no_single_c_type(dtype: object) -> None:
    with pytest.raises(ValueError, match="no single C type"):
        kjit.c_type(dtype)


@pytest.mark.parametrize("dtype", ["float", "int", "half", "float128", "object", "", "torch.quint8",
                                   NumpyLikeDtype("void32"), NumpyLikeDtype("datetime64[ns]"),
                                   TorchLikeDtype("float8_e4m3fnuz"), object(), None, 3])
def test_an_unknown_dtype_is_a_value_error_naming_it(dtype: object) -> None:
    with pytest.raises(ValueError, match="no C type for dtype") as info:
        kjit.c_type(dtype)
    assert repr(dtype) in str(info.value)


def test_the_other_byte_order_is_refused() -> None:
    other = ">" if sys.byteorder == "little" else "<"
    with pytest.raises(ValueError, match="byte order"):
        kjit.c_type(NumpyLikeDtype("float32", other))
    native = "<" if other == ">" else ">"
    for order in ("=", "|", native):
        assert kjit.c_type(NumpyLikeDtype("float32", order)) == "float"


def test_import_kjit_leaves_the_table_for_later() -> None:
    code = ("import sys, kjit; print('kjit._types' in sys.modules); "
            "kjit.c_type('float16'); print('kjit._types' in sys.modules, 'numpy' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["False", "True", "False"]
    assert "c_type" in kjit.__all__ and "c_type" in dir(kjit)


def test_real_numpy_dtypes() -> None:
    np = pytest.importorskip("numpy")
    assert kjit.c_type(np.float16) == "__half"
    assert kjit.c_type(np.dtype("float16")) == "__half"
    assert kjit.c_type(np.zeros(1, dtype=np.int64).dtype) == "long"
    assert kjit.c_type(np.longlong) == "long"  # its dtype is int64
    assert kjit.c_type(np.intc) == "int"
    assert kjit.c_type(np.uint8) == "unsigned char"
    assert kjit.c_type(np.bool_) == "bool"
    assert kjit.c_type(np.dtype(">f4" if sys.byteorder == "little" else "<f4").newbyteorder("=")) == "float"
    with pytest.raises(ValueError, match="byte order"):
        kjit.c_type(np.dtype(">f4" if sys.byteorder == "little" else "<f4"))
    with pytest.raises(ValueError, match="no single C type"):
        kjit.c_type(np.complex64)
