"""Rank 1 fails while the others wait in a collective: the launcher must end the whole job."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
buf = np.zeros(1000)
comm.Allreduce(np.ones(1000), buf, op=MPI.SUM)
if comm.Get_rank() == 1:
    raise RuntimeError("rank 1 gives up")
comm.Bcast(buf, root=1)  # never completes: rank 1 is gone
print("unreachable")
