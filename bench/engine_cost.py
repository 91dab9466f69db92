"""Engine cost per segment event: the Python work adaptcoll adds per completed segment.

Two measurements:
1. In-process (no MPI, no scheduling noise): a protocol on the loopback transport with 1-element
   segments; time per completion callback = protocol + transport bookkeeping per event.
2. Over MPI with 2 ranks (`mpiexec -n 2 python bench/engine_cost.py --mpi`): a Bcast of many tiny
   segments, against a bare mpi4py loop that moves the same messages with the same window (Isend/Irecv,
   Testsome, sched_yield when idle): (adaptcoll time - bare loop time) / events counted by the engine
   is what adaptcoll's engine and protocol add per segment event; the bare loop's own time per message
   is printed too (MPI's cost, which any implementation pays).

Usage: python bench/engine_cost.py            (in-process)
       mpiexec -n 2 -bind-to core python bench/engine_cost.py --mpi
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def in_process(repeats: int = 5) -> dict:
    from adaptcoll.backends.base import ReduceOp
    from adaptcoll.backends.numpy_backend import NumpyBackend
    from adaptcoll.backends.pool import SegmentPool
    from adaptcoll.plans import trees
    from adaptcoll.plans.segments import plan_segments
    from adaptcoll.protocols.bcast import Bcast
    from adaptcoll.protocols.context import OpContext
    from adaptcoll.protocols.reduce import Reduce
    from adaptcoll.runtime.loopback import LoopbackWorld

    out = {}
    nseg, size = 4000, 4
    tree = trees.build("binomial", size, 0)
    for name in ("Bcast", "Reduce"):
        per_event = []
        for rep in range(repeats):
            world = LoopbackWorld(size, rep)
            plan = plan_segments(nseg, 8, 8, 0, 1 << 20)
            left = [size]  # ranks not finished (a countdown: the check per step costs next to nothing)
            be = NumpyBackend()
            for r in range(size):

                def fin():
                    left[0] -= 1  # noqa: B023 - run within this repetition

                ctx = OpContext(world.transports[r], be, plan, 2, 3, "first", False, SegmentPool(be, np.dtype("f8")))
                if name == "Bcast":
                    buf = np.zeros(nseg)
                    Bcast(ctx, tree.parent(r), tree.children(r), buf, range(nseg), fin).start()
                else:
                    target = np.zeros(nseg) if r == 0 else None
                    Reduce(
                        ctx, tree.parent(r), tree.children(r), np.ones(nseg), target, ReduceOp("SUM"), range(nseg), fin
                    ).start()
            t0 = time.perf_counter()
            steps = world.run(lambda: not left[0])  # noqa: B023
            per_event.append((time.perf_counter() - t0) / steps * 1e6)
        out[name] = statistics.median(per_event)
    return out


def over_mpi(nseg: int = 2000, repeats: int = 7) -> None:
    import os

    from mpi4py import MPI

    import adaptcoll
    from adaptcoll.runtime.engine import engine

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    buf = np.zeros(nseg, dtype="f8")
    window = 8

    def bare_loop() -> None:
        """The same nseg 8-byte messages 0 -> 1, at most `window` in flight, Testsome + sched_yield."""
        reqs: list = []
        posted = done = 0
        while done < nseg:
            while posted < nseg and len(reqs) < window:
                seg = buf[posted : posted + 1]
                reqs.append(world.Isend(seg, 1, posted) if rank == 0 else world.Irecv(seg, 0, posted))
                posted += 1
            idx = MPI.Request.Testsome(reqs)
            if idx:
                done += len(idx)
                reqs = [r for i, r in enumerate(reqs) if i not in set(idx)]
            else:
                os.sched_yield()

    rows = []
    with adaptcoll.configured(
        native_below=0,
        bcast_segment_size=8,
        max_segments=0,
        sync_sends="none",
        bcast_send_window=window,
        bcast_recv_window=window,
    ):
        for _ in range(repeats):
            world.Barrier()
            t0 = time.perf_counter()
            bare_loop()
            t_bare = time.perf_counter() - t0
            eng = engine()
            e0 = eng.events
            world.Barrier()
            t0 = time.perf_counter()
            comm.Bcast(buf, 0)
            t_ad = time.perf_counter() - t0
            events = eng.events - e0
            rows.append(((t_ad - t_bare) / max(1, events) * 1e6, t_bare / nseg * 1e6))
    cost = statistics.median(r[0] for r in rows)
    bare = statistics.median(r[1] for r in rows)
    costs = world.gather((cost, bare))
    if rank == 0:
        print(
            f"MPI, {world.Get_size()} ranks, {nseg} segments of 8 B (median over {repeats}): adaptcoll adds "
            + ", ".join(f"rank {i}: {c:.2f} us" for i, (c, _) in enumerate(costs))
            + " per segment event; the bare mpi4py loop costs "
            + ", ".join(f"rank {i}: {b:.2f} us" for i, (_, b) in enumerate(costs))
            + " per message"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpi", action="store_true", help="measure over MPI (run under mpiexec -n 2)")
    args = parser.parse_args()
    if args.mpi:
        over_mpi()
    else:
        for name, us in in_process().items():
            print(f"in-process {name}: {us:.2f} us per segment event (protocol + loopback transport)")


if __name__ == "__main__":
    main()
