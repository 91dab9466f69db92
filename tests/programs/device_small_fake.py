"""bench/device_small.py on fake device memory (tests/fake_device.py) under the MPI guard.

The stand-in CuPy gets the few calls the benchmark makes that it lacks (arange, zeros, + on arrays, a
version). Each rank writes the guard's counts to $DEVICE_ROUTES_OUT/small-rank<r>.json.
Run: mpiexec -n 2 -genv LD_PRELOAD <guard> python -m mpi4py device_small_fake.py <device_small.py arguments>
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS.parent / "bench")]

import fake_device as fd  # noqa: E402

cupy, _ = fd.install()
cupy.arange = lambda n, dtype=None: fd.device_array(np.arange(n, dtype=dtype))
cupy.zeros = lambda n, dtype=None: fd.device_array(np.zeros(n, dtype))
cupy.__version__ = "fake"
fd.FakeDeviceArray.__add__ = lambda self, other: fd.device_array(self.view(np.ndarray) + other)

from device_guard import Guard  # noqa: E402
from mpi4py import MPI  # noqa: E402

guard = Guard()
guard.watch(fd.ARENA.lo, fd.ARENA.hi)

import device_small  # noqa: E402

code = device_small.main(sys.argv[1:])
rank = MPI.COMM_WORLD.Get_rank()
report = {"rank": rank, "hits": guard.hits, "calls": guard.calls, "checked": guard.checked}
Path(os.environ["DEVICE_ROUTES_OUT"], f"small-rank{rank}.json").write_text(json.dumps(report))
sys.exit(code)
