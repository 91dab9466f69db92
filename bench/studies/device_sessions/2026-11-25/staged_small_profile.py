"""Question: why were small CuPy calls below the device threshold slower than staging by hand?
Answer: bench/RESULTS.md, "GPU and 8/16 ranks re-measured on a GPU + 16-core node (2026-11-25)", "Below
the threshold" (output: bench/results/device_2026-11-25/gpu/prof_rank*.txt).

Small CuPy calls below the device threshold (staged whole) against the hand-staged path, and a profile.

    OUT=dir mpiexec -n 2 -bind-to core python bench/studies/device_sessions/2026-11-25/staged_small_profile.py
    # writes dir/prof_rank{0,1}.txt

Run on the H100 node on 2026-11-25; 4 KiB float32, 300 calls after a barrier each, medians. The decision's
module moved since (adaptcoll.decide, now adaptcoll.decision.decide); nothing else changed.
"""

import cProfile
import io
import os
import pstats
import time

import cupy
import numpy as np
from mpi4py import MPI

import adaptcoll
from adaptcoll.decision import decide

world = MPI.COMM_WORLD
rank = world.Get_rank()
comm = adaptcoll.Intracomm(world.Dup())
out = os.environ["OUT"]
n = 1024
x = cupy.arange(n, dtype="f4")
y = cupy.zeros(n, "f4")


def bcast():
    comm.Bcast(x, 0)


def reduce():
    comm.Reduce(x, y, MPI.SUM, 0)


def hand_bcast():
    h = cupy.asnumpy(x) if rank == 0 else np.empty(n, "f4")
    world.Bcast(h, 0)
    if rank:
        x.set(h)


def hand_reduce():
    o = np.empty(n, "f4") if rank == 0 else None
    world.Reduce(cupy.asnumpy(x), o, MPI.SUM, 0)
    if rank == 0:
        y.set(o)


def decide_only():
    decide.bcast(comm, x, 0)


lines = []
for name, f in [
    ("adaptcoll bcast", bcast),
    ("hand bcast", hand_bcast),
    ("adaptcoll reduce", reduce),
    ("hand reduce", hand_reduce),
    ("decide.bcast only", decide_only),
]:
    for _ in range(50):
        f()
    ts = []
    for _ in range(300):
        world.Barrier()
        t = time.perf_counter()
        f()
        cupy.cuda.runtime.deviceSynchronize()
        ts.append(time.perf_counter() - t)
    lines.append(f"rank {rank} {name}: median {np.median(ts) * 1e6:.1f} us")
for name, f in [("bcast", bcast), ("reduce", reduce)]:
    profile = cProfile.Profile()
    world.Barrier()
    profile.enable()
    for _ in range(300):
        f()
    profile.disable()
    s = io.StringIO()
    pstats.Stats(profile, stream=s).sort_stats("tottime").print_stats(30)
    lines.append(f"=== rank {rank} profile {name}\n" + s.getvalue())
with open(f"{out}/prof_rank{rank}.txt", "w") as f:
    f.write("\n".join(lines))
