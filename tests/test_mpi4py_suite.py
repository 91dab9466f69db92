"""mpi4py's own test suite under `python -m adaptcoll` (tests/mpi4py_suite.py: the sdist's runtests.py
on the modules of CI_MODULES) at 1, 2 and 3 ranks, with adaptcoll's defaults (1, 2 ranks) and with
adaptcoll serving every size in tiny segments (2, 3 ranks). The failing tests must be exactly the
expected ones (tests/mpi4py_expected_failures.toml: plain mpi4py's own, and adaptcoll's documented deviations).
Skipped, with the reason, where the sdist cannot be fetched."""

from __future__ import annotations

import shutil

import mpi4py_suite
import pytest


@pytest.fixture(scope="module")
def sdist() -> None:
    if shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec on PATH to launch mpi4py's suite with")
    try:
        mpi4py_suite.sdist_dir()
    except mpi4py_suite.SuiteUnavailable as why:
        pytest.skip(f"mpi4py's test suite is not available here: {why}")


# Four of the six (ranks, configuration) pairs: every rank count, each configuration twice. The other two
# (1 rank serving every size, 3 ranks with the defaults) took 24 s of README's test command; run them by
# hand with `python tests/mpi4py_suite.py --ranks 3` / `--ranks 1 --serve-all`.
@pytest.mark.parametrize(
    "ranks, serve_all",
    [(1, False), (2, False), (2, True), (3, True)],
    ids=["1-defaults", "2-defaults", "2-serve-all", "3-serve-all"],
)
@pytest.mark.timeout(900)
def test_mpi4py_suite_under_adaptcoll(sdist: None, ranks: int, serve_all: bool) -> None:
    outcome = mpi4py_suite.run_suite(ranks, mpi4py_suite.CI_MODULES, serve_all=serve_all, timeout=600)
    problems = mpi4py_suite.compare(outcome, mpi4py_suite.CI_MODULES)
    assert not problems, "\n".join(problems)


def test_expected_failures_each_have_a_reason_and_a_known_kind() -> None:
    entries = mpi4py_suite.expected_failures()
    assert entries
    for entry in entries:
        assert entry.test.count(".") == 2 and entry.test.startswith("test_"), entry
        assert entry.kind in ("mpi4py", "deviation") and entry.mpi in ("*", "MPICH", "Open MPI"), entry
        assert len(entry.reason) > 20, entry


def test_compare_reports_crashes_unexpected_and_missing_failures() -> None:
    modules = ("test_objmodel", "test_comm")
    expected = {e.test for e in mpi4py_suite.expected_failures() if e.test.split(".")[0] in modules}
    assert mpi4py_suite.compare(mpi4py_suite.Outcome(failed=set(expected), ranks_finished=2), modules) == []
    extra = mpi4py_suite.Outcome(failed={*expected, "test_comm.TestCommWorld.testFree"}, ranks_finished=2)
    assert "unexpected failures: test_comm.TestCommWorld.testFree" in mpi4py_suite.compare(extra, modules)
    missing = mpi4py_suite.compare(mpi4py_suite.Outcome(failed=set(), ranks_finished=2), modules)
    assert len(missing) == 1 and "expected failures that passed" in missing[0]
    crashed = mpi4py_suite.Outcome(failed=set(expected), crash="exit status 139, 1 of 2 ranks finished")
    assert "crashed" in mpi4py_suite.compare(crashed, modules)[0]
    plain = mpi4py_suite.compare(mpi4py_suite.Outcome(failed=set(), ranks_finished=2), modules, plain=True)
    assert plain == []  # plain mpi4py is not expected to show adaptcoll's deviations
