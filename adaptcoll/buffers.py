"""Turn an mpi4py buffer specification into a 1-D NumPy view adaptcoll can segment, or say why not.

Accepted (as mpi4py accepts them): `buf`, `(buf, count)`, `(buf, datatype)`, `(buf, count, datatype)`,
`(buf, (count, displ), datatype)`, `(buf, count, displ, datatype)`, lists like tuples; a datatype is a
predefined MPI.Datatype or a typecode string; `buf` is anything with the buffer protocol (NumPy arrays,
array.array, bytearray, memoryview, ...) or a host `__dlpack__` producer. Whatever adaptcoll does not
serve itself (derived datatypes, device memory, BOTTOM addressing, malformed specs) comes back as a
`Native` value (adaptcoll.native) with the reason; the caller then hands the call, unchanged, to native
MPI, which serves it or raises mpi4py's own error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import numpy as np
from mpi4py import MPI

from .native import DEVICE_MEMORY, Kind, Native

__all__ = ["Message", "parse", "datatype_of"]


@dataclass(frozen=True)
class Message:
    """`count` elements of `datatype`, viewed as the 1-D array `array` (dtype matching datatype)."""

    array: np.ndarray
    datatype: MPI.Datatype
    count: int

    @property
    def nbytes(self) -> int:
        return self.array.nbytes


_DATATYPE_BY_DTYPE: dict[np.dtype, MPI.Datatype] = {}
_DTYPE_BY_HANDLE: dict[int, np.dtype] = {}


def datatype_of(dtype: np.dtype) -> MPI.Datatype | None:
    """The predefined MPI datatype mpi4py would use for NumPy `dtype`, or None."""
    dt = _DATATYPE_BY_DTYPE.get(dtype)
    if dt is None:
        if not dtype.isnative or dtype.hasobject or dtype.fields is not None:
            return None
        try:
            dt = MPI.Datatype.fromcode(dtype.char)
        except (KeyError, ValueError, TypeError):
            return None
        _DATATYPE_BY_DTYPE[dtype] = dt
    return dt


def _dtype_of(datatype: MPI.Datatype) -> np.dtype | None:
    """The NumPy dtype of a predefined MPI datatype (None for derived or unmappable ones)."""
    handle = datatype.handle
    found = _DTYPE_BY_HANDLE.get(handle)
    if found is None:
        if not datatype.is_predefined:
            return None
        try:
            found = np.dtype(datatype.tocode())
        except (KeyError, ValueError, TypeError):
            return None
        if found.itemsize != datatype.Get_size():
            return None
        _DTYPE_BY_HANDLE[handle] = found
    return found


_UNSUPPORTED_BUFFER = Native("unsupported buffer", Kind.INVALID)
_UNSUPPORTED_DTYPE = Native("unsupported dtype")
_MALFORMED = Native("malformed buffer specification", Kind.INVALID)
_NON_CONTIGUOUS = Native("non-contiguous buffer", Kind.BAD_BUFFER)
_READ_ONLY = Native("read-only buffer", Kind.BAD_BUFFER)


def _as_bytes(buf: Any, writable: bool) -> Union[tuple[np.ndarray, np.dtype], Native]:
    """(a flat uint8 view of `buf`'s memory, its element dtype), or a reason to go native."""
    if isinstance(buf, np.ndarray):
        arr = buf
    elif hasattr(buf, "__cuda_array_interface__"):
        return DEVICE_MEMORY
    else:
        try:
            arr = np.asarray(memoryview(buf))
        except (TypeError, ValueError):
            if hasattr(buf, "__dlpack__"):
                try:
                    device = buf.__dlpack_device__()
                except Exception:
                    return _UNSUPPORTED_BUFFER
                if device[0] != 1:  # kDLCPU
                    return DEVICE_MEMORY
                try:
                    arr = np.from_dlpack(buf)
                except Exception:
                    return _UNSUPPORTED_BUFFER
            else:
                return _UNSUPPORTED_BUFFER
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        return _NON_CONTIGUOUS
    if writable and not arr.flags.writeable:
        return _READ_ONLY
    flat = arr.reshape(-1, order="A").view(np.uint8) if arr.ndim != 1 or arr.dtype != np.uint8 else arr
    return flat, arr.dtype


def parse(spec: Any, writable: bool) -> Union[Message, Native]:
    """A Message for `spec`, or a Native value saying why native MPI must handle it."""
    if type(spec) is np.ndarray and spec.flags.c_contiguous and (spec.flags.writeable or not writable):
        basic = datatype_of(spec.dtype)
        if basic is None:
            return _UNSUPPORTED_DTYPE
        flat = spec.reshape(-1)
        return Message(flat, basic, flat.size)
    count = displ = None
    datatype: Any = None
    if isinstance(spec, (tuple, list)):
        items = list(spec)
        if not items or len(items) > 4:
            return _MALFORMED
        buf = items[0]
        rest = items[1:]
        if len(rest) == 1:
            if isinstance(rest[0], (MPI.Datatype, str)):
                datatype = rest[0]
            else:
                count = rest[0]
        elif len(rest) == 2:
            count, datatype = rest
            if isinstance(count, (tuple, list)):
                if len(count) != 2:
                    return _MALFORMED
                count, displ = count
        elif len(rest) == 3:
            count, displ, datatype = rest
    else:
        buf = spec
    if buf is None or buf is MPI.BOTTOM:
        return Native("BOTTOM addressing")
    found = _as_bytes(buf, writable)
    if isinstance(found, Native):
        return found
    raw, dtype = found
    if datatype is None:
        datatype = datatype_of(dtype)
        if datatype is None:
            return _UNSUPPORTED_DTYPE
    else:
        if isinstance(datatype, str):
            try:
                datatype = MPI.Datatype.fromcode(datatype)
            except (KeyError, ValueError):
                return Native("unknown typecode", Kind.INVALID)
        if not isinstance(datatype, MPI.Datatype):
            return _MALFORMED
        declared = _dtype_of(datatype)
        if declared is None:
            return Native("derived datatype")
        dtype = declared
    itemsize = dtype.itemsize
    try:
        displ = 0 if displ is None else int(displ)
        if count is None:
            if raw.size % itemsize:
                return Native("buffer size not a multiple of the datatype size", Kind.INVALID)
            count = raw.size // itemsize - displ
        count = int(count)
    except (TypeError, ValueError):
        return _MALFORMED
    if count < 0 or displ < 0 or (displ + count) * itemsize > raw.size:
        return Native("count or displacement out of range", Kind.INVALID)
    view = raw[displ * itemsize : (displ + count) * itemsize].view(dtype)
    return Message(view, datatype, count)
