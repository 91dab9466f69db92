"""The message size of an mpi4py buffer specification, cheaply, for the small-message fast path.

MPI matches a message by its type signature, so its size in bytes is `count * datatype size` whatever
form a rank wrote it in, and every rank agrees on it. `host_nbytes(spec)` computes that size without
parsing the buffer (no views, no signature walk) for the forms a program writes in a loop: a bare
host buffer, `[buf, datatype]`, `[buf, count]`, `[buf, count, datatype]`, `[buf, (count, displ),
datatype]`, `[buf, count, displ, datatype]` (lists or tuples; datatypes as `MPI.Datatype` or typecode).
It answers -1 ("take the full decision") for anything it cannot size that cheaply, and for memory that
is not certainly host memory: only the exact host types below are sized from the buffer itself; any
other buffer object (`__dlpack__`, ...) only with an explicit count and datatype, once `adaptcoll.device`
says it is host memory; a bare `__cuda_array_interface__` object is sized from its shape and typestr
once the CUDA driver (or its absence) says its pointer is host memory, a bare host DLPack producer from
its tensor, read in place. A malformed specification sized here goes to
native MPI, which raises mpi4py's own error, as the full decision would.
"""

from __future__ import annotations

import array
import mmap
from typing import Any

import numpy as np
from mpi4py import MPI

from ..buffers import dlpack
from ..device import MemoryKind, memory_kind

__all__ = ["HOST_TYPES", "PREDEFINED_SIZES", "host_nbytes"]

_NDARRAY = np.ndarray
_MEMORYVIEW = memoryview
_ARRAY = array.array
_HOST_TYPES = frozenset({np.ndarray, bytearray, bytes, memoryview, mmap.mmap, array.array})
_SEQUENCES = (list, tuple)
_DATATYPE = MPI.Datatype
_BOTTOM = MPI.BOTTOM
_HOST = MemoryKind.HOST
_CODE_SIZES: dict[str, int] = {}
_TYPESTR_SIZES: dict[str, int] = {}


def _dlpack_nbytes(buf: Any) -> int:
    """Bytes of a bare host `__dlpack__` producer (its tensor read in place, as mpi4py reads it); -1 for
    anything else, device memory included."""
    try:
        if buf.__dlpack_device__()[0] != dlpack.KDL_CPU:
            return -1
        return dlpack.tensor_nbytes(buf)
    except Exception:
        return -1


def _interface_nbytes(buf: Any) -> int:
    """Bytes of host memory behind a bare `__cuda_array_interface__` object, or of a bare host DLPack
    producer; -1 for anything else."""
    try:
        cai = getattr(buf, "__cuda_array_interface__", None)
    except Exception:
        return -1
    if cai is None and hasattr(buf, "__dlpack_device__"):
        return _dlpack_nbytes(buf)
    if type(cai) is not dict or memory_kind(buf) is not _HOST:
        return -1
    try:
        typestr = cai["typestr"]
        size = _TYPESTR_SIZES.get(typestr)
        if size is None:
            size = _TYPESTR_SIZES[typestr] = np.dtype(typestr).itemsize
        for extent in cai["shape"]:
            size *= int(extent)
    except Exception:
        return -1
    return size


def _buffer_nbytes(buf: Any, kind: type) -> int:
    if kind is _NDARRAY or kind is _MEMORYVIEW:
        return int(buf.nbytes)
    if kind is _ARRAY:
        return len(buf) * buf.itemsize
    return len(buf)  # bytearray, bytes, mmap


def _item_nbytes(buf: Any, kind: type) -> int:
    if kind is _NDARRAY or kind is _MEMORYVIEW or kind is _ARRAY:
        return int(buf.itemsize)
    return 1


def _datatype_size(datatype: Any) -> int:
    """Bytes per item of an MPI.Datatype or typecode (its signature's size); -1 when it is neither or
    MPI will not say (DATATYPE_NULL, a freed type)."""
    if isinstance(datatype, _DATATYPE):
        try:
            return int(datatype.Get_size())
        except MPI.Exception:
            return -1
    if type(datatype) is str:
        size = _CODE_SIZES.get(datatype)
        if size is None:
            try:
                size = int(MPI.Datatype.fromcode(datatype).Get_size())
            except (KeyError, ValueError):
                return -1
            _CODE_SIZES[datatype] = size
        return size
    return -1


def _predefined_sizes() -> dict[int, int]:
    """id() of each predefined datatype object of mpi4py.MPI -> its size (module constants live as long
    as the process, so their ids never name anything else)."""
    sizes = {}
    for name in dir(MPI):
        obj = getattr(MPI, name)
        if isinstance(obj, _DATATYPE) and obj != MPI.DATATYPE_NULL:
            try:
                sizes[id(obj)] = int(obj.Get_size())
            except MPI.Exception:
                continue
    return sizes


_SIZES = _predefined_sizes()
_sizes_get = _SIZES.get
HOST_TYPES = tuple(sorted(_HOST_TYPES, key=lambda t: t.__name__))
"""The exact buffer types sized from the buffer itself (and certainly host memory), for the fast-call
extension's copy of `host_nbytes` (adaptcoll.runtime.fastcalls)."""
PREDEFINED_SIZES = _SIZES
"""id() of each predefined datatype object of mpi4py.MPI -> its size (the same dict `host_nbytes` reads)."""


def host_nbytes(spec: Any) -> int:
    """The message size in bytes of `spec` when it is certainly host memory and cheap to size, else -1."""
    kind = type(spec)
    if kind is not list and kind is not tuple:
        if kind in _HOST_TYPES:
            return _buffer_nbytes(spec, kind)
        return _interface_nbytes(spec)
    items = len(spec)
    if items == 3:
        buf, count, datatype = spec
        if type(count) is not int:
            if type(count) not in _SEQUENCES or len(count) != 2:
                return -1
            count = count[0]
            if type(count) is not int:
                return -1
    elif items == 2:
        buf, second = spec
        buf_kind = type(buf)
        if buf_kind not in _HOST_TYPES:
            return -1
        if type(second) is int:
            return second * _item_nbytes(buf, buf_kind) if second >= 0 else -1
        size = _sizes_get(id(second))
        if size is None:
            size = _datatype_size(second)
        return _buffer_nbytes(buf, buf_kind) if size > 0 else -1
    elif items == 4:
        buf, count, _, datatype = spec
        if type(count) is not int:
            return -1
    else:
        return -1
    if count < 0:
        return -1
    size = _sizes_get(id(datatype))
    if size is None:
        size = _datatype_size(datatype)
        if size < 0:
            return -1
    if type(buf) not in _HOST_TYPES and (buf is None or buf is _BOTTOM or memory_kind(buf) is not _HOST):
        return -1
    return count * size
