"""Prepared requests: a compile request encoded once, so that asking again is one C call.

A :class:`Prepared` holds what ``kjit_compile_named`` (or ``kjit_compile``) takes, made once
from Python's arguments: the source and keyword as bytes, the ``kjit_compile_options`` struct
and what it points at, and the out buffers. One made by :func:`kjit.prepare` also holds libkjit's
own prepared request (``kjit_prepare``, libkjit 0.14), whose calls take no hash of the source or
options: libkjit took them once, when it was made. Asking it again converts nothing: the call goes to a
function object with no ``argtypes`` (ctypes passes bytes, buffers and ``byref``s as they are,
so it has nothing to check), and the answer's bytes are compared with the last answer's, whose
``Compiled`` is given back when they are equal. libkjit still answers every call (its hit memo
proves the entry unchanged each time: an edited header or a replaced cubin gives the new
answer); only the Python objects of an unchanged answer are reused.

:class:`kjit.Library` keeps the prepared requests of its plain calls (``compile``,
``compile_named``, ``compile_and_load``) in a bounded memo keyed on the arguments' values, so a
repeated call finds its request with one dictionary look-up (see ``Library._request``).
"""

from __future__ import annotations

import _thread
import ctypes
import os

from . import _abi, _convert

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

    from . import Kernel, Library

_OK = 0  # Status.OK, as a plain int: compared on every call
_TOO_SMALL = 10  # Status.ERROR_BUFFER_TOO_SMALL


if TYPE_CHECKING:
    class Compiled(NamedTuple):
        """What :meth:`Library.compile_named` returns: the cached cubin's path and the kernel's
        mangled name in it (both str)."""

        cubin_path: str
        name: str
else:
    class Compiled(tuple):
        """What :meth:`Library.compile_named` returns: the cached cubin's path and the kernel's
        mangled name in it (both str). A named tuple, written out: collections.namedtuple
        would import collections, which costs more than the rest of ``import kjit``."""

        __slots__ = ()
        _fields = ("cubin_path", "name")

        def __new__(cls, cubin_path: str, name: str) -> Compiled:
            return tuple.__new__(cls, (cubin_path, name))

        @property
        def cubin_path(self) -> str:
            """The cached cubin's absolute path."""
            return self[0]

        @property
        def name(self) -> str:
            """The kernel's mangled name in the cubin."""
            return self[1]

        def __repr__(self) -> str:
            return f"Compiled(cubin_path={self[0]!r}, name={self[1]!r})"

        def __getnewargs__(self) -> Tuple[str, str]:  # pickle and copy make it with __new__
            return (self[0], self[1])

        def _asdict(self) -> Dict[str, str]:
            return {"cubin_path": self[0], "name": self[1]}

        def _replace(self, **changes: str) -> Compiled:
            fields = self._asdict()
            for field in changes:
                if field not in fields:
                    raise ValueError(f"Got unexpected field names: {[field]!r}")
            fields.update(changes)
            return Compiled(**fields)

# Compiled(path, name) without its __new__'s Python frame, for a new request's answer.
_new_compiled = tuple.__new__


class Prepared:
    """A compile request encoded once (:func:`kjit.prepare`): asking it again is one C call.

    ``source``, ``keyword`` and the keyword arguments are :meth:`Library.compile`'s; they are
    checked and encoded when the request is made (the same TypeError or ValueError as
    ``compile``), and a later change to a list or mapping given then does not reach it. Every
    call asks libkjit, which proves the entry unchanged each time, so an edited header or a
    replaced cubin gives the new answer; libkjit's errors are raised as ``compile`` raises them.

    ``native``: the request is also made libkjit's own (``kjit_prepare``, libkjit 0.14), so
    each call hashes nothing; its defaults (cache folder, arch, base folders and the other
    ``KJIT_*`` settings) are then settled once, when it is made, as ``kjit_prepare`` settles them.
    Where libkjit is older, or refuses the request when it is made (no arch, say), the calls
    take the plain path, which reports libkjit's error at each call as before.

    Thread safe: a call made while another thread is in one uses buffers of its own.
    """

    __slots__ = ("library", "source", "keyword", "_options", "_values", "_keep", "_lock", "_named", "_path_only",
                 "_path", "_name", "_named_args", "_path_args", "_last", "_handle", "_function")

    def __init__(self, library: Library, source: Union[str, bytes], keyword: str, options: Optional[Mapping[str, Any]],
                 native: bool = False, encoded: Optional[Tuple[_abi.CompileOptions, List[Any]]] = None,
                 values: Optional[Tuple[Any, ...]] = None) -> None:
        """``options``: the keyword arguments; or None, with ``values`` the values of every one of
        compile's, in its order, and ``encoded`` their struct (a plain call's request: the dict
        is made when ``options`` is first read)."""
        src = _convert.text_bytes(source, "source", allow_bytes=True)
        kw = _convert.text_bytes(keyword, "keyword")
        if encoded is None:
            assert options is not None
            keep: List[Any] = []  # everything the struct points at, alive as long as this request
            encoded = _convert.compile_options(keep, **options), keep
        # else encoded already (Memo.encoded_options), shared: libkjit only reads it
        self._fill(library, source, keyword, src, kw, encoded, dict(options) if options is not None else None, values)
        if native:
            self._make_native()

    @classmethod
    def _encoded(cls, library: Library, source: str, keyword: str, src: bytes, kw: bytes,
                 encoded: Tuple[_abi.CompileOptions, List[Any]], values: Tuple[Any, ...]) -> Prepared:
        """A plain call's request, from what Memo.first_named checked and encoded already: the
        source and keyword as NUL-free bytes, the options' struct; nothing checked again."""
        self = object.__new__(cls)
        self._fill(library, source, keyword, src, kw, encoded, None, values)
        return self

    def _fill(self, library: Library, source: Union[str, bytes], keyword: str, src: bytes, kw: bytes,
              encoded: Tuple[_abi.CompileOptions, List[Any]], options: Optional[Dict[str, Any]],
              values: Optional[Tuple[Any, ...]]) -> None:
        """Sets every slot of a request that is not (yet) libkjit's own."""
        self.library, self.source, self.keyword = library, source, keyword
        self._options = options
        self._values = values
        self._keep = (src, kw, encoded[0], encoded[1])
        self._lock = _thread.allocate_lock()
        functions = library._untyped_fns  # _untyped's memo: these two are looked up when it is made
        self._named = functions["kjit_compile_named"]  # None before libkjit 0.5
        self._path_only = functions["kjit_compile"]
        self._function = "kjit_compile_named"  # the function its errors name
        self._last: Optional[Tuple[bytes, bytes, Compiled]] = None
        self._handle: Optional[ctypes.c_void_p] = None
        # Its own out buffers are made at its second call (_own_buffers): most requests of a
        # sweep are asked once, and a first compile_named answers into the library's (_first_named).
        self._path: Any = None  # c_char arrays
        self._name: Any = None
        self._named_args: Any = None  # tuples of the arguments that name them
        self._path_args: Any = None

    def _make_native(self) -> None:
        """kjit_prepare of this request: on success its calls go to kjit_prepared_compile."""
        make = self.library._untyped("kjit_prepare")  # None before libkjit 0.14
        if make is None:
            return
        src, kw, opts, _ = self._keep
        handle = ctypes.c_void_p()
        if make(src, kw, ctypes.byref(opts), ctypes.byref(handle)) != _OK or not handle.value:
            return  # the plain calls report what libkjit refuses, at each call
        self._handle = handle
        self._named = self._path_only = self.library._untyped("kjit_prepared_compile")
        self._function = "kjit_prepared_compile"

    def _native_from_next_call(self) -> None:
        """Makes this request libkjit's own (kjit_prepare) for its next calls, as ``native`` does
        when it is made, where it is not yet, has made no out buffers of its own (they name its
        arguments) and no other thread is in a call: kjit.cuda_core's requests, whose first call
        is a plain one (cheaper for a request asked once) and whose repeats then hash nothing."""
        if self._handle is not None or self._named_args is not None or not self._lock.acquire(False):
            return
        try:
            if self._handle is None and self._named_args is None:
                self._make_native()
        finally:
            self._lock.release()

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self._handle = None
            try:
                self.library._untyped("kjit_prepared_release")(handle)
            except Exception:  # never raise from a finaliser (e.g. late in interpreter exit)
                pass

    def _arguments(self, path: Any, path_n: Any, path_len: Any, name: Any, name_n: Any, name_len: Any,
                   named: bool = True) -> Tuple[Any, ...]:
        """The arguments of one call of ``self._named`` (``named``) or ``self._path_only``."""
        handle = self._handle
        if handle is not None:
            return (handle, path, path_n, path_len, name, name_n, name_len)
        src, kw, opts, _ = self._keep
        if named:
            return (src, kw, ctypes.byref(opts), path, path_n, path_len, name, name_n, name_len)
        return (src, kw, ctypes.byref(opts), path, path_n, path_len)

    def _own_buffers(self) -> None:
        """This request's out buffers, at the library's sizes, where it has none yet."""
        if self._named_args is None:
            self._buffers(self.library.path_buffer_size, self.library.name_buffer_size)

    def _buffers(self, path_size: int, name_size: int) -> None:
        """(Re)makes the out buffers and the argument tuples that name them."""
        # The array types themselves, not create_string_buffer (which checks its argument and
        # looks the type up each time): a new request makes two.
        self._path, self._name = (ctypes.c_char * path_size)(), (ctypes.c_char * name_size)()
        # The sizes as size_t objects: with no argtypes, a plain int would be passed as a C int.
        path_n, name_n = ctypes.c_size_t(path_size), ctypes.c_size_t(name_size)
        # The lengths are not asked for (NULL): only a too-small buffer needs them (_grow).
        self._named_args = self._arguments(self._path, path_n, None, self._name, name_n, None)
        self._path_args = self._arguments(self._path, path_n, None, None, ctypes.c_size_t(0), None, named=False)

    @property
    def options(self) -> Dict[str, Any]:
        """Its keyword arguments: those given to :func:`kjit.prepare`; every one of compile's,
        defaults included, for a plain call's request."""
        options = self._options
        if options is None:
            options = self._options = dict(zip(self.library._compile_keywords, self._values or ()))
        return options

    def __repr__(self) -> str:
        return f"<kjit.Prepared {self.keyword!r} {self.options!r}>"

    def compile_named(self) -> Compiled:
        """:meth:`Library.compile_named` of this request: a :class:`Compiled` (cubin_path, name)."""
        lock = self._lock
        if not lock.acquire(False):  # another thread is in a call: its buffers are busy
            return self._unshared_named()
        try:
            named = self._named
            if named is None:  # libkjit before 0.5: two calls
                cubin_path = self._compile_path()
                return Compiled(cubin_path, self.library.resolve_name(cubin_path, self.keyword))
            args = self._named_args
            if args is None:
                if self._last is None:  # no answer yet: the library's buffers
                    compiled = self._first_named()
                    if compiled is not None:
                        return compiled
                self._own_buffers()  # asked again: its own
                args = self._named_args
            status = named(*args)
            if status == _OK:
                path, name = self._path.value, self._name.value
                last = self._last
                if last is not None and last[0] == path and last[1] == name:
                    return last[2]
                compiled = Compiled(os.fsdecode(path), name.decode("ascii"))
                self._last = (path, name, compiled)
                return compiled
            if status == _TOO_SMALL and self._grow():
                return self._retry_named()
            raise self.library._error(status, self._function)
        finally:
            lock.release()

    def _first_named(self) -> Optional[Compiled]:
        """A first compile_named, with this request's lock held, answered into the library's
        out buffers (Library._shared_out), so a request asked once makes none of its own. None
        when another thread has them, or the answer does not fit: the caller then makes this
        request's own and asks again."""
        shared, path, path_n, name, name_n = self.library._shared_out
        if not shared.acquire(False):
            return None
        try:
            status = self._named(*self._arguments(path, path_n, None, name, name_n, None))
            if status == _OK:
                path_value, name_value = path.value, name.value
                compiled = _new_compiled(Compiled, (os.fsdecode(path_value), name_value.decode("ascii")))
                self._last = (path_value, name_value, compiled)
                return compiled
        finally:
            shared.release()
        if status == _TOO_SMALL:
            return None
        raise self.library._error(status, self._function)

    def _unshared_named(self) -> Compiled:
        """compile_named with out buffers of its own, for a thread that found this request's
        busy (libkjit only reads the rest, from any number of threads)."""
        if self._named is None:
            return Prepared(self.library, self.source, self.keyword, self.options).compile_named()
        library = self.library
        path_size = len(self._path) if self._path is not None else library.path_buffer_size
        name_size = len(self._name) if self._name is not None else library.name_buffer_size
        path, name = ctypes.create_string_buffer(path_size), ctypes.create_string_buffer(name_size)
        status = self._named(*self._arguments(path, ctypes.c_size_t(len(path)), None, name,
                                              ctypes.c_size_t(len(name)), None))
        if status == _OK:
            return Compiled(os.fsdecode(path.value), name.value.decode("ascii"))
        if status == _TOO_SMALL:  # rare: a request of its own grows its buffers
            return Prepared(self.library, self.source, self.keyword, self.options).compile_named()
        raise self.library._error(status, self._function)

    def compile(self) -> str:
        """:meth:`Library.compile` of this request: the cubin's path (str)."""
        lock = self._lock
        if not lock.acquire(False):
            return Prepared(self.library, self.source, self.keyword, self.options).compile()
        try:
            return self._compile_path()
        finally:
            lock.release()

    def compile_and_load(self) -> Kernel:
        """:meth:`Library.compile_and_load` of this request: a :class:`Kernel`."""
        from . import Kernel

        library = self.library
        kernel = ctypes.c_void_p()
        if self._handle is not None:
            function = "kjit_prepared_load"
            status = library._untyped(function)(self._handle, ctypes.byref(kernel))
        else:
            function = "kjit_compile_and_load"
            fn = library._fn.get(function)
            if fn is None:  # libkjit before 0.5
                return library.load_cached(self.compile(), self.keyword)
            src, kw, opts, _ = self._keep
            status = fn(src, kw, ctypes.byref(opts), ctypes.byref(kernel))
        if status != _OK:
            raise library._error(status, function)
        return Kernel(library, kernel.value)

    def _compile_path(self) -> str:
        """kjit_compile, with the lock held."""
        self._own_buffers()
        for _ in range(4):  # the length only changes if the entry is replaced meanwhile
            status = self._path_only(*self._path_args)
            if status == _OK:
                return os.fsdecode(self._path.value)
            if status != _TOO_SMALL or not self._grow():
                break
        raise self.library._error(status, "kjit_compile" if self._handle is None else self._function)

    def _retry_named(self) -> Compiled:
        """kjit_compile_named after the buffers grew, with the lock held."""
        status = _TOO_SMALL
        for _ in range(3):  # the lengths only change if the entry is replaced meanwhile
            status = self._named(*self._named_args)
            if status == _OK:
                compiled = Compiled(os.fsdecode(self._path.value), self._name.value.decode("ascii"))
                self._last = (self._path.value, self._name.value, compiled)
                return compiled
            if status != _TOO_SMALL or not self._grow():
                break
        raise self.library._error(status, self._function)

    def _grow(self) -> bool:
        """After KJIT_ERROR_BUFFER_TOO_SMALL: asks the lengths (the call is a hit now, or fails
        as it would anyway) and grows the buffers to them. False when the call fails otherwise."""
        path_len, name_len = ctypes.c_size_t(0), ctypes.c_size_t(0)
        zero = ctypes.c_size_t(0)
        if self._named is not None:
            status = self._named(*self._arguments(None, zero, ctypes.byref(path_len), None, zero,
                                                  ctypes.byref(name_len)))
        else:
            status = self._path_only(*self._arguments(None, zero, ctypes.byref(path_len), None, zero, None,
                                                      named=False))
        if status not in (_OK, _TOO_SMALL):
            return False
        self._buffers(max(path_len.value + 1, len(self._path)), max(name_len.value + 1, len(self._name)))
        return True


# --------------------------------------------------------------------------------------------
# The Library's memo of prepared requests

# The first item of a key made of frozen arguments: no key of the arguments as given holds it.
_FROZEN = object()


def all_plain(values: Tuple[Any, ...]) -> bool:
    """True when every item is an argument that is its own key: its equal values are the ones
    that encode the same, and it cannot change. str, bytes, None and tuples of those; not
    numbers (1 == 1.0, though 1.0 is refused as a size) nor anything mutable or user-defined.
    A loop, not all() over a generator, which cost a new request about 2 us for compile's 14
    keyword arguments."""
    for value in values:
        if value is None:
            continue
        kind = type(value)
        if kind is str or kind is bytes:
            continue
        if kind is not tuple or (value and not all_plain(value)):  # () is plain: no call for it
            return False
    return True


def frozen_key(source: object, keyword: object, options: Mapping[str, Any]) -> Any:
    """The memo key of arguments that are not all plain: frozen values, numbers with their
    type. TypeError for what cannot be frozen (a generator, say)."""
    return (_FROZEN, _convert.frozen(source), _convert.frozen(keyword),
            tuple(sorted((name, _convert.frozen(value)) for name, value in options.items())))


# Where name_expression is among compile's keyword arguments (kjit._COMPILE_KEYWORDS: the order
# of a plain call's values).
_NAME_EXPRESSION_AT = 5


def _with_name_expression(opts: Any, keep: List[Any], name: Optional[bytes]) -> Tuple[Any, List[Any]]:
    """A copy of the CompileOptions ``opts`` (whose pointers are into ``keep``, kept alive with
    it) naming ``name`` instead (None: none)."""
    copy = type(opts).from_buffer_copy(opts)
    copy.name_expression = name
    return copy, [opts, keep, copy]


class Memo:
    """The prepared requests of a Library's plain calls, by key; emptied when it holds
    ``max_entries`` requests or their sources ``max_bytes`` bytes (it keeps them alive)."""

    __slots__ = ("requests", "max_entries", "max_bytes", "bytes", "encoded", "frozen")

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.requests: Dict[Any, Prepared] = {}
        self.max_entries, self.max_bytes, self.bytes = max_entries, max_bytes, 0
        # kjit_compile_options encoded, by the plain values of the keyword arguments: a sweep asks
        # for many sources under one set of options, and each new one then encodes its source
        # alone (the struct is most of what a new request costs in Python).
        self.encoded: Dict[Tuple[Any, ...], Tuple[_abi.CompileOptions, List[Any]]] = {}
        self.frozen = False  # whether a request is kept under a frozen key (arguments not all plain)

    def encoded_options(self, library: Library, values: Tuple[Any, ...]) -> Tuple[Any, List[Any]]:
        """compile's keyword arguments whose plain values are ``values`` as a CompileOptions and
        what it points at: encoded once per distinct value set, then shared by the requests made
        with it. A sweep names a new kernel in each request (name_expression): the first request
        of a set is encoded whole and the set without its name expression kept, and each later
        one is a copy of that with its own name expression (a fifth of the encoding's time)."""
        encoded = self.encoded.get(values)
        if encoded is not None:
            return encoded
        at = _NAME_EXPRESSION_AT
        expression = values[at]
        if expression is None:
            return self._keep_encoding(values, self._encode(library, values))
        unnamed = values[:at] + (None,) + values[at + 1:]
        base = self.encoded.get(unnamed)
        if base is None:  # the set's first request: checked and encoded whole, as compile does
            opts, keep = self._encode(library, values)
            self._keep_encoding(unnamed, _with_name_expression(opts, keep, None))
            return opts, keep
        return _with_name_expression(base[0], base[1], _convert.text_bytes(expression, "name_expression"))

    @staticmethod
    def _encode(library: Library, values: Tuple[Any, ...]) -> Tuple[Any, List[Any]]:
        """``values`` checked and encoded as compile checks and encodes them."""
        keep: List[Any] = []
        return _convert.compile_options(keep, **dict(zip(library._compile_keywords, values))), keep

    def _keep_encoding(self, values: Tuple[Any, ...], encoded: Tuple[Any, List[Any]]) -> Tuple[Any, List[Any]]:
        if len(self.encoded) >= self.max_entries:
            self.encoded.clear()
        self.encoded[values] = encoded
        return encoded

    def new_request(self, library: Library, source: Union[str, bytes], keyword: str, values: Tuple[Any, ...],
                    plain: bool) -> Prepared:
        """A new request (not kept) of the values of every keyword argument of ``compile``, in
        its order: where they are all ``plain`` (all_plain), its options struct from
        encoded_options (encoded once per value set), else encoded for it alone."""
        if plain:
            return Prepared(library, source, keyword, None, encoded=self.encoded_options(library, values), values=values)
        return Prepared(library, source, keyword, dict(zip(library._compile_keywords, values)))

    def first_named(self, library: Library, given: Tuple[Any, ...]) -> Compiled:
        """compile_named of the arguments ``given`` (as for prepare), which are not in the memo
        under ``given``: what most requests of a sweep, and a serving process's warm-up, are
        asked once. Where they are all plain, str source and keyword included, the request is
        made the short way: its options' struct from encoded_options (which checks them as
        compile does, once per value set), the texts encoded here, no other check; it answers
        into the library's out buffers and is kept once answered. Otherwise prepare's request
        answers (it checks every argument and raises what compile raises)."""
        source, keyword, values = given[0], given[1], given[2:]
        if type(source) is not str or type(keyword) is not str or self.frozen:
            return self.prepare(library, given).compile_named()
        encoded = self.encoded.get(values)  # a value set seen before is plain: it was checked
        if encoded is None:
            if not all_plain(values):
                return self.prepare(library, given).compile_named()
            encoded = self.encoded_options(library, values)
        src, kw = source.encode("utf-8"), keyword.encode("utf-8")
        if b"\0" in src or b"\0" in kw:  # refused by text_bytes, with compile's message
            return self.prepare(library, given).compile_named()
        prepared = Prepared._encoded(library, source, keyword, src, kw, encoded, values)
        # Not yet in the memo, so no other thread can be in a call of it: no lock to take.
        compiled = prepared._first_named()
        self._keep(given, prepared)
        return compiled if compiled is not None else prepared.compile_named()

    def prepare(self, library: Library, given: Tuple[Any, ...]) -> Prepared:
        """The request for the arguments ``given``: the source, the keyword and the values of
        every keyword argument of ``compile``, in its order (the key of the arguments as given,
        what the fast look-up tries first); from the memo, else made (which checks them all) and
        kept, under its frozen key and, when every argument is plain, under ``given``. Arguments
        all plain were looked up by that key (Library._request did, and missed); their frozen
        key is looked up only where requests made from other arguments are kept (a list given
        where a tuple is now), and a new request's options are encoded once per value set
        (encoded_options)."""
        source, keyword, values = given[0], given[1], given[2:]
        if all_plain(given):
            prepared = None
            if self.frozen:
                options = dict(zip(library._compile_keywords, values))
                prepared = self.requests.get(frozen_key(source, keyword, options))
            if prepared is None:
                prepared = self.new_request(library, source, keyword, values, plain=True)
            self._keep(given, prepared)
            return prepared
        options = dict(zip(library._compile_keywords, values))
        try:
            key = frozen_key(source, keyword, options)
        except TypeError:
            key = None
        prepared = self.requests.get(key) if key is not None else None
        if prepared is None:
            prepared = Prepared(library, source, keyword, options)
            if key is not None:
                self._keep(key, prepared)
                self.frozen = True
        return prepared

    def _keep(self, key: Any, prepared: Prepared) -> None:
        size = len(prepared._keep[0])
        if len(self.requests) >= self.max_entries or self.bytes + size > self.max_bytes:
            self.requests.clear()
            self.bytes = 0
            self.frozen = False
        if key not in self.requests:
            self.bytes += size
        self.requests[key] = prepared
