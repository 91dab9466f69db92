"""Messages over routes of a described network, sharing its links max-min fairly (or by the bottleneck model).

`FairLinks` generalized from two links (the sender's out, the receiver's in) to a route of any length
with a bandwidth per link. A message arrives the sum of its links' latencies after its last byte has
left (cut-through: the bytes cross all links at once). Two ways to share the links (`Routes.sharing`):

- "maxmin" (default): max-min fair rates in bytes per second, by progressive filling (`maxmin.py`): a
  message held back by one link hands the share it leaves on its other links to the messages there (A
  alone with B on link 1, B also on link 2 with 3 others: B gets 1/4 of link 2, A the 3/4 left of link 1).
  When a message starts or finishes, every message on one of its links gets a new rate and finish time,
  and so does any message further off whose rate the change moved (the refilled set widens as far as
  the change reaches; everything else keeps its rate). Exact to 1e-9 relative.
- "bottleneck" (the earlier model): a message whose route crosses links l, each carrying n_l messages at
  c_l seconds per byte, moves at 1 / max_l(n_l c_l) bytes per second, its equal share of its most
  crowded link; a share left by a message held back elsewhere is not handed on (A above gets 1/2).

Cost per start or finish: max-min refills the messages on the changed links and those it widens to,
each over its route (its links' messages once each); the bottleneck model, the messages on the changed
links times their routes' length.
"""

from __future__ import annotations

from typing import Any, Optional

from .maxmin import refill
from .network import SharedLinks
from .routes import Routes
from .timelines import Timeline

__all__ = ["PathLinks"]

_SAME = 1e-12  # a message off the changed links whose rate moved less (relative) keeps its rate and key


class PathLinks(SharedLinks):
    """The links of a described network. As in `FairLinks`, rates are relative to a message's speed
    alone (`rem` in seconds at that speed), each sending rank has one heap entry (the least (finish,
    sequence) key of its messages), stale entries are swept in bulk and each message (re)scheduled
    counts as one event; so with bottleneck sharing a description of the default network gives
    FairLinks' results bit for bit, and with max-min sharing wherever FairLinks' shares are max-min."""

    def __init__(self, world: Any, routes: Routes, itemsize: int, gap: float, net: Optional[Timeline]) -> None:
        self._w = world
        self._rpn = 1  # each sending rank has its own heap entry and gap
        self._routes = routes
        self._route = routes.route
        self._on: list[dict[Any, None]] = [{} for _ in range(routes.links)]  # link -> messages on it, in order
        self._itemsize = itemsize
        self._g = gap
        self._net = net
        self._out: dict[int, list[Any]] = {}  # sending rank -> its messages on the network
        self._key: dict[int, int] = {}  # sending rank -> sequence number of its live heap entry
        self._last_start: dict[int, float] = {}
        self._stale = 0
        self._stamp = 0
        self.latest = 0.0  # the latest finish time ever scheduled (World.run ends at it)
        self._fin = self._finish
        self._begin_h = self._begin
        self._cost = routes.cost
        self._maxmin = routes.sharing == "maxmin"

    def _begin(self, msg: Any) -> None:
        now = self._w.now
        path, lat, weights, worst = self._route(msg.src, msg.dst)
        msg.path, msg.plat, msg.weights = path, lat, weights
        msg.snode = src = msg.src
        msg.start = msg.tupd = now
        msg.rem = msg.n * (worst * self._itemsize)
        msg.rate = 0.0
        msg.stamp = msg.mark = 0
        msg.worst = worst
        msg.bn = -1
        on = self._on
        for link in path:
            on[link][msg] = None
        out = self._out.get(src)
        if out is None:
            self._out[src] = [msg]
        else:
            out.append(msg)
        self._reshare(path, now, src)

    def _reshare(self, path: tuple[int, ...], now: float, src: int) -> None:
        """New rates after a change of load on the links of `path` (`src`'s message started or finished)."""
        if self._maxmin:
            self._refill(path, now, src)
        else:
            self._bottleneck(path, now, src)

    def _refill(self, path: tuple[int, ...], now: float, src: int) -> None:
        """Max-min fair rates (`maxmin.refill`): every message on the links of `path` gets a new rate and
        finish key, in order of those links and of arrival on them, and so does any other message whose
        rate moved (by more than `_SAME` relative)."""
        on = self._on
        self._stamp = stamp = self._stamp + 1
        core = []
        for link in path:
            for f in on[link]:
                if f.stamp != stamp:
                    f.stamp = stamp
                    core.append(f)
        filled = refill(core, on, self._cost, stamp)
        ncore = len(core)
        changes = []
        for i, f in enumerate(filled):
            rate = f.nrate
            f.bn = f.nbn
            if i >= ncore and abs(rate - f.rate) <= _SAME * f.rate:
                continue
            if rate <= 0.0:
                raise RuntimeError(f"max-min sharing left message {f.src} -> {f.dst} no rate")
            changes.append((f, rate))
        self._apply(changes, now, src)

    def _bottleneck(self, path: tuple[int, ...], now: float, src: int) -> None:
        """New rates for every message on the links of `path` (whose load just changed), in order of
        those links and of arrival on them: each its equal share of its most crowded link."""
        on = self._on
        self._stamp = stamp = self._stamp + 1
        changes = []
        for link in path:
            for f in on[link]:
                if f.stamp == stamp:
                    continue
                f.stamp = stamp
                m = 0.0
                for x, wt in zip(f.path, f.weights):
                    v = wt * len(on[x])
                    if v > m:
                        m = v
                changes.append((f, 1.0 / m))
        self._apply(changes, now, src)

    def _apply(self, changes: list[tuple[Any, float]], now: float, src: int) -> None:
        """Give each message its new rate and finish key (the bytes moved at the old rate since its last
        update taken off), then new heap entries where least keys moved (`src`'s too: its message just
        started or finished)."""
        seq = self._w._seq
        latest = self.latest
        dirty = {src: None}
        for f, rate in changes:
            f.rem -= f.rate * (now - f.tupd)
            f.tupd = now
            f.rate = rate
            rem = f.rem
            f.tfin = t = now + (rem if rem > 0.0 else 0.0) / rate
            if t > latest:
                latest = t
            f.sq = seq()
            dirty[f.snode] = None
        self._settle(latest, len(changes), dirty)

    def _settle(self, latest: float, moved: int, dirty: dict[int, None]) -> None:
        """After `moved` messages were rescheduled: the latest finish, the event count, and new heap entries
        for the senders in `dirty` (in order); sweep the stale entries if they are many."""
        w = self._w
        self.latest = latest
        w._dropped += moved  # each message rescheduled is one event (as one heap entry per message would be)
        outs = self._out
        for node in dirty:
            flows = outs.get(node)
            if flows:
                self._enter(node, flows)
        if self._stale > 1024 and self._stale > len(w._heap) >> 2:
            self._sweep()

    def _finish(self, arg: tuple[int, int]) -> None:
        src, sq = arg
        if self._key.get(src) != sq:  # replaced since
            self._stale -= 1
            return
        out = self._out[src]
        for msg in out:
            if msg.sq == sq:
                break
        w = self._w
        now = w.now
        out.remove(msg)
        del self._key[src]  # consumed (the reshare makes a new one if messages are left)
        if not out:
            del self._out[src]
        msg.end = now
        on = self._on
        path = msg.path
        for link in path:
            del on[link][msg]
        self._reshare(path, now, src)
        lat = msg.plat
        w._land(msg, now + lat, msg.start + lat)
