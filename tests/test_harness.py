"""The suite's own harness (tests/conftest.py) under pytest-xdist: the ranks' reports of one launch fold
into one report per phase under the test's id, naming the failing ranks, and each test file is sorted
into its lane (MPI-marked tests, in-process tests, tests that start MPI jobs themselves)."""

from __future__ import annotations

from pathlib import Path

from _pytest.reports import TestReport
from conftest import _file_kind, _one_report_per_phase

HERE = Path(__file__).resolve().parent
NODEID = "tests/test_x.py::test_y[3]"


class _Item:
    nodeid = NODEID


def _report(when: str, outcome: str, rank: int, failed_rank: bool = False) -> TestReport:
    report = TestReport(
        nodeid=f"{NODEID}[rank={rank}]",
        location=("tests/test_x.py", 1, "test_y"),
        keywords={},
        outcome=outcome,
        longrepr=f"rank {rank} failed" if outcome == "failed" else None,
        when=when,
    )
    if failed_rank:  # what a failing rank's own hook sets (tests/conftest.py, pytest_runtest_makereport)
        report.adaptcoll_rank = rank
    return report


def test_failing_ranks_fold_into_one_failing_call_that_names_them() -> None:
    reports = [_report("setup", "passed", r) for r in range(3)]
    reports += [_report("call", "passed", 0), _report("call", "failed", 1, True), _report("call", "failed", 2, True)]
    reports += [_report("teardown", "passed", r) for r in range(3)]
    merged = _one_report_per_phase(_Item(), reports)
    assert [(r.when, r.outcome) for r in merged] == [("setup", "passed"), ("call", "failed")]
    assert all(r.nodeid == NODEID for r in merged)
    sections = dict(merged[1].sections)
    assert sections["failing ranks"] == "1, 2"
    assert str(merged[1].longrepr) == "rank 1 failed"
    assert sections[f"another failing rank: {NODEID}[rank=2]"] == "rank 2 failed"


def test_a_passing_launch_folds_into_passing_setup_and_call() -> None:
    reports = [_report(when, "passed", r) for when in ("setup", "call", "teardown") for r in range(2)]
    merged = _one_report_per_phase(_Item(), reports)
    assert [(r.when, r.outcome, r.nodeid) for r in merged] == [("setup", "passed", NODEID), ("call", "passed", NODEID)]
    assert merged[1].sections == []


def test_a_launch_that_died_keeps_the_plugins_own_report() -> None:
    died = TestReport(NODEID, ("tests/test_x.py", 1, "test_y"), {}, "failed", "At least one MPI process", "call")
    merged = _one_report_per_phase(_Item(), [died])
    assert len(merged) == 1 and merged[0].failed and str(merged[0].longrepr).startswith("At least one")


def test_each_file_is_sorted_into_its_lane() -> None:
    assert _file_kind(str(HERE / "test_collectives_mpi.py")) == 0  # MPI-marked: the one MPI lane
    assert _file_kind(str(HERE / "test_trees.py")) == 1  # in process
    assert _file_kind(str(HERE / "test_engines.py")) == 2  # re-runs MPI files in a child pytest
    assert _file_kind(str(HERE / "test_mpi4py_suite.py")) == 2  # mpi4py's suite under mpiexec
    assert _file_kind(str(HERE / "no_such_file.py")) == 1
