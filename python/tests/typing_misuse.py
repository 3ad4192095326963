"""Calls that mypy must refuse: checked by the ctest python_types (label lint), never run.

mypy --strict reads this file with the package (tests/CMakeLists.txt). Each wrong call carries
``# type: ignore[code]`` with the error mypy must report on it; strict's warn_unused_ignores turns
an ignore that no longer silences anything into an error, so the test fails when a signature stops
catching a misspelt keyword (``name_expr=`` for ``name_expression=``, error code call-arg) or an
argument of the wrong type (``arch=90``, an int, error code arg-type). A call with an error this
file does not expect fails the test too. pytest does not collect this file (no ``test_`` prefix).
"""

from __future__ import annotations

from typing import List

import kjit

SOURCE = "template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N; }"


def module_functions() -> None:
    kjit.compile(SOURCE, "scale", name_expression="scale<3>", arch="sm_90")
    kjit.compile(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    kjit.compile(SOURCE, "scale", arch=90)  # type: ignore[arg-type]

    named: kjit.Compiled = kjit.compile_named(SOURCE, "scale", name_expression="scale<3>", arch="sm_90")
    kjit.compile_named(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    kjit.compile_named(SOURCE, "scale", arch=90)  # type: ignore[arg-type]

    prepared: kjit.Prepared = kjit.prepare(SOURCE, "scale", name_expression="scale<3>", arch="sm_90")
    kjit.prepare(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    kjit.prepare(SOURCE, "scale", arch=90)  # type: ignore[arg-type]

    kernel: kjit.Kernel = kjit.compile_and_load(SOURCE, "scale", name_expression="scale<3>", arch="sm_90")
    kjit.compile_and_load(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    kjit.compile_and_load(SOURCE, "scale", arch=90)  # type: ignore[arg-type]

    items: List[kjit.BatchItem] = kjit.compile_batch([(SOURCE, "scale")], name_expression="scale<3>", arch="sm_90")
    kjit.compile_batch([(SOURCE, "scale")], name_expr="scale<3>")  # type: ignore[call-arg]
    kjit.compile_batch([(SOURCE, "scale")], arch=90)  # type: ignore[arg-type]

    kjit.warm(["requests.jsonl"], arch=["sm_90", "sm_100"])
    kjit.warm(["requests.jsonl"], arch=90)  # type: ignore[arg-type]
    kjit.warm(["requests.jsonl"], name_expression="scale<3>")  # type: ignore[call-arg]
    c: str = kjit.c_type("float16")
    width: int = kjit.c_type("float16")  # type: ignore[assignment]
    kjit.c_type()  # type: ignore[call-arg]
    print(named, prepared, kernel, items, c, width)


def library_methods(lib: kjit.Library) -> None:
    lib.compile(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    lib.compile(SOURCE, "scale", arch=90)  # type: ignore[arg-type]
    lib.compile_named(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    lib.compile_named(SOURCE, "scale", arch=90)  # type: ignore[arg-type]
    lib.prepare(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    lib.prepare(SOURCE, "scale", arch=90)  # type: ignore[arg-type]
    lib.compile_and_load(SOURCE, "scale", name_expr="scale<3>")  # type: ignore[call-arg]
    lib.compile_and_load(SOURCE, "scale", arch=90)  # type: ignore[arg-type]
    lib.compile_batch([(SOURCE, "scale")], name_expr="scale<3>")  # type: ignore[call-arg]
    lib.compile_batch([(SOURCE, "scale")], arch=90)  # type: ignore[arg-type]
