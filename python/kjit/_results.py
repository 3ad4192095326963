"""The results of stats(), cache_stats(), prune(), clear(), verify() and remote_describe(), as
frozen dataclasses (re-exported by kjit; their home module reads ``kjit``).

Imported on first use, by kjit's module ``__getattr__`` and by the functions that return them:
dataclasses imports inspect, which alone would cost about as much as the rest of ``import kjit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._enums import CacheProblem

# For type checkers only, as in _abi.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Union


class _ByName:
    """``result["entries"]`` reads ``result.entries``: for code written when these results were
    dicts (KeyError for a name that is not a field)."""

    __slots__ = ()

    def __getitem__(self, name: str) -> Any:
        if isinstance(name, str) and name in getattr(type(self), "__dataclass_fields__", {}):
            return getattr(self, name)
        raise KeyError(name)


@dataclass(frozen=True)
class Stats(_ByName):
    """libkjit's process-wide counters (kjit_get_stats), every one of kjit_stats by its C name.
    ``sidecar_rejections`` is {reason: count} (reasons as in ``kjit.SIDECAR_REJECTIONS``) and
    ``errors`` {status name: count}, both with non-zero entries only. The ``remote_*`` counters
    (libkjit 0.6), ``seed_*`` (0.9) and ``nvjitlink_*`` (0.10: links nvJitLink ran, and the
    time in them) are None with an older library. Counters only grow: subtract two snapshots."""

    compile_hits: int
    compile_misses: int
    compile_shared_waits: int
    nvrtc_compiles: int
    nvrtc_nanoseconds: int
    entries_published: int
    entries_rebuilt: int
    sidecar_hits: int
    sidecar_content_checks: int
    memo_hits: int
    sidecar_missing: int
    sidecar_rejections: Dict[str, int] = field(hash=False)
    scans: int
    sidecar_writes: int
    sidecar_write_failures: int
    loads: int
    load_reuses: int
    driver_loads: int
    load_self_heals: int
    eviction_runs: int
    evicted_entries: int
    evicted_bytes: int
    errors: Dict[str, int] = field(hash=False)
    swept_temp_folders: int
    remote_hits: Optional[int] = None
    remote_misses: Optional[int] = None
    remote_errors: Optional[int] = None
    remote_timeouts: Optional[int] = None
    remote_corrupt: Optional[int] = None
    remote_puts: Optional[int] = None
    remote_bytes_in: Optional[int] = None
    remote_bytes_out: Optional[int] = None
    remote_leases_owned: Optional[int] = None
    remote_lease_waits: Optional[int] = None
    remote_lease_takeovers: Optional[int] = None
    remote_shared_failures: Optional[int] = None
    seed_hits: Optional[int] = None
    seed_rejections: Optional[int] = None
    nvjitlink_links: Optional[int] = None
    nvjitlink_nanoseconds: Optional[int] = None


@dataclass(frozen=True)
class ArchUsage(_ByName):
    """One architecture's share of a cache folder: its ``entries`` and their disk space
    (``bytes``)."""

    entries: int
    bytes: int


@dataclass(frozen=True)
class CacheStats(_ByName):
    """What a cache folder holds (kjit_cache_summarize): the absolute ``cache_dir``,
    ``entries``, ``bytes`` (disk space, as du counts it), ``max_size`` ($KJIT_CACHE_MAX_SIZE in
    bytes, None for no limit), ``in_transit`` and ``in_transit_bytes`` (being written or
    removed, or left so by killed processes), ``foreign`` (names not of the cache's shape), the
    times ``least_recent_use_ns``, ``most_recent_use_ns``, ``oldest_created_ns`` and
    ``newest_created_ns`` (ns since the epoch; None without entries) and ``by_arch``
    ({arch: :class:`ArchUsage`})."""

    cache_dir: str
    entries: int
    bytes: int
    max_size: Optional[int]
    in_transit: int
    in_transit_bytes: int
    foreign: int
    least_recent_use_ns: Optional[int]
    most_recent_use_ns: Optional[int]
    oldest_created_ns: Optional[int]
    newest_created_ns: Optional[int]
    by_arch: Dict[str, ArchUsage] = field(hash=False)


@dataclass(frozen=True)
class PruneReport(_ByName):
    """What :func:`kjit.prune` or :func:`kjit.clear` did (kjit_prune_report): the absolute
    ``cache_dir``, ``removed_entries`` and their ``removed_bytes``, ``spared_in_use`` (entries
    in use, kept), ``removed_in_transit`` (stale folders of killed processes),
    ``removed_variants_files``, and what is left: ``kept_entries``, ``kept_bytes``."""

    cache_dir: str
    removed_entries: int
    removed_bytes: int
    spared_in_use: int
    removed_in_transit: int
    removed_variants_files: int
    kept_entries: int
    kept_bytes: int


@dataclass(frozen=True)
class Problem:
    """One finding of :func:`kjit.verify`: ``path`` (the entry folder, or a temp folder or
    file), ``kind`` (a :class:`kjit.CacheProblem`, or an int a newer libkjit knows), ``detail``
    (naming the file), ``fixed`` and ``action`` (what ``fix`` did; "" without it)."""

    path: str
    kind: Union[CacheProblem, int]
    detail: str
    fixed: bool
    action: str


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`kjit.verify` found: the absolute ``cache_dir``, ``entries_checked``,
    ``entries_ok`` and ``problems`` (a list of :class:`Problem`). ``clean`` is True when
    nothing was found or everything found was fixed."""

    cache_dir: str
    entries_checked: int
    entries_ok: int
    problems: List[Problem] = field(hash=False)

    @property
    def clean(self) -> bool:
        """True when nothing was found or everything found was fixed."""
        return all(p.fixed for p in self.problems)


@dataclass(frozen=True)
class RemoteServer:
    """One server of the cluster tier as :func:`kjit.remote_describe` found it: its ``url``
    (password hidden), whether it is ``reachable`` (else ``error`` says why), ``info`` (what
    Redis reports, by its INFO names: redis_version, used_memory_human, maxmemory_human,
    maxmemory_policy, evicted_keys, keyspace_hits, keyspace_misses; open-ended, as text),
    ``keys`` (DBSIZE), the setting's ``namespace`` and libkjit's ``entries`` in it (a bounded
    count: ``entries_complete`` is False when the count stopped early)."""

    url: str
    reachable: bool
    error: Optional[str] = None
    info: Dict[str, str] = field(default_factory=dict, hash=False)
    keys: Optional[int] = None
    namespace: Optional[str] = None
    entries: Optional[int] = None
    entries_complete: bool = True


_ENTRIES = "libkjit entries (namespace "


@dataclass(frozen=True)
class RemoteDescription:
    """What the cluster tier's servers say of themselves (kjit_remote_describe): ``servers``, a
    list of :class:`RemoteServer`; ``str()`` of it is the text libkjit wrote, as
    ``kjit cache stats --remote`` prints it."""

    servers: List[RemoteServer] = field(hash=False)
    text: str = field(repr=False)

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> RemoteDescription:
        """Reads kjit_remote_describe's text: per server, a line ``server URL`` and indented
        ``name: value`` lines; a line of another shape is left to the text."""
        servers: List[RemoteServer] = []
        current: Optional[Dict[str, Any]] = None
        for line in text.splitlines():
            if line.startswith("server "):
                if current is not None:
                    servers.append(RemoteServer(**current))
                current = {"url": line[len("server "):], "reachable": True, "info": {}}
            elif current is not None and line.startswith("  ") and ": " in line:
                _read_line(current, *line[2:].split(": ", 1))
        if current is not None:
            servers.append(RemoteServer(**current))
        return cls(servers, text)


def _read_line(server: Dict[str, Any], name: str, value: str) -> None:
    if name == "unreachable":
        server.update(reachable=False, error=value)
    elif name == "keys" and value.isdigit():
        server["keys"] = int(value)
    elif name.startswith(_ENTRIES) and name.endswith(")") and value.split(" ", 1)[0].isdigit():
        count, _, rest = value.partition(" ")
        server.update(namespace=name[len(_ENTRIES):-1], entries=int(count), entries_complete=not rest)
    else:
        server["info"][name] = value


@dataclass(frozen=True)
class CopyReport(_ByName):
    """What :func:`kjit.cache_export` or :func:`kjit.cache_import` copied (kjit_copy_report):
    the absolute ``cache_dir`` and ``other_dir`` (the seed folder written or read),
    ``copied_entries`` and their ``copied_bytes``, ``present_entries`` (sound ones the
    destination had already), ``skipped_entries`` (of another arch than asked for) and
    ``refused`` (a list of :class:`Problem`: the damaged entries, not copied)."""

    cache_dir: str
    other_dir: str
    copied_entries: int
    copied_bytes: int
    present_entries: int
    skipped_entries: int
    refused: List[Problem] = field(hash=False)


# Read as kjit's, where they are re-exported.
for _result in (Stats, ArchUsage, CacheStats, PruneReport, Problem, VerifyReport, RemoteServer, RemoteDescription,
                CopyReport):
    _result.__module__ = "kjit"
del _result
