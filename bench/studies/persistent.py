"""Question: how much do persistent collectives save per call against calling the collective each time?
Answer: bench/RESULTS.md, "Other experiments" (persistent requests, issue 3).

Per-call cost of persistent collectives (Bcast_init / Allreduce_init, Start+Wait) against calling
Bcast / Allreduce each time, both served by adaptcoll, 1 KiB .. 1 MiB.

    timeout 300 mpiexec -n 2 python bench/studies/persistent.py [--iters 400] [--sizes 1K,4K,...] [--json out.json]

Each size alternates blocks of the two forms (so drifting machine load hits both alike) and reports
the median per-call time of each form and the saving per call.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
from mpi4py import MPI

import adaptcoll
from adaptcoll.runtime.settings import parse_size

SIZES = "1K,4K,16K,64K,256K,1M"


def _time_block(run, iters: int, comm: MPI.Intracomm) -> float:
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        run()
    return (MPI.Wtime() - t0) / iters


def measure(nbytes: int, iters: int, blocks: int, comm: adaptcoll.Intracomm) -> dict[str, float]:
    n = max(1, nbytes // 8)
    buf = np.ones(n)
    send, recv = np.ones(n), np.zeros(n)
    pb = comm.Bcast_init(buf, 0)
    pa = comm.Allreduce_init(send, recv, MPI.SUM)

    def bcast() -> None:
        comm.Bcast(buf, 0)

    def bcast_p() -> None:
        pb.Start()
        pb.Wait()

    def allreduce() -> None:
        comm.Allreduce(send, recv, MPI.SUM)

    def allreduce_p() -> None:
        pa.Start()
        pa.Wait()

    forms = {"Bcast": bcast, "Bcast_init": bcast_p, "Allreduce": allreduce, "Allreduce_init": allreduce_p}
    times: dict[str, list[float]] = {k: [] for k in forms}
    for run in forms.values():  # warm-up
        _time_block(run, max(5, iters // 10), comm)
    for _ in range(blocks):
        for name, run in forms.items():
            times[name].append(_time_block(run, iters // blocks, comm))
    pb.Free()
    pa.Free()
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    # the slowest rank decides: take the maximum over ranks
    return {k: comm.allreduce(v, op=MPI.MAX) for k, v in med.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=400, help="calls per size and form (default 400)")
    parser.add_argument("--blocks", type=int, default=8, help="alternating blocks per size (default 8)")
    parser.add_argument("--sizes", default=SIZES, help=f"message sizes (default {SIZES})")
    parser.add_argument("--json", help="also write the results here (rank 0)")
    args = parser.parse_args()
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD)
    rows = []
    with adaptcoll.configured(native_below=0):
        for size_text in args.sizes.split(","):
            nbytes = parse_size(size_text)
            scale = max(1, nbytes // (64 * 1024))  # fewer calls for large messages
            r = measure(nbytes, max(args.blocks * 4, args.iters // scale), args.blocks, comm)
            r["bytes"] = nbytes
            rows.append(r)
    if comm.Get_rank() == 0:
        print(f"# {comm.Get_size()} ranks; median us per call (max over ranks); saving = plain - persistent")
        head = ("Size", 8), ("Bcast", 9), ("Bcast_init", 11), ("saving", 8), ("Allreduce", 10), ("Allreduce_init", 15)
        print(" ".join(f"{name:>{width}}" for name, width in (*head, ("saving", 8))))
        for r in rows:
            print(
                f"{r['bytes']:>8} {r['Bcast']:>9.2f} {r['Bcast_init']:>11.2f} {r['Bcast'] - r['Bcast_init']:>8.2f} "
                f"{r['Allreduce']:>10.2f} {r['Allreduce_init']:>15.2f} {r['Allreduce'] - r['Allreduce_init']:>8.2f}"
            )
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": comm.Get_size(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
