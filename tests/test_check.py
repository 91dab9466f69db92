"""`python -m adaptcoll.check`: the quick check as a user runs it (2 ranks: environment, correctness
against native MPI, speed, JSON), a wrong result making it fail, and its pure parts (cases, inputs,
verdicts, recommendation, report) without MPI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptcoll.check.cases import Case, Route, cases, group_inputs, inputs, routes
from adaptcoll.check.cli import build_parser
from adaptcoll.check.correctness import _compare
from adaptcoll.check.report import format_report, recommendation
from adaptcoll.forms.grouped.layout import plan_units
from adaptcoll.measure import PINNED_NO_MMAP, median_ci, paired_ratios, verdict
from adaptcoll.runtime import settings

HERE = Path(__file__).parent


def _launch(args: list[str], n: int = 2, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env["MPIEXEC_TIMEOUT"] = str(int(timeout) - 5)
    return subprocess.run(
        ["mpiexec", "-n", str(n), sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_quick_check_passes_and_reports_every_part(tmp_path):
    out = tmp_path / "check.json"
    run = _launch(["-m", "adaptcoll.check", "--quick", "--json", str(out)])
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(out.read_text())
    env = doc["environment"]
    assert env["ranks"] == 2 and env["nodes"] == 1 and env["ranks_per_node"] == [2]
    assert env["thread_level"] == "THREAD_MULTIPLE" and env["mpi_library"]
    assert env["cuda_aware"] in (True, False) and env["cuda_aware_why"]
    corr = doc["correctness"]
    assert corr["passed"] and corr["failed"] == 0 and corr["total"] > 200
    served = {c["route_asked"] for c in corr["cases"] if c["route"] == "adaptcoll"}
    assert {"served:binomial", "served:ring", "served:rabenseifner", "served:shm"} <= served
    blocks = {c["collective"] for c in corr["cases"] if c["route"] == "adaptcoll" and c["route_asked"] == "served:ring"}
    assert {"Allgather", "Reduce_scatter_block"} <= blocks
    grouped = [c for c in corr["cases"] if c["collective"] == "Allreduce_multi"]
    assert {c["form"] for c in grouped if c["route"] == "adaptcoll"} == {
        "blocking",
        "in_place",
        "nonblocking",
        "persistent",
    }
    assert {c["dtype"] for c in grouped} == {"float32,int32", "float64,float32"}
    assert {c["form"] for c in corr["cases"]} == {"blocking", "nonblocking", "persistent", "in_place", "pickle"}
    assert any(c["route"].startswith("native") for c in corr["cases"])  # the default route for small calls
    assert len(corr["misuse"]) >= 8 and all(m["passed"] for m in corr["misuse"])
    cells = doc["speed"]
    assert {(c["collective"], c["size"]) for c in cells} == {
        (c, s) for c in ("bcast", "reduce", "allreduce") for s in (64 << 10, 1 << 20, 16 << 20)
    }
    for c in cells:
        assert c["verdict"] in ("faster", "same", "slower")
        assert c["ci_low"] <= c["ratio"] <= c["ci_high"] and c["iterations"] >= 10
        assert c["reference_us"] > 0 and c["adaptcoll_us"] > 0
    assert doc["recommendation"]
    text = run.stdout
    for heading in ("Environment", "Correctness against native MPI", "Speed:", "Recommendation:"):
        assert heading in text
    assert doc["elapsed_s"] < 60


def test_a_wrong_result_fails_the_check_on_every_rank():
    run = _launch([str(HERE / "check_broken.py"), "--quick", "--only", "correctness", "--quiet"])
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAIL Allreduce" in run.stdout and "differ from native MPI" in run.stdout
    assert "do not use adaptcoll here" in run.stdout


def test_bad_options_fail_before_mpi_starts():
    bad = subprocess.run(
        [sys.executable, "-m", "adaptcoll.check", "--impl", "algorithm=nosuchtree"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "nosuchtree" in bad.stderr
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--quick", "--full"])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        png = subprocess.run(
            [sys.executable, "-m", "adaptcoll.check", "--png", "x.png"], capture_output=True, text=True, timeout=60
        )
        assert png.returncode == 2 and "matplotlib" in png.stderr


def test_cases_cover_every_collective_form_and_route_the_same_way_on_every_rank():
    quick = list(cases(4, full=False))
    assert quick == list(cases(4, full=False))  # a fixed order: all ranks run the same sequence
    assert {c.collective for c in quick} == {
        "Bcast", "Reduce", "Allreduce", "Allgather", "Reduce_scatter_block", "Allreduce_multi",
    }  # fmt: skip
    assert {c.root for c in quick if c.collective == "Reduce"} == {0, 3}
    full = list(cases(5, full=True))
    assert len(full) > 3 * len(quick)
    assert {c.root for c in full if c.collective == "Bcast"} == {0, 2, 4}
    labels = [r.label for r in routes("Allreduce", full=True)]
    assert labels[0] == "default" and "served:ring" in labels and "served:topo:intra=shm" in labels
    assert routes("Bcast", False)[1].overrides["bcast_native_below"] == 0


def test_grouped_cases_cross_the_packing_threshold_with_two_dtypes_and_distinct_arrays():
    quick = [c for c in cases(2, full=False) if c.collective == "Allreduce_multi"]
    assert len(quick) == 16 and {c.route.label for c in quick} == {"default", "served:binomial"}
    served = next(c for c in quick if c.route.label != "default").route.overrides
    arrays = group_inputs(quick[0], 1)
    assert {a.dtype.name for a in arrays} == {"float32", "int32"}
    nbytes, kinds = [a.nbytes for a in arrays], [a.dtype.str for a in arrays]
    default = settings.current()
    for below, bucket in (
        (default.multi_pack_below, default.multi_bucket_size),
        (settings.parse_size(served["multi_pack_below"]), settings.parse_size(served["multi_bucket_size"])),
    ):  # both routes: packed buckets of both dtypes, and arrays alone above the threshold
        units = plan_units(nbytes, kinds, below, bucket, [True] * len(arrays))
        assert {u.kind for u in units if u.packed} == set(kinds)
        assert any(not u.packed and nbytes[u.arrays[0]] >= below for u in units)
    small = plan_units(nbytes, kinds, 8 << 10, 4 << 10, [True] * len(arrays))
    assert sum(1 for u in small if u.packed or nbytes[u.arrays[0]] < 8 << 10) > 2  # several buckets
    firsts = [tuple(a[:1].tolist()) for a in arrays]
    assert len(set(zip(firsts, (a.size for a in arrays)))) == len(arrays)
    full = [c for c in cases(3, full=True) if c.collective == "Allreduce_multi"]
    assert len({c.route.label for c in full}) == 5 and len({c.dtype for c in full}) == 5
    assert _compare([np.ones(2), np.ones(3)], [np.ones(2), np.zeros(3)]).startswith("array 1: 3 of 3 elements")
    assert _compare([np.ones(2)], [np.ones(2)]) is None and "expected 2 arrays" in _compare([1], [1, 2])


@pytest.mark.parametrize("dtype, op", [("float32", "SUM"), ("float64", "PROD"), ("int16", "BAND"), ("uint8", "BOR")])
def test_inputs_make_exact_results_that_differ_between_ranks(dtype, op):
    case = Case("Allreduce", "blocking", Route("default"), dtype, op, 1000, 0)
    per_rank = [inputs(case, r) for r in range(16)]
    assert not np.array_equal(per_rank[0], per_rank[1])
    if op == "SUM":
        exact = np.sum([p.astype(np.float64) for p in per_rank], axis=0)
        assert np.array_equal(np.sum(per_rank, axis=0, dtype=dtype), exact.astype(dtype))
    if op == "PROD":
        assert np.prod(per_rank, axis=0).max() <= 2**16
    bcast = Case("Bcast", "blocking", Route("default"), "float64", "SUM", 10, 2)
    assert not np.array_equal(inputs(bcast, 2), inputs(bcast, 0))


def test_verdicts_need_the_whole_interval_on_one_side():
    assert verdict([1.5] * 20).word == "faster"
    assert verdict([0.5] * 20).word == "slower"
    assert verdict([0.9, 1.1] * 10).word == "same"
    assert verdict([1.01] * 20).word == "same"  # within the 3% margin
    assert verdict([2.0, 2.0, 0.5]).word == "same"  # three samples: the interval is the whole range
    assert median_ci(list(range(100))) == (40.0, 59.0)
    assert paired_ratios([2.0, 3.0], [1.0, 3.0]) == [2.0, 1.0]
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])


def _doc(verdicts, passed=True, table=None):
    return {
        "mode": "quick",
        "elapsed_s": 3.0,
        "environment": {
            "ranks": 4,
            "nodes": 1,
            "ranks_per_node": [4],
            "cores_per_node": [4],
            "ranks_per_core": 1.0,
            "mpi_library": "MPICH Version: 5.0.2",
            "mpi_version": "5.0",
            "mpi4py": "4.1.2",
            "thread_level": "THREAD_MULTIPLE",
            "adaptcoll": "0.1.0",
            "python": "3.11",
            "numpy": "2.0",
            "cuda_aware": False,
            "cuda_aware_why": "MPIX_Query_cuda_support() returned 0",
            "gpu": {"driver": "no CUDA driver", "cupy": None},
            "gpus_seen": 0,
            "adaptcoll_env": {},
            "tuning": {"table": table, "notes": []},
        },
        "correctness": {
            "passed": passed,
            "failed": 0 if passed else 2,
            "total": 10,
            "passed_cases": 10,
            "cases": [],
            "misuse": [],
        },
        "speed": [
            {
                "collective": "reduce",
                "size": 1 << 20,
                "device": False,
                "impl": "adaptcoll",
                "route": "adaptcoll",
                "reference_us": 100.0,
                "adaptcoll_us": 100.0 / r,
                "ratio": r,
                "ci_low": r,
                "ci_high": r,
                "verdict": v,
            }
            for r, v in verdicts
        ],
    }


def test_the_timing_loop_balances_the_order_and_files_each_time_under_its_implementation():
    """Each implementation is timed in every position and right after each of the others equally often (in
    a fixed order the one listed last read 0.03-0.10 faster than an identical one before it), after its own
    settings and a barrier, and each sample lands in its implementation's row."""
    from adaptcoll.measure import Impl, SettingsSwitch, time_blocking

    log: list[tuple[str, object]] = []

    class Adaptcoll:  # SettingsSwitch's view of the package: settings.use()
        class runtime:
            class settings:
                @staticmethod
                def use(chosen: object) -> None:
                    log.append(("use", chosen))

    impls = [Impl("native", "native", None)] + [Impl(f"a{k}", "adaptcoll", None, f"s{k}") for k in (1, 2)]
    clock = [0.0]

    def call(k: int):
        def run() -> None:
            log.append(("call", k))
            clock[0] += k + 1  # impl k takes k + 1 "seconds"

        return run

    barriers = []
    import adaptcoll.measure.interleave as interleave

    real = interleave.time.perf_counter
    interleave.time.perf_counter = lambda: clock[0]
    try:
        times = time_blocking(
            [call(k) for k in range(3)], impls, SettingsSwitch(Adaptcoll), lambda: barriers.append(1), 6, lambda _: None
        )
    finally:
        interleave.time.perf_counter = real
    assert times.shape == (3, 6) and (times == np.array([[1.0], [2.0], [3.0]])).all()
    calls = [k for what, k in log if what == "call"]
    assert len(barriers) == 18 and len(calls) == 18
    positions = {k: sorted(calls[it * 3 : it * 3 + 3].index(k) for it in range(6)) for k in range(3)}
    assert all(p == [0, 0, 1, 1, 2, 2] for p in positions.values()), positions
    after = [(calls[i], calls[i + 1]) for i in range(17) if i % 3 != 2]
    assert sorted(after) == sorted([(a, b) for a in range(3) for b in range(3) if a != b] * 2), after
    for i, (what, k) in enumerate(log):  # every adaptcoll call runs under its own settings
        if what == "call" and k:
            assert [x for w, x in log[:i] if w == "use"][-1] == f"s{k}"


def test_recommendation_follows_correctness_then_speed():
    assert "do not use" in recommendation(_doc([(2.0, "faster")], passed=False))
    assert "python -m adaptcoll.tune" in recommendation(_doc([(0.5, "slower"), (2.0, "faster")]))
    assert "re-tune" in recommendation(_doc([(0.5, "slower")], table="/t.json"))
    assert "drop adaptcoll in" in recommendation(_doc([(2.0, "faster"), (1.0, "same")]))
    assert "as fast as native" in recommendation(_doc([(1.0, "same")]))
    native_route = _doc([(0.9, "slower"), (2.0, "faster")])
    native_route["speed"][0]["route"] = "native: below native_below"
    assert "drop adaptcoll in" in recommendation(native_route)  # the wrapper's cost is reported, not tuned
    assert "hands to native MPI cost up to" in recommendation(native_route)
    doc = _doc([(2.0, "faster")])
    doc["recommendation"] = recommendation(doc)
    text = format_report(doc)
    assert "reduce" in text and "2.00" in text and "faster" in text and "Recommendation: drop" in text
    assert "page-fault" not in text  # 1 MiB: no note


def test_the_report_notes_mpichs_refaulted_temporaries():
    """A Reduce / Allreduce row of 32 MiB or more on MPICH (an Allreduce row on Open MPI) gets a note: native
    pays page faults for its temporaries at every call; none when the environment turned glibc's mmap off."""
    doc = _doc([(3.5, "faster")])
    doc["speed"][0]["size"] = 64 << 20
    doc["recommendation"] = recommendation(doc)
    assert "their message-sized temporaries are page-faulted in" in format_report(doc)
    assert "MALLOC_MMAP_MAX_=0" in format_report(doc)
    doc["malloc_env"] = {"MALLOC_MMAP_MAX_": "0"}
    assert "page-fault" not in format_report(doc)
    doc["malloc_env"] = {}
    pinned = subprocess.run(  # pin_malloc in a child: it changes glibc for the whole process
        [sys.executable, "-c", "from adaptcoll.measure import pin_malloc; print(pin_malloc())"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert PINNED_NO_MMAP in pinned, pinned  # glibc here: the check's pin turns mmap off as well
    doc["malloc"] = pinned
    assert "page-fault" not in format_report(doc)
    doc["malloc"] = "as-is"
    assert "page-fault" in format_report(doc)
    doc["environment"]["mpi_library"] = "Open MPI v5.0.11"
    assert "page-fault" not in format_report(doc)  # Open MPI's Reduce does not (its Allreduce does)
    doc["speed"][0]["collective"] = "allreduce"
    assert "Open MPI's Allreduce of 32M and more: their" in format_report(doc)
    doc["environment"]["mpi_library"] = "Intel(R) MPI Library 2021"
    assert "page-fault" not in format_report(doc)


def test_grouped_cases_on_device_arrays_pass_and_pack_on_the_device(monkeypatch):
    """`--device cupy` checks Allreduce_multi on device arrays too: here on the stand-in CuPy
    (tests/fake_device.py, MPI not CUDA-aware), one rank, every form and route of the quick check, the
    results against native MPI on host copies, with device packing seen in the notes."""
    import fake_device as fd
    from mpi4py import MPI

    import adaptcoll
    from adaptcoll.check.cases import DEVICE_COLLECTIVES, MULTI
    from adaptcoll.check.correctness import Runner, run_cases
    from adaptcoll.forms.grouped import cache

    cupy, _ = fd.patch_in(monkeypatch, seed=9)
    assert MULTI in DEVICE_COLLECTIVES
    group = [c for c in cases(1, full=False) if c.collective == MULTI]
    assert {c.form for c in group} == {"blocking", "in_place", "nonblocking", "persistent"}
    comm = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    adaptcoll.reset_stats()
    try:
        results = run_cases(Runner(MPI.COMM_SELF, comm, MPI, adaptcoll, cupy), group)
    finally:
        comm.Free()
        cache.clear()
    failed = [(r.case.describe(), r.problem) for r in results if not r.passed]
    assert not failed, failed
    notes = adaptcoll.stats()[MULTI]["notes"]
    assert notes.get("packed device unit", 0) >= len(group), notes
    assert notes.get("packed unit", 0) == 0, notes  # no array went to host packing
