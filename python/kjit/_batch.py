"""compile_batch's items (re-exported by kjit; their home module reads ``kjit``): imported at
the first batch, as a namedtuple needs collections, which a hit does not."""

from __future__ import annotations

import collections

from ._enums import Status

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Union


class BatchItem(collections.namedtuple("BatchItem", "status cubin_path error")):
    """One item of :meth:`Library.compile_batch`: ``status`` (a :class:`Status`), ``cubin_path``
    (str, None unless OK) and ``error`` (the text kjit_last_error() would give for it: the NVRTC
    log of a compile error; "" when OK). ``ok`` is True on success. ``kernel_name`` is the
    kernel's mangled name in the cubin (None unless OK; from libkjit 0.5 on, else None): an
    attribute, not a fourth field, so ``status, path, error = item`` still works."""

    status: Union[Status, int]
    cubin_path: Optional[str]
    error: str
    kernel_name: Optional[str]

    def __new__(cls, status: Union[Status, int], cubin_path: Optional[str], error: str,
                kernel_name: Optional[str] = None) -> BatchItem:
        self = super().__new__(cls, status, cubin_path, error)
        self.kernel_name = kernel_name
        return self

    @property
    def ok(self) -> bool:
        """True when the item succeeded."""
        return self.status == Status.OK


def status_of(value: int) -> Union[Status, int]:
    """A status code as a Status where this package knows it."""
    try:
        return Status(value)
    except ValueError:
        return value


BatchItem.__module__ = "kjit"
