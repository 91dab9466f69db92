"""Host memory posing as CUDA device memory, so that the device routes run, and are checked, without a GPU.

* `ARENA`: one anonymous mapping. Every fake device allocation comes from it and is never reused, so
  "is this pointer device memory?" is "is it inside the arena?", which is what the MPI guard
  (`tests/device_guard.py`) asks of every buffer argument of every MPI call, and what `FakeDriver`
  answers in place of the CUDA driver (`adaptcoll.device.driver`): importing this module installs it
  (pointers outside the arena are asked of the real driver, so nothing else changes).
* The user's device buffers: `CAIBuffer` exposes only `__cuda_array_interface__` (how adaptcoll sees
  CuPy, Numba and PyTorch arrays), `DLPackBuffer` only a CUDA `__dlpack__` (JAX), and `ManagedArray`
  is an ndarray subclass over "device" memory with a CAI whose pickle carries an out-of-band buffer
  (CUDA managed memory exports the buffer protocol).
* `fake_cupy()`: stand-in `cupy`/`cupyx` modules (what adaptcoll's CuPy backend, host staging and
  whole-call staging use): arrays live in the arena, copies are memmoves, kernels fold with NumPy,
  events complete after a few polls (the gather/scatter kernels of grouped buckets copy by their
  tables). Kernels and device-to-device copies refuse host memory, and pinned
  buffers come from the ordinary heap, so mixing the two up fails here as it would on a GPU.

Not a test module: imported by tests and by tests/programs/device_routes.py.
"""

from __future__ import annotations

import ctypes
import mmap
import pickle
import random
import sys
import threading
import types
from typing import Any, Optional

import numpy as np

from adaptcoll.backends.numpy_backend import UFUNC_BY_OP
from adaptcoll.device import driver as cuda_driver
from adaptcoll.device.driver import MemoryKind

__all__ = [
    "ARENA",
    "CAIBuffer",
    "FakeDriver",
    "DLPackBuffer",
    "DRIVER",
    "FakeDeviceArray",
    "ManagedArray",
    "device_array",
    "fake_cupy",
    "install",
    "on_device",
]


class Arena:
    """A bump allocator over one anonymous mapping (reserved, committed page by page as it is touched)."""

    def __init__(self, size: int = 1 << 30) -> None:
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        self._map = mmap.mmap(-1, size, flags=flags)
        self.lo = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self.hi = self.lo + size
        self._next = 0
        self._lock = threading.Lock()

    def contains(self, pointer: int) -> bool:
        return self.lo <= pointer < self.hi

    def bytes_at(self, pointer: int, nbytes: int) -> np.ndarray:
        """A uint8 view of arena memory at `pointer`."""
        if not (self.contains(pointer) and pointer + nbytes <= self.hi):
            raise ValueError(f"{pointer:#x}+{nbytes} is not fake device memory")
        return np.frombuffer(self._map, np.uint8, nbytes, pointer - self.lo)

    def allocate(self, nbytes: int) -> np.ndarray:
        """A fresh uint8 view of `nbytes` (256-byte aligned, like cudaMalloc's pool)."""
        with self._lock:
            start = self._next
            self._next = start + ((max(nbytes, 1) + 255) & ~255)
            if self._next > len(self._map):
                raise MemoryError("fake device arena exhausted")
        return np.frombuffer(self._map, np.uint8, nbytes, start)


ARENA = Arena()


class FakeDriver:
    """The CUDA driver's answers with the arena as device memory; other pointers go to `real`.
    Records the streams it was asked to synchronize and the copies it made (to and from the arena)."""

    name = "fake CUDA driver (arena)"

    def __init__(self, real: Any) -> None:
        self.real = real
        self.streams: list[int] = []
        self.copies: list[tuple[int, int, int]] = []

    def pointer_kind(self, pointer: int) -> Optional[MemoryKind]:
        return MemoryKind.DEVICE if ARENA.contains(pointer) else self.real.pointer_kind(pointer)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if not (ARENA.contains(dst) or ARENA.contains(src)):
            self.real.copy(dst, src, nbytes)
            return
        self.copies.append((dst, src, nbytes))
        ctypes.memmove(dst, src, nbytes)

    def synchronize_stream(self, stream: int, pointer: int) -> None:
        if not ARENA.contains(pointer):
            self.real.synchronize_stream(stream, pointer)
            return
        self.streams.append(stream)


DRIVER = FakeDriver(cuda_driver.driver())
cuda_driver.set_driver(DRIVER)


def on_device(array: Any) -> bool:
    """Whether a NumPy view lies in fake device memory."""
    return ARENA.contains(np.asarray(array).__array_interface__["data"][0]) if np.asarray(array).size else True


class _Pointer:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr: int) -> None:
        self.ptr, self.device_id = ptr, 0


class FakeDeviceArray(np.ndarray):
    """An array of the fake CuPy: an ndarray over arena memory whose `.data.ptr` is its address."""

    @property
    def data(self) -> _Pointer:  # type: ignore[override]
        return _Pointer(self.__array_interface__["data"][0])

    def set(self, host: Any, stream: Any = None) -> None:
        """Copy host data in (cupy.ndarray.set)."""
        self[...] = host

    def get(self, stream: Any = None) -> np.ndarray:
        """A host copy (cupy.ndarray.get)."""
        return np.array(self).view(np.ndarray)

    @property
    def __cuda_array_interface__(self) -> dict:
        iface = dict(self.__array_interface__)
        return {
            "shape": iface["shape"],
            "typestr": iface["typestr"],
            "data": iface["data"],
            "strides": iface["strides"],
            "version": 3,
            "stream": 1,
        }


def device_array(host: np.ndarray) -> FakeDeviceArray:
    """A fake device copy of a host array (C order)."""
    host = np.ascontiguousarray(host)
    raw = ARENA.allocate(host.nbytes)
    out = raw.view(host.dtype).reshape(host.shape) if host.size else np.empty(host.shape, host.dtype)
    out[...] = host
    return out.view(FakeDeviceArray)


def _empty(shape: Any, dtype: Any) -> FakeDeviceArray:
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    raw = ARENA.allocate(count * dtype.itemsize)
    return raw.view(dtype).reshape(shape).view(FakeDeviceArray)


class CAIBuffer:
    """A user's device buffer seen only through `__cuda_array_interface__` (v3, with a producer stream).
    Pickles through host memory, as CuPy arrays do."""

    def __init__(self, host: Any, readonly: bool = False, stream: Optional[int] = 1) -> None:
        self.array = device_array(np.asarray(host))
        self.readonly, self.stream = readonly, stream

    @property
    def __cuda_array_interface__(self) -> dict:
        cai = self.array.__cuda_array_interface__
        cai["data"] = (cai["data"][0], self.readonly)
        cai["stream"] = self.stream
        return cai

    def get(self) -> np.ndarray:
        """A host copy (like cupy.ndarray.get)."""
        return np.array(self.array).view(np.ndarray)

    def set(self, host: Any) -> None:
        self.array[...] = host

    def __reduce__(self) -> tuple:
        return CAIBuffer, (self.get(),)


class Strided(CAIBuffer):
    """A non-contiguous device view (every other element)."""

    @property
    def __cuda_array_interface__(self) -> dict:
        cai = super().__cuda_array_interface__
        cai["shape"] = (self.array.shape[0] // 2,)
        cai["strides"] = (2 * self.array.itemsize,)
        return cai


class DLPackBuffer:
    """A DLPack-only producer on CUDA device 0 (no `__cuda_array_interface__`), like a JAX array.
    Records the stream each consumer asked it to order its work before."""

    def __init__(self, host: Any) -> None:
        self.array = device_array(np.asarray(host))
        self.shape, self.dtype = self.array.shape, self.array.dtype
        self.streams: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, stream: Any = None, max_version: Any = None, **_: Any) -> Any:
        self.streams.append(stream)
        plain = self.array.view(np.ndarray)
        return plain.__dlpack__(max_version=max_version) if max_version is not None else plain.__dlpack__()

    def get(self) -> np.ndarray:
        return np.array(self.array).view(np.ndarray)

    def set(self, host: Any) -> None:
        self.array[...] = host


def _rebuild_managed(data: Any) -> np.ndarray:
    return np.frombuffer(data, np.float64).copy()


class ManagedArray(np.ndarray):
    """CUDA managed memory as Numba exposes it: an ndarray (buffer protocol) with a
    `__cuda_array_interface__`; pickled (protocol 5) with an out-of-band buffer over that memory."""

    @classmethod
    def of(cls, host: np.ndarray) -> ManagedArray:
        return device_array(np.asarray(host, np.float64)).view(cls)

    @property
    def __cuda_array_interface__(self) -> dict:
        return dict(self.view(FakeDeviceArray).__cuda_array_interface__, stream=None)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _rebuild_managed, (pickle.PickleBuffer(self),)


# -- the stand-in CuPy ------------------------------------------------------------------------------


def fake_cupy(seed: int = 0, max_event_polls: int = 2) -> tuple[types.ModuleType, types.ModuleType]:
    """A `cupy`/`cupyx` pair backed by the arena (see the module docstring); events complete after
    0..max_event_polls polls (seeded)."""
    rng = random.Random(seed)
    local = threading.local()
    stream_ids = iter(range(0x5000, 1 << 30))

    class Stream:
        def __init__(self, non_blocking: bool = False, null: bool = False) -> None:
            self.ptr = 0 if null else next(stream_ids)
            self.non_blocking = non_blocking
            self.synchronized = 0

        def __enter__(self) -> Stream:
            stack = getattr(local, "streams", None)
            if stack is None:
                stack = local.streams = []
            stack.append(self)
            return self

        def __exit__(self, *exc: object) -> None:
            local.streams.pop()

        def synchronize(self) -> None:
            self.synchronized += 1
            synchronized.append(self.ptr)

        def wait_event(self, event: Event) -> None:
            event.synchronize()

    null_stream = Stream(null=True)

    def get_current_stream() -> Stream:
        stack = getattr(local, "streams", None)
        return stack[-1] if stack else null_stream

    class Device:
        def __init__(self, device_id: Optional[int] = None) -> None:
            if device_id not in (None, 0):
                raise ValueError(f"fake CuPy has one device, not {device_id}")
            self.id = 0

        def __enter__(self) -> Device:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def synchronize(self) -> None:
            pass

    class Event:
        def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
            self._left = -1

        def record(self, stream: Any = None) -> None:
            self._left = rng.randint(0, max_event_polls)

        @property
        def done(self) -> bool:
            if self._left < 0:
                return True
            if self._left == 0:
                return True
            self._left -= 1
            return False

        def synchronize(self) -> None:
            self._left = 0

    def memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        if kind == runtime.memcpyDeviceToDevice and not (ARENA.contains(dst) and ARENA.contains(src)):
            raise AssertionError("device-to-device copy with a host pointer")
        if not isinstance(stream, int):
            raise TypeError("memcpyAsync takes a stream pointer")
        ctypes.memmove(dst, src, nbytes)

    synchronized: list[int] = []
    runtime = types.SimpleNamespace(
        synchronized=synchronized,  # the streams streamSynchronize waited for (by pointer)
        memcpyDefault=4,
        memcpyDeviceToDevice=3,
        memcpyAsync=memcpy_async,
        getDevice=lambda: 0,
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {"multiProcessorCount": 4, "name": b"fake device"},
        streamSynchronize=synchronized.append,
        deviceSynchronize=lambda: None,
    )
    driver = types.SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=lambda func, block, smem: 6)

    class PieceFunction:
        """The gather/scatter kernels of grouped device buckets: (bucket, table, pieces), the table
        a device uint64 array of (address, offset in the bucket, bytes) per piece."""

        def __init__(self, name: str) -> None:
            self.name, self.gather, self.ptr = name, name == "adaptcoll_gather_pieces", 78
            self.launches: list[tuple] = []

        def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, stream: Any = None) -> None:
            bucket, table, pieces = args
            for operand in (bucket, table):
                if not isinstance(operand, FakeDeviceArray) or not on_device(operand):
                    raise AssertionError(f"{self.name}: a kernel operand is not device memory")
            if not isinstance(pieces, np.uint64) or table.dtype != np.uint64 or table.size < 3 * int(pieces):
                raise AssertionError(f"{self.name}: bad arguments {table.dtype} {table.size} {pieces!r}")
            if not isinstance(stream, Stream):
                raise AssertionError(f"{self.name}: launched without an explicit stream")
            self.launches.append((grid, block, stream, int(pieces), table.__array_interface__["data"][0]))
            base = bucket.__array_interface__["data"][0]
            for address, offset, nbytes in np.array(table[: 3 * int(pieces)]).reshape(-1, 3).tolist():
                if offset + nbytes > bucket.nbytes:
                    raise AssertionError(f"{self.name}: piece {offset}+{nbytes} beyond the bucket's {bucket.nbytes}")
                if not (ARENA.contains(address) and ARENA.contains(address + nbytes - 1)):
                    raise AssertionError(f"{self.name}: a piece at {address:#x} is not device memory")
                dst, src = (base + offset, address) if self.gather else (address, base + offset)
                ctypes.memmove(dst, src, nbytes)

    class Function:
        def __init__(self, name: str) -> None:
            _, op, dtype = name.split("_", 2)
            self.name, self.ufunc, self.dtype, self.ptr = name, UFUNC_BY_OP[op.upper()], np.dtype(dtype), 77
            self.launches: list[tuple] = []

        def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, stream: Any = None) -> None:
            acc, incoming, count = args
            for operand in (acc, incoming):
                if not isinstance(operand, FakeDeviceArray) or not on_device(operand):
                    raise AssertionError(f"{self.name}: a kernel operand is not device memory")
            if acc.dtype != self.dtype or int(count) != acc.size or incoming.size != acc.size:
                raise AssertionError(f"{self.name}: bad arguments {acc.dtype} {count} {incoming.size}")
            if not isinstance(stream, Stream):
                raise AssertionError(f"{self.name}: launched without an explicit stream")
            self.launches.append((grid, block, stream))
            with np.errstate(over="ignore", invalid="ignore"):
                self.ufunc(acc.view(np.ndarray), incoming.view(np.ndarray), out=acc.view(np.ndarray))

    class RawKernel:
        def __init__(self, name: str) -> None:
            self.kernel = PieceFunction(name) if name.endswith("_pieces") else Function(name)

    class RawModule:
        def __init__(self, code: str, options: tuple = ()) -> None:
            if 'extern "C" __global__' not in code:
                raise AssertionError("not the kernel source")

        def compile(self) -> None:
            pass

        def get_function(self, name: str) -> RawKernel:
            return RawKernel(name)

    def asarray(obj: Any) -> FakeDeviceArray:
        if isinstance(obj, FakeDeviceArray):
            return obj
        cai = getattr(obj, "__cuda_array_interface__", None)
        if isinstance(cai, dict):  # a view of the producer's memory
            dtype, shape, strides = np.dtype(cai["typestr"]), tuple(cai["shape"]), cai.get("strides")
            count = int(np.prod(shape, dtype=np.int64))
            if count == 0:
                return np.empty(shape, dtype).view(FakeDeviceArray)
            if strides is None:
                span = count * dtype.itemsize
            else:
                span = sum((n - 1) * s for n, s in zip(shape, strides)) + dtype.itemsize
            raw = ARENA.bytes_at(cai["data"][0], span)
            return np.ndarray(shape, dtype, buffer=raw, strides=strides).view(FakeDeviceArray)
        if isinstance(obj, np.ndarray):  # host -> device copy
            return device_array(obj)
        raise TypeError(f"fake cupy.asarray cannot take {type(obj).__name__}")

    def from_dlpack(obj: Any) -> FakeDeviceArray:
        if obj.__dlpack_device__()[0] != 2:
            raise BufferError("not a CUDA DLPack tensor")
        obj.__dlpack__(stream=get_current_stream().ptr or 1)  # the producer orders its work before ours
        return obj.array

    def asnumpy(array: Any, stream: Any = None) -> np.ndarray:
        return np.array(asarray(array)).view(np.ndarray)

    def concatenate(arrays: Any, axis: int = 0, out: Any = None) -> FakeDeviceArray:
        if not all(isinstance(a, FakeDeviceArray) and on_device(a) for a in arrays):
            raise AssertionError("concatenate: an operand is not device memory")
        joined = np.concatenate([a.view(np.ndarray) for a in arrays], axis=axis)
        if out is None:
            return device_array(joined)
        out[...] = joined
        return out

    cupy = types.ModuleType("cupy")
    cupy.__dict__.update(
        ndarray=FakeDeviceArray,
        asarray=asarray,
        from_dlpack=from_dlpack,
        empty=_empty,
        asnumpy=asnumpy,
        concatenate=concatenate,
        RawModule=RawModule,
        cuda=types.SimpleNamespace(
            Stream=Stream,
            Device=Device,
            Event=Event,
            runtime=runtime,
            driver=driver,
            get_current_stream=get_current_stream,
        ),
        __fake__=True,
    )
    cupyx = types.ModuleType("cupyx")
    cupyx.__dict__.update(empty_pinned=lambda shape, dtype: np.empty(shape, dtype), __fake__=True)
    return cupy, cupyx


def install(seed: int = 0) -> tuple[types.ModuleType, types.ModuleType]:
    """Put the fake CuPy into sys.modules (for a whole process: tests/programs/device_routes.py)."""
    cupy, cupyx = fake_cupy(seed)
    sys.modules["cupy"], sys.modules["cupyx"] = cupy, cupyx
    return cupy, cupyx


def patch_in(monkeypatch: Any, seed: int = 0) -> tuple[types.ModuleType, types.ModuleType]:
    """Put the fake CuPy into sys.modules for one test (pytest's `monkeypatch` undoes it), with empty
    CuPy-backend and staging caches and CUDA-awareness off, as a host without a CUDA-aware MPI runs."""
    from adaptcoll.backends import cupy_backend
    from adaptcoll.device import staged as staged_native

    cupy, cupyx = fake_cupy(seed)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupyx", cupyx)
    monkeypatch.setattr(cupy_backend, "_MODULES", {})
    monkeypatch.setattr(cupy_backend, "_KERNELS", {})
    monkeypatch.setattr(staged_native, "_STAGING", {})
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "0")
    return cupy, cupyx
