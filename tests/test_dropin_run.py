"""`python -m adaptcoll`: unchanged mpi4py programs give the same output as under `python -m mpi4py`
with adaptcoll serving their collectives; launch forms, options, --stats, thread levels, and an
exception on one rank ending the whole job."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adaptcoll.__main__ import parse_args
from adaptcoll.runtime import settings

PROGRAMS = Path(__file__).parent / "programs"
RANKS = 2


def _launch(
    runner: str, args: list[str], n: int = RANKS, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env["MPIEXEC_TIMEOUT"] = str(int(timeout) - 5)
    return subprocess.run(
        ["mpiexec", "-n", str(n), sys.executable, "-m", runner, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _stats(stderr: str) -> dict[int, dict[str, tuple[int, int]]]:
    """{rank: {collective: (adaptcoll, native)}} from --stats all output."""
    found: dict[int, dict[str, tuple[int, int]]] = {}
    for m in re.finditer(r"^\[rank (\d+)\] (\w+)\s+(\d+)\s+(\d+)", stderr, re.M):
        found.setdefault(int(m.group(1)), {})[m.group(2)] = (int(m.group(3)), int(m.group(4)))
    return found


@pytest.mark.parametrize(
    "program, served",
    [
        ("jacobi.py", {"Allreduce", "Bcast", "Reduce"}),
        ("montecarlo.py", {"Reduce", "reduce", "allreduce"}),
        ("training.py", {"Bcast", "Allreduce", "allreduce"}),
    ],
)
def test_program_output_same_as_mpi4py_with_adaptcoll_serving(program, served):
    native = _launch("mpi4py", [str(PROGRAMS / program)])
    assert native.returncode == 0, native.stderr
    ours = _launch("adaptcoll", ["--native-below", "0", "--stats", "all", str(PROGRAMS / program)])
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == native.stdout
    assert native.stdout.strip()
    stats = _stats(ours.stderr)
    assert sorted(stats) == list(range(RANKS)), ours.stderr
    # --stats all: gathered to rank 0, one header, the ranks' tables in rank order
    assert ours.stderr.count(f"adaptcoll stats of every rank ({RANKS} ranks, in rank order):") == 1
    order = [int(r) for r in re.findall(r"^\[rank (\d+)\] collective", ours.stderr, re.M)]
    assert order == list(range(RANKS)), ours.stderr
    for rank, table in stats.items():
        for name in served:
            assert name in table and table[name][0] > 0 and table[name][1] == 0, (rank, name, table)


def test_stats_default_prints_rank_zero_only_and_options_apply():
    ours = _launch(
        "adaptcoll",
        [
            "--stats",
            "--algorithm",
            "native",
            "--native-below",
            "0",
            "--set",
            "reproducible=1",
            str(PROGRAMS / "jacobi.py"),
            "60",
        ],
    )
    assert ours.returncode == 0, ours.stderr
    assert "adaptcoll stats (rank 0)" in ours.stderr and "(rank 1)" not in ours.stderr
    assert re.search(r"^Allreduce\s+0\s+\d+\s+algorithm=native", ours.stderr, re.M), ours.stderr
    native = _launch("mpi4py", [str(PROGRAMS / "jacobi.py"), "60"])
    assert ours.stdout == native.stdout


@pytest.mark.parametrize("form", [["showargs.py", "a", "-b"], ["-m", "showargs", "a"], ["-c", "import showargs", "x"]])
def test_launch_forms_see_what_mpi4py_gives(form):
    native = _launch("mpi4py", form, n=2, cwd=PROGRAMS)
    ours = _launch("adaptcoll", form, n=2, cwd=PROGRAMS)
    assert native.returncode == 0 and ours.returncode == 0, (native.stderr, ours.stderr)
    assert ours.stdout.replace("type adaptcoll", "type mpi4py") == native.stdout
    assert "type adaptcoll" in ours.stdout  # the program's MPI.COMM_WORLD was adaptcoll's


def test_exception_on_one_rank_aborts_the_job_quickly():
    start = time.monotonic()
    ours = _launch("adaptcoll", ["--stats", "all", str(PROGRAMS / "failing.py")], n=3, timeout=60)
    elapsed = time.monotonic() - start
    assert ours.returncode != 0
    assert "rank 1 gives up" in ours.stderr
    assert "unreachable" not in ours.stdout
    assert elapsed < 30, f"took {elapsed:.1f} s: the job should have been aborted, not timed out"


THREADS = r"""
import threading
import numpy as np
from mpi4py import MPI
level = MPI.Query_thread()
world = MPI.COMM_WORLD
comms = [world.Dup() for _ in range(2)]
lock = threading.Lock()  # below MPI_THREAD_MULTIPLE the program serializes its MPI calls itself
errors = []
def work(k):
    try:
        for it in range(20):
            buf = np.zeros(1000)
            with lock:
                comms[k].Allreduce(np.full(1000, world.Get_rank() + k + it, "d"), buf, op=MPI.SUM)
            expect = sum(range(world.Get_size())) + world.Get_size() * (k + it)
            assert (buf == expect).all(), (k, it, buf[0], expect)
    except BaseException as exc:
        errors.append(exc)
if level == MPI.THREAD_MULTIPLE:
    lock = type("NoLock", (), {"__enter__": lambda s: None, "__exit__": lambda s, *a: None})()
threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
# serialized: both threads take turns, but each Allreduce needs the other ranks to take the same turn:
# run the threads one after the other so every rank issues the same order on each communicator
if level <= MPI.THREAD_FUNNELED:  # only the main thread may call MPI
    for k in range(2):
        work(k)
elif level == MPI.THREAD_SERIALIZED:
    for t in threads:
        t.start(); t.join()
else:
    for t in threads:
        t.start()
    for t in threads:
        t.join()
assert not errors, errors
import adaptcoll
served = adaptcoll.stats()["Allreduce"]["adaptcoll"]
if world.Get_rank() == 0:
    print("level", level, "served", served)
for c in comms:
    c.Free()
"""


@pytest.mark.parametrize("level, code", [("serialized", 2), ("multiple", 3), ("single", 0)])
def test_thread_levels(level, code):
    ours = _launch("adaptcoll", ["--native-below", "0", "-rc", f"thread_level={level}", "-c", THREADS], n=2)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.split() == ["level", str(code), "served", "40"]


def test_cli_maps_options_to_configure():
    opts, changes, program = parse_args(
        [
            "--algorithm",
            "binary",
            "--reduce-algorithm",
            "knomial:radix=4",
            "--segment-size",
            "64K",
            "--allreduce-segment-size",
            "8K",
            "--native-below",
            "1K",
            "--set",
            "sync-sends=all",
            "--stats=all",
            "prog.py",
            "--algorithm",
            "x",
        ]
    )
    assert program == ["prog.py", "--algorithm", "x"]  # the program's own arguments are left alone
    assert opts.stats == "all"
    assert changes == {
        "bcast_algorithm": "binary",
        "reduce_algorithm": "knomial:radix=4",
        "allreduce_algorithm": "binary",
        "bcast_segment_size": "64K",
        "reduce_segment_size": "64K",
        "allreduce_segment_size": "8K",
        "native_below": "1K",
        "sync_sends": "all",
    }
    with settings.configured(**changes) as cfg:
        assert cfg.allreduce_segment_size == 8192 and cfg.native_below == 1024
    _, _, program = parse_args(["--stats", "-m", "pkg.mod", "-v"])
    assert program == ["-m", "pkg.mod", "-v"]
    _, _, program = parse_args(["-rc", "thread_level=single", "-c", "print(1)", "a"])
    assert program == ["-c", "print(1)", "a"]
    for bad in (
        ["--set", "no_such=1", "p.py"],
        ["--bcast-algorithm", "bogus", "p.py"],
        ["--segment-size", "x", "p.py"],
        [],
        ["-m"],
    ):
        with pytest.raises(SystemExit):
            parse_args(bad)
