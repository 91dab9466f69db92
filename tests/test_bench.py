"""bench/osu.py and bench/sweep.py: flag parsing, statistics, the overlap formula, sweep aggregation on
synthetic launch documents, launch timeouts, and real 2-rank launches (mpiexec under a timeout)."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adaptcoll.trace.merge import load, merge
from adaptcoll.trace.perfetto import to_trace_events, validate

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


def _load(name: str, folder: Path = BENCH):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


osu = _load("osu")
sweep = _load("sweep")


# -- osu.py flags --------------------------------------------------------------------------------


def test_sizes_and_ranges_follow_osu():
    assert osu.parse_size("4096") == 4096
    assert osu.parse_size("4K") == osu.parse_size("4KiB") == osu.parse_size("4kb") == 4096
    assert osu.parse_size("64M") == 64 << 20
    for bad in ("", "K", "4Q", "-4", "1.5M"):
        with pytest.raises(ValueError):
            osu.parse_size(bad)
    assert osu.parse_size_range("1M") == (0, 1 << 20)
    assert osu.parse_size_range("4K:64M") == (4096, 64 << 20)
    assert osu.parse_size_range(":8") == (0, 8)
    with pytest.raises(ValueError):
        osu.parse_size_range("8K:4K")
    assert osu.sizes_between(0, 16) == [1, 2, 4, 8, 16]
    assert osu.sizes_between(0, 16, smallest=4) == [4, 8, 16]  # float reductions start at 4 bytes
    assert osu.sizes_between(3, 40) == [4, 8, 16, 32]  # min rounded up to a power of two
    assert osu.sizes_between(4096, 64 << 20)[-1] == 64 << 20 and len(osu.sizes_between(4096, 64 << 20)) == 15


def test_default_iterations_are_osus():
    assert osu.default_iterations(8192, None, None) == (1000, 100)
    assert osu.default_iterations(8193, None, None) == (100, 10)
    assert osu.default_iterations(1 << 20, 7, 2) == (7, 2)


def test_impl_parsing():
    assert osu.parse_impl("native") == osu.ImplSpec("native", "native")
    plain = osu.parse_impl("adaptcoll")
    assert plain.kind == "adaptcoll" and plain.overrides == {}
    spec = osu.parse_impl("adaptcoll:bcast_algorithm=chain:chains=2;bcast_segment_size=64K")
    assert spec.label == "adaptcoll:bcast_algorithm=chain:chains=2;bcast_segment_size=64K"
    assert spec.overrides == {"bcast_algorithm": "chain:chains=2", "bcast_segment_size": "64K"}
    short = osu.parse_impl("adaptcoll:algorithm=two_tree;segment_size=32K")
    assert short.overrides == {
        f"{c}_{k}": v
        for c in ("bcast", "reduce", "allreduce")
        for k, v in (("algorithm", "two_tree"), ("segment_size", "32K"))
    }
    for bad in ("mpich", "native:x=1", "adaptcoll:nokey", "adaptcoll:=3"):
        with pytest.raises(ValueError):
            osu.parse_impl(bad)


def test_native_may_repeat_for_an_aa_check():
    specs = osu.numbered_repeats([osu.parse_impl(t) for t in ("native", "adaptcoll", "native", "native")])
    assert [s.label for s in specs] == ["native", "adaptcoll", "native#2", "native#3"]
    assert [s.kind for s in specs] == ["native", "adaptcoll", "native", "native"]
    with pytest.raises(ValueError, match="only native may repeat"):
        osu.numbered_repeats([osu.parse_impl("adaptcoll"), osu.parse_impl("adaptcoll")])


def test_collectives_skew_and_rank_lists():
    assert osu.parse_collectives("bcast, IREDUCE,bcast") == ["bcast", "ireduce"]
    with pytest.raises(ValueError):
        osu.parse_collectives("gather")
    assert osu.parse_skew("off") is None
    skew = osu.parse_skew("fixed:1.5ms,ranks=3+1,p=0.5,seed=4,mode=sleep")
    assert skew == osu.SkewSpec("fixed", 1.5e-3, 0.5, (1, 3), 4, "sleep")
    assert osu.parse_skew("uniform:200us").scale_s == pytest.approx(200e-6)
    for bad in ("gauss:1ms", "uniform", "uniform:1ms,color=red", "uniform:3 parsecs"):
        with pytest.raises(ValueError):
            osu.parse_skew(bad)
    assert osu.parse_rank_list("all") is None and osu.parse_rank_list("3+1,2") == (1, 2, 3)


def test_command_line_flags_parse_like_osu():
    args = osu.build_parser().parse_args(
        [
            "-m",
            "4K:1M",
            "-i",
            "10",
            "-x",
            "2",
            "-f",
            "-c",
            "ibcast",
            "--impl",
            "native",
            "--impl",
            "adaptcoll:algorithm=chain",
        ]
    )
    assert (args.message_size, args.iterations, args.warmup, args.full, args.collective) == (
        "4K:1M",
        10,
        2,
        True,
        "ibcast",
    )
    assert args.impl == ["native", "adaptcoll:algorithm=chain"]
    with pytest.raises(SystemExit):  # a typo is caught before MPI starts
        osu.main(["-c", "gather"])


def test_trace_flag_traces_the_chosen_iteration_of_adaptcoll_calls():
    traced_at: list[int] = []

    class FakeAdaptcoll:
        @staticmethod
        @contextlib.contextmanager
        def configured(trace):
            traced_at.append(len(made))
            yield

    made: list[str] = []
    impls = [osu.Impl("native", "native", None), osu.Impl("adaptcoll", "adaptcoll", None)]
    calls = [lambda: made.append("native"), lambda: made.append("adaptcoll")]
    args = osu.build_parser().parse_args(["--trace", "d", "--trace-iteration", "3"])
    wrapped = osu._traced_calls(calls, impls, args, 5, FakeAdaptcoll)
    assert wrapped[0] is calls[0]
    for _ in range(5):
        for call in wrapped:
            call()
    assert traced_at == [7]  # the 4th adaptcoll call (made[7]), nothing else
    last = osu._traced_calls(
        calls, impls, osu.build_parser().parse_args(["--trace", "d", "--trace-iteration", "9"]), 2, FakeAdaptcoll
    )
    traced_at.clear()
    made.clear()
    for _ in range(2):
        last[1]()
    assert traced_at == [1]  # fewer iterations than asked: the last one
    with pytest.raises(SystemExit):
        osu.main(["--trace-iteration", "-1"])


# -- statistics ----------------------------------------------------------------------------------


def test_overlap_formula():
    # overall 150, compute 100 of which 10 in Test, pure comm 100: 100 - (150 - 90) / 100 * 100 = 40
    assert osu.overlap_percent(150.0, 100.0, 10.0, 100.0) == pytest.approx(40.0)
    assert osu.overlap_percent(100.0, 100.0, 0.0, 100.0) == pytest.approx(100.0)  # comm fully hidden
    assert osu.overlap_percent(300.0, 100.0, 0.0, 100.0) == 0.0  # worse than serial: clamped
    assert osu.overlap_percent(10.0, 5.0, 0.0, 0.0) == 0.0


def test_summaries_match_numpy():
    rng = np.random.default_rng(3)
    x = rng.exponential(10.0, 501)
    s = osu.summarize_samples(x)
    assert s["median_us"] == pytest.approx(np.median(x))
    assert s["p95_us"] == pytest.approx(np.percentile(x, 95))
    assert s["p99_us"] == pytest.approx(np.percentile(x, 99))
    assert s["min_us"] == x.min() and s["max_us"] == x.max()


def test_dummy_compute_tests_periodically_and_lasts():
    class FakeRequest:
        calls = 0

        def Test(self):
            FakeRequest.calls += 1
            time.sleep(0.0002)
            return False

    start = time.perf_counter()
    spent_in_test = osu._dummy_compute(0.02, FakeRequest(), 10)
    elapsed = time.perf_counter() - start
    assert FakeRequest.calls == 10
    assert 10 * 0.0002 <= spent_in_test < elapsed
    assert elapsed >= 0.02


def test_osu_tables_have_osu_columns():
    row = {
        "size": 4,
        "osu_avg_us": 1.0,
        "osu_min_us": 0.5,
        "osu_max_us": 2.0,
        "iterations": 10,
        "overall_us": 3.0,
        "compute_us": 2.0,
        "pure_us": 1.5,
        "overlap_pct": 20.0,
    }
    blocking = osu.format_table("bcast", "native", [row], full=True, ranks=2)
    assert "Avg Latency(us)" in blocking and "Min Latency(us)" in blocking and "Iterations" in blocking
    nb = osu.format_table("iallreduce", "adaptcoll", [row], full=False, ranks=2)
    for col in ("Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)"):
        assert col in nb
    assert "Min Latency(us)" not in nb


# -- sweep aggregation on synthetic launch documents -----------------------------------------------


def _doc(ranks: int, rows: list[tuple[str, str, int, float, float]]) -> dict:
    return {
        "ranks": ranks,
        "mpi_library": "synthetic",
        "results": [
            {"collective": c, "impl": i, "size": s, "median_us": m, "p95_us": p, "p99_us": p * 1.5, "osu_avg_us": m}
            for c, i, s, m, p in rows
        ],
    }


def test_aggregate_medians_over_launches_and_ratios():
    launches = [
        ("core", _doc(4, [("bcast", "native", 4096, nm, nm * 2), ("bcast", "adaptcoll", 4096, am, am * 3)]))
        for nm, am in ((10.0, 5.0), (30.0, 20.0), (20.0, 8.0))
    ]
    launches.append(("core", _doc(2, [("bcast", "native", 4096, 7.0, 9.0)])))
    rows = sweep.aggregate(launches)
    by = {(r["ranks"], r["impl"]): r for r in rows}
    nat, ada = by[(4, "native")], by[(4, "adaptcoll")]
    assert (nat["median_us"], ada["median_us"]) == (20.0, 8.0)
    assert nat["launches"] == 3 and (ada["min_median_us"], ada["max_median_us"]) == (5.0, 20.0)
    assert ada["p95_us"] == 24.0 and nat["p95_us"] == 40.0
    assert ada["ratio"] == pytest.approx(20.0 / 8.0) and nat["ratio"] == pytest.approx(1.0)
    assert ada["ratio_p95"] == pytest.approx(40.0 / 24.0)
    assert ada["launch_ratios"] == pytest.approx([2.0, 1.5, 2.5]) and ada["launch_ratio"] == pytest.approx(2.0)
    assert by[(2, "native")]["median_us"] == 7.0
    md = sweep.format_markdown(rows, "t")
    assert "### core: bcast, 4 ranks" in md and "| 4K | 20.0 | 40.0 | 8.0 | 24.0 | 2.50 | 1.67 | 2.00 |" in md
    assert md.index("native median") < md.index("adaptcoll median")


def test_aggregate_keeps_variants_apart_and_handles_missing_native():
    rows = sweep.aggregate(
        [
            ("quiet", _doc(2, [("reduce", "native", 1 << 20, 10.0, 11.0), ("reduce", "adaptcoll", 1 << 20, 5.0, 6.0)])),
            ("noisy", _doc(2, [("reduce", "adaptcoll", 1 << 20, 50.0, 60.0)])),
        ]
    )
    by = {(r["variant"], r["impl"]): r for r in rows}
    assert by[("quiet", "adaptcoll")]["ratio"] == 2.0
    assert by[("noisy", "adaptcoll")]["ratio"] is None  # no native in that variant
    assert "| 1M | 50.0 | 60.0 |" in sweep.format_markdown(rows)
    assert [sweep.format_size(s) for s in (100, 4096, 3 << 20, 1 << 30)] == ["100", "4K", "3M", "1G"]


def test_experiment_files_load(tmp_path):
    for path in sorted((BENCH / "experiments").glob("*")):
        if path.suffix in (".json", ".py"):
            exp = sweep.load_experiment(path)
            assert exp.runs and exp.launches >= 1
            for run in exp.runs:  # every run's arguments are valid osu.py flags
                args = osu.build_parser().parse_args(list(run.args))
                osu.parse_collectives(args.collective)
                [osu.parse_impl(t) for t in args.impl or []]
                osu.parse_skew(args.skew) if args.skew else None
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"name": "x", "runs": [{"name": "a", "args": []}, {"name": "a", "args": []}]}))
    with pytest.raises(ValueError):
        sweep.load_experiment(f)


def test_hung_launch_is_killed_with_its_children(tmp_path):
    naps = [f"{30 + k}.{os.getpid()}" for k in range(3)]  # unique command lines to look for afterwards
    cmd = ["sh", "-c", f"sleep {naps[0]} & sleep {naps[1]} & sleep {naps[2]}"]
    code, hung, secs = sweep.run_launch(cmd, 0.5, tmp_path / "log", grace_s=0.5)
    assert hung and code is None and secs < 10
    for nap in naps:
        assert subprocess.run(["pgrep", "-f", f"sleep {nap}"], capture_output=True).stdout == b""
    code, hung, _ = sweep.run_launch(["sh", "-c", "exit 3"], 5, tmp_path / "log2", grace_s=0.5)
    assert (code, hung) == (3, False)


def test_device_flag_without_cupy_fails_with_a_clear_message(monkeypatch):
    """--device cupy: refused before MPI starts when CuPy (or a GPU) is missing, with the reason; and the
    flag combinations it cannot time are refused too."""
    import builtins

    real_import = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    with pytest.raises(ValueError, match=r"--device cupy needs CuPy.*gpu-cuda12.*gpu-cuda13"):
        osu.import_cupy_for_bench()
    run = subprocess.run(
        [sys.executable, str(BENCH / "osu.py"), "--device", "cupy", "-c", "allreduce", "--sizes", "4K"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ""},
    )
    try:
        import cupy  # noqa: F401

        has_cupy = True
    except ImportError:
        has_cupy = False
    if not has_cupy:
        assert run.returncode == 2 and "--device cupy needs CuPy" in run.stderr, run.stderr
    parser = osu.build_parser()
    for argv, message in (
        (["--impl", "staged"], "add --device cupy"),
        (["--device", "cupy", "-c", "iallreduce"], "blocking collectives only"),
        (["--device", "cupy", "--skew", "fixed:1us"], "without --noise"),
    ):
        with pytest.raises(ValueError, match=message):
            osu.check_device_args(parser.parse_args(argv))
    assert osu.parse_impl("staged") == osu.ImplSpec("staged", "staged")
    with pytest.raises(ValueError, match="staged takes no settings"):
        osu.parse_impl("staged:x=1")


def test_route_of_reads_stats_deltas():
    before = {"Bcast": {"adaptcoll": 2, "native": 1, "native_reasons": {"below native_below": 1}}}
    served = {"Bcast": {"adaptcoll": 3, "native": 1, "native_reasons": {"below native_below": 1}}}
    native = {"Bcast": {"adaptcoll": 2, "native": 2, "native_reasons": {"below native_below": 2}}}
    both = {"Bcast": {"adaptcoll": 3, "native": 2, "native_reasons": {"below native_below": 2}}}
    assert osu.route_of(before, served) == "adaptcoll"
    assert osu.route_of(before, native) == "native: below native_below"
    assert osu.route_of({}, native) == "mixed: adaptcoll and native (below native_below)"
    assert osu.route_of(before, both).startswith("mixed")
    assert osu.route_of(before, before) == "none"


def test_tables_mark_adaptcoll_rows_native_mpi_served():
    row = {"size": 4, "osu_avg_us": 1.0, "osu_min_us": 0.5, "osu_max_us": 2.0, "iterations": 10}
    marked = osu.format_table("bcast", "adaptcoll", [{**row, "route": "native: below native_below"}], False, 2)
    assert marked.splitlines()[-1].endswith("(native: below native_below)")
    for route in ("adaptcoll", "native", None):
        assert "(" not in osu.format_table("bcast", "x", [{**row, "route": route}], False, 2).splitlines()[-1]
    docs = [_doc(2, [("bcast", "native", 4, 10.0, 20.0), ("bcast", "adaptcoll", 4, 9.0, 19.0)])]
    docs[0]["results"][1]["route"] = "native: below native_below"
    rows = sweep.aggregate([("v", docs[0])])
    assert next(r for r in rows if r["impl"] == "adaptcoll")["route"] == "native: below native_below"
    md = sweep.format_markdown(rows)
    assert "9.0 †" in md and "† adaptcoll went to native MPI at 4 (native: below native_below)" in md


def test_plot_reads_osu_json_and_names_the_extra(tmp_path, capsys, monkeypatch):
    plot = _load("plot")
    doc = _doc(2, [("bcast", "native", 4096, 10.0, 20.0), ("bcast", "adaptcoll", 4096, 5.0, 8.0)])
    rows = plot.rows_of(doc, "launch")
    assert {(r["variant"], r["impl"], r["ranks"]) for r in rows} == {
        ("launch", "native", 2),
        ("launch", "adaptcoll", 2),
    }
    assert next(r for r in rows if r["impl"] == "adaptcoll")["ratio"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="results"):
        plot.rows_of({"something": 1}, "x")
    path = tmp_path / "osu.json"
    path.write_text(json.dumps(doc))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:  # the plot itself, where the bench extra is installed
        assert plot.main([str(path), "--out", str(tmp_path / "plots")]) == 0
        assert [p.name for p in (tmp_path / "plots").iterdir()] == ["osu-osu-bcast-n2.png"]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as after README's install (no bench extra)
    assert plot.main([str(path), "--out", str(tmp_path / "plots")]) == 2
    assert 'pip install "adaptcoll[bench]"' in capsys.readouterr().err


# -- real launches -------------------------------------------------------------------------------

MPIEXEC = shutil.which("mpiexec")


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH")
def test_osu_two_ranks_tables_and_json(tmp_path):
    out = tmp_path / "r.json"
    cmd = [
        "timeout",
        "120",
        MPIEXEC,
        "-n",
        "2",
        sys.executable,
        str(BENCH / "osu.py"),
        "-c",
        "bcast,iallreduce",
        "-m",
        "4:64",
        "-i",
        "6",
        "-x",
        "2",
        "-f",
        "--impl",
        "native",
        "--impl",
        "adaptcoll:bcast_algorithm=chain;bcast_segment_size=16;native_below=0",
        "--impl",
        "adaptcoll",
        "--json",
        str(out),
        "--noise",
        "200Hz x 100us",
        "--noise-ranks",
        "1",
        "--skew",
        "fixed:20us,ranks=0,mode=sleep",
        "--trace",
        str(tmp_path / "trace"),
        "--trace-iteration",
        "2",
        "--malloc",
        "pinned",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env["MALLOC_ARENA_MAX"] = "4"
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=130, cwd=REPO, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    text = res.stdout
    assert text.count("# Size") == 6  # one table per (collective, impl)
    # the plain adaptcoll rows are below its thresholds: marked as served by native MPI, the others not
    assert text.count("(native: below native_below)") == 10
    for col in (
        "Avg Latency(us)",
        "Min Latency(us)",
        "Max Latency(us)",
        "Iterations",
        "Overall(us)",
        "Compute(us)",
        "Pure Comm.(us)",
        "Overlap(%)",
    ):
        assert col in text
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and doc["mpi_library"]
    assert doc["command"][1].endswith("osu.py")
    # which glibc state native MPI was timed in (MPICH refaults its large temporaries unless pinned)
    assert doc["malloc"]["mode"].startswith(("pinned (M_MMAP_MAX 0", "pinned (M_TRIM_THRESHOLD", "not pinned"))
    assert doc["malloc"]["env"] == {"MALLOC_ARENA_MAX": "4"}
    rows = doc["results"]
    chain_label = "adaptcoll:bcast_algorithm=chain;bcast_segment_size=16;native_below=0"
    assert {(r["collective"], r["impl"]) for r in rows} == {
        (c, i) for c in ("bcast", "iallreduce") for i in ("native", chain_label, "adaptcoll")
    }
    routes = {r["impl"]: {x["route"] for x in rows if x["impl"] == r["impl"]} for r in rows}
    assert routes == {"native": {"native"}, chain_label: {"adaptcoll"}, "adaptcoll": {"native: below native_below"}}
    assert sorted({r["size"] for r in rows if r["collective"] == "bcast"}) == [4, 8, 16, 32, 64]
    assert sorted({r["size"] for r in rows if r["collective"] == "iallreduce"}) == [4, 8, 16, 32, 64]
    for r in rows:
        assert len(r["samples_us"]) == r["iterations"] == 6
        assert r["median_us"] == pytest.approx(float(np.median(r["samples_us"])))
        assert r["min_us"] <= r["median_us"] <= r["p95_us"] <= r["p99_us"] <= r["max_us"]
        if r["collective"] == "iallreduce":
            assert 0.0 <= r["overlap_pct"] <= 100.0 and len(r["pure_samples_us"]) == 6
    chain = next(i for i in doc["impls"] if i["label"] == chain_label)
    assert chain["settings"]["bcast_algorithm"] == "chain" and chain["settings"]["bcast_segment_size"] == 16
    # per implementation and size: 1 check + 1 route probe + 2 warm-up + 6 timed (+ 6 overlap), 5 sizes;
    # the chain implementation's calls were adaptcoll's, the plain one's went native (below the thresholds)
    for per_rank in doc["adaptcoll_stats"]:
        assert per_rank["Bcast"]["adaptcoll"] == 5 * (1 + 1 + 2 + 6) == per_rank["Bcast"]["native"]
        assert per_rank["Iallreduce"]["adaptcoll"] == 5 * (1 + 1 + 2 + 6 + 6) == per_rank["Iallreduce"]["native"]
    # detours ran on rank 1 only, once per (collective, size), at about the asked frequency
    quiet, noisy = doc["noise"]["detour_stats"]
    assert quiet == [] and len(noisy) == 10
    assert {d["at"] for d in noisy} == {f"{c}:{s}" for c in ("bcast", "iallreduce") for s in (4, 8, 16, 32, 64)}
    assert all(d["cpus"] for d in noisy) and sum(d["detours"] for d in noisy) > 0
    # --trace: one timed iteration per (collective, size) of the adaptcoll implementation, on both ranks
    timeline = merge(load(tmp_path / "trace"))
    assert [o.name for o in timeline.operations] == ["bcast"] * 5 + ["allreduce"] * 5
    assert validate(to_trace_events(timeline)) == [] and timeline.flows > 0


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH")
def test_pair_order_two_ranks_rows_and_refusal(tmp_path):
    """bench/pair_order.py: on 2 ranks a row per size with the three medians (each message checked on
    arrival inside the script); on 3 ranks it refuses with exit 2 and says why."""
    out = tmp_path / "order.json"
    script = str(BENCH / "pair_order.py")
    cmd = ["timeout", "120", MPIEXEC, "-n", "2", sys.executable, script, "--sizes", "4K,96K", "--rounds", "3"]
    res = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=130, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "| first / second |" in res.stdout and "| 98,304 |" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["library"] and [r["size"] for r in doc["rows"]] == [4096, 98304]
    for r in doc["rows"]:
        assert min(r["alone"], r["first"], r["second"]) > 0
    three = ["timeout", "120", MPIEXEC, "-n", "3", sys.executable, script, "--rounds", "1"]
    res = subprocess.run(three, capture_output=True, text=True, timeout=130, cwd=REPO)
    assert res.returncode == 2 and "exactly 2 ranks" in res.stderr


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH")
def test_sweep_runs_launches_and_summarizes(tmp_path):
    cmd = [
        sys.executable,
        str(BENCH / "sweep.py"),
        "--ranks",
        "2",
        "--launches",
        "2",
        "--timeout",
        "100",
        "--launcher-args",
        "",
        "--name",
        "tiny",
        "--out",
        str(tmp_path / "o"),
        "--json",
        str(tmp_path / "s.json"),
        "--markdown",
        str(tmp_path / "s.md"),
        "--quiet",
        "--",
        "-c",
        "reduce",
        "-m",
        "4:8",
        "-i",
        "3",
        "-x",
        "1",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=260, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert [r["ok"] for r in summary["launches"]] == [True, True] and summary["failures"] == []
    rows = summary["rows"]
    assert {(r["impl"], r["size"], r["launches"]) for r in rows} == {
        (i, s, 2) for i in ("native", "adaptcoll") for s in (4, 8)
    }
    docs = [json.loads(Path(r["json_path"]).read_text()) for r in summary["launches"]]
    for r in rows:  # the summary is the median of the two launches' medians
        meds = [x["median_us"] for d in docs for x in d["results"] if (x["impl"], x["size"]) == (r["impl"], r["size"])]
        assert r["median_us"] == pytest.approx(float(np.median(meds)))
    assert "native/adaptcoll" in (tmp_path / "s.md").read_text()


def test_aggregate_infers_routes_of_launches_made_before_routes_were_recorded():
    doc = _doc(2, [("bcast", "native", 4096, 10.0, 20.0), ("bcast", "adaptcoll", 4096, 9.0, 19.0)])
    doc["results"].append({**doc["results"][1], "size": 1 << 21})
    doc["impls"] = [
        {"label": "native", "kind": "native", "settings": None},
        {"label": "adaptcoll", "kind": "adaptcoll", "settings": {"native_below": 1 << 20, "bcast_native_below": -1}},
    ]
    routes = {(r["impl"], r["size"]): r["route"] for r in sweep.aggregate([("v", doc)])}
    assert routes == {
        ("native", 4096): None,
        ("adaptcoll", 4096): "native: below native_below",
        ("adaptcoll", 1 << 21): None,
    }


def test_scale_table_row_compares_the_rule_with_every_applicable_baseline():
    """bench/scale_table.py: a served point (Reduce 16M at 64 ranks) runs the rule's configuration and every
    baseline within the message limit, picks the best per condition, and gives rule / best; a native point
    takes the best baseline's time (ratio 1); `--baselines` restricts the set and skips carry reasons."""
    import argparse

    from adaptcoll.simulate.params import DEFAULT_PARAMS

    table = _load("scale_table")
    args = argparse.Namespace(noise=["100Hz x 250us"], seed=1, samples=1, max_messages=200_000, baselines=set())
    row = table.row("reduce", 16 << 20, 64, args, DEFAULT_PARAMS)
    assert row["serve"] and row["rule"].startswith("two_tree")
    assert {"binomial", "reduce_scatter_gather", "ompi_binomial"} <= set(row["baselines_s"])
    for i in range(2):
        times = {name: t[i] for name, t in row["baselines_s"].items()}
        assert row["best_s"][i] == min(times.values()) and times[row["best"][i]] == row["best_s"][i]
        assert row["ratio"][i] == pytest.approx(row["rule_s"][i] / row["best_s"][i])
    assert row["ratio"][0] < 1.0  # the rule's reason to serve here
    assert all("messages" in why or "model" in why.lower() for why in row["skipped"].values())
    args.baselines = {"binomial"}
    native = table.row("bcast", 64 << 10, 64, args, DEFAULT_PARAMS)
    assert not native["serve"] and native["ratio"] == [1.0, 1.0] and set(native["baselines_s"]) == {"binomial"}
    assert "native" in table.markdown([row, native])


def test_scale_table_on_nodes_of_several_ranks_with_the_compiled_rule():
    """bench/scale_table.py with ranks per node and the compiled engine's rule (ADAPTCOLL_ENGINE=compiled):
    the row runs the compiled bands' configuration on those nodes and says so."""
    import argparse
    import dataclasses

    from adaptcoll.runtime import settings
    from adaptcoll.simulate.params import DEFAULT_PARAMS

    table = _load("scale_table")
    args = argparse.Namespace(noise=[], seed=1, samples=1, max_messages=200_000, baselines={"ompi_han", "rabenseifner"})
    params = dataclasses.replace(DEFAULT_PARAMS, ranks_per_node=4)
    with settings.configured(engine="compiled"):
        row = table.row("allreduce", 4 << 20, 16, args, params)
    assert row["per_node"] == 4 and row["serve"]
    assert "compiled engine" in row["rule"] and "several nodes" in row["rule"] and "seg=32K" in row["rule"]
    assert set(row["baselines_s"]) <= {"ompi_han", "rabenseifner"} and row["baselines_s"]
    assert "| allreduce 4M | 16 x 4 |" in table.markdown([row])


def test_nodes_rule_row_times_the_rule_the_candidates_and_the_best_baseline():
    """bench/nodes_rule.py: a point on several nodes runs the rule's call as the simulator's choice makes it
    (here the several-nodes case: Reduce 16M two_tree), each candidate with no cap, and the fastest
    lock-step baseline; a native point takes the best baseline's time; the table gives best / time."""
    import argparse

    table = _load("nodes_rule")
    args = argparse.Namespace(seed=1, max_messages=200_000, candidates="two_tree:256K,binomial:512K")
    row = table.row("reduce", 16 << 20, 16, 4, args)
    assert row["rule"].startswith("two_tree seg=256K") and "several nodes" in row["rule"]
    assert row["rule_s"] == pytest.approx(row["candidates_s"]["two_tree:256K"])
    assert row["best"] and row["best_s"] < row["candidates_s"]["binomial:512K"]
    native = table.row("bcast", 16 << 20, 16, 4, args)
    assert native["rule"] == "native" and native["rule_s"] == native["best_s"]
    text = table.markdown([row, native])
    assert "| reduce 16M | 16 x 4 |" in text and "1.00 (native)" in text
    args.baselines = "binomial"  # --baselines: only these run, and the row says so
    only = table.row("reduce", 16 << 20, 16, 4, args)
    assert only["best"] == "binomial" and only["baselines"] == ["binomial"] and only["best_s"] >= row["best_s"]


def test_nodes_rule_params_reach_every_run(tmp_path):
    """bench/nodes_rule.py --params: the file's link model is what the rule, the candidates and the
    baselines run under (here links "pair": a lock-step Bcast never has two messages of one pair in
    flight, so its time stays; two_tree's pipelined segments to one child no longer share a hop)."""
    import argparse

    from adaptcoll.simulate.params import load_params

    table = _load("nodes_rule")
    pair_file = REPO / "bench/results/simulate/params_pair.json"
    args = argparse.Namespace(seed=1, max_messages=200_000, candidates="two_tree:256K")
    fair = table.row("bcast", 4 << 20, 4, 1, args)
    pair = table.row("bcast", 4 << 20, 4, 1, args, load_params(pair_file))
    assert pair["best"] == fair["best"] and pair["best_s"] == pytest.approx(fair["best_s"], rel=1e-12)
    assert pair["candidates_s"]["two_tree:256K"] < 0.9 * fair["candidates_s"]["two_tree:256K"]
    argv = ["--ranks", "4", "--per-node", "1", "--only", "bcast:4M", "--candidates", "two_tree:256K"]
    assert table.main([*argv, "--params", str(pair_file), "--json", str(tmp_path / "rows.json")]) == 0
    (written,) = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert written["candidates_s"] == pytest.approx(pair["candidates_s"])


def test_nodes_rule_candidates_with_commas_roots_and_noise(tmp_path):
    """bench/nodes_rule.py --candidate ALGORITHM@SEGMENT[@ROOTS] takes an algorithm with commas (a topo
    pair) and Allreduce roots; --noise adds the median of the draws; the compiled engine's setting
    (ADAPTCOLL_ENGINE=compiled) makes the rule column the compiled engine's rule."""
    from adaptcoll.runtime import settings

    table = _load("nodes_rule")
    argv = ["--ranks", "8", "--per-node", "4", "--only", "allreduce:1M", "--candidates", ""]
    argv += ["--candidate", "topo:inner=two_tree,intra=pipeline@128K@1", "--candidate", "two_tree@128K"]
    argv += ["--noise", "1kHz x 25us", "--samples", "2", "--json", str(tmp_path / "rows.json")]
    with settings.configured(engine="compiled"):
        assert table.main(argv) == 0
    (row,) = json.loads((tmp_path / "rows.json").read_text())["rows"]
    names = ["topo:inner=two_tree,intra=pipeline@128K@1", "two_tree@128K"]
    assert list(row["candidates_s"]) == names and list(row["noisy_s"]) == names
    assert row["candidates_s"][names[0]] != row["candidates_s"][names[1]]
    assert row["rule"] == "native" or "compiled engine" in row["rule"]
    assert row["best_noisy_s"] >= row["best_s"] and all(v > 0 for v in row["noisy_s"].values())


def test_worse_of_two_merges_points_and_orders_by_the_worse_ratio(tmp_path, capsys):
    """bench/worse_of_two.py: rows of one point from several files share the best baseline any of them ran
    (a file that ran only binomial gets the real best), the rule shows as `rule: LABEL`, and the lines are
    ordered by the worse of the quiet and noisy ratios."""
    worse = _load("worse_of_two")

    def row(best, best_s, best_noisy_s, rule, cands):
        point = {"collective": "bcast", "size": 16 << 20, "ranks": 64, "per_node": 1}
        times = {"best": best, "best_s": best_s, "best_noisy_s": best_noisy_s, "rule": rule}
        times.update(rule_s=2.0, rule_noisy_s=3.0)
        times["candidates_s"] = {k: v[0] for k, v in cands.items()}
        times["noisy_s"] = {k: v[1] for k, v in cands.items()}
        return {**point, **times}

    (tmp_path / "a.json").write_text(
        json.dumps({"rows": [row("binomial", 20.0, 30.0, "x (rule)", {"a@1K": (2.2, 2.6)})]})
    )
    (tmp_path / "b.json").write_text(json.dumps({"rows": [row("ring", 4.0, 5.0, "x (rule)", {"b@1K": (1.9, 3.5)})]}))
    best, configs = worse.merge([tmp_path / "a.json", tmp_path / "b.json"])
    point = ("bcast", 16 << 20, 64, 1)
    assert best[point] == ("ring", 4.0, 5.0)
    assert configs[point] == {"rule: x": (2.0, 3.0), "a@1K": (2.2, 2.6), "b@1K": (1.9, 3.5)}
    assert worse.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("| a", "| b", "| rule"))]
    assert [ln.split(" |")[0] for ln in lines] == ["| a@1K", "| rule: x", "| b@1K"]  # worse: 0.55, 0.6, 0.7


def test_fill_and_pace_follows_each_tree_to_the_last_rank(tmp_path):
    """bench/studies/fill_and_pace.py on 4 nodes x 4 ranks behind 2 NICs with the pinned pair: the traced run takes
    the simulator's own time; each tree's path runs from the root to the rank that finishes last along
    the tree's edges, every edge carrying that tree's share of the segments, in time order; the fill
    and the busiest rank's messages are what the trace holds."""
    import dataclasses

    from adaptcoll.plans import schedule_file as forest_file
    from adaptcoll.runtime import settings
    from adaptcoll.schedule import shapes
    from adaptcoll.schedule.synthesize import synthesize
    from adaptcoll.simulate.params import DEFAULT_PARAMS
    from adaptcoll.simulate.programs import Job
    from adaptcoll.simulate.routes import Routes
    from adaptcoll.simulate.run import run_once

    fp = _load("fill_and_pace", BENCH / "studies")
    d = shapes.nic_nodes(4, 4, nics=2)
    schedule = synthesize(d, "bcast", 0, trees=2, method="pinned").schedule
    trees = [t.children for t in schedule.forest(0).trees]
    path = tmp_path / "pinned.json"
    path.write_text(forest_file.dumps(schedule))
    report = fp.analyse(d, f"forest:{path}", 4 << 20, 256 << 10)
    chosen = dataclasses.replace(settings.current(), max_segments=0, topology=d.node_spec())
    job = Job("bcast", d.ranks, 4 << 20, 256 << 10, f"forest:{path}", chosen)
    plain = run_once(job, DEFAULT_PARAMS, "adaptcoll", None, 1, 0, topology=Routes(d))[0].time_s
    assert report.time_s == pytest.approx(plain, rel=1e-12)
    assert 0 < report.first_median_s <= report.first_last_s < report.time_s
    assert report.per_message_cpu_s == pytest.approx(DEFAULT_PARAMS.o + DEFAULT_PARAMS.engine)
    assert report.busiest_messages == 4 * 8  # two receives and two sends per pair of segments, 8 pairs
    assert len(report.paths) == 2
    for t, edges in enumerate(report.paths):
        children = trees[t]
        assert edges[0].src == 0 and edges[-1].dst == report.last_rank
        for e, nxt in itertools.pairwise(edges):
            assert e.dst == nxt.src
        for e in edges:
            assert e.tree == t and e.dst in children[e.src] and e.segments == 8
            assert e.first[0] <= e.first[1] <= e.last[1] and e.first[0] <= e.last[0] and e.pace_s > 0
    text = fp.render(report, 4)
    assert f"last rank {report.last_rank}" in text and "(node 0 -> " in text


def _forest_table_args(**chosen: object) -> Any:
    """bench/forest_table.py's options for one DGX-1 row: one noisy draw, forests of 2 and 8 trees."""
    import argparse

    return argparse.Namespace(noise=["100Hz x 250us"], seed=1, samples=1, trees="2,8", fanout=2, **chosen)


def test_forest_table_row_keeps_each_algorithms_fastest_configuration(tmp_path):
    """bench/forest_table.py on the DGX-1 graph (8 ranks): the forest (two K values) and the fixed shapes
    each keep their quietly fastest configuration, which is the time reported quiet; the best fixed shape
    is the minimum per condition and the ratio forest / best; the lock-step baselines come along."""
    table = _load("forest_table")
    args = _forest_table_args(segments="256K,1M", lockstep=True, max_messages=1_000_000)
    row = table.row("dgx1", "bcast:16M", args, tmp_path)
    assert set(row["searched_quiet_s"]["forest"]) == {"K=2 seg=256K", "K=2 seg=1024K", "K=8 seg=256K", "K=8 seg=1024K"}
    for name, searched in row["searched_quiet_s"].items():
        assert row["times_s"][name][0] == min(searched.values()) == searched[row["configs"][name]]
    fixed = {n: t for n, t in row["times_s"].items() if n != "forest"}
    assert {"two_tree", "binomial"} <= set(fixed)
    for i in range(2):
        assert fixed[row["best_fixed"][i]][i] == min(t[i] for t in fixed.values())
        assert row["ratio"][i] == pytest.approx(row["times_s"]["forest"][i] / fixed[row["best_fixed"][i]][i])
    assert row["bound_s"] < row["times_s"]["forest"][0]  # the bound is a floor
    assert row["best_lockstep"] and "DGX-1" in table.markdown([row])


def test_forest_table_tool_runs_the_tools_choice(tmp_path):
    """bench/forest_table.py --tool: the "forest" is the CPU-aware choice (adaptcoll.schedule.choose) run
    once at the segment size it picked, the fixed shapes also run at that size, and the row keeps the
    estimates; on DGX-1 the Reduce is CPU-bound, so the choice is a fixed shape and ties the best one."""
    table = _load("forest_table")
    args = _forest_table_args(
        segments="1M", lockstep=False, max_messages=0, tool=True, tool_fanouts="2", tool_segments="256K,1M"
    )
    row = table.row("dgx1", "reduce:4M", args, tmp_path)
    (config,) = row["searched_quiet_s"]["forest"]
    chosen = row["tool_estimates"]["chosen"]
    assert config.startswith(f"tool: {chosen} seg=")
    seg = config.rsplit("seg=", 1)[1]
    assert all(
        f"seg={seg}" in searched for n, searched in row["searched_quiet_s"].items() if n not in ("forest", "rule")
    )
    assert chosen in ("two_tree", "binomial", "topo", "pipeline")
    assert row["ratio"][0] == pytest.approx(1.0)


def test_forest_table_params_reach_the_simulator_and_the_tools_choice(tmp_path):
    """bench/forest_table.py --params: the file's CPU costs are what the runs and the tool's CPU-aware
    estimates use (the compiled engine's: a DGX-1 Bcast's CPU share of the estimate drops with them)."""
    table = _load("forest_table")
    compiled = str(REPO / "bench/results/simulate/params_scale_compiled.json")
    rows = {}
    for params in (None, compiled):
        args = _forest_table_args(
            segments="1M",
            lockstep=False,
            max_messages=0,
            tool=True,
            tool_fanouts="2",
            tool_segments="1M",
            params=params,
        )
        args.noise = []
        rows[params] = table.row("dgx1", "bcast:16M", args, tmp_path)
    builtin, fast = rows[None], rows[compiled]
    assert fast["tool_estimates"]["two_tree"]["cpu_s"] < builtin["tool_estimates"]["two_tree"]["cpu_s"] / 5
    assert fast["times_s"]["two_tree"][0] < builtin["times_s"]["two_tree"][0]


def test_call_instructions_runs_every_form_and_counts_calls():
    """bench/studies/call_instructions.py: every form's loop runs (one process, as callgrind runs it), and
    the calls it makes are the ones its docstring names (stats() of a native, a served and an I-form)."""
    script = BENCH / "studies" / "call_instructions.py"
    expect = {"wrap-bcast": ("Bcast", "native"), "bcast": ("Bcast", "adaptcoll"), "ibcast": ("Ibcast", "adaptcoll")}
    expect |= {"wrap-bcast-typed": ("Bcast", "native"), "wrap-bcast-displ": ("Bcast", "native")}
    expect["wrap-bcast-cai"] = ("Bcast", "native")
    ci = _load("call_instructions", BENCH / "studies")
    for form in ci.FORMS:
        command = [sys.executable, str(script), "--run", form, "--calls", "20", "--stats"]
        res = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert res.returncode == 0, (form, res.stderr[-2000:])
        stats = json.loads(res.stdout.strip().splitlines()[-1])
        if form in expect:
            name, side = expect[form]
            assert stats[name][side] >= 70, (form, stats[name])  # 50 warm-up calls + 20


def test_node_memory_study_runs_and_a_slower_node_memory_slows_every_call(tmp_path):
    """bench/studies/node_memory.py at 16 ranks x 4 per node: one row per node bandwidth, contention and call,
    the rule served, and every call (the rule's and the best baseline's) slower on a node of 5 GB/s than on one
    of 200 GB/s (copies inside a node are what the node's memory bandwidth limits)."""
    out = tmp_path / "rows.json"
    command = [sys.executable, str(BENCH / "studies" / "node_memory.py"), "--ranks", "16", "--per-node", "4"]
    command += ["--node-bw", "5e9,200e9", "--json", str(out)]
    env = {**os.environ, "ADAPTCOLL_ENGINE": "compiled"}
    res = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=REPO, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 * 2 * 3 and all(r["rule"] != "native" for r in rows)
    for slow in (r for r in rows if r["node_bw"] == 5e9):
        fast = next(
            r
            for r in rows
            if r["node_bw"] == 200e9
            and (r["collective"], r["copy_contention"]) == (slow["collective"], slow["copy_contention"])
        )
        assert slow["rule_s"] > fast["rule_s"] and slow["best_s"] > fast["best_s"], (slow, fast)
