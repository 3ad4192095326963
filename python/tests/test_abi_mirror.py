"""kjit._abi against the C headers and abi/libkjit.symbols.

The mirror is what the Python package knows of the C ABI: if it drifts from the headers, ctypes
reads and writes the wrong bytes without a word. So these tests compile programs generated from
the mirror against include/ (the source tree's: python/../include) and compare what C says:

- the functions the mirror declares are exactly those abi/libkjit.symbols exports, each with its
  version node (a required KJIT_1 function, or an optional later one);
- every struct's sizeof, and each field's offset and size, as the C compiler lays them out;
- every constant and enumerator value, and no enumerator, struct or numeric macro of the
  headers missing from the mirror;
- each function's return and parameter types, and each field's type, by kind (an int of a size
  and signedness, a pointer to what, a struct of a size, a function pointer), through C++
  templates over the headers' own declarations.

Skipped, saying so, only where no C (or, for the types, C++) compiler exists.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
SOURCE_DIR = PYTHON_DIR.parent
INCLUDE = SOURCE_DIR / "include"
SYMBOLS = SOURCE_DIR / "abi" / "libkjit.symbols"
HEADERS = [INCLUDE / "kjit" / name for name in ("kjit.h", "kjit_batch.h", "kjit_cache.h")]
if os.environ.get("KJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

from kjit import _abi  # noqa: E402


def _compiler(variable: str, name: str) -> Optional[str]:
    given = os.environ.get(variable)
    return shutil.which(given.split()[0]) if given else shutil.which(name)


CC = _compiler("CC", "cc")
CXX = _compiler("CXX", "c++")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc, or $CC) to check the mirror against")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++, or $CXX) to check the mirror's types")


def _build_and_run(compiler: str, source: str, suffix: str, flags: List[str], tmp: pathlib.Path) -> str:
    src, exe = tmp / f"mirror{suffix}", tmp / "mirror"
    src.write_text(source)
    cc = subprocess.run([compiler, *flags, "-I", str(INCLUDE), "-o", str(exe), str(src)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, f"the program generated from kjit/_abi.py does not compile against {INCLUDE}:\n" \
                               f"{cc.stderr}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return run.stdout


def _header_text() -> str:
    return "\n".join(h.read_text() for h in HEADERS)


# --------------------------------------------------------------------------------------------
# The function list

def _exported() -> Dict[str, str]:
    """abi/libkjit.symbols: one ``name@NODE`` a line (the exported functions and their version
    nodes); blank lines and ``#`` comments are skipped."""
    out = {}
    for line in SYMBOLS.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, node = line.partition("@")
        assert node, f"{SYMBOLS}: {line!r} is not name@NODE"
        out[name] = node
    return out


def test_the_mirror_declares_exactly_the_exported_functions():
    exported = _exported()
    declared = {name: node for name, (node, _restype, _argtypes) in _abi.FUNCTIONS.items()}
    assert sorted(set(exported) - set(declared)) == [], "exported by libkjit but missing from _abi.FUNCTIONS"
    assert sorted(set(declared) - set(exported)) == [], "in _abi.FUNCTIONS but not exported (abi/libkjit.symbols)"
    wrong = {n: (declared[n], exported[n]) for n in declared if declared[n] != exported[n]}
    assert wrong == {}, "version nodes in _abi.FUNCTIONS differ from abi/libkjit.symbols (mirror, symbols)"


# --------------------------------------------------------------------------------------------
# Sizes, offsets and values, from a C program

def _c_program() -> str:
    lines = ["#include <kjit/kjit.h>", "#include <stddef.h>", "#include <stdio.h>", "", "int main(void) {"]
    for c_name, struct in _abi.STRUCTS.items():
        lines.append(f'    printf("sizeof {c_name} %zu\\n", sizeof({c_name}));')
        for field, _ctype in struct._fields_:
            lines.append(f'    printf("offsetof {c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
            lines.append(f'    printf("sizeof {c_name}.{field} %zu\\n", sizeof((({c_name} *)0)->{field}));')
    for name in _abi.constants():
        lines.append(f'    printf("value {name} %llu\\n", (unsigned long long)({name}));')
    lines += ["    return 0;", "}", ""]
    return "\n".join(lines)


def _mirror_facts() -> Dict[str, int]:
    facts = {}
    for c_name, struct in _abi.STRUCTS.items():
        facts[f"sizeof {c_name}"] = ctypes.sizeof(struct)
        for field, _ctype in struct._fields_:
            descriptor = getattr(struct, field)
            facts[f"offsetof {c_name}.{field}"] = descriptor.offset
            facts[f"sizeof {c_name}.{field}"] = descriptor.size
    facts.update({f"value {name}": value for name, value in _abi.constants().items()})
    return facts


@needs_cc
def test_struct_layouts_and_constants_match_c(tmp_path):
    out = _build_and_run(CC, _c_program(), ".c", ["-std=c99", "-Wall", "-Werror"], tmp_path)
    from_c = {}
    for line in out.splitlines():
        what, _, value = line.rpartition(" ")
        from_c[what] = int(value)
    mirror = _mirror_facts()
    assert set(from_c) == set(mirror)
    differ = {k: (mirror[k], from_c[k]) for k in mirror if mirror[k] != from_c[k]}
    assert differ == {}, "kjit/_abi.py differs from the headers (mirror, C)"


def test_the_program_would_catch_a_wrong_mirror(tmp_path):
    # The comparison above can fail: a struct short of its last field, a wrong offset and a
    # wrong value all show as differences.
    facts = _mirror_facts()
    short = dict(facts, **{"sizeof kjit_compile_options": _abi.offset_of(_abi.CompileOptions, "remote_storage")})
    assert {k for k in facts if facts[k] != short[k]} == {"sizeof kjit_compile_options"}
    assert facts["value KJIT_ERROR_CANCELLED"] == 13 and facts["value KJIT_PRUNE_NO_LIMIT"] == 2**64 - 1


def test_the_headers_have_nothing_the_mirror_lacks():
    text = _header_text()
    enumerators = set(re.findall(r"^\s*(KJIT_[A-Z0-9_]+)\s*=\s*-?\d+\s*,?", text, re.M))
    structs = set(re.findall(r"typedef struct (kjit_\w+) \{", text))
    macros = set(re.findall(r"^#define (KJIT_[A-Z0-9_]+) \(?-?\d+[uUlL]*\)?\s*$", text, re.M))
    mirrored = set(_abi.constants())
    assert sorted(enumerators - mirrored) == [], "enumerators missing from kjit/_abi.py"
    assert sorted(macros - mirrored) == [], "numeric macros missing from kjit/_abi.py"
    assert structs == set(_abi.STRUCTS), "structs of the headers vs _abi.STRUCTS"
    assert len(enumerators) >= 40 and len(structs) == 9  # the patterns still find what they look for


# --------------------------------------------------------------------------------------------
# Types, from a C++ program over the headers' declarations

_KINDS_CXX = r"""
#include <kjit/kjit.h>
#include <cstdio>
#include <string>
#include <type_traits>

template <class T, class = void> struct complete : std::false_type {};
template <class T> struct complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

// What a type is, in the words of kind() in test_abi_mirror.py.
template <class T> std::string kind() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_void_v<U>) {
        return "void";
    } else if constexpr (std::is_array_v<U>) {
        return "array" + std::to_string(std::extent_v<U>) + "->" + kind<std::remove_extent_t<U>>();
    } else if constexpr (std::is_pointer_v<U>) {
        using P = std::remove_cv_t<std::remove_pointer_t<U>>;
        if constexpr (std::is_function_v<P>) {
            return "fn";
        } else if constexpr (!std::is_void_v<P> && !complete<P>::value) {
            return "ptr->opaque";
        } else {
            return "ptr->" + kind<P>();
        }
    } else if constexpr (std::is_same_v<U, char>) {
        return "char";
    } else if constexpr (std::is_enum_v<U>) {
        return "enum" + std::to_string(sizeof(U));
    } else if constexpr (std::is_integral_v<U>) {
        return (std::is_signed_v<U> ? "int" : "uint") + std::to_string(sizeof(U));
    } else if constexpr (std::is_floating_point_v<U>) {
        return "float" + std::to_string(sizeof(U));
    } else {
        return "struct" + std::to_string(sizeof(U));
    }
}

template <class R, class... A> void signature(const char *name, R (*)(A...)) {
    std::string line = std::string("function ") + name + " " + kind<R>();
    ((line += " " + kind<A>()), ...);
    std::puts(line.c_str());
}
"""


def kind(ctype: object) -> str:
    """A ctypes type in the words of the C++ program's kind<T>()."""
    if ctype is None:
        return "void"
    assert isinstance(ctype, type)
    if ctype is ctypes.c_char_p:
        return "ptr->char"
    if ctype is ctypes.c_void_p:
        return "ptr->void"
    if ctype is ctypes.c_char:
        return "char"
    if issubclass(ctype, ctypes._Pointer):
        return "ptr->" + kind(ctype._type_)
    if issubclass(ctype, ctypes.Array):
        return f"array{ctype._length_}->" + kind(ctype._type_)
    if issubclass(ctype, ctypes.Structure):
        return f"struct{ctypes.sizeof(ctype)}"
    if issubclass(ctype, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        return "fn"
    if issubclass(ctype, ctypes._SimpleCData):
        size = ctypes.sizeof(ctype)
        if ctype._type_ in "fdg":
            return f"float{size}"
        return f"{'int' if ctype(-1).value < 0 else 'uint'}{size}"
    raise AssertionError(f"no kind for {ctype!r}")


def _same(mirror: str, c: str) -> bool:
    """Whether the mirror's kind stands for the C one: a C enum is an int of its size (ctypes
    has no enums; C compilers pick the enum's signedness), and the mirror's void * stands for
    a pointer to an opaque handle (kjit_kernel *, ...)."""
    if mirror == c:
        return True
    if c.startswith("enum") and re.fullmatch(r"u?int" + c[4:], mirror):
        return True
    if mirror.startswith("ptr->") and c.startswith("ptr->"):
        return _same(mirror[5:], c[5:])
    return mirror == "void" and c == "opaque"


def _cxx_program() -> str:
    lines = [_KINDS_CXX, "int main() {"]
    for name in _abi.FUNCTIONS:
        # decltype only: nothing is called or linked
        lines.append(f'    signature("{name}", static_cast<decltype(&{name})>(nullptr));')
    for c_name, struct in _abi.STRUCTS.items():
        for field, _ctype in struct._fields_:
            lines.append(f'    std::puts(("field {c_name}.{field} " + kind<decltype({c_name}::{field})>()).c_str());')
    lines += ["}", ""]
    return "\n".join(lines)


def _mirror_kinds() -> Dict[str, Tuple[str, ...]]:
    out: Dict[str, Tuple[str, ...]] = {}
    for name, (_node, restype, argtypes) in _abi.FUNCTIONS.items():
        out[f"function {name}"] = (kind(restype),) + tuple(kind(a) for a in argtypes)
    for c_name, struct in _abi.STRUCTS.items():
        for field, ctype in struct._fields_:
            out[f"field {c_name}.{field}"] = (kind(ctype),)
    return out


def _differences(mirror: Dict[str, Tuple[str, ...]], c: Dict[str, Tuple[str, ...]]) -> Dict[str, Tuple]:
    return {k: (mirror[k], c[k]) for k in mirror
            if len(mirror[k]) != len(c[k]) or not all(_same(m, x) for m, x in zip(mirror[k], c[k]))}


@needs_cxx
def test_function_and_field_types_match_the_headers(tmp_path):
    out = _build_and_run(CXX, _cxx_program(), ".cpp", ["-std=c++17", "-Wall", "-Werror"], tmp_path)
    from_c: Dict[str, Tuple[str, ...]] = {}
    for line in out.splitlines():
        what, name, *kinds = line.split(" ")
        from_c[f"{what} {name}"] = tuple(kinds)
    mirror = _mirror_kinds()
    assert set(from_c) == set(mirror)
    assert _differences(mirror, from_c) == {}, "kjit/_abi.py's types differ from the headers' (mirror, C)"


def test_the_type_comparison_would_catch_a_wrong_prototype():
    # A size_t where C has an int, a missing parameter and a pointer to the wrong struct differ.
    c = {"function f": ("enum4", "ptr->char", "uint8", "ptr->struct24")}
    assert _differences({"function f": ("int4", "ptr->char", "uint8", "ptr->struct24")}, c) == {}
    for wrong in (("uint8", "ptr->char", "uint8", "ptr->struct24"), ("int4", "ptr->char", "uint8"),
                  ("int4", "ptr->char", "uint8", "ptr->struct32"), ("int4", "ptr->char", "int8", "ptr->struct24")):
        assert _differences({"function f": wrong}, c) != {}, wrong
    assert kind(ctypes.c_size_t) == "uint8" and kind(ctypes.c_int64) == "int8"
    assert kind(ctypes.POINTER(_abi.CompileOptions)) == f"ptr->struct{ctypes.sizeof(_abi.CompileOptions)}"
