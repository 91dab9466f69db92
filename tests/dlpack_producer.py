"""A strict DLPack producer for tests, built with ctypes like the arrays in mpi4py's own test suite.

Every `__dlpack__()` call returns a new capsule over a `malloc`ed DLManagedTensor (versioned or not).
The capsule's destructor calls the tensor's deleter only if the capsule was not consumed (renamed),
then `free`s the DLManagedTensor, whoever still holds a pointer to it. So a consumer that takes the
capsule over and calls the deleter after the capsule is gone reads freed memory (the crash issue 10
item 8 describes), and one that never releases the capsule leaks it: `Producer.outstanding()` counts
tensors whose deleter has not run yet. Data comes from a NumPy array the producer owns; `strides`
gives a non-contiguous view; `dl_dtype` = (code, bits, lanes) overrides the DLPack dtype (bool,
float16, complex, lanes > 1, ...). Like mpi4py's, the capsule destructor calls into ctypes, so it must
not run while an exception is being raised (do not hand a bad producer to mpi4py itself, which raises
while it still holds the capsule).
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

import numpy as np

__all__ = ["Producer", "LegacyProducer", "outstanding", "late_calls", "dl_dtype_of"]

KDL_CPU = 1
INT, UINT, FLOAT, COMPLEX, BOOL = 0, 1, 2, 5, 6
READ_ONLY = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [ctypes.c_void_p]

Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _py(restype: Any, *argtypes: Any) -> Any:
    return ctypes.PYFUNCTYPE(restype, *argtypes)


# private function objects: never change the argtypes of ctypes.pythonapi's shared attributes
_new = _py(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, Destructor)(("PyCapsule_New", ctypes.pythonapi))
_valid = _py(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_pointer = _py(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
_context = _py(ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_GetContext", ctypes.pythonapi))
_set_context = _py(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_SetContext", ctypes.pythonapi))

_live: set[int] = set()  # addresses of tensors whose deleter has not run
_late: list[int] = []  # deleter calls through a tensor already freed with its capsule


@Deleter
def _deleter(address: int) -> None:
    _live.discard(address)


@Deleter
def _freed_deleter(address: int) -> None:
    _late.append(address)


@Destructor
def _destroy(capsule: int) -> None:
    for name in (b"dltensor_versioned", b"dltensor"):
        if _valid(capsule, name):  # not consumed: the producer's deleter runs now
            address = _pointer(capsule, name)
            kind = DLManagedTensorVersioned if name == b"dltensor_versioned" else DLManagedTensor
            deleter = Deleter.from_address(address + kind.deleter.offset)
            deleter(address)
            break
    address = _context(capsule)
    _poison(address)  # a late deleter call through the freed tensor lands in _freed_deleter
    _libc.free(address)  # strict: the tensor's memory goes with the capsule


_kinds: dict[int, type] = {}  # tensor address -> its struct type


def _poison(address: int) -> None:
    kind = _kinds.pop(address, DLManagedTensor)
    kind.from_address(address).deleter = _freed_deleter


def late_calls() -> int:
    """Deleter calls made through a tensor after its capsule freed it (a consumer outlived the capsule)."""
    return len(_late)


def outstanding() -> int:
    """Tensors handed out whose deleter has not run (a consumer kept or leaked a capsule)."""
    return len(_live)


def dl_dtype_of(dtype: np.dtype) -> tuple[int, int, int]:
    """(code, bits, lanes) of a NumPy dtype."""
    kind = {"b": BOOL, "i": INT, "u": UINT, "f": FLOAT, "c": COMPLEX}[dtype.kind]
    return kind, dtype.itemsize * 8, 1


class Producer:
    """Host memory reachable only through `__dlpack__` (DLPack 1.x, unversioned on request)."""

    versioned = True

    def __init__(
        self,
        data: np.ndarray,
        dl_dtype: Optional[tuple[int, int, int]] = None,
        strides: Optional[tuple[int, ...]] = None,
        read_only: bool = False,
        shape: Optional[tuple[int, ...]] = None,
    ) -> None:
        self.data = data  # owned: the memory every tensor points to
        self.dl_dtype = dl_dtype or dl_dtype_of(data.dtype)
        self.shape = tuple(shape if shape is not None else data.shape)
        self.strides = strides
        self.read_only = read_only

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CPU, 0)

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        versioned = self.versioned and max_version is not None and max_version[0] >= 1
        return self._capsule(versioned)

    def _capsule(self, versioned: bool) -> Any:
        ndim = len(self.shape)
        kind = DLManagedTensorVersioned if versioned else DLManagedTensor
        size = ctypes.sizeof(kind) + 16 * ndim
        address = _libc.malloc(size)
        ctypes.memset(address, 0, size)
        managed = kind.from_address(address)
        tensor = managed.dl_tensor
        tensor.data = self.data.ctypes.data
        tensor.device = DLDevice(KDL_CPU, 0)
        tensor.ndim = ndim
        tensor.dtype = DLDataType(*self.dl_dtype)
        dims = (ctypes.c_int64 * max(ndim, 1)).from_address(address + ctypes.sizeof(kind))
        dims[:ndim] = self.shape
        tensor.shape = ctypes.cast(ctypes.addressof(dims), ctypes.POINTER(ctypes.c_int64))
        if self.strides is not None:
            steps = (ctypes.c_int64 * max(ndim, 1)).from_address(address + ctypes.sizeof(kind) + 8 * ndim)
            steps[:ndim] = self.strides
            tensor.strides = ctypes.cast(ctypes.addressof(steps), ctypes.POINTER(ctypes.c_int64))
        managed.deleter = _deleter
        if versioned:
            managed.version = DLPackVersion(1, 0)
            managed.flags = READ_ONLY if self.read_only else 0
        _live.add(address)
        _kinds[address] = kind
        capsule = _new(address, b"dltensor_versioned" if versioned else b"dltensor", _destroy)
        _set_context(capsule, address)
        return capsule


class LegacyProducer(Producer):
    """A DLPack 0.x producer: `__dlpack__(stream=None)` only (as mpi4py's test arrays), unversioned capsules."""

    versioned = False

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore[override]
        return self._capsule(False)
