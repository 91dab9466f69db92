"""Where a served 1 MiB Bcast at 2 ranks loses against one MPI message: the same message sent four ways,
interleaved in one launch (each after a Barrier, per-call time = max over the ranks, median):

  plain      Isend / Irecv + Wait on COMM_WORLD (what coll/adapt and tuned do for 1 MiB at 2 ranks);
  pattern    what adaptcoll's engine posts, written with mpi4py: Issend / Irecv on a duplicate with a
             standing ANY_SOURCE receive, a fresh tag per call, Testsome + sched_yield until done;
  served     adaptcoll's Bcast of the buffer as one segment (binomial, native_below=0);
  and the fixed cost of a served 8-byte Bcast right after an 8-byte message ("warm") and right after a
  1 MiB one ("cold"), split into the time inside the compiled path's one C call (ac_call_run) and the
  Python around it.

    mpiexec -n 2 python bench/studies/served_1m_gap.py [--size 1M] [--iters 400]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import adaptcoll
from adaptcoll.measure.sizes import parse_size
from adaptcoll.runtime import compiled, settings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="1M")
    p.add_argument("--iters", type=int, default=400)
    args = p.parse_args()
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if world.Get_size() != 2:
        raise SystemExit("run with 2 ranks")
    n = parse_size(args.size)
    big = np.ones(n, np.uint8)
    small = np.ones(8, np.uint8)
    served = adaptcoll.Intracomm(world.Dup())
    dup = world.Dup()
    notice = dup.Irecv(np.zeros(16, np.uint8), MPI.ANY_SOURCE, 32000)
    settings.configure(native_below=0, bcast_segment_size=n, max_segments=0)
    lib = compiled.library()
    inside: list[int] = []
    if lib is not None:  # time the one C call of the blocking compiled path (made before the first call binds it)
        comp = compiled.engine_for(lib)
        run = comp.run_call

        def timed(a: object, b: object) -> int:
            t = time.perf_counter_ns()
            state = run(a, b)
            inside.append(time.perf_counter_ns() - t)
            return state

        comp.run_call = timed
    tag = [0]

    def plain(buf: np.ndarray = big) -> None:
        req = world.Isend(buf, 1, 8) if rank == 0 else world.Irecv(buf, 0, 8)
        req.Wait()

    def pattern() -> None:
        tag[0] = tag[0] % 30000 + 1
        req = dup.Issend(big, 1, tag[0]) if rank == 0 else dup.Irecv(big, 0, tag[0])
        reqs = [req, notice]
        while True:
            done = MPI.Request.Testsome(reqs)
            if done and 0 in done:
                return
            if not done:
                os.sched_yield()

    def bcast() -> None:
        served.Bcast(big, 0)

    calls: list[tuple[str, Callable[[], None]]] = [("plain", plain), ("pattern", pattern), ("served", bcast)]
    times: dict[str, list[float]] = {k: [] for k, _ in calls}
    fixed: dict[str, list[tuple[float, float]]] = {"warm": [], "cold": []}
    for _ in range(args.iters):
        for name, call in calls:
            world.Barrier()
            t = time.perf_counter()
            call()
            times[name].append(world.allreduce(time.perf_counter() - t, MPI.MAX))
        for state, before in (("warm", small), ("cold", big)):
            plain(before)
            world.Barrier()
            mark = len(inside)
            t = time.perf_counter_ns()
            served.Bcast(small, 0)
            total = time.perf_counter_ns() - t
            fixed[state].append((total / 1e3, inside[mark] / 1e3 if len(inside) > mark else float("nan")))
    skip = args.iters // 10
    med = {k: float(np.median(v[skip:])) * 1e6 for k, v in times.items()}
    split = {k: np.median(np.array(v[skip:]), axis=0) for k, v in fixed.items()}
    report = world.gather((med, split))
    if rank == 0:
        print(f"# {MPI.Get_library_version().splitlines()[0]}; {n} bytes; median us (max over ranks)")
        m = report[0][0]
        print(
            f"plain {m['plain']:.1f} | pattern {m['pattern']:.1f} (+{m['pattern'] - m['plain']:.1f}) | served "
            f"{m['served']:.1f} (+{m['served'] - m['plain']:.1f})"
        )
        for r, (_, sp) in enumerate(report):
            print(
                f"rank {r}: served 8 B, warm: {sp['warm'][0]:.1f} us ({sp['warm'][1]:.1f} in C); cold (after "
                f"{args.size}): {sp['cold'][0]:.1f} us ({sp['cold'][1]:.1f} in C)"
            )
    notice.Cancel()
    notice.Wait()


if __name__ == "__main__":
    main()
