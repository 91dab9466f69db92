"""Persistent collectives: Bcast_init / Reduce_init / Allreduce_init return a `Prequest` to Start()
many times. Buffers are parsed, trees built, the segment plan sized and the segment pool chosen once;
each Start() only takes a fresh tag base from the communicator's tag sequence and posts the protocol.

Settings in force at *_init time apply to every start (a persistent request is a fixed plan). Calls
adaptcoll does not serve become native MPI persistent requests behind the same interface.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
from mpi4py import MPI

from . import buffers, counters, settings
from .comm import (_NUMPY, _native, _prepare, _reduce_unserved, _root_ok, _root_target, comm_state, start_on_links,
                   tree_links)
from .engine import engine
from .protocols.allreduce import Allreduce
from .protocols.bcast import Bcast
from .protocols.reduce import Reduce
from .requests import Operation, Request

__all__ = ["Prequest", "NativePrequest", "bcast_init", "reduce_init", "allreduce_init"]

_IN_PLACE = MPI.IN_PLACE

Starter = Callable[[], Operation]


class Prequest(Request):
    """A persistent adaptcoll collective: Start(), then Test()/Wait() (or Request.Waitall), any number
    of times; Free() when done. Inactive (never started, or completed) requests test as complete."""

    __slots__ = ("_start", "_keep", "_error")

    def __init__(self, start: Starter, keep: Any = None, error: Optional[BaseException] = None) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self._reported = True  # inactive until started
        self._start: Optional[Starter] = start
        self._keep = keep
        self._error = error

    def _finished(self) -> bool:
        op = self._op
        return op is None or op.done

    def Start(self) -> None:
        """Begin one more run of the collective (the previous one must have completed)."""
        if self._start is None:
            raise ValueError("Start() on a freed persistent request")
        if not self._finished():
            raise RuntimeError("Start() on an active persistent request (Wait for it first)")
        eng = engine()
        with eng.lock:
            self._op = self._start()
        self._reported = False
        if self._error is not None:  # the root's recvbuf was bad: the others' data was drained, now report
            eng.wait_for(self._finished)
            raise self._error

    def Free(self) -> None:
        """Release the request (waits for an active run to finish first)."""
        if not self._finished():
            engine().wait_for(self._finished)
        self._start = self._keep = self._op = None

    @classmethod
    def Startall(cls, requests: Sequence["Prequest | MPI.Prequest"]) -> None:
        """Start every request in the list (adaptcoll and native persistent requests alike)."""
        for r in requests:
            r.Start()


class NativePrequest(Prequest):
    """A native MPI persistent request behind the Prequest interface (for calls adaptcoll does not serve)."""

    __slots__ = ("_req",)

    def __init__(self, req: MPI.Prequest, keep: Any = None) -> None:
        super().__init__(lambda: Operation(), keep)
        self._req: Optional[MPI.Prequest] = req

    def _finished(self) -> bool:
        return self._req is None or bool(self._req.Test())

    def Start(self) -> None:
        if self._req is None:
            raise ValueError("Start() on a freed persistent request")
        self._req.Start()
        self._reported = False

    def Free(self) -> None:
        if self._req is not None:
            engine().wait_for(self._finished)
            self._req.Free()
        self._req = self._keep = None


# -- Bcast_init ------------------------------------------------------------------------------------
def _bcast_starter(comm: Any, buf: Any, root: Any) -> Starter | str:
    cfg = settings.current()
    size = comm.Get_size()
    if not _root_ok(root, size):
        return "invalid arguments"
    if cfg.bcast_algorithm == "native":
        return "algorithm=native"
    root = int(root)
    rank = comm.Get_rank()
    msg = buffers.parse(buf, writable=rank != root)
    if isinstance(msg, str):
        return msg
    if msg.nbytes < cfg.threshold("bcast"):
        return "below native_below"
    st = comm_state(comm)
    itemsize = msg.array.itemsize
    data = msg.array.view(np.uint8)
    shape = st.plan_shape(msg.nbytes, 1, max(itemsize, cfg.bcast_segment_size // itemsize * itemsize))
    links = tree_links(st.trees(cfg.bcast_algorithm, root), rank, shape.nseg)
    transport, sw, rw, sync = st.transport, cfg.bcast_send_window, cfg.bcast_recv_window, cfg.sync_sends

    def start() -> Operation:
        plan = st.take_tags(shape)
        return st.track(plan, start_on_links(links, None, lambda parent, children, segs, done: Bcast(
            transport, parent, children, data, plan, segs, sw, rw, sync, done).start()))

    return start


def bcast_init(comm: Any, buf: Any, root: int = 0, info: MPI.Info = MPI.INFO_NULL) -> Prequest:
    """comm.Bcast_init(buf, root, info): a persistent broadcast request."""
    _prepare(comm, "bcast")
    with engine().lock:
        start = _bcast_starter(comm, buf, root)
    if isinstance(start, str):
        _native("Bcast_init", start)
        return NativePrequest(MPI.Intracomm.Bcast_init(comm, buf, root, info), keep=buf)
    counters.record("Bcast_init")
    return Prequest(start, keep=buf)


# -- Reduce_init -----------------------------------------------------------------------------------
def _reduce_starter(comm: Any, sendbuf: Any, recvbuf: Any, op: Any, root: Any
                    ) -> tuple[Starter, Optional[BaseException]] | str:
    cfg = settings.current()
    size = comm.Get_size()
    if not isinstance(op, MPI.Op) or not _root_ok(root, size):
        return "invalid arguments"
    if cfg.reduce_algorithm == "native":
        return "algorithm=native"
    root = int(root)
    rank = comm.Get_rank()
    is_root = rank == root
    in_place = is_root and (sendbuf is _IN_PLACE or (sendbuf is recvbuf and recvbuf is not None))
    if in_place:
        msg = buffers.parse(recvbuf, writable=True)
    elif sendbuf is _IN_PLACE:
        return "invalid arguments"
    else:
        msg = buffers.parse(sendbuf, writable=False)
    if isinstance(msg, str):
        return msg
    why = _reduce_unserved(msg, op, cfg.threshold("reduce"))
    if isinstance(why, str):
        return why
    rop, ordered_needed = why
    if ordered_needed and root != 0:
        return "non-commutative op with root != 0"
    target, error = None, None
    if is_root:
        target, error = (msg.array, None) if in_place else _root_target(recvbuf, msg)
    st = comm_state(comm)
    dtype = msg.array.dtype
    shape = st.plan_shape(msg.count, dtype.itemsize, cfg.reduce_segment_size)
    links = tree_links(st.trees(cfg.reduce_algorithm, root, rank_ordered=ordered_needed), rank, shape.nseg)
    local = target if in_place else msg.array
    ordered = ordered_needed or cfg.reproducible
    pool = st.pool(dtype)
    transport, sw, rw, sync = st.transport, cfg.reduce_send_window, cfg.reduce_recv_window, cfg.sync_sends

    def start() -> Operation:
        plan = st.take_tags(shape)
        return st.track(plan, start_on_links(links, None, lambda parent, children, segs, done: Reduce(
            transport, _NUMPY, pool, parent, children, local, target, rop, plan, segs, sw, rw, sync, ordered,
            done).start()))

    return start, error


def _native_pair(sendbuf: Any, recvbuf: Any) -> Any:
    """mpi4py 4.1.2 rejects aliased buffers; the next mpi4py (and adaptcoll) read them as IN_PLACE."""
    return _IN_PLACE if sendbuf is recvbuf and recvbuf is not None else sendbuf


def reduce_init(comm: Any, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0,
                info: MPI.Info = MPI.INFO_NULL) -> Prequest:
    """comm.Reduce_init(sendbuf, recvbuf, op, root, info): a persistent reduce request."""
    _prepare(comm, "reduce")
    with engine().lock:
        found = _reduce_starter(comm, sendbuf, recvbuf, op, root)
    if isinstance(found, str):
        _native("Reduce_init", found)
        sendbuf = _native_pair(sendbuf, recvbuf) if comm.Get_rank() == root else sendbuf
        return NativePrequest(MPI.Intracomm.Reduce_init(comm, sendbuf, recvbuf, op, root, info),
                              keep=(sendbuf, recvbuf))
    counters.record("Reduce_init")
    return Prequest(found[0], keep=(sendbuf, recvbuf), error=found[1])


# -- Allreduce_init --------------------------------------------------------------------------------
def _allreduce_starter(comm: Any, sendbuf: Any, recvbuf: Any, op: Any) -> Starter | str:
    cfg = settings.current()
    if not isinstance(op, MPI.Op):
        return "invalid arguments"
    if cfg.allreduce_algorithm == "native":
        return "algorithm=native"
    in_place = sendbuf is _IN_PLACE or sendbuf is recvbuf
    rmsg = buffers.parse(recvbuf, writable=True)
    if isinstance(rmsg, str):
        return rmsg
    if in_place:
        local = rmsg.array
    else:
        smsg = buffers.parse(sendbuf, writable=False)
        if isinstance(smsg, str):
            return smsg
        if smsg.count != rmsg.count or smsg.array.dtype != rmsg.array.dtype:
            return "invalid arguments"
        if np.may_share_memory(smsg.array, rmsg.array):
            return "invalid arguments"
        local = smsg.array
    why = _reduce_unserved(rmsg, op, cfg.threshold("allreduce"))
    if isinstance(why, str):
        return why
    rop, ordered_needed = why
    st = comm_state(comm)
    rank = comm.Get_rank()
    dtype = rmsg.array.dtype
    result = rmsg.array
    shape = st.plan_shape(rmsg.count, dtype.itemsize, cfg.allreduce_segment_size)
    links = tree_links(st.allreduce_trees(cfg.allreduce_algorithm, cfg.allreduce_roots, rank_ordered=ordered_needed),
                   rank, shape.nseg)
    ordered = ordered_needed or cfg.reproducible
    pool = st.pool(dtype)
    transport, sw, rw, sync = st.transport, cfg.reduce_send_window, cfg.reduce_recv_window, cfg.sync_sends

    def start() -> Operation:
        plan = st.take_tags(shape)
        return st.track(plan, start_on_links(links, None, lambda parent, children, segs, done: Allreduce(
            transport, _NUMPY, pool, parent, children, local, result, rop, plan, segs, sw, rw, sync, ordered,
            done).start()))

    return start


def allreduce_init(comm: Any, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,
                   info: MPI.Info = MPI.INFO_NULL) -> Prequest:
    """comm.Allreduce_init(sendbuf, recvbuf, op, info): a persistent allreduce request."""
    _prepare(comm, "allreduce")
    with engine().lock:
        start = _allreduce_starter(comm, sendbuf, recvbuf, op)
    if isinstance(start, str):
        _native("Allreduce_init", start)
        return NativePrequest(MPI.Intracomm.Allreduce_init(comm, _native_pair(sendbuf, recvbuf), recvbuf, op, info),
                              keep=(sendbuf, recvbuf))
    counters.record("Allreduce_init")
    return Prequest(start, keep=(sendbuf, recvbuf))
