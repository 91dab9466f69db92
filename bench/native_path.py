"""Cost of adaptcoll's wrapper on calls it hands to native MPI (small messages, below the thresholds).

Back-to-back calls (no barrier between them, as a program that reduces norms or flags makes them), plain
mpi4py and adaptcoll's Intracomm alternating in blocks of `--calls` calls within one launch; the median
over `--blocks` blocks of the per-call time, and the ratio plain/adaptcoll (> 1: adaptcoll faster).
`--self` also times the wrapper alone on COMM_SELF, where the MPI call itself costs almost nothing, so the
difference is adaptcoll's own per-call cost.

`--nonblocking` times the I-forms + Wait instead, on a new communicator that sees no blocking call (whose
small calls used to take the full decision each, before the first blocking call set its tuning up).

Usage: mpiexec -n 2 -bind-to core python bench/native_path.py [--size 4K] [--calls 2000] [--blocks 31]
[--self] [--nonblocking]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import adaptcoll
from adaptcoll.runtime.settings import parse_size

BLOCKING = ("bcast", "reduce", "allreduce")
NONBLOCKING = ("ibcast", "ireduce", "iallreduce")


def _calls(comm: MPI.Intracomm, name: str, a: np.ndarray, b: np.ndarray, n: int) -> float:
    """Seconds per call of `n` back-to-back calls of collective `name` on `comm`."""
    if name == "bcast":
        fn = comm.Bcast
        t0 = time.perf_counter()
        for _ in range(n):
            fn(a, 0)
    elif name == "reduce":
        fn = comm.Reduce
        t0 = time.perf_counter()
        for _ in range(n):
            fn(a, b, MPI.SUM, 0)
    elif name == "allreduce":
        fn = comm.Allreduce
        t0 = time.perf_counter()
        for _ in range(n):
            fn(a, b, MPI.SUM)
    elif name == "ibcast":
        fn = comm.Ibcast
        t0 = time.perf_counter()
        for _ in range(n):
            fn(a, 0).Wait()
    elif name == "ireduce":
        fn = comm.Ireduce
        t0 = time.perf_counter()
        for _ in range(n):
            fn(a, b, MPI.SUM, 0).Wait()
    else:
        fn = comm.Iallreduce
        t0 = time.perf_counter()
        for _ in range(n):
            fn(a, b, MPI.SUM).Wait()
    return (time.perf_counter() - t0) / n


def measure(
    comm: MPI.Intracomm, size: int, calls: int, blocks: int, names: tuple[str, ...] = BLOCKING
) -> dict[str, tuple[float, float]]:
    """{collective: (plain us per call, adaptcoll us per call)}, medians over blocks, max over ranks."""
    wrapped = adaptcoll.Intracomm(comm)
    a = np.ones(size // 4, np.float32)
    b = np.empty_like(a)
    out = {}
    for name in names:
        plain, ours = [], []
        for k in range(blocks + 1):
            comm.Barrier()
            tp = _calls(comm, name, a, b, calls)
            comm.Barrier()
            ta = _calls(wrapped, name, a, b, calls)
            if k:  # the first block warms up both
                plain.append(comm.allreduce(tp, op=MPI.MAX))
                ours.append(comm.allreduce(ta, op=MPI.MAX))
        out[name] = (statistics.median(plain) * 1e6, statistics.median(ours) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="4K", help="message size in bytes (float32 elements), default 4K")
    parser.add_argument("--calls", type=int, default=2000, help="calls per block (default 2000)")
    parser.add_argument("--blocks", type=int, default=31, help="timed blocks per implementation (default 31)")
    parser.add_argument("--self", action="store_true", help="also time the wrapper alone on COMM_SELF")
    parser.add_argument(
        "--nonblocking",
        action="store_true",
        help="time Ibcast/Ireduce/Iallreduce + Wait instead, on a new communicator that sees no blocking call",
    )
    args = parser.parse_args()
    size = parse_size(args.size, "--size")
    names = NONBLOCKING if args.nonblocking else BLOCKING
    world = MPI.COMM_WORLD
    base = world.Dup() if args.nonblocking else world
    rows = measure(base, size, args.calls, args.blocks, names)
    if args.self:
        solo = measure(MPI.COMM_SELF.Dup() if args.nonblocking else MPI.COMM_SELF, size, args.calls, args.blocks, names)
    if world.Get_rank() == 0:
        print(
            f"# {world.Get_size()} ranks, {size} B, {args.calls} back-to-back calls x {args.blocks} blocks, "
            "median us per call (max over ranks)"
        )
        print(
            f"{'collective':<12}{'mpi4py':>10}{'adaptcoll':>11}{'ratio':>8}"
            + (f"{'COMM_SELF +us':>15}" if args.self else "")
        )
        for name, (plain, ours) in rows.items():
            extra = f"{solo[name][1] - solo[name][0]:>15.3f}" if args.self else ""
            print(f"{name:<12}{plain:>10.2f}{ours:>11.2f}{plain / ours:>8.3f}{extra}")
        print("adaptcoll stats:", {k: v["native_reasons"] for k, v in adaptcoll.stats().items()})


if __name__ == "__main__":
    main()
