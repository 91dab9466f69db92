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
from collections.abc import Callable
from typing import Any, Union

import numpy as np
from mpi4py import MPI

from ..backends.cupy_backend import synchronize_producer
from ..buffers import Message, datatype_of, unpack_spec
from ..buffers.datatypes import numpy_dtype, signature
from ..runtime.native import DEVICE_MEMORY, Kind, Native
from .memory import DLPACK_CUDA_DEVICE_TYPES

__all__ = ["as_cupy", "parse_device", "cupy_available", "producers_wait"]


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


def producers_wait(specs: Any) -> Callable[[], None]:
    """A step that waits, as `as_cupy` does, for the producers of the device buffers among the buffer
    specifications `specs` (host buffers, None and IN_PLACE are skipped).

    A served call runs it before each start: `parse_device` waits once, when the call is decided, but
    a persistent request's buffers may be written again (refilled, or zeroed for the next receive) on
    the user's stream between its starts, and a start must neither read nor overwrite them before that
    work has landed (a CuPy refill racing the next Bcast's receive left stale values on the H100)."""
    buffers = []
    for spec in specs:
        parts = unpack_spec(spec) if spec is not None and spec is not MPI.IN_PLACE else None
        if parts is not None and not isinstance(parts, Native):
            buffers.append(parts[0])

    def wait() -> None:
        for buf in buffers:
            as_cupy(buf)

    return wait


def parse_device(spec: Any, writable: bool) -> Union[Message, Native]:
    """A Message whose `array` is a 1-D CuPy view of a device buffer, or the reason to go native.

    Buffer specifications are read as on the host (adaptcoll.buffers): the message is its type
    signature, so `d`, `[d, n]`, `[d, n, MPI.FLOAT]` and `[d, 1, MPI.FLOAT.Create_contiguous(n)]` of
    the same memory are the same Message and every rank decides alike whatever form it used. Only
    datatypes whose elements are not back to back go native (staged through host memory when MPI is
    not CUDA-aware): packing device memory would need a kernel per layout.
    """
    parts = unpack_spec(spec)
    if isinstance(parts, Native):
        return parts
    buf, count, displ, datatype = parts
    if not cupy_available():
        return DEVICE_MEMORY
    try:
        arr = as_cupy(buf)
    except Exception:
        return DEVICE_MEMORY
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        return Native("non-contiguous buffer", Kind.BAD_BUFFER)
    if writable and arr is not buf and _declared_read_only(buf):
        return Native("read-only buffer", Kind.BAD_BUFFER)
    flat = arr.reshape(-1, order="A")
    if datatype is None and count is None:
        basic = datatype_of(np.dtype(arr.dtype))
        if basic is None:
            return Native("unsupported dtype")
        return Message(flat, basic, int(flat.size))
    return _device_view(flat, count, displ, datatype)


def _device_view(flat: Any, count: Any, displ: Any, datatype: Any) -> Union[Message, Native]:
    """The Message for `count` items of `datatype` at item `displ` of the 1-D device array `flat`."""
    if datatype is None:
        datatype = datatype_of(np.dtype(flat.dtype))
        if datatype is None:
            return Native("unsupported dtype")
    elif isinstance(datatype, str):
        try:
            datatype = MPI.Datatype.fromcode(datatype)
        except (KeyError, ValueError):
            return Native("unknown typecode", Kind.INVALID)
    if not isinstance(datatype, MPI.Datatype) or datatype == MPI.DATATYPE_NULL:
        return Native("malformed buffer specification", Kind.INVALID)
    sig = signature(datatype)
    base_dtype = numpy_dtype(sig.base) if sig.base is not None else None
    if sig.base is None or base_dtype is None:
        return Native("datatype not served")
    raw = flat.view(np.uint8)
    extent, size = datatype.Get_extent()[1], datatype.Get_size()
    try:
        displ = 0 if displ is None else int(displ)
        if count is None:
            if extent <= 0 or raw.size % extent:
                return Native("buffer size not a multiple of the datatype extent", Kind.INVALID)
            count = raw.size // extent
        count = int(count)
    except (TypeError, ValueError):
        return Native("malformed buffer specification", Kind.INVALID)
    start = displ * extent + (0 if datatype.is_predefined else datatype.Get_true_extent()[0])
    length = count * size
    if count < 0 or displ < 0 or start < 0 or start + length > raw.size:
        return Native("count or displacement out of range", Kind.INVALID)
    if not (sig.dense and (count <= 1 or extent == size)):
        return Native("device memory with a non-contiguous datatype", Kind.DEVICE)
    view = raw[start : start + length].view(base_dtype)
    derived = None if datatype.is_predefined else datatype
    return Message(view, sig.base, count * sig.per_item, derived=derived)


def _declared_read_only(obj: Any) -> bool:
    """Whether the producer marks the memory read-only in its `__cuda_array_interface__` (data[1])."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    try:
        return bool(cai["data"][1]) if isinstance(cai, dict) else False
    except (KeyError, IndexError, TypeError):
        return False
