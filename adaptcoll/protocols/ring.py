"""Segmented ring allreduce: a reduce-scatter then an allgather around the ring 0 -> 1 -> ... -> p-1 -> 0.

The message is cut into p blocks of whole segments (plan.plan_blocks); rank r ends the reduce-scatter
owning block r+1. Reduce-scatter step k (0..p-2): rank r sends block r-k to r+1 and receives block
r-1-k from r-1, which it folds with its own contribution into the result buffer, where the partial
waits to be forwarded at step k+1 (the last fold, block r+1, is final). Allgather step k: rank r
sends block r+1-k (its own final block, then each block received at step k-1) and receives block
r-k. Every segment is forwarded the moment it is folded or has arrived, so the steps overlap
segment by segment and the ring stays busy.

Each rank sends and receives 2(p-1)/p of the message in 2(p-1) x (segments per block) messages, and
folds (p-1)/p of it. Partial sums live in the result buffer (each rank's contribution to a segment is
read exactly once): not in place, an arriving segment lands straight in its result slice and is
folded there, so no extra memory is used at all; in place (the result still holds the contribution)
arrivals land in pool buffers, bounded by the windows. Block b is folded in the fixed order b, b+1,
..., p-1, 0, ..., b-1 whatever the timing: results are reproducible, but that order is MPI's rank
order only for block 0, so non-commutative ops are not served by the ring (the decision layer hands
them to native MPI and counts the reason in stats()).

Tags: on the link r -> r+1 a segment can travel twice (reduce-scatter and allgather), so the plan
holds two tags per segment: tag(s) in the reduce-scatter, tag(nseg + s) in the allgather.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from ..backends.base import ReduceOp
from ..runtime.transport import Callback
from .context import OpContext
from .pieces import Join
from .streams import RecvStream, SendStream

__all__ = ["RingAllreduce", "RingLayout", "TAGS_PER_SEGMENT", "block_segments", "ring_layout"]

TAGS_PER_SEGMENT = 2


def block_segments(nseg: int, blocks: int, b: int) -> range:
    """The segment indices of block b when nseg segments tile `blocks` blocks: consecutive runs whose
    lengths differ by at most one (see plan.plan_blocks)."""
    return range(b * nseg // blocks, (b + 1) * nseg // blocks)


class RingLayout(NamedTuple):
    """One rank's messages in a ring allreduce (a pure function of p, rank, plan shape and in-place-ness).

    Out (to rank+1) and in (from rank-1): segment and tag offset of every message in link order;
    `forward[i]`: the out message that passes in-message i on (-1: none); `frees[i]`: the in-message
    whose receive waits for out-message i to complete (-1: none); `pooled`: reduce-scatter arrivals
    land in pool buffers (in place: the result still holds this rank's contribution), otherwise
    straight in the result slice, where the fold happens in place.
    """

    out_segs: tuple[int, ...]
    out_tags: tuple[int, ...]
    in_segs: tuple[int, ...]
    in_tags: tuple[int, ...]
    n_rs_in: int
    n_own: int
    forward: tuple[int, ...]
    frees: tuple[int, ...]
    allowed: bytes
    bounds: tuple[tuple[int, int], ...]
    in_sizes: tuple[int, ...]
    pooled: bool


@functools.lru_cache(maxsize=256)
def ring_layout(p: int, r: int, count: int, seg_count: int, in_place: bool) -> RingLayout:
    """The messages of rank r in a ring allreduce of `count` elements in segments of `seg_count`."""
    nseg = -(-count // seg_count) if count else 0
    # the messages of each link in order: reduce-scatter steps 0..p-2, then allgather steps 0..p-2
    out_segs = [s for k in range(p - 1) for s in block_segments(nseg, p, (r - k) % p)]
    in_segs = [s for k in range(p - 1) for s in block_segments(nseg, p, (r - 1 - k) % p)]
    n_rs_out, n_rs_in = len(out_segs), len(in_segs)
    out_segs += [s for k in range(p - 1) for s in block_segments(nseg, p, (r + 1 - k) % p)]
    in_segs += [s for k in range(p - 1) for s in block_segments(nseg, p, (r - k) % p)]
    out_tags = [s if i < n_rs_out else nseg + s for i, s in enumerate(out_segs)]
    in_tags = [s if i < n_rs_in else nseg + s for i, s in enumerate(in_segs)]
    out_index = {(i >= n_rs_out, s): i for i, s in enumerate(out_segs)}
    in_index = {(i >= n_rs_in, s): i for i, s in enumerate(in_segs)}
    owned = set(block_segments(nseg, p, (r + 1) % p))  # final here after the reduce-scatter
    own = set(block_segments(nseg, p, r))  # sent at step 0 straight from the contribution
    forward = [out_index.get((i >= n_rs_in or s in owned, s), -1) for i, s in enumerate(in_segs)]
    # a completed reduce-scatter send frees its result slice for the allgather receive into it; not
    # needed for this rank's own block unless in place (it was sent from the contribution)
    frees = [in_index[(True, s)] if i < n_rs_out and (in_place or s not in own) else -1 for i, s in enumerate(out_segs)]
    waits = set(frees)
    bounds = tuple((s * seg_count, min((s + 1) * seg_count, count)) for s in range(nseg))
    return RingLayout(
        tuple(out_segs),
        tuple(out_tags),
        tuple(in_segs),
        tuple(in_tags),
        n_rs_in,
        len(own),
        tuple(forward),
        tuple(frees),
        bytes(0 if i in waits else 1 for i in range(len(in_segs))),
        bounds,
        tuple(bounds[s][1] - bounds[s][0] for s in in_segs),
        in_place,
    )


class RingAllreduce:
    """One rank's part of a ring allreduce of `local` into `result` (the same array when in place)."""

    def __init__(self, ctx: OpContext, local: Any, result: Any, op: ReduceOp, on_complete: Callback) -> None:
        t = ctx.transport
        p, r = t.size, t.rank
        plan = ctx.plan
        self._be = ctx.backend
        self._watch = t.watch
        self._local = local
        self._result = result
        self._op = op
        self._on_complete = on_complete
        self._trivial = p == 1 or plan.nseg == 0
        if self._trivial:
            return
        lay = ring_layout(p, r, plan.count, plan.seg_count, local is result)
        self._lay = lay
        self._res = res = [result[lo:hi] for lo, hi in lay.bounds]
        self._loc = res if local is result else [local[lo:hi] for lo, hi in lay.bounds]
        self._join = Join(2, on_complete)
        self._out = SendStream(ctx, (r + 1) % p, plan.tags(lay.out_tags), self._sent, self._join.part_done)
        n_rs = lay.n_rs_in
        in_segs = lay.in_segs
        if lay.pooled:
            dests: list[Any] = [None] * n_rs
        else:
            dests = [res[s] for s in in_segs[:n_rs]]
        dests += [res[s] for s in in_segs[n_rs:]]
        self._in = RecvStream(
            ctx,
            (r - 1) % p,
            plan.tags(lay.in_tags),
            dests,
            lay.in_sizes,
            lay.allowed,
            self._arrived,
            self._join.part_done,
        )

    def start(self) -> None:
        if self._trivial:
            if self._local is not self._result and len(self._result):
                self._be.copy(self._result, self._local)
            self._on_complete()
            return
        self._in.start()
        loc, ready, segs = self._loc, self._out.ready, self._lay.out_segs
        for i in range(self._lay.n_own):  # step 0: this rank's own block, straight from its contribution
            ready(i, loc[segs[i]])
        self._join.start()

    def _sent(self, i: int) -> None:
        j = self._lay.frees[i]
        if j >= 0:
            self._in.allow(j)

    def _arrived(self, i: int, buf: Any) -> None:
        lay = self._lay
        s = lay.in_segs[i]
        if i >= lay.n_rs_in:  # allgather: the final segment landed in the result; pass it on
            j = lay.forward[i]
            if j >= 0:
                self._out.ready(j, self._res[s])
            return
        # reduce-scatter: the partial of ranks b..r-1 (lower in ring order) folded with this rank's part,
        # into the result slice (where `buf` already is unless in place)
        poll = self._be.combine(self._op, buf, self._loc[s], self._res[s])
        if poll is None:
            self._folded(i, buf)
        else:
            self._watch(poll, lambda: self._folded(i, buf))

    def _folded(self, i: int, buf: Any) -> None:
        self._in.release(i, buf)
        lay = self._lay
        self._out.ready(lay.forward[i], self._res[lay.in_segs[i]])
