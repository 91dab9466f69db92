"""Whole-call host staging: a collective on device memory that adaptcoll does not serve itself runs as
the native MPI collective on pinned host copies (device -> pinned host -> native collective -> device),
so an MPI that is not CUDA-aware never sees a device pointer.

`StagedCall` is built by the decision layer (`route.route_native`) for one call. `run()` is the
blocking form (the blocking native collective, as a user would stage it by hand, with pooled pinned
buffers); `start()` is the nonblocking and persistent form: the nonblocking native collective, driven
by the engine, whose Operation completes once the results are back in device memory.

Without CuPy the copies are the CUDA driver's (`driver`: synchronous `cuMemcpy` into ordinary host
buffers, after `cuStreamSynchronize` of the producer's stream), for buffers that expose a
`__cuda_array_interface__` pointer.

Order of events, which also gives the stream ordering: the user's producer stream is synchronized
before the device buffers are read (`arrays.as_cupy`); the copies into pinned memory run on
the process's staging stream and the host waits for them before MPI is called, so the native call is
posted in program order on every rank (a nonblocking native collective must be started in the same
order as the rank's other collectives on the communicator); the copies back run on the same stream
and the call (or its request) completes only after the host has seen them finish, so whatever the user
enqueues after it sees the result. The device receive buffer is written only by that final copy.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ..backends.cupy_backend import HostStaging
from ..buffers import dlpack
from ..protocols.operation import Operation
from ..runtime.engine import engine
from ..runtime.transport import Poll
from .arrays import as_cupy
from .driver import driver
from .memory import device_array_info

__all__ = ["STAGED", "StagedCall", "DriverStaging", "process_staging"]

STAGED = "native (staged)"
"""Prefix of the stats() reason of calls run as native MPI on pinned host copies of device memory."""

_IN_PLACE = MPI.IN_PLACE
_STAGING: dict[int, HostStaging] = {}

_BLOCKING: dict[str, Callable[..., Any]] = {
    "bcast": MPI.Intracomm.Bcast,
    "reduce": MPI.Intracomm.Reduce,
    "allreduce": MPI.Intracomm.Allreduce,
}
_NONBLOCKING: dict[str, Callable[..., Any]] = {
    "bcast": MPI.Intracomm.Ibcast,
    "reduce": MPI.Intracomm.Ireduce,
    "allreduce": MPI.Intracomm.Iallreduce,
}


def process_staging(device_id: int) -> HostStaging:
    """The process's pinned-buffer pool and copy stream for whole-call staging on one device."""
    found = _STAGING.get(device_id)
    if found is None:
        found = _STAGING[device_id] = HostStaging(device=device_id)
    return found


class DriverStaging:
    """HostStaging's interface over the CUDA driver, for processes without CuPy: ordinary host buffers,
    synchronous copies (so every poll is already true)."""

    def acquire(self, count: int, dtype: Any) -> np.ndarray:
        return np.empty(count, dtype)

    def release(self, host: np.ndarray) -> None:
        return None

    def copy_async(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            driver().copy(dst, src, nbytes)

    def record(self) -> Poll:
        return lambda: True

    def synchronize(self) -> None:
        return None


_DRIVER_STAGING = DriverStaging()


class _Slot:
    """One argument position holding device memory: what to copy in before and out after the call."""

    __slots__ = ("index", "copy_in", "copy_out")

    def __init__(self, index: int, copy_in: bool, copy_out: bool) -> None:
        self.index, self.copy_in, self.copy_out = index, copy_in, copy_out


def _buffer_of(spec: Any) -> Any:
    """The buffer object of an mpi4py buffer specification (`buf` or `(buf, ...)`)."""
    return spec[0] if isinstance(spec, (tuple, list)) and spec else spec


class StagedCall:
    """One collective call (`collective` in bcast/reduce/allreduce, mpi4py's argument order) whose device
    buffers travel through pinned host memory; `is_device(spec)` says which arguments are device memory.
    `with_cupy`: copy with CuPy (pinned buffers, the staging stream), else with the CUDA driver."""

    def __init__(
        self,
        collective: str,
        comm: MPI.Intracomm,
        args: Sequence[Any],
        is_device: Callable[[Any], bool],
        with_cupy: bool = True,
    ):
        self.collective = collective
        self.comm = comm
        self.args = list(args)
        self.with_cupy = with_cupy
        self.slots = self._plan(comm.Get_rank(), is_device)

    def _plan(self, rank: int, is_device: Callable[[Any], bool]) -> list[_Slot]:
        """Which positions to stage, and the native arguments that stay (IN_PLACE, ignored recvbufs)."""
        args, slots = self.args, []
        if self.collective == "bcast":
            buf, root = args[0], args[1]
            if is_device(buf):
                at_root = _same_rank(root, rank)
                # a receiver copies in only for a buffer specification: a datatype may leave holes that
                # the copy back must not overwrite with garbage
                slots.append(_Slot(0, at_root or isinstance(buf, (tuple, list)), not at_root))
            return slots
        sendbuf, recvbuf = args[0], args[1]
        if self.collective == "reduce":
            at_root = _same_rank(args[3], rank)
            in_place = at_root and (sendbuf is _IN_PLACE or (sendbuf is recvbuf and recvbuf is not None))
        else:
            at_root = True
            in_place = sendbuf is _IN_PLACE or sendbuf is recvbuf
        if in_place:
            args[0] = _IN_PLACE
            if is_device(recvbuf):
                slots.append(_Slot(1, True, True))
            return slots
        if is_device(sendbuf):
            slots.append(_Slot(0, True, False))
        if is_device(recvbuf):
            if at_root:
                slots.append(_Slot(1, isinstance(recvbuf, (tuple, list)), True))
            else:  # a non-root Reduce ignores recvbuf: MPI never sees it
                args[1] = None
        return slots

    # -- the two forms ---------------------------------------------------------------------------
    def run(self) -> None:
        """The blocking form: copy in, the blocking native collective, copy back, all finished on return."""
        staged = self._stage()
        try:
            _BLOCKING[self.collective](self.comm, *staged.args)
            staged.copy_back(poll=False)
            staged.staging_sync()
        finally:
            staged.release()

    def start(self) -> Operation:
        """The nonblocking form: copy in, post the nonblocking native collective (in program order), and
        return an Operation that completes once MPI is done and the results are back on the device."""
        staged = self._stage()
        try:
            request = _NONBLOCKING[self.collective](self.comm, *staged.args)
        except BaseException:
            staged.release()
            raise
        operation = Operation(keep=(self.args, staged, request))
        eng = engine()

        def finished() -> None:
            staged.release()
            operation.complete()

        def native_done() -> None:
            poll = staged.copy_back()
            if poll is None:
                finished()
            else:
                eng.watch(poll, finished)

        eng.add(request, native_done)
        return operation

    def _stage(self) -> _Staged:
        """Pinned copies of this call's device buffers, filled where the call reads them."""
        staged = _Staged(list(self.args), self.with_cupy)
        try:
            for slot in self.slots:
                staged.add(slot, self.collective)
            staged.staging_sync()
        except BaseException:
            staged.release()
            raise
        return staged


class _Staged:
    """The native arguments of one run, with pinned host buffers in place of the device ones."""

    def __init__(self, args: list[Any], with_cupy: bool) -> None:
        self.args = args
        self.with_cupy = with_cupy
        self._held: list[tuple[Any, np.ndarray]] = []
        self._back: list[tuple[Any, np.ndarray, int]] = []
        self._stagers: list[Any] = []
        self._keep: list[Any] = []

    def _device_memory(self, buf: Any, collective: str) -> tuple[Any, int, int, np.dtype]:
        """(stager, pointer, element count, dtype) of the device buffer `buf`, once its producer is done."""
        if self.with_cupy:
            device = as_cupy(buf)
            if not (device.flags.c_contiguous or device.flags.f_contiguous):
                raise BufferError(f"adaptcoll {collective.capitalize()}: device buffer is not contiguous")
            flat = device.reshape(-1, order="A")
            return process_staging(int(flat.data.device_id)), int(flat.data.ptr), int(flat.size), flat.dtype
        info = device_array_info(buf)
        if info.pointer is not None and info.shape is not None and info.dtype is not None:
            if not info.contiguous:
                raise BufferError(f"adaptcoll {collective.capitalize()}: device buffer is not contiguous")
            if info.stream is not None:
                driver().synchronize_stream(info.stream, info.pointer)
            return _DRIVER_STAGING, info.pointer, int(np.prod(info.shape, dtype=np.int64)), info.dtype
        # a DLPack-only producer: its tensor read in place (the capsule kept with the staged buffers; the
        # layout only, never the memory), ordered before the legacy default stream, as asked without one
        layout, _ = dlpack.host_array(buf)
        if not (layout.flags.c_contiguous or layout.flags.f_contiguous):
            raise BufferError(f"adaptcoll {collective.capitalize()}: device buffer is not contiguous")
        self._keep.append(layout)
        pointer = int(layout.__array_interface__["data"][0])
        if layout.size:
            driver().synchronize_stream(1, pointer)
        return _DRIVER_STAGING, pointer, int(layout.size), layout.dtype

    def add(self, slot: _Slot, collective: str) -> None:
        spec = self.args[slot.index]
        stager, pointer, size, dtype = self._device_memory(_buffer_of(spec), collective)
        host = stager.acquire(size, dtype)
        self._held.append((stager, host))
        if stager not in self._stagers:
            self._stagers.append(stager)
        if slot.copy_in:
            stager.copy_async(host.ctypes.data, pointer, host.nbytes)
        if slot.copy_out:
            self._back.append((stager, host, pointer))
        if isinstance(spec, (tuple, list)):
            self.args[slot.index] = type(spec)([host, *spec[1:]])
        else:
            self.args[slot.index] = host

    def staging_sync(self) -> None:
        """Wait for every copy started so far."""
        for stager in self._stagers:
            stager.synchronize()

    def copy_back(self, poll: bool = True) -> Optional[Poll]:
        """Start copying the received host buffers back to the device; with `poll`, a poll that turns
        true once they are all there (None when nothing is copied back)."""
        if not self._back:
            return None
        for stager, host, pointer in self._back:
            stager.copy_async(pointer, host.ctypes.data, host.nbytes)
        if not poll:
            return None
        polls = [stager.record() for stager in self._stagers]
        return polls[0] if len(polls) == 1 else (lambda: all(p() for p in polls))

    def release(self) -> None:
        """Give the pinned buffers back (only once no copy and no MPI call uses them)."""
        for stager, host in self._held:
            stager.release(host)
        self._held = []


def _same_rank(root: Any, rank: int) -> bool:
    """Whether `root` names this rank (an invalid root names none; native MPI then raises its error)."""
    try:
        return not isinstance(root, bool) and operator.index(root) == rank
    except TypeError:
        return False
