"""Ring Allgather and ring Reduce-scatter: the two halves of the ring allreduce, on blocks of any length.

Both run around the ring 0 -> 1 -> ... -> p-1 -> 0 over `streams.py` (one ordered stream per link,
both sides agreeing on the order of its messages), on a block plan (`blockplan.BlockSegments`: block b
is rank b's contribution to an Allgather, rank b's result of a Reduce-scatter; blocks may differ in
length, empty ones are skipped). Every segment moves the moment it is ready, so steps overlap segment
by segment.

Allgather: step k (0..p-2), rank r sends block r-k to r+1 (its own block first, then each block it
received at step k-1) and receives block r-1-k from r-1 straight into its result slice.

Reduce-scatter: step k, rank r sends block r-1-k and receives block r-2-k, folding it with its own
contribution to that block (the received partial first: block b is folded in the ring order b+1, b+2,
..., b, which is MPI's rank order only for block p-1, so non-commutative ops are not served here).
After p-1 steps rank r holds block r, final. Partials of the blocks it forwards live in one scratch
array from the pool (the received slice is folded in place and sent from there): each is written
once, so no receive ever waits for a send. The last step folds straight into the result, or, in
place (the result is the front of the contribution, still being read), into the scratch, copied to
the result once everything has been read.

On a link every segment travels at most once, so one tag per segment (`blockplan.tag_plan`: segment j
of block b has tag offset j x p + b, the same piece of the same block on every rank).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

from ..backends.base import ReduceOp
from ..plans.blocks import BlockSegments
from ..runtime.transport import Callback
from .context import OpContext
from .pieces import Join
from .streams import RecvStream, SendStream

__all__ = ["RingAllgather", "RingReduceScatter", "RingBlockLayout", "ring_block_layout"]


class RingBlockLayout(NamedTuple):
    """One rank's messages in a ring allgather (`shift` 0) or reduce-scatter (`shift` 1): the segments
    it sends to r+1 and receives from r-1, in link order; `forward[i]`: the out message that passes
    in-message i on (-1: none, the last step); `n_first`: out messages of step 0."""

    out_segs: tuple[int, ...]
    in_segs: tuple[int, ...]
    forward: tuple[int, ...]
    n_first: int


@functools.lru_cache(maxsize=256)
def ring_block_layout(p: int, r: int, blocks: BlockSegments, shift: int) -> RingBlockLayout:
    """Rank r's messages: step k sends block r-shift-k and receives block r-shift-1-k."""
    out_blocks = [(r - shift - k) % p for k in range(p - 1)]
    in_blocks = [(r - shift - 1 - k) % p for k in range(p - 1)]
    out_segs = [s for b in out_blocks for s in blocks.segments(b)]
    in_segs = [s for b in in_blocks for s in blocks.segments(b)]
    out_index = {s: i for i, s in enumerate(out_segs)}
    last = set(blocks.segments(in_blocks[-1])) if in_blocks else set()
    forward = tuple(-1 if s in last else out_index[s] for s in in_segs)
    return RingBlockLayout(
        tuple(out_segs), tuple(in_segs), forward, len(blocks.segments(out_blocks[0])) if p > 1 else 0
    )


class RingAllgather:
    """One rank's part of a ring allgather: `local` (this rank's block; None in place, when it is
    already in its place in `result`) into `result` (every block, laid out as `blocks`)."""

    def __init__(
        self, ctx: OpContext, blocks: BlockSegments, local: Optional[Any], result: Any, on_complete: Callback
    ) -> None:
        t = ctx.transport
        p, r = t.size, t.rank
        self._be = ctx.backend
        self._local = local
        lo, hi = blocks.displs[r], blocks.displs[r] + blocks.counts[r]
        self._own = result[lo:hi]
        self._on_complete = on_complete
        self._trivial = p == 1 or blocks.nseg == 0
        if self._trivial:
            return
        lay = ring_block_layout(p, r, blocks, 0)
        self._lay = lay
        self._res = res = [result[a:b] for a, b in blocks.bounds]
        self._res_base = lo
        self._bounds = blocks.bounds
        offsets = blocks.tag_offsets
        tags = ctx.plan.tags
        self._out = SendStream(ctx, (r + 1) % p, tags([offsets[s] for s in lay.out_segs]), None, self._part_done)
        self._in = RecvStream(
            ctx,
            (r - 1) % p,
            tags([offsets[s] for s in lay.in_segs]),
            [res[s] for s in lay.in_segs],
            [len(res[s]) for s in lay.in_segs],
            b"\x01" * len(lay.in_segs),
            self._arrived,
            self._part_done,
        )
        self._join = Join(sum(1 for x in (self._out, self._in) if len(x)), on_complete)

    def _part_done(self) -> None:
        self._join.part_done()

    def start(self) -> None:
        if self._trivial:
            if self._local is not None and len(self._own):
                self._be.copy(self._own, self._local)
            self._on_complete()
            return
        self._in.start()
        ready, segs = self._out.ready, self._lay.out_segs
        if self._local is None:  # in place: this rank's block is in the result already
            pieces = [self._res[s] for s in segs[: self._lay.n_first]]
        else:  # step 0 sends from `local` itself; its copy into the result (below) overlaps these sends
            base = self._res_base
            pieces = [self._local[a - base : b - base] for a, b in (self._bounds[s] for s in segs[: self._lay.n_first])]
        for i, piece in enumerate(pieces):  # step 0: this rank's own block
            ready(i, piece)
        if self._local is not None and len(self._own):  # while the first messages move
            self._be.copy(self._own, self._local)
        self._join.start()

    def _arrived(self, i: int, buf: Any) -> None:
        j = self._lay.forward[i]
        if j >= 0:
            self._out.ready(j, buf)


class RingReduceScatter:
    """One rank's part of a ring reduce-scatter of `local` (every block, laid out as `blocks`) into
    `result` (this rank's block). `in_place`: `result` is the front of `local` (MPI.IN_PLACE)."""

    def __init__(
        self,
        ctx: OpContext,
        blocks: BlockSegments,
        local: Any,
        result: Any,
        op: ReduceOp,
        on_complete: Callback,
        in_place: bool = False,
    ) -> None:
        t = ctx.transport
        p, r = t.size, t.rank
        self._be = ctx.backend
        self._watch = t.watch
        self._op = op
        self._local = local
        self._result = result
        self._in_place = in_place
        self._on_complete = on_complete
        self._own = local[blocks.displs[r] : blocks.displs[r] + blocks.counts[r]]
        self._trivial = p == 1 or blocks.nseg == 0
        if self._trivial:
            return
        if ctx.pool is None:
            raise ValueError("a ring reduce-scatter needs a segment pool in its context (ctx.pool)")
        self._pool = ctx.pool
        total = blocks.displs[-1] + blocks.counts[-1]
        self._scratch: Optional[Any] = self._pool.take(total) if (p > 2 or in_place) else None
        lay = ring_block_layout(p, r, blocks, 1)
        self._lay = lay
        self._loc = [local[a:b] for a, b in blocks.bounds]
        base = blocks.displs[r]
        if in_place or self._scratch is not None:
            assert self._scratch is not None
            scr = self._scratch
            self._part = [scr[a:b] for a, b in blocks.bounds]
        else:
            self._part = [None] * blocks.nseg
        finals = blocks.segments(r)
        if not in_place:  # the last step folds straight into the result
            for s in finals:
                a, b = blocks.bounds[s]
                self._part[s] = result[a - base : b - base]
        self._finals = finals
        self._base = base
        self._bounds = blocks.bounds
        self._folds_left = len(lay.in_segs)
        offsets = blocks.tag_offsets
        tags = ctx.plan.tags
        self._out = SendStream(ctx, (r + 1) % p, tags([offsets[s] for s in lay.out_segs]), None, self._part_done)
        self._in = RecvStream(
            ctx,
            (r - 1) % p,
            tags([offsets[s] for s in lay.in_segs]),
            [self._part[s] for s in lay.in_segs],
            [len(self._loc[s]) for s in lay.in_segs],
            b"\x01" * len(lay.in_segs),
            self._arrived,
            _nothing,
        )
        parts = (1 if len(self._out) else 0) + (1 if self._folds_left else 0)
        self._join = Join(parts, self._finish)

    def _part_done(self) -> None:
        self._join.part_done()

    def start(self) -> None:
        if self._trivial:
            if not self._in_place and len(self._result):  # in place (p = 1) the block is the result already
                self._be.copy(self._result, self._own)
            self._on_complete()
            return
        self._in.start()
        loc, ready, segs = self._loc, self._out.ready, self._lay.out_segs
        for i in range(self._lay.n_first):  # step 0: this rank's contribution to block r-1
            ready(i, loc[segs[i]])
        self._join.start()

    def _arrived(self, i: int, buf: Any) -> None:
        s = self._lay.in_segs[i]
        # the partial of the ranks before this one in the ring, then this rank's contribution
        poll = self._be.combine(self._op, buf, self._loc[s], buf)
        if poll is None:
            self._folded(i, buf)
        else:
            self._watch(poll, lambda: self._folded(i, buf))

    def _folded(self, i: int, buf: Any) -> None:
        j = self._lay.forward[i]
        if j >= 0:
            self._out.ready(j, buf)
        self._folds_left -= 1
        if self._folds_left == 0:
            self._join.part_done()

    def _finish(self) -> None:
        if self._in_place:  # every contribution has been read: the result may now overwrite the front
            base = self._base
            for s in self._finals:
                a, b = self._bounds[s]
                self._be.copy(self._result[a - base : b - base], self._part[s])
        if self._scratch is not None:
            self._pool.give(self._scratch)
            self._scratch = None
        self._on_complete()


def _nothing() -> None:
    """A stream end that needs no action (the folds count the arrivals)."""
