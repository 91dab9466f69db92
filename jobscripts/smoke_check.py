"""Correctness smoke test for clusters: adaptcoll Bcast/Reduce/Allreduce against native MPI.

Run as `mpiexec -n N python -m mpi4py jobscripts/smoke_check.py` (python -m mpi4py turns an
exception on one rank into MPI_Abort instead of a hang). Prints one line per case on rank 0 and
exits non-zero on any mismatch. It runs with native_below=0, so adaptcoll's own protocols serve every
size (with the default thresholds most of these sizes would go to native MPI and test nothing of
adaptcoll's), and each case also fails if adaptcoll handed the call to native MPI (stats() delta).
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
    """Run every case on COMM_WORLD with adaptcoll serving every size; return the number of failures."""
    with adaptcoll.configured(native_below=0):
        return _cases()


def served_since(before: dict) -> str | None:
    """None if every call since the `adaptcoll.stats()` snapshot `before` was adaptcoll's own, else why not."""
    after = adaptcoll.stats()
    native = {
        reason: n - before.get(name, {}).get("native_reasons", {}).get(reason, 0)
        for name, row in after.items()
        for reason, n in row["native_reasons"].items()
    }
    went = {reason: n for reason, n in native.items() if n}
    if went:
        return "went native: " + ", ".join(sorted(went))
    calls = sum(row["adaptcoll"] - before.get(name, {}).get("adaptcoll", 0) for name, row in after.items())
    return None if calls else "not counted"


def _cases() -> int:
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
                before = adaptcoll.stats()
                ours.Bcast(got, root=root)
                failures += report(
                    world, f"Bcast {dtype.__name__} n={n} root={root}", np.array_equal(ref, got), served_since(before)
                )
                for name, op in OPS:
                    small = (data % 3 + 1).astype(dtype) if name == "PROD" else data
                    ref = np.empty(n, dtype)
                    got = np.empty(n, dtype)
                    world.Reduce(small, ref, op=op, root=root)
                    before = adaptcoll.stats()
                    ours.Reduce(small, got, op=op, root=root)
                    same = rank != root or close(ref, got, small, size, name)
                    case = f"Reduce {name} {dtype.__name__} n={n} root={root}"
                    failures += report(world, case, same, served_since(before))
            for name, op in OPS:
                small = (data % 3 + 1).astype(dtype) if name == "PROD" else data
                ref = np.empty(n, dtype)
                got = np.empty(n, dtype)
                world.Allreduce(small, ref, op=op)
                before = adaptcoll.stats()
                ours.Allreduce(small, got, op=op)
                same = close(ref, got, small, size, name)
                failures += report(world, f"Allreduce {name} {dtype.__name__} n={n}", same, served_since(before))
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


def report(comm: MPI.Intracomm, case: str, ok: bool, not_served: str | None = None) -> int:
    """Agree on a case's outcome across ranks, print it on rank 0; return 1 if any rank failed (a result
    that differs from native MPI's, or a call adaptcoll did not serve itself)."""
    bad = comm.allreduce(0 if ok else 1)
    why = sorted({w for w in comm.allgather(not_served) if w})
    if comm.Get_rank() == 0:
        detail = (f" ({bad} ranks differ)" if bad else "") + (f" ({'; '.join(why)})" if why else "")
        print(f"{'ok  ' if not bad and not why else 'FAIL'} {case}{detail}", flush=True)
    return 1 if bad or why else 0


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
