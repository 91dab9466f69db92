"""Throughput bounds (bytes/s) of a described network for bcast, reduce and allreduce from one root.

bcast (ForestColl's bound; Edmonds' theorem with switches as intermediate vertices): a message leaves
root r at most as fast as the smallest max-flow from r to any rank v, min_v maxflow(r -> v). It is
attained by a packing of spanning arborescences when switches forward as much as they receive (every
writer's shape: full-duplex links), so no schedule can beat it and a good one reaches it.
reduce: the same on the reversed graph, min_v maxflow(v -> r).
allreduce, for the schedule family this package makes (reduce to r, then broadcast from r over the
same weighted trees, both pipelined at once over full-duplex links): every tree edge carries its share
once down and once up, so the bound is the smallest of
  - the bcast and the reduce bounds (each cut is crossed down by the broadcast and up by the reduce);
  - for a partition of the ranks into k parts V_1..V_k (with switches of their own), every tree has at
    least k-1 edges between parts and each such edge leaves one part going down and another going up:
    rate <= sum_i c(out of V_i) / (2 (k-1)), and the same with links into the parts. Checked for two
    partitions: every rank alone, and every node (its ranks and private switches).
On a flat switch of n ranks with links c this gives c n / (2 (n-1)), the classic allreduce bound.
Switches that forward less than they receive (a backplane or a node's memory shared by all messages,
`shapes.flat_switch(shared_bandwidth=...)`) break the min-cut's attainability: ranks relay, switches
do not copy, so a switch-to-switch link that every route into k ranks crosses carries k shares of
every byte: rate <= its bandwidth / k ("shared link"; allreduce: the crossings down and up added).
Only links at such switches are checked (elsewhere the min-cut is attained).
Symmetry: with identical nodes and groups (`hierarchy`), ranks of one class (same relation to the
root's node and group, same index in their node) have the same max-flow, so one per class is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.flow import boykov_kolmogorov
from networkx.algorithms.flow.utils import build_residual_network

from .describe import Description, Vertex
from .hierarchy import Hierarchy, hierarchy
from .network import SynthesisError

__all__ = ["Bound", "flow_graph", "bound", "cut_bound", "partition_bound", "shared_link_bound"]


@dataclass(frozen=True)
class Bound:
    """A throughput bound (bytes/s), what sets it, and how many max-flows it took."""

    rate: float
    limited_by: str
    flows: int

    def as_dict(self) -> dict[str, object]:
        """The form a schedule file's forest keeps under `bound`."""
        return {"rate": self.rate, "limited_by": self.limited_by, "flows": self.flows}


def flow_graph(d: Description, reverse: bool = False) -> nx.DiGraph:
    """Every vertex, and the links as edges with `capacity` = bandwidth (reversed for reduce)."""
    g = nx.DiGraph()
    g.add_nodes_from(d.vertices())
    for ln in d.links:
        a, b = (ln.dst, ln.src) if reverse else (ln.src, ln.dst)
        g.add_edge(a, b, capacity=ln.bandwidth)
    return g


def _targets(d: Description, root: int, h: Hierarchy | None) -> list[int]:
    """The ranks whose max-flow is computed: all but the root, or one per symmetry class."""
    others = [v for v in range(d.ranks) if v != root]
    if h is None or not h.symmetric:
        return others
    seen: dict[tuple[int, int], int] = {}
    for v in others:
        seen.setdefault(h.rank_class(v, root), v)
    return list(seen.values())


def cut_bound(
    d: Description, root: int, reverse: bool = False, symmetric: bool = True, h: Hierarchy | None = None
) -> Bound:
    """min over ranks v of maxflow(root -> v) (`reverse`: v -> root), one v per class when `symmetric`
    (`h`: the description's hierarchy if already known)."""
    if not 0 <= root < d.ranks:
        raise SynthesisError(f"root {root} is not a rank 0..{d.ranks - 1}")
    if d.ranks == 1:
        return Bound(float("inf"), "a single rank", 0)
    g = flow_graph(d, reverse)
    targets = _targets(d, root, (h or hierarchy(d)) if symmetric else None)
    best, where = float("inf"), root
    residual = build_residual_network(g, "capacity")  # built once, reset by each run
    for v in targets:
        value = boykov_kolmogorov(g, root, v, capacity="capacity", residual=residual).graph["flow_value"]
        if value < best:
            best, where = value, v
    if best <= 0:
        raise SynthesisError(f"rank {where} is not reachable {'to' if reverse else 'from'} root {root}")
    way = f"{where} -> {root}" if reverse else f"{root} -> {where}"
    return Bound(best, f"min cut {way}", len(targets))


def partition_bound(d: Description, parts: list[set[Vertex]], label: str) -> Bound:
    """The allreduce partition bound: min(sum out, sum in) of the parts' capacity / (2 (k-1))."""
    k = len(parts)
    if k < 2:
        return Bound(float("inf"), label, 0)
    owner = {v: i for i, part in enumerate(parts) for v in part}
    out = inn = 0.0
    for ln in d.links:
        a, b = owner.get(ln.src), owner.get(ln.dst)
        if a != b:
            out += ln.bandwidth if a is not None else 0.0
            inn += ln.bandwidth if b is not None else 0.0
    return Bound(min(out, inn) / (2 * (k - 1)), label, 0)


def _unbalanced_switches(d: Description) -> set[Vertex]:
    """Switches whose links in and out differ in total bandwidth (they cannot forward all they receive)."""
    total: dict[Vertex, list[float]] = {sw: [0.0, 0.0] for sw in d.switches}
    for ln in d.links:
        if ln.dst in total:
            total[ln.dst][0] += ln.bandwidth
        if ln.src in total:
            total[ln.src][1] += ln.bandwidth
    return {sw for sw, (i, o) in total.items() if abs(i - o) > 1e-9 * max(i, o)}


def shared_link_bound(d: Description, root: int, collective: str) -> Bound:
    """min over switch-to-switch links at unbalanced switches of bandwidth / k, k: for bcast the ranks
    (not the root) that no other rank reaches once the link is gone (each receives every byte across
    it), for reduce the ranks that reach no other rank (each sends its share across it), for allreduce
    both counts added. inf when there is no such link."""
    unbalanced = _unbalanced_switches(d)
    best = Bound(float("inf"), "shared link", 0)
    if not unbalanced:
        return best
    g = flow_graph(d)
    ranks = set(range(d.ranks))
    for ln in d.links:
        if isinstance(ln.src, int) or isinstance(ln.dst, int) or not ({ln.src, ln.dst} & unbalanced):
            continue
        g.remove_edge(ln.src, ln.dst)
        down = sum(1 for v in ranks if v != root and not (nx.ancestors(g, v) & (ranks - {v})))
        up = sum(1 for v in ranks if v != root and not (nx.descendants(g, v) & (ranks - {v})))
        g.add_edge(ln.src, ln.dst, capacity=ln.bandwidth)
        k = {"bcast": down, "reduce": up}.get(collective, down + up)
        if k and ln.bandwidth / k < best.rate:
            best = Bound(ln.bandwidth / k, f"shared link {ln.src} -> {ln.dst} (crossed {k} times)", 0)
    return best


def bound(d: Description, collective: str, root: int, symmetric: bool = True, h: Hierarchy | None = None) -> Bound:
    """The throughput bound of `collective` from `root` (see the module docstring)."""
    if collective not in ("bcast", "reduce", "allreduce"):
        raise SynthesisError(f"collective must be bcast, reduce or allreduce, got {collective!r}")
    h = h or hierarchy(d)
    if collective != "allreduce":
        cut = cut_bound(d, root, collective == "reduce", symmetric, h)
        shared = shared_link_bound(d, root, collective)
        return cut if cut.rate <= shared.rate else Bound(shared.rate, shared.limited_by, cut.flows)
    down, up = cut_bound(d, root, False, symmetric, h), cut_bound(d, root, True, symmetric, h)
    candidates = [
        down,
        up,
        shared_link_bound(d, root, collective),
        partition_bound(d, [{r} for r in range(d.ranks)], "partition: every rank alone"),
        partition_bound(d, [h.node_vertices(n) for n in range(len(h.nodes))], "partition: every node"),
    ]
    best = min(candidates, key=lambda b: b.rate)
    return Bound(best.rate, best.limited_by, down.flows + up.flows)
