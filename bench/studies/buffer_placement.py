"""Does where the user's buffers sit move adaptcoll's served Reduce of 64 MiB? Yes: the same call on NumPy arrays
from malloc and on arrays over anonymous mmaps, alternated in one launch (A B A B, 8 each, median of the
slower rank), with glibc as it is (`plain`: a 64 MiB malloc is an mmap) or pinned (`pin`: mmap threshold
and trim threshold 1 GiB, so the malloc'd arrays come from the brk heap). bench/RESULTS.md, "MPICH's large
temporaries".

    mpiexec -n 2 -bind-to core python bench/studies/buffer_placement.py plain|pin
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np
from mpi4py import MPI

import adaptcoll

N = (64 << 20) // 4


def _mapped() -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, N * 4), np.float32)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
    if mode == "pin":
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD.Dup())
    heap = (np.ones(N, np.float32), np.zeros(N, np.float32))
    mapped = (_mapped(), _mapped())
    mapped[0][:] = 1
    res: dict[str, list[float]] = {"malloc": [], "mmap": []}
    with adaptcoll.configured(native_below=0, reduce_native_below=0):
        for _ in range(8):
            for name, (a, b) in (("malloc", heap), ("mmap", mapped)):
                comm.Barrier()
                t = MPI.Wtime()
                comm.Reduce(a, b, MPI.SUM, 0)
                res[name].append(comm.allreduce(MPI.Wtime() - t, op=MPI.MAX))
    if comm.rank == 0:
        medians = {k: round(sorted(v)[4] * 1e3, 1) for k, v in res.items()}
        print(mode, "Reduce 64 MiB ms:", medians, "malloc'd array at", hex(heap[0].ctypes.data))


if __name__ == "__main__":
    main()
