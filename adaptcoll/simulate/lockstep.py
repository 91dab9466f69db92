"""Lock-step baselines: collectives as MPI libraries run them, one blocking step after another.

Each rank walks a schedule of steps; a step's sends and receives are posted together (a blocking
Send or Recv is a step of one, a Sendrecv a step of two) and the rank waits for all of them, then
folds what it received, before it starts the next step. The schedules follow MPICH's algorithms
(relative ranks, largest subtree first, its chunking), unsegmented, and Open MPI's segmented ones, on the
same simulated transport, cost model and noise as adaptcoll's protocols; they pay `native_o` per
message and no engine cost.

| name | collectives | MPICH routine it follows |
|---|---|---|
| binomial | bcast, reduce | MPIR_Bcast_intra_binomial, MPIR_Reduce_intra_binomial |
| reduce_scatter_gather | reduce | MPIR_Reduce_intra_reduce_scatter_gather (MPICH's long-message choice) |
| scatter_allgather | bcast | MPIR_Bcast_intra_scatter_recursive_doubling_allgather (ring if size is not 2^k) |
| scatter_ring_allgather | bcast | MPIR_Bcast_intra_scatter_ring_allgather (MPICH's choice for long messages) |
| rabenseifner | allreduce | MPIR_Allreduce_intra_reduce_scatter_allgather |
| ring | allreduce | ring reduce-scatter + ring allgather (MPIR_Allreduce_intra_ring) |
| mpich_smp | all three | MPIR_*_intra_smp: inside each node, then between node leaders (`mpich_choice` each) |

Open MPI's coll/base algorithms (`ompi_pipeline`, `ompi_split_bintree`, `ompi_binomial`, `ompi_ring`,
`ompi_ring_segmented`), the fixed decision rules of tuned (`ompi_tuned`, `ompi40_tuned`) and Open MPI 5's
default node-aware coll/han (`ompi_han`: a step may be `Together`, several schedules a rank runs at once)
follow below; docs/simulate.md lists what each follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from itertools import chain
from typing import Any, Optional, Union, cast

from ..runtime.transport import Callback
from .programs import DTYPE, ITEMSIZE, SUM, Buffers, Job
from .world import SimRank, World

__all__ = [
    "BASELINES",
    "LockStep",
    "NotModelled",
    "baseline_names",
    "baseline_starter",
    "mpich_choice",
    "check_applicable",
    "estimated_messages",
    "ompi_segcount",
    "ompi_tuned_choice",
    "Together",
    "SEND",
    "RECV",
    "FOLD",
    "POST",
    "POSTFOLD",
    "WAIT",
    "TOUCH",
]

SEND, RECV, FOLD, POST, POSTFOLD, WAIT, TOUCH = 0, 1, 2, 3, 4, 5, 6
"""Step operations: send acc[lo:hi]; receive into acc[lo:hi]; receive into a temporary and fold it
into acc[lo:hi]. POST / POSTFOLD post such a receive without waiting for it; a later step's WAIT with
the same (peer, lo, hi, tag) waits for it (and folds it): Open MPI's pre-posted receives (irecv of
segment i+1 before waiting for segment i). (TOUCH, 0, n, allocated, 0): the library first touches n
elements of a temporary of `allocated` elements it allocates for this call (CPU work only: SimRank.touch,
the `fault` cost of MPICH's large temporaries)."""

Op = tuple[int, int, int, int, int]  # (kind, peer, lo, hi, tag)
Step = list[Op]
Schedule = Callable[[int, int, int, int], Iterator[Step]]  # (rank, size, root, count) -> steps


class Together:
    """A step made of several schedules one rank runs at once, each walking its own steps (as any
    schedule) independently of the others; the step ends when all of them have. A library's
    non-blocking collectives progressing while the rank runs a blocking one, then its wait for them all
    (Open MPI's HAN tasks: `ompi_han`)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: Iterator[Step]) -> None:
        self.parts = parts


Steps = Iterator[Union[Step, Together]]
Baseline = Callable[[int, int, int, int], Steps]  # a schedule whose steps may be Together


class LockStep:
    """One rank of a lock-step collective over `acc` (see the module docstring)."""

    __slots__ = ("_t", "_steps", "_acc", "_dtype", "_on_complete", "_left", "_folds", "_posted", "_joins")

    def __init__(self, t: SimRank, steps: Steps, acc: Any, dtype: Any, on_complete: Callback) -> None:
        self._t = t
        self._steps = steps
        self._acc = acc
        self._dtype = dtype
        self._on_complete = on_complete
        self._left = 0
        self._folds: list[tuple[Any, int, int]] = []
        self._posted: dict[tuple[int, int, int, int], list[Any]] = {}  # key -> [done, waited, tmp]
        self._joins = 0  # parts of a Together step still running

    def start(self) -> None:
        self._step()

    def _step(self) -> None:
        t, acc = self._t, self._acc
        while True:  # steps whose waits have all completed already run on at once
            ops = next(self._steps, None)
            if ops is None:
                if self._posted:
                    raise RuntimeError(f"lock-step schedule left receives posted, never waited: {list(self._posted)}")
                self._on_complete()
                return
            if isinstance(ops, Together):
                if self._fork(ops):
                    return
                continue  # every part finished at once
            self._folds = []
            left = 0
            for kind, peer, lo, hi, tag in ops:  # pre-posted receives first: a step may post and wait one
                if kind in (POST, POSTFOLD):
                    self._post(kind, peer, lo, hi, tag)
            for kind, peer, lo, hi, tag in ops:
                if kind <= FOLD:
                    left += 1
                elif kind == WAIT:
                    entry = self._posted.pop((peer, lo, hi, tag))
                    entry[1] = True
                    if entry[2] is not None:
                        self._folds.append((entry[2], lo, hi))
                    if not entry[0]:
                        left += 1
            self._left = left
            for kind, peer, lo, hi, tag in ops:
                if kind == SEND:
                    t.isend(acc[lo:hi], peer, tag, self._one_done)
                elif kind == RECV:
                    t.irecv(acc[lo:hi], peer, tag, self._one_done)
                elif kind == FOLD:
                    tmp = t.empty(hi - lo, self._dtype)
                    self._folds.append((tmp, lo, hi))
                    t.irecv(tmp, peer, tag, self._one_done)
                elif kind == TOUCH:
                    t.touch(lo, hi)
            if left:
                return
            self._fold()

    def _fork(self, together: Together) -> bool:
        """Start each part as a LockStep of its own on the same buffer; True while any is still running
        (the last one to finish goes on with this schedule)."""
        self._joins = 1  # held while starting them: a part that finishes at once does not go on
        for steps in together.parts:
            self._joins += 1
            LockStep(self._t, steps, self._acc, self._dtype, self._joined).start()
        self._joins -= 1
        return self._joins > 0

    def _joined(self) -> None:
        self._joins -= 1
        if not self._joins:
            self._step()

    def _post(self, kind: int, peer: int, lo: int, hi: int, tag: int) -> None:
        tmp = self._t.empty(hi - lo, self._dtype) if kind == POSTFOLD else None
        entry: list[Any] = [False, False, tmp]
        self._posted[(peer, lo, hi, tag)] = entry

        def done() -> None:
            entry[0] = True
            if entry[1]:
                self._one_done()

        self._t.irecv(tmp if tmp is not None else self._acc[lo:hi], peer, tag, done)

    def _fold(self) -> None:
        acc = self._acc
        for tmp, lo, hi in self._folds:
            self._t.combine(SUM, tmp, acc[lo:hi], acc[lo:hi])

    def _one_done(self) -> None:
        self._left -= 1
        if self._left:
            return
        self._fold()
        self._step()


# -- schedules (MPICH's algorithms on relative ranks v = (rank - root) % size) -----------------------
def _abs(v: int, root: int, size: int) -> int:
    return (v + root) % size


def _block(i: int, chunk: int, count: int, blocks: int = 1) -> tuple[int, int]:
    """Elements of `blocks` consecutive chunks starting at chunk i, clipped to the message."""
    return min(i * chunk, count), min((i + blocks) * chunk, count)


def binomial_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """Receive the whole message from the parent, then send it to each child, largest subtree first."""
    v = (rank - root) % size
    mask = 1
    while mask < size:
        if v & mask:
            yield [(RECV, _abs(v - mask, root, size), 0, count, 1)]
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < size:
            yield [(SEND, _abs(v + mask, root, size), 0, count, 1)]
        mask >>= 1


def _scatter(v: int, size: int, root: int, count: int, chunk: int) -> Iterator[Step]:
    """MPICH's binomial scatter for bcast: rank v ends up with chunk v (and its subtree's chunks)."""
    mask = 1
    while mask < size:
        if v & mask:
            lo, hi = v * chunk, min(count, (v + mask) * chunk)
            if hi > lo:
                yield [(RECV, _abs(v - mask, root, size), lo, hi, 2)]
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        child = v + mask
        if child < size:
            lo, hi = child * chunk, min(count, (child + mask) * chunk)
            if hi > lo:
                yield [(SEND, _abs(child, root, size), lo, hi, 2)]
        mask >>= 1


def _ring_allgather(v: int, size: int, root: int, count: int, chunk: int, tag: int) -> Iterator[Step]:
    left, right = _abs(v - 1, root, size), _abs(v + 1, root, size)
    j, jnext = v, (v - 1) % size
    for _ in range(size - 1):
        slo, shi = _block(j, chunk, count)
        rlo, rhi = _block(jnext, chunk, count)
        yield [(SEND, right, slo, shi, tag), (RECV, left, rlo, rhi, tag)]
        j, jnext = jnext, (jnext - 1) % size


def scatter_ring_allgather_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """Binomial scatter of size chunks, then a ring allgather of the chunks (size - 1 steps)."""
    v = (rank - root) % size
    chunk = -(-count // size)
    yield from _scatter(v, size, root, count, chunk)
    yield from _ring_allgather(v, size, root, count, chunk, 3)


def scatter_allgather_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """Binomial scatter, then a recursive-doubling allgather (log2 size steps; ring if size is not 2^k)."""
    if size & (size - 1):
        yield from scatter_ring_allgather_bcast(rank, size, root, count)
        return
    v = (rank - root) % size
    chunk = -(-count // size)
    yield from _scatter(v, size, root, count, chunk)
    mask, i = 1, 0
    while mask < size:
        partner = v ^ mask
        slo, shi = _block((v >> i) << i, chunk, count, mask)
        rlo, rhi = _block((partner >> i) << i, chunk, count, mask)
        peer = _abs(partner, root, size)
        yield [(SEND, peer, slo, shi, 3), (RECV, peer, rlo, rhi, 3)]
        mask <<= 1
        i += 1


def binomial_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """Receive and fold each child's whole contribution, smallest subtree first, then send to the parent."""
    v = (rank - root) % size
    mask = 1
    while mask < size:
        if not v & mask:
            child = v | mask
            if child < size:
                yield [(FOLD, _abs(child, root, size), 0, count, 4)]
        else:
            yield [(SEND, _abs(v & ~mask, root, size), 0, count, 4)]
            break
        mask <<= 1


def rabenseifner_allreduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """Reduce-scatter by recursive halving, then allgather by recursive doubling (MPICH's long-message
    Allreduce). With size not a power of two, the first 2*rem ranks first pair up (even -> odd)."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank >= 2 * rem or rank % 2:  # tmp_buf (count elements): the first fold's receive lands in it
        yield [(TOUCH, 0, count if rank < 2 * rem else _half_touched(rank - rem, count, pof2), count, 0)]
    if rank < 2 * rem:
        if rank % 2 == 0:
            yield [(SEND, rank + 1, 0, count, 5)]
            yield [(RECV, rank + 1, 0, count, 8)]
            return
        yield [(FOLD, rank - 1, 0, count, 5)]
        newrank = rank // 2
    else:
        newrank = rank - rem
    base, extra = divmod(count, pof2)

    def start(i: int) -> int:  # block i is [start(i), start(i + 1)); computed, not listed: O(log) per rank
        return i * base + min(i, extra)

    def real(newdst: int) -> int:
        return newdst * 2 + 1 if newdst < rem else newdst + rem

    def span(a: int, b: int) -> tuple[int, int]:
        return start(a), start(b)

    mask, send_idx, recv_idx, last_idx = 1, 0, 0, pof2
    while mask < pof2:
        newdst = newrank ^ mask
        dst = real(newdst)
        if newrank < newdst:
            send_idx = recv_idx + pof2 // (mask * 2)
            s, r = span(send_idx, last_idx), span(recv_idx, send_idx)
        else:
            recv_idx = send_idx + pof2 // (mask * 2)
            s, r = span(send_idx, recv_idx), span(recv_idx, last_idx)
        yield [(SEND, dst, s[0], s[1], 6), (FOLD, dst, r[0], r[1], 6)]
        send_idx = recv_idx
        mask <<= 1
        if mask < pof2:
            last_idx = recv_idx + pof2 // mask
    mask >>= 1
    while mask > 0:
        newdst = newrank ^ mask
        dst = real(newdst)
        if newrank < newdst:
            if mask != pof2 // 2:
                last_idx = last_idx + pof2 // (mask * 2)
            recv_idx = send_idx + pof2 // (mask * 2)
            s, r = span(send_idx, recv_idx), span(recv_idx, last_idx)
        else:
            recv_idx = send_idx - pof2 // (mask * 2)
            s, r = span(send_idx, last_idx), span(recv_idx, send_idx)
        yield [(SEND, dst, s[0], s[1], 7), (RECV, dst, r[0], r[1], 7)]
        if newrank > newdst:
            send_idx = recv_idx
        mask >>= 1
    if rank < 2 * rem:  # odd: hand the result to the even partner that sat out
        yield [(SEND, rank - 1, 0, count, 8)]


def _half_touched(newrank: int, count: int, pof2: int) -> int:
    """Elements of MPICH's recursive halving's first receive (into tmp_buf) at `newrank` of `pof2`;
    the later receives fall inside it (0 with a single rank)."""
    if pof2 < 2:
        return 0
    base, extra = divmod(count, pof2)
    half = pof2 // 2 * base + min(pof2 // 2, extra)
    return half if newrank % 2 == 0 else count - half


def ring_allreduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """Ring reduce-scatter (size - 1 steps), then ring allgather (size - 1 steps), blocks of count/size."""
    chunk = -(-count // size)
    left, right = (rank - 1) % size, (rank + 1) % size
    for i in range(size - 1):
        slo, shi = _block((rank - i) % size, chunk, count)
        rlo, rhi = _block((rank - i - 1) % size, chunk, count)
        yield [(SEND, right, slo, shi, 9), (FOLD, left, rlo, rhi, 9)]
    for i in range(size - 1):
        slo, shi = _block((rank + 1 - i) % size, chunk, count)
        rlo, rhi = _block((rank - i) % size, chunk, count)
        yield [(SEND, right, slo, shi, 10), (RECV, left, rlo, rhi, 10)]


# -- MPICH's reduce-scatter + gather Reduce ------------------------------------------------------------
def reduce_scatter_gather_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """MPIR_Reduce_intra_reduce_scatter_gather (commutative ops): odd ranks < 2*rem first send their
    data to rank - 1; recursive-halving reduce-scatter among pof2 ranks; binomial gather of the blocks
    to the root (an excluded odd root first gets block 0 from rank 0 and takes its place). With fewer
    elements than pof2 MPICH's selection takes the binomial Reduce instead, and so does this schedule."""
    pof2 = 1 << (size.bit_length() - 1)
    if count < pof2:
        yield from binomial_reduce(rank, size, root, count)
        return
    rem = size - pof2
    base, extra = divmod(count, pof2)

    def start(i: int) -> int:  # disps[i]: blocks of count/pof2, the first count % pof2 one larger
        return i * base + min(i, extra)

    def real(newdst: int) -> int:
        return newdst * 2 if newdst < rem else newdst + rem

    # MPICH allocates tmp_buf (count elements; the pre-step's or the first halving's receive lands in it)
    # and, off the root, a recvbuf it copies the contribution into
    touched = [(TOUCH, 0, count, count, 0)] if rank != root else []
    if rank < 2 * rem:
        if rank % 2 == 0:
            touched.append((TOUCH, 0, count, count, 0))
    else:
        touched.append((TOUCH, 0, _half_touched(rank - rem, count, pof2), count, 0))
    if touched:
        yield touched

    if rank < 2 * rem:
        if rank % 2:
            yield [(SEND, rank - 1, 0, count, 11)]
            newrank = -1
        else:
            yield [(FOLD, rank + 1, 0, count, 11)]
            newrank = rank // 2
    else:
        newrank = rank - rem
    send_idx = recv_idx = 0
    last_idx = pof2
    if newrank != -1:
        mask = 1
        while mask < pof2:
            newdst = newrank ^ mask
            dst = real(newdst)
            if newrank < newdst:
                send_idx = recv_idx + pof2 // (mask * 2)
                s, r = (start(send_idx), start(last_idx)), (start(recv_idx), start(send_idx))
            else:
                recv_idx = send_idx + pof2 // (mask * 2)
                s, r = (start(send_idx), start(recv_idx)), (start(recv_idx), start(last_idx))
            yield [(SEND, dst, s[0], s[1], 11), (FOLD, dst, r[0], r[1], 11)]
            send_idx = recv_idx
            mask <<= 1
            if mask < pof2:
                last_idx = recv_idx + pof2 // mask
    odd_root = root < 2 * rem and root % 2 == 1
    if odd_root:
        if rank == root:
            yield [(RECV, 0, 0, start(1), 12)]
            newrank, send_idx, last_idx = 0, 0, 2
        elif newrank == 0:
            yield [(SEND, root, 0, start(1), 12)]
            newrank = -1
        newroot = 0
    else:
        newroot = root // 2 if root < 2 * rem else root - rem
    if newrank == -1:
        return
    j = pof2.bit_length() - 2
    mask = pof2 >> 1
    while mask > 0:
        newdst = newrank ^ mask
        dst = root if newdst == 0 and odd_root else real(newdst)
        if newrank < newdst:
            if mask != pof2 // 2:
                last_idx = last_idx + pof2 // (mask * 2)
            recv_idx = send_idx + pof2 // (mask * 2)
            s, r = (start(send_idx), start(recv_idx)), (start(recv_idx), start(last_idx))
        else:
            recv_idx = send_idx - pof2 // (mask * 2)
            s, r = (start(send_idx), start(last_idx)), (start(recv_idx), start(send_idx))
        if (newdst >> j) == (newroot >> j):
            yield [(SEND, dst, s[0], s[1], 12)]
            return
        yield [(RECV, dst, r[0], r[1], 12)]
        if newrank > newdst:
            send_idx = recv_idx
        mask >>= 1
        j -= 1


# -- Open MPI's coll/base algorithms (ompi/mca/coll/base/coll_base_{bcast,reduce,allreduce}.c) --------
def ompi_segcount(segsize: int, itemsize: int, count: int) -> int:
    """COLL_BASE_COMPUTED_SEGCOUNT: elements per segment (segsize rounded to elements; 0: unsegmented)."""
    if itemsize <= segsize < itemsize * count:
        seg = segsize // itemsize
        return seg + 1 if segsize - seg * itemsize > itemsize >> 1 else seg
    return count


def _segments(lo: int, hi: int, segcount: int) -> list[tuple[int, int]]:
    return [(a, min(a + segcount, hi)) for a in range(lo, hi, segcount)] or [(lo, hi)]


def _bcast_generic(parent: Optional[int], children: list[int], segs: list[tuple[int, int]], tag: int) -> Iterator[Step]:
    """ompi_coll_base_bcast_intra_generic: the root isends segment i to every child and waits for them all;
    a non-root posts the receive of segment i+1, waits for segment i, then isends it to every child and
    waits for those sends (children: none for a leaf)."""
    if parent is None:
        for lo, hi in segs:
            yield [(SEND, c, lo, hi, tag) for c in children]
        return
    first: Step = [(POST, parent, segs[0][0], segs[0][1], tag)]
    for i, (lo, hi) in enumerate(segs):
        step = first + ([(POST, parent, *segs[i + 1], tag)] if i + 1 < len(segs) else [])
        yield [*step, (WAIT, parent, lo, hi, tag)]
        first = []
        if children:
            yield [(SEND, c, lo, hi, tag) for c in children]


def _reduce_generic(
    parent: Optional[int], children: list[int], segs: list[tuple[int, int]], tag: int
) -> Iterator[Step]:
    """ompi_coll_base_reduce_generic (commutative op, max_outstanding_reqs 0): a node with children, per
    segment and child, posts that receive, then waits for (and folds) the previous one; once the last
    child's part of segment i is folded it sends segment i to its parent (blocking). A leaf sends its
    segments with blocking sends."""
    if not children:
        if parent is not None:
            for lo, hi in segs:
                yield [(SEND, parent, lo, hi, tag)]
        return
    prev: Optional[Op] = None
    for s in range(len(segs) + 1):
        for i, child in enumerate(children):
            step: Step = []
            if s < len(segs):
                step.append((POSTFOLD, child, *segs[s], tag))
            if prev is not None:
                step.append(prev)
            yield step
            if i == 0 and s > 0 and parent is not None:
                yield [(SEND, parent, *segs[s - 1], tag)]
            if s == len(segs):
                break
            prev = (WAIT, child, *segs[s], tag)


def _chain(v: int, size: int, root: int) -> tuple[Optional[int], list[int]]:
    """ompi_coll_base_topo_build_chain(fanout 1): shifted rank v receives from v - 1, sends to v + 1."""
    parent = None if v == 0 else _abs(v - 1, root, size)
    return parent, ([_abs(v + 1, root, size)] if v + 1 < size else [])


def _in_order_bmtree(v: int, size: int, root: int) -> tuple[Optional[int], list[int]]:
    """ompi_coll_base_topo_build_in_order_bmtree: children v + 1, v + 2, v + 4, ... (smallest subtree first)."""
    children: list[int] = []
    mask = 1
    while mask < size:
        if v & mask:
            return _abs(v ^ mask, root, size), children
        if v | mask < size:
            children.append(_abs(v | mask, root, size))
        mask <<= 1
    return None, children


def _bintree(v: int, size: int, root: int) -> tuple[Optional[int], list[int]]:
    """ompi_coll_base_topo_build_tree(2): shifted ranks level by level; children v + 2^l, v + 2^(l+1)
    (level l of v), so odd shifted ranks form the left subtree and even ones the right."""
    level = (v + 1).bit_length() - 1
    delta = 1 << level
    children = [_abs(c, root, size) for c in (v + delta, v + 2 * delta) if c < size]
    if v == 0:
        return None, children
    sparent = v
    if sparent < 2:
        sparent = 0
    else:
        while sparent >= delta - 1:  # slimit = nodes on the levels above v = 2^level - 1
            sparent -= delta // 2
    return _abs(sparent, root, size), children


def _pipeline_segsize(size: int, nbytes: int) -> int:
    """The segment size Open MPI 4.0's fixed Bcast rule gives its pipeline at (size, bytes) (128K/64K/16K/8K)."""
    if size < 1.6134e-6 * nbytes + 2.1102:
        return 128 << 10
    if size < 2.3679e-6 * nbytes + 1.1787:
        return 64 << 10
    if size < 3.2118e-6 * nbytes + 8.7936:
        return 16 << 10
    return 8 << 10


def _pipeline_bcast(rank: int, size: int, root: int, count: int, segsize: int) -> Iterator[Step]:
    parent, children = _chain((rank - root) % size, size, root)
    segcount = ompi_segcount(segsize, 1, count)
    yield from _bcast_generic(parent, children, _segments(0, count, segcount), 13)


def ompi_pipeline_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_bcast_intra_pipeline: bcast_generic down a chain, segments of the size Open MPI
    4.0's fixed rule gives the pipeline at this (size, bytes) point."""
    return _pipeline_bcast(rank, size, root, count, _pipeline_segsize(size, count))


def _split_bintree_bcast(rank: int, size: int, root: int, count: int, segsize: int) -> Iterator[Step]:
    if size == 1:
        return
    counts = (count - count // 2, count // 2)
    if counts[0] == 0 or counts[1] == 0 or segsize > counts[0] or segsize > counts[1]:
        yield from _pipeline_bcast(rank, size, root, count, segsize)  # "call linear version": the chain
        return
    segcount = max(segsize, 1) if segsize > 0 else 0
    halves = ((0, counts[0]), (counts[0], count))
    segs = [_segments(lo, hi, segcount or hi - lo) for lo, hi in halves]
    v = (rank - root) % size
    lr = (v + 1) % 2
    parent, children = _bintree(v, size, root)
    tag = 14
    if parent is None:  # root: blocking sends, alternating between the two halves segment by segment
        for s in range(len(segs[0])):
            for i, child in enumerate(children[:2]):
                if s < len(segs[i]):
                    yield [(SEND, child, *segs[i][s], tag)]
    elif children:  # post the next receive, wait for the previous segment, blocking sends to the children
        mine = segs[lr]
        first: Step = [(POST, parent, *mine[0], tag)]
        for s, seg in enumerate(mine):
            nxt = [(POST, parent, *mine[s + 1], tag)] if s + 1 < len(mine) else []
            yield [*first, *nxt, (WAIT, parent, *seg, tag)]
            first = []
            for child in children:
                yield [(SEND, child, *seg, tag)]
    else:
        for seg in segs[lr]:
            yield [(RECV, parent, *seg, tag)]
    (mlo, mhi), (olo, ohi), (rlo, rhi) = halves[lr], halves[1 - lr], halves[1]
    pair = (rank + 1) % size if lr == 0 else (rank - 1) % size
    if size % 2 and rank != root:
        yield [(SEND, pair, mlo, mhi, 15), (RECV, pair, olo, ohi, 15)]
    elif size % 2 == 0:
        last = (root + size - 1) % size
        if rank == root:
            yield [(SEND, last, rlo, rhi, 15)]
        elif rank == last:
            yield [(RECV, root, rlo, rhi, 15)]
        else:
            yield [(SEND, pair, mlo, mhi, 15), (RECV, pair, olo, ohi, 15)]


def _split_bintree_segsize(size: int, nbytes: int) -> int:
    """Open MPI 4.0's fixed Bcast rule: split binary tree with 1 KiB segments below 370728 bytes, 8 KiB above."""
    return 1024 if nbytes < 370728 else 8 << 10


def ompi_split_bintree_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_bcast_intra_split_bintree: each half of the message goes down one subtree of a binary
    tree (segmented, blocking sends), then each rank swaps halves with its pair in the other subtree."""
    return _split_bintree_bcast(rank, size, root, count, _split_bintree_segsize(size, count))


def _reduce_pipeline_segsize(size: int, nbytes: int) -> int:
    """The segment size of Open MPI 4.0's fixed Reduce rule for its pipeline branches (1K, 32K, 64K)."""
    if size > 0.0410 / 1024 * nbytes + 9.7128:
        return 1024
    if size > 0.0033 / 1024 * nbytes + 1.6761:
        return 32 << 10
    return 64 << 10


def _tree_reduce(rank: int, size: int, root: int, count: int, segsize: int, tree: Callable[..., Any]) -> Iterator[Step]:
    parent, children = tree((rank - root) % size, size, root)
    segcount = ompi_segcount(segsize, 4, count)
    yield from _reduce_generic(parent, children, _segments(0, count, segcount), 16)


def ompi_pipeline_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_reduce_intra_pipeline: reduce_generic up a chain, segments as Open MPI 4.0's rule."""
    return _tree_reduce(rank, size, root, count, _reduce_pipeline_segsize(size, 4 * count), _chain)


def ompi_binomial_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_reduce_intra_binomial, unsegmented (what Open MPI 5's rule passes): reduce_generic on
    the in-order binomial tree."""
    return _tree_reduce(rank, size, root, count, 0, _in_order_bmtree)


def _blockcount(count: int, blocks: int) -> tuple[int, int, int]:
    """COLL_BASE_COMPUTE_BLOCKCOUNT: (split index, early count, late count)."""
    late = count // blocks
    split = count % blocks
    return split, late + (1 if split else 0), late


def _ring_segmented_allreduce(rank: int, size: int, count: int, segsize: int) -> Iterator[Step]:
    if size == 1:
        return
    segcount = ompi_segcount(segsize, 4, count)
    if count < size * segcount:
        phases = 1  # ompi_coll_base_allreduce_intra_ring: the same loop, one phase of whole blocks
    else:
        phases = count // (size * segcount)
        rest = count % (size * segcount)
        if rest >= size and rest > (size * segcount) // 2:
            phases += 1
    split, early, late = _blockcount(count, size)

    def block(b: int) -> tuple[int, int]:
        return (b * early, early) if b < split else (b * late + split, late)

    def piece(b: int, phase: int) -> tuple[int, int]:
        off, n = block(b)
        sp, e, la = _blockcount(n, phases)
        po = phase * e if phase < sp else phase * la + sp
        return off + po, off + po + (e if phase < sp else la)

    right, left, tag = (rank + 1) % size, (rank - 1) % size, 17
    for phase in range(phases):
        # post the receive of block r-1, send block r; then for k = 2 .. size-1 post the next receive,
        # wait for and fold block r-k+1, send it on; finally wait for and fold block r+1
        incoming = piece((rank - 1) % size, phase)
        yield [(POSTFOLD, left, *incoming, tag), (SEND, right, *piece(rank, phase), tag)]
        for k in range(2, size):
            nxt = piece((rank - k) % size, phase)
            yield [(POSTFOLD, left, *nxt, tag), (WAIT, left, *incoming, tag)]
            yield [(SEND, right, *incoming, tag)]
            incoming = nxt
        yield [(WAIT, left, *incoming, tag)]
    for k in range(size - 1):  # ring allgather of the reduced blocks, Sendrecv
        s_off, s_n = block((rank + 1 - k) % size)
        r_off, r_n = block((rank - k) % size)
        yield [(SEND, right, s_off, s_off + s_n, 18), (RECV, left, r_off, r_off + r_n, 18)]


def ompi_ring_segmented_allreduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_allreduce_intra_ring_segmented with the 1 MiB segments of Open MPI 4.0's fixed rule:
    the ring reduce-scatter runs in phases of size segments (pre-posted receives, blocking sends), then
    a ring allgather; with count < size * segment elements it is ompi_coll_base_allreduce_intra_ring."""
    return _ring_segmented_allreduce(rank, size, count, 1 << 20)


def ompi_ring_allreduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_allreduce_intra_ring: one phase of the segmented ring's loop (whole blocks)."""
    return _ring_segmented_allreduce(rank, size, count, 0)


# -- what Open MPI's coll/tuned fixed rules pick --------------------------------------------------------
class NotModelled(ValueError):
    """The rule picks an algorithm this module does not model at that point."""


def ompi_tuned_choice(collective: str, size: int, nbytes: int, version: str = "5") -> tuple[str, int]:
    """(algorithm, segment bytes) that coll/tuned's fixed decision rule picks for a commutative op.

    version "5": ompi/mca/coll/tuned/coll_tuned_decision_fixed.c since Open MPI 4.1 (v5.0.x, main):
    tables by (communicator size, total bytes), segment size 0 (unsegmented). version "4.0": the same
    file in v4.0.x: the a/b lines in bytes that pick pipelines and their segment sizes."""
    if version == "5":
        return _tuned5(collective, size, nbytes), 0
    if version == "4.0":
        return _tuned40(collective, size, nbytes)
    raise ValueError(f"Open MPI rule version must be '5' or '4.0', got {version!r}")


def _first(table: list[tuple[int, Any]], x: int, last: Any) -> Any:
    for bound, value in table:
        if x < bound:
            return value
    return last


_BCAST5 = [  # (communicator size bound, [(bytes bound, alg)], alg above) from ompi_coll_tuned_bcast_intra_dec_fixed
    (4, [(32, 3), (256, 5), (512, 3), (1024, 7), (32768, 1), (131072, 5), (262144, 2), (524288, 1), (1048576, 6)], 5),
    (8, [(64, 5), (128, 6), (2048, 5), (8192, 6), (1048576, 1)], 2),
    (16, [(8, 7), (64, 5), (4096, 7), (16384, 5), (32768, 6)], 1),
    (32, [(4096, 7), (1048576, 6)], 8),
    (64, [(2048, 6)], 7),
    (128, [], 7),
    (256, [(2, 6), (16384, 5), (32768, 1), (65536, 5)], 7),
    (1024, [(16384, 7), (32768, 4)], 7),
    (2048, [(524288, 7)], 8),
    (4096, [(262144, 7)], 8),
]
_BCAST5_LAST = ([(8192, 7), (16384, 5), (262144, 7)], 8)
_BCAST_ALGS = {
    1: "basic_linear",
    2: "chain",
    3: "pipeline",
    4: "split_binary_tree",
    5: "binary_tree",
    6: "binomial",
    7: "knomial",
    8: "scatter_allgather",
    9: "scatter_allgather_ring",
}
_REDUCE5 = [  # commutative branch of ompi_coll_tuned_reduce_intra_dec_fixed
    (4, [(8, 7), (16, 4), (32, 3), (262144, 1), (524288, 3), (1048576, 2)], 3),
    (8, [(4096, 4), (65536, 2), (262144, 5), (524288, 1), (1048576, 5)], 1),
    (16, [(8192, 4)], 5),
    (32, [(4096, 4)], 5),
    (256, [], 5),
    (512, [(8192, 5), (16384, 6)], 5),
    (2048, [], 5),
    (4096, [(512, 5), (1024, 6), (8192, 5), (16384, 6)], 5),
]
_REDUCE5_LAST = ([(16, 5), (32, 6), (1024, 5), (2048, 6), (8192, 5), (16384, 6)], 5)
_REDUCE_ALGS = {
    1: "linear",
    2: "chain",
    3: "pipeline",
    4: "binary",
    5: "binomial",
    6: "in-order_binary",
    7: "rabenseifner",
}
_ALLREDUCE5 = [  # commutative branch of ompi_coll_tuned_allreduce_intra_dec_fixed
    (4, [(8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5)], 6),
    (8, [(16, 4), (8192, 3)], 6),
    (16, [(8192, 3)], 6),
    (32, [(64, 5), (4096, 3)], 6),
    (64, [(128, 5)], 6),
    (128, [(262144, 3)], 6),
    (256, [(131072, 2), (262144, 3)], 6),
    (512, [(4096, 2)], 6),
    (2048, [(2048, 2), (16384, 3)], 6),
    (4096, [(2048, 2), (4096, 5), (16384, 3)], 6),
]
_ALLREDUCE5_LAST = ([(2048, 2), (16384, 5), (32768, 3)], 6)
_ALLREDUCE_ALGS = {
    1: "basic_linear",
    2: "nonoverlapping",
    3: "recursive_doubling",
    4: "ring",
    5: "segmented_ring",
    6: "rabenseifner",
}


def _tuned5(collective: str, size: int, nbytes: int) -> str:
    tables = {
        "bcast": (_BCAST5, _BCAST5_LAST, _BCAST_ALGS),
        "reduce": (_REDUCE5, _REDUCE5_LAST, _REDUCE_ALGS),
        "allreduce": (_ALLREDUCE5, _ALLREDUCE5_LAST, _ALLREDUCE_ALGS),
    }
    rows, last, names = tables[collective]
    by_bytes, above = _first([(bound, (t, a)) for bound, t, a in rows], size, last)
    return names[_first(by_bytes, nbytes, above)]


def _tuned40(collective: str, size: int, m: int) -> tuple[str, int]:
    if collective == "bcast":
        if m < 2048:
            return "binomial", 0
        if m < 370728:
            return "split_binary_tree", 1024
        if size < 1.6134e-6 * m + 2.1102:
            return "pipeline", 128 << 10
        if size < 13:
            return "split_binary_tree", 8 << 10
        return "pipeline", _pipeline_segsize(size, m)
    if collective == "reduce":
        if size < 8 and m < 512:
            return "linear", 0
        if (size < 8 and m < 20480) or m < 2048:
            return "binomial", 0
        if size > 0.6016 / 1024 * m + 1.3496:
            return "binomial", 1024
        if size > 0.0410 / 1024 * m + 9.7128:
            return "pipeline", 1024
        if size > 0.0422 / 1024 * m + 1.1614:
            return "binary", 32 << 10
        return "pipeline", _reduce_pipeline_segsize(size, m)
    if m < 10000:
        return "recursive_doubling", 0
    if m // 4 > size:
        return ("ring", 0) if size * (1 << 20) >= m else ("segmented_ring", 1 << 20)
    return "nonoverlapping", 0


def _tuned_schedule(collective: str, version: str) -> Schedule:
    itemsize = ITEMSIZE[collective]

    def schedule(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
        alg, segsize = ompi_tuned_choice(collective, size, count * itemsize, version)
        if collective == "bcast" and alg == "pipeline":
            return _pipeline_bcast(rank, size, root, count, segsize)
        if collective == "bcast" and alg == "split_binary_tree":
            return _split_bintree_bcast(rank, size, root, count, segsize)
        if collective == "bcast" and alg == "scatter_allgather" and not size & (size - 1):
            return scatter_allgather_bcast(rank, size, root, count)
        if collective == "reduce" and alg in ("pipeline", "binomial"):
            tree = _chain if alg == "pipeline" else _in_order_bmtree
            return _tree_reduce(rank, size, root, count, segsize, tree)
        if collective == "allreduce" and alg in ("ring", "segmented_ring"):
            return _ring_segmented_allreduce(rank, size, count, segsize)
        if collective == "allreduce" and alg == "rabenseifner":
            return rabenseifner_allreduce(rank, size, root, count)
        where = f"{size} ranks, {count * itemsize} bytes"
        raise NotModelled(f"Open MPI {version}'s rule picks {collective} {alg!r} at {where}: not modelled")

    schedule.__doc__ = f"What coll/tuned's fixed rule of Open MPI {version} picks for {collective}."
    return schedule


# -- MPICH's choices, flat and node-aware (SMP) ------------------------------------------------------
def mpich_choice(collective: str, size: int, nbytes: int) -> str:
    """The baseline name of what MPICH 5 runs for `collective` on `size` ranks of one node under mpi4py's
    THREAD_MULTIPLE (its shared-memory release/gather collectives need a single-threaded library, so
    the generic MPIR algorithms run; `maint/tuning/coll/mpir/generic.json`): Bcast binomial below 8
    ranks or at 12 KiB and less, scatter + recursive-doubling allgather up to 512 KiB on 2^k ranks,
    scatter + ring allgather above; Reduce reduce-scatter + gather above 2 KiB (binomial below);
    Allreduce reduce-scatter + allgather (Rabenseifner)."""
    if collective == "bcast":
        if size < 8 or nbytes <= 12 << 10:
            return "binomial"
        if nbytes <= 512 << 10 and size & (size - 1) == 0:
            return "scatter_allgather"
        return "scatter_ring_allgather"
    if collective == "reduce":
        return "binomial" if nbytes <= 2 << 10 else "reduce_scatter_gather"
    return "rabenseifner"


def _on(members: list[int], collective: str, rank: int, root: int, count: int, tags: int) -> Iterator[Step]:
    """MPICH's choice for `collective` run by the ranks `members` (absolute ranks, in order) as a
    communicator of their own rooted at `root`; its tags moved up by `tags` (one range per phase)."""
    if len(members) < 2 or rank not in members:
        return
    schedule = cast(
        Schedule, BASELINES[mpich_choice(collective, len(members), count * ITEMSIZE[collective])][collective]
    )
    mine, top = members.index(rank), members.index(root)
    for step in schedule(mine, len(members), top, count):
        yield [(kind, members[peer], lo, hi, tag + tags) for kind, peer, lo, hi, tag in step]


def _smp_layout(rank: int, size: int, root: int, rpn: int) -> tuple[list[int], list[int], int, int]:
    """(the ranks of this rank's node, the node leaders (each node's lowest rank), this node's leader,
    the root's node's leader) for nodes of `rpn` consecutive ranks."""
    nodes = -(-size // rpn)
    node = rank // rpn
    members = list(range(node * rpn, min((node + 1) * rpn, size)))
    return members, [n * rpn for n in range(nodes)], node * rpn, root // rpn * rpn


def mpich_smp_bcast(rank: int, size: int, root: int, count: int, rpn: int = 1) -> Iterator[Step]:
    """MPIR_Bcast_intra_smp: a root that is not its node's leader first sends to it; the leaders
    broadcast among themselves (MPICH's choice for that many ranks); each leader then broadcasts inside
    its node (the root's node too, as MPICH does)."""
    members, leaders, leader, top = _smp_layout(rank, size, root, rpn)
    if root != top:
        if rank == root:
            yield [(SEND, top, 0, count, 100)]
        elif rank == top:
            yield [(RECV, root, 0, count, 100)]
    if rank == leader:
        yield from _on(leaders, "bcast", rank, top, count, 200)
    yield from _on(members, "bcast", rank, leader, count, 300)


def mpich_smp_reduce(rank: int, size: int, root: int, count: int, rpn: int = 1) -> Iterator[Step]:
    """MPIR_Reduce_intra_smp: each node reduces to its leader; the leaders reduce to the root's node's
    leader; that leader sends the result to the root if the root is not it."""
    members, leaders, leader, top = _smp_layout(rank, size, root, rpn)
    yield from _on(members, "reduce", rank, leader, count, 100)
    if rank == leader:
        yield from _on(leaders, "reduce", rank, top, count, 200)
    if root != top:
        if rank == top:
            yield [(SEND, root, 0, count, 300)]
        elif rank == root:
            yield [(RECV, top, 0, count, 300)]


def mpich_smp_allreduce(rank: int, size: int, root: int, count: int, rpn: int = 1) -> Iterator[Step]:
    """MPIR_Allreduce_intra_smp: each node reduces to its leader, the leaders allreduce among themselves,
    each leader broadcasts the result inside its node."""
    members, leaders, leader, _ = _smp_layout(rank, size, 0, rpn)
    yield from _on(members, "reduce", rank, leader, count, 100)
    if rank == leader:
        yield from _on(leaders, "allreduce", rank, leader, count, 200)
    yield from _on(members, "bcast", rank, leader, count, 300)


for _smp in (mpich_smp_bcast, mpich_smp_reduce, mpich_smp_allreduce):
    _smp.node_aware = True  # type: ignore[attr-defined]  # baseline_starter passes ranks_per_node


# -- Open MPI 5's coll/han: a node level and a nodes level, segments pipelined across them -------------
HAN_SEGSIZE = 65536
"""coll_han_{bcast,reduce,allreduce}_segsize: 64 KiB segments (coll/han/coll_han_component.c, v5.0.x)."""
_KNOMIAL_RADIX = 4  # coll_tuned_bcast_algorithm_knomial_radix (coll/tuned/coll_tuned_bcast_decision.c)
_NBC_REDUCE_FRAGSIZE = 8192  # libnbc's Ireduce chain fragment: segsize = 16384 / 2 (nbc_ireduce.c)


def _bmtree(v: int, size: int, root: int) -> tuple[Optional[int], list[int]]:
    """ompi_coll_base_topo_build_bmtree: parent v without its highest bit; children v + 2^k for every
    2^k > v (smallest subtree first). Open MPI's binomial Bcast tree (not the in-order one of its Reduce)."""
    mask = 1 << v.bit_length()  # opal_next_poweroftwo(v): the power of two above v
    parent = None if v == 0 else _abs(v ^ (mask >> 1), root, size)
    children: list[int] = []
    while mask < size and v + mask < size:
        children.append(_abs(v + mask, root, size))
        mask <<= 1
    return parent, children


def _kmtree(v: int, size: int, root: int) -> tuple[Optional[int], list[int]]:
    """ompi_coll_base_topo_build_kmtree with tuned's radix 4: parent v rounded down to its lowest non-zero
    radix digit's place; children v + r * 4^j below that place, the farthest first."""
    radix, mask = _KNOMIAL_RADIX, 1
    parent = None
    while mask < size:
        if v % (radix * mask):
            parent = _abs(v // (radix * mask) * (radix * mask), root, size)
            break
        mask *= radix
    mask //= radix
    children: list[int] = []
    while mask > 0:
        children += [_abs(v + mask * r, root, size) for r in range(1, radix) if v + mask * r < size]
        mask //= radix
    return parent, children


def _tree_bcast(rank: int, size: int, root: int, count: int, tree: Callable[..., Any]) -> Iterator[Step]:
    """bcast_generic on `tree`, unsegmented (Open MPI 5's fixed rule passes segment size 0)."""
    parent, children = tree((rank - root) % size, size, root)
    return _bcast_generic(parent, children, [(0, count)], 19)


def _linear_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_bcast_intra_basic_linear (and libnbc's linear Ibcast): the root posts a send to every
    other rank at once and waits for them all; the others receive."""
    if rank != root:
        yield [(RECV, root, 0, count, 20)]
    elif size > 1:
        yield [(SEND, peer, 0, count, 20) for peer in range(size) if peer != root]


def _linear_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """ompi_coll_base_reduce_intra_basic_linear: the others send to the root, which receives and folds
    their contributions one at a time, from rank size - 1 down to 0."""
    if rank != root:
        yield [(SEND, root, 0, count, 21)]
        return
    for peer in range(size - 1, -1, -1):
        if peer != root:
            yield [(FOLD, peer, 0, count, 21)]


def _tuned_pick(collective: str, size: int, nbytes: int) -> Schedule:
    """The schedule of what coll/tuned's fixed rule of Open MPI 5 picks for `collective` on `size` ranks
    and `nbytes` (commutative op, unsegmented): what HAN runs inside each node, for the first Bcast
    segment between nodes, and where it falls back. Besides what `ompi_tuned` models (left as it was) it
    models Bcast basic linear, chain, binary tree, binomial, k-nomial and Reduce linear, chain, binary.
    NotModelled for the rest (in-order binary and Rabenseifner Reduce, scatter-allgather Bcast on other
    than 2^k ranks, and what `ompi_tuned` does not model for Allreduce)."""
    if collective == "allreduce":
        return _tuned_schedule("allreduce", "5")
    alg = _tuned5(collective, size, nbytes)
    if collective == "bcast":
        if alg == "basic_linear":
            return _linear_bcast
        if alg in ("chain", "pipeline"):  # both bcast_generic down a fanout-1 chain at segment size 0
            return partial(_pipeline_bcast, segsize=0)
        if alg == "split_binary_tree":
            return partial(_split_bintree_bcast, segsize=0)
        trees = {"binary_tree": _bintree, "binomial": _bmtree, "knomial": _kmtree}
        if alg in trees:
            return partial(_tree_bcast, tree=trees[alg])
        if alg == "scatter_allgather" and not size & (size - 1):
            return scatter_allgather_bcast
    elif alg == "linear":
        return _linear_reduce
    elif alg in ("chain", "pipeline", "binary", "binomial"):
        tree = {"binary": _bintree, "binomial": _in_order_bmtree}.get(alg, _chain)
        return partial(_tree_reduce, segsize=0, tree=tree)
    raise NotModelled(f"Open MPI 5's tuned rule picks {collective} {alg!r} at {size} ranks, {nbytes} B: not modelled")


def _swap(rank: int, root: int) -> int:
    """libnbc's RANK2VRANK / VRANK2RANK: ranks 0 and root trade places."""
    return root if rank == 0 else 0 if rank == root else rank


def _nbc_binomial_bcast(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """libnbc's binomial Ibcast (bcast_sched_binomial): vrank v receives from v without its highest bit,
    then sends to v + 2^r for every 2^r > v, all in one round."""
    v = _swap(rank, root)
    if v:
        yield [(RECV, _swap(v - (1 << (v.bit_length() - 1)), root), 0, count, 22)]
    sends = [1 << r for r in range((size - 1).bit_length()) if v < 1 << r and v + (1 << r) < size]
    if sends:
        yield [(SEND, _swap(v + d, root), 0, count, 22) for d in sends]


def _nbc_binomial_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """libnbc's binomial Ireduce (red_sched_binomial, commutative op): vrank v receives and folds
    v + 2^(r-1) in round r while v is a multiple of 2^r, then sends to v - 2^(r-1)."""
    v = _swap(rank, root)
    for r in range(1, (size - 1).bit_length() + 1):
        half = 1 << (r - 1)
        if v % (1 << r):
            yield [(SEND, _swap(v - half, root), 0, count, 23)]
            return
        if v + half < size:
            yield [(FOLD, _swap(v + half, root), 0, count, 23)]


def _nbc_chain_reduce(rank: int, size: int, root: int, count: int, itemsize: int = 4) -> Iterator[Step]:
    """libnbc's chain Ireduce (red_sched_chain): ceil(bytes / 8 KiB) fragments of count // fragments
    elements (the last takes the rest); vrank v receives and folds each from v + 1, then sends it to v - 1."""
    v = _swap(rank, root)
    frags = -(-count * itemsize // _NBC_REDUCE_FRAGSIZE)
    each = count // frags
    for f in range(frags):
        lo, hi = f * each, count if f == frags - 1 else (f + 1) * each
        if v != size - 1:
            yield [(FOLD, _swap(v + 1, root), lo, hi, 24)]
        if v != 0:
            yield [(SEND, _swap(v - 1, root), lo, hi, 24)]


def _nbc_redscat_gather_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """libnbc's Ireduce by reduce-scatter and gather (red_sched_redscat_gather): the first 2 rem ranks
    swap halves in pairs and the odd ones drop out; recursive halving (windows split at wsize // 2) among
    2^k ranks; binomial gather of the pieces to the root (an odd dropped-out root gets vrank 0's piece first)."""
    nsteps = size.bit_length() - 1
    pof2, rem = 1 << nsteps, size - (1 << nsteps)
    rindex, sindex, rcount, scount = [0] * nsteps, [0] * nsteps, [0] * nsteps, [0] * nsteps

    def real(vdest: int) -> int:
        return vdest * 2 if vdest < rem else vdest + rem

    vrank = rank - rem
    if rank < 2 * rem:
        half = count // 2
        if rank % 2:
            yield [(SEND, rank - 1, 0, half, 25), (FOLD, rank - 1, half, count, 25)]
            yield [(SEND, rank - 1, half, count, 25)]
            vrank = -1
        else:
            yield [(SEND, rank + 1, half, count, 25), (FOLD, rank + 1, 0, half, 25)]
            yield [(RECV, rank + 1, half, count, 25)]
            vrank = rank // 2
    if vrank != -1:
        step, wsize, mask = 0, count, 1
        while mask < pof2:
            dest = real(vrank ^ mask)
            if rank < dest:
                rcount[step] = wsize // 2
                scount[step] = wsize - rcount[step]
                sindex[step] = rindex[step] + rcount[step]
            else:
                scount[step] = wsize // 2
                rcount[step] = wsize - scount[step]
                rindex[step] = sindex[step] + scount[step]
            s, r = sindex[step], rindex[step]
            yield [(SEND, dest, s, s + scount[step], 25), (FOLD, dest, r, r + rcount[step], 25)]
            if step + 1 < nsteps:
                rindex[step + 1] = sindex[step + 1] = rindex[step]
                wsize = rcount[step]
                step += 1
            mask <<= 1
    odd_root = root < 2 * rem and root % 2 == 1
    vroot = 0 if odd_root else root // 2 if root < 2 * rem else root - rem
    if odd_root and rank == root:  # take vrank 0's place: its windows, and its piece from it
        wsize = count
        for step in range(nsteps):
            rcount[step], scount[step] = wsize // 2, wsize - wsize // 2
            rindex[step], sindex[step] = 0, wsize // 2
            wsize //= 2
        yield [(RECV, 0, 0, rcount[nsteps - 1], 26)]
        vrank = 0
    elif odd_root and vrank == 0:
        yield [(SEND, root, 0, rcount[nsteps - 1], 26)]
        vrank = -1
    if vrank == -1:
        return
    step, mask = nsteps - 1, pof2 >> 1
    while mask > 0:
        vdest = vrank ^ mask
        dest = root if vdest == 0 and odd_root else real(vdest)
        if vdest >> step == vroot >> step:
            yield [(SEND, dest, rindex[step], rindex[step] + rcount[step], 26)]
            return
        yield [(RECV, dest, sindex[step], sindex[step] + scount[step], 26)]
        step -= 1
        mask >>= 1


def _nbc_pick(collective: str, size: int, count: int) -> Schedule:
    """What libnbc (Open MPI 5's defaults, commutative op) runs for a non-blocking `collective` of
    `count` elements on `size` ranks: Ibcast linear up to 4 ranks, binomial above (ibcast_skip_dt_decision
    is true: size alone decides); Ireduce reduce-scatter + gather above 2 ranks when count >= 2^floor(log2
    size), else binomial above 4 ranks or below 64 KiB, else the chain of 8 KiB fragments."""
    if collective == "bcast":
        return _linear_bcast if size <= 4 else _nbc_binomial_bcast
    if size > 2 and count >= 1 << (size.bit_length() - 1):
        return _nbc_redscat_gather_reduce
    if size > 4 or count * ITEMSIZE["reduce"] < 65536:
        return _nbc_binomial_reduce
    return _nbc_chain_reduce


def _han_runs(collective: str, size: int, rpn: int) -> bool:
    """Whether HAN runs its own algorithm: not when one node holds every rank (comm_query disqualifies it)
    nor with one rank per node (mca_coll_han_comm_create: max local peers 1), nor for Bcast and Reduce on
    nodes of unequal size (are_ppn_imbalanced; its Allreduce does not check). Otherwise tuned runs."""
    if rpn < 2 or size <= rpn:
        return False
    return collective == "allreduce" or size % rpn == 0


class _HanComms:
    """A rank's two HAN communicators for nodes of `rpn` consecutive ranks (split by shared memory, then
    by node-local rank): its node's ranks, and the ranks of every node whose local rank is `local`."""

    __slots__ = ("node", "local", "members", "ups")

    def __init__(self, rank: int, size: int, rpn: int, local: int) -> None:
        self.node, self.local = divmod(rank, rpn)
        self.members = list(range(self.node * rpn, min(size, (self.node + 1) * rpn)))
        self.ups = [n * rpn + local for n in range(-(-size // rpn))]


def _sub(schedule: Schedule, me: int, members: list[int], root: int, seg: tuple[int, int], tag: int) -> Iterator[Step]:
    """`schedule` run as a communicator of the ranks `members` (absolute, in order; `me` indexes this rank)
    rooted at member `root`, over the elements `seg` of the message; its tags moved up by `tag`."""
    if len(members) < 2:
        return
    lo, hi = seg
    for step in schedule(me, len(members), root, hi - lo):
        yield [(kind, members[peer], a + lo, b + lo, t + tag) for kind, peer, a, b, t in step]


def _task(ups: list[Iterator[Step]], lows: list[Iterator[Step]]) -> Steps:
    """One HAN task on one rank: the non-blocking inter-node collectives it starts (`ups`; none off the
    nodes level) run alongside its blocking intra-node ones (`lows`, one after the other), each walking
    its own steps (libnbc progresses while the rank waits in tuned); the task ends when all have."""
    if ups:
        yield Together(*ups, chain(*lows))
    else:
        yield from chain(*lows)


Picks = dict[tuple[int, int], Schedule]  # (communicator size, segment elements) -> tuned's pick
_UP0, _UP_BCAST, _UP_REDUCE, _LOW_BCAST, _LOW_REDUCE = 400, 500, 600, 700, 800  # tag ranges of HAN's parts


def _han_segments(count: int, itemsize: int) -> list[tuple[int, int]]:
    return _segments(0, count, ompi_segcount(HAN_SEGSIZE, itemsize, count))


def _low_picks(collective: str, sizes: set[int], segs: list[tuple[int, int]]) -> Picks:
    """tuned's pick for each (node size, segment elements) HAN meets (NotModelled raised here, up front)."""
    itemsize = ITEMSIZE[collective]
    lengths = {hi - lo for lo, hi in segs}
    return {(n, c): _tuned_pick(collective, n, c * itemsize) for n in sizes if n > 1 for c in lengths}


def ompi_han_bcast(rank: int, size: int, root: int, count: int, rpn: int = 1) -> Steps:
    """mca_coll_han_bcast_intra (coll_han_bcast.c), Open MPI 5's default Bcast on several nodes of equal
    size: 64 KiB segments; the ranks with the root's node-local rank form the nodes level. Segment 0 goes
    between nodes by tuned's blocking Bcast (task t0), then task t1 for each segment i: libnbc's Ibcast of
    segment i+1 between nodes, overlapped with tuned's Bcast of segment i inside each node."""
    if not _han_runs("bcast", size, rpn):
        return _tuned_pick("bcast", size, count)(rank, size, root, count)
    segs = _han_segments(count, 1)
    nodes = size // rpn
    up0 = _tuned_pick("bcast", nodes, segs[0][1] - segs[0][0])
    return _han_bcast(rank, size, root, segs, rpn, up0, _low_picks("bcast", {rpn}, segs))


def _han_bcast(
    rank: int, size: int, root: int, segs: list[tuple[int, int]], rpn: int, up0: Schedule, lows: Picks
) -> Steps:
    c = _HanComms(rank, size, rpn, root % rpn)
    leader, up_root, nbc, n = c.local == root % rpn, root // rpn, _nbc_pick("bcast", len(c.ups), 0), len(segs)

    def low(i: int) -> Iterator[Step]:
        return _sub(lows[rpn, segs[i][1] - segs[i][0]], c.local, c.members, root % rpn, segs[i], _LOW_BCAST)

    if leader:
        yield from _sub(up0, c.node, c.ups, up_root, segs[0], _UP0)
    for i in range(n):
        ahead = leader and i + 1 < n
        yield from _task([_sub(nbc, c.node, c.ups, up_root, segs[i + 1], _UP_BCAST)] if ahead else [], [low(i)])


def ompi_han_reduce(rank: int, size: int, root: int, count: int, rpn: int = 1) -> Steps:
    """mca_coll_han_reduce_intra (coll_han_reduce.c), Open MPI 5's default Reduce (commutative op) on
    several nodes of equal size: 64 KiB segments; tuned's Reduce of segment 0 inside each node to the
    rank with the root's node-local rank (task t0), then task t1 for each segment i: libnbc's Ireduce of
    segment i between those ranks to the root, overlapped with tuned's Reduce of segment i+1 in each node."""
    if not _han_runs("reduce", size, rpn):
        return _tuned_pick("reduce", size, count * ITEMSIZE["reduce"])(rank, size, root, count)
    segs = _han_segments(count, ITEMSIZE["reduce"])
    return _han_reduce(rank, size, root, segs, rpn, _low_picks("reduce", {rpn}, segs))


def _han_reduce(rank: int, size: int, root: int, segs: list[tuple[int, int]], rpn: int, lows: Picks) -> Steps:
    c = _HanComms(rank, size, rpn, root % rpn)
    leader, up_root, n = c.local == root % rpn, root // rpn, len(segs)

    def low(i: int) -> Iterator[Step]:
        if i >= n:
            return iter(())
        return _sub(lows[rpn, segs[i][1] - segs[i][0]], c.local, c.members, root % rpn, segs[i], _LOW_REDUCE)

    def up(i: int) -> list[Iterator[Step]]:
        nbc = _nbc_pick("reduce", len(c.ups), segs[i][1] - segs[i][0])
        return [_sub(nbc, c.node, c.ups, up_root, segs[i], _UP_REDUCE)] if leader else []

    yield from low(0)
    for i in range(n):
        yield from _task(up(i), [low(i + 1)])


def ompi_han_allreduce(rank: int, size: int, root: int, count: int, rpn: int = 1) -> Steps:
    """mca_coll_han_allreduce_intra (coll_han_allreduce.c), Open MPI 5's default Allreduce (commutative op)
    on several nodes (of any sizes: it does not check): 64 KiB segments through four stages, tuned's
    Reduce to node-local rank 0 (lr), libnbc's Ireduce between the nodes' rank 0 to rank 0 (ur), libnbc's
    Ibcast back (ub), tuned's Bcast inside each node (lb); task t3 of segment s runs ub(s+1) and ur(s+2)
    non-blocking, overlapped with lr(s+3) then lb(s) (t0: lr(0); t1: ur(0) with lr(1); t2: ub(0), ur(1)
    with lr(2))."""
    if not _han_runs("allreduce", size, rpn):
        return _tuned_pick("allreduce", size, count * ITEMSIZE["allreduce"])(rank, size, root, count)
    segs = _han_segments(count, ITEMSIZE["allreduce"])
    sizes = {min(rpn, size - n * rpn) for n in range(-(-size // rpn))}
    lows = {"reduce": _low_picks("reduce", sizes, segs), "bcast": _low_picks("bcast", sizes, segs)}
    return _han_allreduce(rank, size, segs, rpn, lows)


def _han_allreduce(rank: int, size: int, segs: list[tuple[int, int]], rpn: int, lows: dict[str, Picks]) -> Steps:
    c = _HanComms(rank, size, rpn, 0)
    leader, n = c.local == 0, len(segs)

    def low(collective: str, i: int) -> Iterator[Step]:
        if i >= n or len(c.members) < 2:
            return iter(())
        tag = _LOW_REDUCE if collective == "reduce" else _LOW_BCAST
        return _sub(lows[collective][len(c.members), segs[i][1] - segs[i][0]], c.local, c.members, 0, segs[i], tag)

    def up(collective: str, i: int) -> list[Iterator[Step]]:
        if i >= n or not leader:
            return []
        nbc = _nbc_pick(collective, len(c.ups), segs[i][1] - segs[i][0])
        return [_sub(nbc, c.node, c.ups, 0, segs[i], _UP_REDUCE if collective == "reduce" else _UP_BCAST)]

    yield from low("reduce", 0)  # t0
    yield from _task(up("reduce", 0), [low("reduce", 1)])  # t1
    yield from _task(up("bcast", 0) + up("reduce", 1), [low("reduce", 2)])  # t2
    for s in range(n):  # t3 of segment s
        yield from _task(up("bcast", s + 1) + up("reduce", s + 2), [low("reduce", s + 3), low("bcast", s)])


for _han in (ompi_han_bcast, ompi_han_reduce, ompi_han_allreduce):
    _han.node_aware = True  # type: ignore[attr-defined]


def baseline_names(collective: str) -> list[str]:
    """The baselines defined for a collective."""
    return [name for name, by in BASELINES.items() if collective in by]


BASELINES: dict[str, dict[str, Baseline]] = {
    "binomial": {"bcast": binomial_bcast, "reduce": binomial_reduce},
    "scatter_allgather": {"bcast": scatter_allgather_bcast},
    "scatter_ring_allgather": {"bcast": scatter_ring_allgather_bcast},
    "rabenseifner": {"allreduce": rabenseifner_allreduce},
    "ring": {"allreduce": ring_allreduce},
    "reduce_scatter_gather": {"reduce": reduce_scatter_gather_reduce},
    "ompi_pipeline": {"bcast": ompi_pipeline_bcast, "reduce": ompi_pipeline_reduce},
    "ompi_split_bintree": {"bcast": ompi_split_bintree_bcast},
    "ompi_binomial": {"reduce": ompi_binomial_reduce},
    "ompi_ring": {"allreduce": ompi_ring_allreduce},
    "ompi_ring_segmented": {"allreduce": ompi_ring_segmented_allreduce},
    "ompi_tuned": {c: _tuned_schedule(c, "5") for c in ("bcast", "reduce", "allreduce")},
    "ompi40_tuned": {c: _tuned_schedule(c, "4.0") for c in ("bcast", "reduce", "allreduce")},
    "mpich_smp": {"bcast": mpich_smp_bcast, "reduce": mpich_smp_reduce, "allreduce": mpich_smp_allreduce},
    "ompi_han": {"bcast": ompi_han_bcast, "reduce": ompi_han_reduce, "allreduce": ompi_han_allreduce},
}
"""Baseline name -> collective -> schedule. Add an entry to plug in another lock-step algorithm."""


def _ring_messages(size: int, count: int) -> int:
    return 2 * size * (size - 1)


def _segs(count: int, segsize: int, itemsize: int) -> int:
    seg = ompi_segcount(segsize, itemsize, count)
    return -(-count // seg)


def estimated_messages(name: str, collective: str, size: int, count: int, ranks_per_node: int = 1) -> int:
    """About how many messages baseline `name` sends (what its simulation costs): ring-type schedules
    send ~size^2, pipelines size x segments, trees and recursive halving/doubling ~size log size
    (`ompi_han`: per 64 KiB segment each rank's intra-node message or two, plus ~2 nodes log nodes
    between nodes; with `ranks_per_node` where HAN falls back, tuned's)."""
    log = max(1, (size - 1).bit_length())
    if name == "mpich_smp":  # each phase is MPICH's own choice for its ranks (a ring's ~n^2 included)
        nodes = -(-size // ranks_per_node)
        inner = min(ranks_per_node, size)
        phases = {"bcast": ("bcast",), "reduce": ("reduce",), "allreduce": ("reduce", "bcast")}[collective]
        within = sum(_mpich_messages(c, inner, count) for c in phases) * nodes
        return _mpich_messages(collective, nodes, count) + within + 1
    if name == "ompi_han":
        if not _han_runs(collective, size, ranks_per_node):
            return estimated_messages("ompi_tuned", collective, size, count)
        nodes = -(-size // ranks_per_node)
        up = 2 * nodes * max(1, (nodes - 1).bit_length())
        per_segment = {"bcast": size, "reduce": size + up, "allreduce": 2 * size + up}
        return len(_han_segments(count, ITEMSIZE[collective])) * per_segment[collective]
    if name in ("ompi_tuned", "ompi40_tuned"):
        version = "5" if name == "ompi_tuned" else "4.0"
        alg, segsize = ompi_tuned_choice(collective, size, count * ITEMSIZE[collective], version)
        if alg in ("ring", "segmented_ring"):
            return _ring_messages(size, count) * max(1, _segs(count, segsize, 4) // size)
        if alg in ("pipeline", "split_binary_tree") or segsize:
            return size * _segs(count, segsize, ITEMSIZE[collective])
        return size * log
    if name in ("ring", "ompi_ring", "scatter_ring_allgather") or (name == "scatter_allgather" and size & (size - 1)):
        return _ring_messages(size, count)
    if name == "ompi_ring_segmented":
        return _ring_messages(size, count) * max(1, _segs(count, 1 << 20, 4) // size)
    if name == "ompi_pipeline":
        segsize = _pipeline_segsize(size, count) if collective == "bcast" else _reduce_pipeline_segsize(size, 4 * count)
        return size * _segs(count, segsize, ITEMSIZE[collective])
    if name == "ompi_split_bintree":
        return size * _segs(count, _split_bintree_segsize(size, count), 1) // 2 + size
    return size * log


def _mpich_messages(collective: str, n: int, count: int) -> int:
    """estimated_messages of MPICH's choice for `collective` on a communicator of `n` ranks (0 alone)."""
    if n < 2:
        return 0
    return estimated_messages(mpich_choice(collective, n, count * ITEMSIZE[collective]), collective, n, count)


def check_applicable(name: str, collective: str, size: int, count: int, ranks_per_node: int = 1) -> None:
    """Raise ValueError if baseline `name` has no schedule for this point (unknown name, no such
    collective, or an Open MPI rule that picks an algorithm not modelled here); the node-aware ones
    (`mpich_smp`, `ompi_han`) on nodes of `ranks_per_node` consecutive ranks."""
    schedules = BASELINES.get(name)
    if schedules is None:
        raise ValueError(f"unknown baseline {name!r}; valid: {', '.join(BASELINES)}")
    schedule = schedules.get(collective)
    if schedule is None:
        raise ValueError(
            f"baseline {name!r} has no {collective}; valid for {collective}: " + ", ".join(baseline_names(collective))
        )
    if getattr(schedule, "node_aware", False):
        schedule(0, size, 0, count, ranks_per_node)  # type: ignore[call-arg]
    else:
        schedule(0, size, 0, count)  # tuned rules decide (and may refuse) when called


def baseline_starter(name: str, job: Job, world: World, bufs: Buffers) -> Callable[[int], Callback]:
    """rank -> the function that starts baseline `name` for `job` on that rank."""
    check_applicable(name, job.collective, job.size, job.count, world._rpn)
    schedule = BASELINES[name][job.collective]
    dtype = DTYPE[job.collective]
    count, size, root = job.count, job.size, job.root

    def for_rank(r: int) -> Callback:
        def start() -> None:
            t = world.ranks[r]
            if job.collective == "bcast":
                acc = bufs.local[r]
            else:  # MPI folds into a copy of the contribution: the root's recvbuf, a scratch buffer elsewhere
                acc = bufs.result[r] if bufs.result[r] is not None else t.empty(count, dtype)
                t.copy(acc, bufs.local[r])
            if getattr(schedule, "node_aware", False):  # the node-aware ones see the nodes
                steps = schedule(r, size, root, count, world._rpn)  # type: ignore[call-arg]
            else:
                steps = schedule(r, size, root, count)
            LockStep(t, steps, acc, dtype, lambda: world.done(r)).start()

        return start

    return for_rank
