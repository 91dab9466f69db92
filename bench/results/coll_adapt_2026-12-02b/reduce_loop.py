"""A served (`ours`) or native 16 MiB float64 Reduce at 2 ranks in a loop, a Barrier before each, the root's
median time printed: mpiexec -n 2 python reduce_loop.py ours|native CALLS [REDUCE_SEGMENT_SIZE]
(bench/RESULTS.md, "Against coll/adapt on this day's faster VM"; perf record on rank 0 split the time)."""

import sys
import time

import numpy as np
from mpi4py import MPI

import adaptcoll

impl, calls = sys.argv[1], int(sys.argv[2])
extra = {"reduce_segment_size": int(sys.argv[3])} if len(sys.argv) > 3 else {}
n = 2 * 1024 * 1024
world = MPI.COMM_WORLD
with adaptcoll.configured(native_below=0, **extra):
    comm = adaptcoll.Intracomm(world.Dup())
    send, recv = np.random.rand(n), np.zeros(n)
    c = comm if impl == "ours" else world
    for _ in range(5):
        c.Reduce(send, recv, MPI.SUM, 0)
    times = []
    for _ in range(calls):
        world.Barrier()
        t0 = time.perf_counter()
        c.Reduce(send, recv, MPI.SUM, 0)
        times.append(time.perf_counter() - t0)
if world.rank == 0:
    times.sort()
    print(impl, "median us", times[len(times) // 2] * 1e6)
