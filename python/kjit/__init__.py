r"""Python bindings for libkjit (ctypes only, no compiled extension).

libkjit JIT-compiles CUDA C++ with NVRTC into an on-disk cubin cache, finds a cubin's mangled
kernel name through a ``<cubin>.name`` sidecar, and loads cached kernels through the CUDA
driver. This package wraps its C ABI (``include/kjit/kjit.h`` and the ``kjit_batch.h`` and
``kjit_cache.h`` it includes) one function at a time.

The package
-----------
``kjit`` (this module) is the API: :class:`Library`, :class:`Kernel`, the errors, the results
and the module-level functions. Its private modules: ``_abi`` (the mirror of the three
headers: enums, constants, structs, every function's ``argtypes``/``restype``), ``_enums``
(its two enum classes, :class:`Status` and :class:`CacheProblem`), ``_prepared`` (prepared
requests, :class:`Compiled`, and the memo that makes a repeated call one C call), ``_launch``
(:meth:`Kernel.launch`: the driver, argument marshalling, streams), ``_results`` (the
dataclasses of stats and cache results, re-exported here), ``_batch`` (:class:`BatchItem`),
``_progress`` (compile_batch's progress bar), ``_convert`` (Python arguments to C),
``_errors`` (the exceptions, re-exported here), ``_signals`` (Ctrl-C during a batch) and
``_types`` (:func:`c_type`, numpy and torch dtypes as C types).
``import kjit`` imports ctypes, ``_abi``, ``_convert``, ``_errors`` and ``_prepared``: what a
compile and its hits need. The rest, and the standard modules they need (enum, collections,
threading, signal, dataclasses), come with their first use.

Finding libkjit.so
------------------
Nothing is loaded at import time; the first call that needs the library loads it, from the
first of these places that is given:

1. an explicit path: ``kjit.load_library(path)`` (which also makes it the default for the
   module-level functions) or ``kjit.Library(path)``;
2. ``$KJIT_LIBRARY``, when set and non-empty;
3. ``libkjit.so.0`` beside this package: the one an installed wheel (``pip install .``) holds;
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

from __future__ import annotations

import _thread
import ctypes
import os
import sys

from . import _abi, _convert, _prepared
from ._prepared import Compiled, Prepared
from ._convert import path_bytes as _path_bytes, text_bytes as _text_bytes
from ._errors import ERROR_CLASSES as _ERROR_CLASSES
from ._errors import (Ambiguous, BadCubin, CompileError, DriverError, InvalidArgument, KjitError, KjitIOError,
                      LibraryNotFound, LinkError, NotCachedError, NotFound)

# For type checkers only, as in _abi: typing (and datetime) would cost more to import than the
# rest of the package, and annotations are never evaluated.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import datetime
    from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

    from . import _launch
    from ._batch import BatchItem
    from ._convert import Headers, PathLike
    from ._enums import CacheProblem, Status
    from ._results import (ArchUsage, CacheStats, CopyReport, Problem, PruneReport, RemoteDescription, RemoteServer,
                           Stats, VerifyReport)
    from ._types import c_type

    # A batch request: (source, keyword), or a dict with those and compile()'s keyword arguments.
    BatchRequest = Union[Tuple[Union[str, bytes], str], Mapping[str, Any]]
    # A batch item's progress callback: (done, total, index, status, cubin_path) -> cancel?
    ProgressCallback = Callable[[int, int, int, Union[Status, int], Optional[str]], Any]

__all__ = [
    "Status", "KjitError", "LibraryNotFound", "InvalidArgument", "NotFound", "Ambiguous",
    "BadCubin", "KjitIOError", "CompileError", "DriverError", "LinkError", "NotCachedError", "Library", "Kernel",
    "load_library", "version", "version_string", "status_string", "last_error",
    "resolve_name", "compile", "compile_named", "Compiled", "prepare", "Prepared", "compile_batch", "BatchItem",
    "PCH_DEFAULT", "PCH_ON", "PCH_OFF",
    "WORKERS_DEFAULT", "WORKERS_THREADS", "WORKERS_PROCESSES", "WORKERS_AUTOMATIC",
    "load_cached", "compile_and_load", "stats", "SIDECAR_REJECTIONS", "record", "warm",
    "cache_dir", "cache_stats", "prune", "verify", "clear", "CacheProblem", "Problem", "VerifyReport",
    "cache_export", "cache_import", "CopyReport",
    "remote_describe", "Stats", "CacheStats", "ArchUsage", "PruneReport", "RemoteDescription", "RemoteServer",
    "c_type",
]

# What is imported at its first use, by __getattr__ below for kjit.<name> and by the functions
# that need it: the results in kjit._results (see there), BatchItem, the enum classes
# (importing enum, or collections for a namedtuple, would cost more than ctypes, and a hit
# needs none of them) and c_type (kjit._types: a table a compile does not need).
_RESULTS = ("Stats", "CacheStats", "ArchUsage", "PruneReport", "Problem", "VerifyReport", "RemoteDescription",
            "RemoteServer", "CopyReport")
_LATER = {"Status": "_enums", "CacheProblem": "_enums", "BatchItem": "_batch", "c_type": "_types",
          **{n: "_results" for n in _RESULTS}}


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LATER))


# kjit_pch_mode
PCH_DEFAULT: int = _abi.PCH_MODES["DEFAULT"]
PCH_ON: int = _abi.PCH_MODES["ON"]
PCH_OFF: int = _abi.PCH_MODES["OFF"]
# kjit_worker_kind (libkjit 0.5)
WORKERS_DEFAULT: int = _abi.WORKER_KINDS["DEFAULT"]
WORKERS_THREADS: int = _abi.WORKER_KINDS["THREADS"]
WORKERS_PROCESSES: int = _abi.WORKER_KINDS["PROCESSES"]
WORKERS_AUTOMATIC: int = _abi.WORKER_KINDS["AUTOMATIC"]
# kjit_sidecar_rejection, in enum order (the index into kjit_stats.sidecar_rejections).
SIDECAR_REJECTIONS: Tuple[str, ...] = tuple(name.lower() for name in _abi.SIDECAR_REJECTIONS)

# kjit_status values compared on every call, as plain ints (kjit.Status is imported later).
_OK = 0  # KJIT_OK
_TOO_SMALL = 10  # KJIT_ERROR_BUFFER_TOO_SMALL
# compile()'s keyword arguments, one per field of kjit_compile_options, with their defaults, in
# the order of its signature (and of the values in a memo key, kjit._prepared.Memo).
_COMPILE_DEFAULTS: Dict[str, Any] = {
    "cache_dir": None, "arch": None, "nvrtc_options": (), "include_paths": (), "headers": None,
    "name_expression": None, "max_cache_size": None, "remote_storage": None, "filename": None, "seed_dirs": None,
    "link_inputs": (), "link_options": (), "compile_mode": None, "base_dirs": None}
_COMPILE_KEYWORDS = tuple(_COMPILE_DEFAULTS)


# --------------------------------------------------------------------------------------------
# Loading the library

def _nvrtc_from_wheel() -> Optional[str]:
    """In the installed package, with $KJIT_LIBNVRTC unset: points it at the NVRTC of the
    ``nvidia-cuda-nvrtc`` wheel, when one of the major libkjit was built against is installed
    (``nvidia/cu<major>/lib``, or ``nvidia/cuda_nvrtc/lib`` for 12 and older), as cuda-python
    does; libkjit opens it at the first compile, and the worker processes inherit the variable.
    Also $KJIT_LIBNVJITLINK, for the ``nvidia-nvjitlink`` wheel's nvJitLink (the link step of a
    compile with link inputs), by the same rule (:func:`_nvjitlink_from_wheel`).
    Returns the NVRTC path set, or None (unset: libkjit's own search decides)."""
    _nvjitlink_from_wheel()
    return _from_wheel("KJIT_LIBNVRTC", "libnvrtc", "cuda_nvrtc")


def _nvjitlink_from_wheel() -> Optional[str]:
    """In the installed package, with $KJIT_LIBNVJITLINK unset: points it at the nvJitLink of
    the ``nvidia-nvjitlink`` wheel of libkjit's major (``nvidia/cu<major>/lib``, or
    ``nvidia/nvjitlink/lib`` for 12 and older). Setting it loads nothing: libkjit opens
    nvJitLink only at the first link. Returns the path set, or None."""
    return _from_wheel("KJIT_LIBNVJITLINK", "libnvJitLink", "nvjitlink")


def _from_wheel(variable: str, stem: str, old_folder: str) -> Optional[str]:
    """Sets ``variable``, when unset and this is the installed package, to the first
    ``nvidia/cu<major>/lib/<stem>.so.<major>`` (``nvidia/<old_folder>/lib`` for CUDA 12 and
    older) on sys.path, ``<major>`` being the CUDA major libkjit was built against."""
    if os.environ.get(variable):
        return None
    try:
        from ._build import NVRTC_MAJOR  # type: ignore[import]  # only in the installed package
    except ImportError:
        return None
    name = f"{stem}.so.{NVRTC_MAJOR}"
    for entry in sys.path:
        for folder in (f"cu{NVRTC_MAJOR}", old_folder):
            candidate = os.path.join(entry or os.getcwd(), "nvidia", folder, "lib", name)
            if os.path.isfile(candidate):
                os.environ[variable] = candidate
                return candidate
    return None


def _open_cdll(path: Optional[PathLike]) -> Tuple[ctypes.CDLL, str]:
    """Loads libkjit per the search order in the package docstring -> (CDLL, where)."""
    tried: List[Tuple[str, str]] = []

    def attempt(place: str, target: str) -> Optional[ctypes.CDLL]:
        try:
            return ctypes.CDLL(target)
        except OSError as e:
            tried.append((place, str(e)))
            return None

    if path is not None:
        target = os.fsdecode(_path_bytes(path, "library path"))
        places = [(f"explicit path {target!r}", target)]
    elif os.environ.get("KJIT_LIBRARY"):
        target = os.environ["KJIT_LIBRARY"]
        places = [(f"$KJIT_LIBRARY={target!r}", target)]
    else:
        tried.append(("$KJIT_LIBRARY", "not set"))
        beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkjit.so.0")
        if os.path.exists(beside):
            # The wheel's: loaded without the search below, whose ctypes.util.find_library runs
            # ldconfig in a subprocess (tens of milliseconds, and subprocess, signal, threading
            # and enum imported into the caller's process).
            cdll = attempt(f"beside this module: {beside!r}", beside)
            if cdll is not None:
                return cdll, beside
        else:
            tried.append((f"beside this module ({beside!r})", "no such file"))
        from ctypes import util  # here only: it costs more to import than the rest of the package

        places = []
        found = util.find_library("kjit")
        if found:
            places.append((f"ctypes.util.find_library('kjit') -> {found!r}", found))
        else:
            tried.append(("ctypes.util.find_library('kjit')", "found nothing"))
        places += [(f"dlopen({n!r})", n) for n in ("libkjit.so.0", "libkjit.so")]
    for place, target in places:
        cdll = attempt(place, target)
        if cdll is not None:
            return cdll, target
    raise LibraryNotFound(tried)


# --------------------------------------------------------------------------------------------
# Library: one loaded libkjit.so

class Library:
    """One loaded libkjit.so with every entry point declared. ``path`` as in the package
    docstring; None means ``$KJIT_LIBRARY``, then the search. All methods are thread safe."""

    # First buffer sizes for out strings; a longer result is retried with the reported length.
    name_buffer_size = 512
    path_buffer_size = 512
    # compile()'s keyword arguments in order: the names of a plain call's values (Prepared).
    _compile_keywords = _COMPILE_KEYWORDS
    # The plain calls' prepared requests (kjit._prepared.Memo): emptied when it holds this many,
    # or sources of this many bytes.
    _MEMO_MAX_ENTRIES = 256
    _MEMO_MAX_BYTES = 64 << 20

    def __init__(self, path: Optional[PathLike] = None) -> None:
        cdll, self.path = _open_cdll(path)
        _nvrtc_from_wheel()
        self._memo = _prepared.Memo(self._MEMO_MAX_ENTRIES, self._MEMO_MAX_BYTES)
        self._requests = self._memo.requests  # the same dict, for the look-up of a repeat
        self._fn, missing = _abi.bind(cdll)
        if missing:
            raise LibraryNotFound([(self.path, f"loaded, but has no symbol {missing[0]} (too old?)")])
        self._cdll = cdll
        self._untyped_fns: Dict[str, Any] = {}
        for function in ("kjit_compile_named", "kjit_compile"):  # every request's (Prepared._fill)
            self._untyped(function)
        # The out buffers of every prepared request's first compile_named (Prepared._first_named),
        # one call at a time: (lock, path, its size, name, its size), sizes as size_t objects.
        self._shared_out = (_thread.allocate_lock(), (ctypes.c_char * self.path_buffer_size)(),
                            ctypes.c_size_t(self.path_buffer_size), (ctypes.c_char * self.name_buffer_size)(),
                            ctypes.c_size_t(self.name_buffer_size))

    def _untyped(self, function: str) -> Any:
        """A function object of its own for ``function``, with no argtypes (None if the library
        lacks it), shared by the prepared requests: their arguments are ctypes objects already,
        so ctypes has nothing to convert on each call. kjit_status is the default restype, int."""
        try:
            return self._untyped_fns[function]
        except KeyError:
            pass
        try:
            fn = self._cdll[function]  # a new object: the declared one keeps its argtypes
        except AttributeError:
            fn = None
        self._untyped_fns[function] = fn
        return fn

    def __repr__(self) -> str:
        return f"<kjit.Library {self.path!r} {self.version_string()}>"

    def _error(self, status: int, function: str) -> KjitError:
        """The KjitError for a failed call; reads kjit_last_error() first, before anything else."""
        message = _convert.in_python_terms(self._fn["kjit_last_error"]().decode("utf-8", "replace"))
        name = self.status_string(status)
        return _ERROR_CLASSES.get(status, KjitError)(status, name, message, function)

    def _needs(self, function: str, release: str) -> Any:
        """The entry point, or LibraryNotFound saying the loaded libkjit is too old."""
        fn = self._fn.get(function)
        if fn is None:
            raise LibraryNotFound([(self.path, f"loaded, but has no {function} (libkjit older than {release})")])
        return fn

    def _string_out(self, function: str, args: Sequence[Any], size: int) -> bytes:
        """Calls a function that ends in (buf, size, *len); grows the buffer on
        KJIT_ERROR_BUFFER_TOO_SMALL to the reported length. -> bytes."""
        fn = self._fn[function]
        status = 0  # KJIT_OK, for the type checker: the loop sets it
        for _ in range(4):  # the needed length only changes if the file is replaced meanwhile
            buf, length = ctypes.create_string_buffer(size), ctypes.c_size_t(0)
            status = fn(*args, buf, size, ctypes.byref(length))
            if status == _OK:
                return buf.raw[:length.value]
            if status != _TOO_SMALL:
                raise self._error(status, function)
            size = max(length.value + 1, size * 2)
        raise self._error(status, function)

    def version(self) -> Tuple[int, int, int]:
        """The run-time version as (major, minor, patch), from kjit_version()."""
        n = self._fn["kjit_version"]()
        return (n // 10000, n // 100 % 100, n % 100)

    def version_string(self) -> str:
        """The run-time version as text, e.g. "0.1.0"."""
        return str(self._fn["kjit_version_string"]().decode("ascii", "replace"))

    def status_string(self, status: int) -> str:
        """kjit_status_string: the English name of a status code ("unknown status" if unknown)."""
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError(f"status must be int, not {type(status).__name__}")
        if not -2**31 <= status < 2**31:
            raise ValueError(f"status {status} is outside the range of a C int")
        return str(self._fn["kjit_status_string"](status).decode("utf-8", "replace"))

    def last_error(self) -> str:
        """kjit_last_error(): this thread's detail text of its last failed libkjit call."""
        return str(self._fn["kjit_last_error"]().decode("utf-8", "replace"))

    def resolve_name(self, cubin_path: PathLike, keyword: str) -> str:
        """The mangled name of kernel ``keyword`` in the cubin at ``cubin_path`` (str, bytes or
        os.PathLike), on the sidecar fast path. Raises KjitError (NotFound, Ambiguous,
        BadCubin, KjitIOError, InvalidArgument, ...)."""
        args = (_path_bytes(cubin_path, "cubin_path"), _text_bytes(keyword, "keyword"))
        return self._string_out("kjit_resolve_name", args, self.name_buffer_size).decode("utf-8", "replace")

    def compile(self, source: Union[str, bytes], keyword: str, *, cache_dir: Optional[PathLike] = None,
                arch: Optional[str] = None, nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> str:
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
          "none"; default $KJIT_REMOTE_STORAGE (docs/remote.md; libkjit 0.6);
        - ``filename``: the NVRTC program's name, e.g. "gemm_128x64.cu" (str or os.PathLike):
          NVRTC's log, device asserts and the cubin name it, and the source's quoted includes
          are looked up in its folder first; default "source.cu" (libkjit 0.7);
        - ``seed_dirs``: read-only seed caches, a list of folders looked in, in order, after the
          cache and before the cluster tier, never written; an entry found there is verified and
          copied into the cache; default $KJIT_CACHE_SEED (folders separated by ':'); ``[]``: none
          whatever the variable says (libkjit 0.9; :func:`cache_export` makes one);
        - ``link_inputs``: files linked with the kernel by nvJitLink, in order (str, bytes,
          os.PathLike): LTO-IR, cubin, fatbin, PTX, a relocatable object or a library of them
          (a MathDx device library, say), told apart by content. With any, the source is compiled
          to LTO-IR and linked with them for ``arch``; the linked cubin is the entry. Each file's
          content is in the key: an edited file is a miss, the file put back hits the earlier
          entry. A missing file raises KjitIOError naming it, a file of no such kind
          InvalidArgument, nvJitLink's refusal :class:`LinkError` with its log (docs/link.md;
          libkjit 0.10);
        - ``link_options``: nvJitLink options in order, e.g. ("-O3", "-ftz=1"); no -arch nor
          -lto; ignored without ``link_inputs`` (libkjit 0.10);
        - ``compile_mode``: whether a miss may compile: "always", "warn" (compile, and log one
          warning per kernel naming it), or "never" (a miss raises :class:`NotCachedError` at
          once, NVRTC neither loaded nor run: a serving process, docs/serving.md); default
          $KJIT_NO_COMPILE ("1": never, "warn"), else "always" (libkjit 0.11);
        - ``base_dirs``: base folders, as ccache's base_dir, a list of absolute folders in order
          (the same on every node that shares entries): where the cubin may name the folder a
          header was read from (line information, ``__FILE__``, assert), a folder under one of
          these is keyed by its path relative to it, so a cache built under one install prefix
          hits under another with the same files; default $KJIT_BASE_DIRS (folders separated by
          ':'); ``[]``: none whatever the variable says (libkjit 0.12).

        Raises CompileError (the NVRTC log is in ``.message``), InvalidArgument, KjitIOError,
        LinkError (nvJitLink's log), NotCachedError, ...
        """
        values = (cache_dir, arch, nvrtc_options, include_paths, headers, name_expression, max_cache_size,
                  remote_storage, filename, seed_dirs, link_inputs, link_options, compile_mode, base_dirs)
        return self._request(source, keyword, values).compile()

    def compile_named(self, source: Union[str, bytes], keyword: str,
                      *, cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
                      nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                      headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                      max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                      filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                      link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                      compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> Compiled:
        """:meth:`compile` that also gives the kernel's name: a :class:`Compiled` (cubin_path,
        name), both from one look-up in the cache (kjit_compile_named, libkjit 0.5); what
        :meth:`compile` then :func:`resolve_name` would give. Same keyword arguments and errors as
        :meth:`compile`. With an older libkjit, it calls those two."""
        given = (source, keyword, cache_dir, arch, nvrtc_options, include_paths, headers, name_expression,
                 max_cache_size, remote_storage, filename, seed_dirs, link_inputs, link_options, compile_mode, base_dirs)
        return self._compile_named(given)

    def _compile_named(self, given: Tuple[Any, ...]) -> Compiled:
        """compile_named of a plain call's arguments ``given`` (as _request takes them): a repeat
        is one look-up and one C call, a request new to the memo is made the short way
        (Memo.first_named)."""
        try:
            prepared = self._requests.get(given)
        except TypeError:  # a list, a mapping, ... among them
            return self._memo.prepare(self, given).compile_named()
        if prepared is None:
            return self._memo.first_named(self, given)
        return prepared.compile_named()

    def prepare(self, source: Union[str, bytes], keyword: str, *, cache_dir: Optional[PathLike] = None,
                arch: Optional[str] = None, nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> Prepared:
        """A :class:`Prepared` request: :meth:`compile`'s arguments checked and encoded once,
        whose ``compile_named()``, ``compile()`` and ``compile_and_load()`` each make one C call
        (libkjit still proves the entry unchanged on every call). With libkjit 0.14 it is also
        libkjit's own prepared request (kjit_prepare): a call then hashes nothing, and the
        defaults (cache folder, arch, base folders, the other ``KJIT_*`` settings) are settled
        once, now. Raises what :meth:`compile` raises for bad Python arguments (TypeError,
        ValueError); libkjit's errors come from the calls."""
        values = (cache_dir, arch, nvrtc_options, include_paths, headers, name_expression, max_cache_size,
                  remote_storage, filename, seed_dirs, link_inputs, link_options, compile_mode, base_dirs)
        # Its options: the arguments given, those left at their defaults left out (as a **options would).
        options = {name: value for (name, default), value in zip(_COMPILE_DEFAULTS.items(), values)
                   if value is not default}
        return Prepared(self, source, keyword, options, native=True)

    def _request(self, source: Union[str, bytes], keyword: str, values: Tuple[Any, ...]) -> Prepared:
        """The prepared request of a plain call (compile, compile_named, compile_and_load), whose
        keyword arguments are ``values``, in :data:`_COMPILE_KEYWORDS` order: a repeat with plain
        arguments (str, bytes, None, tuples of them) finds it by one look-up of the arguments as
        given; others are frozen first (kjit._prepared.Memo)."""
        given = (source, keyword, *values)
        try:
            prepared = self._requests.get(given)
        except TypeError:  # a list, a mapping, ... among them
            prepared = None
        return prepared if prepared is not None else self._memo.prepare(self, given)

    def compile_batch(self, requests: Iterable[BatchRequest], *, workers: Optional[int] = None,
                      pch: int = PCH_DEFAULT, progress: Union[ProgressCallback, bool, None] = None,
                      worker_kind: int = WORKERS_DEFAULT, cache_dir: Optional[PathLike] = None,
                      arch: Optional[str] = None, nvrtc_options: Iterable[str] = (),
                      include_paths: Iterable[PathLike] = (), headers: Optional[Headers] = None,
                      name_expression: Optional[str] = None, max_cache_size: Union[int, float, None] = None,
                      remote_storage: Optional[str] = None, filename: Optional[PathLike] = None,
                      seed_dirs: Optional[Iterable[PathLike]] = None, link_inputs: Iterable[PathLike] = (),
                      link_options: Iterable[str] = (), compile_mode: Optional[str] = None,
                      base_dirs: Optional[Iterable[PathLike]] = None) -> List[BatchItem]:
        """Compiles many kernels at once (kjit_compile_batch) and returns one :class:`BatchItem`
        per request, in order. Needs libkjit 0.3 or later.

        - ``requests``: a sequence of ``(source, keyword)`` pairs, or of dicts with ``source``,
          ``keyword`` and any of :meth:`compile`'s keyword arguments for that item alone.
        - ``cache_dir``, ``arch``, ``nvrtc_options``, ...: :meth:`compile`'s keyword arguments,
          for every item; an item's dict overrides them.
        - ``workers``: workers (default $KJIT_JOBS, else the CPUs); ``pch``: PCH_DEFAULT,
          PCH_ON or PCH_OFF (NVRTC's automatic precompiled header; by default where two or
          more misses with the same headers compile in one process (as many as the prices recorded in the cache
          folder say repay it, none where using one was slower), which the batch arranges;
          ``--pch`` among an item's options is then only a hint).
        - ``worker_kind``: WORKERS_THREADS, WORKERS_PROCESSES (kjit-worker processes beside
          libkjit.so, ended with the batch), WORKERS_AUTOMATIC (processes when misses include
          headers and more than one worker compiles: NVRTC compiles those one at a time within
          a process), or WORKERS_DEFAULT ($KJIT_WORKER_KIND, else automatic). Needs libkjit 0.5
          unless WORKERS_DEFAULT.
        - ``progress``: called as ``progress(done, total, index, status, cubin_path)`` for each
          finished item, on this thread (hits first); return True to cancel the items not yet
          started, which then have status ERROR_CANCELLED. An exception raised in it cancels
          too (it is not called again) and is re-raised once the batch has returned.
          ``progress=True`` shows a progress bar instead (items done out of the total, and
          failures): tqdm's when tqdm can be imported, else one line on stderr rewritten in
          place (written once, at the end, when stderr is not a terminal).

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
        values = (cache_dir, arch, nvrtc_options, include_paths, headers, name_expression, max_cache_size,
                  remote_storage, filename, seed_dirs, link_inputs, link_options, compile_mode, base_dirs)
        options = dict(zip(_COMPILE_KEYWORDS, values))
        if not (progress is None or isinstance(progress, bool) or callable(progress)):
            raise TypeError(f"progress must be a callable, True or None, not {type(progress).__name__}")
        keep: List[Any] = []
        structs = _batch_requests(requests, options, keep)
        batch = _batch_options(workers, pch, worker_kind)
        if progress is not True:
            return self._run_batch(fn, structs, batch, progress or None)
        from ._progress import Bar

        bar = Bar(len(structs))
        try:
            return self._run_batch(fn, structs, batch, bar)
        finally:
            bar.close()

    def _run_batch(self, fn: Any, structs: List[_abi.CompileRequest], batch: _abi.BatchOptions,
                   progress: Optional[ProgressCallback]) -> List[BatchItem]:
        """Runs kjit_compile_batch with a progress callback of ours, which calls ``progress``.

        The callback runs the user's callback, if any, and the signal handlers Python could not
        run while the batch was in C (see _signals), where what they raise is caught. An
        exception cancels the batch (the user's callback is not called again) and is raised
        once kjit_compile_batch has returned; the items that finished are published in the
        cache all the same."""
        import threading

        from ._batch import status_of
        from ._signals import gate as main_gate

        raised: List[BaseException] = []
        gate = main_gate if threading.current_thread() is threading.main_thread() else None

        def on_item(_user: Any, done: int, total: int, index: int, status: int, path: Optional[bytes]) -> int:
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
                    cancel = progress(done, total, index, status_of(status), os.fsdecode(path) if path else None)
                    decision = 1 if cancel else 0
                if gate is not None:
                    gate.armed = False
            except BaseException as e:  # noqa: BLE001: re-raised after the call, never through C
                if gate is not None:
                    gate.armed = False
                decision = 1
                raised.append(e)
            return decision

        batch.progress = _abi.PROGRESS_FN(on_item)
        array = (ctypes.POINTER(_abi.CompileRequest) * len(structs))(*[ctypes.pointer(r) for r in structs])
        result = ctypes.c_void_p()
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

    def _batch_items(self, result: ctypes.c_void_p) -> List[BatchItem]:
        """The BatchItems of a kjit_batch_result, which it releases."""
        from ._batch import BatchItem, status_of

        f = self._fn
        name_of = f.get("kjit_batch_result_kernel_name")
        try:
            items = []
            for i in range(f["kjit_batch_result_count"](result)):
                path = f["kjit_batch_result_cubin_path"](result, i)
                error = f["kjit_batch_result_error"](result, i) or b""
                name = name_of(result, i) if name_of is not None else None
                items.append(BatchItem(status_of(f["kjit_batch_result_status"](result, i)),
                                       os.fsdecode(path) if path else None, error.decode("utf-8", "replace"),
                                       name.decode("ascii") if name else None))
        finally:
            f["kjit_batch_result_release"](result)
        return items

    def stats(self) -> Stats:
        """A snapshot of libkjit's process-wide counters (kjit_get_stats): a :class:`Stats`
        with every counter of kjit_stats by name, ``sidecar_rejections`` as {reason: count} and
        ``errors`` as {status name: count} (non-zero entries only). Counters only grow: subtract
        two snapshots to measure a stretch of work. Needs libkjit 0.2 or later."""
        fn = self._needs("kjit_get_stats", "0.2")
        from . import _results

        with_remote = "kjit_remote_describe" in self._fn
        with_seed = "kjit_cache_export" in self._fn
        with_link = with_seed and self.version() >= (0, 10, 0)  # 0.10 added no function to tell it
        out = _abi.Stats()
        if not with_remote:  # a library older than 0.6 refuses a struct larger than its own
            out.struct_size = _abi.offset_of(_abi.Stats, "remote_hits")
        elif not with_seed:  # older than 0.9
            out.struct_size = _abi.offset_of(_abi.Stats, "seed_hits")
        elif not with_link:  # older than 0.10
            out.struct_size = _abi.offset_of(_abi.Stats, "nvjitlink_links")
        status = fn(ctypes.byref(out))
        if status != _OK:
            raise self._error(status, "kjit_get_stats")
        names = (_abi.STATS_COUNTERS + _abi.STATS_COUNTERS_2 + _abi.STATS_COUNTERS_3 +
                 (_abi.STATS_REMOTE if with_remote else ()) + (_abi.STATS_SEED if with_seed else ()) +
                 (_abi.STATS_LINK if with_link else ()))
        rejections = {r: out.sidecar_rejections[i] for i, r in enumerate(SIDECAR_REJECTIONS)
                      if out.sidecar_rejections[i]}
        errors = {self.status_string(i): out.errors[i] for i in range(1, _abi.STATS_STATUS_SLOTS) if out.errors[i]}
        return _results.Stats(sidecar_rejections=rejections, errors=errors, **{n: getattr(out, n) for n in names})

    # -- Cache maintenance (libkjit 0.4): what `kjit cache stats/prune/verify/clear` do ---------

    def cache_dir(self, cache_dir: Optional[PathLike] = None) -> str:
        """The absolute cache folder that compile() and the cache functions use for
        ``cache_dir`` (kjit_cache_dir): None or "" means the default ($KJIT_CACHE_DIR, else
        $XDG_CACHE_HOME/kjit, else ~/.cache/kjit). Needs libkjit 0.4."""
        self._needs("kjit_cache_dir", "0.4")
        arg = _path_bytes(cache_dir, "cache_dir") if cache_dir is not None else None
        return os.fsdecode(self._string_out("kjit_cache_dir", (arg,), self.path_buffer_size))

    def remote_describe(self, remote_storage: Optional[str] = None) -> RemoteDescription:
        """What the cluster tier's Redis servers say of themselves (kjit_remote_describe): a
        :class:`RemoteDescription`, whose ``servers`` give per server its URL (password hidden),
        reachability, what Redis reports (version, memory and its limit, eviction policy, ...),
        its keys and libkjit's entries; ``str()`` of it is the text ``kjit cache stats
        --remote`` prints. ``remote_storage``: a setting as compile() takes it; None for
        $KJIT_REMOTE_STORAGE. Raises InvalidArgument when there is no setting. Needs libkjit
        0.6."""
        self._needs("kjit_remote_describe", "0.6")
        from . import _results

        arg = _text_bytes(remote_storage, "remote_storage") if remote_storage is not None else None
        text = self._string_out("kjit_remote_describe", (arg,), 65536).decode("utf-8", "replace")
        return _results.RemoteDescription.parse(text)

    def cache_stats(self, cache_dir: Optional[PathLike] = None) -> CacheStats:
        """What a cache folder holds (kjit_cache_summarize), as a :class:`CacheStats`:
        ``cache_dir`` (absolute), ``entries``, ``bytes`` (disk space, as du counts it),
        ``max_size`` ($KJIT_CACHE_MAX_SIZE in bytes, None for no limit), ``in_transit``,
        ``in_transit_bytes``, ``foreign``, the times ``least_recent_use_ns``,
        ``most_recent_use_ns``, ``oldest_created_ns``, ``newest_created_ns`` (ns since the
        epoch, None without entries) and ``by_arch`` ({arch: :class:`ArchUsage`}). A missing
        folder is an empty cache. Raises KjitIOError for a folder that cannot be read or is
        refused, InvalidArgument for a malformed $KJIT_CACHE_MAX_SIZE. Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_summarize", "0.4")
        from . import _results

        folder = self.cache_dir(cache_dir)
        out, arches = _abi.CacheSummary(), ctypes.c_void_p()
        status = fn(os.fsencode(folder), ctypes.byref(out), ctypes.byref(arches))
        if status != _OK:
            raise self._error(status, "kjit_cache_summarize")
        f = self._fn
        try:
            by_arch = {}
            for i in range(f["kjit_cache_arches_count"](arches)):
                name = f["kjit_cache_arches_name"](arches, i).decode("utf-8", "replace")
                by_arch[name] = _results.ArchUsage(f["kjit_cache_arches_entries"](arches, i),
                                                   f["kjit_cache_arches_bytes"](arches, i))
        finally:
            f["kjit_cache_arches_release"](arches)
        values: Dict[str, Any] = {n: getattr(out, n) for n in _abi.CacheSummary.COUNTS}
        values.update({n: getattr(out, n) or None for n in _abi.CacheSummary.TIMES})
        values["max_size"] = out.max_size or None
        return _results.CacheStats(cache_dir=folder, by_arch=by_arch, **values)

    def _prune_report(self, folder: str, report: _abi.PruneReport) -> PruneReport:
        from . import _results

        return _results.PruneReport(cache_dir=folder, **{n: getattr(report, n) for n in _abi.PruneReport.COUNTS})

    def prune(self, cache_dir: Optional[PathLike] = None, *, max_size: Optional[int] = None,
              older_than: Union[int, float, datetime.timedelta, None] = None) -> PruneReport:
        """Removes cache entries by recency (kjit_cache_prune): those not used for
        ``older_than`` (seconds as an int or float, or a datetime.timedelta), then the least
        recently used until the rest take at most ``max_size`` bytes (an int; 0 removes every
        entry not in use). None leaves a bound out. Entries in use are never removed
        (``spared_in_use``). Returns a :class:`PruneReport`: ``cache_dir``, ``removed_entries``,
        ``removed_bytes``, ``spared_in_use``, ``removed_in_transit``,
        ``removed_variants_files``, ``kept_entries``, ``kept_bytes``. Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_prune", "0.4")
        options = _abi.PruneOptions()
        status = self._fn["kjit_prune_options_init"](ctypes.byref(options), ctypes.sizeof(options))
        if status != _OK:
            raise self._error(status, "kjit_prune_options_init")
        if max_size is not None:
            options.max_size = _prune_max_size(max_size)
        if older_than is not None:
            options.older_than_s = _prune_older_than(older_than)
        folder = self.cache_dir(cache_dir)
        report = _abi.PruneReport()
        status = fn(os.fsencode(folder), ctypes.byref(options), ctypes.byref(report))
        if status != _OK:
            raise self._error(status, "kjit_cache_prune")
        return self._prune_report(folder, report)

    def clear(self, cache_dir: Optional[PathLike] = None) -> PruneReport:
        """Removes every cache entry, in use or not (kjit_cache_clear). Returns a
        :class:`PruneReport`, as :meth:`prune` does. Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_clear", "0.4")
        folder = self.cache_dir(cache_dir)
        report = _abi.PruneReport()
        status = fn(os.fsencode(folder), ctypes.byref(report))
        if status != _OK:
            raise self._error(status, "kjit_cache_clear")
        return self._prune_report(folder, report)

    def verify(self, cache_dir: Optional[PathLike] = None, fix: bool = False) -> VerifyReport:
        """Checks every cache entry (kjit_cache_verify); with ``fix``, repairs damaged sidecars
        and removes what cannot be repaired. Returns a :class:`VerifyReport`; damage is in the
        report, not raised. Raises KjitIOError for a folder that cannot be read or is refused.
        Needs libkjit 0.4."""
        fn = self._needs("kjit_cache_verify", "0.4")
        from . import _results

        folder = self.cache_dir(cache_dir)
        handle = ctypes.c_void_p()
        status = fn(os.fsencode(folder), 1 if fix else 0, ctypes.byref(handle))
        if status != _OK:
            raise self._error(status, "kjit_cache_verify")
        f = self._fn
        try:
            return _results.VerifyReport(folder, f["kjit_verify_report_entries_checked"](handle),
                                         f["kjit_verify_report_entries_ok"](handle), self._problems(handle))
        finally:
            f["kjit_verify_report_release"](handle)

    def _problems(self, handle: ctypes.c_void_p) -> List[Problem]:
        """The findings of a kjit_verify_report handle, as :class:`Problem` s."""
        from . import _results
        from ._enums import CacheProblem

        f = self._fn
        problems = []
        for i in range(f["kjit_verify_report_count"](handle)):
            kind: Union[CacheProblem, int] = f["kjit_verify_report_kind"](handle, i)
            try:
                kind = CacheProblem(kind)
            except ValueError:
                pass
            problems.append(_results.Problem(os.fsdecode(f["kjit_verify_report_path"](handle, i)), kind,
                                             f["kjit_verify_report_detail"](handle, i).decode("utf-8", "replace"),
                                             f["kjit_verify_report_fixed"](handle, i) == 1,
                                             f["kjit_verify_report_action"](handle, i).decode("utf-8", "replace")))
        return problems

    def cache_export(self, dest_dir: PathLike, cache_dir: Optional[PathLike] = None, *,
                     arch: Optional[str] = None) -> CopyReport:
        """Writes the cache's sound entries (of ``arch`` only, e.g. "sm_90a", when given) into
        ``dest_dir`` as a seed cache (kjit_cache_export, ``kjit cache export``): entries only,
        ready to bake into a container image or put on a read-only share, and to name in
        ``seed_dirs=`` or $KJIT_CACHE_SEED. Each entry is verified first; damaged ones are in
        the report's ``refused``, not raised. Returns a :class:`CopyReport`. Raises
        KjitIOError for a folder that cannot be read, written or trusted. Needs libkjit 0.9."""
        fn = self._needs("kjit_cache_export", "0.9")
        folder = self.cache_dir(cache_dir)
        dest = _path_bytes(dest_dir, "dest_dir")
        return self._copy(fn, "kjit_cache_export", folder, os.fsdecode(dest),
                          (os.fsencode(folder), dest, _text_bytes(arch, "arch") if arch else None))

    def cache_import(self, source_dir: PathLike, cache_dir: Optional[PathLike] = None) -> CopyReport:
        """Copies the sound entries of ``source_dir`` (a seed cache, an export) into the cache
        (kjit_cache_import, ``kjit cache import``); damaged ones are in the report's
        ``refused``. Returns a :class:`CopyReport`. Needs libkjit 0.9."""
        fn = self._needs("kjit_cache_import", "0.9")
        folder = self.cache_dir(cache_dir)
        source = _path_bytes(source_dir, "source_dir")
        return self._copy(fn, "kjit_cache_import", folder, os.fsdecode(source), (source, os.fsencode(folder)))

    def record_start(self, path: PathLike) -> None:
        """Records every distinct request this process makes, hit or miss, into ``path`` (one
        JSON line each, appended; kjit_record_start, libkjit 0.11): the input of :meth:`warm`
        and ``kjit warm``. See :func:`record` for the context manager."""
        fn = self._needs("kjit_record_start", "0.11")
        status = fn(_path_bytes(path, "path"))
        if status != _OK:
            raise self._error(status, "kjit_record_start")

    def record_stop(self) -> None:
        """Stops recording (kjit_record_stop, libkjit 0.11)."""
        self._needs("kjit_record_stop", "0.11")()

    def warm(self, records: Iterable[PathLike], *, arch: Union[str, Sequence[str], None] = None,
             workers: Optional[int] = None, worker_kind: int = WORKERS_DEFAULT,
             cache_dir: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
             remote_storage: Optional[str] = None,
             base_dirs: Optional[Iterable[PathLike]] = None) -> List[BatchItem]:
        """Compiles every request of request records (:meth:`record_start`, ``$KJIT_RECORD``)
        ahead of time as one batch, for each of ``arch`` (a name or a list; default: the arch
        each was recorded with), into the cache; seeds and the cluster tier are asked first.
        Each request once, whatever the records repeat; lines that are no request are skipped.
        Returns the batch's items, in the records' order (arch by arch within a request): a
        failed item has its status and error, nothing is raised for it (docs/serving.md).
        ``seed_dirs``, ``remote_storage`` and ``base_dirs`` (base folders, libkjit 0.12) are
        :meth:`compile`'s, for every request: warm with the base folders the serving processes
        use, or their keys differ; a record made with base folders names its paths under them
        ("{base 0}/inc"), which these place under this process's (ValueError when it has fewer)."""
        from . import _record

        requests = _record.read(records)
        archs = [arch] if isinstance(arch, str) else list(arch) if arch is not None else None
        bases = _record.base_folders(base_dirs)
        batch: List[BatchRequest] = [dict(source=r.source, keyword=r.keyword, **r.options(a, bases))
                                     for r in requests for a in (archs or [r.arch])]
        return self.compile_batch(batch, workers=workers, worker_kind=worker_kind, cache_dir=cache_dir,
                                  seed_dirs=seed_dirs, remote_storage=remote_storage, compile_mode="always",
                                  base_dirs=base_dirs)

    def _copy(self, fn: Any, name: str, folder: str, other: str, args: Tuple[Any, ...]) -> CopyReport:
        from . import _results

        report = _abi.CopyReport()
        handle = ctypes.c_void_p()
        status = fn(*args, ctypes.byref(report), ctypes.byref(handle))
        if status != _OK:
            raise self._error(status, name)
        try:
            return _results.CopyReport(folder, os.path.abspath(other), report.copied_entries, report.copied_bytes,
                                       report.present_entries, report.skipped_entries, self._problems(handle))
        finally:
            self._fn["kjit_verify_report_release"](handle)

    def load_cached(self, cubin_path: PathLike, keyword: str) -> Kernel:
        """Loads kernel ``keyword`` of a cubin through the CUDA driver (libcuda.so.1, or
        $KJIT_LIBCUDA) and returns a :class:`Kernel` owning the handle. No current CUDA context
        is needed. Raises DriverError, NotFound, BadCubin, KjitIOError, ..."""
        args = (_path_bytes(cubin_path, "cubin_path"), _text_bytes(keyword, "keyword"))
        handle = ctypes.c_void_p()
        status = self._fn["kjit_load_cached"](*args, ctypes.byref(handle))
        if status != _OK:
            raise self._error(status, "kjit_load_cached")
        return Kernel(self, handle.value)

    def compile_and_load(self, source: Union[str, bytes], keyword: str,
                         *, cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
                         nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                         headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                         max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                         filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                         link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                         compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> Kernel:
        """:meth:`compile` then :meth:`load_cached` in one call (kjit_compile_and_load, libkjit
        0.5): a :class:`Kernel` for ``source``, for code that asks for its kernel at every
        launch. A repeat costs an ``lstat`` of the cubin and the loader's reuse of the loaded
        library (while a Kernel of it is alive). Same keyword arguments as :meth:`compile`;
        raises what :meth:`compile` and :meth:`load_cached` raise. With an older libkjit, it
        calls those two."""
        values = (cache_dir, arch, nvrtc_options, include_paths, headers, name_expression, max_cache_size,
                  remote_storage, filename, seed_dirs, link_inputs, link_options, compile_mode, base_dirs)
        return self._request(source, keyword, values).compile_and_load()


def _batch_requests(requests: Iterable[Any], options: Mapping[str, Any],
                    keep: List[Any]) -> List[_abi.CompileRequest]:
    """compile_batch's requests -> CompileRequest structs; what they point at goes in ``keep``."""
    if isinstance(requests, (str, bytes)):
        raise TypeError("requests must be a sequence of (source, keyword) pairs or dicts")
    structs = []
    for i, item in enumerate(requests):
        if isinstance(item, dict):
            extra = {k: v for k, v in item.items() if k not in ("source", "keyword")}
            for name in extra:
                if name not in _COMPILE_KEYWORDS:
                    raise TypeError(f"requests[{i}] has an unexpected key {name!r}")
            if "source" not in item or "keyword" not in item:
                raise TypeError(f"requests[{i}] needs 'source' and 'keyword'")
            source, keyword, item_options = item["source"], item["keyword"], {**options, **extra}
        elif isinstance(item, tuple) and len(item) == 2:
            (source, keyword), item_options = item, dict(options)
        else:
            raise TypeError(f"requests[{i}] must be a (source, keyword) pair or a dict")
        request = _abi.CompileRequest()
        request.source = _text_bytes(source, f"requests[{i}] source", allow_bytes=True)
        request.keyword = _text_bytes(keyword, f"requests[{i}] keyword")
        request.options = ctypes.pointer(_convert.compile_options(keep, **item_options))
        structs.append(request)
    return structs


def _batch_options(workers: Optional[int], pch: int, worker_kind: int) -> _abi.BatchOptions:
    """compile_batch's keyword arguments -> a BatchOptions (its progress set by the caller)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or
                                not 0 <= workers < 2**32):
        raise ValueError(f"workers must be a non-negative int, not {workers!r}")
    batch = _abi.BatchOptions()
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
        batch.struct_size = _abi.offset_of(_abi.BatchOptions, "worker_kind")
    return batch


def _prune_max_size(max_size: object) -> int:
    if isinstance(max_size, bool) or not isinstance(max_size, int):
        raise TypeError(f"max_size must be an int (bytes), not {type(max_size).__name__}")
    if not 0 <= max_size < _abi.PRUNE_NO_LIMIT:
        raise ValueError(f"max_size must be at least 0 and below 2**64 - 1 bytes, not {max_size}")
    return max_size


def _prune_older_than(older_than: object) -> int:
    total_seconds = getattr(older_than, "total_seconds", None)  # a datetime.timedelta, or alike
    seconds = total_seconds() if callable(total_seconds) else older_than
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"older_than must be seconds or a timedelta, not {type(older_than).__name__}")
    if seconds < 0:
        raise ValueError(f"older_than must not be negative: {older_than!r}")
    if seconds >= _abi.PRUNE_NO_LIMIT:  # a c_uint64 would wrap; up to that, libkjit says what it takes
        raise ValueError(f"older_than is too large: {older_than!r}")
    return int(seconds)


# --------------------------------------------------------------------------------------------
# Kernel: an owned kjit_kernel* handle

# cuda.core Kernels with no __dict__ (a cdef class), by id: the kjit Kernel each keeps alive.
_CORE_OWNERS: Dict[int, Kernel] = {}


def _forget_core(key: int) -> None:
    _CORE_OWNERS.pop(key, None)


class Kernel:
    """A kernel loaded by :meth:`Library.load_cached`, owning its ``kjit_kernel*``.

    Release it with :meth:`release` (alias :meth:`close`) or a ``with`` block; ``__del__``
    releases it as a fallback. Releasing twice is harmless. ``name`` and ``cubin_path`` stay
    readable after release; the driver handles raise ValueError then. The object may be used
    from any thread, but the CUkernel/CUlibrary/CUfunction values must not be used after
    release (libkjit unloads the library with its last handle).
    """

    def __init__(self, library: Library, handle: Optional[int]) -> None:
        if not handle:
            raise ValueError("NULL kjit_kernel handle")
        self._library, self._fn = library, library._fn  # keep the CDLL alive, also at exit
        self._lock = _thread.allocate_lock()
        self._handle: Optional[int] = handle
        self._name: str = self._fn["kjit_kernel_name"](handle).decode("utf-8", "replace")
        self._cubin_path: str = os.fsdecode(self._fn["kjit_kernel_cubin_path"](handle))

    def _live(self) -> int:
        handle = self._handle
        if handle is None:
            raise ValueError(f"kernel {self._name} has been released")
        return handle

    @property
    def name(self) -> str:
        """The kernel's mangled name (str)."""
        return self._name

    @property
    def cubin_path(self) -> str:
        """The cubin path as given to load_cached (str)."""
        return self._cubin_path

    @property
    def cukernel(self) -> int:
        """The driver's ``CUkernel`` as an int (launchable as a CUfunction, CUDA 12.0+)."""
        return int(self._fn["kjit_kernel_cukernel"](self._live()) or 0)

    @property
    def culibrary(self) -> int:
        """The ``CUlibrary`` the kernel belongs to, as an int (shared per cubin version)."""
        return int(self._fn["kjit_kernel_culibrary"](self._live()) or 0)

    def launch(self, grid: _launch.Dims, block: _launch.Dims, args: Iterable[Any], *, shared_mem: int = 0,
               stream: Any = None, readonly: _launch.ReadOnly = ()) -> None:
        """Launches the kernel with ``cuLaunchKernel`` on the current CUDA context (PyTorch and
        CuPy make one current on their device; with none, the driver says
        ``CUDA_ERROR_INVALID_CONTEXT``).

        - ``grid``, ``block``: an int or a tuple of up to three ints.
        - ``args``: one value per kernel parameter, in order:

          - a ``ctypes`` value of the parameter's C type (``ctypes.c_int(n)``,
            ``ctypes.c_float(x)``, ``ctypes.c_void_p(ptr)``, a ``ctypes.Structure``);
          - a NumPy scalar, passed as its own bytes by dtype: ``numpy.float32`` is a 4-byte
            float, ``numpy.float16`` a 2-byte half, ``numpy.int64`` 8 bytes; never widened;
          - a device array, passed as its device pointer: a PyTorch tensor (``data_ptr()``),
            anything with ``__cuda_array_interface__`` (CuPy, Numba; versions 0 to 3, its
            stream synchronized unless the launch is on it), anything with ``__dlpack__`` and
            ``__dlpack_device__`` (``data`` + ``byte_offset`` of its tensor, exported for this
            launch's stream and released after it), a CuPy memory pointer (``.ptr``).

          A bare Python int, float or bool is refused: its C type cannot be known. So is an
          array in host memory, and anything else, with a TypeError naming the argument's
          index and type.
        - ``stream``: None (the default stream), an int ``CUstream``, or an object that has one:
          ``torch.cuda.current_stream()`` (``cuda_stream``), a CuPy stream (``ptr``), a
          cuda.core stream (``__cuda_stream__()``).
        - ``readonly``: the indexes of the arguments the kernel only reads, or True for all: an
          array its producer marks read-only (``__cuda_array_interface__``'s flag, DLPack's
          ``READ_ONLY``) is refused anywhere else (ValueError naming the index).

        Raises :class:`DriverError` with the driver's error name when the launch fails, and
        ValueError after :meth:`release`. The launch is asynchronous, as in C.
        """
        from . import _launch

        grid3, block3 = _launch.dims(grid, "grid"), _launch.dims(block, "block")
        shared = _launch.shared_bytes(shared_mem)
        handle = _launch.stream_handle(stream)
        with _launch.Arguments(args, handle, readonly) as arguments:
            driver = _launch.driver()
            with self._lock:
                function = ctypes.c_void_p(self._fn["kjit_kernel_cukernel"](self._live()))
                result = driver.launch_kernel(function, *grid3, *block3, shared, ctypes.c_void_p(handle),
                                              arguments.params, None)
        if result != 0:
            raise driver.error(result, f"cuLaunchKernel of {self._name}")

    def as_cuda_core(self) -> Any:
        """This kernel as a ``cuda.core`` ``Kernel`` (``Kernel.from_handle`` of its CUkernel), to
        launch with cuda.core's ``launch()``. The returned object keeps this one alive, so the
        library stays loaded while it is in use; release this one only after it is gone.
        Needs cuda.core (``pip install cuda-core``); ImportError saying so otherwise. cuda.core
        calls the driver through ``libcuda.so.1``, by that name only: where no such library can
        be loaded (this kernel's driver came from ``$KJIT_LIBCUDA`` under another name, say), it
        raises :class:`DriverError` saying what cuda.core needs, instead of a ``SystemError``
        from cuda.core at its first driver call."""
        try:
            from cuda.core import Kernel as CoreKernel
        except ImportError:
            try:
                from cuda.core.experimental import Kernel as CoreKernel
            except ImportError as e:
                raise ImportError("Kernel.as_cuda_core needs cuda.core (pip install cuda-core)") from e
        handle = self.cukernel  # ValueError once released
        try:
            ctypes.CDLL("libcuda.so.1")  # what cuda.core's driver calls load: already loaded, or none
        except OSError as e:
            from ._enums import Status

            raise DriverError(Status.ERROR_DRIVER_UNAVAILABLE, "driver unavailable",
                              f"no usable CUDA driver for cuda.core: {e}. cuda.core loads the NVIDIA driver's "
                              "libcuda.so.1 by that name (this kernel was loaded through "
                              f"{os.environ.get('KJIT_LIBCUDA') or 'libcuda.so.1'}): install the driver, or put "
                              "the folder holding libcuda.so.1 on LD_LIBRARY_PATH; compiling, naming and the cache "
                              "work without one", "Kernel.as_cuda_core") from None
        core = CoreKernel.from_handle(handle)
        try:
            core._kjit_kernel = self
        except AttributeError:  # a class with no __dict__ (cuda.core's is a cdef class): beside it
            import weakref

            weakref.finalize(core, _forget_core, id(core))
            _CORE_OWNERS[id(core)] = self
        return core

    @property
    def released(self) -> bool:
        """True once the handle has been released."""
        return self._handle is None

    def cufunction(self) -> int:
        """The kernel as a ``CUfunction`` (int) in the calling thread's current CUDA context.
        Raises DriverError without a current context."""
        out = ctypes.c_void_p()
        status = self._fn["kjit_kernel_cufunction"](self._live(), ctypes.byref(out))
        if status != _OK:
            raise self._library._error(status, "kjit_kernel_cufunction")
        return out.value or 0

    def release(self) -> None:
        """kjit_kernel_release: drops the handle (idempotent, thread safe)."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self._fn["kjit_kernel_release"](handle)

    def close(self) -> None:
        """The same as :meth:`release`."""
        self.release()

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            if getattr(self, "_handle", None) is not None:
                self.release()
        except Exception:  # never raise from a finaliser (e.g. late in interpreter exit)
            pass

    def __repr__(self) -> str:
        state = "released" if self._handle is None else f"cukernel=0x{self.cukernel:x}"
        return f"<kjit.Kernel {self._name} from {self._cubin_path!r} {state}>"


# --------------------------------------------------------------------------------------------
# Module-level functions on a default Library, loaded on first use

_default: Optional[Library] = None
_default_lock = _thread.allocate_lock()


def load_library(path: Optional[PathLike] = None) -> Library:
    """Loads libkjit (``path``, else $KJIT_LIBRARY, else the search) and makes it the library
    the module-level functions use. Returns the :class:`Library`."""
    global _default
    lib = Library(path)
    with _default_lock:
        _default = lib
    return lib


def _lib() -> Library:
    global _default
    lib = _default
    if lib is None:
        with _default_lock:
            if _default is None:
                _default = Library()
            lib = _default
    return lib


def version() -> Tuple[int, int, int]:
    """(major, minor, patch) of the loaded libkjit."""
    return _lib().version()


def version_string() -> str:
    """The loaded libkjit's version as text, e.g. "0.1.0"."""
    return _lib().version_string()


def status_string(status: int) -> str:
    """The English name of a kjit status code."""
    return _lib().status_string(status)


def last_error() -> str:
    """This thread's detail text of its last failed libkjit call."""
    return _lib().last_error()


def resolve_name(cubin_path: PathLike, keyword: str) -> str:
    """See :meth:`Library.resolve_name`."""
    return _lib().resolve_name(cubin_path, keyword)


def compile(source: Union[str, bytes], keyword: str, *, cache_dir: Optional[PathLike] = None,  # noqa: A001
            arch: Optional[str] = None, nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
            headers: Optional[Headers] = None, name_expression: Optional[str] = None,
            max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
            filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
            link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
            compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> str:
    """See :meth:`Library.compile`; returns the cubin path."""
    return _lib().compile(source, keyword, cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                          include_paths=include_paths, headers=headers, name_expression=name_expression,
                          max_cache_size=max_cache_size, remote_storage=remote_storage, filename=filename,
                          seed_dirs=seed_dirs, link_inputs=link_inputs, link_options=link_options,
                          compile_mode=compile_mode, base_dirs=base_dirs)


def compile_named(source: Union[str, bytes], keyword: str,
                  *, cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
                  nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                  headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                  max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                  filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                  link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                  compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> Compiled:
    """See :meth:`Library.compile_named`; returns a :class:`Compiled` (cubin_path, name)."""
    lib = _default or _lib()
    given = (source, keyword, cache_dir, arch, nvrtc_options, include_paths, headers, name_expression, max_cache_size,
             remote_storage, filename, seed_dirs, link_inputs, link_options, compile_mode, base_dirs)
    return lib._compile_named(given)  # a repeat: one look-up and one C call


def prepare(source: Union[str, bytes], keyword: str,
            *, cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
            nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
            headers: Optional[Headers] = None, name_expression: Optional[str] = None,
            max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
            filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
            link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
            compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> Prepared:
    """See :meth:`Library.prepare`; returns a :class:`Prepared`."""
    return _lib().prepare(source, keyword, cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                          include_paths=include_paths, headers=headers, name_expression=name_expression,
                          max_cache_size=max_cache_size, remote_storage=remote_storage, filename=filename,
                          seed_dirs=seed_dirs, link_inputs=link_inputs, link_options=link_options,
                          compile_mode=compile_mode, base_dirs=base_dirs)


def compile_batch(requests: Iterable[BatchRequest], *, workers: Optional[int] = None, pch: int = PCH_DEFAULT,
                  progress: Union[ProgressCallback, bool, None] = None, worker_kind: int = WORKERS_DEFAULT,
                  cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
                  nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                  headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                  max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                  filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                  link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                  compile_mode: Optional[str] = None,
                  base_dirs: Optional[Iterable[PathLike]] = None) -> List[BatchItem]:
    """See :meth:`Library.compile_batch`; returns a list of :class:`BatchItem`."""
    return _lib().compile_batch(requests, workers=workers, pch=pch, progress=progress, worker_kind=worker_kind,
                                cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                                include_paths=include_paths, headers=headers, name_expression=name_expression,
                                max_cache_size=max_cache_size, remote_storage=remote_storage, filename=filename,
                                seed_dirs=seed_dirs, link_inputs=link_inputs, link_options=link_options,
                                compile_mode=compile_mode, base_dirs=base_dirs)


def stats() -> Stats:
    """See :meth:`Library.stats`."""
    return _lib().stats()


def load_cached(cubin_path: PathLike, keyword: str) -> Kernel:
    """See :meth:`Library.load_cached`."""
    return _lib().load_cached(cubin_path, keyword)


def compile_and_load(source: Union[str, bytes], keyword: str,
                     *, cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
                     nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                     headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                     max_cache_size: Union[int, float, None] = None, remote_storage: Optional[str] = None,
                     filename: Optional[PathLike] = None, seed_dirs: Optional[Iterable[PathLike]] = None,
                     link_inputs: Iterable[PathLike] = (), link_options: Iterable[str] = (),
                     compile_mode: Optional[str] = None, base_dirs: Optional[Iterable[PathLike]] = None) -> Kernel:
    """See :meth:`Library.compile_and_load`; returns a :class:`Kernel`."""
    return _lib().compile_and_load(source, keyword, cache_dir=cache_dir, arch=arch, nvrtc_options=nvrtc_options,
                                   include_paths=include_paths, headers=headers, name_expression=name_expression,
                                   max_cache_size=max_cache_size, remote_storage=remote_storage, filename=filename,
                                   seed_dirs=seed_dirs, link_inputs=link_inputs, link_options=link_options,
                                   compile_mode=compile_mode, base_dirs=base_dirs)


def remote_describe(remote_storage: Optional[str] = None) -> RemoteDescription:
    """See :meth:`Library.remote_describe`."""
    return _lib().remote_describe(remote_storage)


def cache_dir(cache_dir: Optional[PathLike] = None) -> str:
    """See :meth:`Library.cache_dir`."""
    return _lib().cache_dir(cache_dir)


def cache_stats(cache_dir: Optional[PathLike] = None) -> CacheStats:
    """See :meth:`Library.cache_stats`."""
    return _lib().cache_stats(cache_dir)


def prune(cache_dir: Optional[PathLike] = None, *, max_size: Optional[int] = None,
          older_than: Union[int, float, datetime.timedelta, None] = None) -> PruneReport:
    """See :meth:`Library.prune`."""
    return _lib().prune(cache_dir, max_size=max_size, older_than=older_than)


def verify(cache_dir: Optional[PathLike] = None, fix: bool = False) -> VerifyReport:
    """See :meth:`Library.verify`."""
    return _lib().verify(cache_dir, fix)


def clear(cache_dir: Optional[PathLike] = None) -> PruneReport:
    """See :meth:`Library.clear`."""
    return _lib().clear(cache_dir)


def cache_export(dest_dir: PathLike, cache_dir: Optional[PathLike] = None, *, arch: Optional[str] = None) -> CopyReport:
    """See :meth:`Library.cache_export`."""
    return _lib().cache_export(dest_dir, cache_dir, arch=arch)


def cache_import(source_dir: PathLike, cache_dir: Optional[PathLike] = None) -> CopyReport:
    """See :meth:`Library.cache_import`."""
    return _lib().cache_import(source_dir, cache_dir)


class record:  # noqa: N801 (used as a function: with kjit.record(path): ...)
    """Records every distinct request made inside the ``with`` block (any thread of the process),
    hit or miss, into ``path``: one JSON line each, appended, each request once even across
    processes (libkjit 0.11). ``kjit warm PATH`` or :func:`warm` compiles them ahead of time::

        with kjit.record("requests.jsonl"):
            run_the_workload()
    """

    def __init__(self, path: PathLike) -> None:
        self._path = path

    def __enter__(self) -> "record":
        _lib().record_start(self._path)
        return self

    def __exit__(self, *exc: Any) -> None:
        _lib().record_stop()


def warm(records: Iterable[PathLike], *, arch: Union[str, Sequence[str], None] = None,
         workers: Optional[int] = None, worker_kind: int = WORKERS_DEFAULT, cache_dir: Optional[PathLike] = None,
         seed_dirs: Optional[Iterable[PathLike]] = None, remote_storage: Optional[str] = None,
         base_dirs: Optional[Iterable[PathLike]] = None) -> List[BatchItem]:
    """See :meth:`Library.warm`."""
    return _lib().warm(records, arch=arch, workers=workers, worker_kind=worker_kind, cache_dir=cache_dir,
                       seed_dirs=seed_dirs, remote_storage=remote_storage, base_dirs=base_dirs)


# The public classes defined in the private modules read as kjit's, as they did when this
# package was one module (in reprs, tracebacks and pickles).
for _public in (KjitError, LibraryNotFound, InvalidArgument, NotFound, Ambiguous, BadCubin,
                KjitIOError, CompileError, DriverError, LinkError, Compiled, Prepared):
    _public.__module__ = __name__
del _public
