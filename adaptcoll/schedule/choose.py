"""The CPU-aware choice: synthesized forests (trees K x fanout x fanout inside a node) and adaptcoll's
fixed shapes (two_tree, binomial, topo over the nodes, pipeline), each at every segment size, ranked by one estimate
(`cost.estimate`: links, each rank's CPU, pipeline fill); the best forest is taken only when it beats
the best fixed shape by more than `margin` (a fixed shape is what the library runs without a file).

The fixed shapes are written as forests (their trees at equal weights): a schedule file holding
two_tree's two trees runs exactly as `two_tree`, so whatever is chosen is one schedule file. No MPI.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..plans import schedule_file as forest_file
from ..plans import trees as tree_shapes
from .bound import Bound, bound
from .cost import DEFAULT_CPU, CpuCosts, Estimate, estimate
from .describe import Description
from .hierarchy import hierarchy
from .network import Network, SynthesisError
from .pinned import sides
from .synthesize import Result, synthesize

__all__ = ["FIXED", "SEGMENTS", "Candidate", "Choice", "fixed_trees", "cpu_floor", "choose"]

FIXED = ("two_tree", "binomial", "topo", "pipeline")
"""adaptcoll's fixed shapes the choice compares against (topo only where the description has nodes)."""
SEGMENTS = (
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    384 << 10,
    512 << 10,
    768 << 10,
    1 << 20,
    3 << 19,
    2 << 20,
)
"""Segment sizes tried by default (bytes): powers of two and the halves between from 256 KiB on, where
the CPU per message and the pipeline fill trade closely (at 4096 ranks two_tree's best is 384 KiB with
the Python engine's CPU costs); from 16 KiB, where the compiled engine's costs put the best Reduce and
Allreduce of 4 MiB on nodes of 8 (two_tree 32 KiB, the compiled rule's own band)."""

Children = tuple[tuple[int, ...], ...]
Weighted = list[tuple[float, Children]]


@dataclass(frozen=True)
class Candidate:
    """One schedule at its best segment size: its name, whether it is a fixed shape, trees, estimate."""

    name: str
    fixed: bool
    trees: Weighted
    roots: tuple[int, ...]
    """each tree's root (allreduce's fixed shapes: one forest per root, as the library runs them)"""
    estimate: Estimate
    rate: float
    """its throughput under the link capacities alone (bytes/s; for the forest of the first root)"""


@dataclass(frozen=True)
class Choice:
    """The chosen schedule, the best of each kind, every candidate, the bounds, and the time taken."""

    chosen: Candidate
    best_forest: Candidate | None
    best_fixed: Candidate | None
    candidates: tuple[Candidate, ...]
    bound: Bound
    cpu_floor_s: float
    size: int
    margin: float
    seconds: float
    any_floor_s: float = 0.0
    """the CPU floor at any segment size (one segment): for reduce and allreduce the folds alone, which
    no schedule in this cost model goes below, however the bytes are cut"""

    def schedule(self, collective: str, root: int, d: Description) -> forest_file.Schedule:
        """The chosen schedule as a file value; its bound record holds the bounds and the estimate."""
        c = self.chosen
        record = {
            **self.bound.as_dict(),
            "forest_rate": c.rate,
            "method": c.name,
            "size": self.size,
            "cpu_floor_s": self.cpu_floor_s,
            "any_floor_s": self.any_floor_s,
            **c.estimate.as_dict(),
        }
        by_root: dict[int, list[dict[str, object]]] = {}
        for (w, kids), r in zip(c.trees, c.roots):
            by_root.setdefault(r, []).append({"weight": w, "children": [list(k) for k in kids]})
        forests = [{"root": r, "trees": ts} for r, ts in by_root.items()]
        forests[0]["bound"] = record
        raw = {
            "format": forest_file.FORMAT,
            "collective": collective,
            "ranks": d.ranks,
            "topology": d.name,
            "forests": forests,
        }
        return forest_file.from_dict(raw, "<chosen>")


def fixed_trees(
    d: Description, shape: str, root: int, collective: str = "bcast", allreduce_roots: int = 0, limit: int = 0
) -> tuple[Weighted, tuple[int, ...]] | None:
    """A fixed shape's trees over the description's ranks (equal weights) and their roots, as the
    library runs them: Bcast and Reduce from `root`; Allreduce from `allreduce_roots` roots spread
    evenly over the ranks (0: every rank; the library's default), segments dealt round-robin over all
    their trees. `limit` > 0: stop after the root whose trees reach `limit` trees (a call of at most
    `limit` segments deals none to the trees after: tree s % trees takes segment s). None where the
    shape does not apply (topo without nodes)."""
    if collective != "allreduce":
        got = _shape_trees(d, shape, root)
        return None if got is None else (got, (root,) * len(got))
    count = min(d.ranks, allreduce_roots or d.ranks)
    trees: Weighted = []
    roots: list[int] = []
    for k in range(count):
        r = (k * d.ranks) // count
        got = _shape_trees(d, shape, r)
        if got is None:
            return None
        trees += got
        roots += [r] * len(got)
        if limit and len(trees) >= limit:
            break
    return trees, tuple(roots)


def _shape_trees(d: Description, shape: str, root: int) -> Weighted | None:
    n = d.ranks
    built: tuple[tree_shapes.Tree, ...]
    if shape == "topo":
        owner = d.node_of()
        if len(set(owner)) in (1, n):
            return None
        built = (tree_shapes.build("topo", n, root, levels=(tuple(owner),)),)
    elif shape == "two_tree":
        built = tree_shapes.build_all("two_tree", n, root)
    else:
        built = (tree_shapes.build(shape, n, root),)
    return [(1.0, tuple(t.children(r) for r in range(n))) for t in built]


def cpu_floor(collective: str, ranks: int, size: int, segment: int, cpu: CpuCosts = DEFAULT_CPU) -> float:
    """CPU seconds the busiest rank spends at least (the average rank's) for any tree schedule in
    `segment`-byte segments: per segment n-1 messages, each costing its two ends (twice for allreduce),
    and for reduce and allreduce n-1 contributions of every byte folded, over n ranks."""
    if ranks < 2:
        return 0.0
    nseg = max(1, math.ceil(size / segment)) if segment > 0 else 1
    messages = nseg * 2 * (ranks - 1) / ranks * (2 if collective == "allreduce" else 1)
    folds = 0.0 if collective == "bcast" else size * (ranks - 1) / ranks
    return messages * cpu.message + folds * cpu.fold


def _best(
    net: Network,
    name: str,
    fixed: bool,
    trees: Weighted,
    root: tuple[int, ...],
    collective: str,
    size: int,
    segments: Sequence[int],
    cpu: CpuCosts,
) -> Candidate:
    memo: dict[object, object] = {}  # routes, loads and edges shared by the segment sizes
    got = min((estimate(net, trees, root, collective, size, s, cpu, memo) for s in segments), key=lambda e: e.total_s)
    try:
        rate = net.forest_rate([t for t, r in zip(trees, root) if r == root[0]], collective)
    except SynthesisError:  # a fixed shape with an edge that has no switch route (DGX-1: relayed)
        rate = 0.0
    return Candidate(name, fixed, trees, root, got, rate)


def choose(
    d: Description,
    collective: str,
    root: int,
    size: int,
    segments: Sequence[int] = SEGMENTS,
    trees: Sequence[int] = (2, 4, 8),
    fanouts: Sequence[int] = (2, 0),
    fixed: Sequence[str] = FIXED,
    cpu: CpuCosts = DEFAULT_CPU,
    margin: float = 0.03,
    symmetric: bool = True,
    allreduce_roots: int = 0,
    bus_fanouts: Sequence[int] = (0, 2, 3),
) -> Choice:
    """Every forest (trees x fanouts x bus_fanouts inside a node; fanout 0: K, bus fanout 0: the
    fanout; bus fanouts only change forests over nodes) and fixed shape at its best segment size by the
    estimate; the best forest is chosen when its estimate is below (1 - margin) x the best fixed
    shape's, else the best fixed shape. `allreduce_roots`: the library's setting the fixed shapes run
    with (0: every rank a root)."""
    start = time.perf_counter()
    if size < 1:
        raise SynthesisError(f"size must be >= 1 byte, got {size}")
    if not segments or min(segments) < 1:
        raise SynthesisError(f"segment sizes must be >= 1 byte, got {list(segments)}")
    net = Network(d)
    h = hierarchy(d)
    the_bound = bound(d, collective, root, symmetric, h)
    found: list[Candidate] = []
    most = max(math.ceil(size / s) for s in segments)
    for shape in fixed:
        got_shape = fixed_trees(d, shape, root, collective, allreduce_roots, most)
        if got_shape is not None:
            found.append(_best(net, shape, True, got_shape[0], got_shape[1], collective, size, segments, cpu))
        if collective == "allreduce" and allreduce_roots != 1:  # what the compiled rule runs: one root
            one = fixed_trees(d, shape, root, collective, 1, most)
            if one is not None:
                found.append(_best(net, f"{shape} (one root)", True, one[0], one[1], collective, size, segments, cpu))
    seen: set[tuple[int, int, int]] = set()
    made: set[tuple[tuple[float, Children], ...]] = set()  # the packing ignores the fanouts: one of each
    packed: dict[tuple[int, str, int], Weighted] = {}  # and is made once per K
    for k, f0, b0 in itertools.product(trees, fanouts, bus_fanouts):
        f = f0 or max(2, k)
        b = b0 or f
        if (k, f, b) in seen:
            continue
        seen.add((k, f, b))
        got: Result = synthesize(
            d,
            collective,
            root,
            trees=k,
            fanout=f,
            symmetric=symmetric,
            bus_fanout=b,
            context=(net, h, the_bound),
            packed=packed,
        )
        kids = [(t.weight, t.children) for t in got.schedule.forests[0].trees]
        if tuple(kids) in made:
            continue
        made.add(tuple(kids))
        roots = (root,) * len(kids)
        name = f"forest K={k} F={f}{'' if b == f else f' B={b}'} ({got.method})"
        found.append(_best(net, name, False, kids, roots, collective, size, segments, cpu))
    if sides(net, h) is not None and max(trees, default=0) >= 2:  # nodes behind two NICs: the pinned pair too
        got = synthesize(
            d, collective, root, trees=2, method="pinned", symmetric=symmetric, context=(net, h, the_bound)
        )
        kids = [(t.weight, t.children) for t in got.schedule.forests[0].trees]
        found.append(
            _best(net, "forest K=2 (pinned)", False, kids, (root,) * len(kids), collective, size, segments, cpu)
        )
    forests = [c for c in found if not c.fixed]
    shapes = [c for c in found if c.fixed]
    best_forest = min(forests, key=lambda c: c.estimate.total_s, default=None)
    best_fixed = min(shapes, key=lambda c: c.estimate.total_s, default=None)
    if best_fixed is None or (
        best_forest is not None and best_forest.estimate.total_s < (1.0 - margin) * best_fixed.estimate.total_s
    ):
        chosen = best_forest
    else:
        chosen = best_fixed
    assert chosen is not None
    floor = cpu_floor(collective, d.ranks, size, chosen.estimate.segment, cpu)
    any_floor = cpu_floor(collective, d.ranks, size, size, cpu)  # fewer segments never cost more
    return Choice(
        chosen,
        best_forest,
        best_fixed,
        tuple(found),
        the_bound,
        floor,
        size,
        margin,
        time.perf_counter() - start,
        any_floor,
    )
