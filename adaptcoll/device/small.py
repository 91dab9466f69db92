"""The fast path for small CuPy arrays: a blocking Bcast, Reduce or Allreduce on exact `cupy.ndarray`s
below the device threshold, with an MPI that is not CUDA-aware, runs the call the decision layer would
stage (`StagedCall.run`: pinned host copies, the native collective, copies back) without deciding it;
for the nonblocking forms `staged` gives the decision's own StagedCall for the same plain case.

`adaptcoll.forms.collectives` checks the type (`ARRAY_TYPE[0]`, set once a call has been staged with CuPy, so
CuPy is never imported for it) and the size (the communicator's `device_below`, known once its tuning
is); `bcast`/`reduce`/`allreduce` here check the rest of the plain common case (C-contiguous, a dtype
MPI knows, on the current device, an int root in range, a predefined op, the same CuPy module and
ADAPTCOLL_CUDA_AWARE value as when the route was decided) and run the call, or return False before
touching anything, and the call takes the full decision.

Streams: the copies run on CuPy's current stream, which CuPy's `__cuda_array_interface__` names as the
producer's, so a copy out of the user's buffer starts after the work that produced it and a copy into
it after the work already queued there; the host waits for that stream after a copy out, before MPI
reads the pinned buffer, and after the copy back, before the call returns (and before the pinned buffer
goes back to the pool). That is one stream synchronization per copy, the hand-written path's own
(`cupy.asnumpy`, `ndarray.set`), and no copy for a buffer MPI ignores or only writes.

Rank consistency: the native collective is the one the full decision reaches (the staged one), so a
rank taking this path and a rank taking the full decision enter the same collective.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ..buffers import datatype_of
from .aware import CUDA_AWARE_ENV
from .staged import StagedCall

__all__ = ["ARRAY_TYPE", "enable", "bcast", "reduce", "allreduce", "staged"]

ARRAY_TYPE: list[Any] = [None]
"""`cupy.ndarray` once a call on device memory has been staged with CuPy (MPI not CUDA-aware), else None."""

_IN_PLACE = MPI.IN_PLACE
_OP = MPI.Op
_BCAST = MPI.Intracomm.Bcast
_REDUCE = MPI.Intracomm.Reduce
_ALLREDUCE = MPI.Intracomm.Allreduce
_modules = sys.modules
_env_get = os.environ.get
_DTYPE_OK: dict[Any, bool] = {}
_POOL: dict[tuple[int, Any], list[tuple[np.ndarray, int]]] = {}


class _Cupy:
    """What the fast path calls in CuPy, looked up once; `env`: ADAPTCOLL_CUDA_AWARE when it was enabled."""

    __slots__ = ("module", "env", "memcpy", "synchronize", "get_device", "current_stream", "pinned", "kind")

    def __init__(self, cupy: Any, cupyx: Any, env: Optional[str]) -> None:
        runtime = cupy.cuda.runtime
        self.module, self.env = cupy, env
        self.memcpy, self.synchronize, self.kind = runtime.memcpyAsync, runtime.streamSynchronize, runtime.memcpyDefault
        self.get_device, self.current_stream, self.pinned = (
            runtime.getDevice,
            cupy.cuda.get_current_stream,
            cupyx.empty_pinned,
        )


_state: Optional[_Cupy] = None


def enable() -> None:
    """Let small CuPy arrays take the fast path: called by the decision layer when it stages a call with
    CuPy because MPI is not CUDA-aware (so CuPy is imported and that answer is known)."""
    global _state
    cupy, env = _modules.get("cupy"), _env_get(CUDA_AWARE_ENV)
    if cupy is None or (_state is not None and _state.module is cupy and _state.env == env):
        return
    import cupyx

    _state = _Cupy(cupy, cupyx, env)
    ARRAY_TYPE[0] = cupy.ndarray


def _ready() -> Optional[_Cupy]:
    """The CuPy calls, if the route decided when the path was enabled still holds."""
    state = _state
    if state is None or _modules.get("cupy") is not state.module or _env_get(CUDA_AWARE_ENV) != state.env:
        return None
    return state


def _plain(state: _Cupy, buf: Any) -> bool:
    """Whether a cupy.ndarray (the caller checked the type) is C-contiguous, of a dtype MPI knows (the
    full decision stages others with another reason) and on the current device."""
    if not buf.flags.c_contiguous:
        return False
    dtype = buf.dtype
    known = _DTYPE_OK.get(dtype)
    if known is None:
        known = _DTYPE_OK[dtype] = datatype_of(np.dtype(dtype)) is not None
    return known and buf.data.device_id == state.get_device()


def _acquire(state: _Cupy, buf: Any) -> tuple[np.ndarray, int]:
    """A pooled pinned host array shaped like `buf` (1-D), with its address."""
    free = _POOL.get((buf.size, buf.dtype))
    if free:
        return free.pop()
    host = state.pinned((buf.size,), buf.dtype)
    return host, int(host.ctypes.data)


def _release(held: tuple[np.ndarray, int]) -> None:
    """Give a pinned array back (every copy that used it has finished: the host waited for its stream)."""
    host = held[0]
    _POOL.setdefault((host.size, host.dtype), []).append(held)


def _copy_in(state: _Cupy, buf: Any, stream: int) -> tuple[np.ndarray, int]:
    """`buf` in a pinned host array, copied on the producer's stream and waited for."""
    held = _acquire(state, buf)
    try:
        state.memcpy(held[1], buf.data.ptr, buf.nbytes, state.kind, stream)
        state.synchronize(stream)
    except BaseException:
        _release(held)
        raise
    return held


def _copy_out(state: _Cupy, held: tuple[np.ndarray, int], buf: Any, stream: int) -> None:
    """The pinned array copied into `buf` on its producer's stream (after its queued work), waited for."""
    state.memcpy(buf.data.ptr, held[1], buf.nbytes, state.kind, stream)
    state.synchronize(stream)


def _out_of_place(state: _Cupy, sendbuf: Any, recvbuf: Any, call: Callable[[np.ndarray, np.ndarray], None]) -> None:
    """`call(send, recv)` on pinned copies: `sendbuf` copied in, the result copied out into `recvbuf`."""
    stream = state.current_stream().ptr
    held = _copy_in(state, sendbuf, stream)
    try:
        result = _acquire(state, recvbuf)
        try:
            call(held[0], result[0])
            _copy_out(state, result, recvbuf, stream)
        finally:
            _release(result)
    finally:
        _release(held)


def bcast(comm: MPI.Intracomm, buf: Any, root: Any) -> bool:
    """comm.Bcast(buf, root) staged for a small cupy.ndarray `buf`; False (nothing done) if not the plain case."""
    state = _ready()
    if state is None or not _bcast_ok(state, comm, buf, root):
        return False
    stream = state.current_stream().ptr
    if root == comm.Get_rank():
        held = _copy_in(state, buf, stream)
        try:
            _BCAST(comm, held[0], root)
        finally:
            _release(held)
        return True
    held = _acquire(state, buf)  # a receiver: MPI writes the pinned array, nothing to copy in
    try:
        _BCAST(comm, held[0], root)
        _copy_out(state, held, buf, stream)
    finally:
        _release(held)
    return True


def reduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> bool:
    """comm.Reduce(sendbuf, recvbuf, op, root) staged for small cupy.ndarrays (a non-root's recvbuf: a
    cupy.ndarray or None, ignored); False (nothing done) if not the plain case."""
    state = _ready()
    if state is None or not _reduce_ok(state, comm, sendbuf, recvbuf, op, root):
        return False
    if root != comm.Get_rank():
        stream = state.current_stream().ptr
        held = _copy_in(state, sendbuf, stream)
        try:
            _REDUCE(comm, held[0], None, op, root)
        finally:
            _release(held)
        return True
    if sendbuf is _IN_PLACE or sendbuf is recvbuf:
        return _in_place(state, comm, recvbuf, op, root)
    _out_of_place(state, sendbuf, recvbuf, lambda send, recv: _REDUCE(comm, send, recv, op, root))
    return True


def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any) -> bool:
    """comm.Allreduce(sendbuf, recvbuf, op) staged for small cupy.ndarrays (`sendbuf is recvbuf`: in
    place); False (nothing done) if not the plain case."""
    state = _ready()
    if state is None or not _allreduce_ok(state, sendbuf, recvbuf, op):
        return False
    if sendbuf is _IN_PLACE or sendbuf is recvbuf:
        return _in_place(state, comm, recvbuf, op, None)
    _out_of_place(state, sendbuf, recvbuf, lambda send, recv: _ALLREDUCE(comm, send, recv, op))
    return True


def staged(collective: str, comm: MPI.Intracomm, args: tuple[Any, ...]) -> Optional[StagedCall]:
    """For the nonblocking forms: the StagedCall the decision would make for the plain case of a small
    cupy.ndarray call (`args` in mpi4py's order after `comm`), without deciding it; None otherwise."""
    state = _ready()
    if state is None:
        return None
    if collective == "bcast":
        ok = _bcast_ok(state, comm, *args)
    elif collective == "reduce":
        ok = _reduce_ok(state, comm, *args)
    else:
        ok = _allreduce_ok(state, *args)
    return StagedCall(collective, comm, args, _is_array, with_cupy=True) if ok else None


def _is_array(spec: Any) -> bool:
    """StagedCall's device test for the buffers `staged` accepted: cupy.ndarrays (not None or IN_PLACE)."""
    return type(spec) is ARRAY_TYPE[0]


def _bcast_ok(state: _Cupy, comm: MPI.Intracomm, buf: Any, root: Any) -> bool:
    """The plain case of a Bcast on a cupy.ndarray (the caller checked `buf`'s type and size)."""
    return type(root) is int and 0 <= root < comm.Get_size() and _plain(state, buf)


def _reduce_ok(state: _Cupy, comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> bool:
    """The plain case of a Reduce (the caller checked the type and size of recvbuf if sendbuf is
    IN_PLACE, else of sendbuf): a predefined op, an int root in range, a non-root's recvbuf a
    cupy.ndarray or None, the root's buffers plain (in place, or two of the same dtype and size)."""
    if type(op) is not _OP or not op.is_predefined or type(root) is not int or not 0 <= root < comm.Get_size():
        return False
    if root != comm.Get_rank():
        return (
            sendbuf is not _IN_PLACE and (recvbuf is None or type(recvbuf) is ARRAY_TYPE[0]) and _plain(state, sendbuf)
        )
    if sendbuf is _IN_PLACE or sendbuf is recvbuf:
        return _plain(state, recvbuf)
    return _pair(state, sendbuf, recvbuf)


def _allreduce_ok(state: _Cupy, sendbuf: Any, recvbuf: Any, op: Any) -> bool:
    """The plain case of an Allreduce (the caller checked the type and size as for Reduce)."""
    if type(op) is not _OP or not op.is_predefined:
        return False
    if sendbuf is _IN_PLACE or sendbuf is recvbuf:
        return _plain(state, recvbuf)
    return _pair(state, sendbuf, recvbuf)


def _pair(state: _Cupy, sendbuf: Any, recvbuf: Any) -> bool:
    """Whether two distinct buffers are plain cupy.ndarrays of the same dtype and size (others: the full
    decision, which gives MPI's errors for mismatches)."""
    return (
        type(recvbuf) is ARRAY_TYPE[0]
        and recvbuf.dtype == sendbuf.dtype
        and recvbuf.size == sendbuf.size
        and _plain(state, sendbuf)
        and _plain(state, recvbuf)
    )


def _in_place(state: _Cupy, comm: MPI.Intracomm, buf: Any, op: Any, root: Optional[int]) -> bool:
    """An in-place Reduce at its root (`root`) or Allreduce (None) on the cupy.ndarray `buf`."""
    stream = state.current_stream().ptr
    held = _copy_in(state, buf, stream)
    try:
        if root is None:
            _ALLREDUCE(comm, _IN_PLACE, held[0], op)
        else:
            _REDUCE(comm, _IN_PLACE, held[0], op, root)
        _copy_out(state, held, buf, stream)
    finally:
        _release(held)
    return True
