r"""Python bindings for libkjit (ctypes only, no compiled extension).

libkjit JIT-compiles CUDA C++ with NVRTC into an on-disk cubin cache, finds a cubin's mangled
kernel name through a ``<cubin>.name`` sidecar, and loads cached kernels through the CUDA
driver. This module wraps its C ABI (``include/kjit/kjit.h`` and the ``kjit_batch.h`` and
``kjit_cache.h`` it includes) one function at a time.

Finding libkjit.so
------------------
Nothing is loaded at import time; the first call that needs the library loads it, from the
first of these places that is given:

1. an explicit path: ``kjit.load_library(path)`` (which also makes it the default for the
   module-level functions) or ``kjit.Library(path)``;
2. ``$KJIT_LIBRARY``, when set and non-empty;
3. ``libkjit.so.0`` beside this module: the one an installed wheel (``pip install .``) holds;
4. the usual search: ``ctypes.util.find_library("kjit")``, then ``libkjit.so.0`` and
   ``libkjit.so`` through dlopen's own search path (``LD_LIBRARY_PATH``, rpath, ldconfig).

An explicit path or ``$KJIT_LIBRARY`` is authoritative: if it cannot be loaded, nothing else
is tried. Failure raises :class:`LibraryNotFound`, naming every place tried and why it failed.

Replacing a pyelftools lookup
-----------------------------
Scanning ``.symtab`` with pyelftools on every load::

    with open(path, "rb") as f:
        for sym in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            if re.match(r"^_Z\d+" + keyword, sym.name):
                name = sym.name
                break

becomes one call, which after the first lookup only reads a small sidecar file and stats the
cubin (and takes the keyword as literal text, never as a regex)::

    name = kjit.resolve_name(path, keyword)

Threads
-------
libkjit is thread safe, and ctypes releases the GIL for the duration of every call, so
resolves, compiles and loads from several Python threads run in parallel. Error detail is kept
per thread by the library and read right after the failing call, on the same thread.
"""

import collections
import ctypes
import ctypes.util
import enum
import os
import re
import signal
import sys
import threading
import weakref

__all__ = [
    "Status", "KjitError", "LibraryNotFound", "InvalidArgument", "NotFound", "Ambiguous",
    "BadCubin", "KjitIOError", "CompileError", "DriverError", "Library", "Kernel",
    "load_library", "version", "version_string", "status_string", "last_error",
    "resolve_name", "compile", "compile_named", "Compiled", "compile_batch", "BatchItem", "PCH_DEFAULT", "PCH_ON", "PCH_OFF",
    "WORKERS_DEFAULT", "WORKERS_THREADS", "WORKERS_PROCESSES", "WORKERS_AUTOMATIC",
    "load_cached", "compile_and_load", "stats", "SIDECAR_REJECTIONS",
    "cache_dir", "cache_stats", "prune", "verify", "clear", "CacheProblem", "Problem", "VerifyReport",
    "remote_describe",
]


class Status(enum.IntEnum):
    """kjit_status values, as kjit.h fixes them."""
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


# --------------------------------------------------------------------------------------------
# Errors

class KjitError(Exception):
    """A failed libkjit call.

    Attributes: ``status`` (a :class:`Status`, or a plain int for a code this module does not
    know), ``status_name`` (``kjit_status_string(status)``, e.g. ``"not found"``), ``message``
    (``kjit_last_error()`` read right after the failing call: the path, the NVRTC log, the
    candidate list, ...) and ``function`` (the C function that failed, or None).
    """

    def __init__(self, status, status_name, message, function=None):
        super().__init__(status, status_name, message)
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status, self.status_name, self.message, self.function = status, status_name, message, function

    def __str__(self):
        code = f"KJIT_{self.status.name}" if isinstance(self.status, Status) else str(self.status)
        where = f"{self.function}: " if self.function else ""
        return f"{where}{self.status_name} [{code}]: {self.message}"


class LibraryNotFound(KjitError):
    """libkjit.so could not be loaded. ``tried`` lists ``(place, why)`` pairs; ``status`` is None
    (no C call was made)."""

    def __init__(self, tried):
        self.tried = list(tried)
        lines = "\n".join(f"  {place}: {why}" for place, why in self.tried)
        super().__init__(None, "library not found", "could not load libkjit; tried:\n" + lines)

    def __str__(self):
        return self.message


# One subclass per status category; every other status raises KjitError itself.
class InvalidArgument(KjitError, ValueError):
    """KJIT_ERROR_INVALID_ARGUMENT: a bad keyword, arch, option, name expression, ..."""


class NotFound(KjitError):
    """KJIT_ERROR_NOT_FOUND: no symbol matches the keyword."""


class Ambiguous(KjitError):
    """KJIT_ERROR_AMBIGUOUS: several symbols match; the candidates are in ``message``."""


class BadCubin(KjitError):
    """KJIT_ERROR_BAD_CUBIN: not a well-formed CUDA ELF with a symbol table."""


class KjitIOError(KjitError):
    """KJIT_ERROR_IO: a file could not be opened, read or written."""


class CompileError(KjitError):
    """KJIT_ERROR_COMPILE (NVRTC rejected the source; the log is in ``message``) or
    KJIT_ERROR_NVRTC (another NVRTC failure, e.g. an unknown option, or no usable NVRTC: see
    ``$KJIT_LIBNVRTC``)."""


class DriverError(KjitError):
    """KJIT_ERROR_DRIVER_UNAVAILABLE (no usable libcuda.so.1) or KJIT_ERROR_DRIVER."""


_ERROR_CLASSES = {
    Status.ERROR_INVALID_ARGUMENT: InvalidArgument, Status.ERROR_NOT_FOUND: NotFound,
    Status.ERROR_AMBIGUOUS: Ambiguous, Status.ERROR_BAD_CUBIN: BadCubin, Status.ERROR_IO: KjitIOError,
    Status.ERROR_COMPILE: CompileError, Status.ERROR_NVRTC: CompileError,
    Status.ERROR_DRIVER_UNAVAILABLE: DriverError, Status.ERROR_DRIVER: DriverError,
}


# --------------------------------------------------------------------------------------------
# Argument conversion (done before any C call, so bad input never reaches the library)

def _path_bytes(value, what):
    """str, bytes or os.PathLike -> NUL-free bytes in the file system encoding."""
    if value is None or not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be str, bytes or os.PathLike, not {type(value).__name__}")
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL character")
    return raw


def _text_bytes(value, what, allow_bytes=False):
    """str (or bytes if allowed) -> NUL-free UTF-8 bytes."""
    if isinstance(value, str):
        raw = value.encode("utf-8")
    elif allow_bytes and isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    else:
        kinds = "str or bytes" if allow_bytes else "str"
        raise TypeError(f"{what} must be {kinds}, not {type(value).__name__}")
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL character")
    return raw


def _string_array(values, what, convert):
    """An iterable (not a single str/bytes/path) -> (char *[n] holding the converted items, or
    None when empty; n)."""
    if values is None or isinstance(values, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be a sequence, not {type(values).__name__}")
    items = [convert(v, f"{what}[{i}]") for i, v in enumerate(values)]
    return ((ctypes.c_char_p * len(items))(*items) if items else None), len(items)


# --------------------------------------------------------------------------------------------
# The C types

class _Header(ctypes.Structure):
    """kjit_header."""
    _fields_ = [("name", ctypes.c_char_p), ("source", ctypes.c_char_p)]


class _CompileOptions(ctypes.Structure):
    """kjit_compile_options, field for field in header order. ctypes zero-fills a new
    instance, which with struct_size set is exactly KJIT_COMPILE_OPTIONS_INIT."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("cache_dir", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("nvrtc_options", ctypes.POINTER(ctypes.c_char_p)),
        ("nvrtc_option_count", ctypes.c_size_t),
        ("include_paths", ctypes.POINTER(ctypes.c_char_p)),
        ("include_path_count", ctypes.c_size_t),
        ("headers", ctypes.POINTER(_Header)),
        ("header_count", ctypes.c_size_t),
        ("name_expression", ctypes.c_char_p),
        ("max_cache_size", ctypes.c_uint64),
        ("remote_storage", ctypes.c_char_p),  # libkjit 0.6
    ]

    def __init__(self):
        super().__init__()
        # The size of libkjit 0.5's struct unless a 0.6 field is set (below), so that a library
        # older than this module still takes it (it refuses a struct larger than its own).
        self.struct_size = _CompileOptions.remote_storage.offset


# Argument types that are their own memo key (hashing a tuple hashes its items: a list inside
# one raises TypeError, and the arguments are then frozen).
_PLAIN_TYPES = (str, bytes, int, float, type(None), tuple)


def _frozen(value):
    """A hashable stand-in for one of compile's keyword arguments, equal for arguments that
    encode to the same C struct (a list and a tuple of the same strings, say). TypeError for
    what it cannot freeze."""
    if value is None or isinstance(value, (str, bytes, int, float)):
        return value
    if isinstance(value, tuple):
        return ("seq",) + tuple(_frozen(v) for v in value)
    if isinstance(value, os.PathLike):
        return ("path", os.fspath(value))
    if hasattr(value, "items"):
        return ("map",) + tuple((_frozen(k), _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ("seq",) + tuple(_frozen(v) for v in value)
    raise TypeError(f"cannot freeze {type(value).__name__}")


def _compile_options(keep, *, cache_dir=None, arch=None, nvrtc_options=(), include_paths=(), headers=None,
                     name_expression=None, max_cache_size=None, remote_storage=None):
    """kjit_compile's keyword arguments -> a _CompileOptions; what it points at goes in ``keep``."""
    opts = _CompileOptions()
    if remote_storage is not None:
        opts.remote_storage = _text_bytes(remote_storage, "remote_storage")
        opts.struct_size = ctypes.sizeof(_CompileOptions)
    if cache_dir is not None:
        opts.cache_dir = _path_bytes(cache_dir, "cache_dir")
    if arch is not None:
        opts.arch = _text_bytes(arch, "arch")
    if name_expression is not None:
        opts.name_expression = _text_bytes(name_expression, "name_expression")
    if max_cache_size is not None:
        if max_cache_size == float("inf"):
            opts.max_cache_size = 2**64 - 1
        elif isinstance(max_cache_size, int) and 0 < max_cache_size < 2**64 - 1:
            opts.max_cache_size = max_cache_size
        else:
            raise ValueError(f"max_cache_size must be a positive int (bytes) or inf, not {max_cache_size!r}")
    options, opts.nvrtc_option_count = _string_array(nvrtc_options, "nvrtc_options", _text_bytes)
    paths, opts.include_path_count = _string_array(include_paths, "include_paths", _path_bytes)
    opts.nvrtc_options, opts.include_paths = options, paths
    keep += [options, paths, opts]
    if headers:
        pairs = list(headers.items()) if hasattr(headers, "items") else list(headers)
        if not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
            raise TypeError("headers must be a mapping or a sequence of (name, source) pairs")
        hdrs = (_Header * len(pairs))(*[
            _Header(_text_bytes(n, f"headers[{i}] name"), _text_bytes(s, f"headers[{i}] source", True))
            for i, (n, s) in enumerate(pairs)])
        opts.headers, opts.header_count = hdrs, len(pairs)
        keep.append(hdrs)
    return opts


# kjit_pch_mode
PCH_DEFAULT, PCH_ON, PCH_OFF = 0, 1, 2
# kjit_worker_kind (libkjit 0.5)
WORKERS_DEFAULT, WORKERS_THREADS, WORKERS_PROCESSES, WORKERS_AUTOMATIC = 0, 1, 2, 3


class Compiled(collections.namedtuple("Compiled", "cubin_path name")):
    """What :meth:`Library.compile_named` returns: the cached cubin's path and the kernel's
    mangled name in it (both str)."""
    __slots__ = ()


class _CompileRequest(ctypes.Structure):
    """kjit_compile_request."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("source", ctypes.c_char_p), ("keyword", ctypes.c_char_p),
                ("options", ctypes.POINTER(_CompileOptions))]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(_CompileRequest)


# kjit_batch_progress_fn
_PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                ctypes.c_int, ctypes.c_char_p)


class _BatchOptions(ctypes.Structure):
    """kjit_batch_options."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("workers", ctypes.c_uint), ("pch", ctypes.c_int),
                ("progress", _PROGRESS_FN), ("progress_user_data", ctypes.c_void_p), ("worker_kind", ctypes.c_int),
                ("reserved", ctypes.c_int)]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(_BatchOptions)


class BatchItem(collections.namedtuple("BatchItem", "status cubin_path error")):
    """One item of :meth:`Library.compile_batch`: ``status`` (a :class:`Status`), ``cubin_path``
    (str, None unless OK) and ``error`` (the text kjit_last_error() would give for it: the NVRTC
    log of a compile error; "" when OK). ``ok`` is True on success. ``kernel_name`` is the
    kernel's mangled name in the cubin (None unless OK; from libkjit 0.5 on, else None): an
    attribute, not a fourth field, so ``status, path, error = item`` still works."""

    def __new__(cls, status, cubin_path, error, kernel_name=None):
        self = super().__new__(cls, status, cubin_path, error)
        self.kernel_name = kernel_name
        return self

    @property
    def ok(self):
        return self.status == Status.OK


# kjit_sidecar_rejection, in enum order (the index into kjit_stats.sidecar_rejections).
SIDECAR_REJECTIONS = ("unreadable", "too_large", "empty", "bare_name", "bad_header", "no_line", "stale",
                      "name_fails_rule", "distrusted")
_STATS_COUNTERS = ("compile_hits", "compile_misses", "compile_shared_waits", "nvrtc_compiles", "nvrtc_nanoseconds",
                   "entries_published", "entries_rebuilt", "sidecar_hits", "sidecar_content_checks", "memo_hits",
                   "sidecar_missing")
_STATS_COUNTERS_2 = ("scans", "sidecar_writes", "sidecar_write_failures", "loads", "load_reuses", "driver_loads",
                     "load_self_heals", "eviction_runs", "evicted_entries", "evicted_bytes")


# The cluster tier's counters (libkjit 0.6).
_STATS_REMOTE = ("remote_hits", "remote_misses", "remote_errors", "remote_timeouts", "remote_corrupt", "remote_puts",
                 "remote_bytes_in", "remote_bytes_out", "remote_leases_owned", "remote_lease_waits",
                 "remote_lease_takeovers", "remote_shared_failures")


class _Stats(ctypes.Structure):
    """kjit_stats, field for field in header order."""
    _fields_ = ([("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in _STATS_COUNTERS] +
                [("sidecar_rejections", ctypes.c_uint64 * 16)] + [(n, ctypes.c_uint64) for n in _STATS_COUNTERS_2] +
                [("errors", ctypes.c_uint64 * 32), ("swept_temp_folders", ctypes.c_uint64)] +
                [(n, ctypes.c_uint64) for n in _STATS_REMOTE])

    def __init__(self, with_remote=True):
        super().__init__()
        # A library older than 0.6 refuses a struct larger than its own: it gets its own size.
        self.struct_size = ctypes.sizeof(_Stats) if with_remote else _Stats.remote_hits.offset


class _CacheSummary(ctypes.Structure):
    """kjit_cache_summary, field for field in header order."""
    _COUNTS = ("entries", "bytes", "max_size", "in_transit", "in_transit_bytes", "foreign")
    _TIMES = ("least_recent_use_ns", "most_recent_use_ns", "oldest_created_ns", "newest_created_ns")
    _fields_ = ([("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in _COUNTS] +
                [(n, ctypes.c_int64) for n in _TIMES])

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(_CacheSummary)


# KJIT_PRUNE_NO_LIMIT
_PRUNE_NO_LIMIT = 2**64 - 1


class _PruneOptions(ctypes.Structure):
    """kjit_prune_options. Filled by kjit_prune_options_init, not by hand: ctypes' zero fill
    would mean "remove everything not in use", not the defaults."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_size", ctypes.c_uint64), ("older_than_s", ctypes.c_uint64)]


class _PruneReport(ctypes.Structure):
    """kjit_prune_report."""
    _COUNTS = ("removed_entries", "removed_bytes", "spared_in_use", "removed_in_transit", "removed_variants_files",
               "kept_entries", "kept_bytes")
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in _COUNTS]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(_PruneReport)


class CacheProblem(enum.IntEnum):
    """kjit_cache_problem: what :func:`verify` found wrong with a path."""
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


class Problem(collections.namedtuple("Problem", "path kind detail fixed action")):
    """One finding of :func:`verify`: ``path`` (str: the entry folder, or a temp folder or file),
    ``kind`` (a :class:`CacheProblem`, or an int a newer libkjit knows), ``detail`` (str, naming
    the file), ``fixed`` (bool) and ``action`` (str: what ``fix`` did; "" without it)."""
    __slots__ = ()


class VerifyReport(collections.namedtuple("VerifyReport", "cache_dir entries_checked entries_ok problems")):
    """What :func:`verify` found: the absolute ``cache_dir``, ``entries_checked``, ``entries_ok``
    and ``problems`` (a list of :class:`Problem`). ``clean`` is True when nothing was found or
    everything found was fixed."""
    __slots__ = ()

    @property
    def clean(self):
        return all(p.fixed for p in self.problems)


_P = ctypes.c_void_p
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_BUF = ctypes.POINTER(ctypes.c_char)
_PROTOTYPES = {  # name: (restype, argtypes); kjit_status is a C enum, i.e. int
    "kjit_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "kjit_last_error": (ctypes.c_char_p, []),
    "kjit_version": (ctypes.c_uint, []),
    "kjit_version_string": (ctypes.c_char_p, []),
    "kjit_resolve_name": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, _BUF, ctypes.c_size_t, _SIZE_P]),
    "kjit_compile": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_CompileOptions),
                                    _BUF, ctypes.c_size_t, _SIZE_P]),
    "kjit_load_cached": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "kjit_kernel_name": (ctypes.c_char_p, [_P]),
    "kjit_kernel_cubin_path": (ctypes.c_char_p, [_P]),
    "kjit_kernel_cukernel": (_P, [_P]),
    "kjit_kernel_culibrary": (_P, [_P]),
    "kjit_kernel_cufunction": (ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    "kjit_kernel_release": (None, [_P]),
}
# Entry points of later releases: looked up when present, so an older libkjit still loads.
_OPTIONAL_PROTOTYPES = {
    "kjit_get_stats": (ctypes.c_int, [ctypes.POINTER(_Stats)]),  # 0.2
    "kjit_compile_batch": (ctypes.c_int, [ctypes.POINTER(ctypes.POINTER(_CompileRequest)), ctypes.c_size_t,
                                          ctypes.POINTER(_BatchOptions), ctypes.POINTER(_P)]),  # 0.3
    "kjit_batch_result_count": (ctypes.c_size_t, [_P]),
    "kjit_batch_result_status": (ctypes.c_int, [_P, ctypes.c_size_t]),
    "kjit_batch_result_cubin_path": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "kjit_batch_result_error": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "kjit_batch_result_release": (None, [_P]),
    "kjit_cache_dir": (ctypes.c_int, [ctypes.c_char_p, _BUF, ctypes.c_size_t, _SIZE_P]),  # 0.4
    "kjit_remote_describe": (ctypes.c_int, [ctypes.c_char_p, _BUF, ctypes.c_size_t, _SIZE_P]),  # 0.6
    "kjit_compile_named": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_CompileOptions),
                                          _BUF, ctypes.c_size_t, _SIZE_P, _BUF, ctypes.c_size_t, _SIZE_P]),  # 0.5
    "kjit_batch_result_kernel_name": (ctypes.c_char_p, [_P, ctypes.c_size_t]),  # 0.5
    "kjit_compile_and_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_CompileOptions),
                                             ctypes.POINTER(_P)]),  # 0.5
    "kjit_cache_summarize": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_CacheSummary), ctypes.POINTER(_P)]),
    "kjit_cache_arches_count": (ctypes.c_size_t, [_P]),
    "kjit_cache_arches_name": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "kjit_cache_arches_entries": (ctypes.c_uint64, [_P, ctypes.c_size_t]),
    "kjit_cache_arches_bytes": (ctypes.c_uint64, [_P, ctypes.c_size_t]),
    "kjit_cache_arches_release": (None, [_P]),
    "kjit_prune_options_init": (ctypes.c_int, [ctypes.POINTER(_PruneOptions), ctypes.c_size_t]),
    "kjit_cache_prune": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_PruneOptions), ctypes.POINTER(_PruneReport)]),
    "kjit_cache_clear": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_PruneReport)]),
    "kjit_cache_verify": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_P)]),
    "kjit_verify_report_entries_checked": (ctypes.c_size_t, [_P]),
    "kjit_verify_report_entries_ok": (ctypes.c_size_t, [_P]),
    "kjit_verify_report_count": (ctypes.c_size_t, [_P]),
    "kjit_verify_report_path": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "kjit_verify_report_kind": (ctypes.c_int, [_P, ctypes.c_size_t]),
    "kjit_verify_report_detail": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "kjit_verify_report_fixed": (ctypes.c_int, [_P, ctypes.c_size_t]),
    "kjit_verify_report_action": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "kjit_verify_report_release": (None, [_P]),
}


# Launching (Kernel.launch): the driver, as libkjit finds it, and the argument conventions.
_CORE_OWNERS = {}
_driver_lib = None
_driver_lock = threading.Lock()


def _driver():
    """The CUDA driver library (``$KJIT_LIBCUDA``, else ``libcuda.so.1``: the one libkjit
    loads), with cuLaunchKernel and cuGetErrorName declared."""
    global _driver_lib
    with _driver_lock:
        if _driver_lib is None:
            name = os.environ.get("KJIT_LIBCUDA") or "libcuda.so.1"
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                raise DriverError(Status.ERROR_DRIVER_UNAVAILABLE, "driver unavailable",
                                  f"cannot load the CUDA driver {name!r} to launch: {e}", "Kernel.launch") from None
            lib.cuLaunchKernel.restype = ctypes.c_int
            lib.cuLaunchKernel.argtypes = ([ctypes.c_void_p] + [ctypes.c_uint] * 7 +
                                           [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
            lib.cuGetErrorName.restype = ctypes.c_int
            lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            _driver_lib = lib
        return _driver_lib


def _driver_error(driver, result, what):
    text = ctypes.c_char_p()
    name = (text.value.decode() if driver.cuGetErrorName(result, ctypes.byref(text)) == 0 and text.value
            else f"CUresult {result}")
    return DriverError(Status.ERROR_DRIVER, "driver error", f"{what} failed: {name}", "Kernel.launch")


def _dims(value, what):
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise ValueError(f"{what} must be a positive int or a tuple of 1 to 3 of them, not {value!r}")
    return dims + (1,) * (3 - len(dims))


def _kernel_arg(value, index):
    """One kernel argument as a ctypes value whose address goes into kernelParams."""
    if isinstance(value, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
        return value
    if hasattr(value, "data_ptr") and callable(value.data_ptr):  # a PyTorch tensor
        return ctypes.c_void_p(value.data_ptr())
    interface = getattr(value, "__cuda_array_interface__", None)  # CuPy, Numba, cuda.core
    if interface is not None:
        return ctypes.c_void_p(interface["data"][0])
    if isinstance(getattr(value, "ptr", None), int):  # a CuPy MemoryPointer
        return ctypes.c_void_p(value.ptr)
    raise TypeError(f"kernel argument {index}: {type(value).__name__} {value!r} has no C type: pass a ctypes value "
                    "(ctypes.c_int(n), ctypes.c_float(x), ctypes.c_void_p(pointer)) or a device array")


def _stream_handle(stream):
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):  # cuda.core's protocol: (version, handle)
        return int(stream.__cuda_stream__()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):  # PyTorch, CuPy, others
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise TypeError(f"stream: {type(stream).__name__} is not a CUDA stream (an int CUstream, "
                    "torch.cuda.current_stream(), a CuPy or cuda.core stream)")


_C_FIELD = re.compile(r"\bkjit_(?:compile_options|batch_options|compile_request)\.([a-z_]+)")


def _in_python_terms(message):
    """libkjit's message with the C struct fields it names as this module's keyword arguments:
    ``kjit_compile_options.arch`` reads ``arch=``."""
    return _C_FIELD.sub(lambda m: m.group(1) + "=", message)


def _nvrtc_from_wheel():
    """In the installed package, with $KJIT_LIBNVRTC unset: points it at the NVRTC of the
    ``nvidia-cuda-nvrtc`` wheel, when one of the major libkjit was built against is installed
    (``nvidia/cu<major>/lib``, or ``nvidia/cuda_nvrtc/lib`` for 12 and older), as cuda-python
    does; libkjit opens it at the first compile, and the worker processes inherit the variable.
    Returns the path set, or None (unset: libkjit's own search decides)."""
    if os.environ.get("KJIT_LIBNVRTC"):
        return None
    try:
        from ._build import NVRTC_MAJOR  # only in the installed package
    except ImportError:
        return None
    name = f"libnvrtc.so.{NVRTC_MAJOR}"
    for entry in sys.path:
        for folder in (f"cu{NVRTC_MAJOR}", "cuda_nvrtc"):
            candidate = os.path.join(entry or os.getcwd(), "nvidia", folder, "lib", name)
            if os.path.isfile(candidate):
                os.environ["KJIT_LIBNVRTC"] = candidate
                return candidate
    return None


def _open_cdll(path):
    """Loads libkjit per the search order in the module docstring -> (CDLL, where)."""
    tried = []
    if path is not None:
        target = os.fsdecode(_path_bytes(path, "library path"))
        places = [(f"explicit path {target!r}", target)]
    elif os.environ.get("KJIT_LIBRARY"):
        target = os.environ["KJIT_LIBRARY"]
        places = [(f"$KJIT_LIBRARY={target!r}", target)]
    else:
        tried.append(("$KJIT_LIBRARY", "not set"))
        places = []
        beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkjit.so.0")
        if os.path.exists(beside):
            places.append((f"beside this module: {beside!r}", beside))
        else:
            tried.append((f"beside this module ({beside!r})", "no such file"))
        found = ctypes.util.find_library("kjit")
        if found:
            places.append((f"ctypes.util.find_library('kjit') -> {found!r}", found))
        else:
            tried.append(("ctypes.util.find_library('kjit')", "found nothing"))
        places += [(f"dlopen({n!r})", n) for n in ("libkjit.so.0", "libkjit.so")]
    for place, target in places:
        try:
            return ctypes.CDLL(target), target
        except OSError as e:
            tried.append((place, str(e)))
    raise LibraryNotFound(tried)


# --------------------------------------------------------------------------------------------
# Signals during a batch (Ctrl-C)
#
# kjit_compile_batch runs in C with the GIL released, and Python runs a signal's handler only
# when the main thread runs bytecode again: during a batch, at the first instruction of the
# progress callback ctypes calls. An exception raised there (KeyboardInterrupt, from SIGINT's
# default handler) comes before any ``try`` the callback has, so ctypes prints "Exception
# ignored on calling ctypes callback function" and hands libkjit an undefined return value.
# So while a batch runs in the main thread, _SignalGate stands in for every Python-level signal
# handler: it runs the real one only "armed" (inside the callback's ``try``, or inside the
# user's callback), and otherwise records the signal, for the next callback or the end of the
# batch to run its handler where what it raises is caught. Nothing is delayed beyond what C
# would delay anyway: no handler could run while the batch was in C.

class _SignalGate:
    """The stand-in for Python's signal handlers while batches run in the main thread. Used
    from the main thread only (the only one that runs signal handlers)."""

    def __init__(self):
        self.depth = 0        # compile_batch calls under way (more than 1: one from a callback)
        self.armed = False    # True only where a handler's exception is caught (the callback's try)
        self.handlers = {}    # signal number -> the program's handler the gate stands in for
        self.pending = []     # (signal number, frame) recorded while not armed, oldest first
        self.handler = self._on_signal  # one bound method, so signal.getsignal() can be compared

    def _on_signal(self, signum, frame):
        if self.armed:
            self._run(signum, frame)
        else:
            self.pending.append((signum, frame))

    def _run(self, signum, frame):
        handler = self.handlers.get(signum)
        if callable(handler):
            handler(signum, frame)

    def deliver(self):
        """Runs the recorded signals' handlers, all of them; re-raises the first exception one
        raised (a second interrupt adds nothing to the first)."""
        first = None
        while self.pending:
            signum, frame = self.pending.pop(0)
            try:
                self._run(signum, frame)
            except BaseException as e:  # noqa: BLE001 (re-raised below)
                first = first or e
        if first is not None:
            raise first

    def enter(self):
        """Called by compile_batch before the C call; returns what leave() needs. The outermost
        batch installs the gate for every signal with a Python handler. May raise what a
        handler of a signal that came before the batch raises; then nothing is left changed."""
        if self.depth == 0:
            try:
                for signum in signal.valid_signals():
                    current = signal.getsignal(signum)
                    if callable(current) and current is not self.handler:
                        # Recorded first: signal.signal() runs pending handlers before it swaps,
                        # and may raise on either side of the swap.
                        self.handlers[signum] = current
                        signal.signal(signum, self.handler)
            except BaseException:
                self._restore()
                try:
                    self.deliver()  # what was recorded meanwhile: the first exception wins
                except BaseException:  # noqa: BLE001,S110
                    pass
                self.handlers.clear()
                raise
        self.depth += 1
        was_armed, self.armed = self.armed, False
        return was_armed

    def leave(self, was_armed):
        """Called by compile_batch after the C call. The outermost batch puts the program's
        handlers back. Runs the signals recorded meanwhile (the outermost batch, or one called
        from a callback, where an exception is caught) and returns the first exception their
        handlers raised, or None."""
        self.depth -= 1
        late = self._restore() if self.depth == 0 else None
        self.armed = was_armed
        if self.depth == 0 or was_armed:
            try:
                self.deliver()
            except BaseException as e:  # noqa: BLE001 (returned)
                late = late or e
            if self.depth == 0:
                self.handlers.clear()
        return late

    def _restore(self):
        """Puts the program's handlers back where the gate still stands (a handler the program
        set meanwhile stays). Returns the first exception a handler raised on the way."""
        first = None
        for signum, handler in self.handlers.items():
            while True:
                try:
                    if signal.getsignal(signum) is self.handler:
                        signal.signal(signum, handler)
                    break
                except BaseException as e:  # noqa: BLE001: a handler put back already ran; again
                    first = first or e
        return first


_signal_gate = _SignalGate()


# --------------------------------------------------------------------------------------------
# Library: one loaded libkjit.so

class Library:
    """One loaded libkjit.so with every entry point declared. ``path`` as in the module
    docstring; None means ``$KJIT_LIBRARY``, then the search. All methods are thread safe."""

    # First buffer sizes for out strings; a longer result is retried with the reported length.
    name_buffer_size = 512
    path_buffer_size = 512
    # Compile options encoded once per distinct set of keyword arguments (libkjit only reads
    # them), so a hit does not build the C struct again; emptied when it holds this many.
    _OPTIONS_MEMO_MAX = 256

    def __init__(self, path=None):
        cdll, self.path = _open_cdll(path)
        _nvrtc_from_wheel()
        self._options_memo = {}
        self._fn = {}
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                raise LibraryNotFound([(self.path, f"loaded, but has no symbol {name} (too old?)")]) from None
            fn.restype, fn.argtypes = restype, argtypes
            self._fn[name] = fn
        for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
            fn = getattr(cdll, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
                self._fn[name] = fn
        self._cdll = cdll

    def __repr__(self):
        return f"<kjit.Library {self.path!r} {self.version_string()}>"

    def _error(self, status, function):
        """The KjitError for a failed call; reads kjit_last_error() first, before anything else."""
        message = _in_python_terms(self._fn["kjit_last_error"]().decode("utf-8", "replace"))
        name = self.status_string(status)
        return _ERROR_CLASSES.get(status, KjitError)(status, name, message, function)

    def _string_out(self, function, args, size):
        """Calls a function that ends in (buf, size, *len); grows the buffer on
        KJIT_ERROR_BUFFER_TOO_SMALL to the reported length. -> bytes."""
        fn = self._fn[function]
        for _ in range(4):  # the needed length only changes if the file is replaced meanwhile
            buf, length = ctypes.create_string_buffer(size), ctypes.c_size_t(0)
            status = fn(*args, buf, size, ctypes.byref(length))
            if status == Status.OK:
                return buf.raw[:length.value]
            if status != Status.ERROR_BUFFER_TOO_SMALL:
                raise self._error(status, function)
            size = max(length.value + 1, size * 2)
        raise self._error(status, function)

    def version(self):
        """The run-time version as (major, minor, patch), from kjit_version()."""
        n = self._fn["kjit_version"]()
        return (n // 10000, n // 100 % 100, n % 100)

    def version_string(self):
        """The run-time version as text, e.g. "0.1.0"."""
        return self._fn["kjit_version_string"]().decode("ascii", "replace")

    def status_string(self, status):
        """kjit_status_string: the English name of a status code ("unknown status" if unknown)."""
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError(f"status must be int, not {type(status).__name__}")
        if not -2**31 <= status < 2**31:
            raise ValueError(f"status {status} is outside the range of a C int")
        return self._fn["kjit_status_string"](status).decode("utf-8", "replace")

    def last_error(self):
        """kjit_last_error(): this thread's detail text of its last failed libkjit call."""
        return self._fn["kjit_last_error"]().decode("utf-8", "replace")

    def resolve_name(self, cubin_path, keyword):
        """The mangled name of kernel ``keyword`` in the cubin at ``cubin_path`` (str, bytes or
        os.PathLike), on the sidecar fast path. Raises KjitError (NotFound, Ambiguous,
        BadCubin, KjitIOError, InvalidArgument, ...)."""
        args = (_path_bytes(cubin_path, "cubin_path"), _text_bytes(keyword, "keyword"))
        return self._string_out("kjit_resolve_name", args, self.name_buffer_size).decode("utf-8", "replace")

    def compile(self, source, keyword, *, cache_dir=None, arch=None, nvrtc_options=(),
                include_paths=(), headers=None, name_expression=None, max_cache_size=None, remote_storage=None):
        """Compiles ``source`` (str or bytes) with NVRTC into the cubin cache, or finds it there,
        and returns the cubin's absolute path (str). One keyword argument per field of
        kjit_compile_options; None/empty is the library default:

        - ``cache_dir``: $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else ~/.cache/kjit;
        - ``arch``: a real architecture like "sm_90a"; default $KJIT_ARCH, else the GPU's;
        - ``nvrtc_options``: a sequence of str, e.g. ("-std=c++17", "-DTILE=128"); no -arch;
          "--pch" compiles with libkjit's PCH (a folder per header identity); "--create-pch",
          "--use-pch" and "--pch-dir" raise InvalidArgument (docs/batch.md);
        - ``include_paths``: a sequence of folders (str, bytes, os.PathLike);
        - ``headers``: in-memory headers, a mapping {include name: text} or (name, text) pairs;
        - ``name_expression``: e.g. "gemm<128, 64>"; its lowered name must match ``keyword``;
        - ``max_cache_size``: the cache's size limit in bytes (int); default $KJIT_CACHE_MAX_SIZE,
          else none; ``float("inf")`` for no limit whatever the variable says;
        - ``remote_storage``: the cluster tier, e.g. "redis://cache-host:6379 namespace=llm", or
          "none"; default $KJIT_REMOTE_STORAGE (docs/remote.md; libkjit 0.6).

        Raises CompileError (the NVRTC log is in ``.message``), InvalidArgument, KjitIOError, ...
        """
        src = _text_bytes(source, "source", allow_bytes=True)
        kw = _text_bytes(keyword, "keyword")
        opts = self._options_for(cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                                 include_paths=include_paths, headers=headers, name_expression=name_expression,
                                 max_cache_size=max_cache_size, remote_storage=remote_storage)
        path = self._string_out("kjit_compile", (src, kw, ctypes.byref(opts)), self.path_buffer_size)
        return os.fsdecode(path)

    def _options_for(self, cache_dir=None, arch=None, nvrtc_options=(), include_paths=(), headers=None,
                     name_expression=None, max_cache_size=None, remote_storage=None):
        """The _CompileOptions for compile's keyword arguments: made once per distinct set and
        kept, with what it points at, in a small memo. Plain values (str, bytes, numbers, None,
        tuples of them) are the key as they are; lists, mappings and paths are frozen first;
        what cannot be frozen (a generator, say) is encoded anew each time."""
        key = (cache_dir, arch, nvrtc_options, include_paths, headers, name_expression, max_cache_size, remote_storage)
        try:
            if not all(type(v) in _PLAIN_TYPES for v in key):
                key = tuple(_frozen(v) for v in key)
            made = self._options_memo.get(key)
        except TypeError:
            key, made = None, None
        if made is not None:
            return made[0]
        keep = []  # everything the struct points at, alive as long as the struct is used
        opts = _compile_options(keep, cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                                include_paths=include_paths, headers=headers, name_expression=name_expression,
                                max_cache_size=max_cache_size, remote_storage=remote_storage)
        if key is not None:
            if len(self._options_memo) >= self._OPTIONS_MEMO_MAX:
                self._options_memo.clear()
            self._options_memo[key] = (opts, keep)
        return opts

    def compile_named(self, source, keyword, **options):
        """:meth:`compile` that also gives the kernel's name: a :class:`Compiled` (cubin_path,
        name), both from one look-up in the cache (kjit_compile_named, libkjit 0.5); what
        :meth:`compile` then :func:`resolve_name` would give. Same keyword arguments and errors as
        :meth:`compile`. With an older libkjit, it calls those two."""
        fn = self._fn.get("kjit_compile_named")
        if fn is None:
            path = self.compile(source, keyword, **options)
            return Compiled(path, self.resolve_name(path, keyword))
        src, kw, opts = self._compile_arguments("compile_named", source, keyword, options)
        path_size, name_size = self.path_buffer_size, 256
        for _ in range(4):  # the lengths only change if the entry is replaced meanwhile
            path, name = ctypes.create_string_buffer(path_size), ctypes.create_string_buffer(name_size)
            path_len, name_len = ctypes.c_size_t(0), ctypes.c_size_t(0)
            status = fn(src, kw, ctypes.byref(opts), path, path_size, ctypes.byref(path_len), name, name_size,
                        ctypes.byref(name_len))
            if status == Status.OK:
                return Compiled(os.fsdecode(path.raw[:path_len.value]), name.raw[:name_len.value].decode("ascii"))
            if status != Status.ERROR_BUFFER_TOO_SMALL:
                raise self._error(status, "kjit_compile_named")
            path_size, name_size = max(path_len.value + 1, path_size), max(name_len.value + 1, name_size)
        raise self._error(status, "kjit_compile_named")

    _COMPILE_KEYWORDS = ("cache_dir", "arch", "nvrtc_options", "include_paths", "headers", "name_expression",
                         "max_cache_size", "remote_storage")

    def _compile_arguments(self, method, source, keyword, options):
        """(source, keyword, options struct) for the C call of ``method``, which takes
        :meth:`compile`'s keyword arguments as ``**options``. TypeError for an unknown one."""
        for name in options:
            if name not in self._COMPILE_KEYWORDS:
                raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")
        return (_text_bytes(source, "source", allow_bytes=True), _text_bytes(keyword, "keyword"),
                self._options_for(**options))

    def compile_batch(self, requests, *, workers=None, pch=PCH_DEFAULT, progress=None, worker_kind=WORKERS_DEFAULT,
                      **options):
        """Compiles many kernels at once (kjit_compile_batch) and returns one :class:`BatchItem`
        per request, in order. Needs libkjit 0.3 or later.

        - ``requests``: a sequence of ``(source, keyword)`` pairs, or of dicts with ``source``,
          ``keyword`` and any of :meth:`compile`'s keyword arguments for that item alone.
        - ``**options``: :meth:`compile`'s keyword arguments (``cache_dir``, ``arch``,
          ``nvrtc_options``, ...) for every item; an item's dict overrides them.
        - ``workers``: workers (default $KJIT_JOBS, else the CPUs); ``pch``: PCH_DEFAULT,
          PCH_ON or PCH_OFF (NVRTC's automatic precompiled header; by default for misses
          that share their headers with another miss of the batch).
        - ``worker_kind``: WORKERS_THREADS, WORKERS_PROCESSES (kjit-worker processes beside
          libkjit.so, ended with the batch), WORKERS_AUTOMATIC (processes when misses include
          headers and more than one worker compiles: NVRTC compiles those one at a time within
          a process), or WORKERS_DEFAULT ($KJIT_WORKER_KIND, else automatic). Needs libkjit 0.5
          unless WORKERS_DEFAULT.
        - ``progress``: called as ``progress(done, total, index, status, cubin_path)`` for each
          finished item, on this thread (hits first); return True to cancel the items not yet
          started, which then have status ERROR_CANCELLED. An exception raised in it cancels
          too (it is not called again) and is re-raised once the batch has returned.

        Ctrl-C (SIGINT) cancels the batch at the next item that finishes, with or without
        ``progress``, and raises KeyboardInterrupt once the items compiling have finished; every
        item that compiled is in the cache. In the main thread, while the call runs, Python's
        signal handlers are stood in for by one that runs them between items (so
        signal.getsignal() shows it); they are back when the call returns or raises.

        Hits are answered at once, identical requests compile once, and one item's failure does
        not affect the others: failures are in the items, not raised. Raises InvalidArgument
        for a malformed call (bad ``pch``, malformed $KJIT_JOBS), TypeError/ValueError for bad
        Python arguments, before anything compiles.
        """
        fn = self._fn.get("kjit_compile_batch")
        if fn is None:
            raise LibraryNotFound([(self.path, "loaded, but has no kjit_compile_batch (libkjit older than 0.3)")])
        for name in options:
            if name not in self._COMPILE_KEYWORDS:
                raise TypeError(f"compile_batch() got an unexpected keyword argument {name!r}")
        if isinstance(requests, (str, bytes)):
            raise TypeError("requests must be a sequence of (source, keyword) pairs or dicts")
        keep, structs = [], []
        for i, item in enumerate(requests):
            if isinstance(item, dict):
                extra = {k: v for k, v in item.items() if k not in ("source", "keyword")}
                for name in extra:
                    if name not in self._COMPILE_KEYWORDS:
                        raise TypeError(f"requests[{i}] has an unexpected key {name!r}")
                if "source" not in item or "keyword" not in item:
                    raise TypeError(f"requests[{i}] needs 'source' and 'keyword'")
                source, keyword, item_options = item["source"], item["keyword"], {**options, **extra}
            elif isinstance(item, tuple) and len(item) == 2:
                (source, keyword), item_options = item, options
            else:
                raise TypeError(f"requests[{i}] must be a (source, keyword) pair or a dict")
            request = _CompileRequest()
            request.source = _text_bytes(source, f"requests[{i}] source", allow_bytes=True)
            request.keyword = _text_bytes(keyword, f"requests[{i}] keyword")
            request.options = ctypes.pointer(_compile_options(keep, **item_options))
            structs.append(request)
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or
                                    not 0 <= workers < 2**32):
            raise ValueError(f"workers must be a non-negative int, not {workers!r}")
        batch = _BatchOptions()
        batch.workers = workers or 0
        if isinstance(pch, bool) or not isinstance(pch, int):
            raise TypeError(f"pch must be PCH_DEFAULT, PCH_ON or PCH_OFF, not {pch!r}")
        batch.pch = pch
        if isinstance(worker_kind, bool) or worker_kind not in (WORKERS_DEFAULT, WORKERS_THREADS, WORKERS_PROCESSES,
                                                                 WORKERS_AUTOMATIC):
            raise ValueError("worker_kind must be WORKERS_DEFAULT, WORKERS_THREADS, WORKERS_PROCESSES or "
                             f"WORKERS_AUTOMATIC, not {worker_kind!r}")
        batch.worker_kind = worker_kind
        if worker_kind == WORKERS_DEFAULT:
            # The struct as libkjit 0.3 and 0.4 know it, which they would refuse a byte longer.
            batch.struct_size = _BatchOptions.worker_kind.offset
        # The progress callback is always ours: it runs the user's callback, if any, and the
        # signal handlers Python could not run while the batch was in C (see _SignalGate), where
        # what they raise is caught. An exception cancels the batch (the user's callback is not
        # called again) and is raised once kjit_compile_batch has returned; the items that
        # finished are published in the cache all the same.
        raised = []
        gate = _signal_gate if threading.current_thread() is threading.main_thread() else None

        def on_item(_user, done, total, index, status, path):
            # A handler that runs here, before the try, is the gate's, which only records.
            decision = 1
            try:
                if gate is not None:
                    gate.armed = True
                    gate.deliver()
                if raised:
                    decision = 1
                elif progress is None:
                    decision = 0
                else:
                    try:
                        status = Status(status)
                    except ValueError:
                        pass
                    decision = 1 if progress(done, total, index, status, os.fsdecode(path) if path else None) else 0
                if gate is not None:
                    gate.armed = False
            except BaseException as e:  # noqa: BLE001: re-raised after the call, never through C
                if gate is not None:
                    gate.armed = False
                decision = 1
                raised.append(e)
            return decision

        batch.progress = _PROGRESS_FN(on_item)
        array = (ctypes.POINTER(_CompileRequest) * len(structs))(*[ctypes.pointer(r) for r in structs])
        result = _P()
        was_armed = gate.enter() if gate is not None else False
        try:
            status = fn(array, len(structs), ctypes.byref(batch), ctypes.byref(result))
            if not result.value:
                raise self._error(status, "kjit_compile_batch")
            items = self._batch_items(result)
        finally:
            late = gate.leave(was_armed) if gate is not None else None
            if late is not None and not raised:
                raise late
        if raised:
            raise raised[0]
        return items

    def _batch_items(self, result):
        """The BatchItems of a kjit_batch_result, which it releases."""
        try:
            items = []
            for i in range(self._fn["kjit_batch_result_count"](result)):
                item_status = self._fn["kjit_batch_result_status"](result, i)
                try:
                    item_status = Status(item_status)
                except ValueError:
                    pass
                path = self._fn["kjit_batch_result_cubin_path"](result, i)
                error = self._fn["kjit_batch_result_error"](result, i) or b""
                name_of = self._fn.get("kjit_batch_result_kernel_name")
                name = name_of(result, i) if name_of is not None else None
                items.append(BatchItem(item_status, os.fsdecode(path) if path else None,
                                       error.decode("utf-8", "replace"), name.decode("ascii") if name else None))
        finally:
            self._fn["kjit_batch_result_release"](result)
        return items

    def stats(self):
        """A snapshot of libkjit's process-wide counters (kjit_get_stats) as a dict: every
        counter of kjit_stats by name; ``sidecar_rejections`` as {reason: count} and ``errors``
        as {status name: count}, both listing only non-zero entries. Counters only grow: subtract
        two snapshots to measure a stretch of work. Needs libkjit 0.2 or later."""
        fn = self._fn.get("kjit_get_stats")
        if fn is None:
            raise LibraryNotFound([(self.path, "loaded, but has no kjit_get_stats (libkjit older than 0.2)")])
        with_remote = "kjit_remote_describe" in self._fn
        out = _Stats(with_remote)
        status = fn(ctypes.byref(out))
        if status != 0:
            raise self._error(status, "kjit_get_stats")
        names = _STATS_COUNTERS + _STATS_COUNTERS_2 + ("swept_temp_folders",) + (_STATS_REMOTE if with_remote else ())
        result = {n: getattr(out, n) for n in names}
        result["sidecar_rejections"] = {r: out.sidecar_rejections[i] for i, r in enumerate(SIDECAR_REJECTIONS)
                                        if out.sidecar_rejections[i]}
        result["errors"] = {self.status_string(i): out.errors[i] for i in range(1, 32) if out.errors[i]}
        return result

    # -- Cache maintenance (libkjit 0.4): what `kjit cache stats/prune/verify/clear` do ---------

    def _needs(self, function):
        """The entry point, or LibraryNotFound saying the loaded libkjit is too old."""
        fn = self._fn.get(function)
        if fn is None:
            raise LibraryNotFound([(self.path, f"loaded, but has no {function} (libkjit older than 0.4)")])
        return fn

    def cache_dir(self, cache_dir=None):
        """The absolute cache folder that compile() and the cache functions use for
        ``cache_dir`` (kjit_cache_dir): None or "" means the default ($KJIT_CACHE_DIR, else
        $XDG_CACHE_HOME/kjit, else ~/.cache/kjit). Needs libkjit 0.4."""
        self._needs("kjit_cache_dir")
        arg = _path_bytes(cache_dir, "cache_dir") if cache_dir is not None else None
        return os.fsdecode(self._string_out("kjit_cache_dir", (arg,), self.path_buffer_size))

    def remote_describe(self, remote_storage=None):
        """What the cluster tier's Redis servers say of themselves (kjit_remote_describe), as text:
        per server its URL (password hidden), reachability, memory and its limit, eviction
        policy, keys and libkjit's entries. ``remote_storage``: a setting as compile() takes it;
        None for $KJIT_REMOTE_STORAGE. Raises InvalidArgument when there is no setting. Needs
        libkjit 0.6."""
        self._needs("kjit_remote_describe")
        arg = _text_bytes(remote_storage, "remote_storage") if remote_storage is not None else None
        return self._string_out("kjit_remote_describe", (arg,), 65536).decode("utf-8", "replace")

    def cache_stats(self, cache_dir=None):
        """What a cache folder holds (kjit_cache_summarize) as a dict: ``cache_dir`` (absolute),
        ``entries``, ``bytes`` (disk space, as du counts it), ``max_size`` ($KJIT_CACHE_MAX_SIZE in
        bytes, None for no limit), ``in_transit``, ``in_transit_bytes``, ``foreign``, the times
        ``least_recent_use_ns``, ``most_recent_use_ns``, ``oldest_created_ns``,
        ``newest_created_ns`` (ns since the epoch, None without entries) and ``by_arch``
        ({arch: {"entries": n, "bytes": n}}). A missing folder is an empty cache. Raises
        KjitIOError for a folder that cannot be read or is refused, InvalidArgument for a
        malformed $KJIT_CACHE_MAX_SIZE. Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_summarize")
        folder = self.cache_dir(cache_dir)
        out, arches = _CacheSummary(), _P()
        status = fn(os.fsencode(folder), ctypes.byref(out), ctypes.byref(arches))
        if status != Status.OK:
            raise self._error(status, "kjit_cache_summarize")
        try:
            by_arch = {}
            for i in range(self._fn["kjit_cache_arches_count"](arches)):
                name = self._fn["kjit_cache_arches_name"](arches, i).decode("utf-8", "replace")
                by_arch[name] = {"entries": self._fn["kjit_cache_arches_entries"](arches, i),
                                 "bytes": self._fn["kjit_cache_arches_bytes"](arches, i)}
        finally:
            self._fn["kjit_cache_arches_release"](arches)
        result = {"cache_dir": folder}
        result.update({n: getattr(out, n) for n in _CacheSummary._COUNTS})
        result["max_size"] = out.max_size or None
        result.update({n: getattr(out, n) or None for n in _CacheSummary._TIMES})
        result["by_arch"] = by_arch
        return result

    def _prune_report(self, folder, report):
        result = {"cache_dir": folder}
        result.update({n: getattr(report, n) for n in _PruneReport._COUNTS})
        return result

    def prune(self, cache_dir=None, *, max_size=None, older_than=None):
        """Removes cache entries by recency (kjit_cache_prune): those not used for
        ``older_than`` (seconds as an int or float, or a datetime.timedelta), then the least
        recently used until the rest take at most ``max_size`` bytes (an int; 0 removes every
        entry not in use). None leaves a bound out. Entries in use are never removed
        (``spared_in_use``). Returns the report as a dict: ``cache_dir``, ``removed_entries``,
        ``removed_bytes``, ``spared_in_use``, ``removed_in_transit``,
        ``removed_variants_files``, ``kept_entries``, ``kept_bytes``. Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_prune")
        options = _PruneOptions()
        status = self._fn["kjit_prune_options_init"](ctypes.byref(options), ctypes.sizeof(options))
        if status != Status.OK:
            raise self._error(status, "kjit_prune_options_init")
        if max_size is not None:
            if isinstance(max_size, bool) or not isinstance(max_size, int):
                raise TypeError(f"max_size must be an int (bytes), not {type(max_size).__name__}")
            if not 0 <= max_size < _PRUNE_NO_LIMIT:
                raise ValueError(f"max_size must be at least 0 and below 2**64 - 1 bytes, not {max_size}")
            options.max_size = max_size
        if older_than is not None:
            seconds = older_than.total_seconds() if hasattr(older_than, "total_seconds") else older_than
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"older_than must be seconds or a timedelta, not {type(older_than).__name__}")
            if seconds < 0:
                raise ValueError(f"older_than must not be negative: {older_than!r}")
            if seconds >= _PRUNE_NO_LIMIT:  # a c_uint64 would wrap; up to that, libkjit says what it takes
                raise ValueError(f"older_than is too large: {older_than!r}")
            options.older_than_s = int(seconds)
        folder = self.cache_dir(cache_dir)
        report = _PruneReport()
        status = fn(os.fsencode(folder), ctypes.byref(options), ctypes.byref(report))
        if status != Status.OK:
            raise self._error(status, "kjit_cache_prune")
        return self._prune_report(folder, report)

    def clear(self, cache_dir=None):
        """Removes every cache entry, in use or not (kjit_cache_clear). Returns the report as
        :meth:`prune` does. Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_clear")
        folder = self.cache_dir(cache_dir)
        report = _PruneReport()
        status = fn(os.fsencode(folder), ctypes.byref(report))
        if status != Status.OK:
            raise self._error(status, "kjit_cache_clear")
        return self._prune_report(folder, report)

    def verify(self, cache_dir=None, fix=False):
        """Checks every cache entry (kjit_cache_verify); with ``fix``, repairs damaged sidecars
        and removes what cannot be repaired. Returns a :class:`VerifyReport`; damage is in the
        report, not raised. Raises KjitIOError for a folder that cannot be read or is refused.
        Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_verify")
        folder = self.cache_dir(cache_dir)
        handle = _P()
        status = fn(os.fsencode(folder), 1 if fix else 0, ctypes.byref(handle))
        if status != Status.OK:
            raise self._error(status, "kjit_cache_verify")
        f = self._fn
        try:
            problems = []
            for i in range(f["kjit_verify_report_count"](handle)):
                kind = f["kjit_verify_report_kind"](handle, i)
                try:
                    kind = CacheProblem(kind)
                except ValueError:
                    pass
                problems.append(Problem(os.fsdecode(f["kjit_verify_report_path"](handle, i)), kind,
                                        f["kjit_verify_report_detail"](handle, i).decode("utf-8", "replace"),
                                        f["kjit_verify_report_fixed"](handle, i) == 1,
                                        f["kjit_verify_report_action"](handle, i).decode("utf-8", "replace")))
            return VerifyReport(folder, f["kjit_verify_report_entries_checked"](handle),
                                f["kjit_verify_report_entries_ok"](handle), problems)
        finally:
            f["kjit_verify_report_release"](handle)

    def load_cached(self, cubin_path, keyword):
        """Loads kernel ``keyword`` of a cubin through the CUDA driver (libcuda.so.1, or
        $KJIT_LIBCUDA) and returns a :class:`Kernel` owning the handle. No current CUDA context
        is needed. Raises DriverError, NotFound, BadCubin, KjitIOError, ..."""
        args = (_path_bytes(cubin_path, "cubin_path"), _text_bytes(keyword, "keyword"))
        handle = _P()
        status = self._fn["kjit_load_cached"](*args, ctypes.byref(handle))
        if status != Status.OK:
            raise self._error(status, "kjit_load_cached")
        return Kernel(self, handle.value)

    def compile_and_load(self, source, keyword, **options):
        """:meth:`compile` then :meth:`load_cached` in one call (kjit_compile_and_load, libkjit
        0.5): a :class:`Kernel` for ``source``, for code that asks for its kernel at every
        launch. A repeat costs an ``lstat`` of the cubin and the loader's reuse of the loaded
        library (while a Kernel of it is alive). Same keyword arguments as :meth:`compile`;
        raises what :meth:`compile` and :meth:`load_cached` raise. With an older libkjit, it
        calls those two."""
        fn = self._fn.get("kjit_compile_and_load")
        if fn is None:
            return self.load_cached(self.compile(source, keyword, **options), keyword)
        src, kw, opts = self._compile_arguments("compile_and_load", source, keyword, options)
        handle = _P()
        status = fn(src, kw, ctypes.byref(opts), ctypes.byref(handle))
        if status != Status.OK:
            raise self._error(status, "kjit_compile_and_load")
        return Kernel(self, handle.value)


# --------------------------------------------------------------------------------------------
# Kernel: an owned kjit_kernel* handle

class Kernel:
    """A kernel loaded by :meth:`Library.load_cached`, owning its ``kjit_kernel*``.

    Release it with :meth:`release` (alias :meth:`close`) or a ``with`` block; ``__del__``
    releases it as a fallback. Releasing twice is harmless. ``name`` and ``cubin_path`` stay
    readable after release; the driver handles raise ValueError then. The object may be used
    from any thread, but the CUkernel/CUlibrary/CUfunction values must not be used after
    release (libkjit unloads the library with its last handle).
    """

    def __init__(self, library, handle):
        if not handle:
            raise ValueError("NULL kjit_kernel handle")
        self._library, self._fn = library, library._fn  # keep the CDLL alive, also at exit
        self._lock = threading.Lock()
        self._handle = handle
        self._name = self._fn["kjit_kernel_name"](handle).decode("utf-8", "replace")
        self._cubin_path = os.fsdecode(self._fn["kjit_kernel_cubin_path"](handle))

    def _live(self):
        handle = self._handle
        if handle is None:
            raise ValueError(f"kernel {self._name} has been released")
        return handle

    @property
    def name(self):
        """The kernel's mangled name (str)."""
        return self._name

    @property
    def cubin_path(self):
        """The cubin path as given to load_cached (str)."""
        return self._cubin_path

    @property
    def cukernel(self):
        """The driver's ``CUkernel`` as an int (launchable as a CUfunction, CUDA 12.0+)."""
        return self._fn["kjit_kernel_cukernel"](self._live()) or 0

    @property
    def culibrary(self):
        """The ``CUlibrary`` the kernel belongs to, as an int (shared per cubin version)."""
        return self._fn["kjit_kernel_culibrary"](self._live()) or 0

    def launch(self, grid, block, args, *, shared_mem=0, stream=None):
        """Launches the kernel with ``cuLaunchKernel`` on the current CUDA context (PyTorch and
        CuPy make one current on their device; with none, the driver says
        ``CUDA_ERROR_INVALID_CONTEXT``).

        - ``grid``, ``block``: an int or a tuple of up to three ints.
        - ``args``: one value per kernel parameter, in order: a ``ctypes`` value of the
          parameter's C type (``ctypes.c_int(n)``, ``ctypes.c_float(x)``,
          ``ctypes.c_void_p(ptr)``), or an array object, passed as its device pointer: a PyTorch
          tensor (``data_ptr()``), a CuPy or Numba array (``__cuda_array_interface__``), a
          CuPy memory pointer (``.ptr``). A bare Python int or float is refused: its C type
          cannot be known.
        - ``stream``: None (the default stream), an int ``CUstream``, or an object that has one:
          ``torch.cuda.current_stream()`` (``cuda_stream``), a CuPy stream (``ptr``), a
          cuda.core stream (``__cuda_stream__()``).

        Raises :class:`DriverError` with the driver's error name when the launch fails, and
        ValueError after :meth:`release`. The launch is asynchronous, as in C.
        """
        grid3, block3 = _dims(grid, "grid"), _dims(block, "block")
        values = [_kernel_arg(a, i) for i, a in enumerate(args)]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p)
                                                           for v in values])
        driver = _driver()
        with self._lock:
            function = ctypes.c_void_p(self._fn["kjit_kernel_cukernel"](self._live()))
            result = driver.cuLaunchKernel(function, *grid3, *block3, int(shared_mem),
                                           ctypes.c_void_p(_stream_handle(stream)),
                                           params if values else None, None)
        if result != 0:
            raise _driver_error(driver, result, f"cuLaunchKernel of {self._name}")

    def as_cuda_core(self):
        """This kernel as a ``cuda.core`` ``Kernel`` (``Kernel.from_handle`` of its CUkernel), to
        launch with cuda.core's ``launch()``. The returned object keeps this one alive, so the
        library stays loaded while it is in use; release this one only after it is gone.
        Needs cuda.core (``pip install cuda-core``); ImportError saying so otherwise."""
        try:
            from cuda.core import Kernel as CoreKernel
        except ImportError:
            try:
                from cuda.core.experimental import Kernel as CoreKernel
            except ImportError as e:
                raise ImportError("Kernel.as_cuda_core needs cuda.core (pip install cuda-core)") from e
        core = CoreKernel.from_handle(self.cukernel)
        try:
            core._kjit_kernel = self
        except AttributeError:  # a class with no __dict__ (cuda.core's is a cdef class): beside it
            weakref.finalize(core, _CORE_OWNERS.pop, id(core), None)
            _CORE_OWNERS[id(core)] = self
        return core

    @property
    def released(self):
        """True once the handle has been released."""
        return self._handle is None

    def cufunction(self):
        """The kernel as a ``CUfunction`` (int) in the calling thread's current CUDA context.
        Raises DriverError without a current context."""
        out = _P()
        status = self._fn["kjit_kernel_cufunction"](self._live(), ctypes.byref(out))
        if status != Status.OK:
            raise self._library._error(status, "kjit_kernel_cufunction")
        return out.value or 0

    def release(self):
        """kjit_kernel_release: drops the handle (idempotent, thread safe)."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self._fn["kjit_kernel_release"](handle)

    close = release

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            if getattr(self, "_handle", None) is not None:
                self.release()
        except Exception:  # never raise from a finaliser (e.g. late in interpreter exit)
            pass

    def __repr__(self):
        state = "released" if self._handle is None else f"cukernel=0x{self.cukernel:x}"
        return f"<kjit.Kernel {self._name} from {self._cubin_path!r} {state}>"


# --------------------------------------------------------------------------------------------
# Module-level functions on a default Library, loaded on first use

_default = None
_default_lock = threading.Lock()


def load_library(path=None):
    """Loads libkjit (``path``, else $KJIT_LIBRARY, else the search) and makes it the library
    the module-level functions use. Returns the :class:`Library`."""
    global _default
    lib = Library(path)
    with _default_lock:
        _default = lib
    return lib


def _lib():
    global _default
    lib = _default
    if lib is None:
        with _default_lock:
            if _default is None:
                _default = Library()
            lib = _default
    return lib


def version():
    """(major, minor, patch) of the loaded libkjit."""
    return _lib().version()


def version_string():
    """The loaded libkjit's version as text, e.g. "0.1.0"."""
    return _lib().version_string()


def status_string(status):
    """The English name of a kjit status code."""
    return _lib().status_string(status)


def last_error():
    """This thread's detail text of its last failed libkjit call."""
    return _lib().last_error()


def resolve_name(cubin_path, keyword):
    """See :meth:`Library.resolve_name`."""
    return _lib().resolve_name(cubin_path, keyword)


def compile(source, keyword, *, cache_dir=None, arch=None, nvrtc_options=(),  # noqa: A001
            include_paths=(), headers=None, name_expression=None, max_cache_size=None, remote_storage=None):
    """See :meth:`Library.compile`; returns the cubin path."""
    return _lib().compile(source, keyword, cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                          include_paths=include_paths, headers=headers, name_expression=name_expression,
                          max_cache_size=max_cache_size, remote_storage=remote_storage)


def compile_named(source, keyword, **options):
    """See :meth:`Library.compile_named`; returns a :class:`Compiled` (cubin_path, name)."""
    return _lib().compile_named(source, keyword, **options)


def compile_batch(requests, *, workers=None, pch=PCH_DEFAULT, progress=None, worker_kind=WORKERS_DEFAULT, **options):
    """See :meth:`Library.compile_batch`; returns a list of :class:`BatchItem`."""
    return _lib().compile_batch(requests, workers=workers, pch=pch, progress=progress, worker_kind=worker_kind,
                                **options)


def stats():
    """See :meth:`Library.stats`."""
    return _lib().stats()


def load_cached(cubin_path, keyword):
    """See :meth:`Library.load_cached`."""
    return _lib().load_cached(cubin_path, keyword)


def compile_and_load(source, keyword, **options):
    """See :meth:`Library.compile_and_load`; returns a :class:`Kernel`."""
    return _lib().compile_and_load(source, keyword, **options)


def remote_describe(remote_storage=None):
    """See :meth:`Library.remote_describe`."""
    return _lib().remote_describe(remote_storage)


def cache_dir(cache_dir=None):
    """See :meth:`Library.cache_dir`."""
    return _lib().cache_dir(cache_dir)


def cache_stats(cache_dir=None):
    """See :meth:`Library.cache_stats`."""
    return _lib().cache_stats(cache_dir)


def prune(cache_dir=None, *, max_size=None, older_than=None):
    """See :meth:`Library.prune`."""
    return _lib().prune(cache_dir, max_size=max_size, older_than=older_than)


def verify(cache_dir=None, fix=False):
    """See :meth:`Library.verify`."""
    return _lib().verify(cache_dir, fix)


def clear(cache_dir=None):
    """See :meth:`Library.clear`."""
    return _lib().clear(cache_dir)
