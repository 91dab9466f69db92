"""Correctness smoke test for clusters: adaptcoll Bcast/Reduce/Allreduce against native MPI.

Run as `mpiexec -n N python -m mpi4py jobscripts/smoke_check.py` (python -m mpi4py turns an
exception on one rank into MPI_Abort instead of a hang). Prints one line per case on rank 0 and
exits non-zero on any mismatch.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import adaptcoll

SIZES = (0, 1, 7, 1000, 65536 + 3, 1 << 20)
OPS = (("SUM", MPI.SUM), ("MAX", MPI.MAX), ("MIN", MPI.MIN), ("PROD", MPI.PROD))
DTYPES = (np.float64, np.int32)


def main() -> int:
    """Run every case on COMM_WORLD; return the number of mismatches (the same on every rank)."""
    world = MPI.COMM_WORLD
    ours = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng(1234 + rank)
    failures = 0
    for dtype in DTYPES:
        for n in SIZES:
            for root in sorted({0, size - 1, size // 2}):
                data = (rng.integers(-3, 4, n) if dtype is np.int32 else rng.standard_normal(n)).astype(dtype)
                ref = data.copy() if rank == root else np.empty(n, dtype)
                got = data.copy() if rank == root else np.empty(n, dtype)
                world.Bcast(ref, root=root)
                ours.Bcast(got, root=root)
                failures += report(world, f"Bcast {dtype.__name__} n={n} root={root}", np.array_equal(ref, got))
                for name, op in OPS:
                    small = (data % 3 + 1).astype(dtype) if name == "PROD" else data
                    ref = np.empty(n, dtype)
                    got = np.empty(n, dtype)
                    world.Reduce(small, ref, op=op, root=root)
                    ours.Reduce(small, got, op=op, root=root)
                    same = rank != root or close(ref, got, small, size, name)
                    failures += report(world, f"Reduce {name} {dtype.__name__} n={n} root={root}", same)
            for name, op in OPS:
                small = (data % 3 + 1).astype(dtype) if name == "PROD" else data
                ref = np.empty(n, dtype)
                got = np.empty(n, dtype)
                world.Allreduce(small, ref, op=op)
                ours.Allreduce(small, got, op=op)
                failures += report(
                    world, f"Allreduce {name} {dtype.__name__} n={n}", close(ref, got, small, size, name)
                )
    if rank == 0:
        print(f"smoke check on {size} ranks: {'PASS' if failures == 0 else f'{failures} FAILED'}", flush=True)
    return failures


def close(ref: np.ndarray, got: np.ndarray, data: np.ndarray, size: int, op: str) -> bool:
    """Equal up to reassociation: the tree may combine in another order than native MPI (floats only)."""
    if ref.dtype.kind != "f" or op in ("MAX", "MIN"):
        return bool(np.array_equal(ref, got))
    if op == "PROD":  # factors in [1, 4): no cancellation, relative error ~ size * eps
        return bool(np.allclose(ref, got, rtol=1e-13 * size, atol=0))
    scale = float(np.abs(data).max()) if data.size else 0.0  # sums may cancel: bound by size * max|x| * eps
    return bool(np.allclose(ref, got, rtol=1e-13, atol=1e-14 * size * scale))


def report(comm: MPI.Intracomm, case: str, ok: bool) -> int:
    """Agree on a case's outcome across ranks, print it on rank 0; return 1 if any rank failed."""
    bad = comm.allreduce(0 if ok else 1)
    if comm.Get_rank() == 0:
        print(f"{'ok  ' if bad == 0 else 'FAIL'} {case}" + (f" ({bad} ranks differ)" if bad else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
