"""Device memory: what memory a buffer is, whether MPI can read it, and how a call on it moves.

The one entry point for the layers above (the decision layer asks only here):

* `memory_kind(obj)` / `is_device_buffer(obj)`: host, device or managed memory (`memory`: CuPy arrays,
  CUDA DLPack producers, and `__cuda_array_interface__` pointers asked of the CUDA driver, `driver`;
  host memory behind that interface is host memory).
* `mpi_cuda_aware(comm)`: whether the MPI library reads device memory itself (`aware`).
* The three routes of a call with device memory: **served** by adaptcoll on CuPy views
  (`parse_device`, `arrays`, and `producers_wait`, which every start of a served call runs; per
  communicator a `DeviceContext`, `context`, whose segments reach a
  non-CUDA-aware MPI through pinned host buffers, `staging`), **native** (`route_native`: unchanged
  when MPI is CUDA-aware) or **staged** (`route_native` -> `StagedCall`, `staged`: the native collective
  on host copies, made with CuPy, or with the CUDA driver where CuPy is missing).
* `host_pickle_buffer`: out-of-band pickle buffers of device memory copied to the host.
"""

from __future__ import annotations

from .arrays import as_cupy, cupy_available, parse_device, producers_wait
from .aware import CUDA_AWARE_ENV, mpi_cuda_aware
from .context import DeviceContext
from .driver import MemoryKind
from .memory import interface_note, is_device_buffer, memory_kind
from .route import STAGED, host_pickle_buffer, is_device_spec, route_native, staged_reason
from .staged import StagedCall

__all__ = [
    "CUDA_AWARE_ENV",
    "STAGED",
    "DeviceContext",
    "MemoryKind",
    "StagedCall",
    "as_cupy",
    "cupy_available",
    "host_pickle_buffer",
    "interface_note",
    "is_device_buffer",
    "is_device_spec",
    "memory_kind",
    "mpi_cuda_aware",
    "parse_device",
    "producers_wait",
    "route_native",
    "staged_reason",
]
