"""The decision layer of Allgather, Reduce_scatter_block and Reduce_scatter: serve the call with the ring
(`protocols.blockring`) or hand it, unchanged, to native MPI.

Like `decide.py` (whose `Prepared`, buffer parsing, op mapping and start function it uses), a decision
depends only on what MPI requires to match across ranks: the type signature of the buffers (basic type
and count, whatever form a rank used), the op, the recvcounts, the settings and the communicator's
tuning (its table's `allgather` / `reduce_scatter` entries, else the shipped rule: `tune.blocks`).
Served: host buffers of one predefined basic type (derived datatypes of one basic type are packed
through MPI), an op adaptcoll folds and that commutes (the ring's fold order is not MPI's rank
order). Native, counted in `stats()` with the reason: below the threshold, device memory, a datatype
mixing basic types, MINLOC/MAXLOC, non-commutative ops, `Reduce_scatter` without recvcounts (mpi4py
then gathers them itself), and arguments mpi4py rejects (so mpi4py raises its own error on every rank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from .. import buffers
from ..plans.blocks import BlockSegments, plan_block_segments, tag_plan
from ..plans.dealing import Link
from ..protocols.blockring import RingAllgather, RingReduceScatter
from ..protocols.context import OpContext
from ..runtime import settings
from ..runtime.native import ALGORITHM_NATIVE, INVALID_ARGUMENTS, Native
from ..state.comm_state import CommState, comm_state
from ..tune.blocks import choose_block
from ..tune.choose import comm_tuning
from ..tune.config import CallConfig
from .decide import Decision, Prepared, _fold_op, _parse
from .starts import started as _started

__all__ = ["allgather", "reduce_scatter", "DEVICE_NOT_SERVED", "NO_RECVCOUNTS", "NON_COMMUTATIVE"]

_IN_PLACE = MPI.IN_PLACE
_Callback = Callable[[], None]

DEVICE_NOT_SERVED = Native("device memory (not served for this collective)")
NO_RECVCOUNTS = Native("Reduce_scatter without recvcounts")
NON_COMMUTATIVE = Native("non-commutative op with ring reduce_scatter")
TAGS_TOO_FEW = Native("tag space too small for the ring")


def _explicitly_native(collective: str) -> bool:
    return settings.current().algorithm(collective) == "native"


def _host(spec: Any, writable: bool) -> buffers.Message | Native:
    """The parsed host buffer, or why it goes native (device memory is not served here)."""
    msg, on_device = _parse(spec, writable)
    if on_device:
        return DEVICE_NOT_SERVED
    return msg


def _blocks(st: CommState, counts: Sequence[int], itemsize: int, call: CallConfig) -> Optional[BlockSegments]:
    cfg = settings.current()
    space = min(st.tag_space, cfg.tag_space) if cfg.tag_space else st.tag_space
    try:
        return plan_block_segments(counts, itemsize, call.segment_size, space, call.max_segments)
    except ValueError:
        return None


def _prepare(
    st: CommState,
    blocks: BlockSegments,
    dtype: np.dtype,
    call: CallConfig,
    ordered: bool,
    run: Callable[[OpContext, _Callback], None],
    keep: Any,
    name: str,
    loads: Sequence[Optional[_Callback]],
    stores: Sequence[Optional[_Callback]],
    error: Optional[BaseException],
) -> Prepared:
    transport, backend, pools = st.kit(False)
    space = min(st.tag_space, settings.current().tag_space or st.tag_space)
    base = OpContext(
        transport,
        backend,
        tag_plan(blocks, 0, space),
        call.send_window,
        call.recv_window,
        call.sync_sends,
        ordered,
        pools(dtype),
    )

    def make_links() -> list[Link]:  # one protocol per rank, no trees
        return [Link(None, (), range(blocks.nseg))]

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        run(ctx, done)

    started, _, _ = _started(st, make_links, keep, base, start_one, name, None, loads, stores)
    return Prepared(started, error, config=call, state=st)


# -- allgather ------------------------------------------------------------------------------------
def allgather(
    comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, name: str = "Allgather", blocking: bool = False
) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up a ring allgather."""
    if _explicitly_native("allgather"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm, blocking)  # before any buffer is looked at: a blocking first call sets it up
    p = comm.Get_size()
    in_place = sendbuf is _IN_PLACE
    rmsg = _host(recvbuf, writable=True)
    if isinstance(rmsg, Native):
        return rmsg
    if rmsg.count % p:
        return INVALID_ARGUMENTS  # mpi4py: "cannot infer count"
    n = rmsg.count // p
    result = rmsg.array
    dtype = result.dtype
    local: Optional[np.ndarray] = None
    loads: list[Optional[_Callback]] = []
    error = rmsg.error
    if in_place:
        loads.append(rmsg.load)
    else:
        smsg = _host(sendbuf, writable=False)
        if isinstance(smsg, Native):
            return smsg
        if smsg.count != n or smsg.array.dtype != dtype or np.may_share_memory(smsg.array, result):
            return INVALID_ARGUMENTS
        local = smsg.array
        loads.append(smsg.load)
        error = error or smsg.error
    call = choose_block(tuning, "allgather", rmsg.nbytes)
    if not call.serve:
        return call.native or ALGORITHM_NATIVE
    st = comm_state(comm)
    blocks = _blocks(st, (n,) * p, dtype.itemsize, call)
    if blocks is None:
        return TAGS_TOO_FEW

    def run(ctx: OpContext, done: _Callback) -> None:
        RingAllgather(ctx, blocks, local, result, done).start()

    return _prepare(st, blocks, dtype, call, False, run, (sendbuf, recvbuf), name, loads, [rmsg.store], error)


# -- reduce-scatter -------------------------------------------------------------------------------
def _counts(comm: MPI.Intracomm, recvcounts: Any) -> Optional[tuple[int, ...]]:
    """recvcounts as a tuple of p non-negative ints, or None if mpi4py would reject them."""
    try:
        counts = tuple(int(c) for c in recvcounts)
    except (TypeError, ValueError):
        return None
    if len(counts) != comm.Get_size() or any(c < 0 for c in counts):
        return None
    if any(isinstance(c, (bool, float)) for c in recvcounts):
        return None
    return counts


def reduce_scatter(
    comm: MPI.Intracomm,
    sendbuf: Any,
    recvbuf: Any,
    recvcounts: Any,
    op: Any,
    name: str,
    block: bool,
    blocking: bool = False,
) -> Decision:
    """Decide, then set up a ring reduce-scatter: `block` for Reduce_scatter_block (every block the
    size of recvbuf, or recvbuf / p in place), else Reduce_scatter with `recvcounts`."""
    if not isinstance(op, MPI.Op):
        return INVALID_ARGUMENTS
    if _explicitly_native("reduce_scatter"):
        return ALGORITHM_NATIVE
    if not block and recvcounts is None:
        return NO_RECVCOUNTS
    tuning = comm_tuning(comm, blocking)  # before any buffer is looked at: a blocking first call sets it up
    p, rank = comm.Get_size(), comm.Get_rank()
    in_place = sendbuf is _IN_PLACE
    rmsg = _host(recvbuf, writable=True)
    if isinstance(rmsg, Native):
        return rmsg
    counts: Optional[tuple[int, ...]]
    if block:
        if in_place:
            if rmsg.count % p:
                return INVALID_ARGUMENTS
            counts = (rmsg.count // p,) * p
        else:
            counts = (rmsg.count,) * p
    else:
        counts = _counts(comm, recvcounts)
        if counts is None or rmsg.count != (sum(counts) if in_place else counts[rank]):
            return INVALID_ARGUMENTS
    total = sum(counts)
    error = rmsg.error
    if in_place:
        msg = rmsg
        local = rmsg.array
        result = local[: counts[rank]]
    else:
        smsg = _host(sendbuf, writable=False)
        if isinstance(smsg, Native):
            return smsg
        if smsg.count != total or smsg.array.dtype != rmsg.array.dtype:
            return INVALID_ARGUMENTS
        if np.may_share_memory(smsg.array, rmsg.array):
            return INVALID_ARGUMENTS
        msg = smsg
        local = smsg.array
        result = rmsg.array
        error = error or smsg.error
    dtype = local.dtype
    call = choose_block(tuning, "reduce_scatter", total * dtype.itemsize)
    rop = _fold_op(msg, op, call)
    if isinstance(rop, Native):
        return rop
    if not rop.commutative:
        return NON_COMMUTATIVE
    st = comm_state(comm)
    blocks = _blocks(st, counts, dtype.itemsize, call)
    if blocks is None:
        return TAGS_TOO_FEW

    def run(ctx: OpContext, done: _Callback) -> None:
        RingReduceScatter(ctx, blocks, local, result, rop, done, in_place).start()

    return _prepare(st, blocks, dtype, call, False, run, (sendbuf, recvbuf), name, [msg.load], [rmsg.store], error)
