"""Host DLPack buffers read the way mpi4py reads them, without consuming the producer's capsule.

mpi4py (asdlpack.pxi) asks `__dlpack__(max_version=(1, 0), copy=False)` (falling back to the
unversioned protocol on TypeError), reads the DLTensor in place, and keeps the capsule as the owner of
the memory while it uses it; it never renames ("consumes") the capsule, so the capsule's own destructor
later calls the producer's deleter. `np.from_dlpack` instead consumes the capsule and calls the
deleter itself, long after a strict producer (one whose capsule destructor frees the DLManagedTensor,
as mpi4py's test arrays do) has freed it: a crash at garbage collection. `host_array` does what mpi4py
does: the array it returns keeps the unconsumed capsule alive and nothing else. Its dtype follows
mpi4py's format rules (bool, ints by C size, float16/32/64/long double, complex, two float lanes as
complex, any other lanes as raw bytes), so every rank infers the same MPI datatype mpi4py would.
No MPI here.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

__all__ = ["host_array", "tensor_nbytes", "device_type", "KDL_CPU"]

KDL_CPU = 1
_READ_ONLY_FLAG = 1


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):  # DLManagedTensor (unversioned)
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned (DLPack >= 1.0)
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


# Private function objects (a prototype per symbol): setting argtypes on ctypes.pythonapi's shared
# attributes would change them for every other user of ctypes in the process.
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

_INT, _UINT, _FLOAT, _COMPLEX, _BOOL = 0, 1, 2, 5, 6
_C_INT_CODES = (
    (ctypes.sizeof(ctypes.c_char), "b"),
    (ctypes.sizeof(ctypes.c_short), "h"),
    (ctypes.sizeof(ctypes.c_int), "i"),
    (ctypes.sizeof(ctypes.c_long), "l"),
    (ctypes.sizeof(ctypes.c_longlong), "q"),
)
_C_FLOAT_CODES = (
    (ctypes.sizeof(ctypes.c_float) // 2, "e"),
    (ctypes.sizeof(ctypes.c_float), "f"),
    (ctypes.sizeof(ctypes.c_double), "d"),
    (ctypes.sizeof(ctypes.c_longdouble), "g"),
)


def _code(dtype: _DType) -> tuple[str, int]:
    """(NumPy type character, item size) the way mpi4py's dlpack_get_format/itemsize read a DLPack dtype;
    'B' with item size 1 stands for raw bytes."""
    code, nbytes = dtype.code, dtype.bits // 8
    if dtype.lanes != 1:
        if code == _FLOAT and dtype.lanes == 2 and dtype.bits % 8 == 0:
            for size, char in _C_FLOAT_CODES[1:]:
                if nbytes == size:
                    return char.upper(), 2 * size  # two float lanes: complex
        return "B", 1
    if dtype.bits % 8 == 0:
        if code == _BOOL and nbytes == 1:
            return "?", 1
        if code in (_INT, _UINT):
            for size, char in _C_INT_CODES:
                if nbytes == size:
                    return (char if code == _INT else char.upper()), size
        if code == _FLOAT:
            for size, char in _C_FLOAT_CODES:
                if nbytes == size:
                    return char, size
        if code == _COMPLEX:
            for size, char in _C_FLOAT_CODES[1:]:
                if nbytes == 2 * size:
                    return char.upper(), nbytes
    return "B", 1


class _Holder:
    """Exposes the tensor's memory to NumPy (`__array_interface__`) and keeps the capsule alive with it."""

    __slots__ = ("__array_interface__", "capsule")

    def __init__(self, interface: dict[str, Any], capsule: Any) -> None:
        self.__array_interface__ = interface
        self.capsule = capsule


def device_type(obj: Any) -> int:
    """The DLPack device type of `obj` (1: host memory); raises what `__dlpack_device__` raises."""
    return int(obj.__dlpack_device__()[0])


def _tensor(obj: Any) -> tuple[Any, _Tensor, bool]:
    """(capsule, its DLTensor, read-only flag), asked as mpi4py asks; BufferError for invalid capsules."""
    try:
        capsule = obj.__dlpack__(max_version=(1, 0), copy=False)
        versioned = True
    except TypeError:  # a DLPack 0.x producer
        capsule = obj.__dlpack__()
        versioned = False
    name = b"dltensor_versioned" if versioned else b"dltensor"
    if not _capsule_is_valid(capsule, name):
        if versioned and _capsule_is_valid(capsule, b"dltensor"):  # a 0.x capsule despite max_version
            name, versioned = b"dltensor", False
        else:
            raise BufferError("dlpack: invalid capsule object")
    pointer = _capsule_pointer(capsule, name)
    if versioned:
        managed = _ManagedVersioned.from_address(pointer)
        if managed.version.major < 1:
            raise BufferError("dlpack: unexpected version")
        return capsule, managed.dl_tensor, bool(managed.flags & _READ_ONLY_FLAG)
    return capsule, _Managed.from_address(pointer).dl_tensor, False


def tensor_nbytes(obj: Any) -> int:
    """Bytes of `obj`'s DLPack tensor (elements x element size), without building an array; the capsule
    is released unconsumed. BufferError for invalid capsules and shapes."""
    capsule, tensor, _ = _tensor(obj)
    ndim = tensor.ndim
    if ndim < 0 or (ndim > 0 and not tensor.shape):
        raise BufferError("dlpack: invalid shape")
    size = (tensor.dtype.bits * tensor.dtype.lanes + 7) // 8
    for i in range(ndim):
        extent = int(tensor.shape[i])
        if extent < 0:
            raise BufferError("dlpack: shape item is negative")
        size *= extent
    del capsule
    return size


def host_array(obj: Any) -> tuple[np.ndarray, bool]:
    """(array over `obj`'s host memory, read-only flag), strides as the producer gave them.

    The array keeps the capsule alive (never consumed: its destructor calls the producer's deleter
    once the array is gone). BufferError with mpi4py's messages for invalid capsules and shapes.
    """
    capsule, tensor, readonly = _tensor(obj)
    ndim = tensor.ndim
    if ndim < 0:
        raise BufferError("dlpack: number of dimensions is negative")
    if ndim > 0 and not tensor.shape:
        raise BufferError("dlpack: shape is NULL")
    shape = [int(tensor.shape[i]) for i in range(ndim)]
    if any(n < 0 for n in shape):
        raise BufferError("dlpack: shape item is negative")
    strides = [int(tensor.strides[i]) for i in range(ndim)] if tensor.strides else None
    if strides is not None and any(s < 0 for s in strides):
        raise BufferError("dlpack: strides item is negative")
    char, itemsize = _code(tensor.dtype)
    element = (tensor.dtype.bits * tensor.dtype.lanes + 7) // 8  # bytes per DLPack element
    if char == "B":  # raw bytes: each element becomes `element` trailing bytes
        shape, itemsize = shape + [element], 1
        strides = None if strides is None else [s * element for s in strides] + [1]
    else:
        strides = None if strides is None else [s * itemsize for s in strides]
    dtype = np.dtype(char)
    if strides is not None and _c_strides(shape, itemsize) == strides:
        strides = None
    address = (tensor.data or 0) + tensor.byte_offset
    if int(np.prod(shape, dtype=np.int64)) == 0 or not address:
        return np.empty(shape, dtype), readonly
    interface = {
        "version": 3,
        "shape": tuple(shape),
        "typestr": dtype.str,
        "data": (address, readonly),
        "strides": None if strides is None else tuple(strides),
    }
    return np.asarray(_Holder(interface, capsule)), readonly


def _c_strides(shape: list[int], itemsize: int) -> list[int]:
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]
