"""A schedule: weighted forests of spanning trees over the ranks, one forest per root.

The file format ("adaptcoll.schedule/1", JSON) is what `python -m adaptcoll.schedule` writes and what
the `forest:FILE` algorithm setting runs; docs/schedules.md documents it:

    {"format": "adaptcoll.schedule/1", "collective": "bcast", "ranks": 4, "topology": "two nodes",
     "forests": [{"root": 0, "bound": {"rate": 5e10},
                  "trees": [{"weight": 0.75, "children": [[1, 2], [], [3], []]},
                            {"weight": 0.25, "children": [[2], [], [1, 3], []]}]}]}

A tree's `children[r]` lists rank r's children in the order r serves them; a tree's weight is the
share of the message (of its segments) it carries. Weights are positive; they need not sum to 1 (the
reader keeps them as written; `shares` normalizes). `collective` says what the forest was made for
(bcast, reduce or allreduce); reduce trees fold in the order of `children`. No MPI, no graph library.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from .trees import Tree

__all__ = ["FORMAT", "COLLECTIVES", "WeightedTree", "Forest", "Schedule", "ScheduleError", "loads", "load", "dumps"]

FORMAT = "adaptcoll.schedule/1"
COLLECTIVES = ("bcast", "reduce", "allreduce")


class ScheduleError(ValueError):
    """A schedule that cannot be used, with where in it the problem is."""


@dataclass(frozen=True)
class WeightedTree:
    """A spanning tree (children lists per rank) and the share of the data it carries."""

    weight: float
    children: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Forest:
    """The weighted trees of one root, validated to span every rank from `root`."""

    root: int
    trees: tuple[WeightedTree, ...]
    bound: dict[str, Any] = field(default_factory=dict, compare=False)

    def shares(self) -> tuple[float, ...]:
        """Each tree's weight divided by their sum."""
        total = sum(t.weight for t in self.trees)
        return tuple(t.weight / total for t in self.trees)

    def tree_set(self, origin: str = "") -> tuple[Tree, ...]:
        """The trees as `adaptcoll.plans.trees.Tree` values (kind "forest"), in forest order; each carries its
        weight as the parameter "weight" (adaptcoll.protocols.links deals segments by it)."""
        size = len(self.trees[0].children)
        return tuple(
            Tree(
                "forest",
                size,
                self.root,
                (("file", origin), ("tree", k), ("weight", t.weight)),
                [list(c) for c in t.children],
            )
            for k, t in enumerate(self.trees)
        )


@dataclass(frozen=True)
class Schedule:
    """A validated schedule file: forests (one per root) for `ranks` ranks."""

    ranks: int
    collective: str
    forests: tuple[Forest, ...]
    topology: str = ""

    def forest(self, root: int) -> Forest:
        """The forest rooted at `root` (ScheduleError naming the roots it has, if none)."""
        for f in self.forests:
            if f.root == root:
                return f
        have = ", ".join(str(f.root) for f in self.forests)
        raise ScheduleError(f"schedule has no forest rooted at rank {root} (roots: {have})")


def _bad(where: str, why: str) -> ScheduleError:
    return ScheduleError(f"schedule: {where}: {why}")


def _tree(raw: Any, ranks: int, root: int, where: str) -> WeightedTree:
    if not isinstance(raw, dict) or set(raw) - {"weight", "children"} or "children" not in raw:
        raise _bad(where, "a tree is an object with 'weight' and 'children'")
    weight = raw.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (math.isfinite(weight) and weight > 0):
        raise _bad(f"{where}.weight", f"must be a finite number > 0, got {weight!r}")
    children = raw["children"]
    if not isinstance(children, list) or len(children) != ranks:
        raise _bad(f"{where}.children", f"must list the children of each of the {ranks} ranks")
    for r, kids in enumerate(children):
        if not isinstance(kids, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in kids):
            raise _bad(f"{where}.children[{r}]", f"must be a list of ranks, got {kids!r}")
    kids_t = tuple(tuple(k) for k in children)
    try:
        Tree("forest", ranks, root, (), [list(k) for k in kids_t])
    except RuntimeError as exc:  # the Tree check words problems as builder bugs; here they are the file's
        raise _bad(
            where, f"not a spanning tree rooted at {root}: {str(exc).replace('tree builder bug: ', '')}"
        ) from None
    return WeightedTree(float(weight), kids_t)


def from_dict(raw: Any, origin: str = "<schedule>") -> Schedule:
    """The schedule held by a parsed JSON object (errors name `origin` and the field)."""
    if not isinstance(raw, dict):
        raise _bad(origin, "must be a JSON object")
    if raw.get("format") != FORMAT:
        raise _bad(f"{origin}: format", f"expected {FORMAT!r}, got {raw.get('format')!r}")
    unknown = set(raw) - {"format", "collective", "ranks", "topology", "forests", "comment"}
    if unknown:
        raise _bad(origin, f"unknown keys {sorted(unknown)}")
    ranks, collective = raw.get("ranks"), raw.get("collective")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise _bad("ranks", f"must be a whole number >= 1, got {ranks!r}")
    if collective not in COLLECTIVES:
        raise _bad("collective", f"must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    forests_raw = raw.get("forests")
    if not isinstance(forests_raw, list) or not forests_raw:
        raise _bad("forests", "must be a non-empty list")
    forests: list[Forest] = []
    for i, f in enumerate(forests_raw):
        where = f"forests[{i}]"
        if not isinstance(f, dict) or set(f) - {"root", "trees", "bound"} or not {"root", "trees"} <= set(f):
            raise _bad(where, "a forest is an object with 'root', 'trees' (and 'bound')")
        root = f["root"]
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < ranks:
            raise _bad(f"{where}.root", f"must be a rank 0..{ranks - 1}, got {root!r}")
        if any(g.root == root for g in forests):
            raise _bad(f"{where}.root", f"a second forest rooted at {root}")
        trees = f["trees"]
        if not isinstance(trees, list) or not trees:
            raise _bad(f"{where}.trees", "must be a non-empty list")
        bound = f.get("bound", {})
        if not isinstance(bound, dict):
            raise _bad(f"{where}.bound", "must be an object")
        forests.append(
            Forest(root, tuple(_tree(t, ranks, root, f"{where}.trees[{k}]") for k, t in enumerate(trees)), bound)
        )
    return Schedule(ranks, collective, tuple(forests), str(raw.get("topology", "")))


def loads(text: str, origin: str = "<schedule>") -> Schedule:
    """Parse a schedule from JSON text."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(origin, f"not JSON: {exc}") from None
    return from_dict(raw, origin)


def load(path: Union[str, Path]) -> Schedule:
    """Read a schedule file."""
    path = Path(path)
    return loads(path.read_text(), str(path))


def dumps(s: Schedule) -> str:
    """The file text of a schedule."""
    raw = {
        "format": FORMAT,
        "collective": s.collective,
        "ranks": s.ranks,
        "topology": s.topology,
        "forests": [
            {
                "root": f.root,
                "bound": f.bound,
                "trees": [{"weight": t.weight, "children": [list(k) for k in t.children]} for t in f.trees],
            }
            for f in s.forests
        ],
    }
    return json.dumps(raw, separators=(",", ":")) + "\n"
