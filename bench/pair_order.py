"""Two messages in flight between one pair of ranks: do they arrive one after the other, or together?

The simulator's link models differ exactly here (docs/simulate.md, `links`): under "fair" two messages
that one rank has in flight to the same peer share the bandwidth and both arrive at the end; under "pair"
they go one after the other, the first arriving after half the time. This measures what the MPI library
underneath does between two ranks: rank 0 posts two sends of `--size` bytes back to back, rank 1 has
both receives posted and polls them with `Test`, noting when each completes (after the barrier that
starts a round). Printed per size, medians over `--rounds` rounds: one message alone, then the first and
the second of the two, each as a fraction of the second's time ("pair" predicts about 0.5 for the first,
"fair" about 1.0).

Usage: mpiexec -n 2 -bind-to core python bench/pair_order.py [--sizes 256K,768K,4M] [--rounds 41] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from adaptcoll.runtime.settings import parse_size

__all__ = ["measure", "main"]


def _round(comm: MPI.Intracomm, bufs: list[np.ndarray]) -> list[float]:
    """One round: rank 0 sends every buffer of `bufs` to rank 1 back to back; rank 1 returns the seconds
    from the barrier to each receive's completion (rank 0 returns [])."""
    rank = comm.Get_rank()
    if rank == 1:
        reqs = [comm.Irecv(b, 0, k) for k, b in enumerate(bufs)]
        comm.Barrier()
        t0 = time.perf_counter()
        done: list[float] = [0.0] * len(reqs)
        left = set(range(len(reqs)))
        while left:
            for k in sorted(left):
                if reqs[k].Test():
                    done[k] = time.perf_counter() - t0
                    left.discard(k)
        for k, b in enumerate(bufs):  # what arrived is what was sent (message k holds k + 1)
            if b[0] != k + 1 or b[-1] != k + 1:
                raise RuntimeError(f"pair_order: message {k} arrived with {b[0]}..{b[-1]}, sent {k + 1}")
            b[:] = 0
        return done
    if rank == 0:
        for k, b in enumerate(bufs):
            b[:] = k + 1
    comm.Barrier()
    if rank == 0:
        MPI.Request.Waitall([comm.Isend(b, 1, k) for k, b in enumerate(bufs)])
    return []


def measure(comm: MPI.Intracomm, sizes: list[int], rounds: int) -> list[dict[str, float]]:
    """Per size: {"size", "alone", "first", "second"} in seconds, medians over `rounds` (rank 1's
    figures, on every rank)."""
    out = []
    for size in sizes:
        one = [np.zeros(size, np.uint8)]
        two = [np.zeros(size, np.uint8), np.zeros(size, np.uint8)]
        alone, first, second = [], [], []
        for k in range(rounds + 1):  # round 0 warms up both forms
            a = _round(comm, one)
            b = _round(comm, two)
            if k and comm.Get_rank() == 1:
                alone.append(a[0])
                first.append(b[0])
                second.append(b[1])
        got = [statistics.median(x) for x in (alone, first, second)] if comm.Get_rank() == 1 else None
        got = comm.bcast(got, 1)
        out.append({"size": size, "alone": got[0], "first": got[1], "second": got[2]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256K,768K,4M")
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--json", help="write the rows")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        if comm.Get_rank() == 0:
            print("pair_order.py: run it on exactly 2 ranks (mpiexec -n 2)", file=sys.stderr)
        return 2
    rows = measure(comm, [parse_size(t) for t in args.sizes.split(",")], args.rounds)
    if comm.Get_rank() == 0:
        print(f"# {MPI.Get_library_version().splitlines()[0].strip()}")
        print("| size | one alone (us) | first of two (us) | second of two (us) | first / second |")
        print("|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['size']:,} | {r['alone'] * 1e6:,.1f} | {r['first'] * 1e6:,.1f} | {r['second'] * 1e6:,.1f} "
                f"| {r['first'] / r['second']:.2f} |"
            )
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"argv": sys.argv[1:], "library": MPI.Get_library_version(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
