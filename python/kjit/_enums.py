"""kjit_status and kjit_cache_problem as the API's enum classes, :class:`Status` and
:class:`CacheProblem` (re-exported by kjit; their home module reads ``kjit``): part of _abi's
mirror of the headers, apart because importing enum costs more than ctypes, and a hit needs
neither. Imported at the first error, or the first use of ``kjit.Status``.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """kjit_status values, as kjit.h fixes them (``KJIT_`` + the member's name)."""

    OK = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_NOT_FOUND = 2
    ERROR_AMBIGUOUS = 3
    ERROR_BAD_CUBIN = 4
    ERROR_IO = 5
    ERROR_COMPILE = 6
    ERROR_NVRTC = 7
    ERROR_DRIVER_UNAVAILABLE = 8
    ERROR_DRIVER = 9
    ERROR_BUFFER_TOO_SMALL = 10
    ERROR_OUT_OF_MEMORY = 11
    ERROR_INTERNAL = 12
    ERROR_CANCELLED = 13  # 0.3: a batch item not started after the progress callback cancelled
    ERROR_LINK = 14  # 0.10: nvJitLink refused a link (its log), or no usable nvJitLink
    ERROR_NOT_CACHED = 15  # 0.11: a miss where compiling is refused (compile_mode="never")


class CacheProblem(enum.IntEnum):
    """kjit_cache_problem: what :func:`kjit.verify` found wrong with a path (``KJIT_CACHE_`` +
    the member's name)."""

    MISPLACED = 0
    MISSING_FILE = 1
    BAD_MANIFEST = 2
    BAD_CUBIN = 3
    TRUNCATED_CUBIN = 4
    SIDECAR_MISSING = 5
    SIDECAR_DAMAGED = 6
    SIDECAR_STALE = 7
    SIDECAR_WRONG_NAME = 8
    STALE_TEMP = 9
    FOREIGN = 10


# Read as kjit's, where they are re-exported.
Status.__module__ = CacheProblem.__module__ = "kjit"
