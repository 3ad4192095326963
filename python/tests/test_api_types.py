"""The package's public API is typed, and its source is Python 3.8.

Every public callable (kjit.__all__'s functions, and the methods and properties of its classes
written in the package's own files) must annotate each parameter and its return, so that
py.typed tells type checkers the truth. mypy checks the annotations themselves (the ctest
python_types, label lint); this test needs nothing but the standard library.
"""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import sys
from typing import Any, Iterator, List, Tuple

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
if os.environ.get("KJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

import kjit  # noqa: E402

PACKAGE_DIR = pathlib.Path(kjit.__file__).resolve().parent


def _ours(function: Any) -> bool:
    """Written in the package's files (not made by dataclasses, namedtuple or enum)."""
    code = getattr(function, "__code__", None)
    return code is not None and pathlib.Path(code.co_filename).resolve().parent == PACKAGE_DIR


def _public_callables() -> Iterator[Tuple[str, Any]]:
    for name in kjit.__all__:
        value = getattr(kjit, name)
        if inspect.isfunction(value):
            yield name, value
        elif inspect.isclass(value):
            for attribute, member in vars(value).items():
                if isinstance(member, property):
                    member = member.fget
                elif isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member) and _ours(member):
                    yield f"{name}.{attribute}", member


def missing_annotations(function: Any) -> List[str]:
    """What of ``function``'s signature lacks an annotation: its parameters by name (not self
    or cls, which are never annotated), and "return"."""
    signature = inspect.signature(function)
    missing = [p.name for i, p in enumerate(signature.parameters.values())
               if p.annotation is inspect.Parameter.empty and not (i == 0 and p.name in ("self", "cls"))]
    if signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def test_every_public_callable_is_annotated():
    checked = dict(_public_callables())
    missing = {name: m for name, f in checked.items() for m in [missing_annotations(f)] if m}
    assert missing == {}, "public callables without annotations (name: what lacks one)"
    # What the walk covers: functions, methods, properties and constructors.
    for name in ("compile", "Library.compile_batch", "Library.__init__", "Kernel.launch", "Kernel.name",
                 "KjitError.__init__", "VerifyReport.clean", "BatchItem.__new__"):
        assert name in checked, name


def test_compile_like_functions_take_compiles_keywords():
    # Typed as compile is, never **options: Any, so that a type checker catches name_expr= or
    # arch=90 on each (the ctest python_types checks that it does, python/tests/typing_misuse.py).
    def keywords(function):
        return [(p.name, p.kind, p.default, p.annotation) for p in inspect.signature(function).parameters.values()
                if p.name in kjit._COMPILE_KEYWORDS]

    for owner in (kjit, kjit.Library):
        expected = keywords(owner.compile)
        assert [k[0] for k in expected] == list(kjit._COMPILE_KEYWORDS)
        assert all(k[1] is inspect.Parameter.KEYWORD_ONLY for k in expected)
        assert [k[2] for k in expected] == list(kjit._COMPILE_DEFAULTS.values())
        for name in ("compile_named", "prepare", "compile_and_load", "compile_batch"):
            function = getattr(owner, name)
            assert keywords(function) == expected, f"{owner.__name__}.{name}"
            kinds = [p.kind for p in inspect.signature(function).parameters.values()]
            assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{owner.__name__}.{name}"


def test_the_check_finds_what_lacks_annotations():
    def bare(self, a, b: int, *args, **kwargs):
        return a

    def typed(a: int, *args: str, **kwargs: float) -> None:
        pass

    assert missing_annotations(bare) == ["a", "args", "kwargs", "return"]
    assert missing_annotations(typed) == []


def test_the_package_is_python_3_8_syntax():
    # The source tree's files, which the wheel installs as they are (beside a _build.py that
    # CMake writes).
    files = sorted((PYTHON_DIR / "kjit").glob("*.py"))
    assert len(files) >= 6
    for path in files:
        source = path.read_text()
        ast.parse(source, filename=str(path), feature_version=(3, 8))
        # Annotations are not evaluated at run time, so 3.9+ forms (list[int], X | None) in
        # them cannot fail on 3.8; everywhere else mypy --python-version 3.8 checks.
        assert "from __future__ import annotations" in source, path
