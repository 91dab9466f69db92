"""The CUDA array backend (CuPy): folds are our own kernels launched on a per-backend stream.

`combine` only enqueues work and records an event, returning a poll on that event, so the host never
waits for the GPU. CuPy is imported lazily: this module imports (and names its kernel table) on
machines without CuPy or a GPU; constructing a `CupyBackend` there raises a clear ImportError.

Stream contract (which streams the backend orders against):

* `CupyBackend` enqueues everything (`copy`, `combine`, and `empty`'s allocation) on its *own*
  non-blocking stream, and orders its work only against that stream. A non-blocking stream does not
  wait for the legacy default stream nor for any other stream, so an operand written on another stream
  (the user's producer stream, CuPy's default stream, a staging stream) must be finished before it is
  handed over: synchronize that stream (`synchronize_producer`), or make the backend's stream wait
  for it without blocking the host (`order_after(stream)`).
* Its results are ready only once the poll `combine` returned is true (or `copy` returned): nothing
  else may read `out`, or reuse `lower`/`higher`, before then.
* `HostStaging` copies on its own stream too and returns a poll per copy: the host observes the copy's
  event before the segment is sent or folded.

adaptcoll obeys it everywhere: a user's device buffer is synchronized with its producer before the
call starts (`adaptcoll.device.as_cupy`); staged segments are folded or sent only after their copy's
event completed; pool buffers are allocated on the backend's stream and reused only after the fold
that read them completed; the root's result is final, and the request complete, only after the last
fold's event, so whatever the user enqueues after Wait() sees it.
"""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .base import ArrayBackend, Poll, ReduceOp

__all__ = [
    "CupyBackend",
    "HostStaging",
    "KERNEL_DTYPES_BY_OP",
    "KERNEL_SOURCE_FILE",
    "PIECE_KERNELS",
    "import_cupy",
    "kernel_name",
    "kernel_source",
    "kernel_source_path",
    "launch_blocks",
    "load_kernel",
    "synchronize_producer",
]

KERNEL_SOURCE_FILE = "reduce.cu"

_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_COMPLEX = ("complex64", "complex128")
KERNEL_DTYPES_BY_OP: dict[str, tuple[str, ...]] = {
    "SUM": _INTS + _FLOATS + _COMPLEX,
    "PROD": _INTS + _FLOATS + _COMPLEX,
    "MAX": _INTS + _FLOATS,
    "MIN": _INTS + _FLOATS,
    "LAND": _INTS + ("bool",),
    "LOR": _INTS + ("bool",),
    "LXOR": _INTS + ("bool",),
    "BAND": _INTS + ("bool",),
    "BOR": _INTS + ("bool",),
    "BXOR": _INTS + ("bool",),
}
"""The (op, dtype) pairs kernels/reduce.cu exports (MPI's op/type rules, plus bfloat16)."""

_KERNEL_NAMES: dict[tuple[str, str], str] = {
    (op, dtype): f"adaptcoll_{op.lower()}_{dtype}" for op, dtypes in KERNEL_DTYPES_BY_OP.items() for dtype in dtypes
}

PIECE_KERNELS: tuple[str, str] = ("adaptcoll_gather_pieces", "adaptcoll_scatter_pieces")
"""The copy kernels of kernels/reduce.cu that gather pieces of many device arrays into one bucket and
scatter them back, from a device table of (address, offset in the bucket, bytes) per piece."""

_CUPY_MISSING = (
    "adaptcoll's GPU backend needs CuPy: install the extra matching the CUDA version `nvidia-smi` "
    "reports for your driver, `pip install adaptcoll[gpu-cuda12]` or `adaptcoll[gpu-cuda13]` "
    "(the wheels cupy-cuda12x / cupy-cuda13x), or use the host (NumPy) backend"
)


def import_cupy() -> Any:
    """Import CuPy on first use; ImportError with install advice when it is missing."""
    try:
        import cupy
    except ImportError as error:
        raise ImportError(f"{_CUPY_MISSING} ({error})") from error
    return cupy


def kernel_name(op_name: str, dtype: Any) -> str:
    """The extern "C" kernel that folds `op_name` on `dtype`, e.g. adaptcoll_sum_float32; KeyError if none."""
    name = _KERNEL_NAMES.get((op_name, dtype)) if isinstance(dtype, str) else None
    return name if name is not None else _KERNEL_NAMES[(op_name, np.dtype(dtype).name)]


def kernel_source_path() -> Path:
    """Where reduce.cu lives: the installed `adaptcoll.kernels` package, else the source tree's kernels/."""
    try:
        installed = resources.files("adaptcoll.kernels") / KERNEL_SOURCE_FILE
        if installed.is_file():
            return Path(str(installed))
    except (ModuleNotFoundError, TypeError):
        pass
    in_tree = Path(__file__).resolve().parents[2] / "kernels" / KERNEL_SOURCE_FILE
    if in_tree.is_file():
        return in_tree
    raise FileNotFoundError(
        f"cannot find {KERNEL_SOURCE_FILE}: neither the installed package adaptcoll.kernels nor {in_tree} "
        "has it (a wheel built without the kernels' package-data?)"
    )


def kernel_source() -> str:
    """The CUDA C++ text of the reduction kernels."""
    return kernel_source_path().read_text()


_MODULES: dict[int, Any] = {}
_KERNELS: dict[tuple[int, str], Any] = {}
_COMPILE_LOCK = threading.Lock()
NVRTC_OPTIONS: tuple[str, ...] = ()  # CuPy adds -arch and -ftz=true itself; the source needs no flags


def load_kernel(name: str, device_id: Optional[int] = None) -> Any:
    """The `cupy.RawKernel` called `name`, compiling the module once per device and process."""
    cupy = import_cupy()
    if device_id is None:
        device_id = cupy.cuda.Device().id
    kernel = _KERNELS.get((device_id, name))
    if kernel is None:
        with _COMPILE_LOCK:
            module = _MODULES.get(device_id)
            if module is None:
                with cupy.cuda.Device(device_id):
                    module = cupy.RawModule(code=kernel_source(), options=NVRTC_OPTIONS)
                    module.compile()
                _MODULES[device_id] = module
            kernel = module.get_function(name)
            _KERNELS[(device_id, name)] = kernel
    return kernel


PACKS_PER_THREAD = 4
"""16-byte packs each kernel thread loads before it folds and stores them (ADAPTCOLL_PACKS_PER_THREAD in
kernels/reduce.cu): several independent loads in flight per thread instead of one."""


def launch_blocks(packs: int, block_size: int, sm_count: int, max_blocks: int) -> int:
    """Grid size for a fold of `packs` 16-byte packs: fat blocks (PACKS_PER_THREAD packs per thread per
    pass), but at least one block per SM while every thread still gets a pack, and at most `max_blocks`
    (the grid-stride loop covers the rest)."""
    fat = -(-packs // (block_size * PACKS_PER_THREAD))
    busy = min(sm_count, -(-packs // block_size))
    return max(1, min(max_blocks, max(fat, busy)))


def _as_cupy(cupy: Any, array: Any) -> Any:
    """A cupy.ndarray view of a device array (zero-copy through __cuda_array_interface__/DLPack)."""
    return array if isinstance(array, cupy.ndarray) else cupy.asarray(array)


class CupyBackend(ArrayBackend):
    """Device arrays on one GPU; folds and copies run on this backend's own non-blocking stream.

    Make one per communicator. `combine` returns a poll on a CUDA event (no host synchronization);
    `copy` waits for its stream so the copied data may go to MPI right after it returns. Operands
    written on any other stream must be finished first (see the module's stream contract).
    """

    name = "cupy"

    def __init__(
        self, device: Optional[int] = None, stream: Any = None, block_size: int = 256, blocks_per_sm: int = 8
    ) -> None:
        cupy = import_cupy()
        self._cupy = cupy
        self._runtime = cupy.cuda.runtime
        self.device = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
        self._device_id = self.device.id
        with self.device:
            self.stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
            sm_count = cupy.cuda.runtime.getDeviceProperties(self.device.id)["multiProcessorCount"]
        self.block_size = block_size
        self.blocks_per_sm = blocks_per_sm
        self.sm_count = max(1, sm_count)
        self._kernels: dict[tuple[str, Any], tuple[Any, int]] = {}
        self._events = _EventPool(cupy)

    def empty(self, count: int, dtype: Any) -> Any:
        """A new 1-D device array on this backend's device, allocated on its stream (so CuPy's pool
        hands the memory out again only in that stream's order)."""
        with self.device, self.stream:
            return self._cupy.empty(count, dtype)

    def copy(self, dst: Any, src: Any) -> None:
        """`dst[...] = src` (device or host on either side) on the stream, then wait for the stream."""
        cupy = self._cupy
        nbytes = _nbytes(dst)
        if nbytes != _nbytes(src):
            raise ValueError(f"copy size mismatch: dst has {nbytes} bytes, src {_nbytes(src)}")
        if nbytes:
            cupy.cuda.runtime.memcpyAsync(
                _pointer(dst), _pointer(src), nbytes, cupy.cuda.runtime.memcpyDefault, self.stream.ptr
            )
        self.stream.synchronize()

    def order_after(self, stream: Any) -> None:
        """Make this backend's stream wait for everything enqueued on `stream` so far, without blocking
        the host (an event recorded on `stream`, waited for on ours)."""
        event = self._cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        self.stream.wait_event(event)

    def supports(self, op: ReduceOp, dtype: Any) -> bool:
        """Predefined ops where a kernel exists; user ops through a host round trip."""
        if op.name == "USER":
            return op.user_fold is not None
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            return False
        return dtype.isnative and (op.name, dtype.name) in _KERNEL_NAMES

    def combine(self, op: ReduceOp, lower: Any, higher: Any, out: Any) -> Optional[Poll]:
        """Enqueue `out = lower op higher` on the stream; returns a poll on the recorded event.

        The host-side cost is what bounds small folds (a 1 MiB fold takes ~2 us on an H100), so this
        path avoids context managers: the kernel is launched with an explicit stream, the device is
        switched only when it is not current, and events come from a pool.
        """
        if op.user_fold is not None:
            self._combine_user(op, lower, higher, out)
            return None
        cupy = self._cupy
        ndarray = cupy.ndarray
        out_c = out if isinstance(out, ndarray) else cupy.asarray(out)
        lower_c = lower if isinstance(lower, ndarray) else cupy.asarray(lower)
        higher_c = higher if isinstance(higher, ndarray) else cupy.asarray(higher)
        # compare memory, not objects: two slices of one buffer are different objects
        out_ptr = out_c.data.ptr
        stream = self.stream
        if out_ptr == higher_c.data.ptr:
            incoming = lower_c
        elif out_ptr == lower_c.data.ptr:
            incoming = higher_c
        else:  # predefined ops commute: out = higher, then out op= lower (both on our stream, in order)
            incoming = lower_c
            self._runtime.memcpyAsync(
                out_ptr, higher_c.data.ptr, out_c.nbytes, self._runtime.memcpyDeviceToDevice, stream.ptr
            )
        acc = out_c
        key = (op.name, acc.dtype)
        found = self._kernels.get(key)
        if found is None:
            found = self._kernels[key] = self._function(kernel_name(op.name, acc.dtype))
        function, max_blocks = found
        count = acc.size
        blocks = launch_blocks((count * acc.itemsize + 15) >> 4, self.block_size, self.sm_count, max_blocks)
        args = (acc, incoming, np.uint64(count))
        if self._runtime.getDevice() == self._device_id:
            function((blocks,), (self.block_size,), args, 0, stream)
            return self._events.record(stream)
        with self.device:
            function((blocks,), (self.block_size,), args, 0, stream)
            return self._events.record(stream)

    def _function(self, name: str) -> tuple[Any, int]:
        """(the compiled kernel function on this device, the largest grid worth launching for it).

        The grid cap is one full wave: SMs x the blocks of `block_size` threads that fit on an SM at
        once (from the occupancy API; register use differs per op and dtype). A grid-stride loop does
        the rest, so large folds never end with a partly filled second wave.
        """
        with self.device:
            function = load_kernel(name, self._device_id).kernel
            try:
                per_sm = self._cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                    function.ptr, self.block_size, 0
                )
            except Exception:  # no occupancy API (a stand-in CuPy): the configured guess
                per_sm = self.blocks_per_sm
        return function, max(1, self.sm_count * max(1, int(per_sm)))

    def synchronize(self) -> None:
        """Wait until everything enqueued on this backend's stream has finished."""
        self.stream.synchronize()

    def _combine_user(self, op: ReduceOp, lower: Any, higher: Any, out: Any) -> None:
        """User ops fold host arrays: bring both operands to the host, fold, and copy the result back."""
        self.stream.synchronize()
        host_lower = self._cupy.asnumpy(_as_cupy(self._cupy, lower), stream=self.stream)
        host_higher = self._cupy.asnumpy(_as_cupy(self._cupy, higher), stream=self.stream)
        self.stream.synchronize()
        if op.user_fold is None:
            raise ValueError(f"reduction op {op.name!r} is neither predefined nor carries a user_fold")
        op.user_fold(host_lower, host_higher)
        self.copy(out, host_higher)


class _EventPool:
    """CUDA events reused once the host has seen them complete: `record(stream)` returns a poll that
    latches True (so polling it again after it fired is harmless) and gives its event back then."""

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy
        self._free: list[Any] = []

    def record(self, stream: Any) -> Poll:
        free = self._free
        event = free.pop() if free else self._cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        pending = [event]

        def poll() -> bool:
            ev = pending[0]
            if ev is None:
                return True
            if not ev.done:
                return False
            pending[0] = None
            free.append(ev)
            return True

        return poll


def _pointer(array: Any) -> int:
    """The address of an array's first element (CuPy, CAI, or NumPy host array)."""
    data = getattr(array, "data", None)
    ptr = getattr(data, "ptr", None)
    if ptr is not None:
        return int(ptr)
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return int(np.asarray(array).ctypes.data)


def _nbytes(array: Any) -> int:
    return int(array.nbytes)


class HostStaging:
    """Pinned host buffers and async device<->host copies for an MPI that cannot read device memory.

    Buffers come from a per-size free list of `cupyx.empty_pinned` arrays; each transfer runs on the
    staging stream and returns a poll on its event, so segments move while others are in flight.
    """

    def __init__(self, stream: Any = None, device: Optional[int] = None) -> None:
        self._cupy = import_cupy()
        import cupyx

        self._cupyx = cupyx
        self.device = self._cupy.cuda.Device(device) if device is not None else self._cupy.cuda.Device()
        self._device_id = self.device.id
        with self.device:
            self.stream = stream if stream is not None else self._cupy.cuda.Stream(non_blocking=True)
        self._free: dict[tuple[int, str], list[np.ndarray]] = {}
        self._events = _EventPool(self._cupy)

    def acquire(self, count: int, dtype: Any) -> np.ndarray:
        """A pinned host array of `count` x `dtype`, reused from the pool when one is free."""
        dtype = np.dtype(dtype)
        free = self._free.get((count, dtype.str))
        if free:
            return free.pop()
        return self._cupyx.empty_pinned((count,), dtype)

    def release(self, host: np.ndarray) -> None:
        """Give a pinned array back to the pool (only once no transfer uses it any more)."""
        self._free.setdefault((host.size, host.dtype.str), []).append(host)

    def to_host(self, device_array: Any, host: Optional[np.ndarray] = None) -> tuple[np.ndarray, Poll]:
        """Start copying a device segment into pinned memory; returns (host array, poll for done)."""
        if host is None:
            host = self.acquire(device_array.size, device_array.dtype)
        return host, self._transfer(host.ctypes.data, _pointer(device_array), host.nbytes)

    def to_device(self, host: np.ndarray, device_array: Any) -> Poll:
        """Start copying a pinned host segment into device memory; returns a poll for done."""
        return self._transfer(_pointer(device_array), host.ctypes.data, host.nbytes)

    def copy_async(self, dst: int, src: int, nbytes: int) -> None:
        """Enqueue a copy between addresses (host or device) on the staging stream; no event (see
        `record`, `synchronize`)."""
        if not nbytes:
            return
        runtime = self._cupy.cuda.runtime
        if runtime.getDevice() == self._device_id:
            runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, self.stream.ptr)
        else:
            with self.device:
                runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDefault, self.stream.ptr)

    def record(self) -> Poll:
        """A poll that turns true once every copy enqueued so far has finished."""
        if self._cupy.cuda.runtime.getDevice() == self._device_id:
            return self._events.record(self.stream)
        with self.device:
            return self._events.record(self.stream)

    def synchronize(self) -> None:
        """Wait until every copy started so far has finished."""
        self.stream.synchronize()

    def _transfer(self, dst: int, src: int, nbytes: int) -> Poll:
        self.copy_async(dst, src, nbytes)
        return self.record()


def synchronize_producer(array: Any, stream: Any = None) -> None:
    """Make device memory safe to hand to MPI: wait for `stream` (if given) and for the stream the
    array's producer declared in its `__cuda_array_interface__` (mpi4py itself never does)."""
    if stream is not None:
        stream.synchronize()
    cai = getattr(array, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        return
    producer = cai.get("stream")
    if producer is None:
        return
    if not isinstance(producer, int) or producer == 0:
        raise ValueError(f"invalid __cuda_array_interface__ stream {producer!r} (CAI v3 forbids 0)")
    import_cupy().cuda.runtime.streamSynchronize(producer)
