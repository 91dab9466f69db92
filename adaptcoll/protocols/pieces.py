"""Building blocks shared by the protocols: per-child send queues, a windowed receive stream, a join.

All of them react to completion callbacks from a Transport; none of them knows MPI. A transport never
calls back from inside isend/irecv/watch (only from its progress loop), so these pieces may post new
operations from inside a callback without re-entering themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..transport import Callback
from .context import OpContext

__all__ = ["Join", "ChildSendQueues", "WindowedReceiver", "sync_flag"]


def sync_flag(mode: str, k: int, window: int) -> bool:
    """Whether the k-th send to one peer is synchronous under sync mode 'first', 'all' or 'none'."""
    return mode == "all" or (mode == "first" and k < window)


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
    """

    __slots__ = (
        "_t",
        "_children",
        "_buf",
        "_plan",
        "_segs",
        "_window",
        "_sync",
        "_ready",
        "_next",
        "_inflight",
        "_left",
        "_on_done",
        "_send_cbs",
    )

    def __init__(
        self, ctx: OpContext, children: Sequence[int], buf: Any, segs: Sequence[int], on_done: Callback
    ) -> None:
        self._t = ctx.transport
        self._children = tuple(children)
        self._buf = buf
        self._plan = ctx.plan
        self._segs = segs
        self._window = ctx.send_window
        self._sync = ctx.sync_mode
        self._ready = bytearray(len(segs))
        self._next = [0] * len(self._children)
        self._inflight = [0] * len(self._children)
        self._left = len(segs) * len(self._children)
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
        for i in range(len(self._children)):
            self._pump(i)

    def all_ready(self) -> None:
        """Every segment is complete (the root of a broadcast)."""
        self._ready[:] = b"\x01" * len(self._ready)
        for i in range(len(self._children)):
            self._pump(i)

    def _pump(self, i: int) -> None:
        ready = self._ready
        n = len(ready)
        k = self._next[i]
        while self._inflight[i] < self._window and k < n and ready[k]:
            s = self._segs[k]
            lo, hi = self._plan.bounds(s)
            self._inflight[i] += 1
            self._t.isend(
                self._buf[lo:hi],
                self._children[i],
                self._plan.tag(s),
                self._send_cbs[i],
                sync_flag(self._sync, k, self._window),
            )
            k += 1
        self._next[i] = k


class WindowedReceiver:
    """Receives segments from one peer into `buf`, in segment order, with at most `ctx.recv_window` posted.

    A segment position may be held back until `allow(pos)` is called (Allreduce posts a result
    receive only once its own contribution to that segment has left). `on_segment(pos)` fires per
    arrival; `on_done()` after the last one.
    """

    __slots__ = (
        "_t",
        "_peer",
        "_buf",
        "_plan",
        "_segs",
        "_window",
        "_allowed",
        "_next",
        "_inflight",
        "_left",
        "_on_segment",
        "_on_done",
        "_cbs",
    )

    def __init__(
        self,
        ctx: OpContext,
        peer: int,
        buf: Any,
        segs: Sequence[int],
        on_segment: Callable[[int], None],
        on_done: Callback,
        gated: bool = False,
    ) -> None:
        self._t = ctx.transport
        self._peer = peer
        self._buf = buf
        self._plan = ctx.plan
        self._segs = segs
        self._window = ctx.recv_window
        self._allowed: Optional[list[bool]] = [False] * len(segs) if gated else None
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
        self._allowed[pos] = True
        self._pump()

    def _pump(self) -> None:
        segs = self._segs
        allowed = self._allowed
        while self._inflight < self._window and self._next < len(segs):
            pos = self._next
            if allowed is not None and not allowed[pos]:
                return
            s = segs[pos]
            lo, hi = self._plan.bounds(s)
            self._inflight += 1
            self._next = pos + 1
            self._t.irecv(self._buf[lo:hi], self._peer, self._plan.tag(s), self._make_arrived(pos))

    def _make_arrived(self, pos: int) -> Callback:
        def arrived() -> None:
            self._inflight -= 1
            self._left -= 1
            self._on_segment(pos)
            if self._left == 0:
                self._on_done()
            else:
                self._pump()

        return arrived
