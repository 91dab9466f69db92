"""What tracing (ADAPTCOLL_TRACE) costs per segment event, tracing off and on interleaved in one run.

1. In-process (no MPI): Bcast and Reduce of many 1-element segments on the loopback transport, as in
   bench/engine_cost.py, once with plain contexts and once with the tracing transport and backend;
   (traced time - plain time) / completions is the recording cost per event.
2. Over MPI with 2 ranks (`mpiexec -n 2 python bench/trace_cost.py --mpi`): comm.Bcast of many 8-byte
   segments with tracing off and on (configure(trace=DIR)), A B A B ...; the difference per engine event.

Tracing off costs nothing per event by construction (no wrapper exists then); bench/engine_cost.py
against the previous commit is the check that the off path did not get slower.

Usage: python bench/trace_cost.py            (in-process)
       mpiexec -n 2 -bind-to core python bench/trace_cost.py --mpi
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np


def in_process(repeats: int = 7, nseg: int = 4000, size: int = 4) -> dict[str, tuple[float, float]]:
    """{collective: (plain us per event, traced us per event)} (medians over interleaved repeats)."""
    from adaptcoll.backends.base import ReduceOp
    from adaptcoll.backends.numpy_backend import NumpyBackend
    from adaptcoll.backends.pool import SegmentPool
    from adaptcoll.plans import trees
    from adaptcoll.plans.segments import plan_segments
    from adaptcoll.protocols.bcast import Bcast
    from adaptcoll.protocols.context import OpContext
    from adaptcoll.protocols.reduce import Reduce
    from adaptcoll.runtime.loopback import LoopbackWorld
    from adaptcoll.trace import record

    tree = trees.build("binomial", size, 0)
    directory = tempfile.mkdtemp(prefix="adaptcoll-trace-cost-")
    recs = [record.Recorder(directory, {"world_rank": r, "world_size": size}) for r in range(size)]
    out: dict[str, tuple[float, float]] = {}
    try:
        for name in ("Bcast", "Reduce"):
            times: dict[bool, list[float]] = {False: [], True: []}
            for rep in range(repeats):
                for traced in (False, True):
                    world = LoopbackWorld(size, rep)
                    plan = plan_segments(nseg, 8, 8, 0, 1 << 20)
                    done = [False] * size
                    be = NumpyBackend()
                    for r in range(size):

                        def fin(r: int = r) -> None:
                            done[r] = True  # noqa: B023 - run within this repetition

                        ctx = OpContext(
                            world.transports[r], be, plan, 2, 3, "first", False, SegmentPool(be, np.dtype("f8"))
                        )
                        if traced:
                            op = record.OpTrace(recs[r], recs[r].begin(0, rep, name, plan), range(size), plan)
                            ctx = record.traced_context(ctx, op)
                        if name == "Bcast":
                            Bcast(ctx, tree.parent(r), tree.children(r), np.zeros(nseg), range(nseg), fin).start()
                        else:
                            target = np.zeros(nseg) if r == 0 else None
                            Reduce(
                                ctx,
                                tree.parent(r),
                                tree.children(r),
                                np.ones(nseg),
                                target,
                                ReduceOp("SUM"),
                                range(nseg),
                                fin,
                            ).start()
                    t0 = time.perf_counter()
                    steps = world.run(lambda: all(done))  # noqa: B023
                    times[traced].append((time.perf_counter() - t0) / steps * 1e6)
                    for rec in recs:
                        rec.events.clear()  # keep the buffer from spilling into the timing
            out[name] = (statistics.median(times[False]), statistics.median(times[True]))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return out


def over_mpi(nseg: int = 2000, repeats: int = 9) -> None:
    from mpi4py import MPI

    import adaptcoll
    from adaptcoll.runtime.engine import engine
    from adaptcoll.trace import record

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    directory = world.bcast(tempfile.mkdtemp(prefix="adaptcoll-trace-cost-") if rank == 0 else None)
    buf = np.zeros(nseg, dtype="f8")
    per_event: dict[bool, list[float]] = {False: [], True: []}
    settings: dict[str, Any] = dict(
        native_below=0,
        bcast_segment_size=8,
        max_segments=0,
        sync_sends="none",
        bcast_send_window=8,
        bcast_recv_window=8,
    )
    eng = engine()
    try:
        with adaptcoll.configured(**settings):
            comm.Bcast(buf, 0)
            with adaptcoll.configured(trace=directory):
                comm.Bcast(buf, 0)  # the clock measurement happens here, outside the timing
            for _ in range(repeats):
                for traced in (False, True):
                    with adaptcoll.configured(trace=directory if traced else ""):
                        e0 = eng.events
                        world.Barrier()
                        t0 = time.perf_counter()
                        comm.Bcast(buf, 0)
                        per_event[traced].append((time.perf_counter() - t0) / max(1, eng.events - e0) * 1e6)
        record.close(directory)
    finally:
        world.Barrier()
        if rank == 0:
            shutil.rmtree(directory, ignore_errors=True)
    off, on = statistics.median(per_event[False]), statistics.median(per_event[True])
    rows = world.gather((off, on))
    if rank == 0:
        print(
            f"MPI, {world.Get_size()} ranks, Bcast of {nseg} segments of 8 B, median of {repeats} interleaved pairs: "
            + "; ".join(
                f"rank {i}: {a:.2f} us per event off, {b:.2f} on (+{b - a:.2f})" for i, (a, b) in enumerate(rows)
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mpi", action="store_true", help="measure over MPI (run under mpiexec -n 2)")
    args = parser.parse_args()
    if args.mpi:
        over_mpi()
    else:
        for name, (plain, traced) in in_process().items():
            print(f"in-process {name}: {plain:.2f} us per event plain, {traced:.2f} traced (+{traced - plain:.2f})")


if __name__ == "__main__":
    main()
