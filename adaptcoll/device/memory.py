"""What memory a buffer is: host, CUDA device or CUDA managed memory, and what a device buffer looks like.

A buffer is device memory when it is a CuPy array, a CUDA `__dlpack__` producer, or exposes a
`__cuda_array_interface__` whose pointer the CUDA driver says is device (or managed) memory
(`adaptcoll.device.driver`): host memory behind that interface (pinned buffers, mpi4py's test arrays)
is host memory, and where no driver loads every pointer is. Nothing here imports CuPy or MPI; the
driver is initialized the first time a `__cuda_array_interface__` pointer is asked about.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .driver import MemoryKind, driver

__all__ = [
    "DLPACK_CUDA_DEVICE_TYPES",
    "DeviceArrayInfo",
    "MemoryKind",
    "declares_device_memory",
    "device_array_info",
    "is_device_buffer",
    "memory_kind",
    "interface_note",
]

DLPACK_CUDA_DEVICE_TYPES = {2: "cuda", 13: "cuda_managed"}
"""DLPack device types whose memory belongs to a CUDA device (kDLCUDA, kDLCUDAManaged);
kDLCUDAHost (3, pinned host memory) is host memory as far as MPI is concerned."""

_HOST_TYPES = (np.ndarray, bytes, bytearray, memoryview)


@dataclass(frozen=True)
class DeviceArrayInfo:
    """What a device buffer exposes: layout from `__cuda_array_interface__`, device from DLPack.

    Fields the producer does not say are None (a DLPack-only object has no pointer here).
    """

    source: str  # "cuda_array_interface" or "dlpack"
    shape: Optional[tuple[int, ...]]
    dtype: Optional[np.dtype]
    pointer: Optional[int]
    readonly: Optional[bool]
    strides: Optional[tuple[int, ...]]  # in bytes; None in the CAI means C-contiguous
    contiguous: Optional[bool]
    stream: Optional[int]  # CAI v3 producer stream (1 legacy default, 2 per-thread default, else a handle)
    device_type: Optional[int] = None  # DLPack device type (2 CUDA, 13 CUDA managed)
    device_id: Optional[int] = None

    @property
    def nbytes(self) -> Optional[int]:
        """Bytes spanned by the elements, when shape and dtype are known."""
        if self.shape is None or self.dtype is None:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _cuda_array_interface(obj: Any) -> Optional[dict]:
    """The object's CAI dict, or None (some objects raise from the property when not on a GPU)."""
    try:
        cai = getattr(obj, "__cuda_array_interface__", None)
    except Exception:
        return None
    return cai if isinstance(cai, dict) else None


def _dlpack_device(obj: Any) -> Optional[tuple[int, int]]:
    """The object's (device_type, device_id) from `__dlpack_device__`, or None."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        device_type, device_id = query()
    except Exception:
        return None
    return int(device_type), int(device_id)


def _cai_pointer(cai: dict) -> Optional[int]:
    """The data pointer of a CAI dict, None when it has none readable (then mpi4py refuses it too)."""
    try:
        pointer = cai["data"][0]
        return int(pointer or 0)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def memory_kind(obj: Any) -> MemoryKind:
    """Where `obj`'s memory lives. NumPy arrays, bytes-likes and objects without a CUDA interface are
    host memory at once; a `__cuda_array_interface__` pointer is asked of the CUDA driver (device memory
    when the driver cannot tell, as the interface declares); DLPack producers say their device type."""
    cupy = sys.modules.get("cupy")  # CuPy arrays without building their interface dict (never imports CuPy)
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return MemoryKind.DEVICE
    if isinstance(obj, _HOST_TYPES):
        return MemoryKind.HOST
    cai = _cuda_array_interface(obj)
    if cai is not None:
        pointer = _cai_pointer(cai)
        if pointer is None:
            return MemoryKind.DEVICE  # unreadable: the device parser reports it, never MPI
        return driver().pointer_kind(pointer) or MemoryKind.DEVICE
    device = _dlpack_device(obj)
    if device is not None and device[0] in DLPACK_CUDA_DEVICE_TYPES:
        return MemoryKind.MANAGED if DLPACK_CUDA_DEVICE_TYPES[device[0]] == "cuda_managed" else MemoryKind.DEVICE
    return MemoryKind.HOST


def interface_note(spec: Any) -> Optional[str]:
    """For stats(): what memory a buffer behind `__cuda_array_interface__` turned out to be, and who said
    so (the CUDA driver, or its absence); None for every other buffer (and for CuPy arrays)."""
    buf = spec[0] if isinstance(spec, (tuple, list)) and spec else spec
    if type(buf) is np.ndarray or _cuda_array_interface(buf) is None:
        return None
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(buf, cupy.ndarray):
        return None
    return f"{memory_kind(buf).value} memory behind __cuda_array_interface__ ({driver().name})"


def is_device_buffer(obj: Any) -> bool:
    """Whether `obj` is CUDA device (or managed) memory, which a non-CUDA-aware MPI must never see."""
    return memory_kind(obj) is not MemoryKind.HOST


def declares_device_memory(obj: Any) -> bool:
    """Like `is_device_buffer`, but a subclass of a host type that also exposes a CUDA interface is asked
    about too: CUDA managed memory (e.g. Numba's managed arrays, ndarray subclasses with a
    `__cuda_array_interface__`) exports the buffer protocol as well. Used where any buffer-protocol
    object may turn up, such as out-of-band pickle buffers."""
    if type(obj) in _HOST_TYPES:
        return False
    cai = _cuda_array_interface(obj)
    if cai is not None:
        pointer = _cai_pointer(cai)
        return pointer is None or driver().pointer_kind(pointer) is not MemoryKind.HOST
    device = _dlpack_device(obj)
    return device is not None and device[0] in DLPACK_CUDA_DEVICE_TYPES


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether byte `strides` describe a C-contiguous layout of `shape` (size-1 axes may stride anyhow)."""
    if any(extent == 0 for extent in shape):
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _parse_cai(cai: dict) -> DeviceArrayInfo:
    """Validate and decode a `__cuda_array_interface__` dict (versions 0-3)."""
    try:
        shape = tuple(int(extent) for extent in cai["shape"])
        typestr = cai["typestr"]
        pointer, readonly = cai["data"]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed __cuda_array_interface__ {cai!r}: {error}") from error
    if not isinstance(typestr, str):
        raise ValueError(f"__cuda_array_interface__ typestr must be a string, got {typestr!r}")
    try:
        dtype = np.dtype(typestr)
    except TypeError as error:
        raise ValueError(f"__cuda_array_interface__ has an unknown typestr {typestr!r}") from error
    if dtype.itemsize == 0 or dtype.hasobject:
        raise ValueError(f"__cuda_array_interface__ typestr {typestr!r} is not a fixed-size plain type")
    if cai.get("mask") is not None:
        raise ValueError("__cuda_array_interface__ with a mask is not supported")
    raw_strides = cai.get("strides")
    if raw_strides is None:
        strides, contiguous = None, True
    else:
        strides = tuple(int(step) for step in raw_strides)
        if len(strides) != len(shape):
            raise ValueError(f"__cuda_array_interface__ strides {strides} do not match shape {shape}")
        contiguous = _c_contiguous(shape, strides, dtype.itemsize)
    stream = cai.get("stream")
    if stream is not None and (not isinstance(stream, int) or stream == 0):
        raise ValueError(f"__cuda_array_interface__ stream {stream!r} is invalid (an int other than 0, or None)")
    return DeviceArrayInfo(
        source="cuda_array_interface",
        shape=shape,
        dtype=dtype,
        pointer=int(pointer or 0),
        readonly=bool(readonly),
        strides=strides,
        contiguous=contiguous,
        stream=stream,
    )


def device_array_info(obj: Any) -> DeviceArrayInfo:
    """Layout and device of a device buffer; ValueError for a host object or a malformed interface."""
    cai = _cuda_array_interface(obj)
    device = _dlpack_device(obj)
    if cai is not None:
        info = _parse_cai(cai)
        if device is not None:
            info = DeviceArrayInfo(**{**info.__dict__, "device_type": device[0], "device_id": device[1]})
        return info
    if device is not None and device[0] in DLPACK_CUDA_DEVICE_TYPES:
        shape = getattr(obj, "shape", None)
        dtype = getattr(obj, "dtype", None)
        try:
            dtype = np.dtype(dtype) if dtype is not None else None
        except TypeError:
            dtype = None
        return DeviceArrayInfo(
            source="dlpack",
            shape=tuple(shape) if shape is not None else None,
            dtype=dtype,
            pointer=None,
            readonly=None,
            strides=None,
            contiguous=None,
            stream=None,
            device_type=device[0],
            device_id=device[1],
        )
    raise ValueError(
        f"{type(obj).__name__} is not a CUDA device buffer (no __cuda_array_interface__ and no CUDA __dlpack_device__)"
    )
