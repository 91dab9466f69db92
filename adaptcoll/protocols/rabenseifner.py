"""Recursive halving / doubling allreduce (Rabenseifner): a reduce-scatter by halving, an allgather by doubling.

With p' the largest power of two <= p and q = p - p', the first 2q ranks fold in pairs first: even
rank 2i sends its whole contribution to 2i+1, which folds it (x_2i op x_2i+1) and takes part in the
main phase as virtual rank i; the other ranks are virtual rank r - q. The message is cut into p'
blocks of whole segments (plan.plan_blocks). Reduce-scatter step j (mask m = 2^j, j = 0..log2 p' - 1):
a virtual rank v exchanges with v ^ m, sending the half of its current window of blocks that the
partner keeps and folding the half it keeps; after the last step it owns one block, final.
Allgather: the same partners in reverse order, each sending the window it holds and receiving the
other half. Finally rank 2i+1 sends the whole result to 2i.

Per segment the work is a chain of events, each started the moment the previous one is done: a
segment folded at step j is sent at step j+1 at once, while other segments of step j are still in
flight. Partial results live in the result buffer; arriving segments land in pool buffers bounded by
the windows. On p' ranks each rank sends and receives 2(p'-1)/p' of the message in 2 log2(p') x
(segments per half) messages; the 2q paired ranks move the whole message once more each way.

Fold order: because masks grow from 1, partners always hold contiguous, adjacent ranges of ranks, and
the lower range is folded as `lower`: every block is reduced in MPI's rank order, independent of
timing, so results are reproducible and non-commutative ops are served. Every message on a link carries
a different segment, so the plan's one tag per segment makes tags unique on every link.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

from ..backends.base import ReduceOp
from ..runtime.transport import Callback
from .context import OpContext
from .pieces import Join
from .ring import block_segments
from .streams import RecvStream, SendStream

__all__ = ["RabenseifnerAllreduce", "HalvingLayout", "TAGS_PER_SEGMENT", "halving_layout", "main_ranks"]

TAGS_PER_SEGMENT = 1


def main_ranks(p: int) -> int:
    """p', the largest power of two <= p: the ranks of the main (halving / doubling) phase."""
    return 1 << (p.bit_length() - 1)


class HalvingLayout(NamedTuple):
    """One rank's part in a recursive halving / doubling allreduce (pure function of p, rank, plan shape).

    `pair`: the rank this one folds in with first (-1: none); `extra`: this rank hands its data to
    `pair` and takes no part in the main phase. Per main step j: `partners[j]`, whether this rank's
    ranks are the lower ones (`lower_is_mine[j]`), the segments it gives away and keeps. `leaves[s]`:
    the step at which segment s leaves this rank (`steps`: never, s is final here).
    """

    extra: bool
    pair: int
    steps: int
    partners: tuple[int, ...]
    lower_is_mine: tuple[bool, ...]
    give: tuple[range, ...]
    keep: tuple[range, ...]
    leaves: tuple[int, ...]
    bounds: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=256)
def halving_layout(p: int, r: int, count: int, seg_count: int) -> HalvingLayout:
    """The layout of rank r for `count` elements in segments of `seg_count` (see HalvingLayout)."""
    nseg = -(-count // seg_count) if count else 0
    bounds = tuple((s * seg_count, min((s + 1) * seg_count, count)) for s in range(nseg))
    pp = main_ranks(p)
    q = p - pp
    if r < 2 * q and r % 2 == 0:
        return HalvingLayout(True, r + 1, 0, (), (), (), (), (), bounds)
    v = r // 2 if r < 2 * q else r - q
    steps = pp.bit_length() - 1
    give: list[range] = []
    keep: list[range] = []
    lo, hi = 0, pp
    for j in range(steps):
        mid = (lo + hi) // 2
        kept, given = ((mid, hi), (lo, mid)) if v & (1 << j) else ((lo, mid), (mid, hi))
        keep.append(_segments(nseg, pp, *kept))
        give.append(_segments(nseg, pp, *given))
        lo, hi = kept
    leaves = [steps] * nseg
    for j in range(steps):
        for s in give[j]:
            leaves[s] = j
    return HalvingLayout(
        False,
        r - 1 if r < 2 * q else -1,
        steps,
        tuple(_real_rank(v ^ (1 << j), q) for j in range(steps)),
        tuple(v < v ^ (1 << j) for j in range(steps)),
        tuple(give),
        tuple(keep),
        tuple(leaves),
        bounds,
    )


class RabenseifnerAllreduce:
    """One rank's part of a recursive halving / doubling allreduce of `local` into `result`.

    Not in place, the first arrivals of each segment land straight in the result slice and are folded
    there; later ones (the result then holds a partial) and all of them in place land in pool buffers.
    """

    def __init__(self, ctx: OpContext, local: Any, result: Any, op: ReduceOp, on_complete: Callback) -> None:
        t = ctx.transport
        p, r = t.size, t.rank
        plan = ctx.plan
        nseg = plan.nseg
        self._be = ctx.backend
        self._watch = t.watch
        self._local = local
        self._result = result
        self._op = op
        self._on_complete = on_complete
        self._trivial = p == 1 or nseg == 0
        if self._trivial:
            return
        lay = halving_layout(p, r, plan.count, plan.seg_count)
        self._lay = lay
        in_place = local is result
        self._res = res = [result[lo:hi] for lo, hi in lay.bounds]
        self._loc = loc = res if in_place else [local[lo:hi] for lo, hi in lay.bounds]
        sizes = [hi - lo for lo, hi in lay.bounds]
        tags = plan.tags(range(nseg))
        done = self._part_done
        self._pair_out: Optional[SendStream] = None
        self._pair_in: Optional[RecvStream] = None
        self._outs: list[SendStream] = []
        self._ins: list[RecvStream] = []
        if lay.extra:  # hand everything to the pair, get the result back
            self._pair_out = SendStream(ctx, lay.pair, tags, self._pair_sent if in_place else None, done)
            self._pair_in = RecvStream(ctx, lay.pair, tags, res, sizes, [not in_place] * nseg, _ignore, done)
        else:
            folds_in = lay.pair >= 0
            self._first = 1 if folds_in else 0  # fold stages before the main phase
            self._stage = [0] * nseg  # folds done per segment
            self._busy = bytearray(nseg)
            self._pending: list[list[Any]] = [[None] * nseg for _ in range(lay.steps + self._first)]
            self._src = res if folds_in else loc  # what step 0 reads as this rank's contribution
            direct = not in_place  # may the first arrival of a segment land in the result itself?
            for j in range(lay.steps):
                give, keep = lay.give[j], lay.keep[j]
                out_segs = [*give, *keep]
                in_segs = [*keep, *give]
                into = [res[s] for s in keep] if direct and j == 0 and not folds_in else [None] * len(keep)
                gate = j > 0 or folds_in or in_place  # were the given segments sent from the result?
                self._outs.append(
                    SendStream(ctx, lay.partners[j], [tags[s] for s in out_segs], self._make_sent(j), done)
                )
                self._ins.append(
                    RecvStream(
                        ctx,
                        lay.partners[j],
                        [tags[s] for s in in_segs],
                        into + [res[s] for s in give],
                        [sizes[s] for s in in_segs],
                        [1] * len(keep) + [0 if gate else 1] * len(give),
                        self._make_arrived(j),
                        done,
                    )
                )
            if folds_in:
                into = list(res) if direct else [None] * nseg
                self._pair_in = RecvStream(ctx, lay.pair, tags, into, sizes, [1] * nseg, self._folds_in, done)
                self._pair_out = SendStream(ctx, lay.pair, tags, None, done)
        streams = [*self._outs, *self._ins, self._pair_in, self._pair_out]
        self._join = Join(sum(1 for x in streams if x), on_complete)  # an empty stream has nothing to wait for

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._trivial:
            if self._local is not self._result and len(self._result):
                self._be.copy(self._result, self._local)
            self._on_complete()
            return
        lay = self._lay
        if self._pair_in is not None:
            self._pair_in.start()
        for stream in self._ins:
            stream.start()
        if lay.extra:
            assert self._pair_out is not None
            for s, buf in enumerate(self._loc):
                self._pair_out.ready(s, buf)
        elif not self._first:
            for s in lay.give[0]:
                self._send_on(s)
        self._join.start()

    def _part_done(self) -> None:
        self._join.part_done()

    # -- the paired ranks ------------------------------------------------------------------------
    def _pair_sent(self, i: int) -> None:
        assert self._pair_in is not None
        self._pair_in.allow(i)  # in place: the contribution has left, the result may land in its place

    def _folds_in(self, s: int, buf: Any) -> None:
        self._pending[0][s] = buf
        self._fold(s)

    # -- the main phase --------------------------------------------------------------------------
    def _make_sent(self, j: int) -> Callable[[int], None]:
        n_give, n_keep = len(self._lay.give[j]), len(self._lay.keep[j])

        def sent(i: int) -> None:
            if i < n_give:  # a given-away segment left: its final value may land in its place
                self._ins[j].allow(n_keep + i)

        return sent

    def _make_arrived(self, j: int) -> Callable[[int, Any], None]:
        n_keep = len(self._lay.keep[j])
        keep_start = self._lay.keep[j].start
        give_start = self._lay.give[j].start
        stage = j + self._first

        def arrived(i: int, buf: Any) -> None:
            if i < n_keep:  # reduce-scatter: the partner's partial of a segment this rank keeps
                s = keep_start + i
                self._pending[stage][s] = buf
                self._fold(s)
            else:  # allgather: a final segment landed in the result
                self._final(give_start + i - n_keep)

        return arrived

    def _fold(self, s: int) -> None:
        if self._busy[s]:
            return
        stage = self._stage[s]
        buf = self._pending[stage][s] if stage < len(self._pending) else None
        if buf is None:
            return
        self._pending[stage][s] = None
        self._busy[s] = 1
        if stage < self._first:  # the pair's contribution is lower in rank order
            lower, higher = buf, self._loc[s]
        else:
            j = stage - self._first
            mine = self._src[s] if j == 0 else self._res[s]
            lower, higher = (mine, buf) if self._lay.lower_is_mine[j] else (buf, mine)
        poll = self._be.combine(self._op, lower, higher, self._res[s])
        if poll is None:
            self._folded(s, stage, buf)
        else:
            self._watch(poll, lambda: self._folded(s, stage, buf))

    def _folded(self, s: int, stage: int, buf: Any) -> None:
        lay = self._lay
        self._busy[s] = 0
        self._stage[s] = stage + 1
        if stage < self._first:
            assert self._pair_in is not None
            self._pair_in.release(s, buf)
        else:
            j = stage - self._first
            self._ins[j].release(s - lay.keep[j].start, buf)
        if stage + 1 - self._first == lay.leaves[s]:  # every fold of s at this rank is done
            if lay.leaves[s] == lay.steps:
                self._final(s)
            else:
                self._send_on(s)
        else:
            self._fold(s)

    def _send_on(self, s: int) -> None:
        """Segment s leaves this rank's window: send it to the partner of that step."""
        j = self._lay.leaves[s]
        self._outs[j].ready(s - self._lay.give[j].start, self._src[s] if j == 0 else self._res[s])

    def _final(self, s: int) -> None:
        """Segment s holds the result here: pass it on to the partners of the earlier steps (and the pair)."""
        lay = self._lay
        buf = self._res[s]
        for j in range(min(lay.leaves[s], lay.steps) - 1, -1, -1):
            self._outs[j].ready(len(lay.give[j]) + s - lay.keep[j].start, buf)
        if self._pair_out is not None:
            self._pair_out.ready(s, buf)


def _ignore(i: int, buf: Any) -> None:
    """Arrivals that need no action (the extra rank's result lands where it belongs)."""


def _real_rank(v: int, q: int) -> int:
    """The rank of virtual rank v (the first q virtual ranks are the odd ranks 1, 3, ..., 2q-1)."""
    return 2 * v + 1 if v < q else v + q


def _segments(nseg: int, blocks: int, lo: int, hi: int) -> range:
    """The segments of blocks [lo, hi)."""
    return range(block_segments(nseg, blocks, lo).start, block_segments(nseg, blocks, hi - 1).stop)
