"""Packing device arrays of a grouped Allreduce into one device buffer and back, on the device.

A bucket of small device arrays is copied (device to device, `cudaMemcpyAsync` per array, on CuPy's
current stream: the stream adaptcoll waits for before any device buffer is read, see docs/gpu.md
"Streams") into one device buffer, which is reduced by one Allreduce (served by the device pipeline
at or above the device threshold, staged whole below it), then copied back on the same stream; an
event recorded after the copies back tells when the arrays hold their result. One staged or piped
call per bucket instead of one staged call per array (~80-120 us each on the H100).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from ..backends.cupy_backend import synchronize_producer
from ..buffers import datatype_of
from ..device.arrays import as_cupy, cupy_available
from ..device.memory import is_device_buffer

__all__ = ["DevicePacker", "Landing", "device_pair", "is_device", "signature", "bucket_buffer", "current_stream"]


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


def current_stream() -> Any:
    """CuPy's current stream (where the copies of a bucket go)."""
    import cupy

    return cupy.cuda.get_current_stream()


def bucket_buffer(dtype: np.dtype, count: int) -> Any:
    """A device buffer of `count` elements (from CuPy's pool, on the current stream)."""
    import cupy

    return cupy.empty(count, dtype)


class DevicePacker:
    """Copies between device `arrays` (contiguous) and a packed device buffer, in order, on a given
    stream. It keeps their addresses: the caller keeps the arrays alive while it packs or unpacks."""

    __slots__ = ("_spans", "_waits", "nbytes")

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

    def pack(self, out: Any, stream: Any) -> None:
        """Enqueue on `stream` the copies of the arrays, in order, to the start of the device buffer `out`."""
        import cupy

        runtime = cupy.cuda.runtime
        base, kind, s = int(out.data.ptr), runtime.memcpyDeviceToDevice, stream.ptr
        for ptr, offset, n in self._spans:
            runtime.memcpyAsync(base + offset, ptr, n, kind, s)

    def unpack(self, src: Any, stream: Any) -> Any:
        """Enqueue on `stream` the copies of the start of the device buffer `src` back into the arrays,
        and return an event recorded after them (done once the arrays hold the data)."""
        import cupy

        runtime = cupy.cuda.runtime
        base, kind, s = int(src.data.ptr), runtime.memcpyDeviceToDevice, stream.ptr
        for ptr, offset, n in self._spans:
            runtime.memcpyAsync(ptr, base + offset, n, kind, s)
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        return event

    def free(self) -> None:
        """Nothing to free (the same interface as HostPacker)."""


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
