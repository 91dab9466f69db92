"""Packing device arrays of a grouped Allreduce into one device buffer and back, on the device.

A bucket of small device arrays is copied (device to device, `cudaMemcpyAsync` per array, on CuPy's
current stream: the stream adaptcoll waits for before any device buffer is read, see docs/gpu.md
"Streams") into one device buffer, which is reduced by one Allreduce (served by the device pipeline
at or above the device threshold, staged whole below it), then copied back on the same stream; an
event recorded after the copies back tells when the arrays hold their result. From `BATCH_FROM`
arrays up the copies each way are one kernel launch (kernels/reduce.cu `adaptcoll_gather_pieces`,
`adaptcoll_scatter_pieces`) over a device table of addresses made once per layout. One staged or piped
call per bucket instead of one staged call per array (~80-120 us each on the H100).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from ...backends.cupy_backend import PIECE_KERNELS, load_kernel, synchronize_producer
from ...buffers import datatype_of
from ...device.arrays import as_cupy, cupy_available
from ...device.memory import is_device_buffer

__all__ = [
    "BATCH_FROM",
    "PIECE_BYTES",
    "DevicePacker",
    "Landing",
    "device_pair",
    "is_device",
    "piece_table",
    "signature",
    "fixed",
    "bucket_buffer",
    "current_stream",
]


def is_device(a: Any) -> bool:
    """Whether the array `a` is device memory (a CuPy array, or CUDA memory behind an interface)."""
    return type(a) is not np.ndarray and is_device_buffer(a)


def _view(obj: Any) -> Any:
    """A zero-copy CuPy view of the device buffer `obj` (its producer not waited for)."""
    import cupy

    if isinstance(obj, cupy.ndarray):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        return cupy.asarray(obj)
    return cupy.from_dlpack(obj)


def _read_only(obj: Any) -> bool:
    cai = getattr(obj, "__cuda_array_interface__", None)
    try:
        return bool(cai["data"][1]) if isinstance(cai, dict) else False
    except (KeyError, IndexError, TypeError):
        return False


def _contiguous(a: Any) -> bool:
    return bool(a.flags.c_contiguous or a.flags.f_contiguous)


def _copy(a: Any, zero: bool = False) -> Any:
    """A contiguous device copy of the CuPy array `a`, or zeros of its dtype and size."""
    out = bucket_buffer(np.dtype(a.dtype), int(a.size)).reshape(a.shape)
    if zero:
        out.fill(0)
    else:
        out[...] = a
    return out


def device_pair(
    send: Any, recv: Any, in_place: bool, what_s: str, what_r: str, name: str
) -> Optional[tuple[Any, Any, int, str, Optional[BaseException]]]:
    """(send, recv, bytes, dtype string, error) of a pair of device arrays to pack on the device, or
    None: not both device memory, or a dtype MPI does not know (the pair then goes alone, and
    Iallreduce on it says what is wrong, if anything). A pair with a fault of this rank's own (not
    contiguous, receive read-only, send and receive of different dtypes or sizes) is packed too, as
    stand-in device copies (zeros for a mismatch), with the error to raise once the call is done: every
    rank lays out the same buckets whatever one rank's arrays are like."""
    if not cupy_available() or not is_device(recv) or not (in_place or is_device(send)):
        return None
    try:
        r = _view(recv)
        s = r if in_place else _view(send)
    except Exception:
        return None
    dtype = np.dtype(r.dtype)
    if datatype_of(dtype) is None:
        return None
    nbytes = int(r.size) * dtype.itemsize
    error: Optional[BaseException] = None
    if not _contiguous(r):
        error = BufferError(f"{name}: {what_r} is not contiguous")
    elif _read_only(recv):
        error = BufferError(f"{name}: {what_r} is read-only")
    elif not in_place and not _contiguous(s):
        error = BufferError(f"{name}: {what_s} is not contiguous")
    elif not in_place and s.dtype != dtype:
        error = ValueError(f"{name}: {what_s} is {np.dtype(s.dtype)} but {what_r} is {dtype}")
    elif not in_place and s.size != r.size:
        error = ValueError(f"{name}: {what_s} has {s.size} elements but {what_r} has {r.size}")
    if error is None:
        return send, recv, nbytes, dtype.str, None
    r = as_cupy(recv)  # its producer waited for before it is copied
    if isinstance(error, ValueError):  # zeros take part, into a scratch receive
        return _copy(r, zero=True), _copy(r, zero=True), nbytes, dtype.str, error
    r2 = r if _contiguous(r) and not _read_only(recv) else _copy(r)
    if in_place:
        return r2, r2, nbytes, dtype.str, error
    s = as_cupy(send)
    return (s if _contiguous(s) else _copy(s)), r2, nbytes, dtype.str, error


def signature(a: Any) -> Any:
    """What must stay the same for a cached layout to hold for the device array `a`: its address,
    dtype and size (a CuPy array cannot change them; an object behind an interface, such as a PyTorch
    tensor, may be pointed at other memory). DLPack-only producers (immutable JAX arrays): nothing."""
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)
    if ptr is not None:
        return (ptr, a.dtype, a.size)
    cai = getattr(a, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        return (cai.get("data"), cai.get("typestr"), cai.get("shape"))
    return None


def fixed(a: Any) -> bool:
    """Whether the device array `a` keeps its address, dtype and size while it lives: a CuPy array
    itself (its `data`, `dtype` and `size` cannot be assigned), so that a cached layout holds for it
    as long as it is the same object (no `signature` to compare)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and type(a) is cupy.ndarray


def current_stream() -> Any:
    """CuPy's current stream (where the copies of a bucket go)."""
    import cupy

    return cupy.cuda.get_current_stream()


def bucket_buffer(dtype: np.dtype, count: int) -> Any:
    """A device buffer of `count` elements (from CuPy's pool, on the current stream)."""
    import cupy

    return cupy.empty(count, dtype)


BATCH_FROM = 4
"""From this many non-empty arrays up, a packer copies with one kernel launch each way (a gather into
the bucket, a scatter back, from a device table made once per layout) instead of a `memcpyAsync` per
array (a few microseconds of host time each, and one tiny copy each on the GPU)."""

PIECE_BYTES = 16 << 10
"""An array larger than this goes into the table as several pieces of at most this many bytes (a
multiple of 16: the pieces keep the array's alignment), so one big array spreads over the SMs (one
block per piece: on the H100, 11 pieces of 64 KiB gathered at only ~60 GB/s)."""

_BLOCK = 256
_MAX_GRID = 1 << 16


def _piece_kernel(name: str) -> Any:
    """The compiled gather or scatter kernel (`PIECE_KERNELS`) on the current device (cached by the
    backend's loader)."""
    return load_kernel(name).kernel


def piece_table(spans: Sequence[tuple[int, int, int]], piece_bytes: Optional[int] = None) -> np.ndarray:
    """The host table of the copy kernels: (address, offset in the bucket, bytes) per piece, arrays
    longer than `piece_bytes` (default `PIECE_BYTES`) cut into pieces of that size."""
    piece_bytes = piece_bytes or PIECE_BYTES
    rows: list[tuple[int, int, int]] = []
    for ptr, offset, n in spans:
        if n <= piece_bytes:
            rows.append((ptr, offset, n))
            continue
        for k in range(0, n, piece_bytes):
            rows.append((ptr + k, offset + k, min(piece_bytes, n - k)))
    return np.array(rows, dtype=np.uint64).reshape(-1)


class DevicePacker:
    """Copies between device `arrays` (contiguous) and a packed device buffer, in order, on a given
    stream: from `BATCH_FROM` arrays up with one kernel launch each way (its table of addresses
    uploaded once, here), else a `memcpyAsync` per array. It keeps their addresses: the caller keeps
    the arrays alive while it packs or unpacks."""

    __slots__ = ("_spans", "_waits", "nbytes", "_table", "_pieces", "_grid")

    def __init__(self, arrays: Sequence[Any]) -> None:
        import cupy

        spans, offset = [], 0
        for a in arrays:
            v = _view(a)
            if v.nbytes:
                spans.append((int(v.data.ptr), offset, int(v.nbytes)))
            offset += int(v.nbytes)
        self._spans = spans
        self.nbytes = offset
        self._waits = [a for a in arrays if not isinstance(a, cupy.ndarray)]
        """producers to wait for (CuPy arrays' work is on the current stream, where the copies go)"""
        self._table: Any = None
        self._pieces = self._grid = 0
        if len(spans) >= BATCH_FROM:
            host = piece_table(spans)
            self._pieces = host.size // 3
            self._grid = min(self._pieces, _MAX_GRID)
            self._table = cupy.asarray(host)
            cupy.cuda.get_current_stream().synchronize()  # uploaded before any stream's kernel reads it

    @property
    def batched(self) -> bool:
        """Whether it copies with the gather/scatter kernels (one launch each way)."""
        return self._table is not None

    @property
    def keep(self) -> Any:
        """What must outlive the copies enqueued so far (the device table)."""
        return self._table

    def wait_producers(self) -> None:
        """Wait for the producers of arrays that are not CuPy arrays: the stream named by their
        `__cuda_array_interface__` (each stream once), or a DLPack producer's work ordered before
        CuPy's stream (`as_cupy`)."""
        seen = set()
        for a in self._waits:
            cai = getattr(a, "__cuda_array_interface__", None)
            if not isinstance(cai, dict):
                as_cupy(a)
                continue
            stream = cai.get("stream")
            if stream not in seen:
                seen.add(stream)
                synchronize_producer(a)

    def _launch(self, name: str, buf: Any, stream: Any) -> None:
        _piece_kernel(name)((self._grid,), (_BLOCK,), (buf, self._table, np.uint64(self._pieces)), 0, stream)

    def pack(self, out: Any, stream: Any) -> None:
        """Enqueue on `stream` the copies of the arrays, in order, to the start of the device buffer `out`."""
        if self._table is not None:
            self._launch(PIECE_KERNELS[0], out, stream)
            return
        import cupy

        runtime = cupy.cuda.runtime
        base, kind, s = int(out.data.ptr), runtime.memcpyDeviceToDevice, stream.ptr
        for ptr, offset, n in self._spans:
            runtime.memcpyAsync(base + offset, ptr, n, kind, s)

    def unpack(self, src: Any, stream: Any) -> Any:
        """Enqueue on `stream` the copies of the start of the device buffer `src` back into the arrays,
        and return an event recorded after them (done once the arrays hold the data)."""
        import cupy

        if self._table is not None:
            self._launch(PIECE_KERNELS[1], src, stream)
        else:
            runtime = cupy.cuda.runtime
            base, kind, s = int(src.data.ptr), runtime.memcpyDeviceToDevice, stream.ptr
            for ptr, offset, n in self._spans:
                runtime.memcpyAsync(ptr, base + offset, n, kind, s)
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        return event

    def free(self) -> None:
        """Drop the device table (a copy still in flight holds it through `keep`)."""
        self._table = None


class Landing:
    """The copies back of a device bucket: done once `event` is (the bucket buffer kept until then)."""

    __slots__ = ("_event", "_keep")

    def __init__(self, event: Any, keep: Any) -> None:
        self._event, self._keep = event, keep

    @property
    def done(self) -> bool:
        if self._event is None:
            return True
        if not self._event.done:
            return False
        self._event = self._keep = None
        return True

    def synchronize(self) -> None:
        if self._event is not None:
            self._event.synchronize()
            self._event = self._keep = None
