"""Engine cost per segment event: the Python work adaptcoll adds per completed segment.

Two measurements:
1. In-process (no MPI, no scheduling noise): a protocol on the loopback transport with 1-element
   segments; time per completion callback = protocol + transport bookkeeping per event.
2. Over MPI with 2 ranks (`mpiexec -n 2 python bench/engine_cost.py --mpi`): a Bcast of many tiny
   segments; (adaptcoll time - native time for the same bytes unsegmented) / events counted by the engine.
   This includes posting Isend/Irecv and Testsome, i.e. everything the engine does per segment.

Usage: python bench/engine_cost.py            (in-process)
       mpiexec -n 2 -bind-to core python bench/engine_cost.py --mpi
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def in_process(repeats: int = 5) -> dict:
    from adaptcoll import trees
    from adaptcoll.backends.base import ReduceOp
    from adaptcoll.backends.numpy_backend import NumpyBackend
    from adaptcoll.plan import plan_segments
    from adaptcoll.pool import SegmentPool
    from adaptcoll.protocols.bcast import Bcast
    from adaptcoll.protocols.reduce import Reduce
    from adaptcoll.sim import LoopbackWorld

    out = {}
    nseg, size = 4000, 4
    tree = trees.build("binomial", size, 0)
    for name in ("Bcast", "Reduce"):
        per_event = []
        for rep in range(repeats):
            world = LoopbackWorld(size, rep)
            plan = plan_segments(nseg, 8, 8, 0, 1 << 20)
            done = [False] * size
            be = NumpyBackend()
            for r in range(size):
                def fin(r=r):
                    done[r] = True
                if name == "Bcast":
                    buf = np.zeros(nseg)
                    Bcast(world.transports[r], tree.parent(r), tree.children(r), buf, plan, range(nseg), 2, 3,
                          "first", fin).start()
                else:
                    target = np.zeros(nseg) if r == 0 else None
                    Reduce(world.transports[r], be, SegmentPool(be, np.dtype("f8")), tree.parent(r),
                           tree.children(r), np.ones(nseg), target, ReduceOp("SUM"), plan, range(nseg), 2, 3,
                           "first", False, fin).start()
            t0 = time.perf_counter()
            steps = world.run(lambda: all(done))
            per_event.append((time.perf_counter() - t0) / steps * 1e6)
        out[name] = statistics.median(per_event)
    return out


def over_mpi(nseg: int = 2000, repeats: int = 7) -> None:
    from mpi4py import MPI

    import adaptcoll
    from adaptcoll.engine import engine

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    buf = np.zeros(nseg, dtype="f8")
    rows = []
    with adaptcoll.configured(native_below=0, bcast_segment_size=8, sync_sends="none", bcast_send_window=8,
                              bcast_recv_window=8):
        for _ in range(repeats):
            world.Barrier()
            t0 = time.perf_counter()
            world.Bcast(buf, 0)
            t_native = time.perf_counter() - t0
            eng = engine()
            e0 = eng.events
            world.Barrier()
            t0 = time.perf_counter()
            comm.Bcast(buf, 0)
            t_ad = time.perf_counter() - t0
            events = eng.events - e0
            rows.append(((t_ad - t_native) / max(1, events) * 1e6, events))
    cost = statistics.median(r[0] for r in rows)
    costs = world.gather(cost)
    if world.Get_rank() == 0:
        print(f"MPI, {world.Get_size()} ranks, {nseg} segments of 8 B: engine cost per segment event "
              f"(median over {repeats}): " + ", ".join(f"rank {i}: {c:.2f} us" for i, c in enumerate(costs)))


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
