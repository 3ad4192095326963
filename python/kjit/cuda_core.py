r"""cuda.core on kjit's cache: compile with cuda.core's own ``ProgramOptions`` and name
expressions, get back a cuda.core ``ObjectCode`` whose ``symbol_mapping`` is there on every hit.

``cuda.core.Program.compile(cache=...)`` refuses name expressions, because the mapping from a
name expression to its lowered (mangled) name comes from NVRTC at compile time and is not in
the bytes its cache stores. libkjit keeps that name beside each cubin (the ``<cubin>.name``
sidecar), so a hit, in this process or a fresh one, gives it back without running NVRTC::

    import kjit.cuda_core
    mod = kjit.cuda_core.compile(SOURCE, ProgramOptions(arch="sm_90"), ("scale<3>",))
    kernel = mod.get_kernel("scale<3>")        # a cuda.core Kernel, for cuda.core's launch()

This submodule imports cuda.core (cuda-core 0.6 or newer: ``pip install cuda-core
cuda-bindings==13.*``); ``import kjit`` alone never does. It calls libkjit through kjit's
public functions (``kjit.prepare``, ``kjit.compile_batch``).

One name expression per cache entry
-----------------------------------
libkjit's compile takes one name expression (``kjit_compile_options::name_expression``) and
caches one kernel's name per entry, so :func:`compile` takes at most one. Several go to
:func:`compile_each`: one cache entry per name expression, compiled as one
``kjit.compile_batch`` (hits answered at once, misses compiled in parallel), returned as
``{name_expression: ObjectCode}``, each ``ObjectCode`` mapping its own name expression.

Repeats
-------
A repeated :func:`compile` is kjit's call and two dictionary look-ups: the request of each set
of arguments is kept (a ``kjit.Prepared``, keyed on the arguments' values, the
``ProgramOptions`` by its NVRTC translation), and so is the ``ObjectCode`` of each cubin file,
keyed on the path libkjit answers with and the file's identity (inode, size, mtime). libkjit
proves its entry unchanged on every call; an answer naming another cubin, or a file replaced
since, gets an ``ObjectCode`` of its own bytes. A repeat therefore returns the same
``ObjectCode`` object while the answer is the same file (its module is loaded once by
``get_kernel``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Mapping, Sequence, Tuple, Union

import kjit
from kjit._errors import ERROR_CLASSES
from kjit._prepared import all_plain as _all_plain

try:
    import cuda.core
    from cuda.core import ObjectCode, ProgramOptions
except ImportError as e:
    raise ImportError("kjit.cuda_core needs cuda.core (pip install cuda-core cuda-bindings==13.*, the major of "
                      "your CUDA toolkit)") from e
# 0.6 is the first with both: ObjectCode.symbol_mapping, and as_bytes() for a target type.
if not (hasattr(ObjectCode, "symbol_mapping") and hasattr(ProgramOptions, "as_bytes")):
    raise ImportError(f"kjit.cuda_core needs cuda-core 0.6 or newer, not {getattr(cuda.core, '__version__', '?')} "
                      "(pip install -U cuda-core)")

__all__ = ["compile", "compile_each", "kjit_options", "keyword_of"]

NameExpression = Union[str, bytes]

# NVRTC options (as cuda.core writes them) that ask for something other than one loadable,
# whole-program cubin, or for a side effect a cache hit would skip: what the ProgramOptions field
# is and why kjit cannot honour it. Checked on the translated options, so that it holds for every
# cuda.core version whatever its fields are called.
_REFUSED = (
    (("--relocatable-device-code=true", "-rdc=true", "-rdc"), "relocatable_device_code",
     "relocatable device code needs a link step (cuda.core's Linker); kjit caches whole-program cubins"),
    (("--extensible-whole-program", "-ewp"), "extensible_whole_program",
     "extensible whole-program code needs a link step (cuda.core's Linker); kjit caches loadable cubins"),
    (("--dlink-time-opt", "-dlto"), "link_time_optimization",
     "it asks for LTO-IR, not a cubin; kjit caches cubins only"),
    (("--gen-opt-lto",), "gen_opt_lto", "it asks for LTO-IR, not a cubin; kjit caches cubins only"),
    (("--fdevice-syntax-only",), "fdevice_syntax_only", "it stops before code generation: there is no cubin"),
    (("--time",), "time", "it writes a file while compiling, which a cache hit would not"),
    (("--fdevice-time-trace",), "fdevice_time_trace", "it writes a file while compiling, which a cache hit would not"),
) + tuple(((f"--{field.replace('_', '-')}",), field,
             "kjit keeps its own precompiled headers, one per state of the headers: use ProgramOptions(pch=True)")
           for field in ("create_pch", "use_pch", "pch_dir"))
# cuda.core's ProgramOptions.name when none is given.
_DEFAULT_PROGRAM_NAME = "default_program"
# Fields for cuda.core's NVVM backend, which its NVRTC translation leaves out without a word.
_NVVM_ONLY = ("extra_sources", "use_libdevice")

# A name expression's kernel: an optionally qualified identifier, then template arguments.
_NAME_EXPRESSION = re.compile(r"\s*&?\s*(?:::\s*)?([A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)\s*(?:<.*>)?\s*", re.S)


def keyword_of(name_expression: NameExpression) -> str:
    """The kernel a name expression names, as libkjit's keyword: ``"scale<3>"`` -> ``"scale"``,
    ``"ns::gemm<128, 64>"`` -> ``"ns::gemm"``, ``"&f"`` -> ``"f"``. ValueError for an
    expression it cannot read (a cast, say): pass ``keyword=`` to :func:`compile` then."""
    text = _text(name_expression, "name expression")
    match = _NAME_EXPRESSION.fullmatch(text)
    if not match:
        raise ValueError(f"cannot tell the kernel's name in the name expression {text!r}: pass keyword='kernel' "
                         f"(the kernel's identifier, e.g. 'scale' for 'scale<3>')")
    return re.sub(r"\s+", "", match.group(1))


def kjit_options(options: ProgramOptions | None) -> dict[str, Any]:
    """A cuda.core ``ProgramOptions`` as the keyword arguments of kjit's compile functions:
    ``{"arch": ..., "nvrtc_options": [...]}``, for ``kjit.compile``, ``kjit.compile_batch``
    or ``kjit.compile_and_load`` (whose ``Kernel.as_cuda_core()`` gives a cuda.core Kernel).

    The NVRTC options are cuda.core's own translation (``ProgramOptions.as_bytes("nvrtc",
    "cubin")``) without the arch, which kjit takes apart.
    None gives ``{}``: kjit's default arch ($KJIT_ARCH, else the GPU's). ValueError, naming
    the field, for what kjit cannot honour: relocatable or extensible whole-program code, LTO-IR,
    syntax-only, a virtual ``compute_XX`` arch, options that write files while compiling
    (``time``, ``fdevice_time_trace``), NVRTC's own PCH files (``pch=True`` is fine: kjit's PCH)
    and the NVVM-only fields."""
    if options is None:
        return {}
    for field in _NVVM_ONLY:
        if getattr(options, field, None):
            raise ValueError(f"ProgramOptions.{field} is for cuda.core's NVVM backend; kjit compiles C++ with NVRTC")
    arch = getattr(options, "arch", None) or None
    if arch is not None and not str(arch).startswith("sm_"):
        raise ValueError(f"ProgramOptions.arch={arch!r}: kjit caches cubins, which need a real arch such as 'sm_90'")
    nvrtc_options = [o for o in _translated(options) if not _is_arch_option(o)]
    for option in nvrtc_options:
        _refuse(option)
    result: dict[str, Any] = {"nvrtc_options": nvrtc_options}
    if arch is not None:
        result["arch"] = arch
    return result


def compile(code: str, options: ProgramOptions | None = None,  # noqa: A001
            name_expressions: Sequence[NameExpression] = (), *, keyword: str | None = None,
            cache_dir: Any = None, **kjit_compile_options: Any) -> ObjectCode:
    """``Program(code, "c++", options).compile("cubin", name_expressions)`` through kjit's
    cache: a cuda.core ``ObjectCode`` holding the cubin's bytes, named ``options.name``, whose
    ``symbol_mapping`` maps the name expression (str or bytes, as given) to its lowered name
    (bytes), as cuda.core's own does, on a miss and on every hit (none runs NVRTC).

    - ``options``: a cuda.core ``ProgramOptions`` (see :func:`kjit_options` for what is
      refused), or None for kjit's defaults.
    - ``name_expressions``: at most one (use :func:`compile_each` for several).
    - ``keyword``: the kernel's identifier, for libkjit's keyword rule; by default
      :func:`keyword_of` the name expression. Needed without a name expression; the returned
      mapping then maps the keyword to the kernel's mangled name, so ``get_kernel(keyword)``
      finds a C++ kernel too.
    - ``cache_dir`` and ``**kjit_compile_options`` (``headers``, ``include_paths``,
      ``max_cache_size``, ``remote_storage``): as for ``kjit.compile``.

    Raises kjit's errors (``kjit.CompileError`` with NVRTC's log, ...), ValueError for
    options kjit cannot honour, TypeError for arguments of the wrong type."""
    try:
        key: Any = _request_key(code, options, name_expressions, keyword, cache_dir, kjit_compile_options)
        request = _requests.get(key)
    except Exception:  # noqa: BLE001: arguments the full path below checks, and raises for
        key, request = None, None
    if request is None or request[0].library is not kjit._default:  # a new library since: prepared anew
        plain = key is not None and _all_plain(key[1:])
        request = _prepare(code, options, name_expressions, keyword, cache_dir, kjit_compile_options,
                           key if plain else None)
        if plain:
            if len(_requests) >= _MEMO_MAX_ENTRIES:
                _requests.clear()
            _requests[key] = request
    else:  # asked again: libkjit's own prepared request from now on (no hashing at each call)
        request[0]._native_from_next_call()
    prepared, mapping_key, label = request
    compiled = prepared.compile_named()
    return _object_code(compiled.cubin_path, compiled.name, mapping_key, label)


# compile()'s memo: (kjit.Prepared, the symbol_mapping's key, the ObjectCode's name) by the
# arguments' key; emptied when it holds this many.
_MEMO_MAX_ENTRIES = 256
_requests: dict[Any, Tuple[kjit.Prepared, NameExpression, str]] = {}
# The values of kjit's compile keyword arguments (kjit._COMPILE_DEFAULTS' order, no name
# expression) for the options, cache folder and other arguments of a plain key: a sweep asks for
# many kernels under one ProgramOptions, translated once. Emptied with the size of _requests.
_values: dict[Any, Tuple[Any, ...]] = {}
_NAME_AT = kjit._COMPILE_KEYWORDS.index("name_expression")


def _request_key(code: str, options: ProgramOptions | None, name_expressions: Sequence[NameExpression],
                 keyword: str | None, cache_dir: Any, extra: Mapping[str, Any]) -> Any:
    """compile()'s arguments as a key: equal for two calls that make the same request. The
    ProgramOptions by its type, its NVRTC translation (what kjit_options reads), its name and the
    NVVM-only fields (which the translation leaves out, and kjit refuses). Raises (TypeError,
    AttributeError, ...) for what the full path should look at; only keys whose parts after the
    options are plain (str, bytes, None, tuples of them) are kept."""
    if options is None:
        options_key: Any = None
    else:
        options_key = (type(options), tuple(options.as_bytes("nvrtc", "cubin")), options.name,
                       getattr(options, "extra_sources", None), getattr(options, "use_libdevice", None))  # _NVVM_ONLY
    kind = type(name_expressions)
    if kind is not tuple and kind is not list:
        raise TypeError("name_expressions: the full path says what it takes")
    if cache_dir is not None and type(cache_dir) is not str:
        cache_dir = os.fspath(cache_dir)  # a path: the same request as its text
    return (options_key, code, tuple(name_expressions), keyword, cache_dir, *extra.items())


def _prepare(code: str, options: ProgramOptions | None, name_expressions: Sequence[NameExpression],
             keyword: str | None, cache_dir: Any, extra: Mapping[str, Any],
             key: Any = None) -> Tuple[kjit.Prepared, NameExpression, str]:
    """compile()'s arguments checked and encoded: (kjit.Prepared, the symbol_mapping's key, the
    ObjectCode's name). ``key``: compile()'s key of them where it is plain (its options'
    translation is then kept for the next kernels). The request is not libkjit's own yet: its
    first call takes the plain path, which costs a request asked once less than kjit_prepare
    (compile() makes it libkjit's own when it is asked again)."""
    expressions = _expressions(name_expressions)
    if len(expressions) > 1:
        raise ValueError(f"kjit.cuda_core.compile takes one name expression, got {len(expressions)}: libkjit caches "
                         "one kernel's name per entry; kjit.cuda_core.compile_each(code, options, name_expressions) "
                         "gives {name_expression: ObjectCode}")
    expression = expressions[0] if expressions else None
    kw = _keyword(expression, keyword)
    values_key = (key[0], key[4], key[5:]) if key is not None else None
    values = _values.get(values_key) if values_key is not None else None
    if values is None:
        kwargs = _compile_kwargs(options, cache_dir, extra)
        unknown = sorted(set(kwargs) - set(kjit._COMPILE_DEFAULTS))
        if unknown:
            raise TypeError(f"kjit.cuda_core.compile() got an unexpected keyword argument '{unknown[0]}'")
        kwargs["nvrtc_options"] = tuple(kwargs.get("nvrtc_options", ()))
        values = tuple(kwargs.get(name, default) for name, default in kjit._COMPILE_DEFAULTS.items())
        if values_key is not None:
            if len(_values) >= _MEMO_MAX_ENTRIES:
                _values.clear()
            _values[values_key] = values
    if expression is not None:
        values = (*values[:_NAME_AT], _text(expression, "name expression"), *values[_NAME_AT + 1:])
    library = kjit._default or kjit._lib()
    # Not kept in the library's memo: compile() keeps it, and makes it libkjit's own when asked again.
    prepared = library._memo.new_request(library, code, kw, values, _all_plain(values))
    return prepared, expression if expression is not None else kw, _program_name(options)


def compile_each(code: str, options: ProgramOptions | None = None,
                 name_expressions: Sequence[NameExpression] = (), *, cache_dir: Any = None,
                 workers: int | None = None, progress: Callable[..., Any] | None = None,
                 **kjit_compile_options: Any) -> dict[NameExpression, ObjectCode]:
    """:func:`compile` for each name expression, as one ``kjit.compile_batch``: hits are
    answered at once, misses compile in parallel (``workers``: as for ``compile_batch``).
    Returns ``{name_expression: ObjectCode}`` in the order given, each ``ObjectCode`` holding
    its own cache entry's cubin with its one name expression in ``symbol_mapping``. The first
    item that failed is raised as the ``kjit.KjitError`` ``compile`` would raise (the
    ``CompileError`` carries NVRTC's log); the others are still in the cache."""
    expressions = list(dict.fromkeys(_expressions(name_expressions)))
    if not expressions:
        raise ValueError("kjit.cuda_core.compile_each needs at least one name expression")
    kwargs = _compile_kwargs(options, cache_dir, kjit_compile_options)
    requests = [{"source": code, "keyword": keyword_of(e), "name_expression": _text(e, "name expression")}
                for e in expressions]
    items = kjit.compile_batch(requests, workers=workers, progress=progress, **kwargs)
    result = {}
    for expression, request, item in zip(expressions, requests, items):
        if not item.ok:
            raise _batch_error(item, expression)
        name = item.kernel_name
        if name is None:  # libkjit before 0.5 gives no names from a batch: its look-up is a hit now
            name = kjit.compile_named(code, request["keyword"], name_expression=request["name_expression"],
                                      **kwargs).name
        assert item.cubin_path is not None  # an item that is ok has its cubin
        result[expression] = _object_code(item.cubin_path, name, expression, _program_name(options))
    return result


def _text(value: NameExpression, what: str) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    raise TypeError(f"a {what} must be str or bytes, not {type(value).__name__}")


def _expressions(name_expressions: Sequence[NameExpression]) -> list[NameExpression]:
    # A bare string would be taken letter by letter, as cuda.core's Program.compile would.
    if isinstance(name_expressions, (str, bytes)):
        raise TypeError(f"name_expressions must be a sequence of str or bytes, e.g. ({name_expressions!r},), "
                        "not a single string")
    expressions = list(name_expressions)
    for e in expressions:
        _text(e, "name expression")
    return expressions


def _keyword(expression: NameExpression | None, keyword: str | None) -> str:
    if keyword is not None:
        return keyword
    if expression is None:
        raise ValueError("kjit.cuda_core.compile without a name expression needs keyword='kernel' "
                         "(the kernel's identifier, for libkjit's keyword rule)")
    return keyword_of(expression)


def _compile_kwargs(options: ProgramOptions | None, cache_dir: Any, extra: Mapping[str, Any]) -> dict[str, Any]:
    taken = sorted(set(extra) & {"arch", "nvrtc_options", "name_expression", "filename"})
    if taken:
        raise TypeError(f"{', '.join(taken)}: give these through ProgramOptions and name_expressions")
    # The program's name, as cuda.core's Program gives it to NVRTC: the cubin is then the one
    # Program.compile makes, and NVRTC's log and device asserts name the program alike.
    filename = _program_name(options)
    return {**kjit_options(options), "cache_dir": cache_dir, "filename": filename, **extra}


def _translated(options: ProgramOptions) -> list[str]:
    """cuda.core's own NVRTC translation of the options, as str."""
    if not isinstance(options, ProgramOptions):
        raise TypeError(f"options must be a cuda.core ProgramOptions, not {type(options).__name__}")
    return [o.decode("utf-8") for o in options.as_bytes("nvrtc", "cubin")]


def _program_name(options: ProgramOptions | None) -> str:
    """The program's name as cuda.core's Program gives it: ``options.name``, else its default."""
    return getattr(options, "name", None) or _DEFAULT_PROGRAM_NAME


def _is_arch_option(option: str) -> bool:
    return option.startswith(("-arch=", "--gpu-architecture=")) or option in ("-arch", "--gpu-architecture")


def _refuse(option: str) -> None:
    for spellings, field, why in _REFUSED:
        if any(option == s or option.startswith(s + "=") for s in spellings):
            raise ValueError(f"ProgramOptions.{field} ({option}): {why}")


# The ObjectCodes made, by (cubin path, kernel name, mapping key, label), each with the identity
# of the file it was read from; emptied when it holds this many, or cubins of this many bytes.
_OBJECTS_MAX_ENTRIES = 256
_OBJECTS_MAX_BYTES = 256 << 20
_objects: dict[Any, Tuple[Tuple[int, int, int, int], ObjectCode]] = {}
_objects_bytes = 0


def _identity(st: os.stat_result) -> Tuple[int, int, int, int]:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


def _object_code(cubin_path: str, name: str, key: NameExpression, label: str) -> ObjectCode:
    """The ObjectCode of the cubin libkjit answered with: the one made before for this file, as
    long as it is the same file (a replaced one has another inode or mtime), else a new one."""
    global _objects_bytes
    made_before = _objects.get((cubin_path, name, key, label))
    if made_before is not None:  # the file stat'ed only then: a new kernel's is not
        try:
            if _identity(os.stat(cubin_path)) == made_before[0]:
                return made_before[1]
        except OSError:  # gone since libkjit's answer (evicted, cleared): the open below says so
            pass
    # The bytes, not the path: the ObjectCode then holds this entry's cubin, whatever later
    # happens to the file (eviction, kjit.clear()). Identity and bytes from one open file.
    with open(cubin_path, "rb") as f:
        identity = _identity(os.fstat(f.fileno()))
        cubin = f.read()
    mapping = {} if key == name else {key: name.encode("utf-8")}
    made = ObjectCode.from_cubin(cubin, name=label, symbol_mapping=mapping)
    if len(_objects) >= _OBJECTS_MAX_ENTRIES or _objects_bytes + len(cubin) > _OBJECTS_MAX_BYTES:
        _objects.clear()
        _objects_bytes = 0
    _objects[(cubin_path, name, key, label)] = (identity, made)
    _objects_bytes += len(cubin)
    return made


def _batch_error(item: Any, expression: NameExpression) -> kjit.KjitError:
    # The exception compile would raise for that status (kjit's one table of them).
    cls = ERROR_CLASSES.get(item.status, kjit.KjitError)
    return cls(item.status, kjit.status_string(item.status), f"name expression {expression!r}: {item.error}",
               "kjit_compile_batch")
