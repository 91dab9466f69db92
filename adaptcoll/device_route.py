"""The decision layer's rule for device memory: when MPI is not CUDA-aware, no device pointer is ever
passed to MPI.

`decide.bcast/reduce/allreduce` hand every `Native` decision they make to `route_native` (one decorator
in decide.py), so the rule covers every route to native MPI at once: below the device threshold, ops and
types adaptcoll does not fold (MINLOC/MAXLOC, user ops on unsupported types), derived datatypes and
`(buf, count, datatype)` specifications, `algorithm=native`, invalid arguments, and every form that asks
the decision layer (blocking, nonblocking, persistent). For a call with device memory among its buffers:

* MPI is CUDA-aware (`adaptcoll.cuda_aware.mpi_cuda_aware`): native MPI as decided; it reads device
  memory itself.
* Otherwise, with CuPy: the whole call is staged through pinned host memory (`StagedCall`: device ->
  pinned host -> the native collective -> device) and counted in `stats()` as "native (staged): why".
* Otherwise (no CuPy, so nothing can copy device memory): a clear error on every rank that passed
  device memory, instead of a pointer MPI would dereference (a segmentation fault).

Calls adaptcoll serves itself run on the CuPy backend and, without CUDA-aware MPI, over
`StagingTransport`, so their segments reach MPI in pinned host memory only. The pickle-based
collectives send pickled bytes; `host_pickle_buffer` copies an out-of-band pickle buffer whose exporter
declares device memory (CUDA managed memory exports the buffer protocol too) into host memory.
The small-message fast path in `adaptcoll.collectives` takes exact `numpy.ndarray`s only.

Rank consistency: the route depends on the decision (made from arguments every rank shares), on the
buffers being device memory (pass device memory on every rank or on none, as the served path already
requires), on the MPI library's CUDA-awareness and on CuPy being importable (the same on every rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
from mpi4py import MPI

from .backends.cupy_backend import synchronize_producer
from .cuda import declares_device_memory, is_device_buffer
from .cuda_aware import CUDA_AWARE_ENV, mpi_cuda_aware
from .device import cupy_available
from .native import Kind, Native
from .staged_native import StagedCall

__all__ = ["STAGED", "is_device_spec", "route_native", "staged_reason", "host_pickle_buffer"]

STAGED = "native (staged)"
"""Prefix of the stats() reason of calls run as native MPI on pinned host copies of device memory."""


def staged_reason(native: Native) -> str:
    """The stats() reason of a staged call that went native because of `native`."""
    return f"{STAGED}: {native.reason}"


def is_device_spec(spec: Any) -> bool:
    """Whether an mpi4py buffer specification (`buf` or `(buf, ...)`) is device memory."""
    if isinstance(spec, (tuple, list)):
        spec = spec[0] if spec else None
    return spec is not None and spec is not MPI.IN_PLACE and is_device_buffer(spec)


def route_native(
    collective: str, native: Native, comm: MPI.Intracomm, args: Sequence[Any]
) -> Union[Native, StagedCall]:
    """What a `Native` decision becomes for this call (args in mpi4py's order after `comm`): the same
    Native when no buffer is device memory or MPI is CUDA-aware, else the staged call, or an error."""
    if native.error is not None:  # raised before any MPI call
        return native
    specs = args[:1] if collective == "bcast" else args[:2]
    if not any(is_device_spec(spec) for spec in specs):
        return native
    aware, why = mpi_cuda_aware(comm)
    if aware:
        return native
    if not cupy_available():
        name = collective.capitalize()
        return Native(
            native.reason,
            Kind.DEVICE,
            RuntimeError(
                f"adaptcoll {name}: the buffer is device memory and goes to native MPI ({native.reason}), but MPI "
                f"is not CUDA-aware ({why}) and CuPy is not installed, so it can be neither served nor staged "
                "through host memory. Install CuPy (pip install 'adaptcoll[gpu-cuda12]' or "
                f"'adaptcoll[gpu-cuda13]', see docs/gpu.md), or set {CUDA_AWARE_ENV}=1 if this MPI is CUDA-aware."
            ),
        )
    return StagedCall(collective, comm, args, is_device_spec)


def host_pickle_buffer(buf: Any, flat: np.ndarray) -> np.ndarray:
    """`flat` (a uint8 view of the out-of-band pickle buffer `buf`), copied into host memory when the
    buffer's exporter declares device memory, after its producer's stream is synchronized."""
    exporter = getattr(buf, "obj", None)
    if exporter is None:
        try:
            exporter = memoryview(buf).obj
        except TypeError:
            return flat
    if not declares_device_memory(exporter):
        return flat
    try:
        synchronize_producer(exporter)
    except ImportError:  # a stream named, but no CuPy to wait for it with: copy what is there
        pass
    return flat.copy()
