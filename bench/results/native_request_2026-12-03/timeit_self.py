"""Small I-form + Wait that goes native, in one process on COMM_SELF, mpi4py's and adaptcoll's alternated
(min of 7 repeats of 20,000 calls, us per call): python timeit_self.py (bench/RESULTS.md)."""

import timeit

import numpy as np
from mpi4py import MPI

import adaptcoll


def main() -> None:
    ours, plain = adaptcoll.Intracomm(MPI.COMM_SELF), MPI.COMM_SELF
    a, out = np.zeros(512), np.zeros(512)
    ours.Bcast(a, 0)  # the first blocking call: the tuning, and the fast-call extension where it builds
    forms = [
        ("mpi4py Ibcast+Wait", lambda: plain.Ibcast(a, 0).Wait()),
        ("adaptcoll Ibcast+Wait", lambda: ours.Ibcast(a, 0).Wait()),
        ("mpi4py Iallreduce+Wait", lambda: plain.Iallreduce(a, out).Wait()),
        ("adaptcoll Iallreduce+Wait", lambda: ours.Iallreduce(a, out).Wait()),
    ]
    for name, call in forms:
        us = min(timeit.repeat(call, number=20000, repeat=7)) / 20000 * 1e6
        print(f"{name:26s} {us:.3f} us")


if __name__ == "__main__":
    main()
