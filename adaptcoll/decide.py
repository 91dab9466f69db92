"""The decision layer: serve one call with adaptcoll's protocols, or hand it to native MPI.

`bcast`, `reduce` and `allreduce` return either a `Prepared` operation (buffers parsed, trees built,
segment plan sized, protocols ready to start) or a typed `Native` value. Every form of a collective
(blocking, nonblocking, persistent, pickled) asks here, so all of them decide alike.

A decision depends only on arguments MPI requires to match across ranks (and on the settings, which
must match too, and the communicator's tuning, which rank 0 sends to all). The per-call configuration
(serve or native, algorithm, segments, roots, windows) comes from one place, `CommTuning.choose`;
the communicator's tuning is set up (collectively) on its first call before any buffer is looked at,
so every rank that calls the collective takes part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
from mpi4py import MPI

from . import buffers, ops
from .backends.base import ArrayBackend, ReduceOp
from .device import parse_device
from .native import (
    ALGORITHM_NATIVE,
    BELOW_THRESHOLD,
    INVALID_ARGUMENTS,
    OP_NOT_SERVED,
    OP_TYPE_NOT_SERVED,
    Kind,
    Native,
)
from .protocols.allreduce import Allreduce
from .protocols.bcast import Bcast
from .protocols.context import OpContext
from .protocols.links import Link, start_on_links, tree_links
from .protocols.operation import Operation
from .protocols.reduce import Reduce
from .state import HOST_BACKEND, CommState, comm_state
from .tune.choose import comm_tuning, explicitly_native
from .tune.config import CallConfig

__all__ = [
    "Prepared",
    "Decision",
    "bcast",
    "reduce",
    "allreduce",
    "root_ok",
    "in_place_send",
    "in_place_send_at_root",
]

_IN_PLACE = MPI.IN_PLACE
_Callback = Callable[[], None]


@dataclass(frozen=True)
class Prepared:
    """A call adaptcoll serves, decided and set up on this rank: each `start()` takes fresh tags and
    starts it (once for a one-shot call, once per Start() of a persistent request).
    `error`: the root's recvbuf was bad; the others' data is still drained, then this is raised."""

    start: Callable[[], Operation]
    error: Optional[BaseException] = None
    config: Optional[CallConfig] = None


Decision = Union[Prepared, Native]


# -- argument helpers shared by every form --------------------------------------------------------
def root_ok(root: Any, size: int) -> bool:
    """Whether `root` is a valid root rank (an int, not a bool, in range)."""
    return (type(root) is int and 0 <= root < size) or (
        isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= int(root) < size
    )


def in_place_send(sendbuf: Any, recvbuf: Any) -> Any:
    """Allreduce's sendbuf for native MPI: `sendbuf is recvbuf` means IN_PLACE (as the next mpi4py treats it)."""
    return _IN_PLACE if sendbuf is recvbuf else sendbuf


def in_place_send_at_root(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, root: Any) -> Any:
    """Reduce's sendbuf for native MPI: at the root, `sendbuf is recvbuf` means IN_PLACE."""
    if sendbuf is recvbuf and sendbuf is not None and root == comm.Get_rank():
        return _IN_PLACE
    return sendbuf


def _parse(spec: Any, writable: bool) -> tuple[Union[buffers.Message, Native], bool]:
    """(Message or Native, whether it is device memory served through CuPy)."""
    msg = buffers.parse(spec, writable)
    if isinstance(msg, Native) and msg.kind is Kind.DEVICE:
        return parse_device(spec, writable), True
    return msg, False


def _state_for(comm: MPI.Intracomm, algorithm: str) -> CommState:
    """The communicator's state (its private Dup and tuning already set up by `comm_tuning`), after
    topology discovery if `algorithm` needs it.

    Called only once every rank has decided to serve the call, so ranks that pass the same message in
    different legal forms still agree on the discovery; and, like `comm_tuning`, before the engine lock
    is taken, because another thread may hold the lock while it waits for this rank in a collective.
    """
    state = comm_state(comm)
    if algorithm.startswith("topo"):
        state.topology()
    return state


def _fold_op(
    msg: buffers.Message, op: MPI.Op, call: CallConfig, backend: ArrayBackend = HOST_BACKEND
) -> Union[ReduceOp, Native]:
    """The ReduceOp adaptcoll folds `op` with on msg's type, else why it goes native."""
    if not call.serve:
        return call.native or BELOW_THRESHOLD
    rop = ops.reduce_op(op, msg.datatype)
    if rop is None:
        return OP_NOT_SERVED
    if not backend.supports(rop, msg.array.dtype):
        return OP_TYPE_NOT_SERVED
    return rop


def _started(
    st: CommState,
    links: list[Link],
    keep: Any,
    base: OpContext,
    start_one: Callable[[OpContext, Link, _Callback], None],
) -> Callable[[], Operation]:
    """The start function of a prepared call: fresh tags, one protocol per tree link, tags tracked."""
    shape = base.plan

    def start() -> Operation:
        plan = st.take_tags(shape)
        ctx = base.with_plan(plan)
        return st.track(plan, start_on_links(links, keep, lambda link, done: start_one(ctx, link, done)))

    return start


# -- broadcast ------------------------------------------------------------------------------------
def bcast(comm: MPI.Intracomm, buf: Any, root: Any) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up a broadcast."""
    if not root_ok(root, comm.Get_size()):
        return INVALID_ARGUMENTS
    if explicitly_native("bcast"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm)
    root = int(root)
    rank = comm.Get_rank()
    msg, on_device = _parse(buf, writable=rank != root)
    if isinstance(msg, Native):
        return msg
    nbytes = msg.nbytes
    call = tuning.choose("bcast", nbytes, on_device)
    if not call.serve:
        return call.native or BELOW_THRESHOLD
    st = _state_for(comm, call.algorithm)
    transport, backend, _ = st.kit(on_device)
    itemsize = msg.array.itemsize
    data = msg.array.view(np.uint8)
    segment = max(itemsize, call.segment_size // itemsize * itemsize)
    shape = st.plan_shape(nbytes, 1, segment, call.max_segments)
    links = tree_links(st.trees(call.algorithm, root), rank, shape.nseg)
    base = OpContext(transport, backend, shape, call.send_window, call.recv_window, call.sync_sends)

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        Bcast(ctx, link.parent, link.children, data, link.segs, done).start()

    return Prepared(_started(st, links, buf, base, start_one), config=call)


# -- reduce ---------------------------------------------------------------------------------------
def reduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up a reduce."""
    size = comm.Get_size()
    if not isinstance(op, MPI.Op) or not root_ok(root, size):
        return INVALID_ARGUMENTS
    if explicitly_native("reduce"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm)
    root = int(root)
    rank = comm.Get_rank()
    is_root = rank == root
    in_place = is_root and (sendbuf is _IN_PLACE or (sendbuf is recvbuf and recvbuf is not None))
    if in_place:
        msg, on_device = _parse(recvbuf, writable=True)
    elif sendbuf is _IN_PLACE:
        return INVALID_ARGUMENTS
    else:
        msg, on_device = _parse(sendbuf, writable=False)
    if isinstance(msg, Native):
        return msg
    call = tuning.choose("reduce", msg.nbytes, on_device)
    rop = _fold_op(msg, op, call)
    if isinstance(rop, Native):
        return rop
    ordered_needed = not rop.commutative
    if ordered_needed and root != 0:
        return Native("non-commutative op with root != 0")
    st = _state_for(comm, call.algorithm)
    transport, backend, pools = st.kit(on_device)
    error: Optional[BaseException] = None
    if in_place:
        target = local = msg.array
    elif is_root:
        target, error = _root_target(recvbuf, msg, on_device, backend)
        local = msg.array
    else:
        target, local = None, msg.array
    dtype = msg.array.dtype
    shape = st.plan_shape(msg.count, dtype.itemsize, call.segment_size, call.max_segments)
    links = tree_links(st.trees(call.algorithm, root, rank_ordered=ordered_needed), rank, shape.nseg)
    base = OpContext(
        transport,
        backend,
        shape,
        call.send_window,
        call.recv_window,
        call.sync_sends,
        ordered_needed or call.reproducible,
        pools(dtype),
    )

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        Reduce(ctx, link.parent, link.children, local, target, rop, link.segs, done).start()

    return Prepared(_started(st, links, (sendbuf, recvbuf), base, start_one), error, call)


def _root_target(
    recvbuf: Any, msg: buffers.Message, on_device: bool, backend: ArrayBackend
) -> tuple[Any, Optional[BaseException]]:
    """The root's result array, or a scratch one plus the error mpi4py would raise for `recvbuf`."""
    error = _recvbuf_error(recvbuf, msg, on_device)
    if isinstance(error, BaseException):
        return backend.empty(msg.count, msg.array.dtype), error
    return error.array, None


def _recvbuf_error(recvbuf: Any, msg: buffers.Message, on_device: bool) -> Union[buffers.Message, BaseException]:
    """The root's parsed recvbuf, or the error mpi4py would raise for it."""
    if recvbuf is None or recvbuf is _IN_PLACE:
        return TypeError("message: expecting buffer or list/tuple")
    rmsg, recv_on_device = _parse(recvbuf, writable=True)
    if isinstance(rmsg, Native):
        if rmsg.kind is Kind.BAD_BUFFER:
            return BufferError(f"recvbuf: {rmsg.reason}")
        return NotImplementedError(
            f"adaptcoll Reduce: recvbuf not served ({rmsg.reason}); set ADAPTCOLL_REDUCE_ALGORITHM=native"
        )
    if recv_on_device != on_device:
        return ValueError("adaptcoll Reduce: sendbuf and recvbuf must both be host or both be device memory")
    if rmsg.count != msg.count:
        return ValueError(f"mismatch in send count {msg.count} and receive count {rmsg.count}")
    if rmsg.array.dtype != msg.array.dtype:
        return ValueError("mismatch in send and receive MPI datatypes")
    if not on_device and np.may_share_memory(rmsg.array, msg.array):
        return ValueError("sendbuf and recvbuf overlap (use MPI.IN_PLACE)")
    return rmsg


# -- allreduce ------------------------------------------------------------------------------------
def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up an allreduce."""
    if not isinstance(op, MPI.Op):
        return INVALID_ARGUMENTS
    if explicitly_native("allreduce"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm)
    in_place = sendbuf is _IN_PLACE or sendbuf is recvbuf
    rmsg, on_device = _parse(recvbuf, writable=True)
    if isinstance(rmsg, Native):
        return rmsg
    if in_place:
        local = rmsg.array
    else:
        smsg, send_on_device = _parse(sendbuf, writable=False)
        if isinstance(smsg, Native):
            return smsg
        if send_on_device != on_device:
            raise ValueError("adaptcoll Allreduce: sendbuf and recvbuf must both be host or both be device memory")
        if smsg.count != rmsg.count or smsg.array.dtype != rmsg.array.dtype:
            return INVALID_ARGUMENTS
        if not on_device and np.may_share_memory(smsg.array, rmsg.array):
            return INVALID_ARGUMENTS
        local = smsg.array
    call = tuning.choose("allreduce", rmsg.nbytes, on_device)
    rop = _fold_op(rmsg, op, call)
    if isinstance(rop, Native):
        return rop
    ordered_needed = not rop.commutative
    st = _state_for(comm, call.algorithm)
    transport, backend, pools = st.kit(on_device)
    rank = comm.Get_rank()
    dtype = rmsg.array.dtype
    shape = st.plan_shape(rmsg.count, dtype.itemsize, call.segment_size, call.max_segments)
    tree_set = st.allreduce_trees(call.algorithm, call.roots, rank_ordered=ordered_needed)
    links = tree_links(tree_set, rank, shape.nseg)
    base = OpContext(
        transport,
        backend,
        shape,
        call.send_window,
        call.recv_window,
        call.sync_sends,
        ordered_needed or call.reproducible,
        pools(dtype),
    )
    result = rmsg.array

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        Allreduce(ctx, link.parent, link.children, local, result, rop, link.segs, done).start()

    return Prepared(_started(st, links, (sendbuf, recvbuf), base, start_one), config=call)
