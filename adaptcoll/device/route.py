"""The decision layer's rule for device memory: when MPI is not CUDA-aware, no device pointer is ever
passed to MPI.

`decide.bcast/reduce/allreduce` hand every `Native` decision they make to `route_native` (one decorator
in decide.py), so the rule covers every route to native MPI at once: below the device threshold, ops and
types adaptcoll does not fold (MINLOC/MAXLOC, user ops on unsupported types), derived datatypes and
`(buf, count, datatype)` specifications, `algorithm=native`, invalid arguments, and every form that asks
the decision layer (blocking, nonblocking, persistent). For a call with device memory among its buffers:

* MPI is CUDA-aware (`aware.mpi_cuda_aware`): native MPI as decided; it reads device memory itself.
* Otherwise the whole call is staged through host memory (`StagedCall`: device -> host -> the native
  collective -> device), with CuPy's pinned buffers and copy stream, or without CuPy with the CUDA
  driver's copies (`driver`), and counted in `stats()` as "native (staged): why". Nothing is refused:
  a rank that stages and a rank that passes host memory (or `IN_PLACE`) enter the same native
  collective, so ranks never disagree about a call.

Calls adaptcoll serves itself run on the CuPy backend and, without CUDA-aware MPI, over
`StagingTransport`, so their segments reach MPI in pinned host memory only. The pickle-based
collectives send pickled bytes; `host_pickle_buffer` copies an out-of-band pickle buffer whose exporter
declares device memory (CUDA managed memory exports the buffer protocol too) into host memory.
The small-message fast path in `adaptcoll.forms.collectives` takes exact `numpy.ndarray`s, and, once a call
has been staged here with CuPy, exact `cupy.ndarray`s below the device threshold (`small`: the same
staged native call without this decision).

Rank consistency: the route depends on the decision (made from arguments every rank shares), on the
buffers being device memory (pass device memory on every rank or on none, as the served path already
requires), on the MPI library's CUDA-awareness and on CuPy being importable (the same on every rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
from mpi4py import MPI

from ..backends.cupy_backend import synchronize_producer
from ..runtime.native import Native
from .arrays import cupy_available
from .aware import mpi_cuda_aware
from .memory import declares_device_memory, is_device_buffer
from .small import enable as enable_small_arrays
from .staged import STAGED, StagedCall

__all__ = ["STAGED", "is_device_spec", "route_native", "staged_reason", "host_pickle_buffer"]


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
    Native when no buffer is device memory or MPI is CUDA-aware, else the staged call."""
    if native.error is not None:  # raised before any MPI call
        return native
    specs = args[:1] if collective == "bcast" else args[:2]
    if not any(is_device_spec(spec) for spec in specs):
        return native
    aware, _ = mpi_cuda_aware(comm)
    if aware:
        return native
    with_cupy = cupy_available()
    if with_cupy:  # from now on small CuPy arrays may skip this decision (adaptcoll.device.small)
        enable_small_arrays()
    return StagedCall(collective, comm, args, is_device_spec, with_cupy=with_cupy)


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
