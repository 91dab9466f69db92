"""A description as a routed network: links indexed with capacities, rank-to-rank routes through
switches (cheapest by 1/bandwidth, ties split evenly as ECMP), and the link loads and rate of a forest.

A tree edge u->v between ranks is one unicast: it is carried by the cheapest paths from u to v whose
inner vertices are switches only (a rank does not forward for a tree it is not in). Equal-cost paths
share the edge's bytes evenly (per path). Loads are in bytes per message byte; a forest's rate is
1 / max over links of (load / bandwidth), in bytes/s. Uses networkx's Dijkstra; no MPI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import networkx as nx
import numpy as np

from .describe import Description, Vertex

__all__ = [
    "SynthesisError",
    "Network",
    "Route",
    "breadth_first",
    "edge_route",
    "tree_edges",
    "tree_depth",
    "tree_load",
]

Route = tuple[tuple[int, float], ...]
"""(link index, fraction of the edge's bytes) for every link a rank-to-rank edge uses."""


class SynthesisError(ValueError):
    """A topology the tools cannot make a schedule for (unreachable ranks, bad root, bad option)."""


def _weight(bandwidth: float) -> int:
    """Integer cost per byte (1e-15 s units) so that equal-cost paths tie exactly."""
    return max(1, round(1e15 / bandwidth))


class Network:
    """Links of a description with capacities and cached rank-to-rank routes."""

    def __init__(self, d: Description) -> None:
        self.description = d
        self.ranks = d.ranks
        self.links = d.links
        self.index = {(ln.src, ln.dst): i for i, ln in enumerate(d.links)}
        self.capacity = np.array([ln.bandwidth for ln in d.links], dtype=float)
        switches = set(d.switches)
        self._sw = nx.DiGraph()
        self._sw.add_nodes_from(d.switches)
        self._out_sw: dict[Vertex, list[tuple[str, int]]] = {v: [] for v in d.vertices()}
        self._in_sw: dict[Vertex, list[tuple[str, int]]] = {v: [] for v in d.vertices()}
        for i, ln in enumerate(d.links):
            if ln.src in switches and ln.dst in switches:
                self._sw.add_edge(ln.src, ln.dst, weight=_weight(ln.bandwidth), link=i)
            elif isinstance(ln.src, int) and ln.dst in switches:
                self._out_sw[ln.src].append((ln.dst, i))
            elif ln.src in switches and isinstance(ln.dst, int):
                self._in_sw[ln.dst].append((ln.src, i))
        self._sw_next: dict[str, list[tuple[str, int, int]]] = {s: [] for s in d.switches}
        self._sw_prev: dict[str, list[tuple[str, int, int]]] = {s: [] for s in d.switches}
        for a, b, data in self._sw.edges(data=True):
            self._sw_next[a].append((b, data["weight"], data["link"]))
            self._sw_prev[b].append((a, data["weight"], data["link"]))
        # transit switches: those with two or more switch neighbours (only they can be inside a path)
        self._transit = self._sw.subgraph(
            [s for s in d.switches if len({x for x, _, _ in self._sw_next[s] + self._sw_prev[s]}) >= 2]
        )
        self._dijkstra: dict[str, tuple[dict[str, list[str]], dict[str, int], dict[str, int]]] = {}
        self._between: dict[tuple[str, str], Route] = {}
        self._sw_routes: dict[tuple[str, str], tuple[int, int, Route] | None] = {}
        self._routes: dict[tuple[int, int], Route] = {}

    # -- routes

    def _from(self, s: str) -> tuple[dict[str, list[str]], dict[str, int], dict[str, int]]:
        """Shortest-path predecessors, distances and path counts from transit switch `s` (cached)."""
        got = self._dijkstra.get(s)
        if got is None:
            pred, dist = nx.dijkstra_predecessor_and_distance(self._transit, s, weight="weight")
            sigma = {s: 1}
            for v in sorted(dist, key=dist.__getitem__):
                if v != s:
                    sigma[v] = sum(sigma[p] for p in pred[v])
            got = self._dijkstra[s] = (pred, dist, sigma)
        return got

    def _between_transit(self, s: str, t: str) -> Route:
        """Links between transit switches s and t on their shortest paths, with the share of paths on each."""
        key = (s, t)
        got = self._between.get(key)
        if got is None:
            pred, dist, sigma = self._from(s)
            tau: dict[str, int] = {t: 1}
            share: dict[int, float] = {}
            for b in sorted((v for v in dist if v != s and dist[v] <= dist[t]), key=lambda v: -dist[v]):
                if b not in tau:
                    continue
                for a in pred[b]:
                    tau[a] = tau.get(a, 0) + tau[b]
                    link = self._sw.edges[a, b]["link"]
                    share[link] = share.get(link, 0.0) + sigma[a] * tau[b] / sigma[t]
            got = self._between[key] = tuple(share.items())
        return got

    def _ends(self, s: str, out: bool) -> list[tuple[str, int, tuple[int, ...]]]:
        """Where a path from (out) or to switch `s` enters / leaves the transit switches: (switch, cost, links)."""
        if s in self._transit:
            return [(s, 0, ())]
        if out:
            return [(b, w, (i,)) for b, w, i in self._sw_next[s] if b in self._transit]
        return [(a, w, (i,)) for a, w, i in self._sw_prev[s] if a in self._transit]

    def _switch_route(self, s: str, t: str) -> tuple[int, int, Route] | None:
        """(cost, number of shortest paths, links with shares) from switch s to switch t, None if unreachable."""
        key = (s, t)
        if key in self._sw_routes:
            return self._sw_routes[key]
        options: list[tuple[int, int, list[tuple[int, float]]]] = []
        if s == t:
            options.append((0, 1, []))
        for b, w, i in self._sw_next[s] if s not in self._transit and t not in self._transit else ():
            if b == t:  # a path through transit switches covers this edge otherwise
                options.append((w, 1, [(i, 1.0)]))
        for a, wa, first in self._ends(s, True):
            _, dist, sigma = self._from(a)
            for b, wb, last in self._ends(t, False):
                if b in dist:
                    inner = self._between_transit(a, b) if a != b else ()
                    links = [(x, 1.0) for x in first] + list(inner) + [(x, 1.0) for x in last]
                    options.append((wa + dist[b] + wb, sigma[b], links))
        got = _merge(options)
        self._sw_routes[key] = got
        return got

    def route(self, u: int, v: int) -> Route:
        """The links carrying a tree edge u->v and each link's share of its bytes (SynthesisError if none)."""
        key = (u, v)
        got = self._routes.get(key)
        if got is not None:
            return got
        options: list[tuple[int, int, list[tuple[int, float]]]] = []
        direct = self.index.get((u, v))
        if direct is not None:
            options.append((_weight(self.links[direct].bandwidth), 1, [(direct, 1.0)]))
        for s, first in self._out_sw[u]:
            for t, last in self._in_sw[v]:
                inner = self._switch_route(s, t)
                if inner is not None:
                    cost = _weight(self.links[first].bandwidth) + inner[0] + _weight(self.links[last].bandwidth)
                    options.append((cost, inner[1], [(first, 1.0), *inner[2], (last, 1.0)]))
        merged = _merge(options)
        if merged is None:
            raise SynthesisError(f"rank {u} cannot reach rank {v} (no direct link, no path through switches)")
        got = self._routes[key] = merged[2]
        return got

    def attachment(self, rank: int, out: bool) -> tuple[str, ...]:
        """The switches a rank sends to (`out`) or receives from: ranks alike here route alike beyond."""
        return tuple(sorted(s for s, _ in (self._out_sw if out else self._in_sw)[rank]))

    def reachable(self, u: int, v: int) -> bool:
        """Whether a tree edge u->v has a route."""
        try:
            self.route(u, v)
        except SynthesisError:
            return False
        return True

    # -- loads and rates

    def edge_route(self, parent: int, child: int, collective: str) -> Route:
        """Links a tree edge loads for `collective`: down (bcast), up (reduce) or both (allreduce)."""
        return edge_route(self.route, parent, child, collective)

    def add_edge_load(self, load: np.ndarray, parent: int, child: int, collective: str, share: float) -> None:
        """Add one tree edge carrying `share` of the message to `load` (bytes per message byte, per link)."""
        for link, frac in self.edge_route(parent, child, collective):
            load[link] += share * frac

    def tree_load(self, children: Sequence[Sequence[int]], collective: str) -> np.ndarray:
        """Per-link bytes per message byte of one tree carrying the whole message."""
        return tree_load(self.route, len(self.links), children, collective)

    def rate(self, load: np.ndarray) -> float:
        """Throughput in bytes/s of a schedule with these per-link loads: 1 / max(load / bandwidth)."""
        worst = float(np.max(load / self.capacity)) if len(load) else 0.0
        return float("inf") if worst <= 0 else 1.0 / worst

    def forest_rate(self, trees: Iterable[tuple[float, Sequence[Sequence[int]]]], collective: str) -> float:
        """Throughput of weighted trees (weights normalized to shares) for `collective`."""
        trees = list(trees)
        total = sum(w for w, _ in trees)
        load = np.zeros(len(self.links))
        for w, children in trees:
            load += (w / total) * self.tree_load(children, collective)
        return self.rate(load)


def _merge(options: list[tuple[int, int, list[tuple[int, float]]]]) -> tuple[int, int, Route] | None:
    """The cheapest options (cost, path count, links) merged: bytes split evenly over their paths."""
    if not options:
        return None
    best = min(o[0] for o in options)
    chosen = [o for o in options if o[0] == best]
    paths = sum(o[1] for o in chosen)
    share: dict[int, float] = {}
    for _, count, links in chosen:
        for link, frac in links:
            share[link] = share.get(link, 0.0) + frac * count / paths
    return best, paths, tuple(share.items())


def edge_route(route: Callable[[int, int], Route], parent: int, child: int, collective: str) -> Route:
    """The links a tree edge loads for `collective` under `route(u, v)`: down (bcast), up (reduce) or
    both (allreduce)."""
    if collective == "bcast":
        return route(parent, child)
    if collective == "reduce":
        return route(child, parent)
    return route(parent, child) + route(child, parent)


def tree_load(
    route: Callable[[int, int], Route], links: int, children: Sequence[Sequence[int]], collective: str
) -> np.ndarray:
    """Per-link bytes per message byte of one tree carrying the whole message, its edges loading the
    links `edge_route` gives under `route(u, v)` (`links`: how many links there are)."""
    load = np.zeros(links)
    for parent, kids in enumerate(children):
        for child in kids:
            for link, frac in edge_route(route, parent, child, collective):
                load[link] += frac
    return load


def tree_edges(children: Sequence[Sequence[int]]) -> Iterable[tuple[int, int]]:
    """(parent, child) for every edge of a tree given as children lists."""
    for parent, kids in enumerate(children):
        for child in kids:
            yield parent, child


def breadth_first(children: Sequence[Sequence[int]], root: int) -> tuple[list[int], int]:
    """The tree's ranks in breadth-first order from `root` (children in their order), and its depth (edges
    on the longest root-to-leaf path)."""
    order, depth_of = [root], {root: 0}
    for r in order:
        for c in children[r]:
            depth_of[c] = depth_of[r] + 1
            order.append(c)
    return order, max(depth_of.values())


def tree_depth(children: Sequence[Sequence[int]], root: int) -> int:
    """Edges on the longest root-to-leaf path."""
    return breadth_first(children, root)[1]
