"""Test harness for multi-rank tests run by pytest-isolate-mpi from one plain `python -m pytest`.

Each `@pytest.mark.mpi(ranks=..., timeout=T)` test is launched as its own `mpiexec -n N python -m
mpi4py -m pytest <test>`. This file makes a failing or hung rank end that launch quickly, with a
report per rank, and no processes left behind:
- a rank whose test fails writes its report, prints it to stderr tagged with its rank, and aborts the
  job (the other ranks would otherwise wait forever in a collective);
- a rank still running T-8 s after the test began dumps every thread's stack (faulthandler) and exits,
  which makes mpiexec kill the rest;
- as a last line, Hydra's MPIEXEC_TIMEOUT kills the whole job at T-3 s, before the plugin's own timeout
  (which would SIGKILL mpiexec alone and could orphan ranks).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import sys
import time

import pytest

FORKED = bool(os.environ.get("PYTEST_ISOLATE_MPI_IS_FORKED"))
DEFAULT_TIMEOUT = 120


def _mpi_timeout(item: pytest.Item) -> float | None:
    mark = item.get_closest_marker("mpi")
    if mark is None:
        return None
    return float(mark.kwargs.get("timeout", DEFAULT_TIMEOUT))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    timeout = _mpi_timeout(item)
    if FORKED or timeout is None:
        yield
        return
    previous = os.environ.get("MPIEXEC_TIMEOUT")
    os.environ["MPIEXEC_TIMEOUT"] = str(max(5, int(timeout) - 3))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MPIEXEC_TIMEOUT", None)
        else:
            os.environ["MPIEXEC_TIMEOUT"] = previous


if FORKED:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item):
        timeout = _mpi_timeout(item)
        if timeout is not None:
            faulthandler.dump_traceback_later(max(2.0, timeout - 8), exit=True, file=sys.stderr)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        if call.when != "call" or not report.failed:
            return
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        if comm.Get_size() == 1:
            return
        rank = comm.Get_rank()
        fspath, lineno, domain = report.location
        report.location = fspath, lineno, f"{domain}[rank={rank}]"
        report.nodeid = f"{report.nodeid}[rank={rank}]"
        sys.stderr.write(f"\n[rank {rank}] FAILED {item.nodeid}\n{report.longreprtext}\n")
        sys.stderr.flush()
        path = os.environ.get("PYTEST_MPI_REPORTS_PATH")
        if path:
            with open(os.path.join(path, str(rank)), "wb") as f:
                pickle.dump([report], f)
        time.sleep(1.0)  # let other ranks that fail at the same point write their reports too
        comm.Abort(1)
