"""Max-min fair rates for the messages a change of load touches, by progressive filling (water-filling).

`PathLinks` calls `refill` when a message starts or finishes. The messages on that message's links
(the `core`) are filled afresh while every other message keeps its rate, its use of each link taken off
that link's capacity. The result is max-min fair for all messages once every message has a bottleneck
link: one that is full and on which no message moves faster, in bytes per second. A message of the
filled set has one by construction unless a held message on it moves faster; a held message keeps the
bottleneck it had unless its link was refilled. Where either fails, the held messages concerned join the
filled set and it is filled again from the start: exact (to `EPS`), and only as wide as the change
reaches, not the whole connected set of messages. A fill costs the members' routes plus the messages on
their links. A start or finish took on average 1.1 fills of 1.7 messages for two_tree on a 2048-rank fat
tree, 1.4-2 fills of 40-130 for the bmtree binomial at 256-512 ranks, where up to 40 messages cross one
NIC (docs/simulate.md, "Cost").

A message is an object with `path` (link ids), `weights` (each link's cost over its slowest link's),
`worst` (the slowest link's cost, s/B), `rate` (relative to its speed alone) and `bn` (its bottleneck
link, -1 if none yet); `refill` sets `nrate` and `nbn` on the messages it fills and uses `mark`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, Optional

__all__ = ["EPS", "refill"]

_SCAN = 24  # up to this many links the filling scans them for the next full one, beyond it keeps a heap

EPS = 1e-9
"""Tolerance of the bottleneck checks: a link is full when under EPS of its capacity is left, and a rate
is not faster than another unless by more than EPS relative."""


def refill(core: Sequence[Any], on: Sequence[dict[Any, None]], cost: Sequence[float], token: int) -> list[Any]:
    """Max-min fair rates (`nrate`, with bottleneck `nbn`) for `core` and whatever held messages must move
    with them; returns those messages, `core` first in its order. `on`: link -> messages on it; `cost`:
    link -> seconds per byte; `token`: a number no message's `mark` holds yet."""
    if len(core) < 2:
        if not core:
            return []
        f = core[0]
        if all(len(on[x]) == 1 for x in f.path):  # alone on its route: full speed, the costliest link first
            f.mark = token
            f.nrate = 1.0
            f.nbn = min(x for x in f.path if cost[x] == f.worst)
            return [f]
    members = list(core)
    for f in members:
        f.mark = token
    while True:
        more = _fill(members, on, cost, token)
        if not more:
            return members
        for g in more:
            if g.mark != token:
                g.mark = token
                members.append(g)


def _fill(members: list[Any], on: Sequence[dict[Any, None]], cost: Sequence[float], token: int) -> list[Any]:
    """Progressive filling of `members` (marked `token`) with the other messages held; then the held
    messages that must join (empty: the rates are max-min fair)."""
    room: dict[int, float] = {}  # link -> fraction of its capacity not yet given out
    count: dict[int, int] = {}  # link -> members on it not yet frozen
    mine: dict[int, list[Any]] = {}  # link -> members on it
    held_top: dict[int, float] = {}  # link -> the largest use of it by a held message
    watch: list[tuple[int, Any]] = []  # (link, held message whose bottleneck it is)
    for f in members:
        f.nrate = -1.0
        for x in f.path:
            if x in count:
                count[x] += 1
                mine[x].append(f)
                continue
            count[x] = 1
            mine[x] = [f]
            cx = cost[x]
            used = top = 0.0
            for g in on[x]:
                if g.mark != token:
                    u = g.rate * (cx / g.worst)  # bit for bit its weight on x times its rate
                    used += u
                    if u > top:
                        top = u
                    if g.bn == x:
                        watch.append((x, g))
            room[x] = 1.0 - used
            held_top[x] = top
    left = len(members)
    heap: Optional[list[tuple[float, int]]] = None
    if len(count) > _SCAN:  # many links: the next to fill up from a heap (stale entries skipped)
        heap = [(room[x] / (n * cost[x]), x) for x, n in count.items()]
        heapq.heapify(heap)
    while left:
        if heap is None:  # few links: scan them for the lowest level (bytes/s each)
            x = -1
            level = 0.0
            for y, n in count.items():
                if n:
                    v = room[y] / (n * cost[y])
                    if x < 0 or v < level or (v == level and y < x):
                        x, level = y, v
        else:
            level, x = heapq.heappop(heap)
            n = count[x]
            if n == 0 or room[x] / (n * cost[x]) != level:  # done, or changed since (a newer entry)
                continue
        n = count[x]
        r0 = room[x]
        cx = cost[x]
        touched = []
        for f in mine[x]:
            if f.nrate >= 0.0:
                continue
            rate = r0 / (n * (cx / f.worst)) if r0 > 0.0 else 0.0  # alone on x: 1 / (weight n)
            f.nrate = rate
            f.nbn = x
            left -= 1
            for y, wy in zip(f.path, f.weights):
                room[y] -= rate * wy
                count[y] -= 1
            if heap is not None:
                touched.extend(f.path)
        if heap is not None:
            for y in dict.fromkeys(touched):
                n = count[y]
                if n:
                    heapq.heappush(heap, (room[y] / (n * cost[y]), y))
    more: list[Any] = []
    top_in: dict[int, float] = {}  # link -> the largest use of it by a member
    for x, g in watch:  # a held message whose bottleneck was refilled: still full, none faster?
        cx = cost[x]
        most = top_in.get(x)
        if most is None:
            most = top_in[x] = max(f.nrate * (cx / f.worst) for f in mine[x])
        if room[x] > EPS or g.rate * (cx / g.worst) * (1.0 + EPS) < most:
            more.append(g)
    least: dict[int, float] = {}  # bottleneck link of members -> the least use of it by one of them
    for f in members:
        x = f.nbn
        if held_top[x]:
            u = f.nrate * (cost[x] / f.worst)
            if u < least.get(x, 2.0):
                least[x] = u
    for x, u in least.items():  # no held message faster than a member on that member's bottleneck
        bound = u * (1.0 + EPS)
        if held_top[x] > bound:
            cx = cost[x]
            more.extend(g for g in on[x] if g.mark != token and g.rate * (cx / g.worst) > bound)
    return more
