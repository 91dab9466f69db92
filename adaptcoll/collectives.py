"""The buffer collectives as module functions (`adaptcoll.Intracomm`'s methods are one line each over
these): a small-message fast path, the decision (`adaptcoll.decide`), then either adaptcoll's protocols
or the native mpi4py method with the same arguments, counted in `stats()` either way."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from . import counters, decide
from .engine import engine
from .native import BELOW_THRESHOLD, Native
from .protocols.operation import Operation
from .requests import NativeRequest, Request
from .tune.choose import BELOW_ATTR, UNKNOWN

__all__ = ["start", "wait", "bcast", "ibcast", "reduce", "ireduce", "allreduce", "iallreduce"]

_IN_PLACE = MPI.IN_PLACE
_MPI_BCAST = MPI.Intracomm.Bcast
_MPI_IBCAST = MPI.Intracomm.Ibcast
_MPI_REDUCE = MPI.Intracomm.Reduce
_MPI_IREDUCE = MPI.Intracomm.Ireduce
_MPI_ALLREDUCE = MPI.Intracomm.Allreduce
_MPI_IALLREDUCE = MPI.Intracomm.Iallreduce
_BELOW = BELOW_THRESHOLD.reason
_record = counters.record


def start(name: str, decision: decide.Decision) -> Optional[Operation]:
    """Start a prepared call under the engine lock and count it; None (counted as native) for a Native.

    A Native carrying an error raises it instead. A prepared call with an error (the root's bad
    recvbuf) drains the others' data first, then raises it.
    """
    if isinstance(decision, Native):
        _record(name, decision.reason)
        if decision.error is not None:
            raise decision.error
        return None
    eng = engine()
    with eng.lock:
        operation = decision.start()
    _record(name, None, decision.config.label if decision.config is not None else None)
    if decision.error is not None:
        eng.wait_for(lambda: operation.done)
        raise decision.error
    return operation


def wait(operation: Operation) -> None:
    """Progress until `operation` has completed on this rank."""
    if not operation.done:
        engine().wait_for(lambda: operation.done)


def _small(comm: MPI.Intracomm, buf: Any, collective: str) -> bool:
    """Fast path: a plain NumPy array below the communicator's native threshold for the collective (well
    under a microsecond). The thresholds are the communicator's (tune.choose sets them once its tuning is
    known, all 0 before, so a communicator's first call goes the full way and sets it up on every rank)."""
    return type(buf) is np.ndarray and buf.nbytes < getattr(comm, BELOW_ATTR, UNKNOWN)[collective]


# -- broadcast ------------------------------------------------------------------------------------
def bcast(comm: MPI.Intracomm, buf: Any, root: Any = 0, name: str = "Bcast") -> None:
    """comm.Bcast(buf, root) (`name`: the counter it is recorded under)."""
    if _small(comm, buf, "bcast"):
        _record(name, _BELOW)
        return _MPI_BCAST(comm, buf, root)
    operation = start(name, decide.bcast(comm, buf, root))
    if operation is None:
        return _MPI_BCAST(comm, buf, root)
    return wait(operation)


def ibcast(comm: MPI.Intracomm, buf: Any, root: Any = 0) -> Request:
    """comm.Ibcast(buf, root): an adaptcoll Request."""
    operation = start("Ibcast", decide.bcast(comm, buf, root))
    if operation is None:
        return NativeRequest(_MPI_IBCAST(comm, buf, root), keep=buf)
    return Request(operation)


# -- reduce ---------------------------------------------------------------------------------------
def reduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, root: Any = 0) -> None:
    """comm.Reduce(sendbuf, recvbuf, op, root)."""
    if _small(comm, recvbuf if sendbuf is _IN_PLACE else sendbuf, "reduce"):
        _record("Reduce", _BELOW)
        return _MPI_REDUCE(comm, decide.in_place_send_at_root(comm, sendbuf, recvbuf, root), recvbuf, op, root)
    operation = start("Reduce", decide.reduce(comm, sendbuf, recvbuf, op, root))
    if operation is None:
        return _MPI_REDUCE(comm, decide.in_place_send_at_root(comm, sendbuf, recvbuf, root), recvbuf, op, root)
    return wait(operation)


def ireduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, root: Any = 0) -> Request:
    """comm.Ireduce(sendbuf, recvbuf, op, root): an adaptcoll Request (which keeps the buffers alive)."""
    operation = start("Ireduce", decide.reduce(comm, sendbuf, recvbuf, op, root))
    if operation is None:
        native_send = decide.in_place_send_at_root(comm, sendbuf, recvbuf, root)
        return NativeRequest(_MPI_IREDUCE(comm, native_send, recvbuf, op, root), keep=(sendbuf, recvbuf))
    return Request(operation)


# -- allreduce ------------------------------------------------------------------------------------
def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> None:
    """comm.Allreduce(sendbuf, recvbuf, op); `sendbuf is recvbuf` is treated as IN_PLACE."""
    if _small(comm, recvbuf if sendbuf is _IN_PLACE else sendbuf, "allreduce"):
        _record("Allreduce", _BELOW)
        return _MPI_ALLREDUCE(comm, decide.in_place_send(sendbuf, recvbuf), recvbuf, op)
    operation = start("Allreduce", decide.allreduce(comm, sendbuf, recvbuf, op))
    if operation is None:
        return _MPI_ALLREDUCE(comm, decide.in_place_send(sendbuf, recvbuf), recvbuf, op)
    return wait(operation)


def iallreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM) -> Request:
    """comm.Iallreduce(sendbuf, recvbuf, op): an adaptcoll Request (which keeps the buffers alive)."""
    operation = start("Iallreduce", decide.allreduce(comm, sendbuf, recvbuf, op))
    if operation is None:
        native_send = decide.in_place_send(sendbuf, recvbuf)
        return NativeRequest(_MPI_IALLREDUCE(comm, native_send, recvbuf, op), keep=(sendbuf, recvbuf))
    return Request(operation)
