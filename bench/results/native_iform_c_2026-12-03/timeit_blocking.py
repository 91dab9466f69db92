"""Small blocking calls that go native, in one process on COMM_SELF, mpi4py's and adaptcoll's alternated
(min of 7 repeats of 20,000 calls, us per call): python timeit_blocking.py (bench/RESULTS.md)."""

import mmap
import timeit

import numpy as np
from mpi4py import MPI

import adaptcoll


def main() -> None:
    ours, plain = adaptcoll.Intracomm(MPI.COMM_SELF), MPI.COMM_SELF
    a, out = np.zeros(512), np.zeros(512)
    spec = [mmap.mmap(-1, 4096), 4096, MPI.BYTE]
    ours.Bcast(a, 0)  # the first blocking call: the tuning, and the fast-call extension where it builds
    forms = [
        ("mpi4py Bcast", lambda: plain.Bcast(a, 0)),
        ("adaptcoll Bcast", lambda: ours.Bcast(a, 0)),
        ("mpi4py Bcast spec", lambda: plain.Bcast(spec, 0)),
        ("adaptcoll Bcast spec", lambda: ours.Bcast(spec, 0)),
        ("mpi4py Allreduce", lambda: plain.Allreduce(a, out)),
        ("adaptcoll Allreduce", lambda: ours.Allreduce(a, out)),
    ]
    for name, call in forms:
        us = min(timeit.repeat(call, number=20000, repeat=7)) / 20000 * 1e6
        print(f"{name:26s} {us:.3f} us")


if __name__ == "__main__":
    main()
