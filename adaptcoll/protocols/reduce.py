"""ADAPT's reduce: per-child receive windows, per-segment accumulators, a send window to the parent.

Arrival mode (default, commutative ops): the first child buffer to arrive for a segment becomes its
accumulator and everything else, the local contribution included, is folded in as it arrives. At the
root the accumulator is the result buffer itself: child 0 is received straight into it (or, in place,
it already holds the local contribution). Ordered mode (reproducible floating point, non-commutative
ops): contributions are folded strictly as self, child 1, child 2, ..., whatever the arrival order;
on a tree whose subtrees are contiguous, ascending rank ranges this is MPI's rank order.

Extra memory is bounded by the windows: receives from a child are only posted for segment positions
below `lowest unreleased + lookahead`, where a position is released once its result has left this rank
(or, at the root, is final), so at most children x recv_window + lookahead segment buffers are live.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Optional

from ..backends.base import ReduceOp
from ..runtime.transport import Callback
from .context import OpContext
from .pieces import sync_below

__all__ = ["Reduce"]


class _Seg:
    """Fold state of one segment position."""

    __slots__ = ("acc", "acc_w", "acc_pool", "queue", "busy", "target_in", "inputs", "next_k")

    def __init__(self) -> None:
        self.acc: Any = None
        self.acc_w = 0
        self.acc_pool = False
        self.queue: list[tuple[Any, int, bool]] = []
        self.busy = False
        self.target_in: Any = None
        self.inputs: Optional[list[Any]] = None
        self.next_k = 1


class Reduce:
    """Reduce segments `segs` of `local` up one tree into `target` (root only), as seen from one rank.

    `local` holds this rank's contribution (it is `target` itself for an in-place root). Hooks for
    Allreduce: `on_final(pos)` at the root when segment position pos is final in `target`; `on_sent(pos)` at other
    ranks when the send of position pos to the parent has completed (this rank no longer reads it).
    """

    def __init__(
        self,
        ctx: OpContext,
        parent: Optional[int],
        children: Sequence[int],
        local: Any,
        target: Any,
        op: ReduceOp,
        segs: Sequence[int],
        on_complete: Callback,
        on_final: Optional[Callable[[int], None]] = None,
        on_sent: Optional[Callable[[int], None]] = None,
        gated: bool = False,
    ) -> None:
        if ctx.pool is None and children:
            raise ValueError("Reduce needs a segment pool in its context (ctx.pool)")
        self._t = ctx.transport
        self._be = ctx.backend
        self._pool: Any = ctx.pool
        self._parent = parent
        self._parent_rank = -1 if parent is None else parent
        self._children = tuple(children)
        self._local = local
        self._target = target
        self._in_place = target is not None and local is target
        self._op = op
        self._plan = ctx.plan
        self._segs = segs
        self._n = len(segs)
        self._send_window = ctx.send_window
        self._recv_window = ctx.recv_window
        self._lookahead = ctx.recv_window + ctx.send_window
        self._sync = ctx.sync_mode
        self._ordered = ctx.ordered
        self._on_complete = on_complete
        self._on_final = on_final
        self._on_sent = on_sent
        self._gated = gated
        self._inputs = len(self._children) + 1
        self._state = [_Seg() for _ in range(self._n)] if self._children else []
        self._released = [False] * self._n
        self._low = 0
        self._nreleased = 0
        self._ready = bytearray(self._n)
        self._next_send = 0
        self._send_inflight = 0
        self._next_recv = [0] * len(self._children)
        self._recv_inflight = [0] * len(self._children)
        # child 0's contributions go straight into the root's result (it becomes the accumulator)
        self._into_target0 = parent is None and not self._in_place and not self._ordered

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        if self._n == 0:
            self._on_complete()
            return
        plan, segs = self._plan, self._segs
        if self._gated:  # contributions come later, through contribute(pos)
            for pos in range(self._n if self._children and self._ordered else 0):
                self._state[pos].inputs = [None] * self._inputs
            for i in range(len(self._children)):
                self._pump_recvs(i)
            return
        if not self._children:
            if self._parent is None:  # a lone root: the result is the local contribution
                for pos, s in enumerate(segs):
                    if not self._in_place:
                        lo, hi = plan.bounds(s)
                        self._be.copy(self._target[lo:hi], self._local[lo:hi])
                    self._release(pos)
            else:  # a leaf sends straight from its contribution
                self._ready[:] = b"\x01" * self._n
                self._pump_sends()
            return
        for pos, s in enumerate(segs):
            st = self._state[pos]
            lo, hi = plan.bounds(s)
            if self._ordered:
                st.inputs = [None] * self._inputs
                st.acc = self._local[lo:hi]
            elif self._in_place:
                st.acc, st.acc_w = self._target[lo:hi], 1
            else:
                st.queue.append((self._local[lo:hi], 1, False))
        for i in range(len(self._children)):
            self._pump_recvs(i)

    def contribute(self, pos: int) -> None:
        """Gated mode: this rank's contribution to segment position `pos` is now in `local` (the node
        level of a hierarchical collective has just reduced it); fold or send it from now on."""
        s = self._segs[pos]
        lo, hi = self._plan.bounds(s)
        if not self._children:
            if self._parent is not None:
                self._ready[pos] = 1
                self._pump_sends()
                return
            if not self._in_place:
                self._be.copy(self._target[lo:hi], self._local[lo:hi])
            self._release(pos)
            return
        st = self._state[pos]
        if self._ordered:
            st.acc = self._local[lo:hi]
            self._fold_ordered(pos)
        elif self._in_place:  # the result buffer holds this contribution: it becomes the accumulator
            st.target_in = self._target[lo:hi]
            self._fold(pos)
        else:
            st.queue.append((self._local[lo:hi], 1, False))
            self._fold(pos)

    # -- receives from children ----------------------------------------------------------------
    def _pump_recvs(self, i: int) -> None:
        window = self._recv_window
        inflight = self._recv_inflight[i]
        pos = self._next_recv[i]
        limit = self._low + self._lookahead
        if limit > self._n:
            limit = self._n
        if inflight >= window or pos >= limit:
            return
        into_target = i == 0 and self._into_target0
        plan, segs, child, target, pool = self._plan, self._segs, self._children[i], self._target, self._pool
        seg, count, base, space = plan.seg_count, plan.count, plan.tag_base, plan.tag_space
        irecv, arrived = self._t.irecv, self._arrived
        while inflight < window and pos < limit:
            s = segs[pos]
            lo = s * seg
            hi = lo + seg if lo + seg < count else count
            buf = target[lo:hi] if into_target else pool.take(hi - lo)
            inflight += 1
            irecv(buf, child, (base + s) % space, partial(arrived, i, pos, buf, into_target))
            pos += 1
        self._recv_inflight[i] = inflight
        self._next_recv[i] = pos

    def _arrived(self, i: int, pos: int, buf: Any, is_target: bool) -> None:
        self._recv_inflight[i] -= 1
        st = self._state[pos]
        if self._ordered:
            st.inputs[i + 1] = buf  # type: ignore[index]
            self._fold_ordered(pos)
        else:  # arrival order
            if is_target:
                st.target_in = buf
            elif st.acc is None:
                st.acc, st.acc_w, st.acc_pool = buf, 1, True
            else:
                st.queue.append((buf, 1, True))
            self._fold(pos)
        self._pump_recvs(i)

    # -- arrival-order folding -----------------------------------------------------------------

    def _fold(self, pos: int) -> None:
        st = self._state[pos]
        if st.busy:
            return
        combine, op = self._be.combine, self._op
        while True:
            if st.target_in is not None:  # the root's result buffer arrived: it becomes the accumulator
                if st.acc is not None:
                    st.queue.append((st.acc, st.acc_w, True))
                st.acc, st.acc_w, st.acc_pool, st.target_in = st.target_in, 1, False, None
            if st.queue and st.acc is not None:
                buf, w, release = st.queue.pop()
                poll = combine(op, buf, st.acc, st.acc)
                if poll is not None:  # asynchronous: go on once it has finished
                    st.busy = True
                    self._t.watch(poll, partial(self._folded, pos, buf, w, release))
                    return
                st.acc_w += w
                if release:
                    self._pool.give(buf)
                continue
            if st.acc_w == self._inputs:
                self._segment_reduced(pos)
            return

    def _folded(self, pos: int, buf: Any, w: int, release: bool) -> None:
        st = self._state[pos]
        st.busy = False
        st.acc_w += w
        if release:
            self._pool.give(buf)
        self._fold(pos)

    # -- ordered folding -----------------------------------------------------------------------
    def _fold_ordered(self, pos: int) -> None:
        st = self._state[pos]
        if st.busy or st.acc is None:  # acc None: a gated contribution still to come
            return
        x = st.inputs[st.next_k]  # type: ignore[index]
        if x is None:
            return
        if st.next_k == len(self._children) and self._parent is None:
            if self._in_place and st.next_k == 1:
                out = st.acc  # the target segment itself: the same object, so backends see the aliasing
            else:
                lo, hi = self._plan.bounds(self._segs[pos])
                out = self._target[lo:hi]
        else:
            out = x
        st.busy = True
        poll = self._be.combine(self._op, st.acc, x, out)
        if poll is None:
            self._folded_ordered(pos, x, out)
        else:
            self._t.watch(poll, partial(self._folded_ordered, pos, x, out))

    def _folded_ordered(self, pos: int, x: Any, out: Any) -> None:
        st = self._state[pos]
        st.busy = False
        if st.acc_pool:
            self._pool.give(st.acc)
        if out is not x:
            self._pool.give(x)
        st.acc, st.acc_pool = out, out is x
        st.inputs[st.next_k] = None  # type: ignore[index]
        st.next_k += 1
        if st.next_k == self._inputs:
            self._segment_reduced(pos)
        else:
            self._fold_ordered(pos)

    # -- results -------------------------------------------------------------------------------
    def _segment_reduced(self, pos: int) -> None:
        if self._parent is None:
            self._release(pos)
        else:
            self._ready[pos] = 1
            self._pump_sends()

    def _pump_sends(self) -> None:
        """Send reduced segments to the parent in position order (see ChildSendQueues for why)."""
        ready, n, window = self._ready, self._n, self._send_window
        pos, inflight = self._next_send, self._send_inflight
        if inflight >= window or pos >= n or not ready[pos]:
            return
        plan, segs, state, local, parent = self._plan, self._segs, self._state, self._local, self._parent_rank
        seg, count, base, space = plan.seg_count, plan.count, plan.tag_base, plan.tag_space
        sync, isend, sent = sync_below(self._sync, window, n), self._t.isend, self._sent
        while inflight < window and pos < n and ready[pos]:
            s = segs[pos]
            if state:
                buf = state[pos].acc
            else:
                lo = s * seg
                buf = local[lo : lo + seg if lo + seg < count else count]
            inflight += 1
            isend(buf, parent, (base + s) % space, partial(sent, pos), pos < sync)
            pos += 1
        self._next_send = pos
        self._send_inflight = inflight

    def _sent(self, pos: int) -> None:
        self._send_inflight -= 1
        if self._children:
            st = self._state[pos]
            if st.acc_pool:
                self._pool.give(st.acc)
            st.acc = None
        if self._on_sent is not None:
            self._on_sent(pos)
        self._release(pos)
        self._pump_sends()

    def _release(self, pos: int) -> None:
        if self._parent is None and self._on_final is not None:
            self._on_final(pos)
        self._released[pos] = True
        self._nreleased += 1
        if pos == self._low:
            low = self._low
            while low < self._n and self._released[low]:
                low += 1
            self._low = low
            for i in range(len(self._children)):
                self._pump_recvs(i)
        if self._nreleased == self._n:
            self._on_complete()
