"""Routes between the ranks of a described network (adaptcoll.topology/1), for the simulator's `PathLinks`.

A route is a shortest path by (relays, latency, hops): switches forward; a rank forwards (a relay) only
where no path through switches alone exists. Among equal routes one is picked by a hash of (source,
destination) at each choice, as ECMP spreads flows, so routes are deterministic. Routes are made lazily
per communicating (source, destination) pair and cached; the part between switches comes from one
Dijkstra per switch over the switch-to-switch links, shared by every rank behind that switch, and a
switch with a single exit toward other switches (a NIC) reuses its exit's Dijkstra.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Optional

from ..schedule.describe import Description

__all__ = ["Route", "Routes", "NoRoute", "route_mix", "SHARING"]

SHARING = ("maxmin", "bottleneck")
"""How messages share a described network's links (`PathLinks`): max-min fair rates (progressive
filling), or each message at its equal share of its most crowded link (the earlier model; on a
description of the default network it is `FairLinks` bit for bit)."""

_MASK = (1 << 64) - 1
_PS = 1e12  # routing compares latencies in whole picoseconds: sums then do not depend on their order

_Cost = tuple[int, int]  # (latency in ps, hops)

Route = tuple[tuple[int, ...], float, tuple[float, ...], float]
"""(link ids in order, latency: the sum of theirs (s), weight per link: its cost / the slowest link's cost,
the slowest link's cost (s per byte))."""


class NoRoute(ValueError):
    """Two ranks of a description that no chain of links connects."""


def route_mix(src: int, dst: int, k: int) -> int:
    """A 64-bit hash of (src, dst, k) (splitmix64's finalizer): which of k-th equal choices a flow takes."""
    x = (src * 0x9E3779B97F4A7C15 + dst * 0xD1B54A32D192ED03 + k * 0x8CB92BA72F3D8DD7 + 1) & _MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class _Tree:
    """Shortest paths from one switch over switch-to-switch links: cost and equal-cost incoming links."""

    __slots__ = ("dist", "preds")

    def __init__(self, dist: dict[int, _Cost], preds: dict[int, list[int]]) -> None:
        self.dist = dist
        self.preds = preds


class Routes:
    """A description's links as arrays (`cost` s/B, `latency` s per link id), its cached routes, and how
    messages share its links (`sharing`, one of `SHARING`)."""

    def __init__(self, description: Description, sharing: str = "maxmin") -> None:
        if sharing not in SHARING:
            raise ValueError(f"sharing must be one of {', '.join(SHARING)}, got {sharing!r}")
        d = description
        self.sharing = sharing
        self.description = d
        self.ranks = d.ranks
        self.name = d.name
        index = {s: d.ranks + i for i, s in enumerate(d.switches)}
        nv = d.ranks + len(d.switches)
        self.src: list[int] = []
        self.dst: list[int] = []
        self.cost: list[float] = []  # seconds per byte (1 / bandwidth)
        self.latency: list[float] = []
        self._lat_ps: list[int] = []
        self._out: list[list[int]] = [[] for _ in range(nv)]  # vertex -> link ids leaving it, file order
        self._into: list[list[int]] = [[] for _ in range(nv)]
        for i, link in enumerate(d.links):
            a = link.src if isinstance(link.src, int) else index[link.src]
            b = link.dst if isinstance(link.dst, int) else index[link.dst]
            self.src.append(a)
            self.dst.append(b)
            self.cost.append(1.0 / link.bandwidth)
            self.latency.append(float(link.latency))
            self._lat_ps.append(round(link.latency * _PS))
            self._out[a].append(i)
            self._into[b].append(i)
        self._names = [*(str(r) for r in range(d.ranks)), *(repr(s) for s in d.switches)]
        r = d.ranks
        self._sw_out = [[i for i in self._out[v] if self.dst[i] >= r] if v >= r else [] for v in range(nv)]
        self._trees: dict[int, _Tree] = {}
        self._chains: dict[int, tuple[list[int], list[int], list[_Cost], int]] = {}
        self._cache: dict[int, Route] = {}
        self.dijkstras = 0  # how many switch Dijkstras the routes so far needed

    @property
    def cached(self) -> int:
        """How many (source, destination) routes have been made so far."""
        return len(self._cache)

    @property
    def links(self) -> int:
        """How many directed links the description has."""
        return len(self.cost)

    def summary(self) -> dict[str, object]:
        """What a report says about the network: its name and size."""
        d = self.description
        return {
            "name": d.name,
            "ranks": d.ranks,
            "switches": len(d.switches),
            "links": len(d.links),
            "sharing": self.sharing,
        }

    def check_size(self, size: int) -> None:
        """ValueError unless a job of `size` ranks fits the description (one rank per described rank)."""
        if size != self.ranks:
            label = f" {self.name!r}" if self.name else ""
            raise ValueError(
                f"the topology description{label} has {self.ranks} ranks but the job has {size}: "
                "the job's size must equal the description's ranks"
            )

    # -- routes ------------------------------------------------------------------------------------
    def route(self, src: int, dst: int) -> Route:
        """The route from rank `src` to rank `dst` (see `Route`; cached)."""
        key = src * self.ranks + dst
        found = self._cache.get(key)
        if found is None:
            links = self._switched(src, dst)
            if links is None:
                links = self._relayed(src, dst)
            lat = 0.0
            for i in links:
                lat += self.latency[i]
            worst = max(self.cost[i] for i in links)
            weights = tuple(self.cost[i] / worst for i in links)
            found = self._cache[key] = (links, lat, weights, worst)
        return found

    def _switched(self, src: int, dst: int) -> Optional[tuple[int, ...]]:
        """The best route whose inner vertices are switches only (None if there is none)."""
        r = self.ranks
        best: Optional[tuple[int, int]] = None
        cands: list[tuple[int, int, int]] = []  # (first link, last link or -1 for a direct link, -)
        lat_ps, dst_of, src_of = self._lat_ps, self.dst, self.src
        for first in self._out[src]:
            a = dst_of[first]
            if a == dst:
                cost = (lat_ps[first], 1)
                cand = (first, -1, 0)
            elif a >= r:
                for last in self._into[dst]:
                    b = src_of[last]
                    if b < r:
                        continue
                    mid = self._sw_dist(a, b)
                    if mid is None:
                        continue
                    cost = (lat_ps[first] + mid[0] + lat_ps[last], mid[1] + 2)
                    if best is None or cost <= best:
                        if cost != best:
                            best, cands = cost, []
                        cands.append((first, last, 0))
                continue
            else:
                continue
            if best is None or cost <= best:
                if cost != best:
                    best, cands = cost, []
                cands.append(cand)
        if not cands:
            return None
        first, last, _ = cands[route_mix(src, dst, 0) % len(cands)] if len(cands) > 1 else cands[0]
        if last < 0:
            return (first,)
        return (first, *self._sw_path(dst_of[first], src_of[last], src, dst), last)

    def _chain(self, s: int) -> tuple[list[int], list[int], list[_Cost], int]:
        """From switch `s`, the run of single exits: (vertices, links, cumulative costs, root) where `root`
        is the first switch with other than one exit toward switches (its Dijkstra serves the chain)."""
        found = self._chains.get(s)
        if found is not None:
            return found
        verts, links, cum = [s], [], [(0, 0)]
        v = s
        while len(self._sw_out[v]) == 1:
            link = self._sw_out[v][0]
            nxt = self.dst[link]
            if nxt in verts:  # a loop of single exits: solve at its start
                break
            lat, hops = cum[-1]
            cum.append((lat + self._lat_ps[link], hops + 1))
            links.append(link)
            verts.append(nxt)
            v = nxt
        found = self._chains[s] = (verts, links, cum, v)
        return found

    def _sw_dist(self, a: int, b: int) -> Optional[_Cost]:
        """Least (latency ps, hops) from switch `a` to switch `b` over switches (None: unreachable)."""
        verts, _, cum, root = self._chain(a)
        for v, c in zip(verts, cum):
            if v == b:
                return c
        d = self._tree(root).dist.get(b)
        if d is None:
            return None
        lat, hops = cum[-1]
        return (lat + d[0], hops + d[1])

    def _sw_path(self, a: int, b: int, src: int, dst: int) -> tuple[int, ...]:
        """Links of a least-cost path from switch `a` to switch `b`; equal ones picked by (src, dst)."""
        verts, links, _, root = self._chain(a)
        for k, v in enumerate(verts):
            if v == b:
                return tuple(links[:k])
        return (*links, *self._walk_back(self._tree(root).preds, root, b, src, dst))

    def _walk_back(
        self, preds: Mapping[int, Sequence[int]], start: int, end: int, src: int, dst: int
    ) -> tuple[int, ...]:
        """The links from `start` to `end` along least-cost predecessors, equal ones picked by the hash of
        the communicating pair (`src`, `dst`) and the hop: ECMP, the same in any order routes are asked."""
        back: list[int] = []
        v, k = end, 1
        while v != start:
            options = preds[v]
            link = options[route_mix(src, dst, k) % len(options)] if len(options) > 1 else options[0]
            back.append(link)
            v = self.src[link]
            k += 1
        back.reverse()
        return tuple(back)

    def _tree(self, s: int) -> _Tree:
        """Dijkstra from switch `s` over switch-to-switch links, keeping every equal-cost incoming link."""
        tree = self._trees.get(s)
        if tree is not None:
            return tree
        self.dijkstras += 1
        dist: dict[int, _Cost] = {s: (0, 0)}
        preds: dict[int, list[int]] = {s: []}
        done: set[int] = set()
        heap: list[tuple[int, int, int]] = [(0, 0, s)]
        sw_out, dst_of, lat_ps = self._sw_out, self.dst, self._lat_ps
        while heap:
            lat, hops, v = heapq.heappop(heap)
            if v in done:
                continue
            done.add(v)
            for link in sw_out[v]:
                u = dst_of[link]
                cost = (lat + lat_ps[link], hops + 1)
                old = dist.get(u)
                if old is None or cost < old:
                    dist[u] = cost
                    preds[u] = [link]
                    heapq.heappush(heap, (cost[0], cost[1], u))
                elif cost == old and u not in done:
                    preds[u].append(link)
        tree = self._trees[s] = _Tree(dist, preds)
        return tree

    def _relayed(self, src: int, dst: int) -> tuple[int, ...]:
        """The best route when ranks must relay: Dijkstra from `src` by (relays, latency, hops)."""
        r = self.ranks
        dist: dict[int, tuple[int, int, int]] = {src: (0, 0, 0)}
        preds: dict[int, list[int]] = {src: []}
        done: set[int] = set()
        heap: list[tuple[int, int, int, int]] = [(0, 0, 0, src)]
        while heap:
            relays, lat, hops, v = heapq.heappop(heap)
            if v in done:
                continue
            done.add(v)
            if v == dst:
                break
            extra = 1 if (v < r and v != src) else 0
            for link in self._out[v]:
                u = self.dst[link]
                cost = (relays + extra, lat + self._lat_ps[link], hops + 1)
                old = dist.get(u)
                if old is None or cost < old:
                    dist[u] = cost
                    preds[u] = [link]
                    heapq.heappush(heap, (*cost, u))
                elif cost == old and u not in done:
                    preds[u].append(link)
        if dst not in done:
            label = f" {self.name!r}" if self.name else ""
            raise NoRoute(f"topology description{label}: no route from rank {src} to rank {dst} (no chain of links)")
        return self._walk_back(preds, src, dst, src, dst)

    def describe_route(self, src: int, dst: int) -> list[str]:
        """The vertices of the route from `src` to `dst` by name (ranks as numbers, switches quoted)."""
        links = self.route(src, dst)[0]
        names = self._names
        return [names[src], *(names[self.dst[i]] for i in links)]
