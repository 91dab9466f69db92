"""Device-memory detection: which buffers live on a CUDA device, what they look like, and whether
the MPI library can read device memory itself (else the engine stages through pinned host buffers).

Nothing here imports CuPy or initializes CUDA; MPI is imported only by `cuda_aware_mpi`.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

__all__ = [
    "CUDA_AWARE_ENV",
    "DLPACK_CUDA_DEVICE_TYPES",
    "DeviceArrayInfo",
    "cuda_aware_mpi",
    "device_array_info",
    "is_device_buffer",
]

CUDA_AWARE_ENV = "ADAPTCOLL_CUDA_AWARE"
"""Set to 1 or 0 to say whether the MPI library is CUDA-aware, overriding every detection."""

DLPACK_CUDA_DEVICE_TYPES = {2: "cuda", 13: "cuda_managed"}
"""DLPack device types whose memory belongs to a CUDA device (kDLCUDA, kDLCUDAManaged);
kDLCUDAHost (3, pinned host memory) is host memory as far as MPI is concerned."""

_HOST_TYPES = (np.ndarray, bytes, bytearray, memoryview)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
    except Exception:  # noqa: BLE001 - a producer that cannot export is simply not a device buffer
        return None
    return cai if isinstance(cai, dict) else None


def _dlpack_device(obj: Any) -> Optional[tuple[int, int]]:
    """The object's (device_type, device_id) from `__dlpack_device__`, or None."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        device_type, device_id = query()
    except Exception:  # noqa: BLE001
        return None
    return int(device_type), int(device_id)


def is_device_buffer(obj: Any) -> bool:
    """Whether `obj` is CUDA device memory: it exposes `__cuda_array_interface__`, or a `__dlpack__`
    whose `__dlpack_device__` is a CUDA device. NumPy arrays and bytes-likes answer at once."""
    if isinstance(obj, _HOST_TYPES):
        return False
    if _cuda_array_interface(obj) is not None:
        return True
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
    raise ValueError(f"{type(obj).__name__} is not a CUDA device buffer (no __cuda_array_interface__ "
                     "and no CUDA __dlpack_device__)")


def _env_override() -> Optional[bool]:
    """ADAPTCOLL_CUDA_AWARE as a bool, None when unset or empty; ValueError when unreadable."""
    raw = os.environ.get(CUDA_AWARE_ENV)
    if raw is None or raw.strip() == "":
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{CUDA_AWARE_ENV}={raw!r} is not understood: set it to 1 (CUDA-aware MPI) or 0 (stage "
                     "device buffers through host memory), or unset it to detect")


def _alloc_kinds(comm: Any) -> Optional[str]:
    """The MPI 4.1 info value `mpi_memory_alloc_kinds` from the communicator or MPI_INFO_ENV."""
    from mpi4py import MPI

    if not MPI.Is_initialized() or MPI.Is_finalized():
        return None
    sources = []
    try:
        sources.append((comm if comm is not None else MPI.COMM_WORLD).Get_info())
    except MPI.Exception:
        pass
    sources.append(MPI.INFO_ENV)
    for info in sources:
        try:
            value = info.Get("mpi_memory_alloc_kinds")
        except MPI.Exception:
            value = None
        finally:
            if info is not MPI.INFO_ENV and info != MPI.INFO_NULL:
                info.Free()
        if value:
            return value
    return None


def _mpix_query_cuda_support() -> Optional[bool]:
    """MPIX_Query_cuda_support() from the MPI library mpi4py loaded (MPICH, Open MPI), or None if absent."""
    from mpi4py import MPI

    candidates = [MPI.__file__]
    try:
        with open("/proc/self/maps") as maps:
            candidates += sorted({line.split()[-1] for line in maps
                                  if "/libmpi" in line and ".so" in line})
    except OSError:
        pass
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LOCAL", 0)
    for path in candidates:
        try:
            library = ctypes.CDLL(path, mode=mode)
            query = library.MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        query.argtypes = []
        return bool(query())
    return None


def cuda_aware_mpi(comm: Any = None) -> tuple[bool, str]:
    """Whether MPI can take device pointers, and why we think so.

    Order: the ADAPTCOLL_CUDA_AWARE override, the MPI 4.1 info key `mpi_memory_alloc_kinds` listing
    a cuda kind, MPIX_Query_cuda_support() through ctypes, else no.
    """
    override = _env_override()
    if override is not None:
        return override, f"{CUDA_AWARE_ENV}={os.environ[CUDA_AWARE_ENV].strip()}"
    kinds = _alloc_kinds(comm)
    if kinds is not None:
        cuda_kinds = [kind.strip() for kind in kinds.split(",") if kind.strip().lower().startswith("cuda")]
        if cuda_kinds:
            return True, f"mpi_memory_alloc_kinds lists {','.join(cuda_kinds)}"
    supported = _mpix_query_cuda_support()
    if supported is not None:
        return supported, f"MPIX_Query_cuda_support() returned {int(supported)}"
    if kinds is not None:
        return False, f"mpi_memory_alloc_kinds is {kinds!r} (no cuda kind) and MPIX_Query_cuda_support is absent"
    return False, "no CUDA support reported (no mpi_memory_alloc_kinds info key, no MPIX_Query_cuda_support)"
