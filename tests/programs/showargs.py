"""Prints what a program sees of its launch (argv, path[0], __name__, spec) and one collective."""

import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
value = comm.allreduce(comm.Get_rank() + 1)
if comm.Get_rank() == 0:
    print("argv", sys.argv)
    print("path0", os.path.relpath(sys.path[0]) if sys.path[0] else repr(sys.path[0]))
    print("name", __name__, "spec", getattr(__spec__, "name", None))
    print("sum", value, "type", type(comm).__module__.split(".")[0])
