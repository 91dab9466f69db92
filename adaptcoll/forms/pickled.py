"""Pickle-based collectives (lower-case bcast/reduce/allreduce) for adaptcoll communicators.

Objects are pickled with protocol 5 and out-of-band buffers (as mpi4py.util.pkl5 does), so a large
NumPy array inside an object travels without an in-band copy. bcast sends a small header with
mpi4py's own bcast: a small object rides inside it (one native call, nothing more); a large one sends
only its piece sizes there, and the bytes follow in one segmented adaptcoll broadcast. reduce folds
in rank order up a binomial tree (op(lower ranks, higher ranks), so any associative callable works)
with out-of-band pickled point-to-point messages on adaptcoll's private communicator; allreduce is
that reduce to rank 0 followed by the pickled bcast of the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import device
from ..decision import decide
from ..runtime import counters, settings
from ..runtime.engine import engine
from ..runtime.native import ALGORITHM_NATIVE, INVALID_ARGUMENTS
from ..state.comm_state import comm_state
from . import collectives
from .threads import enter, leave

__all__ = ["bcast", "reduce", "allreduce", "INLINE_BELOW"]

INLINE_BELOW = settings.parse_size(
    settings.env_value("ADAPTCOLL_PICKLE_INLINE_BELOW") or "64K", "ADAPTCOLL_PICKLE_INLINE_BELOW"
)
"""Pickled objects (in-band plus out-of-band bytes) smaller than this travel inside the native header
bcast; larger ones go through adaptcoll's segmented Bcast. Same on all ranks (only the root decides,
but keep it equal anyway). Set ADAPTCOLL_PICKLE_INLINE_BELOW or assign adaptcoll.forms.pickled.INLINE_BELOW."""

_pickle = MPI.Pickle()
_MPI_PICKLED_BCAST = MPI.Intracomm.bcast
_MPI_PICKLED_REDUCE = MPI.Intracomm.reduce
_MPI_PICKLED_ALLREDUCE = MPI.Intracomm.allreduce


def _flat(buf: Any) -> np.ndarray:
    """A flat uint8 view of an out-of-band buffer (mpi4py hands out MPI.buffer objects); a host copy
    when the buffer is device memory (device.host_pickle_buffer), so MPI never sees a device pointer."""
    if not memoryview(buf).nbytes:
        return np.empty(0, np.uint8)
    return device.host_pickle_buffer(buf, np.frombuffer(memoryview(buf).cast("B"), np.uint8))


# -- bcast -------------------------------------------------------------------------------------
def _bcast_object(comm: MPI.Intracomm, obj: Any, root: int, name: str, inline_reason: str | None) -> Any:
    """The broadcast itself; records `name` once: as the segmented Bcast went, or, for an object small
    enough to ride the native header, as native with `inline_reason` (served if that is None)."""
    is_root = comm.Get_rank() == root
    pieces: list[np.ndarray] = []
    if is_root:
        data, bufs = _pickle.dumps_oob(obj)
        flats = [_flat(b) for b in bufs]
        total = len(data) + sum(f.nbytes for f in flats)
        if total < INLINE_BELOW:
            header: Any = ("inline", data, [f.tobytes() for f in flats])
        else:
            inline_data = len(data) < INLINE_BELOW
            sizes = [f.nbytes for f in flats]
            if not inline_data:
                pieces.append(np.frombuffer(data, np.uint8))
            pieces.extend(flats)
            header = ("oob", data if inline_data else len(data), sizes)
    else:
        header = None
    header = _MPI_PICKLED_BCAST(comm, header, root)
    if header[0] == "inline":
        counters.record(name, inline_reason)
        data, bufs = header[1], header[2]
        return _pickle.loads_oob(data, [bytearray(b) for b in bufs])
    _, data, sizes = header
    lengths = ([] if isinstance(data, bytes) else [data]) + list(sizes)
    total = sum(lengths)
    if is_root:
        # one contiguous buffer: copy several pieces together; a single piece goes as it is
        wire = pieces[0] if len(pieces) == 1 else (np.concatenate(pieces) if pieces else np.empty(0, np.uint8))
    else:
        wire = np.empty(total, np.uint8)
    collectives.bcast(comm, wire, root, name)
    if is_root:  # like mpi4py, the root gets a copy, not the object itself
        wire = wire.copy()
    views, at = [], 0
    for n in lengths:
        views.append(wire[at : at + n])
        at += n
    in_band: Any = data if isinstance(data, bytes) else views.pop(0)
    return _pickle.loads_oob(in_band, views)


def bcast(comm: MPI.Intracomm, obj: Any, root: int = 0) -> Any:
    """comm.bcast(obj, root) with large objects sent through adaptcoll's segmented Bcast."""
    if not decide.root_ok(root, comm.Get_size()):
        counters.record("bcast", INVALID_ARGUMENTS.reason)
        return _MPI_PICKLED_BCAST(comm, obj, root)
    if settings.current().bcast_algorithm == "native":
        counters.record("bcast", ALGORITHM_NATIVE.reason)
        return _MPI_PICKLED_BCAST(comm, obj, root)
    key = enter(comm, "bcast")
    try:
        return _bcast_object(comm, obj, int(root), "bcast", "small object")
    finally:
        leave(key)


# -- point-to-point with out-of-band buffers, waited on politely -------------------------------
def _wait(reqs: list[MPI.Request]) -> None:
    progress, sched_yield = engine().progress, os.sched_yield
    while not MPI.Request.Testall(reqs):
        if not progress():
            sched_yield()


def _send(dup: MPI.Intracomm, obj: Any, dest: int, tag: int) -> None:
    data, bufs = _pickle.dumps_oob(obj)
    flats = [_flat(b) for b in bufs]
    header = np.array([len(data)] + [f.nbytes for f in flats], np.int64)
    reqs = [dup.Isend(header, dest, tag), dup.Isend(np.frombuffer(data, np.uint8), dest, tag)]
    reqs += [dup.Isend(f, dest, tag) for f in flats]
    _wait(reqs)


def _recv(dup: MPI.Intracomm, source: int, tag: int) -> Any:
    status = MPI.Status()
    progress, sched_yield = engine().progress, os.sched_yield
    while True:
        message = dup.Improbe(source, tag, status)
        if message is not None:
            break
        if not progress():
            sched_yield()
    header = np.empty(status.Get_count(MPI.INT64_T), np.int64)
    message.Recv(header)
    pieces = [np.empty(int(n), np.uint8) for n in header]
    _wait([dup.Irecv(p, source, tag) for p in pieces])
    return _pickle.loads_oob(pieces[0], pieces[1:])


# -- reduce / allreduce ------------------------------------------------------------------------
def _check_op(op: Any) -> None:
    if not (isinstance(op, MPI.Op) or callable(op)):
        raise TypeError(f"reduction operation must be an MPI.Op or a callable, got {type(op).__name__}")


def _reduce_to_zero(comm: MPI.Intracomm, obj: Any, op: Callable[[Any, Any], Any], root: int) -> Any:
    """Fold in rank order up an in-order binomial tree to rank 0, then hand the result to `root`.
    Returns the result on `root`, None elsewhere."""
    st = comm_state(comm)
    st.wait_ready()  # the private duplicate (a blocking call may wait for the set-up)
    with engine().lock:
        tag = st.plan(1, 1, 1).tag(0)
    dup, rank, size = st.dup, st.rank, st.size
    assert dup is not None
    acc = obj
    mask = 1
    while mask < size:
        if rank & mask:
            _send(dup, acc, rank - mask, tag)
            acc = None
            break
        if rank + mask < size:
            acc = op(acc, _recv(dup, rank + mask, tag))
        mask <<= 1
    if root != 0:
        if rank == 0:
            _send(dup, acc, root, tag)
            return None
        if rank == root:
            return _recv(dup, 0, tag)
    if rank == 0 and size == 1:  # like mpi4py: the caller gets a new object, not its own
        acc = _pickle.loads_oob(*_pickle.dumps_oob(acc))
    return acc if rank == root else None


def reduce(comm: MPI.Intracomm, sendobj: Any, op: Any = MPI.SUM, root: int = 0) -> Any:
    """comm.reduce(sendobj, op, root): any associative MPI.Op or callable, folded in rank order."""
    _check_op(op)
    if not decide.root_ok(root, comm.Get_size()):
        counters.record("reduce", INVALID_ARGUMENTS.reason)
        return _MPI_PICKLED_REDUCE(comm, sendobj, op, root)
    if settings.current().reduce_algorithm == "native":
        counters.record("reduce", ALGORITHM_NATIVE.reason)
        return _MPI_PICKLED_REDUCE(comm, sendobj, op, root)
    key = enter(comm, "reduce")
    try:
        result = _reduce_to_zero(comm, sendobj, op, int(root))
    finally:
        leave(key)
    counters.record("reduce")
    return result


def allreduce(comm: MPI.Intracomm, sendobj: Any, op: Any = MPI.SUM) -> Any:
    """comm.allreduce(sendobj, op): the rank-ordered reduce to rank 0, then the pickled bcast."""
    _check_op(op)
    if settings.current().allreduce_algorithm == "native":
        counters.record("allreduce", ALGORITHM_NATIVE.reason)
        return _MPI_PICKLED_ALLREDUCE(comm, sendobj, op)
    key = enter(comm, "allreduce")
    try:
        result = _reduce_to_zero(comm, sendobj, op, 0)
        # the fold was adaptcoll's, so a small result riding the native header still counts as served
        return _bcast_object(comm, result, 0, "allreduce", None)
    finally:
        leave(key)
