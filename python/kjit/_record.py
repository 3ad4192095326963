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
        # How many base folders its paths name as "{base N}": the recording process's, which a
        # warming process gives as its own (docs/serving.md).
        self.base_dirs: int = int(line.get("base_dirs") or 0)

    def options(self, arch: str, bases: List[str]) -> Dict[str, Any]:
        """The compile keyword arguments of this request for ``arch``, its paths under this
        process's base folders ``bases``. Raises ValueError when it names more than there are."""
        if self.base_dirs > len(bases):
            raise ValueError(f"a record names its paths under {self.base_dirs} base folder(s) ('{{base 0}}'...), "
                             f"and {len(bases)} are given: pass this node's install roots, in the recording's "
                             "order, as base_dirs= (or $KJIT_BASE_DIRS)")

        def placed(text: str) -> str:
            for n in range(self.base_dirs):
                text = text.replace("{base %d}" % n, bases[n])
            return text

        out: Dict[str, Any] = {"arch": arch, "nvrtc_options": [placed(o) for o in self.nvrtc_options],
                               "include_paths": [placed(p) for p in self.include_paths], "headers": self.headers,
                               "link_inputs": [placed(p) for p in self.link_inputs], "link_options": self.link_options}
        if self.name_expression is not None:
            out["name_expression"] = self.name_expression
        if self.program_name:
            out["filename"] = placed(self.program_name)
        return out


def base_folders(base_dirs: Optional[Iterable[PathLike]]) -> List[str]:
    """The base folders a warming process gives: ``base_dirs``, else $KJIT_BASE_DIRS's."""
    if base_dirs is not None:
        return [os.fsdecode(b) for b in base_dirs]
    folders = [d for d in os.environ.get("KJIT_BASE_DIRS", "").split(":") if d]
    return [] if folders == ["none"] else folders


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
