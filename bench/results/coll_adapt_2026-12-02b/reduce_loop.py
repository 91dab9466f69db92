import sys, time
import numpy as np
from mpi4py import MPI
import adaptcoll
impl = sys.argv[1]
n = 2 * 1024 * 1024
world = MPI.COMM_WORLD
with adaptcoll.configured(native_below=0, **({"reduce_segment_size": int(sys.argv[3])} if len(sys.argv) > 3 else {})):
    comm = adaptcoll.Intracomm(world.Dup())
    send = np.random.rand(n); recv = np.zeros(n)
    c = comm if impl == "ours" else world
    for _ in range(5): c.Reduce(send, recv, MPI.SUM, 0)
    world.Barrier()
    t = []
    for _ in range(int(sys.argv[2])):
        world.Barrier(); t0 = time.perf_counter(); c.Reduce(send, recv, MPI.SUM, 0); t.append(time.perf_counter() - t0)
if world.rank == 0:
    t.sort(); print(impl, "median us", t[len(t)//2] * 1e6)
