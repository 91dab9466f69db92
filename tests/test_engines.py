"""Every guarantee on both engines.

The rest of the suite runs on the engine the default setting picks: the compiled progress path where it
builds (it does under README's install). Here the MPI guarantees run again on the pure-Python engine
(`ADAPTCOLL_ENGINE=python`), the fallback: the differential against native MPI (blocking, nonblocking,
persistent, every tree kind), errors on every rank (MessageSizeError, notices, no hang), the watchdog's
report, collectives from several threads on different communicators, `python -m adaptcoll.check
--quick` and mpi4py's own suite modules under `python -m adaptcoll`. And a short program shows which
engine served: `stats()` counts the calls per engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pytest_again import run_again

from adaptcoll.runtime import compiled, fastcalls

ROOT = Path(__file__).resolve().parents[1]

GUARANTEES = [
    "tests/test_collectives_mpi.py",  # differential against native: every tree kind, roots, sizes
    "tests/test_nonblocking_mpi.py",  # nonblocking and persistent forms
    "tests/test_failures_mpi.py",  # MessageSizeError and notices on every rank, no hang
    "tests/test_errors_mpi.py",
    "tests/test_reliability_mpi.py",  # threads on different communicators, mixed buffer forms
    "tests/test_watchdog.py",
    "tests/test_check.py::test_quick_check_passes_and_reports_every_part",  # check --quick
    "tests/test_mpi4py_suite.py::test_mpi4py_suite_under_adaptcoll[2-serve-all]",  # mpi4py's suite modules
]
"""About 90 s on the 2-core machine (the whole suite runs on the compiled engine)."""


@pytest.mark.timeout(600)
def test_the_mpi_guarantees_hold_on_the_python_engine() -> None:
    run_again(GUARANTEES, {"ADAPTCOLL_ENGINE": "python"})


THROUGH_CTYPES = [
    "tests/test_nonblocking_mpi.py",
    "tests/test_failures_mpi.py",
    "tests/test_spec_size.py",
    "tests/test_call_cache_mpi.py",
]
"""The compiled engine's starts, waits, runs and failures with its calls into C through ctypes, and the
Python versions of the steps the extension does in C (the native path's test and count, the decision
cache's array check, the concurrent-collective check), about 40 s: what the fast-call extension
replaces where it builds (the rest of the suite runs with it)."""


@pytest.mark.timeout(600)
def test_the_compiled_engine_through_ctypes() -> None:
    if compiled.status()[0] != "compiled":
        pytest.skip(f"compiled progress path not available here: {compiled.status()[1]}")
    run_again(THROUGH_CTYPES, {"ADAPTCOLL_ENGINE": "compiled", "ADAPTCOLL_FASTCALLS": "off"})


PROGRAM = textwrap.dedent(
    """
    import numpy as np
    from mpi4py import MPI
    import adaptcoll
    adaptcoll.configure(native_below=0)
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD)
    a = np.arange(1000.0)
    comm.Bcast(a, 0)
    out = np.empty_like(a)
    comm.Allreduce(a, out, op=MPI.SUM)
    assert (out == a * comm.size).all()
    req = comm.Ireduce(a * (comm.rank + 1), out if comm.rank == 1 else None, op=MPI.MAX, root=1)
    req.Wait()
    assert comm.rank != 1 or (out == a * comm.size).all()
    stats = adaptcoll.stats()
    from adaptcoll.runtime import fastcalls
    mine = [stats[name]["engines"] for name in ("Bcast", "Allreduce", "Ireduce")] + [fastcalls.status()[0]]
    rows = comm.gather((comm.rank, *mine))
    if comm.rank == 0:  # one writer: two ranks' lines can interleave on a shared stdout
        for row in rows:
            print(*row)
    """
)


@pytest.mark.parametrize(
    ("engine", "calls"),
    [("python", "extension"), ("python", "ctypes"), ("compiled", "extension"), ("compiled", "ctypes")],
)
def test_stats_say_which_engine_served(engine: str, calls: str, tmp_path) -> None:
    """...and whether the fast-call extension was loaded (by the first blocking call, on either engine)
    or calls into C and the fast paths' steps went through ctypes and Python."""
    if engine == "compiled" and compiled.status()[0] != "compiled":
        pytest.skip(f"compiled progress path not available here: {compiled.status()[1]}")
    if calls == "extension" and fastcalls.load()[0] is None:
        pytest.skip(f"the fast-call extension is not built here: {fastcalls.status()[1]}")
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = {**os.environ, "ADAPTCOLL_ENGINE": engine, "ADAPTCOLL_FASTCALLS": "off" if calls == "ctypes" else "auto"}
    done = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, str(prog)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    want = f"{{'{engine}': 1}}"
    lines = done.stdout.splitlines()
    assert lines == [f"{r} {want} {want} {want} {calls}" for r in range(2)], done.stdout
