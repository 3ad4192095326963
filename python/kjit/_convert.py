"""Python arguments to C: done before any C call, so bad input never reaches the library."""

from __future__ import annotations

import ctypes
import os

from . import _abi

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union

    # A path argument as the API takes it, and in-memory headers.
    PathLike = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]
    Headers = Union[Mapping[str, Union[str, bytes]], Iterable[Tuple[str, Union[str, bytes]]]]


def path_bytes(value: object, what: str) -> bytes:
    """str, bytes or os.PathLike -> NUL-free bytes in the file system encoding."""
    if value is None or not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be str, bytes or os.PathLike, not {type(value).__name__}")
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL character")
    return raw


def text_bytes(value: object, what: str, allow_bytes: bool = False) -> bytes:
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


def string_array(values: object, what: str, convert: Callable[[object, str], bytes]) -> Tuple[Any, int]:
    """An iterable (not a single str/bytes/path) -> (char *[n] holding the converted items, or
    None when empty; n)."""
    if values is None or isinstance(values, (str, bytes, os.PathLike)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what} must be a sequence, not {type(values).__name__}")
    items = [convert(v, f"{what}[{i}]") for i, v in enumerate(values)]
    return ((ctypes.c_char_p * len(items))(*items) if items else None), len(items)


def frozen(value: object) -> object:
    """A hashable stand-in for one of compile's arguments, equal for arguments that encode to
    the same C struct (a list and a tuple of the same strings, say), and never for two that
    encode differently or of which only one is accepted: numbers carry their type (1.0 is
    refused where 1 is taken). TypeError for what it cannot freeze."""
    if value is None or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (int, float)):
        return (type(value), value)
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    if isinstance(value, tuple):
        return ("seq",) + tuple(frozen(v) for v in value)
    if isinstance(value, os.PathLike):
        return ("path", os.fspath(value))
    items = getattr(value, "items", None)
    if items is not None:
        return ("map",) + tuple((frozen(k), frozen(v)) for k, v in items())
    if isinstance(value, list):
        return ("seq",) + tuple(frozen(v) for v in value)
    raise TypeError(f"cannot freeze {type(value).__name__}")


def _max_cache_size(value: object) -> int:
    if value == float("inf"):
        return 2**64 - 1
    if isinstance(value, int) and 0 < value < 2**64 - 1:
        return value
    raise ValueError(f"max_cache_size must be a positive int (bytes) or inf, not {value!r}")


def _headers(headers: Any, keep: List[Any]) -> Tuple[Any, int]:
    pairs = list(headers.items()) if hasattr(headers, "items") else list(headers)
    if not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise TypeError("headers must be a mapping or a sequence of (name, source) pairs")
    array = (_abi.Header * len(pairs))(*[
        _abi.Header(text_bytes(n, f"headers[{i}] name"), text_bytes(s, f"headers[{i}] source", True))
        for i, (n, s) in enumerate(pairs)])
    keep.append(array)
    return array, len(pairs)


# compile_mode= -> kjit_compile_mode (libkjit 0.11).
COMPILE_MODES = {"always": _abi.COMPILE_MODES["ALWAYS"], "warn": _abi.COMPILE_MODES["WARN"],
                 "never": _abi.COMPILE_MODES["NEVER"]}


def _struct_size(basing: bool, moding: bool, linking: bool, seeding: bool, naming: bool, remote: bool) -> int:
    """kjit_compile_options' struct_size for a call that sets these fields: up to the last one
    set, at least libkjit 0.5's struct (up to remote_storage); a struct that sets none of a
    release's fields ends before them, so a libkjit older than that release still takes it."""
    for used, after in ((basing, None), (moding, "base_dirs"), (linking, "compile_mode"), (seeding, "link_inputs"),
                        (naming, "seed_dirs"), (remote, "program_name")):
        if used:
            return ctypes.sizeof(_abi.CompileOptions) if after is None else _abi.offset_of(_abi.CompileOptions, after)
    return _abi.offset_of(_abi.CompileOptions, "remote_storage")


def compile_options(keep: List[Any], *, cache_dir: Optional[PathLike] = None, arch: Optional[str] = None,
                    nvrtc_options: Iterable[str] = (), include_paths: Iterable[PathLike] = (),
                    headers: Optional[Headers] = None, name_expression: Optional[str] = None,
                    max_cache_size: Union[int, float, None] = None,
                    remote_storage: Optional[str] = None, filename: Optional[PathLike] = None,
                    seed_dirs: Optional[Iterable[PathLike]] = None, link_inputs: Iterable[PathLike] = (),
                    link_options: Iterable[str] = (), compile_mode: Optional[str] = None,
                    base_dirs: Optional[Iterable[PathLike]] = None) -> _abi.CompileOptions:
    """kjit_compile's keyword arguments -> a CompileOptions; what it points at goes in ``keep``.

    Its struct_size ends at the last field set (at least libkjit 0.5's), so that a library older
    than this module still takes it (it refuses a struct larger than its own)."""
    opts = _abi.CompileOptions()
    if seed_dirs is not None:
        # An empty list: no seed whatever $KJIT_CACHE_SEED says (the C option's "none").
        seeds, opts.seed_dir_count = string_array(seed_dirs, "seed_dirs", path_bytes)
        if not opts.seed_dir_count:
            seeds, opts.seed_dir_count = (ctypes.c_char_p * 1)(b"none"), 1
        opts.seed_dirs = seeds
        keep.append(seeds)
    if base_dirs is not None:
        # An empty list: no base folder whatever $KJIT_BASE_DIRS says (the C option's "none").
        bases, opts.base_dir_count = string_array(base_dirs, "base_dirs", path_bytes)
        if not opts.base_dir_count:
            bases, opts.base_dir_count = (ctypes.c_char_p * 1)(b"none"), 1
        opts.base_dirs = bases
        keep.append(bases)
    inputs, opts.link_input_count = string_array(link_inputs, "link_inputs", path_bytes)
    links, opts.link_option_count = string_array(link_options, "link_options", text_bytes)
    opts.link_inputs, opts.link_options = inputs, links
    keep += [inputs, links]
    if compile_mode is not None:
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {', '.join(map(repr, COMPILE_MODES))}, not {compile_mode!r}")
        opts.compile_mode = COMPILE_MODES[compile_mode]
    opts.struct_size = _struct_size(base_dirs is not None, compile_mode is not None,
                                    bool(opts.link_input_count or opts.link_option_count), seed_dirs is not None,
                                    filename is not None, remote_storage is not None)
    if filename is not None:
        opts.program_name = path_bytes(filename, "filename")
    if remote_storage is not None:
        opts.remote_storage = text_bytes(remote_storage, "remote_storage")
    if cache_dir is not None:
        opts.cache_dir = path_bytes(cache_dir, "cache_dir")
    if arch is not None:
        opts.arch = text_bytes(arch, "arch")
    if name_expression is not None:
        opts.name_expression = text_bytes(name_expression, "name_expression")
    if max_cache_size is not None:
        opts.max_cache_size = _max_cache_size(max_cache_size)
    options, opts.nvrtc_option_count = string_array(nvrtc_options, "nvrtc_options", text_bytes)
    paths, opts.include_path_count = string_array(include_paths, "include_paths", path_bytes)
    opts.nvrtc_options, opts.include_paths = options, paths
    keep += [options, paths, opts]
    if headers:
        opts.headers, opts.header_count = _headers(headers, keep)
    return opts


_C_FIELD = r"\bkjit_(?:compile_options|batch_options|compile_request)\.([a-z_]+)"


def in_python_terms(message: str) -> str:
    """libkjit's message with the C struct fields it names as this package's keyword arguments:
    ``kjit_compile_options.arch`` reads ``arch=``. (On errors only: the pattern is compiled, and
    cached by re, at the first; re itself is imported then.)"""
    import re

    return re.sub(_C_FIELD, lambda m: m.group(1) + "=", message)
