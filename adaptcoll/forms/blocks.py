"""Allgather, Reduce_scatter_block and Reduce_scatter (and their I-forms) as module functions, with
mpi4py's signatures and semantics: a small-message fast path, the decision (`block_decide`), then the
ring protocols or the native mpi4py method with the same arguments, counted in `stats()` under the
method's name either way.

The fast path costs a size check once the communicator's tuning is known (its first blocking adaptcoll
collective; the I-forms use the provisional tuning's thresholds until then, as their decisions do): a
plain NumPy array (or another host form `spec_size` sizes) below the collective's
threshold goes straight to mpi4py. The thresholds are cached on the communicator object with the
settings they were computed under, so `configure()` takes effect at the next call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from ..decision import blocks as block_decide
from ..runtime import counters, settings
from ..state.comm_state import settle_setup
from ..tune.blocks import block_below
from ..tune.choose import BELOW_ATTR, NB_BELOW_ATTR, comm_tuning
from .collectives import start, wait
from .requests import NativeRequest, Request
from .spec_size import host_nbytes
from .threads import enter, leave

__all__ = [
    "allgather",
    "iallgather",
    "reduce_scatter_block",
    "ireduce_scatter_block",
    "reduce_scatter",
    "ireduce_scatter",
    "BLOCKS_BELOW_ATTR",
]

BLOCKS_BELOW_ATTR = "_adaptcoll_blocks_below"
"""Attribute of an adaptcoll communicator: {id(settings): {collective: threshold}}, the fast path's
thresholds under the settings objects seen (computed once per settings object)."""
NB_BLOCKS_BELOW_ATTR = "_adaptcoll_nb_blocks_below"
"""As BLOCKS_BELOW_ATTR, the nonblocking forms' thresholds from the provisional tuning while the
communicator's own is not known (until its first blocking call)."""
_KEEP = "_settings"
"""Suffix of the attribute that keeps a cache's settings objects alive (their ids are its keys)."""

_IN_PLACE = MPI.IN_PLACE
_SUM = MPI.SUM
_NDARRAY = np.ndarray
_BELOW = counters.below
_getattr = getattr
_MPI_ALLGATHER = MPI.Intracomm.Allgather
_MPI_IALLGATHER = MPI.Intracomm.Iallgather
_MPI_RSB = MPI.Intracomm.Reduce_scatter_block
_MPI_IRSB = MPI.Intracomm.Ireduce_scatter_block
_MPI_RS = MPI.Intracomm.Reduce_scatter
_MPI_IRS = MPI.Intracomm.Ireduce_scatter


_EMPTY: dict[int, dict[str, int]] = {}
_current_id = [id(settings.current())]
"""id() of the settings in force, kept up to date by a settings listener (the fast path reads it)."""


def _follow(current: settings.Settings) -> None:
    _current_id[0] = id(current)


settings.on_change(_follow)


def _threshold(comm: MPI.Intracomm, collective: str, nonblocking: bool = False) -> int:
    """The fast path's threshold for `collective` on `comm`, computed once per settings object and cached
    on the communicator (a few of them: a benchmark switches). While the tuning is not known: 0 for the
    blocking forms (their full path sets it up); for the nonblocking forms, once a nonblocking call has
    decided (tune.choose.NB_BELOW_ATTR), the provisional tuning's, which is what they decide with."""
    if getattr(comm, BELOW_ATTR, None) is not None:
        return _cached(comm, BLOCKS_BELOW_ATTR, collective)
    if nonblocking and getattr(comm, NB_BELOW_ATTR, None) is not None:
        return _cached(comm, NB_BLOCKS_BELOW_ATTR, collective)
    return 0


def _cached(comm: MPI.Intracomm, attr: str, collective: str) -> int:
    """The thresholds of the communicator's current tuning under the settings in force, cached in `attr`
    (computed and remembered once per settings object)."""
    current = settings.current()
    cache = getattr(comm, attr, None)
    found = cache.get(id(current)) if cache is not None else None
    if found is not None:
        return found[collective]
    tuning = comm_tuning(comm, False)
    below = {c: block_below(tuning, c) for c in settings.BLOCK_COLLECTIVES}
    if cache is None or len(cache) >= 8:
        cache = {}
        try:
            setattr(comm, attr, cache)
            setattr(comm, attr + _KEEP, [])
        except AttributeError:  # a plain mpi4py communicator object
            return 0
    getattr(comm, attr + _KEEP).append(current)  # the ids stay those of live objects
    cache[id(current)] = below
    return below[collective]


# -- allgather ------------------------------------------------------------------------------------
def allgather(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any) -> None:
    """Allgather (mpi4py's signature and semantics; `MPI.IN_PLACE`: this rank's block is in recvbuf)."""
    nbytes = recvbuf.nbytes if type(recvbuf) is _NDARRAY else host_nbytes(recvbuf)
    found = _getattr(comm, BLOCKS_BELOW_ATTR, _EMPTY).get(_current_id[0])
    if 0 <= nbytes < (found["allgather"] if found is not None else _threshold(comm, "allgather")):
        _BELOW["Allgather"] += 1
        return _MPI_ALLGATHER(comm, sendbuf, recvbuf)
    key = enter(comm, "Allgather")
    try:
        decision = block_decide.allgather(comm, sendbuf, recvbuf, "Allgather", blocking=True)
        operation = start("Allgather", decision, comm, blocking=True)
        if operation is None:
            return _MPI_ALLGATHER(comm, sendbuf, recvbuf)
        return wait(operation)
    finally:
        leave(key)


def iallgather(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any) -> Request:
    """comm.Iallgather(sendbuf, recvbuf): an adaptcoll Request (which keeps the buffers alive)."""
    nbytes = recvbuf.nbytes if type(recvbuf) is _NDARRAY else host_nbytes(recvbuf)
    found = _getattr(comm, BLOCKS_BELOW_ATTR, _EMPTY).get(_current_id[0])
    if 0 <= nbytes < (found["allgather"] if found is not None else _threshold(comm, "allgather", True)):
        _BELOW["Iallgather"] += 1
        settle_setup(comm)
        return NativeRequest(_MPI_IALLGATHER(comm, sendbuf, recvbuf), (sendbuf, recvbuf))
    key = enter(comm, "Iallgather")
    try:
        operation = start("Iallgather", block_decide.allgather(comm, sendbuf, recvbuf, "Iallgather"), comm)
        if operation is None:
            settle_setup(comm)
            return NativeRequest(_MPI_IALLGATHER(comm, sendbuf, recvbuf), (sendbuf, recvbuf))
        return Request(operation)
    finally:
        leave(key)


# -- reduce-scatter -------------------------------------------------------------------------------
def reduce_scatter_block(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = _SUM) -> None:
    """Reduce_scatter_block (mpi4py's signature and semantics; `MPI.IN_PLACE`: the input is recvbuf,
    whose first recvbuf/p elements receive this rank's block)."""
    data = recvbuf if sendbuf is _IN_PLACE else sendbuf
    nbytes = data.nbytes if type(data) is _NDARRAY else host_nbytes(data)
    found = _getattr(comm, BLOCKS_BELOW_ATTR, _EMPTY).get(_current_id[0])
    if 0 <= nbytes < (found["reduce_scatter"] if found is not None else _threshold(comm, "reduce_scatter")):
        _BELOW["Reduce_scatter_block"] += 1
        return _MPI_RSB(comm, sendbuf, recvbuf, op)
    key = enter(comm, "Reduce_scatter_block")
    try:
        name = "Reduce_scatter_block"
        decision = block_decide.reduce_scatter(comm, sendbuf, recvbuf, None, op, name, True, blocking=True)
        operation = start(name, decision, comm, blocking=True)
        if operation is None:
            return _MPI_RSB(comm, sendbuf, recvbuf, op)
        return wait(operation)
    finally:
        leave(key)


def ireduce_scatter_block(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any = _SUM) -> Request:
    """comm.Ireduce_scatter_block(sendbuf, recvbuf, op): an adaptcoll Request."""
    data = recvbuf if sendbuf is _IN_PLACE else sendbuf
    nbytes = data.nbytes if type(data) is _NDARRAY else host_nbytes(data)
    found = _getattr(comm, BLOCKS_BELOW_ATTR, _EMPTY).get(_current_id[0])
    if 0 <= nbytes < (found["reduce_scatter"] if found is not None else _threshold(comm, "reduce_scatter", True)):
        _BELOW["Ireduce_scatter_block"] += 1
        settle_setup(comm)
        return NativeRequest(_MPI_IRSB(comm, sendbuf, recvbuf, op), (sendbuf, recvbuf))
    key = enter(comm, "Ireduce_scatter_block")
    try:
        name = "Ireduce_scatter_block"
        operation = start(name, block_decide.reduce_scatter(comm, sendbuf, recvbuf, None, op, name, True), comm)
        if operation is None:
            settle_setup(comm)
            return NativeRequest(_MPI_IRSB(comm, sendbuf, recvbuf, op), (sendbuf, recvbuf))
        return Request(operation)
    finally:
        leave(key)


def reduce_scatter(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = _SUM) -> None:
    """Reduce_scatter (mpi4py's signature and semantics: rank r gets recvcounts[r] elements; without
    recvcounts mpi4py gathers the receive counts itself, natively)."""
    data = recvbuf if sendbuf is _IN_PLACE else sendbuf
    nbytes = data.nbytes if type(data) is _NDARRAY else host_nbytes(data)
    found = _getattr(comm, BLOCKS_BELOW_ATTR, _EMPTY).get(_current_id[0])
    if 0 <= nbytes < (found["reduce_scatter"] if found is not None else _threshold(comm, "reduce_scatter")):
        _BELOW["Reduce_scatter"] += 1
        return _MPI_RS(comm, sendbuf, recvbuf, recvcounts, op)
    key = enter(comm, "Reduce_scatter")
    try:
        name = "Reduce_scatter"
        decision = block_decide.reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, name, False, blocking=True)
        operation = start(name, decision, comm, blocking=True)
        if operation is None:
            return _MPI_RS(comm, sendbuf, recvbuf, recvcounts, op)
        return wait(operation)
    finally:
        leave(key)


def ireduce_scatter(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, recvcounts: Any = None, op: Any = _SUM) -> Request:
    """comm.Ireduce_scatter(sendbuf, recvbuf, recvcounts, op): an adaptcoll Request."""
    data = recvbuf if sendbuf is _IN_PLACE else sendbuf
    nbytes = data.nbytes if type(data) is _NDARRAY else host_nbytes(data)
    found = _getattr(comm, BLOCKS_BELOW_ATTR, _EMPTY).get(_current_id[0])
    if 0 <= nbytes < (found["reduce_scatter"] if found is not None else _threshold(comm, "reduce_scatter", True)):
        _BELOW["Ireduce_scatter"] += 1
        settle_setup(comm)
        return NativeRequest(_MPI_IRS(comm, sendbuf, recvbuf, recvcounts, op), (sendbuf, recvbuf))
    key = enter(comm, "Ireduce_scatter")
    try:
        name = "Ireduce_scatter"
        decision = block_decide.reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op, name, False)
        operation = start(name, decision, comm)
        if operation is None:
            settle_setup(comm)
            return NativeRequest(_MPI_IRS(comm, sendbuf, recvbuf, recvcounts, op), (sendbuf, recvbuf))
        return Request(operation)
    finally:
        leave(key)
