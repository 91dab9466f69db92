"""A time estimate for a weighted forest on a described network: the links AND each rank's CPU.

The link model alone (`Network.forest_rate`) says how fast the links could carry a forest; in
adaptcoll every message also costs its sender and its receiver CPU time (posting it, `o`; its
completion callback, `engine`), and every reduction folds its children's bytes (`fold` per byte). The
estimate for a message of `size` bytes cut into segments of `segment` bytes, dealt to the trees by
weight, is

    time = max(link time + fill, max over ranks r of (work_r x (1 - 1/segments) + path_r))

- link time: the busiest link's bytes over its bandwidth (the forest's segments as dealt);
- work_r (the busiest rank's is the CPU time): per segment of tree t, (1 receive if not the root + one send
  per child) x (o + engine), twice for allreduce (up, then down), plus its children's bytes x fold
  (reduce, allreduce);
- fill: the slowest root-to-leaf path of one segment (a hop: the parent's callback and posts, the
  route's latency, twice when the segment goes by rendezvous, the segment's bytes over the route's
  links shared with the parent's other children in that tree and with the other trees' segments
  (`ROUND_DOWN`, `ROUND_UP`), and going up the parent's folds in arrival order); up then down for
  allreduce; path_r is a longest path through rank r (halfway between its shortest and its longest
  over the trees).

It is what `choose` ranks schedules by, and it names the resource that binds. The CPU figures default
to the simulator's built-in ones (`adaptcoll.simulate.params.DEFAULT_PARAMS`; a test keeps them equal);
this module reads plain numbers only, so it imports nothing from the simulator. No MPI.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from .network import Network, Route, SynthesisError, breadth_first, tree_load

__all__ = ["CpuCosts", "DEFAULT_CPU", "Estimate", "cpu_costs", "segments_dealt", "rank_work", "estimate"]

Children = Sequence[Sequence[int]]


@dataclass(frozen=True)
class CpuCosts:
    """Per-rank CPU costs (seconds, seconds per byte) and the eager limit (bytes) of the runtime."""

    o: float = 5.9e-6
    engine: float = 3.1e-6
    fold: float = 1.5e-10
    eager: int = 65536

    @property
    def message(self) -> float:
        """CPU seconds one message costs each of its two ends (a post and a completion callback)."""
        return self.o + self.engine


ROUND_DOWN, ROUND_UP = 1.0, 0.5
"""While the pipelines fill, a hop waits for this part of a round (one segment of every tree of one
root) on its busiest link, going down / up. Fitted on small fat trees and NIC nodes (0: no wait, 1: a
full round each hop); down takes the full round: half of it left deep forests with big segments
estimated up to 27 % fast, and a forest estimated fast is the choice's costly mistake. A hop up also
waits ROUND_UP x its parent's CPU work per segment (the parent folds other segments meanwhile)."""

DEFAULT_CPU = CpuCosts()
"""The simulator's built-in figures (the 16-core node's calibration)."""


def cpu_costs(raw: Mapping[str, Any] | Any | None = None) -> CpuCosts:
    """CpuCosts from a simulator parameters object or a dict holding some of o, engine, fold, eager
    (e.g. a parameters file's JSON); the rest keep the defaults."""
    if raw is None:
        return DEFAULT_CPU
    get = raw.get if isinstance(raw, Mapping) else lambda k, d: getattr(raw, k, d)
    out = CpuCosts(
        float(get("o", DEFAULT_CPU.o)),
        float(get("engine", DEFAULT_CPU.engine)),
        float(get("fold", DEFAULT_CPU.fold)),
        int(get("eager", DEFAULT_CPU.eager)),
    )
    if min(out.o, out.engine, out.fold, out.eager) < 0 or not all(map(math.isfinite, (out.o, out.engine, out.fold))):
        raise ValueError(f"CPU costs must be finite numbers >= 0, got {out}")
    return out


def segments_dealt(weights: Sequence[float], nseg: int) -> list[int]:
    """How many of `nseg` segments each tree carries: its largest-remainder quota by weight (as the
    forest protocol deals them; equal weights: round-robin)."""
    k = len(weights)
    if len(set(weights)) <= 1:
        return [nseg // k + (1 if t < nseg % k else 0) for t in range(k)]
    total = sum(weights)
    exact = [nseg * w / total for w in weights]
    quota = [math.floor(x + 1e-12) for x in exact]
    for t in sorted(range(k), key=lambda t: (-(exact[t] - quota[t]), t))[: nseg - sum(quota)]:
        quota[t] += 1
    return quota


def _roots(root: int | Sequence[int], n: int) -> list[int]:
    """One root per tree (a single root: every tree's)."""
    roots = [root] * n if isinstance(root, int) else list(root)
    if len(roots) != n:
        raise ValueError(f"{len(roots)} roots for {n} trees")
    return roots


def rank_work(
    trees: Sequence[tuple[int, Children]], root: int | Sequence[int], collective: str, ranks: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: messages (sent + received) and child contributions folded, for trees carrying
    `count` segments each, given as (count, children), rooted at `root` (one, or one per tree).
    Allreduce counts both directions."""
    msgs = np.zeros(ranks)
    folds = np.zeros(ranks)
    both = 2 if collective == "allreduce" else 1
    for (count, children), r in zip(trees, _roots(root, len(trees))):
        if not count:
            continue
        kids = np.array([len(k) for k in children], dtype=float)
        degree = kids + 1.0
        degree[r] -= 1.0
        msgs += count * both * degree
        if collective != "bcast":
            folds += count * kids
    return msgs, folds


@dataclass(frozen=True)
class Estimate:
    """The estimated time of one schedule and what it is made of (seconds)."""

    total_s: float
    link_s: float
    cpu_s: float
    fill_s: float
    segment: int
    segments: int
    busiest_rank: int
    busiest_link: str
    depth: int

    @property
    def binds(self) -> str:
        """The resource whose busy time is the larger: 'cpu' or 'links'."""
        return "cpu" if self.cpu_s >= self.link_s else "links"

    def as_dict(self) -> dict[str, Any]:
        """For a schedule file's free-form bound record."""
        return {
            "estimate_s": self.total_s,
            "link_s": self.link_s,
            "cpu_s": self.cpu_s,
            "fill_s": self.fill_s,
            "binds": self.binds,
            "segment": self.segment,
            "segments": self.segments,
        }


class _Routes:
    """Routes for the estimate: the network's (through switches), or, for a pair without one, the
    path with the fewest hops over any vertices (the simulator relays through ranks there)."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self._relayed: dict[tuple[int, int], Route] = {}
        self._graph: nx.DiGraph | None = None

    def route(self, u: int, v: int) -> Route:
        try:
            return self.net.route(u, v)
        except SynthesisError:
            pass
        got = self._relayed.get((u, v))
        if got is None:
            if self._graph is None:
                self._graph = nx.DiGraph()
                for i, ln in enumerate(self.net.links):
                    self._graph.add_edge(ln.src, ln.dst, link=i, weight=1.0 + ln.latency)
            path = nx.shortest_path(self._graph, u, v, weight="weight")  # NetworkXNoPath if none
            got = self._relayed[(u, v)] = tuple(
                (self._graph.edges[a, b]["link"], 1.0) for a, b in itertools.pairwise(path)
            )
        return got


def _latency(net: Network, route: Sequence[tuple[int, float]]) -> float:
    """A route's latency: the links' latencies weighted by the share of the bytes on each path."""
    return sum(net.links[link].latency * frac for link, frac in route)


@dataclass(frozen=True)
class _Skeleton:
    """A tree's edges for `_hops`, made once for every segment size: per edge its child, parent, place
    among its siblings (1-based), route latency and first entry; per route entry its link and the
    parent's share of that link in this tree over the link's bandwidth."""

    child: np.ndarray
    parent: np.ndarray
    place: np.ndarray
    latency: np.ndarray
    start: np.ndarray
    link: np.ndarray
    per_byte: np.ndarray


def _skeleton(net: Network, routes: _Routes, children: Children, up: bool) -> _Skeleton:
    child: list[int] = []
    parent: list[int] = []
    place: list[int] = []
    start: list[int] = []
    link: list[int] = []
    latency: list[float] = []
    per_byte: list[float] = []
    for p, kids in enumerate(children):
        if not kids:
            continue
        share: dict[int, float] = {}  # this parent's edges in the tree on each link, per segment byte
        paths = [routes.route(c, p) if up else routes.route(p, c) for c in kids]
        for route in paths:
            for ln, frac in route:
                share[ln] = share.get(ln, 0.0) + frac
        for i, (c, route) in enumerate(zip(kids, paths)):
            child.append(c)
            parent.append(p)
            place.append(i + 1)
            latency.append(_latency(net, route))
            start.append(len(link))
            for ln, _ in route:
                link.append(ln)
                per_byte.append(share[ln] / net.capacity[ln])
    return _Skeleton(
        np.array(child, dtype=np.int64),
        np.array(parent, dtype=np.int64),
        np.array(place, dtype=float),
        np.array(latency, dtype=float),
        np.array(start, dtype=np.int64),
        np.array(link, dtype=np.int64),
        np.array(per_byte, dtype=float),
    )


def _hops(
    sk: _Skeleton,
    ranks: int,
    seg: float,
    up: bool,
    cpu: CpuCosts,
    round_busy: np.ndarray,
    round_cpu: np.ndarray | None = None,
) -> np.ndarray:
    """Per rank, the time one segment of `seg` bytes takes on the tree edge to it from its parent
    (down) or from it to its parent (up; the parent's folds included); 0 at the root. The bytes move
    at the parent's share of each link, and no faster than the link clears one round (one segment of
    every tree: `round_busy`, seconds per link), since all trees fill their pipelines at once."""
    hop = np.zeros(ranks)
    if not len(sk.child):
        return hop
    handshakes = 2.0 if seg > cpu.eager else 1.0
    wire = np.maximum.reduceat(np.maximum(seg * sk.per_byte, round_busy[sk.link]), sk.start)
    wire += handshakes * sk.latency
    if up:  # the child posts its send (the parent's callback and fold: `_through_up`)
        hop[sk.child] = cpu.o + wire + (0.0 if round_cpu is None else round_cpu[sk.parent])
    else:  # the parent's callback, then its posts to its children in order, the child's callback
        hop[sk.child] = 2 * cpu.engine + cpu.o * sk.place + wire
    return hop


def _through(children: Children, root: int, hop: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Per rank, the longest root-to-leaf path through it (sum of hops); the longest path; the depth."""
    order, depth = breadth_first(children, root)
    pre = np.zeros(len(children))
    for r in order:
        for c in children[r]:
            pre[c] = pre[r] + hop[c]
    post = np.zeros(len(children))
    for r in reversed(order):
        for c in children[r]:
            post[r] = max(post[r], post[c] + hop[c])
    return pre + post, float(post[root]), depth


def _through_up(children: Children, root: int, hop: np.ndarray, stage: float) -> tuple[np.ndarray, float, int]:
    """`_through` for one segment going up: a parent takes its children's arrivals in the order they
    come, each costing it `stage` (callback and fold) after the arrival, so a fold of an early child
    overlaps the wait for a late one."""
    order, depth = breadth_first(children, root)
    ready = np.zeros(len(children))
    for r in reversed(order):
        t = 0.0
        for a in sorted(ready[c] + hop[c] for c in children[r]):
            t = max(t, a) + stage
        ready[r] = t
    post = np.zeros(len(children))
    for r in order:
        for c in children[r]:
            post[c] = post[r] + hop[c] + stage
    return ready + post, float(ready[root]), depth


def estimate(
    net: Network,
    trees: Sequence[tuple[float, Children]],
    root: int | Sequence[int],
    collective: str,
    size: int,
    segment: int,
    cpu: CpuCosts = DEFAULT_CPU,
    memo: dict[Any, Any] | None = None,
) -> Estimate:
    """The estimated time of weighted trees (weight, children) rooted at `root` (one, or one per tree:
    an allreduce over several roots' forests, segments dealt over all their trees) for `collective` of
    `size` bytes in segments of `segment` bytes (0: one segment) on `net` (see the module docstring).
    `memo`: a dict kept across calls for the same `net` and trees (other segment sizes) that holds what
    does not depend on the segment size."""
    segment = size if segment <= 0 or segment > size else segment
    nseg = max(1, math.ceil(size / segment))
    counts = segments_dealt([w for w, _ in trees], nseg)
    roots = _roots(root, len(trees))
    used = [(c, kids) for c, (_, kids) in zip(counts, trees) if c]
    used_roots = [r for c, r in zip(counts, roots) if c]
    memo = {} if memo is None else memo
    routes = memo.setdefault("routes", _Routes(net))

    def unit_load(kids: Children) -> np.ndarray:
        key = ("load", id(kids), collective)
        got = memo.get(key)
        if got is None:
            got = memo[key] = tree_load(routes.route, len(net.links), kids, collective)
        return got

    def hops(kids: Children, up: bool, share: float, round_cpu: np.ndarray | None = None) -> np.ndarray:
        key = ("skeleton", id(kids), up)
        sk = memo.get(key)
        if sk is None:
            sk = memo[key] = _skeleton(net, routes, kids, up)
        return _hops(sk, net.ranks, segment, up, cpu, share * round_busy, round_cpu)

    load = np.zeros(len(net.links))
    for c, kids in used:
        load += (c * segment) * unit_load(kids)
    load *= size / (nseg * segment)  # the last segment is short
    busy = load / net.capacity
    worst = int(np.argmax(busy)) if len(busy) else -1
    link_s = float(busy[worst]) if worst >= 0 else 0.0
    msgs, folds = rank_work(used, used_roots, collective, net.ranks)
    work = msgs * cpu.message + folds * (size / nseg) * cpu.fold
    rounds = max(counts) * len(set(used_roots))  # roots' forests are apart
    round_busy, round_cpu = busy / rounds, work / nseg  # a parent also folds other segments meanwhile
    shortest = np.full(net.ranks, np.inf)  # per rank, the shortest and the longest path through it, over the trees
    longest = np.zeros(net.ranks)
    fill, depth = 0.0, 0
    for (_, kids), root in zip(used, used_roots):
        if collective == "bcast":
            per, f, dep = _through(kids, root, hops(kids, False, ROUND_DOWN))
        else:
            stage = cpu.engine + segment * cpu.fold
            per, f, dep = _through_up(
                kids,
                root,
                hops(kids, True, ROUND_UP, ROUND_UP * round_cpu),
                stage,
            )
            if collective == "allreduce":  # reduced up, then broadcast down the same tree
                down, g, _ = _through(kids, root, hops(kids, False, ROUND_DOWN))
                per, f = np.maximum(per + g, down + f), f + g
        shortest, longest = np.minimum(shortest, per), np.maximum(longest, per)
        fill, depth = max(fill, f), max(depth, dep)
    # a rank's work is its segments' stages in a row, one of them on a path of one segment already;
    # which tree's path holds it is unknown: halfway between the shortest and the longest (fitted)
    ranked = work * (1.0 - 1.0 / nseg) + (shortest + longest) / 2
    busiest = int(np.argmax(ranked))
    link_name = f"{net.links[worst].src}->{net.links[worst].dst}" if worst >= 0 else "-"
    cpu_s = float(np.max(work))
    total = max(link_s + fill, float(ranked[busiest]))
    return Estimate(total, link_s, cpu_s, fill, segment, nseg, busiest, link_name, depth)
