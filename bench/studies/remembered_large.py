"""What remembering a large call's decision is worth: a program that alternates a large served call with a
small one (a Bcast of SIZE and one of 8 B; a Reduce of SIZE) between Barriers, timed with the remembered
decisions' byte budget at 16 MiB (the budget until 2026-12-03: the two calls evict each other's entry, so
each decides afresh) and at the current one, alternated in one launch, against the same steps in
native MPI: the three sides' order rotates every round (adaptcoll.measure.interleave.orders: each side
first, and after each other, equally often; a fixed order biased a comparison by 0.03-0.10,
bench/RESULTS.md). Per step: median over rounds of the max over ranks.
bench/RESULTS.md, "Large calls remembered".

    mpiexec -n 2 python bench/studies/remembered_large.py [--size 16M] [--rounds 60]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import adaptcoll
from adaptcoll.decision import cache
from adaptcoll.measure.interleave import orders
from adaptcoll.measure.sizes import parse_size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="16M")
    p.add_argument("--rounds", type=int, default=60)
    args = p.parse_args()
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    n = parse_size(args.size) // 8
    big, small = np.ones(n), np.ones(1)
    send, out = np.ones(n), np.zeros(n)
    adaptcoll.configure(native_below=0)
    budgets = {"budget 16M": 16 << 20, f"budget {cache.MAX_BYTES >> 20}M": cache.MAX_BYTES}

    def steps(comm: MPI.Intracomm) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("Bcast large", lambda: comm.Bcast(big, 0)),
            ("Bcast 8 B", lambda: comm.Bcast(small, 0)),
            ("Reduce large", lambda: comm.Reduce(send, out, MPI.SUM, 0)),
        ]

    sides: dict[str, list[tuple[str, Callable[[], None]]]] = {"native": steps(world)}
    for name in budgets:
        served = adaptcoll.Intracomm(world.Dup())
        served.Bcast(small, 0)  # sets the communicator's tuning up: from here on decisions are remembered
        sides[name] = steps(served)
    times: dict[tuple[str, str], list[float]] = {(s, k): [] for s, st in sides.items() for k, _ in st}
    names = list(sides)
    rows = orders(len(names))
    for r in range(args.rounds + 5):
        for side in (names[i] for i in rows[r % len(rows)]):
            side_steps = sides[side]
            if side in budgets:
                cache.MAX_BYTES = budgets[side]  # (read when an entry is made)
            for name, call in side_steps:
                world.Barrier()
                t = time.perf_counter()
                call()
                dt = world.allreduce(time.perf_counter() - t, MPI.MAX)
                if r >= 5:
                    times[(side, name)].append(dt * 1e6)
    if rank == 0:
        print(
            f"# {MPI.Get_library_version().splitlines()[0].rstrip(chr(0))}; {args.size}; {world.Get_size()} ranks; "
            f"median us (max over ranks); ratio native / side"
        )
        for side in sides:
            cells = []
            for name, _ in sides[side]:
                med = float(np.median(times[(side, name)]))
                ref = float(np.median(times[("native", name)]))
                cells.append(f"{name} {med:.1f} ({ref / med:.3f})")
            print(f"{side:12s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
