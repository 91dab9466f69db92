"""Turn an mpi4py buffer specification into a 1-D NumPy array adaptcoll can segment, or say why not.

Accepted (as mpi4py accepts them): `buf`, `(buf, count)`, `(buf, datatype)`, `(buf, count, datatype)`,
`(buf, (count, displ), datatype)`, `(buf, count, displ, datatype)`, lists like tuples, and
`(MPI.BOTTOM or None, count, datatype)`; a datatype is any MPI.Datatype (predefined or derived) or a
typecode string; `buf` is anything with the buffer protocol (NumPy arrays, array.array, bytearray,
memoryview, ...) or a host `__dlpack__` producer (read as mpi4py reads it, adaptcoll.dlpack).

The result depends only on the message's type signature (adaptcoll.datatypes), never on its form, so
ranks describing the same message differently reach the same decision: a message whose signature is
one predefined type is a `Message` of `count` elements of that type. Its `array` is a view of the
user's memory when the elements lie there back to back; otherwise a contiguous scratch array with a
`load` (fill it from the user's buffer) and a `store` (write it back), both through MPI itself.
A buffer mpi4py would reject (non-contiguous, or read-only where it is received into) still gives a
Message, over scratch memory, with `error` set to mpi4py's own exception: the rank takes part (so the
others are not left waiting) and raises after. What adaptcoll does not serve (mixed signatures, types
without a NumPy equivalent, device memory, malformed specifications) comes back as a `Native` value
(adaptcoll.runtime.native) with the reason; the caller then hands the call, unchanged, to native MPI, which
serves it or raises mpi4py's own error. Those rules look at the signature and the arguments, not the
form, except where native MPI itself raises on that rank (malformed specifications).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
from mpi4py import MPI

from ..runtime.native import DEVICE_MEMORY, Kind, Native
from . import dlpack
from .datatypes import mpi_copy, numpy_dtype, signature

__all__ = ["unpack_spec", "Message", "parse", "datatype_of"]

Step = Callable[[], None]


@dataclass(frozen=True)
class Message:
    """`count` elements of the predefined `datatype`, as the 1-D array `array` (its dtype).

    `load()`: refresh `array` from the user's buffer (None: `array` is the user's memory); call it
    before reading the message. `store()`: write `array` back into the user's buffer (None: nothing
    to write); call it once the message has been received. `error`: the exception mpi4py raises for
    this buffer; `array` is then scratch memory, nothing is stored, and the caller raises it after
    taking part in the collective.
    """

    array: np.ndarray
    datatype: MPI.Datatype
    count: int
    load: Optional[Step] = None
    store: Optional[Step] = None
    error: Optional[BaseException] = None
    derived: Optional[MPI.Datatype] = None

    @property
    def nbytes(self) -> int:
        return self.array.nbytes


_DATATYPE_BY_DTYPE: dict[np.dtype, MPI.Datatype] = {}


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


_UNSUPPORTED_BUFFER = Native("unsupported buffer", Kind.INVALID)
_UNSUPPORTED_DTYPE = Native("unsupported dtype")
_MIXED_SIGNATURE = Native("datatype not served")
_MALFORMED = Native("malformed buffer specification", Kind.INVALID)
_OUT_OF_RANGE = Native("count or displacement out of range", Kind.INVALID)


class _HostInterface:
    """Host memory behind a `__cuda_array_interface__`, as NumPy's array interface (keeps `owner` alive)."""

    def __init__(self, interface: dict, owner: Any) -> None:
        self.__array_interface__ = interface
        self.owner = owner


def _cai_host_array(buf: Any) -> Union[np.ndarray, Native]:
    """The host memory a `__cuda_array_interface__` describes, read as mpi4py reads it (its pointer, shape
    and typestr; its strides); native MPI raises mpi4py's error for an interface it cannot read."""
    try:
        cai = buf.__cuda_array_interface__
        pointer, readonly = cai["data"]
        shape = tuple(int(extent) for extent in cai["shape"])
        strides = None if cai.get("strides") is None else tuple(int(s) for s in cai["strides"])
        if cai.get("mask") is not None or (not pointer and all(shape)):
            return _UNSUPPORTED_BUFFER  # a mask, or a null pointer to elements
        interface = {
            "shape": shape,
            "typestr": str(cai["typestr"]),
            "data": (int(pointer or 0), bool(readonly)),
            "strides": strides,
            "version": 3,
        }
        array = np.asarray(_HostInterface(interface, buf))
    except Exception:
        return _UNSUPPORTED_BUFFER
    return array if array.dtype.itemsize and not array.dtype.hasobject else _UNSUPPORTED_BUFFER


def _host_array(buf: Any) -> Union[np.ndarray, Native]:
    """`buf`'s memory as a NumPy array (any strides), looked up in mpi4py's order, or why not. Callers
    have asked adaptcoll.device first: a `__cuda_array_interface__` here is host memory."""
    if isinstance(buf, np.ndarray):
        return buf
    if hasattr(buf, "__cuda_array_interface__"):
        return _cai_host_array(buf)
    try:
        return np.asarray(memoryview(buf))
    except (TypeError, ValueError, NotImplementedError):
        pass
    if not hasattr(buf, "__dlpack__"):
        return _UNSUPPORTED_BUFFER
    try:
        if dlpack.device_type(buf) != dlpack.KDL_CPU:
            return DEVICE_MEMORY
        return dlpack.host_array(buf)[0]
    except Exception:  # mpi4py raises its own error for this buffer: let native MPI do it
        return _UNSUPPORTED_BUFFER


def _mpi4py_error(buf: Any, writable: bool, problem: str) -> BaseException:
    """The exception mpi4py raises when it reads `buf` (writable: to receive into it); `problem` is
    "contiguous" or "writable". For a DLPack-only producer it is built here, with mpi4py's message,
    rather than by asking mpi4py to read it again (one more capsule, freed while that error is raised)."""
    if hasattr(buf, "__dlpack__") and not _has_buffer_protocol(buf):
        return BufferError(f"dlpack: buffer is not {problem}")
    try:
        MPI.buffer.frombuffer(buf, readonly=not writable)
    except Exception as exc:
        return exc
    return BufferError(f"buffer is not {problem}")


def _has_buffer_protocol(buf: Any) -> bool:
    try:
        memoryview(buf).release()
    except (TypeError, ValueError, BufferError, NotImplementedError):
        return False
    return True


def unpack_spec(spec: Any) -> Union[tuple[Any, Any, Any, Any], Native]:
    """(buf, count, displ, datatype) of a specification, each None when not given."""
    if not isinstance(spec, (tuple, list)):
        return spec, None, None, None
    items = list(spec)
    if not items or len(items) > 4:
        return _MALFORMED
    count = displ = datatype = None
    buf, rest = items[0], items[1:]
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
    return buf, count, displ, datatype


def parse(spec: Any, writable: bool) -> Union[Message, Native]:
    """A Message for `spec` (`writable`: the collective receives into it), or a Native value saying why
    native MPI must handle it."""
    if type(spec) is np.ndarray and spec.flags.c_contiguous and (spec.flags.writeable or not writable):
        basic = datatype_of(spec.dtype)
        if basic is None:
            return _UNSUPPORTED_DTYPE
        flat = spec.reshape(-1)
        return Message(flat, basic, flat.size)
    parts = unpack_spec(spec)
    if isinstance(parts, Native):
        return parts
    buf, count, displ, datatype = parts
    bottom = buf is None or buf is MPI.BOTTOM
    if bottom:
        if not isinstance(datatype, MPI.Datatype):
            return _MALFORMED  # mpi4py wants an explicit datatype with BOTTOM
        arr = None
    else:
        found = _host_array(buf)
        if isinstance(found, Native):
            return found
        arr = found
    if datatype is None:
        assert arr is not None
        datatype = datatype_of(arr.dtype)
        if datatype is None:
            return _UNSUPPORTED_DTYPE
    elif isinstance(datatype, str):
        try:
            datatype = MPI.Datatype.fromcode(datatype)
        except (KeyError, ValueError):
            return Native("unknown typecode", Kind.INVALID)
    elif not isinstance(datatype, MPI.Datatype):
        return _MALFORMED
    if datatype == MPI.DATATYPE_NULL:
        return _MALFORMED
    sig = signature(datatype)
    if sig.base is None:
        return _MIXED_SIGNATURE
    base_dtype = numpy_dtype(sig.base)
    assert base_dtype is not None
    extent = datatype.Get_extent()[1]
    try:
        if displ is not None and count is None:
            return _MALFORMED
        displ = 0 if displ is None else int(displ)
        if count is None:
            nbytes = 0 if arr is None else arr.nbytes
            if extent <= 0 or nbytes % extent:
                return Native("buffer size not a multiple of the datatype extent", Kind.INVALID)
            count = nbytes // extent
        count = int(count)
    except (TypeError, ValueError):
        return _MALFORMED
    if count < 0 or displ < 0:
        return _OUT_OF_RANGE
    elements = count * sig.per_item
    result: Union[Message, Native]
    if arr is None:  # BOTTOM: the datatype holds absolute addresses; MPI reads and writes them
        result = _through_mpi([MPI.BOTTOM, count, displ, datatype], base_dtype, sig.base, elements, writable)
    else:
        layout = (count, displ, datatype, extent)
        result = _message(buf, arr, layout, sig.dense, base_dtype, sig.base, elements, writable)
    if isinstance(result, Message) and not datatype.is_predefined:
        return dataclasses.replace(result, derived=datatype)
    return result


def _message(
    buf: Any,
    arr: np.ndarray,
    layout: tuple[int, int, MPI.Datatype, int],
    dense: bool,
    dtype: np.dtype,
    base: MPI.Datatype,
    elements: int,
    writable: bool,
) -> Union[Message, Native]:
    """The Message for `count` items of `datatype` at item `displ` of the host array `arr` (`buf`'s memory)."""
    count, displ, datatype, extent = layout
    contiguous = arr.flags.c_contiguous or arr.flags.f_contiguous
    error: Optional[BaseException] = None
    if not contiguous:
        error = _mpi4py_error(buf, writable, "contiguous")
    elif writable and not arr.flags.writeable:
        error = _mpi4py_error(buf, writable, "writable")
    size = datatype.Get_size()
    start = displ * extent + (datatype.Get_true_extent()[0] if not datatype.is_predefined else 0)
    length = count * size
    in_range = start >= 0 and start + length <= arr.nbytes
    direct = dense and (count <= 1 or extent == size) and in_range
    if not direct and datatype.is_predefined:
        return _OUT_OF_RANGE  # a predefined type is dense: its count reaches past the buffer
    loads: list[Step] = []
    if error is None:
        raw = arr.reshape(-1, order="A").view(np.uint8) if arr.ndim != 1 or arr.dtype != np.uint8 else arr
        source: Any = buf
    else:  # take part with a copy (sends: mpi4py's order of the elements) and write nothing back
        raw = np.empty(arr.nbytes, np.uint8)
        loads.append(_copier(arr, raw))
        source = raw
    if direct:
        view = raw[start : start + length].view(dtype)
        return Message(view, base, elements, _chain(loads), None, error)
    if error is not None:
        found = _through_mpi([source, count, displ, datatype], dtype, base, elements, False)
        return Message(found.array, base, elements, _chain([*loads, found.load] if found.load else loads), None, error)
    return _through_mpi([source, count, displ, datatype], dtype, base, elements, writable)


def _through_mpi(user: list[Any], dtype: np.dtype, base: MPI.Datatype, elements: int, writable: bool) -> Message:
    """A contiguous scratch Message packed from, and unpacked into, the user's specification by MPI."""
    array = np.empty(elements, dtype)
    typed = [array, elements, base]
    load = lambda: mpi_copy(user, typed)  # noqa: E731
    store = (lambda: mpi_copy(typed, user)) if writable else None
    return Message(array, base, elements, load, store)


def _copier(arr: np.ndarray, raw: np.ndarray) -> Step:
    """Copy `arr`'s elements, in C order, into the byte array `raw`."""
    target = raw.view(arr.dtype).reshape(arr.shape) if arr.dtype.itemsize else raw

    def copy() -> None:
        np.copyto(target, arr)

    return copy


def _chain(steps: Sequence[Step]) -> Optional[Step]:
    """One step running `steps` in order (None if there are none)."""
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def run() -> None:
        for step in steps:
            step()

    return run
