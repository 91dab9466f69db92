"""The tuning table: a versioned JSON document of measured choices, its validation, and lookup rules.

A table holds entries keyed by what decides the winner: collective, memory kind (host/device),
communicator size, number of nodes, ranks per node and message size; the whole table belongs to one
MPI library and version (`machine.mpi_library`). Collectives: Bcast, Reduce, Allreduce (trees, and the
ring / recursive halving for Allreduce), and Allgather and Reduce-scatter (`allgather`,
`reduce_scatter`: the ring only, host memory only; Reduce_scatter_block and Reduce_scatter share
`reduce_scatter`; their size is the whole array, the Allgather's result, the Reduce-scatter's input).
No MPI here: `adaptcoll.tune.exchange` brings the bytes and the communicator's facts, this module
parses and looks up.

Lookup rules (docs/tuning.md):
- communicator: the entries measured on the same (size, nodes) if any, else the nearest measured one
  by |log2 size ratio| + |log2 nodes ratio| (ties: the larger size), reported as 'nearest';
- message size: the nearest measured entry in log scale (between entries a < b, sizes n with
  n*n >= a*b use b), the smallest entry below the range, the largest above it.
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..runtime import settings
from .config import ServeConfig

__all__ = [
    "FORMAT",
    "VERSION",
    "MEMORIES",
    "COLLECTIVES",
    "memories",
    "TableError",
    "Entry",
    "Table",
    "Band",
    "parse",
    "dumps",
    "merge",
    "write",
    "bands",
    "band_index",
    "nearest_group",
]

FORMAT = "adaptcoll-tuning"
VERSION = 1
MEMORIES = ("host", "device")
COLLECTIVES = settings.COLLECTIVES + settings.BLOCK_COLLECTIVES
"""The collectives a table may hold entries for (and the tuner measures)."""
_CHOICES = ("native", "adaptcoll")


def memories(collective: str) -> tuple[str, ...]:
    """The memory kinds a collective is tuned for: Allgather / Reduce-scatter serve host memory only."""
    return ("host",) if collective in settings.BLOCK_COLLECTIVES else MEMORIES


class TableError(ValueError):
    """A tuning table that does not parse or does not follow the schema; the message names the file
    (or origin) and the field, e.g. 'tuning.json: entries[3].config.segment_size: expected ...'."""


@dataclass(frozen=True)
class Entry:
    """One measured (collective, memory, communicator, message size): the choice and its evidence.

    `config` is the best adaptcoll configuration measured (also when native won: explicit settings that
    force adaptcoll at this size then use it); `ratio` = native time / that configuration's time, the
    median of the per-iteration ratios (native and candidates alternate call by call), `p25`/`p75`
    their spread, `ci_low`/`ci_high` the 95% confidence interval of the median, `samples` how many.
    """

    collective: str
    memory: str
    comm_size: int
    nodes: int
    ranks_per_node: int
    bytes: int
    serve: bool
    config: ServeConfig
    ratio: float = 1.0
    p25: float = 1.0
    p75: float = 1.0
    ci_low: float = 1.0
    ci_high: float = 1.0
    samples: int = 0
    candidates: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> tuple[str, str, int, int, int, int]:
        """What identifies the entry (merging replaces entries with the same key)."""
        return (self.collective, self.memory, self.comm_size, self.nodes, self.ranks_per_node, self.bytes)

    def to_json(self) -> dict[str, Any]:
        """The table's JSON form."""
        return {
            "collective": self.collective,
            "memory": self.memory,
            "comm_size": self.comm_size,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "bytes": self.bytes,
            "choice": "adaptcoll" if self.serve else "native",
            "config": self.config.to_json(),
            "ratio": self.ratio,
            "p25": self.p25,
            "p75": self.p75,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "samples": self.samples,
            "candidates": list(self.candidates),
        }


@dataclass(frozen=True)
class Table:
    """A parsed, validated tuning table."""

    mpi_library: str
    entries: tuple[Entry, ...]
    machine: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    tool: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (schema `FORMAT`, version `VERSION`)."""
        machine = dict(self.machine)
        machine["mpi_library"] = self.mpi_library
        return {
            "format": FORMAT,
            "version": VERSION,
            "created": self.created,
            "machine": machine,
            "tool": self.tool,
            "entries": [e.to_json() for e in sorted(self.entries, key=lambda e: e.key)],
        }


@dataclass(frozen=True)
class Band:
    """Message sizes from `start` bytes up (to the next band) use this choice."""

    start: int
    serve: bool
    config: ServeConfig
    ratio: Optional[float] = None


# -- parsing and validation -----------------------------------------------------------------------
class _Checker:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, where: str, problem: str) -> TableError:
        return TableError(f"{self.origin}: {where}: {problem}")

    def get(self, obj: dict[str, Any], key: str, where: str, required: bool = True) -> Any:
        if key not in obj:
            if required:
                raise self.fail(f"{where}.{key}" if where else key, "missing")
            return None
        return obj[key]

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        return value

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(where, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(where, f"expected a finite number >= 0, got {value!r}")
        return float(value)

    def choice(self, value: Any, where: str, allowed: Sequence[str]) -> str:
        if value not in allowed:
            raise self.fail(where, f"expected one of {', '.join(allowed)}, got {value!r}")
        return str(value)

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def config(self, value: Any, where: str, collective: str) -> ServeConfig:
        obj = self.obj(value, where)
        algorithm = self.string(self.get(obj, "algorithm", where), f"{where}.algorithm").strip()
        kind = algorithm.partition(":")[0].strip()
        known = settings.ALGORITHMS + settings.ALLREDUCE_ONLY
        if kind not in known or kind == "native":
            valid = ", ".join(a for a in known if a != "native")
            raise self.fail(f"{where}.algorithm", f"unknown algorithm {algorithm!r} (this adaptcoll knows {valid})")
        if collective in settings.BLOCK_COLLECTIVES:
            if algorithm != "ring":
                raise self.fail(f"{where}.algorithm", f"{collective} is served by 'ring' only, got {algorithm!r}")
        elif kind in settings.ALLREDUCE_ONLY and collective != "allreduce":
            raise self.fail(f"{where}.algorithm", f"{algorithm!r} is an allreduce algorithm")
        return ServeConfig(
            algorithm,
            self.integer(self.get(obj, "segment_size", where), f"{where}.segment_size", 1),
            self.integer(self.get(obj, "max_segments", where), f"{where}.max_segments", 0),
            self.integer(obj.get("roots", 0), f"{where}.roots", 0),
        )

    def entry(self, value: Any, where: str) -> Entry:
        obj = self.obj(value, where)
        g = lambda key: self.get(obj, key, where)  # noqa: E731
        ratio = self.number(obj.get("ratio", 1.0), f"{where}.ratio")
        candidates = obj.get("candidates", [])
        if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
            raise self.fail(f"{where}.candidates", "expected a list of objects")
        collective = self.choice(g("collective"), f"{where}.collective", COLLECTIVES)
        config = self.config(g("config"), f"{where}.config", collective)
        return Entry(
            collective=collective,
            memory=self.choice(obj.get("memory", "host"), f"{where}.memory", memories(collective)),
            comm_size=self.integer(g("comm_size"), f"{where}.comm_size", 1),
            nodes=self.integer(obj.get("nodes", 1), f"{where}.nodes", 1),
            ranks_per_node=self.integer(obj.get("ranks_per_node", g("comm_size")), f"{where}.ranks_per_node", 1),
            bytes=self.integer(g("bytes"), f"{where}.bytes", 1),
            serve=self.choice(g("choice"), f"{where}.choice", _CHOICES) == "adaptcoll",
            config=config,
            ratio=ratio,
            p25=self.number(obj.get("p25", ratio), f"{where}.p25"),
            p75=self.number(obj.get("p75", ratio), f"{where}.p75"),
            ci_low=self.number(obj.get("ci_low", ratio), f"{where}.ci_low"),
            ci_high=self.number(obj.get("ci_high", ratio), f"{where}.ci_high"),
            samples=self.integer(obj.get("samples", 0), f"{where}.samples", 0),
            candidates=tuple(candidates),
        )


def parse(data: bytes | str, origin: str = "<tuning table>") -> Table:
    """Parse and validate a table; TableError naming `origin` and the field on any problem."""
    check = _Checker(origin)
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TableError(f"{origin}: not valid JSON ({exc})") from None
    doc = check.obj(doc, "(document)")
    if doc.get("format") != FORMAT:
        raise check.fail("format", f"expected {FORMAT!r}, got {doc.get('format')!r}")
    version = check.get(doc, "version", "")
    if version != VERSION:
        raise check.fail("version", f"this adaptcoll reads version {VERSION}, got {version!r}")
    machine = check.obj(check.get(doc, "machine", ""), "machine")
    mpi_library = check.string(check.get(machine, "mpi_library", "machine"), "machine.mpi_library")
    entries = check.get(doc, "entries", "")
    if not isinstance(entries, list):
        raise check.fail("entries", f"expected a list, got {type(entries).__name__}")
    parsed = [check.entry(e, f"entries[{i}]") for i, e in enumerate(entries)]
    seen: dict[tuple[str, str, int, int, int, int], int] = {}
    for i, e in enumerate(parsed):
        if e.key in seen:
            raise check.fail(
                f"entries[{i}]", f"same collective, memory, communicator and bytes as entries[{seen[e.key]}]"
            )
        seen[e.key] = i
    tool = doc.get("tool", {})
    return Table(
        mpi_library,
        tuple(parsed),
        machine,
        str(doc.get("created", "")),
        tool if isinstance(tool, dict) else {},
    )


def dumps(table: Table) -> str:
    """The table as JSON text (entries sorted, 1 entry per few lines)."""
    return json.dumps(table.to_json(), indent=1) + "\n"


def merge(old: Table, new: Table) -> Table:
    """`new` with the entries of `old` it does not measure again (same MPI library required)."""
    if old.mpi_library != new.mpi_library:
        raise TableError(f"cannot merge tables of different MPI libraries: {old.mpi_library!r} vs {new.mpi_library!r}")
    keys = {e.key for e in new.entries}
    kept = tuple(e for e in old.entries if e.key not in keys)
    return Table(new.mpi_library, kept + new.entries, new.machine, new.created, new.tool)


def write(path: Path, table: Table, merge_old: bool = True) -> str:
    """Write `table` to `path` atomically, merged with the entries already there (if `merge_old` and the
    file holds a table of the same MPI library); returns a note on what happened to the old content."""
    note = ""
    if merge_old and path.is_file():
        try:
            table = merge(parse(path.read_bytes(), str(path)), table)
            note = " (merged with its earlier entries)"
        except (OSError, TableError) as exc:
            note = f" (its earlier content was replaced: {exc})"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(dumps(table))
    tmp.replace(path)
    return note


# -- lookup ---------------------------------------------------------------------------------------
def _distance(size: int, nodes: int, e: Entry) -> tuple[float, int]:
    return (abs(math.log2(e.comm_size / size)) + abs(math.log2(e.nodes / nodes)), -e.comm_size)


def nearest_group(
    entries: Iterable[Entry], collective: str, memory: str, comm_size: int, nodes: int
) -> tuple[Optional[tuple[int, int, int]], list[Entry]]:
    """((comm_size, nodes, ranks_per_node) of the chosen measurement, its entries sorted by bytes).

    Entries of the same collective and memory; the exact (size, nodes) if measured, else the nearest
    (see the module docstring). (None, []) when the table has no entry for this collective and memory.
    """
    pool = [e for e in entries if e.collective == collective and e.memory == memory]
    if not pool:
        return None, []
    best = min(pool, key=lambda e: (_distance(comm_size, nodes, e), -e.ranks_per_node))
    key = (best.comm_size, best.nodes, best.ranks_per_node)
    group = sorted((e for e in pool if (e.comm_size, e.nodes, e.ranks_per_node) == key), key=lambda e: e.bytes)
    return key, group


def bands(entries: Sequence[Entry]) -> tuple[Band, ...]:
    """Size bands from entries sorted by bytes: the nearest entry in log scale decides each size."""
    out: list[Band] = []
    prev: Optional[int] = None
    for e in entries:
        start = 0 if prev is None else math.isqrt(prev * e.bytes - 1) + 1  # smallest n with n*n >= prev*bytes
        out.append(Band(start, e.serve, e.config, e.ratio))
        prev = e.bytes
    return tuple(out)


def band_index(starts: Sequence[int], nbytes: int) -> int:
    """The band that `nbytes` falls in, given the bands' start sizes (ascending, the first 0)."""
    return bisect_right(starts, nbytes) - 1
