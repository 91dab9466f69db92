"""The CUDA driver, through ctypes, for the two questions that need no CuPy: what memory a pointer is,
and copying device memory to and from host memory.

`__cuda_array_interface__` only says how to read memory, not where it lives: libraries (and mpi4py's
own tests) put host memory behind it. The driver knows (`cuPointerGetAttribute`). Where libcuda does
not load, or `cuInit` finds no device, no device memory can exist in this process and every pointer is
host memory. Nothing here imports CuPy, initializes CUDA before a pointer is asked about, or uses MPI.

`set_driver` replaces the driver (tests put host memory posing as device memory behind it); `watch`
tells a listener whenever the driver changes (the fast-call extension sizes host `__cuda_array_interface__`
objects in C while there is no driver).
"""

from __future__ import annotations

import ctypes
import enum
import threading
from collections.abc import Callable
from typing import Optional, Protocol

__all__ = ["MemoryKind", "Driver", "CudaDriver", "NoDriver", "driver", "set_driver", "watch"]


class MemoryKind(str, enum.Enum):
    """Where a buffer's memory lives, as MPI sees it."""

    HOST = "host"  # pageable or pinned host memory: any MPI reads it
    DEVICE = "device"  # CUDA device memory: only a CUDA-aware MPI reads it
    MANAGED = "managed"  # CUDA managed memory: treated as device memory (pages migrate under MPI's feet)


class Driver(Protocol):
    """What adaptcoll asks of a CUDA driver."""

    name: str

    def pointer_kind(self, pointer: int) -> Optional[MemoryKind]:
        """The memory behind `pointer`; None when the driver cannot tell."""

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Copy `nbytes` between any two pointers (host or device), finished on return."""

    def synchronize_stream(self, stream: int, pointer: int) -> None:
        """Wait for the CUDA stream handle `stream` (1 legacy default, 2 per-thread default) of the
        context owning `pointer`."""


class NoDriver:
    """No CUDA driver (or no device): every pointer is host memory."""

    name = "no CUDA driver"

    def __init__(self, why: str = "libcuda not found") -> None:
        self.name = f"no CUDA driver ({why})"

    def pointer_kind(self, pointer: int) -> Optional[MemoryKind]:
        return MemoryKind.HOST

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def synchronize_stream(self, stream: int, pointer: int) -> None:
        return None


_SUCCESS = 0
_ERROR_INVALID_VALUE = 1  # cuPointerGetAttribute: not a pointer CUDA knows, i.e. plain host memory
_ATTRIBUTE_CONTEXT = 1
_ATTRIBUTE_MEMORY_TYPE = 2
_ATTRIBUTE_IS_MANAGED = 8
_MEMORYTYPE_HOST = 1
_MEMORYTYPE_DEVICE = 2
_MEMORYTYPE_UNIFIED = 4


class CudaDriver:
    """libcuda through ctypes (initialized once, by the constructor)."""

    name = "CUDA driver"

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        for func in ("cuInit", "cuPointerGetAttribute", "cuMemcpy", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2"):
            getattr(lib, func).restype = ctypes.c_int
        lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        lib.cuMemcpy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
        lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cuStreamSynchronize.restype = ctypes.c_int
        status = lib.cuInit(0)
        if status != _SUCCESS:
            raise OSError(f"cuInit failed with CUDA error {status}")

    def _attribute(self, attribute: int, pointer: int, value: ctypes._SimpleCData) -> int:
        return int(self._lib.cuPointerGetAttribute(ctypes.byref(value), attribute, pointer))

    def pointer_kind(self, pointer: int) -> Optional[MemoryKind]:
        memtype = ctypes.c_uint(0)
        status = self._attribute(_ATTRIBUTE_MEMORY_TYPE, pointer, memtype)
        if status == _ERROR_INVALID_VALUE:
            return MemoryKind.HOST
        if status != _SUCCESS:
            return None
        managed = ctypes.c_int(0)
        if self._attribute(_ATTRIBUTE_IS_MANAGED, pointer, managed) == _SUCCESS and managed.value:
            return MemoryKind.MANAGED
        if memtype.value == _MEMORYTYPE_HOST:
            return MemoryKind.HOST  # pinned (page-locked or registered) host memory
        if memtype.value in (_MEMORYTYPE_DEVICE, _MEMORYTYPE_UNIFIED):
            return MemoryKind.DEVICE
        return None

    def _in_context_of(self, pointer: int) -> bool:
        """Make the context owning `pointer` current (pop it with _pop); False for host memory."""
        context = ctypes.c_void_p(0)
        if self._attribute(_ATTRIBUTE_CONTEXT, pointer, context) != _SUCCESS or not context.value:
            return False
        self._check(self._lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        return True

    def _pop(self) -> None:
        self._lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p(0)))

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        pushed = self._in_context_of(src) or self._in_context_of(dst)
        try:
            self._check(self._lib.cuMemcpy(dst, src, nbytes), "cuMemcpy")
        finally:
            if pushed:
                self._pop()

    def synchronize_stream(self, stream: int, pointer: int) -> None:
        pushed = self._in_context_of(pointer)
        try:
            self._check(self._lib.cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")
        finally:
            if pushed:
                self._pop()

    @staticmethod
    def _check(status: int, call: str) -> None:
        if status != _SUCCESS:
            raise RuntimeError(f"adaptcoll: {call} failed with CUDA error {status}")


_LIBRARIES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib")
_lock = threading.Lock()
_driver: Optional[Driver] = None


def _load() -> Driver:
    """The CUDA driver if libcuda loads and initializes, else NoDriver."""
    why = "libcuda not found"
    for name in _LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            return CudaDriver(lib)
        except (OSError, AttributeError) as error:
            why = str(error)
            break
    return NoDriver(why)


_watchers: list[Callable[[Optional[Driver]], None]] = []


def driver() -> Driver:
    """This process's driver (loaded on first use)."""
    global _driver
    found = _driver
    if found is None:
        with _lock:
            if _driver is None:
                _driver = _load()
                for tell in _watchers:
                    tell(_driver)
            found = _driver
    return found


def set_driver(replacement: Optional[Driver]) -> Optional[Driver]:
    """Use `replacement` from now on (None: load the real one again on next use); returns the previous."""
    global _driver
    with _lock:
        previous, _driver = _driver, replacement
        for tell in _watchers:
            tell(replacement)
    return previous


def watch(listener: Callable[[Optional[Driver]], None]) -> None:
    """Call `listener(driver)` now and whenever the driver changes (None: not loaded yet); it runs under
    this module's lock, so it must not ask for the driver itself."""
    with _lock:
        _watchers.append(listener)
        listener(_driver)
