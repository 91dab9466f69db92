"""How many pages does native MPI's Reduce / Allreduce / Bcast fault in per call (mpi4py, no adaptcoll), and
what does it cost? MPICH's per-call temporaries, mapped afresh by glibc (bench/RESULTS.md, "MPICH's large
temporaries").

    mpiexec -n 2 -bind-to core python bench/studies/mpich_faults.py [--sizes 16,32,48,64]
    mpiexec -n 2 -bind-to core -genv MALLOC_MMAP_MAX_ 0 -genv MALLOC_TRIM_THRESHOLD_ 17179869184 \
        python bench/studies/mpich_faults.py

Per size (MiB, float64) and collective: the median of 5 timed calls (max over ranks) and each rank's median
count of minor faults (getrusage ru_minflt) during one call.
"""

from __future__ import annotations

import argparse
import resource

import numpy as np
from mpi4py import MPI


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="16,32,48,64", help="MiB")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    for mib in (int(x) for x in args.sizes.split(",")):
        n = mib * 2**20 // 8
        a, b = np.ones(n), np.zeros(n)
        calls = {
            "Reduce": lambda a=a, b=b: comm.Reduce(a, b, MPI.SUM, 0),
            "Allreduce": lambda a=a, b=b: comm.Allreduce(a, b, MPI.SUM),
            "Bcast": lambda a=a: comm.Bcast(a, 0),
        }
        for name, call in calls.items():
            call()
            call()
            times, faults = [], []
            for _ in range(5):
                comm.Barrier()
                f0 = _faults()
                t0 = MPI.Wtime()
                call()
                times.append(MPI.Wtime() - t0)
                faults.append(_faults() - f0)
            t = comm.allreduce(sorted(times)[2], op=MPI.MAX)
            per_rank = comm.gather(sorted(faults)[2])
            if comm.rank == 0:
                print(f"{name:9s} {mib:3d} MiB {t * 1e3:8.2f} ms  minor faults per call, by rank: {per_rank}")


if __name__ == "__main__":
    main()
