"""Device (CUDA) buffers: how a communicator serves CuPy arrays and other `__cuda_array_interface__` /
`__dlpack__` device buffers when CuPy is installed.

Per communicator, a `DeviceContext` holds a CupyBackend (its own non-blocking stream: folds are
kernels whose events the engine polls), segment pools of device memory, and the transport: the MPI
transport itself when MPI is CUDA-aware (detected by adaptcoll.cuda_aware.cuda_aware_mpi), else a
StagingTransport through pinned host buffers. The producer's stream is synchronized before any device
memory reaches MPI or a kernel (mpi4py does not).
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from .backends.cupy_backend import CupyBackend, HostStaging, synchronize_producer
from .buffers import Message, datatype_of
from .cuda_aware import cuda_aware_mpi
from .native import DEVICE_MEMORY, Kind, Native
from .pool import SegmentPool
from .staging import StagingTransport
from .transport import Transport

__all__ = ["DeviceContext", "parse_device", "cupy_available"]


def cupy_available() -> bool:
    """Whether CuPy imports (and so device buffers can be served)."""
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


def parse_device(spec: Any, writable: bool) -> Union[Message, Native]:
    """A Message whose `array` is a 1-D CuPy view of a device buffer, or the reason to go native.

    Only the plain buffer form is served on the device (tuples with counts/datatypes go native).
    """
    if isinstance(spec, (tuple, list)):
        return Native("device memory with a buffer specification", Kind.DEVICE)
    if not cupy_available():
        return DEVICE_MEMORY
    import cupy

    try:
        arr = cupy.asarray(spec)
    except Exception:
        return DEVICE_MEMORY
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        return Native("non-contiguous buffer", Kind.BAD_BUFFER)
    datatype = datatype_of(np.dtype(arr.dtype))
    if datatype is None:
        return Native("unsupported dtype")
    synchronize_producer(spec)
    flat = arr.reshape(-1, order="A")
    return Message(flat, datatype, int(flat.size))


class DeviceContext:
    """Backend, pools and transport for device segments on one communicator."""

    def __init__(self, mpi_transport: Transport, comm: Any) -> None:
        self.backend = CupyBackend()
        self.cuda_aware, self.why = cuda_aware_mpi(comm)
        if self.cuda_aware:
            self.transport: Transport = mpi_transport
        else:
            self.transport = StagingTransport(mpi_transport, HostStaging(device=self.backend.device.id))
        self._pools: dict[Any, SegmentPool] = {}

    def pool(self, dtype: Any) -> SegmentPool:
        """Device segment buffers of `dtype`."""
        key = np.dtype(dtype)
        found = self._pools.get(key)
        if found is None:
            found = self._pools[key] = SegmentPool(self.backend, key)
        return found
