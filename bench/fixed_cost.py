"""Fixed cost of a served call: an 8-byte Bcast / Reduce / Allreduce, blocking, nonblocking (I-form +
Wait) and persistent (Start + Wait), served by adaptcoll (`native_below=0`), against the same call of
plain mpi4py on the same communicator, interleaved block by block (A B A B ...).

    mpiexec -n 2 -bind-to core python bench/fixed_cost.py [--iters 2000] [--blocks 15] [--json out.json]

Prints, per call form, the median per-call time of each side over the blocks (each block's time is the
max over ranks), the difference adaptcoll - native and its spread (25th-75th percentile of the per-block
differences), and which engine served it. Issue 36's target: blocking and nonblocking <= native + 5 us,
persistent <= native + 2 us.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import adaptcoll

SERVE = {"native_below": 0, "bcast_native_below": 0, "reduce_native_below": 0, "allreduce_native_below": 0}


def _block(run: Callable[[], object], iters: int, comm: MPI.Intracomm) -> float:
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        run()
    mine = (MPI.Wtime() - t0) / iters
    return float(comm.allreduce(mine, op=MPI.MAX))


def _forms(comm: MPI.Intracomm, buf: np.ndarray, out: np.ndarray) -> dict[str, Callable[[], object]]:
    """The call forms of one communicator object (adaptcoll's or plain mpi4py's)."""
    pb = comm.Bcast_init(buf, 0)
    pr = comm.Reduce_init(buf, out, MPI.SUM, 0)
    pa = comm.Allreduce_init(buf, out, MPI.SUM)

    def persistent(req):  # type: ignore[no-untyped-def]
        def run() -> None:
            req.Start()
            req.Wait()

        return run

    return {
        "Bcast": lambda: comm.Bcast(buf, 0),
        "Reduce": lambda: comm.Reduce(buf, out, MPI.SUM, 0),
        "Allreduce": lambda: comm.Allreduce(buf, out, MPI.SUM),
        "Ibcast+Wait": lambda: comm.Ibcast(buf, 0).Wait(),
        "Ireduce+Wait": lambda: comm.Ireduce(buf, out, MPI.SUM, 0).Wait(),
        "Iallreduce+Wait": lambda: comm.Iallreduce(buf, out, MPI.SUM).Wait(),
        "Bcast_init: Start+Wait": persistent(pb),
        "Reduce_init: Start+Wait": persistent(pr),
        "Allreduce_init: Start+Wait": persistent(pa),
    }, (pb, pr, pa)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    plain = world.Dup()
    rows = []
    with adaptcoll.configured(**SERVE):
        ours = adaptcoll.Intracomm(world.Dup())
        buf, out = np.ones(1), np.zeros(1)
        nbuf, nout = np.ones(1), np.zeros(1)
        ours.Bcast(buf, 0)  # sets the communicator up
        adaptcoll.reset_stats()
        mine, keep_a = _forms(ours, buf, out)
        theirs, keep_b = _forms(plain, nbuf, nout)
        inits = adaptcoll.stats()  # how the *_init calls were served (their starts are not counted)
        for name in mine:
            adaptcoll.reset_stats()
            for _ in range(2):  # warm-up
                _block(mine[name], 50, world)
                _block(theirs[name], 50, world)
            a_times, b_times = [], []
            for _ in range(args.blocks):
                b_times.append(_block(theirs[name], args.iters, world))
                a_times.append(_block(mine[name], args.iters, world))
            diffs = sorted((a - b) * 1e6 for a, b in zip(a_times, b_times))
            stats = inits if ":" in name else adaptcoll.stats()
            row_stats = stats.get(name.split(":")[0].split("+")[0], {})
            rows.append(
                {
                    "form": name,
                    "native_us": statistics.median(b_times) * 1e6,
                    "adaptcoll_us": statistics.median(a_times) * 1e6,
                    "diff_us": statistics.median(diffs),
                    "diff_q1_q3": (diffs[len(diffs) // 4], diffs[(3 * len(diffs)) // 4]),
                    "served": row_stats.get("adaptcoll", 0),
                    "native": row_stats.get("native", 0),
                    "engines": row_stats.get("engines", {}),
                }
            )
        for req in (*keep_a, *keep_b):
            req.Free()
    if world.Get_rank() == 0:
        print(f"{world.Get_size()} ranks, {args.blocks} interleaved blocks of {args.iters} calls, 8 bytes")
        print(f"{'form':<28}{'native us':>10}{'adaptcoll us':>14}{'diff us':>9}  {'q1..q3':>12}  engine")
        for r in rows:
            q1, q3 = r["diff_q1_q3"]
            engines = ",".join(r["engines"]) or ("native" if r["native"] else "?")
            print(
                f"{r['form']:<28}{r['native_us']:>10.2f}{r['adaptcoll_us']:>14.2f}{r['diff_us']:>9.2f}"
                f"  {q1:>5.1f}..{q3:<5.1f}  {engines}"
            )
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": world.Get_size(), "iters": args.iters, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
