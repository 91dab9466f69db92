"""Test harness for multi-rank tests run by pytest-isolate-mpi from one plain `python -m pytest`.

Each `@pytest.mark.mpi(ranks=..., timeout=T)` test is launched as its own `mpiexec -n N python -m
mpi4py -m pytest <test>`. This file makes a failing or hung rank end that launch quickly, with a
report per rank, and no processes left behind:
- a rank whose test fails writes its report, prints it to stderr tagged with its rank, and aborts the
  job (the other ranks would otherwise wait forever in a collective);
- a rank still running T-8 s after the test began dumps every thread's stack (faulthandler) to a
  per-rank file and exits, which makes mpiexec kill the rest; the stacks are attached to the report;
- as a last line, Hydra's MPIEXEC_TIMEOUT kills the whole job at T-3 s, before the plugin's own timeout
  (which would SIGKILL mpiexec alone and could orphan ranks).
About 1 in 100 four-rank MPICH launches on the 2-core dev machine hangs by itself; a launch in which
some rank hung but no rank reported a failing test is therefore run once more (a real hang hangs
again and fails; the retry is announced on stderr).
"""

from __future__ import annotations

import faulthandler
import glob
import os
import pickle
import shutil
import sys
import tempfile
import time

import pytest

FORKED = bool(os.environ.get("PYTEST_ISOLATE_MPI_IS_FORKED"))
# Tests see the shipped rule, not a tuning table a developer's tuner run left in ~/.cache/adaptcoll
# (set ADAPTCOLL_TUNING to run them with a table); the tuning tests set their own tables.
os.environ.setdefault("ADAPTCOLL_TUNING", "off")
# What the ranks of each launch add to pytest's options. They start pytest anew: Hypothesis's pytest plugin
# took about 1 s of every rank's start-up (tests/test_shm_mpi.py: 55 s -> 35 s without it), and no MPI test
# uses Hypothesis (tests/test_trees.py, the one that does, runs in a worker, with the plugin); "-o addopts=":
# a rank runs its one test itself (pyproject's addopts ask for two pytest-xdist workers), with or without
# pytest-xdist installed, and "-p no:xdist" spares it loading that plugin (and execnet: about 15 ms of each
# of some 600 rank start-ups a suite run makes, each about 0.9 CPU-s on the 2-core machine).
RANK_ADDOPTS = "-p no:hypothesispytest -p no:xdist -o addopts="
DEFAULT_TIMEOUT = 120
HANG_MARKERS = ("At least one MPI process has exited prematurely", "Timeout occurred")


def _hung(reports: list, stacks: str | None) -> bool:
    """A launch where a rank hung (stacks dumped or the plugin timed out) and no test assertion failed."""
    if any(getattr(r, "adaptcoll_rank_failed", False) for r in reports):
        return False
    timed_out = any(r.failed and str(r.longrepr).startswith(HANG_MARKERS) for r in reports)
    dumped = bool(stacks) and any(os.path.getsize(p) for p in glob.glob(os.path.join(stacks, "rank*.txt")))
    return timed_out and (dumped or any("Timeout occurred" in str(r.longrepr) for r in reports))


def _retry_hung_launches() -> None:
    """Wrap pytest-isolate-mpi 0.4.1's launch (a private method) so a hung launch runs once more, and so
    that on a pytest-xdist worker it reports once per phase."""
    try:
        from pytest_isolate_mpi._plugin import MPIPlugin
    except ImportError:  # pragma: no cover - plugin missing: nothing to wrap
        return
    launch = MPIPlugin._mpi_runtestprotocol

    def launch_with_retry(self, item):
        reports = launch(self, item)
        stacks = os.environ.get("ADAPTCOLL_TEST_STACKS")
        if _hung(reports, stacks):
            sys.stderr.write(
                f"\n[tests/conftest.py] {item.nodeid}: a rank hung without a failing assertion; "
                "running the launch once more\n"
            )
            for path in glob.glob(os.path.join(stacks or "", "rank*.txt")):
                os.remove(path)
            reports = launch(self, item)
        if hasattr(item.config, "workerinput"):  # on a pytest-xdist worker
            reports = _one_report_per_phase(item, reports)
        return reports

    MPIPlugin._mpi_runtestprotocol = launch_with_retry


def _one_report_per_phase(item: pytest.Item, reports: list) -> list:
    """The ranks' reports folded into one per phase under the item's own id (pytest-xdist accepts no
    other id): the first failing rank's report (else a skipped one, else the first), a section naming
    every failing rank, and the other failing ranks' reports as sections (the plugin adds the teardown)."""
    merged = []
    for when in ("setup", "call"):
        mine = [r for r in reports if r.when == when]
        if not mine:
            continue
        failed = [r for r in mine if r.failed]
        skipped = [r for r in mine if r.skipped]
        first = failed[0] if failed else (skipped[0] if skipped else mine[0])
        ranks = [str(r.adaptcoll_rank) for r in failed if hasattr(r, "adaptcoll_rank")]
        if ranks:
            first.sections.insert(0, ("failing ranks", ", ".join(ranks)))
        for other in failed[1:]:
            first.sections.append((f"another failing rank: {other.nodeid}", other.longreprtext))
        first.nodeid = item.nodeid
        merged.append(first)
    return merged


if not FORKED:
    _retry_hung_launches()


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
    stacks = tempfile.mkdtemp(prefix="adaptcoll-stacks-")
    launch_env = {  # for this launch only: the environment is restored after it
        "MPIEXEC_TIMEOUT": str(max(5, int(timeout) - 3)),
        "ADAPTCOLL_TEST_STACKS": stacks,
        "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} {RANK_ADDOPTS}".strip(),
    }
    from unittest import mock  # (here, not at the top: every rank of every launch imports this file, 30 ms each)

    try:
        with mock.patch.dict(os.environ, launch_env):
            yield
    finally:
        shutil.rmtree(stacks, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Attach the stacks of ranks that timed out to the failing report."""
    stacks = os.environ.get("ADAPTCOLL_TEST_STACKS")
    if FORKED or not stacks or not report.failed:
        return
    for path in sorted(glob.glob(os.path.join(stacks, "rank*.txt"))):
        with open(path, errors="replace") as f:
            text = f.read()
        if text.strip():
            report.sections.append((f"stack of {os.path.basename(path)[:-4]} when it timed out", text))


if FORKED:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item):
        timeout = _mpi_timeout(item)
        stacks = os.environ.get("ADAPTCOLL_TEST_STACKS")
        dump = None
        if timeout is not None and stacks:
            from mpi4py import MPI

            dump = open(os.path.join(stacks, f"rank{MPI.COMM_WORLD.Get_rank()}.txt"), "w")  # noqa: SIM115 - closed below
            faulthandler.dump_traceback_later(max(2.0, timeout - 8), exit=True, file=dump)
        try:
            yield
        finally:
            if dump is not None:
                faulthandler.cancel_dump_traceback_later()
                dump.close()

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
        report.adaptcoll_rank_failed = True
        report.adaptcoll_rank = rank
        sys.stderr.write(f"\n[rank {rank}] FAILED {item.nodeid}\n{report.longreprtext}\n")
        sys.stderr.flush()
        path = os.environ.get("PYTEST_MPI_REPORTS_PATH")
        if path:  # written atomically: another rank's abort may kill this one at any moment
            final = os.path.join(path, str(rank))
            with open(final + ".tmp", "wb") as f:
                pickle.dump([report], f)
            os.replace(final + ".tmp", final)
        time.sleep(1.0)  # let other ranks that fail at the same point write their reports too
        comm.Abort(1)


# Two lanes under pytest-xdist (pyproject's addopts: `-n 2`). Every test file with MPI-marked tests runs
# on one worker, one launch at a time, in file order (two launches at once on two cores would
# oversubscribe them and swing every timing); the in-process tests (the simulator's, mostly on one core)
# and the files that start MPI jobs themselves (mpiexec in a subprocess) share out among both workers.
# One plain `python -m pytest` took 14:45 here in one process, 11:35 with every file that starts MPI jobs
# in the one lane, 10:14-13:01 as here (both cores then busy: 20-23 CPU minutes of work).
MPI_LANE = "MPI launches"
_KINDS: dict[str, int] = {}


def _file_kind(path: str) -> int:
    """0: a file with MPI-marked tests; 1: in-process tests only; 2: tests that start MPI jobs themselves."""
    kind = _KINDS.get(path)
    if kind is None:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            text = ""
        if "pytest.mark.mpi(" in text:
            kind = 0
        elif any(word in text for word in ("mpiexec", "run_again(", "mpi4py_suite.run_suite")):
            kind = 2
        else:
            kind = 1
        _KINDS[path] = kind
    return kind


# The two longest tests that start MPI jobs themselves (about 200 s and 150 s of the wall time): handed out
# first among those, so that neither is left running alone at the end.
LONG_FIRST = ("test_engines.py", "test_mpi4py_suite.py")


def _order(item: pytest.Item) -> tuple[int, int]:
    kind = _file_kind(str(item.path))
    return kind, 0 if kind == 2 and item.path.name in LONG_FIRST else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """On an xdist worker: the MPI files first, the in-process tests next, the launching files last, the
    long ones first among them (every worker collects the same order; the scheduler hands it out)."""
    if hasattr(config, "workerinput"):
        items.sort(key=_order)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: the suite also runs without pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The MPI files are one unit of work (one worker, in order); every in-process file a unit of its own,
    every test that starts MPI jobs itself too (mpi4py's suite in four configurations: both workers)."""
    from xdist.scheduler import LoadScopeScheduling

    root = str(config.rootpath)
    config.option.loadscopereorder = False  # keep the collection's order: the MPI lane first

    class MPILane(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            kind = _file_kind(os.path.join(root, path))
            if kind == 0:
                return MPI_LANE
            return nodeid if kind == 2 else path

    return MPILane(config, log)
