"""libkjit's C ABI for ctypes: the mirror of include/kjit/kjit.h, kjit_batch.h and kjit_cache.h.

Everything the binding knows of the C side is here (and in ``_enums``, the two enums that are
classes of the API), and nothing else is: the header version mirrored, the enums and
constants, every struct as a ``ctypes.Structure`` with its fields in header order and under
their C names, and every exported function's ``restype`` and ``argtypes`` with the symbol
version node that exports it (abi/libkjit.symbols). The rest of the package reads the C side
only through these two modules.

Keeping it in step with the headers:

- a field appended to a struct (the ``struct_size`` rule) is one line appended to its
  ``_fields_``; a function is one line in :data:`FUNCTIONS`; an enumerator one line in its enum;
- python/tests/test_abi_mirror.py compiles a C program from this module and checks it
  against the headers: every struct's size and field offsets, every constant and enumerator,
  each function's parameter and return types, and the function list against
  abi/libkjit.symbols.

Functions exported by ``KJIT_1`` (libkjit 0.1) are required when a library is loaded; later ones
are looked up when present, so an older libkjit still loads (the API says which call needs
which release).
"""

from __future__ import annotations

import ctypes
# typing is for type checkers only: importing it costs more than the rest of the package, and
# annotations are never evaluated (from __future__ import annotations). Type checkers take any
# `if TYPE_CHECKING:` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple, Type

# KJIT_VERSION_MAJOR, _MINOR, _PATCH of the headers this module mirrors.
HEADER_VERSION = (0, 15, 0)


# kjit_status and kjit_cache_problem are enum classes of the API (Status, CacheProblem), in
# kjit._enums: imported at their first use, as enum costs more to import than ctypes. The other
# enums, as name: value (the C name is the prefix in enums() + the name): plain ints in the API.
PCH_MODES: Dict[str, int] = {"DEFAULT": 0, "ON": 1, "OFF": 2}  # kjit_pch_mode
WORKER_KINDS: Dict[str, int] = {"DEFAULT": 0, "THREADS": 1, "PROCESSES": 2, "AUTOMATIC": 3}  # kjit_worker_kind, 0.5
COMPILE_MODES: Dict[str, int] = {"DEFAULT": 0, "ALWAYS": 1, "WARN": 2, "NEVER": 3}  # kjit_compile_mode, 0.11
# kjit_sidecar_rejection: the index into kjit_stats.sidecar_rejections
SIDECAR_REJECTIONS: Dict[str, int] = {"UNREADABLE": 0, "TOO_LARGE": 1, "EMPTY": 2, "BARE_NAME": 3, "BAD_HEADER": 4,
                                      "NO_LINE": 5, "STALE": 6, "NAME_FAILS_RULE": 7, "DISTRUSTED": 8}




def enums() -> Dict[str, Dict[str, int]]:
    """Each enum, as name: value, with the prefix that makes its members' C names (imports
    kjit._enums, the two that are enum classes)."""
    from ._enums import CacheProblem, Status

    return {
        "KJIT_": {member.name: member.value for member in Status},
        "KJIT_PCH_": PCH_MODES,
        "KJIT_WORKERS_": WORKER_KINDS,
        "KJIT_COMPILE_": COMPILE_MODES,
        "KJIT_SIDECAR_": SIDECAR_REJECTIONS,
        "KJIT_CACHE_": {member.name: member.value for member in CacheProblem},
    }

# The header's numeric macros.
STATS_REJECTION_SLOTS = 16  # KJIT_STATS_REJECTION_SLOTS
STATS_STATUS_SLOTS = 32  # KJIT_STATS_STATUS_SLOTS
PRUNE_NO_LIMIT = 2**64 - 1  # KJIT_PRUNE_NO_LIMIT (UINT64_MAX)
REMOTE_CHECK_NO_PASSWORD = 1  # KJIT_REMOTE_CHECK_NO_PASSWORD (kjit_remote_check's flag, 0.13)

MACROS: Dict[str, int] = {
    "KJIT_VERSION_MAJOR": HEADER_VERSION[0],
    "KJIT_VERSION_MINOR": HEADER_VERSION[1],
    "KJIT_VERSION_PATCH": HEADER_VERSION[2],
    "KJIT_STATS_REJECTION_SLOTS": STATS_REJECTION_SLOTS,
    "KJIT_STATS_STATUS_SLOTS": STATS_STATUS_SLOTS,
    "KJIT_PRUNE_NO_LIMIT": PRUNE_NO_LIMIT,
    "KJIT_REMOTE_CHECK_NO_PASSWORD": REMOTE_CHECK_NO_PASSWORD,
}


def constants() -> Dict[str, int]:
    """Every constant this module mirrors, by its C name: the macros and each enumerator."""
    out = dict(MACROS)
    for prefix, values in enums().items():
        out.update({prefix + name: value for name, value in values.items()})
    return out


# --------------------------------------------------------------------------------------------
# Structs, field for field in header order

class Sized(ctypes.Structure):
    """A struct that starts with ``struct_size``: a new one is zero-filled, as ctypes makes it,
    with ``struct_size`` set to this version's ``sizeof``. Declares no field itself (ctypes
    would put a base's fields before the subclass's): each subclass lists all of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.struct_size = ctypes.sizeof(self)


def offset_of(struct: Type[ctypes.Structure], field: str) -> int:
    """offsetof(struct, field): what an older library's ``sizeof`` was, for a field it lacks."""
    return int(getattr(struct, field).offset)


class Header(ctypes.Structure):
    """kjit_header."""

    _fields_ = [("name", ctypes.c_char_p), ("source", ctypes.c_char_p)]


class CompileOptions(Sized):
    """kjit_compile_options. Zero-filled with struct_size set is KJIT_COMPILE_OPTIONS_INIT."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("cache_dir", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("nvrtc_options", ctypes.POINTER(ctypes.c_char_p)),
        ("nvrtc_option_count", ctypes.c_size_t),
        ("include_paths", ctypes.POINTER(ctypes.c_char_p)),
        ("include_path_count", ctypes.c_size_t),
        ("headers", ctypes.POINTER(Header)),
        ("header_count", ctypes.c_size_t),
        ("name_expression", ctypes.c_char_p),
        ("max_cache_size", ctypes.c_uint64),  # 0.2
        ("remote_storage", ctypes.c_char_p),  # 0.6
        ("program_name", ctypes.c_char_p),  # 0.7
        ("seed_dirs", ctypes.POINTER(ctypes.c_char_p)),  # 0.9
        ("seed_dir_count", ctypes.c_size_t),  # 0.9
        ("link_inputs", ctypes.POINTER(ctypes.c_char_p)),  # 0.10
        ("link_input_count", ctypes.c_size_t),  # 0.10
        ("link_options", ctypes.POINTER(ctypes.c_char_p)),  # 0.10
        ("link_option_count", ctypes.c_size_t),  # 0.10
        ("compile_mode", ctypes.c_int),  # 0.11
        ("reserved", ctypes.c_int),  # 0.12, 0
        ("base_dirs", ctypes.POINTER(ctypes.c_char_p)),  # 0.12
        ("base_dir_count", ctypes.c_size_t),  # 0.12
    ]


class CompileRequest(Sized):
    """kjit_compile_request (0.3)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("source", ctypes.c_char_p),
        ("keyword", ctypes.c_char_p),
        ("options", ctypes.POINTER(CompileOptions)),
    ]


# kjit_batch_progress_fn
PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                               ctypes.c_int, ctypes.c_char_p)


class BatchOptions(Sized):
    """kjit_batch_options (0.3; worker_kind and reserved 0.5)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("workers", ctypes.c_uint),
        ("pch", ctypes.c_int),
        ("progress", PROGRESS_FN),
        ("progress_user_data", ctypes.c_void_p),
        ("worker_kind", ctypes.c_int),  # 0.5
        ("reserved", ctypes.c_int),  # 0.5
    ]


# kjit_stats' counters in header order, in runs between its arrays.
STATS_COUNTERS = ("compile_hits", "compile_misses", "compile_shared_waits", "nvrtc_compiles", "nvrtc_nanoseconds",
                  "entries_published", "entries_rebuilt", "sidecar_hits", "sidecar_content_checks", "memo_hits",
                  "sidecar_missing")
STATS_COUNTERS_2 = ("scans", "sidecar_writes", "sidecar_write_failures", "loads", "load_reuses", "driver_loads",
                    "load_self_heals", "eviction_runs", "evicted_entries", "evicted_bytes")
STATS_COUNTERS_3 = ("swept_temp_folders",)
STATS_REMOTE = ("remote_hits", "remote_misses", "remote_errors", "remote_timeouts", "remote_corrupt", "remote_puts",
                "remote_bytes_in", "remote_bytes_out", "remote_leases_owned", "remote_lease_waits",
                "remote_lease_takeovers", "remote_shared_failures")  # 0.6
STATS_SEED = ("seed_hits", "seed_rejections")  # 0.9
STATS_LINK = ("nvjitlink_links", "nvjitlink_nanoseconds")  # 0.10


class Stats(Sized):
    """kjit_stats (0.2; the remote_* counters 0.6, the seed_* counters 0.9, the nvjitlink_*
    counters 0.10)."""

    _fields_ = ([("struct_size", ctypes.c_size_t)] +
                [(n, ctypes.c_uint64) for n in STATS_COUNTERS] +
                [("sidecar_rejections", ctypes.c_uint64 * STATS_REJECTION_SLOTS)] +
                [(n, ctypes.c_uint64) for n in STATS_COUNTERS_2] +
                [("errors", ctypes.c_uint64 * STATS_STATUS_SLOTS)] +
                [(n, ctypes.c_uint64) for n in STATS_COUNTERS_3] +
                [(n, ctypes.c_uint64) for n in STATS_REMOTE] +
                [(n, ctypes.c_uint64) for n in STATS_SEED] +
                [(n, ctypes.c_uint64) for n in STATS_LINK])


class CacheSummary(Sized):
    """kjit_cache_summary (0.4)."""

    COUNTS = ("entries", "bytes", "max_size", "in_transit", "in_transit_bytes", "foreign")
    TIMES = ("least_recent_use_ns", "most_recent_use_ns", "oldest_created_ns", "newest_created_ns")
    _fields_ = ([("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in COUNTS] +
                [(n, ctypes.c_int64) for n in TIMES])


class PruneOptions(ctypes.Structure):
    """kjit_prune_options (0.4). Filled by kjit_prune_options_init, not by hand: a zero fill
    would mean "remove everything not in use", not the defaults."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("max_size", ctypes.c_uint64), ("older_than_s", ctypes.c_uint64)]


class PruneReport(Sized):
    """kjit_prune_report (0.4)."""

    COUNTS = ("removed_entries", "removed_bytes", "spared_in_use", "removed_in_transit", "removed_variants_files",
              "kept_entries", "kept_bytes")
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in COUNTS]


class CopyReport(Sized):
    """kjit_copy_report (0.9)."""

    COUNTS = ("copied_entries", "copied_bytes", "present_entries", "skipped_entries", "refused_entries")
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in COUNTS]


# Every struct of the headers, by its C name.
STRUCTS: Dict[str, Type[ctypes.Structure]] = {
    "kjit_header": Header,
    "kjit_compile_options": CompileOptions,
    "kjit_compile_request": CompileRequest,
    "kjit_batch_options": BatchOptions,
    "kjit_stats": Stats,
    "kjit_cache_summary": CacheSummary,
    "kjit_prune_options": PruneOptions,
    "kjit_prune_report": PruneReport,
    "kjit_copy_report": CopyReport,
}


# --------------------------------------------------------------------------------------------
# Functions

STATUS = ctypes.c_int  # kjit_status, a C enum: an int
HANDLE = ctypes.c_void_p  # an opaque handle: kjit_kernel *, kjit_batch_result *, ...
HANDLE_OUT = ctypes.POINTER(ctypes.c_void_p)  # kjit_kernel ** and the like
BUF = ctypes.POINTER(ctypes.c_char)  # a caller's out buffer, char *
SIZE_OUT = ctypes.POINTER(ctypes.c_size_t)  # size_t *, an out length
_S, _I, _SZ, _U64 = ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64

# name: (symbol version node in abi/libkjit.symbols, restype, argtypes)
FUNCTIONS: Dict[str, Tuple[str, Optional[type], List[type]]] = {
    # KJIT_1: libkjit 0.1, required
    "kjit_status_string": ("KJIT_1", _S, [STATUS]),
    "kjit_last_error": ("KJIT_1", _S, []),
    "kjit_version": ("KJIT_1", ctypes.c_uint, []),
    "kjit_version_string": ("KJIT_1", _S, []),
    "kjit_resolve_name": ("KJIT_1", STATUS, [_S, _S, BUF, _SZ, SIZE_OUT]),
    "kjit_compile": ("KJIT_1", STATUS, [_S, _S, ctypes.POINTER(CompileOptions), BUF, _SZ, SIZE_OUT]),
    "kjit_load_cached": ("KJIT_1", STATUS, [_S, _S, HANDLE_OUT]),
    "kjit_kernel_name": ("KJIT_1", _S, [HANDLE]),
    "kjit_kernel_cubin_path": ("KJIT_1", _S, [HANDLE]),
    "kjit_kernel_cukernel": ("KJIT_1", ctypes.c_void_p, [HANDLE]),
    "kjit_kernel_culibrary": ("KJIT_1", ctypes.c_void_p, [HANDLE]),
    "kjit_kernel_cufunction": ("KJIT_1", STATUS, [HANDLE, ctypes.POINTER(ctypes.c_void_p)]),
    "kjit_kernel_release": ("KJIT_1", None, [HANDLE]),
    # KJIT_1.1: 0.2
    "kjit_get_stats": ("KJIT_1.1", STATUS, [ctypes.POINTER(Stats)]),
    # KJIT_1.2: 0.3
    "kjit_compile_batch": ("KJIT_1.2", STATUS, [ctypes.POINTER(ctypes.POINTER(CompileRequest)), _SZ,
                                                ctypes.POINTER(BatchOptions), HANDLE_OUT]),
    "kjit_batch_result_count": ("KJIT_1.2", _SZ, [HANDLE]),
    "kjit_batch_result_status": ("KJIT_1.2", STATUS, [HANDLE, _SZ]),
    "kjit_batch_result_cubin_path": ("KJIT_1.2", _S, [HANDLE, _SZ]),
    "kjit_batch_result_error": ("KJIT_1.2", _S, [HANDLE, _SZ]),
    "kjit_batch_result_release": ("KJIT_1.2", None, [HANDLE]),
    # KJIT_1.3: 0.4
    "kjit_compile_options_init": ("KJIT_1.3", STATUS, [ctypes.POINTER(CompileOptions), _SZ]),
    "kjit_compile_request_init": ("KJIT_1.3", STATUS, [ctypes.POINTER(CompileRequest), _SZ]),
    "kjit_batch_options_init": ("KJIT_1.3", STATUS, [ctypes.POINTER(BatchOptions), _SZ]),
    "kjit_prune_options_init": ("KJIT_1.3", STATUS, [ctypes.POINTER(PruneOptions), _SZ]),
    "kjit_cache_dir": ("KJIT_1.3", STATUS, [_S, BUF, _SZ, SIZE_OUT]),
    "kjit_cache_summarize": ("KJIT_1.3", STATUS, [_S, ctypes.POINTER(CacheSummary), HANDLE_OUT]),
    "kjit_cache_arches_count": ("KJIT_1.3", _SZ, [HANDLE]),
    "kjit_cache_arches_name": ("KJIT_1.3", _S, [HANDLE, _SZ]),
    "kjit_cache_arches_entries": ("KJIT_1.3", _U64, [HANDLE, _SZ]),
    "kjit_cache_arches_bytes": ("KJIT_1.3", _U64, [HANDLE, _SZ]),
    "kjit_cache_arches_release": ("KJIT_1.3", None, [HANDLE]),
    "kjit_cache_prune": ("KJIT_1.3", STATUS, [_S, ctypes.POINTER(PruneOptions), ctypes.POINTER(PruneReport)]),
    "kjit_cache_clear": ("KJIT_1.3", STATUS, [_S, ctypes.POINTER(PruneReport)]),
    "kjit_cache_problem_string": ("KJIT_1.3", _S, [_I]),
    "kjit_cache_verify": ("KJIT_1.3", STATUS, [_S, _I, HANDLE_OUT]),
    "kjit_verify_report_entries_checked": ("KJIT_1.3", _SZ, [HANDLE]),
    "kjit_verify_report_entries_ok": ("KJIT_1.3", _SZ, [HANDLE]),
    "kjit_verify_report_count": ("KJIT_1.3", _SZ, [HANDLE]),
    "kjit_verify_report_path": ("KJIT_1.3", _S, [HANDLE, _SZ]),
    "kjit_verify_report_kind": ("KJIT_1.3", _I, [HANDLE, _SZ]),
    "kjit_verify_report_detail": ("KJIT_1.3", _S, [HANDLE, _SZ]),
    "kjit_verify_report_fixed": ("KJIT_1.3", _I, [HANDLE, _SZ]),
    "kjit_verify_report_action": ("KJIT_1.3", _S, [HANDLE, _SZ]),
    "kjit_verify_report_release": ("KJIT_1.3", None, [HANDLE]),
    # KJIT_1.4: 0.5
    "kjit_compile_named": ("KJIT_1.4", STATUS, [_S, _S, ctypes.POINTER(CompileOptions), BUF, _SZ, SIZE_OUT, BUF,
                                                _SZ, SIZE_OUT]),
    "kjit_compile_and_load": ("KJIT_1.4", STATUS, [_S, _S, ctypes.POINTER(CompileOptions), HANDLE_OUT]),
    "kjit_batch_result_kernel_name": ("KJIT_1.4", _S, [HANDLE, _SZ]),
    # KJIT_1.5: 0.6
    "kjit_remote_describe": ("KJIT_1.5", STATUS, [_S, BUF, _SZ, SIZE_OUT]),
    # KJIT_1.6: 0.9
    "kjit_cache_export": ("KJIT_1.6", STATUS, [_S, _S, _S, ctypes.POINTER(CopyReport), HANDLE_OUT]),
    "kjit_cache_import": ("KJIT_1.6", STATUS, [_S, _S, ctypes.POINTER(CopyReport), HANDLE_OUT]),
    # KJIT_1.7: 0.11
    "kjit_record_start": ("KJIT_1.7", STATUS, [_S]),
    "kjit_record_stop": ("KJIT_1.7", None, []),
    # KJIT_1.8: 0.13
    "kjit_remote_check": ("KJIT_1.8", STATUS, [_S, ctypes.c_uint]),
    # KJIT_1.9: 0.14
    "kjit_prepare": ("KJIT_1.9", STATUS, [_S, _S, ctypes.POINTER(CompileOptions), HANDLE_OUT]),
    "kjit_prepared_compile": ("KJIT_1.9", STATUS, [HANDLE, BUF, _SZ, SIZE_OUT, BUF, _SZ, SIZE_OUT]),
    "kjit_prepared_load": ("KJIT_1.9", STATUS, [HANDLE, HANDLE_OUT]),
    "kjit_prepared_release": ("KJIT_1.9", None, [HANDLE]),
}

REQUIRED_NODE = "KJIT_1"


def bind(cdll: ctypes.CDLL) -> Tuple[Dict[str, Any], List[str]]:
    """Declares every function of :data:`FUNCTIONS` that ``cdll`` exports -> (the functions by
    name, the required ones it lacks)."""
    found: Dict[str, Any] = {}
    missing: List[str] = []
    for name, (node, restype, argtypes) in FUNCTIONS.items():
        fn = getattr(cdll, name, None)
        if fn is None:
            if node == REQUIRED_NODE:
                missing.append(name)
            continue
        fn.restype, fn.argtypes = restype, argtypes
        found[name] = fn
    return found, missing
