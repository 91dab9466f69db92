"""Device (CUDA) buffers: how a communicator serves CuPy arrays and other `__cuda_array_interface__` /
`__dlpack__` device buffers when CuPy is installed.

Per communicator, a `DeviceContext` holds a CupyBackend (its own non-blocking stream: folds are
kernels whose events the engine polls), segment pools of device memory, and the transport: the MPI
transport itself when MPI is CUDA-aware (adaptcoll.cuda_aware.mpi_cuda_aware), else a StagingTransport
through pinned host buffers. The producer's stream is synchronized (`as_cupy`) before any device memory
reaches MPI, a copy or a kernel (mpi4py does not synchronize anything).
"""

from __future__ import annotations

import sys
from typing import Any, Union

import numpy as np

from .backends.cupy_backend import CupyBackend, HostStaging, synchronize_producer
from .buffers import Message, datatype_of
from .cuda import DLPACK_CUDA_DEVICE_TYPES
from .cuda_aware import mpi_cuda_aware
from .native import DEVICE_MEMORY, Kind, Native
from .pool import SegmentPool
from .staging import StagingTransport
from .transport import Transport

__all__ = ["DeviceContext", "as_cupy", "parse_device", "cupy_available"]


def cupy_available() -> bool:
    """Whether CuPy imports (and so device buffers can be served)."""
    if sys.modules.get("cupy") is not None:
        return True
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


def as_cupy(obj: Any) -> Any:
    """A zero-copy CuPy view of the device buffer `obj`, whose producer's work has finished.

    Objects with `__cuda_array_interface__` (CuPy, Numba, PyTorch) are viewed with `cupy.asarray` once
    the stream they name (CAI v3; CuPy names its current stream) has been synchronized. DLPack-only
    producers (JAX, ...) go through `cupy.from_dlpack`, which asks the producer to order its work before
    CuPy's current stream, and that stream is then synchronized. (`cupy.asarray` would silently copy a
    DLPack-only object through host memory, so a receive into it would be lost.) ValueError if `obj`
    is neither.
    """
    import cupy

    if isinstance(obj, cupy.ndarray):  # CuPy's interface names its current stream: wait for that one
        cupy.cuda.get_current_stream().synchronize()
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        synchronize_producer(obj)
        return cupy.asarray(obj)
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or device()[0] not in DLPACK_CUDA_DEVICE_TYPES:
        raise ValueError(f"{type(obj).__name__} is not CUDA device memory")
    array = cupy.from_dlpack(obj)
    cupy.cuda.get_current_stream().synchronize()
    return array


def parse_device(spec: Any, writable: bool) -> Union[Message, Native]:
    """A Message whose `array` is a 1-D CuPy view of a device buffer, or the reason to go native.

    Only the plain buffer form is served on the device (tuples with counts/datatypes go native).
    """
    if isinstance(spec, (tuple, list)):
        return Native("device memory with a buffer specification", Kind.DEVICE)
    if not cupy_available():
        return DEVICE_MEMORY
    try:
        arr = as_cupy(spec)
    except Exception:
        return DEVICE_MEMORY
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        return Native("non-contiguous buffer", Kind.BAD_BUFFER)
    if writable and arr is not spec and _declared_read_only(spec):
        return Native("read-only buffer", Kind.BAD_BUFFER)
    datatype = datatype_of(np.dtype(arr.dtype))
    if datatype is None:
        return Native("unsupported dtype")
    flat = arr.reshape(-1, order="A")
    return Message(flat, datatype, int(flat.size))


def _declared_read_only(obj: Any) -> bool:
    """Whether the producer marks the memory read-only in its `__cuda_array_interface__` (data[1])."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    try:
        return bool(cai["data"][1]) if isinstance(cai, dict) else False
    except (KeyError, IndexError, TypeError):
        return False


class DeviceContext:
    """Backend, pools and transport for device segments on one communicator."""

    def __init__(self, mpi_transport: Transport, comm: Any) -> None:
        self.backend = CupyBackend()
        self.cuda_aware, self.why = mpi_cuda_aware(comm)
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
