"""Signals during a batch (Ctrl-C).

kjit_compile_batch runs in C with the GIL released, and Python runs a signal's handler only
when the main thread runs bytecode again: during a batch, at the first instruction of the
progress callback ctypes calls. An exception raised there (KeyboardInterrupt, from SIGINT's
default handler) comes before any ``try`` the callback has, so ctypes prints "Exception
ignored on calling ctypes callback function" and hands libkjit an undefined return value.
So while a batch runs in the main thread, :class:`SignalGate` stands in for every Python-level
signal handler: it runs the real one only "armed" (inside the callback's ``try``, or inside the
user's callback), and otherwise records the signal, for the next callback or the end of the
batch to run its handler where what it raises is caught. Nothing is delayed beyond what C
would delay anyway: no handler could run while the batch was in C.
"""

from __future__ import annotations

import signal
# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Dict, List, Optional, Tuple


class SignalGate:
    """The stand-in for Python's signal handlers while batches run in the main thread. Used
    from the main thread only (the only one that runs signal handlers)."""

    def __init__(self) -> None:
        self.depth = 0        # compile_batch calls under way (more than 1: one from a callback)
        self.armed = False    # True only where a handler's exception is caught (the callback's try)
        self.handlers: Dict[int, Any] = {}  # signal number -> the program's handler the gate stands in for
        # (signal number, frame) recorded while not armed, oldest first
        self.pending: List[Tuple[int, Optional[FrameType]]] = []
        self.handler = self._on_signal  # one bound method, so signal.getsignal() can be compared

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        if self.armed:
            self._run(signum, frame)
        else:
            self.pending.append((signum, frame))

    def _run(self, signum: int, frame: Optional[FrameType]) -> None:
        handler = self.handlers.get(signum)
        if callable(handler):
            handler(signum, frame)

    def deliver(self) -> None:
        """Runs the recorded signals' handlers, all of them; re-raises the first exception one
        raised (a second interrupt adds nothing to the first)."""
        first: Optional[BaseException] = None
        while self.pending:
            signum, frame = self.pending.pop(0)
            try:
                self._run(signum, frame)
            except BaseException as e:  # noqa: BLE001 (re-raised below)
                first = first or e
        if first is not None:
            raise first

    def enter(self) -> bool:
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

    def leave(self, was_armed: bool) -> Optional[BaseException]:
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

    def _restore(self) -> Optional[BaseException]:
        """Puts the program's handlers back where the gate still stands (a handler the program
        set meanwhile stays). Returns the first exception a handler raised on the way."""
        first: Optional[BaseException] = None
        for signum, handler in self.handlers.items():
            while True:
                try:
                    if signal.getsignal(signum) is self.handler:
                        signal.signal(signum, handler)
                    break
                except BaseException as e:  # noqa: BLE001: a handler put back already ran; again
                    first = first or e
        return first


gate = SignalGate()
