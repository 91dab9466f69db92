"""`DeviceContext`: what one communicator needs to serve device buffers (created on its first device
call): a CupyBackend (its own non-blocking stream; folds are kernels whose events the engine polls),
segment pools of device memory, and the transport: the MPI transport itself when MPI is CUDA-aware
(`aware.mpi_cuda_aware`), else a StagingTransport through pinned host buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends.cupy_backend import CupyBackend, HostStaging
from ..backends.pool import SegmentPool
from ..runtime.transport import Transport
from .aware import mpi_cuda_aware
from .staging import StagingTransport

__all__ = ["DeviceContext"]


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
