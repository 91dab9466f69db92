"""bench/grouped.py --device cupy on fake device memory (tests/fake_device.py) under the MPI guard.

Each rank writes the guard's counts to $DEVICE_ROUTES_OUT/grouped-rank<r>.json.
Run: mpiexec -n 2 -genv LD_PRELOAD <guard> python -m mpi4py grouped_fake_device.py <grouped.py arguments>
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS.parent / "bench")]

import fake_device as fd  # noqa: E402

fd.install()

from device_guard import Guard  # noqa: E402
from mpi4py import MPI  # noqa: E402

guard = Guard()
guard.watch(fd.ARENA.lo, fd.ARENA.hi)

import grouped  # noqa: E402

grouped.main()
rank = MPI.COMM_WORLD.Get_rank()
report = {"rank": rank, "hits": guard.hits, "calls": guard.calls, "checked": guard.checked}
Path(os.environ["DEVICE_ROUTES_OUT"], f"grouped-rank{rank}.json").write_text(json.dumps(report))
