"""Building blocks shared by the protocols: per-child send queues, a windowed receive stream, a join.

All of them react to completion callbacks from a Transport; none of them knows MPI. A transport never
calls back from inside isend/irecv/watch (only from its progress loop), so these pieces may post new
operations from inside a callback without re-entering themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Optional

from ..plans.segments import SegmentPlan
from ..runtime.transport import Callback
from .context import OpContext

__all__ = ["Join", "ChildSendQueues", "WindowedReceiver", "sync_flag", "sync_below", "segment_views", "Views"]


def sync_flag(mode: str, k: int, window: int) -> bool:
    """Whether the k-th send to one peer is synchronous under sync mode 'first', 'all' or 'none'."""
    return mode == "all" or (mode == "first" and k < window)


def sync_below(mode: str, window: int, n: int) -> int:
    """The k-th of `n` sends to one peer is synchronous iff k < this (`sync_flag` as one comparison)."""
    return n if mode == "all" else window if mode == "first" else 0


EAGER_VIEWS = 1 << 16
"""Up to this many segments, an operation's views are made up front; beyond it, on use."""

Views = Sequence[tuple[Any, int]]


def segment_views(buf: Any, plan: SegmentPlan, segs: Sequence[int]) -> Views:
    """(view of `buf`, tag) for each segment of `segs`, computed once per operation so that the
    per-event work is a list lookup (a slice, a bounds and a tag computation fewer per send). A huge
    number of tiny segments gets a sequence that makes each on use instead (bounded memory)."""
    if len(segs) > EAGER_VIEWS:
        return _LazyViews(buf, plan, segs)
    seg, count, base, space = plan.seg_count, plan.count, plan.tag_base, plan.tag_space
    out = []
    for s in segs:
        lo = s * seg
        hi = lo + seg
        out.append((buf[lo : hi if hi < count else count], (base + s) % space))
    return out


class _LazyViews(Sequence[tuple[Any, int]]):
    """segment_views' result, made per access."""

    def __init__(self, buf: Any, plan: SegmentPlan, segs: Sequence[int]) -> None:
        self._buf, self._plan, self._segs = buf, plan, segs

    def __len__(self) -> int:
        return len(self._segs)

    def __getitem__(self, pos: Any) -> Any:
        s = self._segs[pos]
        lo, hi = self._plan.bounds(s)
        return self._buf[lo:hi], self._plan.tag(s)


class Join:
    """Calls `on_complete()` once `parts` calls to `part_done()` have been made (immediately if parts == 0)."""

    __slots__ = ("_left", "_on_complete")

    def __init__(self, parts: int, on_complete: Callback) -> None:
        self._left = parts
        self._on_complete = on_complete

    def start(self) -> None:
        """Fire now if nothing was to be waited for."""
        if self._left == 0:
            self._left = -1
            self._on_complete()

    def part_done(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._left = -1
            self._on_complete()


class ChildSendQueues:
    """Per-child send queues: each child is sent the segment positions in order, as they become ready.

    Each child has its own queue position and at most `ctx.send_window` sends in flight, so a slow child
    delays only its own subtree. Sending in position order (not ADAPT's arrival order) matches the
    receivers' in-order windows whatever order completions are reported in, so no reordering of
    completion callbacks can deadlock the tree. `on_done()` fires once every child has every segment.
    `views`: `segment_views(buf, ctx.plan, segs)` if the caller already has them.
    """

    __slots__ = (
        "_t",
        "_children",
        "_segments",
        "_n",
        "_window",
        "_sync_below",
        "_ready",
        "_next",
        "_inflight",
        "_left",
        "_on_done",
        "_send_cbs",
    )

    def __init__(
        self,
        ctx: OpContext,
        children: Sequence[int],
        buf: Any,
        segs: Sequence[int],
        on_done: Callback,
        views: Optional[Views] = None,
    ) -> None:
        self._t = ctx.transport
        self._children = tuple(children)
        n = len(segs)
        self._segments = (views if views is not None else segment_views(buf, ctx.plan, segs)) if children else []
        self._n = n
        self._window = ctx.send_window
        self._sync_below = sync_below(ctx.sync_mode, ctx.send_window, n)
        self._ready = bytearray(n)
        self._next = [0] * len(self._children)
        self._inflight = [0] * len(self._children)
        self._left = n * len(self._children)
        self._on_done = on_done
        self._send_cbs = [self._make_sent(i) for i in range(len(self._children))]

    def _make_sent(self, i: int) -> Callback:
        def sent() -> None:
            self._inflight[i] -= 1
            self._left -= 1
            if self._left == 0:
                self._on_done()
            else:
                self._pump(i)

        return sent

    def segment_ready(self, pos: int) -> None:
        """Segment position `pos` is complete in the buffer: send it to each child whose turn it is."""
        self._ready[pos] = 1
        nxt = self._next
        for i in range(len(self._children)):
            if nxt[i] == pos:
                self._pump(i)

    def all_ready(self) -> None:
        """Every segment is complete (the root of a broadcast)."""
        self._ready[:] = b"\x01" * len(self._ready)
        for i in range(len(self._children)):
            self._pump(i)

    def _pump(self, i: int) -> None:
        ready, n, window = self._ready, self._n, self._window
        k = self._next[i]
        inflight = self._inflight[i]
        if inflight >= window or k >= n or not ready[k]:
            return
        segments, child, sent = self._segments, self._children[i], self._send_cbs[i]
        isend, sync = self._t.isend, self._sync_below
        while inflight < window and k < n and ready[k]:
            view, tag = segments[k]
            inflight += 1
            isend(view, child, tag, sent, k < sync)
            k += 1
        self._inflight[i] = inflight
        self._next[i] = k


class WindowedReceiver:
    """Receives segments from one peer into `buf`, in segment order, with at most `ctx.recv_window` posted.

    A segment position may be held back until `allow(pos)` is called (Allreduce posts a result
    receive only once its own contribution to that segment has left). `on_segment(pos)` (if given)
    fires per arrival; `on_done()` after the last one. `views`: `segment_views(buf, ctx.plan, segs)` if the
    caller already has them.
    """

    __slots__ = (
        "_t",
        "_peer",
        "_segments",
        "_n",
        "_window",
        "_allowed",
        "_next",
        "_inflight",
        "_left",
        "_on_segment",
        "_on_done",
    )

    def __init__(
        self,
        ctx: OpContext,
        peer: int,
        buf: Any,
        segs: Sequence[int],
        on_segment: Optional[Callable[[int], None]],
        on_done: Callback,
        gated: bool = False,
        views: Optional[Views] = None,
    ) -> None:
        self._t = ctx.transport
        self._peer = peer
        self._segments = views if views is not None else segment_views(buf, ctx.plan, segs)
        self._n = len(segs)
        self._window = ctx.recv_window
        self._allowed: Optional[bytearray] = bytearray(len(segs)) if gated else None
        self._next = 0
        self._inflight = 0
        self._left = len(segs)
        self._on_segment = on_segment
        self._on_done = on_done

    def start(self) -> None:
        self._pump()

    def allow(self, pos: int) -> None:
        """Let the receive for segment position `pos` be posted (gated receivers only)."""
        assert self._allowed is not None
        self._allowed[pos] = 1
        if pos == self._next:
            self._pump()

    def _pump(self) -> None:
        n, window, allowed = self._n, self._window, self._allowed
        pos, inflight = self._next, self._inflight
        if inflight >= window or pos >= n:
            return
        segments, peer, irecv, arrived = self._segments, self._peer, self._t.irecv, self._arrived
        while inflight < window and pos < n:
            if allowed is not None and not allowed[pos]:
                break
            view, tag = segments[pos]
            inflight += 1
            irecv(view, peer, tag, partial(arrived, pos))
            pos += 1
        self._next = pos
        self._inflight = inflight

    def _arrived(self, pos: int) -> None:
        self._inflight -= 1
        self._left -= 1
        if self._on_segment is not None:
            self._on_segment(pos)
        if self._left == 0:
            self._on_done()
        else:
            self._pump()
