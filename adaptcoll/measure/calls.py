"""The calls being timed: buffers of one (collective, size) and zero-argument functions that run or
start a collective on a communicator, on host memory or on CuPy arrays (with the hand-written
host-staged path a user of a non-CUDA-aware MPI would write as the reference)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Buffers",
    "dtype_for",
    "make_buffers",
    "starter",
    "import_cupy",
    "to_device",
    "staged_starter",
    "device_call",
]

_ROOTED = ("bcast", "reduce", "ibcast", "ireduce")


@dataclass
class Buffers:
    """Send/receive buffers of one (collective, size)."""

    send: Any
    recv: Any


def dtype_for(collective: str, reduce_dtype: Any = np.float32) -> np.dtype:
    """Bytes for the broadcasts, `reduce_dtype` (float32 as OSU) for the reductions."""
    return np.dtype(np.uint8) if collective.endswith("bcast") else np.dtype(reduce_dtype)


_BLOCKS = ("allgather", "reduce_scatter")
"""Collectives whose `size` is the whole array, cut into a block per rank (Allgather's result,
Reduce_scatter_block's input)."""


def make_buffers(collective: str, size: int, reduce_dtype: Any = np.float32, ranks: int = 1) -> Buffers:
    """Ones to send, zeros to receive: `size` bytes each (at least one element). Allgather and
    Reduce_scatter_block on `ranks` ranks: `size` bytes is the whole array (p blocks of whole elements,
    at least one each), the other buffer one block."""
    dt = dtype_for(collective, reduce_dtype)
    count = max(1, size // dt.itemsize)
    if collective in _BLOCKS:
        block = max(1, count // ranks)
        if collective == "allgather":
            return Buffers(np.ones(block, dtype=dt), np.zeros(block * ranks, dtype=dt))
        return Buffers(np.ones(block * ranks, dtype=dt), np.zeros(block, dtype=dt))
    return Buffers(np.ones(count, dtype=dt), np.zeros(count, dtype=dt))


def starter(collective: str, comm: Any, bufs: Buffers, root: int, MPI: Any) -> Callable[[], Any]:
    """A zero-argument function that runs (blocking) or starts (I-form: returns the request) the
    collective with MPI.SUM on `comm` ('reduce_scatter': Reduce_scatter_block)."""
    send, recv = bufs.send, bufs.recv
    if collective == "bcast":
        return lambda: comm.Bcast(send, root)
    if collective == "reduce":
        return lambda: comm.Reduce(send, recv, MPI.SUM, root)
    if collective == "allreduce":
        return lambda: comm.Allreduce(send, recv, MPI.SUM)
    if collective == "ibcast":
        return lambda: comm.Ibcast(send, root)
    if collective == "ireduce":
        return lambda: comm.Ireduce(send, recv, MPI.SUM, root)
    if collective == "iallreduce":
        return lambda: comm.Iallreduce(send, recv, MPI.SUM)
    if collective == "allgather":
        return lambda: comm.Allgather(send, recv)
    if collective == "reduce_scatter":
        return lambda: comm.Reduce_scatter_block(send, recv, MPI.SUM)
    raise ValueError(f"unknown collective {collective!r}")


def import_cupy(flag: str = "--device cupy") -> Any:
    """CuPy with a usable GPU, or ValueError saying why `flag` cannot run here."""
    try:
        import cupy
    except Exception as exc:
        raise ValueError(
            f"{flag} needs CuPy and a CUDA GPU: CuPy does not import ({type(exc).__name__}: {exc}); install "
            "adaptcoll[gpu-cuda12] or adaptcoll[gpu-cuda13] to match the CUDA version nvidia-smi shows"
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise ValueError(f"{flag} needs a CUDA GPU: {exc}") from None
    if count < 1:
        raise ValueError(f"{flag} needs a CUDA GPU: CuPy sees none")
    return cupy


def to_device(bufs: Buffers, cupy: Any) -> Buffers:
    """Device copies of host buffers."""
    return Buffers(cupy.asarray(bufs.send), cupy.asarray(bufs.recv))


def staged_starter(collective: str, world: Any, bufs: Buffers, root: int, MPI: Any, cupy: Any) -> Callable[[], Any]:
    """The host-staged path a user writes by hand for a non-CUDA-aware MPI: cupy.asnumpy, the native
    collective on host memory, copy back (ndarray.set) where the call produces data."""
    send, recv = bufs.send, bufs.recv
    rank = world.Get_rank()
    if collective == "bcast":

        def bcast() -> None:
            host = cupy.asnumpy(send) if rank == root else np.empty(send.shape, send.dtype)
            world.Bcast(host, root)
            if rank != root:
                send.set(host)

        return bcast
    if collective == "reduce":

        def reduce() -> None:
            out = np.empty(recv.shape, recv.dtype) if rank == root else None
            world.Reduce(cupy.asnumpy(send), out, MPI.SUM, root)
            if rank == root:
                recv.set(out)

        return reduce
    if collective == "allreduce":

        def allreduce() -> None:
            out = np.empty(recv.shape, recv.dtype)
            world.Allreduce(cupy.asnumpy(send), out, MPI.SUM)
            recv.set(out)

        return allreduce
    raise ValueError(f"the staged path times the blocking collectives only, not {collective!r}")


def device_call(
    kind: str, comm: Any, collective: str, bufs: Buffers, root: int, MPI: Any, cupy: Any, world: Any
) -> Callable[[], Any]:
    """One implementation's call on device buffers (`kind` "staged": the host-staged path on `world`;
    else the collective on `comm`), ending with a device synchronization."""
    if kind == "staged":
        call = staged_starter(collective, world, bufs, root, MPI, cupy)
    else:
        call = starter(collective, comm, bufs, root, MPI)
    synchronize = cupy.cuda.runtime.deviceSynchronize

    def timed() -> None:
        call()
        synchronize()

    return timed
