"""Request records (kjit_record_start, ``$KJIT_RECORD``) read back for :func:`kjit.warm`: one JSON
object per line, ``{"kjit_request": 1, "id": ..., "source": ..., ...}`` (docs/serving.md, "The
record"). Lines that are no request of this format (one cut short by a killed writer, another
tool's) are skipped; a request repeated in several records is kept once, by its id."""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Union

    PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


class Recorded:
    """One recorded request: what kjit.compile's keyword arguments make of it."""

    def __init__(self, line: Dict[str, Any]) -> None:
        self.source: str = line["source"]
        self.keyword: str = line["keyword"]
        self.arch: str = line["arch"]
        self.name_expression: Optional[str] = line.get("name_expression")
        self.program_name: str = line.get("program_name") or ""
        self.nvrtc_options: List[str] = list(line.get("nvrtc_options") or [])
        self.include_paths: List[str] = list(line.get("include_paths") or [])
        self.headers = [(str(n), str(t)) for n, t in line.get("headers") or []]
        self.link_inputs: List[str] = list(line.get("link_inputs") or [])
        self.link_options: List[str] = list(line.get("link_options") or [])

    def options(self, arch: str) -> Dict[str, Any]:
        """The compile keyword arguments of this request for ``arch``."""
        out: Dict[str, Any] = {"arch": arch, "nvrtc_options": self.nvrtc_options,
                               "include_paths": self.include_paths, "headers": self.headers,
                               "link_inputs": self.link_inputs, "link_options": self.link_options}
        if self.name_expression is not None:
            out["name_expression"] = self.name_expression
        if self.program_name:
            out["filename"] = self.program_name
        return out


def read(records: Iterable[PathLike]) -> List[Recorded]:
    """The requests of ``records`` (file paths), each once, in order. Raises OSError for a record
    that cannot be read, ValueError when there is no request in them at all."""
    seen = set()
    out: List[Recorded] = []
    skipped = 0
    for path in records:
        with open(os.fsdecode(path), encoding="utf-8") as f:
            for text in f:
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                    if not isinstance(line, dict) or line.get("kjit_request") != 1:
                        raise ValueError("not a request")
                    request = Recorded(line)
                except (ValueError, KeyError, TypeError):
                    skipped += 1
                    continue
                key = line.get("id") or text
                if key not in seen:
                    seen.add(key)
                    out.append(request)
    if not out:
        raise ValueError(f"no request in the records ({skipped} line(s) that are none)")
    return out
