"""Bandwidth of adaptcoll's reduction kernels against a device-to-device copy on one GPU.

A fold `acc op= in` moves 3 bytes per operand byte (read acc, read in, write acc), a copy moves 2;
both are timed with CUDA events on the backend's stream and reported in GB/s, the kernel also as a
percentage of the copy's bandwidth (goals: >= 90 % at >= 64 MiB, >= 60 % at 1 MiB). Folds are issued
back to back through `CupyBackend.combine`, as the protocols issue them, so at small sizes the figure
includes the host-side cost of a launch, which is what bounds them there.

    python bench/gpu_kernels.py                       # SUM on float32/float64, 1 MiB .. 1 GiB
    python bench/gpu_kernels.py --ops all --dtypes all --sizes 256M --check
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

try:
    import adaptcoll  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.cupy_backend import KERNEL_DTYPES_BY_OP, CupyBackend, import_cupy

__all__ = ["main", "measure_copy", "measure_fold", "parse_size"]

GOAL_PERCENT = 90.0


def parse_size(text: str) -> int:
    """'1M' -> 1 MiB, '64K', '2G' or plain bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _time_ms(cupy: Any, stream: Any, launch: Any, iterations: int, warmup: int) -> float:
    """Mean milliseconds of `launch()` over `iterations`, timed with events on `stream`."""
    for _ in range(warmup):
        launch()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(iterations):
        launch()
    stop.record(stream)
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / iterations


def measure_copy(backend: CupyBackend, nbytes: int, iterations: int, warmup: int) -> float:
    """GB/s of a device-to-device memcpy of `nbytes` (2 x nbytes moved)."""
    cupy = import_cupy()
    src, dst = cupy.ones(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8)
    runtime = cupy.cuda.runtime

    def launch() -> None:
        runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, backend.stream.ptr)

    ms = _time_ms(cupy, backend.stream, launch, iterations, warmup)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def measure_fold(backend: CupyBackend, op: str, dtype: str, nbytes: int, iterations: int, warmup: int) -> float:
    """GB/s of the in-place fold kernel on `nbytes` per operand (3 x nbytes moved)."""
    cupy = import_cupy()
    count = nbytes // np.dtype(dtype).itemsize
    acc, incoming = cupy.zeros(count, dtype=dtype), cupy.ones(count, dtype=dtype)
    backend.order_after(cupy.cuda.get_current_stream())  # written on the default stream: the stream contract
    reduce_op = ReduceOp(op)

    def launch() -> None:
        backend.combine(reduce_op, incoming, acc, acc)

    ms = _time_ms(cupy, backend.stream, launch, iterations, warmup)
    return 3 * count * np.dtype(dtype).itemsize / (ms * 1e-3) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="SUM", help="comma-separated ops, or 'all' (default SUM)")
    parser.add_argument("--dtypes", default="float32,float64", help="comma-separated NumPy dtypes, or 'all'")
    parser.add_argument("--sizes", default="1M,16M,256M,1G", help="bytes per operand, e.g. 64K,1M,1G")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 unless every fold at the largest size reaches {GOAL_PERCENT:.0f} %% of copy",
    )
    args = parser.parse_args(argv)
    try:
        cupy = import_cupy()
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        backend = CupyBackend()
    except ImportError as error:
        print(f"gpu_kernels: cannot run: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        print(f"gpu_kernels: cannot run: no usable CUDA GPU ({error})", file=sys.stderr)
        return 2

    ops = list(KERNEL_DTYPES_BY_OP) if args.ops == "all" else args.ops.upper().split(",")
    sizes = [parse_size(size) for size in args.sizes.split(",")]
    name = cupy.cuda.runtime.getDeviceProperties(backend.device.id)["name"]
    print(f"# device: {name.decode() if isinstance(name, bytes) else name}")
    print(f"{'op':<5} {'dtype':<10} {'bytes':>12} {'copy GB/s':>10} {'fold GB/s':>10} {'% of copy':>9}")
    shortfalls = []
    copy_gbs = {size: measure_copy(backend, size, args.iters, args.warmup) for size in sizes}
    for op in ops:
        dtypes = KERNEL_DTYPES_BY_OP[op] if args.dtypes == "all" else args.dtypes.split(",")
        for dtype in dtypes:
            if dtype not in KERNEL_DTYPES_BY_OP[op]:
                continue
            try:
                np.dtype(dtype)
            except TypeError:  # bfloat16 needs ml_dtypes, which CuPy does not hand over anyway
                continue
            for size in sizes:
                fold = measure_fold(backend, op, dtype, size, args.iters, args.warmup)
                percent = 100.0 * fold / copy_gbs[size]
                print(f"{op:<5} {dtype:<10} {size:>12} {copy_gbs[size]:>10.1f} {fold:>10.1f} {percent:>8.1f}%")
                if size == max(sizes) and percent < GOAL_PERCENT:
                    shortfalls.append(f"{op} {dtype}: {percent:.1f} %")
    if shortfalls:
        print(f"# below {GOAL_PERCENT:.0f} % of copy at {max(sizes)} bytes: {', '.join(shortfalls)}")
    return 1 if args.check and shortfalls else 0


if __name__ == "__main__":
    sys.exit(main())
