"""The exceptions of the kjit package (re-exported by kjit; their home module reads ``kjit``)."""

from __future__ import annotations

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, List, Optional, Tuple, Type, Union

    from ._enums import Status


class KjitError(Exception):
    """A failed libkjit call.

    Attributes: ``status`` (a :class:`Status`, or a plain int for a code this module does not
    know), ``status_name`` (``kjit_status_string(status)``, e.g. ``"not found"``), ``message``
    (``kjit_last_error()`` read right after the failing call: the path, the NVRTC log, the
    candidate list, ...) and ``function`` (the C function that failed, or None).
    """

    status: Union[Status, int, None]

    def __init__(self, status: Optional[int], status_name: str, message: str,
                 function: Optional[str] = None) -> None:
        super().__init__(status, status_name, message)
        known: Union[Status, int, None] = status
        if status is not None:
            from ._enums import Status  # here: enum is costly to import, and a hit raises nothing

            try:
                known = Status(status)
            except ValueError:
                pass
        self.status, self.status_name, self.message, self.function = known, status_name, message, function

    def __str__(self) -> str:
        name = getattr(self.status, "name", None)  # a Status, else an int (or None) of no name
        code = f"KJIT_{name}" if name else str(self.status)
        where = f"{self.function}: " if self.function else ""
        return f"{where}{self.status_name} [{code}]: {self.message}"


class LibraryNotFound(KjitError):
    """libkjit.so could not be loaded. ``tried`` lists ``(place, why)`` pairs; ``status`` is None
    (no C call was made)."""

    def __init__(self, tried: Iterable[Tuple[str, str]]) -> None:
        self.tried: List[Tuple[str, str]] = list(tried)
        lines = "\n".join(f"  {place}: {why}" for place, why in self.tried)
        super().__init__(None, "library not found", "could not load libkjit; tried:\n" + lines)

    def __str__(self) -> str:
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


class LinkError(KjitError):
    """KJIT_ERROR_LINK (libkjit 0.10): nvJitLink refused the link of a compile with
    ``link_inputs`` (an unresolved function, an input for another arch, a bad link option; its
    log, naming the input, is in ``message``), or no usable nvJitLink could be loaded (see
    ``$KJIT_LIBNVJITLINK``)."""


class NotCachedError(KjitError):
    """KJIT_ERROR_NOT_CACHED (libkjit 0.11): a miss where compiling is refused
    (``compile_mode="never"``, or ``$KJIT_NO_COMPILE=1``): no cache, seed or cluster tier holds
    the kernel and nothing was compiled. ``message`` names the request (program, keyword or name
    expression, arch) and how to warm it (docs/serving.md)."""


# By the status's value (Status, an IntEnum, hashes as its int): ERROR_INVALID_ARGUMENT,
# ERROR_NOT_FOUND, ERROR_AMBIGUOUS, ERROR_BAD_CUBIN, ERROR_IO, ERROR_COMPILE, ERROR_NVRTC,
# ERROR_DRIVER_UNAVAILABLE, ERROR_DRIVER, ERROR_LINK, ERROR_NOT_CACHED (python/tests/test_kjit.py
# checks them by name).
ERROR_CLASSES: Dict[int, Type[KjitError]] = {
    1: InvalidArgument, 2: NotFound, 3: Ambiguous, 4: BadCubin, 5: KjitIOError, 6: CompileError, 7: CompileError,
    8: DriverError, 9: DriverError, 14: LinkError, 15: NotCachedError,
}
