"""compile_batch(progress=True): a progress bar, tqdm's where tqdm is importable, else one stderr
line rewritten in place."""

from __future__ import annotations

import sys
import time

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, TextIO


class Bar:
    """A progress callback for compile_batch that shows the items done out of the total, and
    how many failed. :meth:`close` ends it; it never cancels the batch.

    With tqdm: a ``tqdm`` bar (unit "kernel", the failures as its postfix). Without: one line
    on stderr, ``kjit: 12/300 kernels, 1 failed``, rewritten in place at most ten times a second
    where stderr is a terminal, and written once, at the end, where it is not (a log file)."""

    INTERVAL = 0.1  # seconds between rewrites of the stderr line

    def __init__(self, total: int) -> None:
        self.total, self.failed = total, 0
        self._tqdm: Any = None
        self._stream: TextIO = sys.stderr  # as it is now: a test, or the program, may swap it
        self._text, self._shown, self._next = "", "", 0.0  # the line now, the line on the terminal
        if total == 0:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._tqdm = tqdm(total=total, desc="kjit compile_batch", unit="kernel")

    def __call__(self, done: int, total: int, index: int, status: int, cubin_path: Optional[str]) -> bool:
        if status != 0:
            self.failed += 1
        if self._tqdm is not None:
            self._tqdm.update(1)
            if status != 0:
                self._tqdm.set_postfix(failed=self.failed)
            return False
        self._text = f"kjit: {done}/{total} kernels" + (f", {self.failed} failed" if self.failed else "")
        now = time.monotonic()
        if self._stream.isatty() and (now >= self._next or done == total):
            self._next = now + self.INTERVAL
            self._rewrite()
        return False

    def _rewrite(self) -> None:
        # Padded over the text it replaces, in case it is shorter.
        self._stream.write("\r" + self._text.ljust(len(self._shown)))
        self._stream.flush()
        self._shown = self._text

    def close(self) -> None:
        """Ends the bar: tqdm's closed, the stderr line finished (written, where stderr is not
        a terminal)."""
        if self._tqdm is not None:
            self._tqdm.close()
        elif self._text:
            if not self._stream.isatty():
                self._stream.write(self._text)
            elif self._shown != self._text:
                self._rewrite()
            self._stream.write("\n")
            self._stream.flush()
