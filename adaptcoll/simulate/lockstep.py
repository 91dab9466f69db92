"""Lock-step baselines: collectives as MPI libraries run them, one blocking step after another.

Each rank walks a schedule of steps; a step's sends and receives are posted together (a blocking
Send or Recv is a step of one, a Sendrecv a step of two) and the rank waits for all of them, then
folds what it received, before it starts the next step. The schedules follow MPICH's algorithms
(relative ranks, largest subtree first, its chunking), unsegmented, on the same simulated transport,
cost model and noise as adaptcoll's protocols; they pay `native_o` per message and no engine cost.

| name | collectives | MPICH routine it follows |
|---|---|---|
| binomial | bcast, reduce | MPIR_Bcast_intra_binomial, MPIR_Reduce_intra_binomial |
| reduce_scatter_gather | reduce | MPIR_Reduce_intra_reduce_scatter_gather (MPICH's long-message choice) |
| scatter_allgather | bcast | MPIR_Bcast_intra_scatter_recursive_doubling_allgather (ring if size is not 2^k) |
| scatter_ring_allgather | bcast | MPIR_Bcast_intra_scatter_ring_allgather (MPICH's choice for long messages) |
| rabenseifner | allreduce | MPIR_Allreduce_intra_reduce_scatter_allgather |
| ring | allreduce | ring reduce-scatter + ring allgather (MPIR_Allreduce_intra_ring) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..transport import Callback
from .programs import DTYPE, SUM, Buffers, Job
from .world import SimRank, World

__all__ = ["BASELINES", "LockStep", "baseline_names", "baseline_starter", "SEND", "RECV", "FOLD"]

SEND, RECV, FOLD = 0, 1, 2
"""Step operations: send acc[lo:hi]; receive into acc[lo:hi]; receive into a temporary and fold it
into acc[lo:hi]."""

Op = tuple[int, int, int, int, int]  # (kind, peer, lo, hi, tag)
Step = list[Op]
Schedule = Callable[[int, int, int, int], Iterator[Step]]  # (rank, size, root, count) -> steps


class LockStep:
    """One rank of a lock-step collective over `acc` (see the module docstring)."""

    __slots__ = ("_t", "_steps", "_acc", "_dtype", "_on_complete", "_left", "_folds")

    def __init__(self, t: SimRank, steps: Iterator[Step], acc: Any, dtype: Any, on_complete: Callback) -> None:
        self._t = t
        self._steps = steps
        self._acc = acc
        self._dtype = dtype
        self._on_complete = on_complete
        self._left = 0
        self._folds: list[tuple[Any, int, int]] = []

    def start(self) -> None:
        self._step()

    def _step(self) -> None:
        ops = next(self._steps, None)
        while ops is not None and not ops:
            ops = next(self._steps, None)
        if ops is None:
            self._on_complete()
            return
        t, acc = self._t, self._acc
        self._left = len(ops)
        self._folds = []
        for kind, peer, lo, hi, tag in ops:
            if kind == SEND:
                t.isend(acc[lo:hi], peer, tag, self._one_done)
            elif kind == RECV:
                t.irecv(acc[lo:hi], peer, tag, self._one_done)
            else:
                tmp = t.empty(hi - lo, self._dtype)
                self._folds.append((tmp, lo, hi))
                t.irecv(tmp, peer, tag, self._one_done)

    def _one_done(self) -> None:
        self._left -= 1
        if self._left:
            return
        acc = self._acc
        for tmp, lo, hi in self._folds:
            self._t.combine(SUM, tmp, acc[lo:hi], acc[lo:hi])
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


def reduce_scatter_gather_reduce(rank: int, size: int, root: int, count: int) -> Iterator[Step]:
    """MPICH's long-message Reduce for commutative ops (MPIR_Reduce_intra_reduce_scatter_gather): the
    non-power-of-two pre-step (even rank 2i folds into 2i+1), a reduce-scatter by recursive halving as in
    Rabenseifner's Allreduce, then a binomial gather of the blocks toward the root, which takes the whole
    result last. An excluded (even) root is served by its partner, which hands it the result at the end."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank < 2 * rem and rank % 2 == 0:
        yield [(SEND, rank + 1, 0, count, 11)]
        if rank == root:
            yield [(RECV, rank + 1, 0, count, 13)]
        return
    if rank < 2 * rem:
        yield [(FOLD, rank - 1, 0, count, 11)]
        newrank = rank // 2
    else:
        newrank = rank - rem
    newroot = root // 2 if root < 2 * rem else root - rem
    base, extra = divmod(count, pof2)

    def start(i: int) -> int:
        return i * base + min(i, extra)

    def real(newdst: int) -> int:
        return newdst * 2 + 1 if newdst < rem else newdst + rem

    kept: list[tuple[int, int]] = []  # block range this rank keeps after each halving step
    mask, send_idx, recv_idx, last_idx = 1, 0, 0, pof2
    while mask < pof2:
        newdst = newrank ^ mask
        half = pof2 // (mask * 2)
        if newrank < newdst:
            send_idx = recv_idx + half
            s, r = (send_idx, last_idx), (recv_idx, send_idx)
        else:
            recv_idx = send_idx + half
            s, r = (send_idx, recv_idx), (recv_idx, last_idx)
        yield [(SEND, real(newdst), start(s[0]), start(s[1]), 12), (FOLD, real(newdst), start(r[0]), start(r[1]), 12)]
        kept.append(r)
        send_idx = recv_idx
        mask <<= 1
        if mask < pof2:
            last_idx = recv_idx + pof2 // mask
    for j in range(len(kept) - 1, -1, -1):  # gather: the reverse of the halving, toward newroot
        mask = 1 << j
        newdst = newrank ^ mask
        if (newrank & mask) == (newroot & mask):
            lo, hi = kept[j][1], kept[j][1] + (kept[j][1] - kept[j][0])
            if newrank > newdst:
                lo, hi = kept[j][0] - (kept[j][1] - kept[j][0]), kept[j][0]
            if hi > lo:
                yield [(RECV, real(newdst), start(lo), start(min(hi, pof2)), 13)]
        else:
            yield [(SEND, real(newdst), start(kept[j][0]), start(kept[j][1]), 13)]
            return
    if root < 2 * rem and root % 2 == 0 and rank == root + 1:  # the excluded root takes the result
        yield [(SEND, root, 0, count, 13)]


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


BASELINES: dict[str, dict[str, Schedule]] = {
    "binomial": {"bcast": binomial_bcast, "reduce": binomial_reduce},
    "reduce_scatter_gather": {"reduce": reduce_scatter_gather_reduce},
    "scatter_allgather": {"bcast": scatter_allgather_bcast},
    "scatter_ring_allgather": {"bcast": scatter_ring_allgather_bcast},
    "rabenseifner": {"allreduce": rabenseifner_allreduce},
    "ring": {"allreduce": ring_allreduce},
}
"""Baseline name -> collective -> schedule. Add an entry to plug in another lock-step algorithm."""


def baseline_names(collective: str) -> list[str]:
    """The baselines defined for a collective."""
    return [name for name, by in BASELINES.items() if collective in by]


def baseline_starter(name: str, job: Job, world: World, bufs: Buffers) -> Callable[[int], Callback]:
    """rank -> the function that starts baseline `name` for `job` on that rank."""
    schedules = BASELINES.get(name)
    if schedules is None:
        raise ValueError(f"unknown baseline {name!r}; valid: {', '.join(BASELINES)}")
    schedule = schedules.get(job.collective)
    if schedule is None:
        raise ValueError(
            f"baseline {name!r} has no {job.collective}; valid for {job.collective}: "
            + ", ".join(baseline_names(job.collective))
        )
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
            LockStep(t, schedule(r, size, root, count), acc, dtype, lambda: world.done(r)).start()

        return start

    return for_rank
