"""Question: does a call adaptcoll hands to native MPI cost what plain mpi4py costs, for every buffer form?
Answer: bench/RESULTS.md, "The native route per buffer form (issue 23, defect 5)".

Per-call cost of a call adaptcoll hands to native MPI, for every buffer form, against plain mpi4py.

For each buffer form (ndarray, `[buf, datatype]`, `[buf, count, datatype]`, `[buf, (count, displ),
datatype]`, bytearray, mmap, host DLPack and host `__cuda_array_interface__` objects, the last two also
with count and datatype) and size, Bcast and Allreduce alternate between plain mpi4py and adaptcoll's
Intracomm in blocks of `--calls` back-to-back calls (A B A B ...); the median per-call time over
`--blocks` blocks, max over ranks, and the difference adaptcoll - mpi4py in microseconds. Every size
here is below the shipped thresholds at this rank count, so every adaptcoll call goes native (checked:
stats() must show no served call). Repeat whole launches to see the launch-to-launch spread.

Usage: mpiexec -n 2 -bind-to core python bench/studies/native_forms.py [--sizes 0,4K,64K] [--calls 1000]
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import adaptcoll
from adaptcoll.runtime.settings import parse_size


class HostDLPack:
    """A DLPack-only host producer (as JAX or PyTorch CPU tensors look to mpi4py)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.array.__dlpack_device__()


class HostCAI:
    """Host memory behind `__cuda_array_interface__` (as mpi4py's own tests make it)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.ctypes.data, False),
            "version": 3,
        }


def forms(nbytes: int) -> dict[str, Callable[[], tuple[Any, Any]]]:
    """form name -> make(): (buffer spec a, buffer spec b) of `nbytes` bytes (uint8 elements)."""

    def arr() -> np.ndarray:
        return np.zeros(nbytes, np.uint8)

    def mapped() -> Any:
        return mmap.mmap(-1, max(nbytes, 1))

    byte = MPI.BYTE
    return {
        "ndarray": lambda: (arr(), arr()),
        "[buf, BYTE]": lambda: ([arr(), byte], [arr(), byte]),
        "[buf, n, BYTE]": lambda: ([arr(), nbytes, byte], [arr(), nbytes, byte]),
        "[buf, (n, 0), BYTE]": lambda: ([arr(), (nbytes, 0), byte], [arr(), (nbytes, 0), byte]),
        "bytearray": lambda: (bytearray(nbytes), bytearray(nbytes)),
        "[mmap, n, BYTE]": lambda: ([mapped(), nbytes, byte], [mapped(), nbytes, byte]),
        "DLPack": lambda: (HostDLPack(arr()), HostDLPack(arr())),
        "[DLPack, n, BYTE]": lambda: ([HostDLPack(arr()), nbytes, byte], [HostDLPack(arr()), nbytes, byte]),
        "CAI": lambda: (HostCAI(arr()), HostCAI(arr())),
        "[CAI, n, BYTE]": lambda: ([HostCAI(arr()), nbytes, byte], [HostCAI(arr()), nbytes, byte]),
    }


def _per_call(comm: MPI.Intracomm, collective: str, a: Any, b: Any, calls: int) -> float:
    if collective == "Bcast":
        fn = comm.Bcast
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(a, 0)
    else:
        fn = comm.Allreduce
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(a, b, MPI.BOR)
    return (time.perf_counter() - t0) / calls


def measure(world: MPI.Intracomm, sizes: list[int], calls: int, blocks: int) -> list[dict[str, Any]]:
    ours = adaptcoll.Intracomm(world)
    rows = []
    for nbytes in sizes:
        for form, make in forms(nbytes).items():
            a, b = make()
            for collective in ("Bcast", "Allreduce"):
                plain, wrapped = [], []
                for k in range(blocks + 1):
                    world.Barrier()
                    tp = _per_call(world, collective, a, b, calls)
                    world.Barrier()
                    ta = _per_call(ours, collective, a, b, calls)
                    if k:
                        plain.append(world.allreduce(tp, op=MPI.MAX))
                        wrapped.append(world.allreduce(ta, op=MPI.MAX))
                p, w = statistics.median(plain) * 1e6, statistics.median(wrapped) * 1e6
                rows.append({"size": nbytes, "form": form, "collective": collective, "mpi4py_us": p, "adaptcoll_us": w})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,4K,64K", help="comma-separated message sizes (default 0,4K,64K)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per block (default 1000)")
    parser.add_argument("--blocks", type=int, default=11, help="timed blocks per implementation (default 11)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per row instead of a table")
    args = parser.parse_args()
    sizes = [parse_size(s, "--sizes") for s in args.sizes.split(",")]
    world = MPI.COMM_WORLD
    rows = measure(world, sizes, args.calls, args.blocks)
    served = {k: v["adaptcoll"] for k, v in adaptcoll.stats().items() if v["adaptcoll"]}
    if world.Get_rank() != 0:
        return
    if served:
        print(f"warning: adaptcoll served some calls, so this is not the native route: {served}", file=sys.stderr)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"# {world.Get_size()} ranks, {args.calls} calls x {args.blocks} blocks, median us per call (max over ranks)")
    print(f"{'size':>6} {'form':<20}{'collective':<11}{'mpi4py':>8}{'adaptcoll':>10}{'+us':>7}")
    for r in rows:
        extra = r["adaptcoll_us"] - r["mpi4py_us"]
        print(
            f"{r['size']:>6} {r['form']:<20}{r['collective']:<11}{r['mpi4py_us']:>8.2f}{r['adaptcoll_us']:>10.2f}"
            f"{extra:>7.2f}"
        )


if __name__ == "__main__":
    main()
