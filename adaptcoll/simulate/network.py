"""The links of the simulated network: how messages that left at the same time share a node's link.

Each node has an outgoing and an incoming link of `G` seconds per byte (full duplex); a message
occupies its sender's outgoing and its receiver's incoming link and arrives `L` after its last byte
has left. Two policies:

- `FairLinks` (default): a link is shared equally by the messages on it (processor sharing, as an RDMA
  NIC interleaves the transfers of several queue pairs); a message moves at the rate of the more
  crowded of its two links. A small delay then shifts a transfer a little, never by a whole message.
- `FifoLinks`: a link carries one message at a time, in order of readiness (the sender's link) and of
  first-byte arrival (the receiver's); messages reserve each link for n G.
- 'pair' (`FairLinks` plus an order the world keeps): shared fairly between sender-receiver pairs, but
  one pair's messages one after another, as one RDMA queue pair carries them; without it two segments
  a rank sends one child at once (a send window of 2) both arrive at twice the time, and a pipeline
  fills at half speed.

With one message on a link at a time both are the same. Links call `world._land(msg, arrival, rx)`
when the data is in; `msg.start`/`msg.end` are the message's first and last byte on the sender's link.
"""

from __future__ import annotations

import heapq
from typing import Any, Optional

from .timelines import Timeline

__all__ = ["LINK_POLICIES", "SharedLinks", "FairLinks", "FifoLinks"]

LINK_POLICIES = ("fair", "fifo", "pair")


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
        self.latest = 0.0  # (FairLinks') no event of its own is left out of the heap here
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


class SharedLinks:
    """What the links that share bandwidth have in common (`FairLinks`, and `PathLinks` over a described
    network): departures after the sender's gap and detours, one heap entry per sender (the least
    (finish, sequence) key of its messages) and the bulk sweep of stale entries. A subclass sets `_w`,
    `_rpn` (ranks per sender key), `_g`, `_net`, `_key`, `_last_start`, `_stale`, `_fin` (its bound
    `_finish`), `_begin_h` (its bound `_begin`) and defines `_begin` and `_finish`."""

    _w: Any
    _rpn: int
    _g: float
    _net: Optional[Timeline]
    _key: dict[int, int]
    _last_start: dict[int, float]
    _stale: int
    _fin: Any
    _begin_h: Any

    def _begin(self, msg: Any) -> None:
        raise NotImplementedError

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
            heapq.heappush(w._heap, (start, w._seq(), self._begin_h, msg))
        else:
            self._begin(msg)

    def _enter(self, node: int, flows: list[Any]) -> None:
        """Make the heap entry of `node`'s outgoing link the least (finish, sequence) key of `flows`."""
        it = iter(flows)
        best = next(it)
        bt, bs = best.tfin, best.sq
        for f in it:
            t = f.tfin
            if t < bt or (t == bt and f.sq < bs):
                bt, bs = t, f.sq
        key = self._key
        old = key.get(node)
        if old == bs:
            return
        if old is not None:
            self._stale += 1
        key[node] = bs
        w = self._w
        w._dropped -= 1  # this entry will count itself when popped or swept
        heapq.heappush(w._heap, (bt, bs, self._fin, (node, bs)))

    def _sweep(self) -> None:
        """Drop the stale entries from the heap (in place), counting them as processed events."""
        w = self._w
        heap, finish, key = w._heap, self._fin, self._key
        keep = [e for e in heap if e[2] is not finish or key.get(e[3][0]) == e[3][1]]
        w._dropped += len(heap) - len(keep)
        heap[:] = keep
        heapq.heapify(heap)  # (time, sequence) keys are unique: the pop order is the same
        self._stale = 0


class FairLinks(SharedLinks):
    """Each link shared equally by the messages on it; a message moves at the slower of its two shares.

    A change of load on two links gives every message on them a new share and a new finish time,
    keyed (time, sequence number) as if each were scheduled as an event of its own. The heap holds
    one entry per busy outgoing link instead: the least key of its messages (so the order of events
    is exactly that of one entry per message, and each message's rescheduling still counts as one
    event). An entry replaced by a newer one for its link stays in the heap, stale, and does nothing
    when popped; once stale entries are a quarter of the heap they are swept out at once (`_sweep`,
    counted as processed events), so the heap stays small.
    """

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
        self._key: dict[int, int] = {}  # node -> sequence number of its outgoing link's live heap entry
        self._last_start: dict[int, float] = {}
        self._stale = 0  # stale entries in the heap
        self.latest = 0.0  # the latest finish time ever scheduled (the time of the last event a heap of
        # one entry per message would pop, stale or not: World.run ends at it)
        self._fin = self._finish  # one bound method: heap entries are recognised by identity
        self._begin_h = self._begin

    def _begin(self, msg: Any) -> None:
        w = self._w
        now = w.now
        rpn = self._rpn
        if rpn == 1:
            src, dst = msg.src, msg.dst
        else:
            src, dst = msg.src // rpn, msg.dst // rpn
        msg.snode, msg.dnode = src, dst
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
            msg.tfin = t = now + msg.rem
            if t > self.latest:
                self.latest = t
            msg.sq = sq = w._seq()
            self._key[src] = sq  # the link had no entry: it had no message
            heapq.heappush(w._heap, (t, sq, self._fin, (src, sq)))
            return
        self._reshare(out, inn, src, now)

    def _reshare(self, out: list[Any], inn: list[Any], src: int, now: float) -> None:
        """New shares and finish keys for the messages on two links whose load just changed (`out`:
        node `src`'s outgoing link), then new heap entries for the outgoing links whose least key moved."""
        w = self._w
        seq, ins, outs = w._seq, self._in, self._out
        n_out = len(out)
        latest = self.latest
        for f in out:  # n_out: len(out); n_in: its receiver's link
            f.rem -= f.rate * (now - f.tupd)
            f.tupd = now
            n_in = len(ins[f.dnode])
            f.rate = rate = 1.0 / (n_out if n_out > n_in else n_in)
            rem = f.rem
            f.tfin = t = now + (rem if rem > 0.0 else 0.0) / rate
            if t > latest:
                latest = t
            f.sq = seq()
        n_in = len(inn)
        k = n_out
        others: Optional[list[int]] = None  # other outgoing links with messages on `inn`
        for f in inn:
            snode = f.snode
            if snode == src:  # on `out` as well: done above
                continue
            k += 1
            f.rem -= f.rate * (now - f.tupd)
            f.tupd = now
            n_out = len(outs[snode])
            f.rate = rate = 1.0 / (n_out if n_out > n_in else n_in)
            rem = f.rem
            f.tfin = t = now + (rem if rem > 0.0 else 0.0) / rate
            if t > latest:
                latest = t
            f.sq = seq()
            if others is None:
                others = [snode]
            elif snode not in others:
                others.append(snode)
        self.latest = latest
        w._dropped += k  # each message rescheduled is one event (as one heap entry per message would be)
        if out:
            self._enter(src, out)
        if others is not None:
            for node in others:
                self._enter(node, outs[node])
        if self._stale > 1024 and self._stale > len(w._heap) >> 2:
            self._sweep()

    def _finish(self, arg: tuple[int, int]) -> None:
        src, sq = arg
        if self._key.get(src) != sq:  # the link's entry was replaced since
            self._stale -= 1
            return
        out = self._out[src]
        for msg in out:
            if msg.sq == sq:
                break
        w = self._w
        now = w.now
        dst = msg.dnode
        inn = self._in[dst]
        out.remove(msg)
        inn.remove(msg)
        msg.end = now
        del self._key[src]  # its entry is consumed (the reshare makes a new one if messages are left)
        if out or inn:
            self._reshare(out, inn, src, now)
        if not out:
            del self._out[src]
        if not inn:
            del self._in[dst]
        w._land(msg, now + self._L, msg.start + self._L)
