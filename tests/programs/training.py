"""Data-parallel linear regression: rank 0 broadcasts the parameters, gradients are Allreduced."""

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
comm = world.Dup()
rank, size = comm.Get_rank(), comm.Get_size()

features, per_rank = 64, 256
rng = np.random.default_rng(rank)
true_w = np.linspace(-1.0, 1.0, features)
x = rng.standard_normal((per_rank, features))
y = x @ true_w + 0.01 * rng.standard_normal(per_rank)

w = np.zeros(features)
if rank == 0:
    w[:] = np.random.default_rng(99).standard_normal(features)
comm.Bcast(w, root=0)
hyper = comm.bcast({"lr": 0.1, "epochs": 30} if rank == 0 else None, root=0)

grad = np.empty(features)
for epoch in range(hyper["epochs"]):
    err = x @ w - y
    grad[:] = x.T @ err / per_rank
    comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
    w -= hyper["lr"] * grad / size
    loss = comm.allreduce(float(err @ err) / per_rank, op=MPI.SUM) / size
    if rank == 0 and epoch % 5 == 0:
        print(f"epoch {epoch:3d} loss {loss:.8f}")
    if epoch % 10 == 9:  # every rank must hold the same model
        w0 = w.copy()
        comm.Bcast(w0, root=0)
        assert np.array_equal(w0, w), "replicas diverged"
if rank == 0:
    print(f"final distance to the true weights {np.linalg.norm(w - true_w):.6f}")
comm.Free()
