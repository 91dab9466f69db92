"""Synthesis: a weighted forest of at most K spanning trees for one collective and root, its rate under
the link capacities, and the bound (`bound`) it is measured against.

Two constructions, the better rate kept (ties: the shallower):
  - "packing" (`packing`): Blink-style multiplicative-weights packing of arborescences on the rank graph,
    edge costs from the links along each route; near exact on small graphs, used up to 16 ranks by `auto`
    (each round is one Edmonds arborescence over all rank pairs: seconds per hundred rounds at 32 ranks).
  - "layered" (`layered`): for many nodes, trees laid level by level along the node / group symmetry,
    inner members chosen least-used first; linear in the ranks, depth about log_fanout per level.
  - "pinned" (`pinned`, only when asked for, and tried by `choose`): for nodes behind two NICs, two
    trees each entering every node through its own NIC, so no NIC direction carries two streams.
Why not ForestColl's switch removal: it needs edge splitting-off that keeps every min-cut, then an
exact arborescence packing on the switch-free multigraph; the packing above reaches the bound on the
small graphs where an exact method matters, and the layered trees are what switch removal yields on
symmetric trees of switches, at a fraction of the cost.
A broadcast forest's children are then put in critical-path order (the child with the deepest subtree
first): a rank posts its sends in that order, so the longest path waits for no sibling's post. Reduce
trees keep their order (ordered folds follow it). No MPI.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..plans import schedule_file as forest_file
from .bound import Bound, bound
from .describe import Description
from .hierarchy import Hierarchy, hierarchy
from .layered import layered
from .network import Network, SynthesisError, breadth_first, tree_depth
from .packing import pack
from .pinned import pinned

__all__ = ["METHODS", "Result", "synthesize", "critical_first"]

METHODS = ("auto", "packing", "layered", "pinned")
PACKING_MAX_RANKS = 16
"""Above this many ranks `auto` uses the layered construction only."""

Children = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Result:
    """A synthesized schedule with its rate, the bound, the method used, tree depths and time taken."""

    schedule: forest_file.Schedule
    bound: Bound
    rate: float
    method: str
    depths: tuple[int, ...]
    seconds: float

    @property
    def gap(self) -> float:
        """How far the rate is below the bound, in percent of the bound."""
        if not 0 < self.bound.rate < float("inf"):
            return 0.0
        gap = 100.0 * (1.0 - self.rate / self.bound.rate)
        return 0.0 if abs(gap) < 1e-6 else gap  # float noise is no gap


def synthesize(
    d: Description,
    collective: str,
    root: int = 0,
    trees: int = 8,
    fanout: int = 0,
    method: str = "auto",
    symmetric: bool = True,
    bus_fanout: int = 0,
    context: tuple[Network, Hierarchy, Bound] | None = None,
    packed: dict[tuple[int, str, int], list[tuple[float, Children]]] | None = None,
) -> Result:
    """The forest for `collective` from `root` on `d` (at most `trees` trees, fanout 0: `trees`, >= 2;
    `bus_fanout`: the layered trees' fanout inside a node, 0: `fanout`). `context`: the network, the
    hierarchy and the bound of this `d`, collective, root and symmetry, when the caller has them already
    (`choose` synthesizes many forests for one call; the network keeps its routes). `packed`: a dict
    the caller keeps across calls for the same `d`, holding the packing's trees per (root, collective,
    trees): the packing ignores the fanouts, so `choose` packs once per K."""
    start = time.perf_counter()
    if collective not in forest_file.COLLECTIVES:
        raise SynthesisError(f"collective must be one of {', '.join(forest_file.COLLECTIVES)}, got {collective!r}")
    if method not in METHODS:
        raise SynthesisError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(trees, bool) or not isinstance(trees, int) or trees < 1:
        raise SynthesisError(f"trees must be a whole number >= 1, got {trees!r}")
    if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 0 or fanout == 1:
        raise SynthesisError(f"fanout must be 0 (the number of trees) or >= 2, got {fanout!r}")
    if isinstance(bus_fanout, bool) or not isinstance(bus_fanout, int) or bus_fanout < 0 or bus_fanout == 1:
        raise SynthesisError(f"bus fanout must be 0 (the fanout) or >= 2, got {bus_fanout!r}")
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < d.ranks:
        raise SynthesisError(f"root must be a rank 0..{d.ranks - 1}, got {root!r}")
    fanout = fanout or max(2, trees)
    if context is None:
        h = hierarchy(d)
        net, the_bound = Network(d), bound(d, collective, root, symmetric, h)
    else:
        net, h, the_bound = context
    candidates: list[tuple[float, int, str, list[tuple[float, Children]]]] = []
    if d.ranks == 1:
        candidates.append((float("inf"), 0, "single", [(1.0, ((),))]))
    if d.ranks > 1 and method in ("auto", "packing") and (method == "packing" or d.ranks <= PACKING_MAX_RANKS):
        key = (root, collective, trees)
        got = None if packed is None else packed.get(key)
        if got is None:
            got = pack(net, root, collective, trees)
            if packed is not None:
                packed[key] = got
        candidates.append(_score(net, got, collective, root, "packing"))
    if method == "pinned":
        if trees < 2:
            raise SynthesisError(f"pinned makes two trees: trees must be >= 2, got {trees}")
        candidates.append(_score(net, pinned(net, h, root), collective, root, "pinned"))
    if d.ranks > 1 and method in ("auto", "layered"):
        try:
            got = layered(net, h, root, collective, trees, fanout, bus_fanout)
            candidates.append(_score(net, got, collective, root, "layered"))
        except SynthesisError:
            if method == "layered":
                raise
            if not candidates:  # ranks without routes between some pairs (a ring, a mesh): pack, however slow
                candidates.append(_score(net, pack(net, root, collective, trees), collective, root, "packing"))
    rate, _, name, chosen = max(candidates, key=lambda c: (c[0] * (1 - 1e-9), -c[1]))
    if collective == "bcast":
        chosen = [(w, critical_first(kids, root)) for w, kids in chosen]
    raw = {
        "format": forest_file.FORMAT,
        "collective": collective,
        "ranks": d.ranks,
        "topology": d.name,
        "forests": [
            {
                "root": root,
                "bound": {**the_bound.as_dict(), "forest_rate": rate, "method": name},
                "trees": [{"weight": w, "children": [list(k) for k in kids]} for w, kids in chosen],
            }
        ],
    }
    schedule = forest_file.from_dict(raw, "<synthesized>")  # the file format checks every tree spans
    depths = tuple(tree_depth(kids, root) for _, kids in chosen)
    return Result(schedule, the_bound, rate, name, depths, time.perf_counter() - start)


def critical_first(children: Sequence[Sequence[int]], root: int) -> Children:
    """The same tree with every rank's children sorted by the height of their subtrees, deepest first
    (ties keep their order): the order a broadcast posts its sends in."""
    order, _ = breadth_first(children, root)
    height = [0] * len(children)
    for r in reversed(order):
        for c in children[r]:
            height[r] = max(height[r], height[c] + 1)
    return tuple(tuple(sorted(kids, key=lambda c: -height[c])) for kids in children)


def _score(
    net: Network, trees: list[tuple[float, Children]], collective: str, root: int, name: str
) -> tuple[float, int, str, list[tuple[float, Children]]]:
    rate = net.forest_rate(trees, collective)
    return rate, max(tree_depth(k, root) for _, k in trees), name, trees
