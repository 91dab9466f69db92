"""Monte-Carlo estimate of pi: every rank throws darts, the hits are Reduced to rank 0."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

config = comm.bcast({"samples": 200_000, "rounds": 5} if rank == 0 else None, root=0)
rng = np.random.default_rng(12345 + rank)
hits = np.zeros(config["rounds"], dtype=np.int64)
for r in range(config["rounds"]):
    xy = rng.random((config["samples"], 2))
    hits[r] = np.count_nonzero((xy**2).sum(axis=1) <= 1.0)
total = np.zeros_like(hits) if rank == 0 else None
comm.Reduce(hits, total, op=MPI.SUM, root=0)
thrown = comm.reduce(config["samples"] * config["rounds"], op=MPI.SUM, root=0)
best = comm.allreduce(int(hits.max()), op=MPI.MAX)
if rank == 0:
    for r, h in enumerate(total):
        print(f"round {r}: pi ~ {4.0 * h / (config['samples'] * size):.6f}")
    print(f"overall: pi ~ {4.0 * total.sum() / thrown:.6f} from {thrown} darts; best rank round {best}")
