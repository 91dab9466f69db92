"""Node-level collectives over shared slots (no MPI): broadcast and reduce/allreduce on one node.

Event-driven per segment, like the tree protocols: each rank moves a segment as soon as the flags
it depends on show, so there is no barrier per call and no node-wide lock step.

- `NodeBcast`: the node's entry rank (the root, or the leader that received the segment from the
  tree between nodes) copies each segment into its next slot and posts it; every other rank copies
  it out the moment the flag shows and marks it DONE, which frees the slot for reuse.
- `NodeReduce`: each rank posts its segment in its slot (all but its own chunk: the segment is cut
  into one chunk per rank of the node); each rank folds its own chunk across all contributions, in
  rank order (so the result is reproducible and non-commutative ops are right), writes it to its slot
  and flags it FOLDED; the root (reduce) or every rank (allreduce) copies the folded chunks out.
  All ranks fold in parallel and each element is read once.

Every read of another rank's slot follows a flag load and a `sync()`; every flag store follows a
`sync()` after the data it announces (see `adaptcoll.protocols.slots` and docs/shm.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from ..backends.base import ArrayBackend, ReduceOp
from ..plans.segments import SegmentPlan
from ..runtime.transport import Callback
from .slots import DONE, FOLDED, POSTED, SlotRing

__all__ = ["NodeBcast", "NodeReduce", "chunk_bounds"]

SegmentHook = Callable[[int], None]


def chunk_bounds(n: int, parts: int, itemsize: int) -> list[int]:
    """Boundaries (parts + 1 offsets, in elements) cutting n elements into `parts` near-equal chunks.

    Chunks start on 64-byte boundaries where the size allows (whole cache lines per folding rank).
    """
    unit = max(1, 64 // itemsize)
    units = -(-n // unit)
    return [min(n, (units * c // parts) * unit) for c in range(parts)] + [n]


class NodeBcast:
    """Broadcast `buf` (1-D uint8) from the node's `entry` rank to the others, segment by segment.

    `gated`: the entry publishes segment s only after `allow(s)` (it is still arriving from the tree
    between nodes); otherwise every segment is ready at once. `on_segment(s)` fires on a non-entry rank
    once segment s is in its `buf`. `on_complete()` fires when this rank's part is done (at the entry:
    everything published, so `buf` may change; elsewhere: everything copied in).
    """

    __slots__ = (
        "done",
        "_ring",
        "_slots",
        "_plan",
        "_buf",
        "_entry",
        "_me",
        "_size",
        "_nslots",
        "_base",
        "_gate",
        "_next",
        "_on_segment",
        "_on_complete",
    )

    def __init__(
        self,
        ring: SlotRing,
        plan: SegmentPlan,
        buf: Any,
        entry: int,
        on_complete: Callback,
        gated: bool = False,
        on_segment: Optional[SegmentHook] = None,
    ) -> None:
        slots = ring.slots
        self.done = False
        self._ring = ring
        self._slots = slots
        self._plan = plan
        self._buf = buf
        self._entry = entry
        self._me = slots.rank
        self._size = slots.size
        self._nslots = slots.nslots
        nseg = plan.nseg if slots.size > 1 else 0
        self._base = ring.take(nseg)
        self._gate = bytearray(plan.nseg) if gated and self._me == entry else None
        self._next = 0
        self._on_segment = on_segment
        self._on_complete = on_complete

    def start(self) -> None:
        """Begin (the ring polls from the next engine sweep on); completes at once if there is nothing to move."""
        if self._slots.size == 1 or self._plan.nseg == 0:
            self._finish()
        else:
            self._ring.start(self)

    def allow(self, s: int) -> None:
        """Gated entry: segment s is in `buf` now and may be published."""
        if self._gate is not None:
            self._gate[s] = 1
            self._ring.kick()

    def _finish(self) -> None:
        self.done = True
        self._on_complete()

    # -- polling -------------------------------------------------------------------------------
    def ready(self) -> bool:
        s = self._next
        if s >= self._plan.nseg:
            return False
        q = self._base + s
        k = q % self._nslots
        slots = self._slots
        if self._me == self._entry:
            if self._gate is not None and not self._gate[s]:
                return False
            floor = q - self._nslots
            flag = slots.flag
            for x in range(self._size):  # noqa: SIM110 - polled every sweep: no generator
                if flag(x, DONE, k) < floor:
                    return False
            return True
        return slots.flag(self._entry, POSTED, k) >= q

    def advance(self) -> None:
        nseg = self._plan.nseg
        while self._next < nseg and self.ready():
            s = self._next
            self._next = s + 1
            q = self._base + s
            k = q % self._nslots
            lo, hi = self._plan.bounds(s)
            slots = self._slots
            if self._me == self._entry:
                np.copyto(slots.slot(self._me, k)[: hi - lo], self._buf[lo:hi])
                slots.sync()  # the data before the flag
                slots.set_flag(POSTED, k, q)
                slots.set_flag(DONE, k, q)  # the entry reads nothing for q
            else:
                slots.sync()  # the flag before the data
                np.copyto(self._buf[lo:hi], slots.slot(self._entry, k)[: hi - lo])
                slots.sync()  # the reads before DONE (the entry may overwrite the slot after it)
                slots.set_flag(DONE, k, q)
                if self._on_segment is not None:
                    self._on_segment(s)
        if self._next == nseg:
            self._finish()


class NodeReduce:
    """Reduce `local` (1-D, this rank's contribution) over the node into `target`, segment by segment.

    `root` is the node rank that gets the result (reduce), or None for allreduce (every rank's
    `target` gets it). `target` is only used where the result lands (None elsewhere); it may be
    `local` itself (in place). Folds run in rank order, `out = lower op higher`, on a synchronous
    (host) backend. `on_segment(s)` fires where the result lands once segment s of `target` is final.
    """

    __slots__ = (
        "done",
        "_ring",
        "_slots",
        "_plan",
        "_local",
        "_target",
        "_op",
        "_backend",
        "_root",
        "_collects",
        "_me",
        "_size",
        "_nslots",
        "_base",
        "_item",
        "_dtype",
        "_in_place",
        "_bounds",
        "_others",
        "_pub",
        "_fold",
        "_fold_next",
        "_fold_out",
        "_fold_in_result",
        "_collect",
        "_collect_left",
        "_on_segment",
        "_on_complete",
    )

    def __init__(
        self,
        ring: SlotRing,
        plan: SegmentPlan,
        local: Any,
        target: Any,
        op: ReduceOp,
        backend: ArrayBackend,
        root: Optional[int],
        on_complete: Callback,
        on_segment: Optional[SegmentHook] = None,
    ) -> None:
        slots = ring.slots
        self.done = False
        self._ring = ring
        self._slots = slots
        self._plan = plan
        self._local = local
        self._target = target
        self._op = op
        self._backend = backend
        self._root = root
        self._me = slots.rank
        self._size = slots.size
        self._collects = root is None or root == self._me
        if self._collects and target is None:
            raise ValueError("NodeReduce: the rank that gets the result needs a target")
        self._nslots = slots.nslots
        nseg = plan.nseg if slots.size > 1 else 0
        self._base = ring.take(nseg)
        self._dtype = local.dtype
        self._item = local.dtype.itemsize
        self._in_place = target is not None and bool(np.may_share_memory(target, local))
        self._bounds: dict[int, list[int]] = {}
        self._others = tuple(x for x in range(self._size) if x != self._me)
        self._pub = 0  # next segment to post
        self._fold = 0  # segment being folded (always < _pub)
        self._fold_next = 0  # next input (rank) to fold into it; 0: not begun (the first fold takes 0 and 1)
        self._fold_out: Any = None
        self._fold_in_result = False
        self._collect = 0  # segment being collected (always < _fold)
        self._collect_left: tuple[int, ...] = self._others
        self._on_segment = on_segment
        self._on_complete = on_complete

    def start(self) -> None:
        """Begin; a node of one rank copies its contribution to the target at once."""
        plan = self._plan
        if self._size == 1 or plan.nseg == 0:
            for s in range(plan.nseg):
                lo, hi = plan.bounds(s)
                if not self._in_place:
                    self._backend.copy(self._target[lo:hi], self._local[lo:hi])
                if self._on_segment is not None:
                    self._on_segment(s)
            self._finish()
        else:
            self._ring.start(self)

    def _finish(self) -> None:
        self.done = True
        self._on_complete()

    def _chunks(self, n: int) -> list[int]:
        found = self._bounds.get(n)
        if found is None:
            found = self._bounds[n] = chunk_bounds(n, self._size, self._item)
        return found

    def _typed(self, rank: int, k: int) -> Any:
        return self._slots.slot(rank, k).view(self._dtype)

    # -- conditions (flag loads only) ----------------------------------------------------------
    def _can_post(self) -> bool:
        if self._pub >= self._plan.nseg:
            return False
        q = self._base + self._pub
        k = q % self._nslots
        floor = q - self._nslots
        flag = self._slots.flag
        for x in range(self._size):  # noqa: SIM110 - polled every sweep: no generator
            if flag(x, DONE, k) < floor:
                return False
        return True

    def _can_fold(self) -> bool:
        if self._fold >= self._pub:
            return False
        q = self._base + self._fold
        k = q % self._nslots
        flag = self._slots.flag
        me = self._me
        j = self._fold_next
        if j == 0:
            return (me == 0 or flag(0, POSTED, k) >= q) and (me == 1 or flag(1, POSTED, k) >= q)
        return j == me or flag(j, POSTED, k) >= q

    def _collect_ready(self) -> list[int]:
        if not self._collects or self._collect >= self._fold:
            return []
        q = self._base + self._collect
        k = q % self._nslots
        flag = self._slots.flag
        return [x for x in self._collect_left if flag(x, FOLDED, k) >= q]

    def ready(self) -> bool:
        return self._can_post() or self._can_fold() or bool(self._collect_ready())

    def advance(self) -> None:
        moved = True
        while moved:
            moved = False
            while self._can_post():
                self._post()
                moved = True
            while self._can_fold():
                self._fold_some()
                moved = True
            ready = self._collect_ready()
            while ready:
                self._collect_some(ready)
                moved = True
                ready = self._collect_ready()
        if (self._collect if self._collects else self._fold) == self._plan.nseg:
            self._finish()

    # -- step 1: post this rank's contribution (all but its own chunk) -------------------------
    def _post(self) -> None:
        s = self._pub
        q = self._base + s
        k = q % self._nslots
        lo, hi = self._plan.bounds(s)
        cb = self._chunks(hi - lo)
        a, b = cb[self._me], cb[self._me + 1]
        mine = self._typed(self._me, k)
        local = self._local
        if a > 0:
            np.copyto(mine[:a], local[lo : lo + a])
        if b < hi - lo:
            np.copyto(mine[b : hi - lo], local[lo + b : hi])
        slots = self._slots
        slots.sync()  # the contribution before POSTED
        slots.set_flag(POSTED, k, q)
        self._pub = s + 1

    # -- step 2: fold this rank's chunk across all contributions, in rank order ----------------
    def _fold_some(self) -> None:
        """Fold every input of the current segment that has arrived (called when at least one has)."""
        s = self._fold
        q = self._base + s
        k = q % self._nslots
        lo, hi = self._plan.bounds(s)
        cb = self._chunks(hi - lo)
        me, size = self._me, self._size
        a, b = cb[me], cb[me + 1]
        slots = self._slots
        flag = slots.flag
        combine, op = self._backend.combine, self._op
        j = self._fold_next
        if j == 0:
            slots.sync()  # the flags of inputs 0 and 1 (seen by _can_fold) before their data
            if self._collects and (not self._in_place or me <= 1):
                # the result buffer itself; in place only where this rank's contribution is read by this first fold
                out, self._fold_in_result = self._target[lo + a : lo + b], True
            else:
                out, self._fold_in_result = self._typed(me, k)[a:b], False
            self._fold_out = out
            if b > a:
                combine(op, self._input(0, k, lo, a, b), self._input(1, k, lo, a, b), out)
            j = 2
        out = self._fold_out
        while j < size and (j == me or flag(j, POSTED, k) >= q):
            if j != me:
                slots.sync()
            if b > a:
                combine(op, out, self._input(j, k, lo, a, b), out)
            j += 1
        if j < size:
            self._fold_next = j
            return
        if self._collects:
            if self._fold_in_result:
                if self._root is None and b > a:
                    np.copyto(self._typed(me, k)[a:b], out)  # the others copy it from this rank's slot
            elif b > a:
                np.copyto(self._target[lo + a : lo + b], out)
        slots.sync()  # the folded chunk, and every read of the inputs, before FOLDED / DONE
        if not self._collects or self._root is None:
            slots.set_flag(FOLDED, k, q)
        if not self._collects:
            slots.set_flag(DONE, k, q)
        self._fold = s + 1
        self._fold_next = 0
        self._fold_out = None

    def _input(self, j: int, k: int, lo: int, a: int, b: int) -> Any:
        if j == self._me:
            return self._local[lo + a : lo + b]
        return self._typed(j, k)[a:b]

    # -- step 3: copy the other ranks' folded chunks out ---------------------------------------
    def _collect_some(self, ready: list[int]) -> None:
        s = self._collect
        q = self._base + s
        k = q % self._nslots
        slots = self._slots
        slots.sync()  # the flags before the data
        lo, hi = self._plan.bounds(s)
        cb = self._chunks(hi - lo)
        target = self._target
        for x in ready:
            a, b = cb[x], cb[x + 1]
            if b > a:
                np.copyto(target[lo + a : lo + b], self._typed(x, k)[a:b])
        left = tuple(x for x in self._collect_left if x not in ready)
        if left:
            self._collect_left = left
            return
        self._collect_left = self._others
        slots.sync()  # every read for q before DONE
        slots.set_flag(DONE, k, q)
        self._collect = s + 1
        if self._on_segment is not None:
            self._on_segment(s)
