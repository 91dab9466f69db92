"""Runs `python -m adaptcoll.check` with a deliberately wrong Allreduce on rank 1 (one element off by
one for served calls of 1000+ elements): the check must see it, report it and exit with status 1."""

import sys

import numpy as np

import adaptcoll
from adaptcoll.check.cli import main

_original = adaptcoll.Intracomm.Allreduce


def _wrong_allreduce(self, sendbuf, recvbuf, op=None, *args):
    from mpi4py import MPI

    result = _original(self, sendbuf, recvbuf, MPI.SUM if op is None else op, *args)
    if self.Get_rank() == 1 and isinstance(recvbuf, np.ndarray) and recvbuf.size >= 1000:
        recvbuf[3] += 1
    return result


adaptcoll.Intracomm.Allreduce = _wrong_allreduce
sys.exit(main(sys.argv[1:]))
