"""The links of the simulated network: how messages that left at the same time share a node's link.

Each node has an outgoing and an incoming link of `G` seconds per byte (full duplex); a message
occupies its sender's outgoing and its receiver's incoming link and arrives `L` after its last byte
has left. Two policies:

- `FairLinks` (default): a link is shared equally by the messages on it (processor sharing, as an RDMA
  NIC interleaves the transfers of several queue pairs); a message moves at the rate of the more
  crowded of its two links. A small delay then shifts a transfer a little, never by a whole message.
- `FifoLinks`: a link carries one message at a time, in order of readiness (the sender's link) and of
  first-byte arrival (the receiver's); messages reserve each link for n G.

With one message on a link at a time both are the same. Links call `world._land(msg, arrival, rx)`
when the data is in; `msg.start`/`msg.end` are the message's first and last byte on the sender's link.
"""

from __future__ import annotations

import heapq
from typing import Any, Optional

from .timelines import Timeline

__all__ = ["LINK_POLICIES", "FairLinks", "FifoLinks"]

LINK_POLICIES = ("fair", "fifo")


class FifoLinks:
    """One message at a time per link, first ready first served."""

    def __init__(self, world: Any, nodes: int, rpn: int, bytecost: float, latency: float, gap: float,
                 net: Optional[Timeline]) -> None:  # fmt: skip
        self._w = world
        self._rpn = rpn
        self._bytecost = bytecost
        self._L = latency
        self._g = gap
        self._net = net
        self._out_free = [0.0] * nodes
        self._in_free = [0.0] * nodes

    def depart(self, msg: Any) -> None:
        """The message may leave now: it queues for its sender's link."""
        w = self._w
        node = msg.src // self._rpn
        now = w.now
        free = self._out_free[node]
        start = now if free <= now else free
        dur = msg.n * self._bytecost
        end = start + dur if self._net is None else self._net.advance(node, start, dur)
        gap_end = start + self._g
        self._out_free[node] = end if end > gap_end else gap_end
        msg.start, msg.end = start, end
        if start == now:
            self._leave(msg)
        else:  # the receiver's link is taken in order of first-byte arrival, i.e. of leaving time
            heapq.heappush(w._heap, (start, w._seq(), self._leave, msg))

    def _leave(self, msg: Any) -> None:
        node = msg.dst // self._rpn
        dur = msg.n * self._bytecost
        rx = msg.start + self._L
        free = self._in_free[node]
        if free > rx:
            rx = free
        self._in_free[node] = rx + dur
        arrival = rx + dur
        tail = msg.end + self._L
        self._w._land(msg, tail if tail > arrival else arrival, rx)


class FairLinks:
    """Each link shared equally by the messages on it; a message moves at the slower of its two shares."""

    def __init__(self, world: Any, nodes: int, rpn: int, bytecost: float, latency: float, gap: float,
                 net: Optional[Timeline]) -> None:  # fmt: skip
        self._w = world
        self._rpn = rpn
        self._bytecost = bytecost
        self._L = latency
        self._g = gap
        self._net = net
        self._out: dict[int, list[Any]] = {}  # node -> messages on its outgoing link
        self._in: dict[int, list[Any]] = {}
        self._last_start: dict[int, float] = {}

    def depart(self, msg: Any) -> None:
        """The message may leave now (after the sender's minimum gap and any link detour)."""
        w = self._w
        node = msg.src // self._rpn
        now = start = w.now
        if self._g > 0:
            last = self._last_start.get(node)
            if last is not None and last + self._g > start:
                start = last + self._g
            self._last_start[node] = start
        if self._net is not None:
            start = self._net.advance(node, start, 0.0)
        if start > now:
            heapq.heappush(w._heap, (start, w._seq(), self._begin, msg))
        else:
            self._begin(msg)

    def _begin(self, msg: Any) -> None:
        now = self._w.now
        src, dst = msg.src // self._rpn, msg.dst // self._rpn
        msg.start = msg.tupd = now
        msg.rem = msg.n * self._bytecost
        msg.rate = 0.0
        out = self._out.get(src)
        if out is None:
            out = self._out[src] = []
        inn = self._in.get(dst)
        if inn is None:
            inn = self._in[dst] = []
        out.append(msg)
        inn.append(msg)
        if len(out) == 1 and len(inn) == 1:  # alone on both links: full speed
            msg.rate = 1.0
            msg.ver += 1
            heapq.heappush(self._w._heap, (now + msg.rem, self._w._seq(), self._finish, (msg, msg.ver)))
            return
        self._reshare(out, inn, now)

    def _reshare(self, out: list[Any], inn: list[Any], now: float) -> None:
        """New shares for the messages on two links whose load just changed; reschedule their ends."""
        heap, seq, finish = self._w._heap, self._w._seq, self._finish
        outs, ins, rpn = self._out, self._in, self._rpn
        seen = set()
        for flows in (out, inn):
            for f in flows:
                if id(f) in seen:
                    continue
                seen.add(id(f))
                f.rem -= f.rate * (now - f.tupd)
                f.tupd = now
                n_out = len(outs[f.src // rpn])
                n_in = len(ins[f.dst // rpn])
                f.rate = 1.0 / (n_out if n_out > n_in else n_in)
                f.ver += 1
                rem = f.rem if f.rem > 0.0 else 0.0
                heapq.heappush(heap, (now + rem / f.rate, seq(), finish, (f, f.ver)))

    def _finish(self, arg: tuple[Any, int]) -> None:
        msg, ver = arg
        if ver != msg.ver:  # rescheduled since
            return
        now = self._w.now
        src, dst = msg.src // self._rpn, msg.dst // self._rpn
        out, inn = self._out[src], self._in[dst]
        out.remove(msg)
        inn.remove(msg)
        msg.end = now
        msg.ver += 1
        if out or inn:
            self._reshare(out, inn, now)
        if not out:
            del self._out[src]
        if not inn:
            del self._in[dst]
        self._w._land(msg, now + self._L, msg.start + self._L)
