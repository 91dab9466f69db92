"""A described network: compute ranks, switches and directed links with bandwidth and latency.

The file format ("adaptcoll.topology/1", JSON) is what `python -m adaptcoll.schedule` synthesizes
forests for and what the simulator's topology network runs on; docs/schedules.md documents it:

    {"format": "adaptcoll.topology/1", "name": "two nodes", "ranks": 4,
     "nodes": [[0, 1], [2, 3]],
     "switches": ["nic0", "nic1", "core"],
     "links": [{"from": 0, "to": "nic0", "bandwidth": 25e9, "latency": 2e-7, "both": true}, ...]}

Ranks are the integers 0..ranks-1, switches are names (strings: NICs, NVSwitches, leaf and spine
switches: anything that forwards but does not compute). Bandwidth is in bytes per second, latency in
seconds; `both` adds the reverse link with the same figures. `nodes` (optional) groups ranks whose
node-internal wiring is identical up to relabelling, so tools may solve one node and reuse it.
No MPI and no graph library here.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

__all__ = ["FORMAT", "Vertex", "Link", "Description", "DescriptionError", "loads", "load", "dumps", "save"]

FORMAT = "adaptcoll.topology/1"

Vertex = Union[int, str]
"""A rank (int 0..ranks-1) or a switch (its name)."""


class DescriptionError(ValueError):
    """A topology description that cannot be used, with where in it the problem is."""


@dataclass(frozen=True)
class Link:
    """One direction of a wire: `src` sends to `dst` at `bandwidth` bytes/s after `latency` seconds."""

    src: Vertex
    dst: Vertex
    bandwidth: float
    latency: float = 0.0


@dataclass(frozen=True)
class Description:
    """A validated network description (see the module docstring for the file form)."""

    ranks: int
    links: tuple[Link, ...]
    switches: tuple[str, ...] = ()
    nodes: tuple[tuple[int, ...], ...] = ()
    name: str = ""
    _out: dict[Vertex, tuple[Link, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate(self)
        out: dict[Vertex, list[Link]] = {v: [] for v in self.vertices()}
        for link in self.links:
            out[link.src].append(link)
        self._out.update({v: tuple(ls) for v, ls in out.items()})

    def vertices(self) -> tuple[Vertex, ...]:
        """Every vertex: the ranks 0..ranks-1, then the switches."""
        return (*range(self.ranks), *self.switches)

    def out_links(self, vertex: Vertex) -> tuple[Link, ...]:
        """The links leaving `vertex`, in file order."""
        return self._out[vertex]

    def node_of(self) -> tuple[int, ...]:
        """Node index per rank (each rank its own node when `nodes` is not given)."""
        if not self.nodes:
            return tuple(range(self.ranks))
        owner = [0] * self.ranks
        for k, members in enumerate(self.nodes):
            for r in members:
                owner[r] = k
        return tuple(owner)

    def node_spec(self) -> str:
        """The nodes in ADAPTCOLL_TOPOLOGY's form (`node=0,0,1,1,...`), '' when every rank is its own
        node: what a run of this description sets so that `topo` and the rule see its nodes."""
        owner = self.node_of()
        return "" if len(set(owner)) == self.ranks else "node=" + ",".join(map(str, owner))


def _bad(where: str, why: str) -> DescriptionError:
    return DescriptionError(f"topology description: {where}: {why}")


def _validate(d: Description) -> None:
    try:
        ranks = operator.index(d.ranks)
    except TypeError:
        raise _bad("ranks", f"must be a whole number, got {d.ranks!r}") from None
    if ranks < 1:
        raise _bad("ranks", f"must be >= 1, got {ranks}")
    names = set()
    for i, s in enumerate(d.switches):
        if not isinstance(s, str) or not s:
            raise _bad(f"switches[{i}]", f"a switch is a non-empty name (string), got {s!r}")
        if s in names:
            raise _bad(f"switches[{i}]", f"switch {s!r} is listed twice")
        names.add(s)
    seen: set[tuple[Vertex, Vertex]] = set()
    for i, link in enumerate(d.links):
        for end in (link.src, link.dst):
            if isinstance(end, bool) or not (
                (isinstance(end, int) and 0 <= end < ranks) or (isinstance(end, str) and end in names)
            ):
                raise _bad(f"links[{i}]", f"{end!r} is neither a rank 0..{ranks - 1} nor a listed switch")
        if link.src == link.dst:
            raise _bad(f"links[{i}]", f"a link from {link.src!r} to itself")
        if (link.src, link.dst) in seen:
            raise _bad(f"links[{i}]", f"a second link from {link.src!r} to {link.dst!r} (give one with their sum)")
        seen.add((link.src, link.dst))
        if not (isinstance(link.bandwidth, (int, float)) and math.isfinite(link.bandwidth) and link.bandwidth > 0):
            raise _bad(f"links[{i}]", f"bandwidth must be a finite number > 0 (bytes/s), got {link.bandwidth!r}")
        if not (isinstance(link.latency, (int, float)) and math.isfinite(link.latency) and link.latency >= 0):
            raise _bad(f"links[{i}]", f"latency must be a finite number >= 0 (seconds), got {link.latency!r}")
    if d.nodes:
        covered = sorted(r for members in d.nodes for r in members)
        if covered != list(range(ranks)):
            raise _bad("nodes", "must list every rank exactly once")


def _vertex(value: Any, where: str) -> Vertex:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad(where, f"a rank (integer) or a switch (name), got {value!r}")
    return value


def _number(raw: dict[str, Any], key: str, where: str, default: Any = None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"{where}.{key}", f"must be a number, got {value!r}")
    return float(value)


def from_dict(raw: Any, origin: str = "<topology>") -> Description:
    """The description held by a parsed JSON object (errors name `origin` and the field)."""
    if not isinstance(raw, dict):
        raise _bad(origin, "must be a JSON object")
    if raw.get("format") != FORMAT:
        raise _bad(f"{origin}: format", f"expected {FORMAT!r}, got {raw.get('format')!r}")
    unknown = set(raw) - {"format", "name", "ranks", "nodes", "switches", "links", "comment"}
    if unknown:
        raise _bad(origin, f"unknown keys {sorted(unknown)}")
    links: list[Link] = []
    for i, item in enumerate(raw.get("links", [])):
        where = f"links[{i}]"
        if not isinstance(item, dict) or not {"from", "to", "bandwidth"} <= set(item):
            raise _bad(where, "a link is an object with 'from', 'to', 'bandwidth' (and 'latency', 'both')")
        extra = set(item) - {"from", "to", "bandwidth", "latency", "both"}
        if extra:
            raise _bad(where, f"unknown keys {sorted(extra)}")
        src, dst = _vertex(item["from"], f"{where}.from"), _vertex(item["to"], f"{where}.to")
        bw, lat = _number(item, "bandwidth", where), _number(item, "latency", where, 0.0)
        links.append(Link(src, dst, bw, lat))
        if item.get("both", False):
            links.append(Link(dst, src, bw, lat))
    nodes = raw.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(m, list) for m in nodes):
        raise _bad("nodes", "must be a list of lists of ranks")
    switches = raw.get("switches", [])
    if not isinstance(switches, list):
        raise _bad("switches", "must be a list of names")
    return Description(
        ranks=raw.get("ranks"),  # type: ignore[arg-type]  # checked by Description
        links=tuple(links),
        switches=tuple(switches),
        nodes=tuple(tuple(m) for m in nodes),
        name=str(raw.get("name", "")),
    )


def loads(text: str, origin: str = "<topology>") -> Description:
    """Parse a description from JSON text."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(origin, f"not JSON: {exc}") from None
    return from_dict(raw, origin)


def load(path: Union[str, Path]) -> Description:
    """Read a description file."""
    path = Path(path)
    return loads(path.read_text(), str(path))


def _pairs(links: Sequence[Link]) -> Iterable[dict[str, Any]]:
    """Links as file objects, folding a link and its identical reverse into one `both` entry."""
    index = {(ln.src, ln.dst): ln for ln in links}
    done: set[tuple[Vertex, Vertex]] = set()
    for ln in links:
        if (ln.src, ln.dst) in done:
            continue
        back = index.get((ln.dst, ln.src))
        item: dict[str, Any] = {"from": ln.src, "to": ln.dst, "bandwidth": ln.bandwidth, "latency": ln.latency}
        if back is not None and (back.bandwidth, back.latency) == (ln.bandwidth, ln.latency):
            item["both"] = True
            done.add((ln.dst, ln.src))
        done.add((ln.src, ln.dst))
        yield item


def dumps(d: Description) -> str:
    """The file text of a description (reverse links with the same figures folded into `both`)."""
    raw: dict[str, Any] = {"format": FORMAT, "name": d.name, "ranks": d.ranks}
    if d.nodes:
        raw["nodes"] = [list(m) for m in d.nodes]
    raw["switches"] = list(d.switches)
    raw["links"] = list(_pairs(d.links))
    return json.dumps(raw, indent=None, separators=(",", ":")) + "\n"


def save(path: Union[str, Path], d: Description) -> None:
    """Write a description file."""
    Path(path).write_text(dumps(d))
