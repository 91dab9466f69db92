"""Engine cost per segment event: the Python work adaptcoll adds per completed segment.

Two measurements:
1. In-process (no MPI, no scheduling noise): a protocol on the loopback transport with 1-element
   segments; time per completion callback = protocol + transport bookkeeping per event.
2. Over MPI with 2 ranks (`mpiexec -n 2 python bench/engine_cost.py --mpi`): per message, a served
   Bcast of 2000 segments of 8 B (windows of 8) on the compiled engine and on the Python engine,
   against the same traffic moved by a plain C loop and by a bare mpi4py loop (Isend/Irecv, Testsome,
   sched_yield when idle), interleaved in one launch.

Usage: python bench/engine_cost.py            (in-process)
       mpiexec -n 2 -bind-to core python bench/engine_cost.py --mpi
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Any

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


def over_mpi(nseg: int = 2000, repeats: int = 9, json_path: str = "") -> None:
    """Per message over MPI, 2 ranks, `nseg` messages of 8 B, 8 in flight, four ways interleaved in one
    launch (A B C D, `repeats` rounds): the plain C loop (Isend/Irecv/Testsome, sched_yield when idle,
    progress.c's ac_pingpong_loop), the same loop in mpi4py, and a served Bcast of `nseg` 8-byte
    segments (windows of 8; a persistent request per engine, Start + Wait) on the compiled engine and
    on the Python engine, each timed whole and divided by the segments."""
    import json
    import os

    from mpi4py import MPI

    import adaptcoll
    from adaptcoll.runtime import compiled

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    buf = np.zeros(nseg, dtype="f8")
    window = 8
    lib = compiled.library()

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

    def c_loop() -> None:
        assert lib is not None
        if lib.ac_pingpong_loop(world.handle, nseg, 8, window) < 0:
            raise RuntimeError("the C loop hit an MPI error")

    samples: dict[str, list[float]] = {}
    with adaptcoll.configured(
        native_below=0,
        bcast_segment_size=8,
        max_segments=0,
        sync_sends="none",
        bcast_send_window=window,
        bcast_recv_window=window,
        bcast_algorithm="binomial",
    ):
        # one persistent served Bcast per engine, decided once: a call switches no setting (a settings
        # change makes the next call redo work, which a per-call switch would charge to the engine)
        served: dict[str, Any] = {}
        for engine_name in ("compiled", "python") if lib is not None else ("python",):
            with adaptcoll.configured(engine=engine_name):
                comm.Bcast(buf, 0)  # the communicator's set-up, under this setting
                served[engine_name] = comm.Bcast_init(buf, 0)

        def run(req: Any) -> None:
            req.Start()
            req.Wait()

        ways: dict[str, Any] = {"c_loop": c_loop, "mpi4py_loop": bare_loop}
        ways.update({name: functools.partial(run, req) for name, req in served.items()})
        if lib is None:
            del ways["c_loop"]
        samples = {k: [] for k in ways}
        for way in ways.values():  # warm up
            way()
        for _ in range(repeats):
            for name, way in ways.items():
                world.Barrier()
                t0 = time.perf_counter()
                way()
                samples[name].append((time.perf_counter() - t0) / nseg * 1e6)
        for req in served.values():
            req.Free()
    med = {k: statistics.median(v) for k, v in samples.items()}
    worst = {k: max(world.allgather(v)) for k, v in med.items()}  # the slower rank's median
    if rank == 0:
        line = ", ".join(f"{k} {v:.3f} us" for k, v in worst.items())
        print(f"MPI, 2 ranks, {nseg} messages of 8 B, 8 in flight, median of {repeats} interleaved rounds: {line}")
        # the lines `python -m adaptcoll.simulate calibrate --engine-cost FILE [--engine compiled]` reads
        print(
            f"python engine: adaptcoll adds {max(0.0, worst['python'] - worst['mpi4py_loop']):.3f} us per segment "
            f"event; the bare mpi4py loop costs {worst['mpi4py_loop']:.3f} us per message"
        )
        if "c_loop" in worst:
            print(
                f"compiled engine: adaptcoll adds {max(0.0, worst['compiled'] - worst['c_loop']):.3f} us per segment "
                f"event; the bare C loop costs {worst['c_loop']:.3f} us per message"
            )
            print(
                f"compiled / plain C loop: {worst['compiled'] / worst['c_loop']:.2f}x; "
                f"python / compiled: {worst['python'] / worst['compiled']:.2f}x"
            )
        if json_path:
            with open(json_path, "w") as f:
                json.dump({"nseg": nseg, "window": window, "us_per_message": worst, "samples_rank0": samples}, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpi", action="store_true", help="measure over MPI (run under mpiexec -n 2)")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--json", default="", metavar="FILE", help="--mpi: write the medians and samples to FILE")
    args = parser.parse_args()
    if args.mpi:
        over_mpi(repeats=args.repeats, json_path=args.json)
    else:
        for name, us in in_process().items():
            print(f"in-process {name}: {us:.2f} us per segment event (protocol + loopback transport)")


if __name__ == "__main__":
    main()
