"""bench/osu.py --device cupy on fake device memory (tests/fake_device.py) under the MPI guard.

The fake CuPy's arrays are ndarrays (real CuPy arrays are not), so this wrapper also tells adaptcoll
that they are device memory, as it sees real CuPy arrays: its buffer parser and its device check are
wrapped for them. Each rank writes the guard's counts to $DEVICE_ROUTES_OUT/osu-rank<r>.json.
Run: mpiexec -n 2 -genv LD_PRELOAD <guard> python -m mpi4py osu_fake_device.py <osu.py arguments>
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

from adaptcoll import buffers  # noqa: E402
from adaptcoll.device import route as device_route  # noqa: E402
from adaptcoll.runtime.native import DEVICE_MEMORY  # noqa: E402

guard = Guard()
guard.watch(fd.ARENA.lo, fd.ARENA.hi)
_parse, _is_device = buffers.parse, device_route.is_device_buffer


def _fake_first(spec):
    return spec[0] if isinstance(spec, (tuple, list)) and spec else spec


buffers.parse = lambda spec, writable: (
    DEVICE_MEMORY if isinstance(_fake_first(spec), fd.FakeDeviceArray) else _parse(spec, writable)
)
device_route.is_device_buffer = lambda obj: isinstance(obj, fd.FakeDeviceArray) or _is_device(obj)

import osu  # noqa: E402

code = osu.main(sys.argv[1:])
rank = MPI.COMM_WORLD.Get_rank()
report = {"rank": rank, "hits": guard.hits, "calls": guard.calls, "checked": guard.checked}
Path(os.environ["DEVICE_ROUTES_OUT"], f"osu-rank{rank}.json").write_text(json.dumps(report))
sys.exit(code)
