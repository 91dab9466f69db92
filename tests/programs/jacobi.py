"""1-D heat equation, Jacobi iterations, domain split over ranks; the residual is Allreduced."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

params = np.zeros(3)
if rank == 0:
    params[:] = [int(sys.argv[1]) if len(sys.argv) > 1 else 240, 1e-4, 300]
comm.Bcast(params, root=0)
n_global, tol, max_iter = int(params[0]), params[1], int(params[2])

n = n_global // size + (1 if rank < n_global % size else 0)
u = np.zeros(n + 2)
if rank == 0:
    u[0] = 1.0  # hot left wall
new = u.copy()
left = rank - 1 if rank > 0 else MPI.PROC_NULL
right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
residual = np.zeros(1)
for it in range(1, max_iter + 1):
    comm.Sendrecv(u[n : n + 1], right, 0, u[0:1], left, 0)
    comm.Sendrecv(u[1:2], left, 1, u[n + 1 : n + 2], right, 1)
    if rank == 0:
        u[0] = 1.0
    new[1 : n + 1] = 0.5 * (u[0:n] + u[2 : n + 2])
    local = np.array([np.sum((new[1 : n + 1] - u[1 : n + 1]) ** 2)])
    comm.Allreduce(local, residual, op=MPI.SUM)
    u, new = new, u
    if it % 50 == 0 and rank == 0:
        print(f"iter {it:5d} residual {residual[0] ** 0.5:.6e}")
    if residual[0] ** 0.5 < tol:
        break
total = np.zeros(1)
comm.Reduce(np.array([u[1 : n + 1].sum()]), total, op=MPI.SUM, root=0)
if rank == 0:
    print(f"stopped after {it} iterations, residual {residual[0] ** 0.5:.6e}, heat {total[0]:.6f}")
