"""Question: does the MPI library write past a receive buffer when the message is longer (MPI_ERR_TRUNCATE)?
Answer: bench/RESULTS.md, "Things measured here that surprised us (and what they turned out to be)"
(issue 20).

Rank 1 sends `sent` bytes, rank 0 posts `posted` bytes inside a zeroed array twice as long and counts
the bytes written beyond the posted receive. MPICH 5.0.2: 0 everywhere; Open MPI 5.0.11 (ob1): the
whole message above the eager size.

    mpiexec -n 2 python bench/studies/truncation_overflow.py
"""

import numpy as np
from mpi4py import MPI

w = MPI.COMM_WORLD
for sent, posted in [(4096, 3904), (65536, 1024), (1 << 20, 1000), (8192, 4096), (300, 100)]:
    if w.rank == 1:
        w.Send(np.full(sent, 7, np.uint8), 0, 5)
    else:
        buf = np.zeros(sent * 2, np.uint8)
        r = w.Irecv([buf[:posted], posted, MPI.BYTE], 1, 5)
        try:
            r.Wait()
        except MPI.Exception:
            pass
        print(sent, posted, "written beyond:", int((buf[posted:] != 0).sum()))
    w.Barrier()
