"""The watchdog (issue 10, item 9), in real jobs: a rank that never calls the collective makes the
others print, once, what they wait for (operation, communicator, collective, root, pending segments
with peers and tags); with ADAPTCOLL_WATCHDOG_ABORT=1 the job ends instead of hanging; a late rank that
does arrive lets the job finish normally after the report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import adaptcoll
    from mpi4py import MPI
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD)
    late = float(sys.argv[1])
    comm.Bcast(np.zeros(10), 0)  # set up the communicator on every rank
    buf = np.arange(300_000.0) if comm.rank == 0 else np.zeros(300_000)
    if comm.rank == comm.size - 1:
        time.sleep(late)  # this rank is late (or, for long enough, never comes)
    comm.Bcast(buf, 0)
    assert buf[-1] == 299_999.0
    print(f"rank {comm.rank} done", flush=True)
    """
)


def _run(late: float, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(ADAPTCOLL_NATIVE_BELOW="0", ADAPTCOLL_BCAST_SEGMENT_SIZE="64K", MPIEXEC_TIMEOUT="100", **env_extra)
    return subprocess.run(
        ["mpiexec", "-n", "3", sys.executable, "-c", PROGRAM, str(late)],
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )


def test_watchdog_reports_once_and_the_job_goes_on_when_the_late_rank_arrives():
    out = _run(8.0, ADAPTCOLL_WATCHDOG="2")
    assert out.returncode == 0, out.stderr
    assert sorted(re.findall(r"rank (\d+) done", out.stdout)) == ["0", "1", "2"], out.stdout
    reports = re.findall(r"^adaptcoll watchdog: rank (\d+) ", out.stderr, re.M)
    # ranks 0 and 1 wait for rank 2 (root 0 sends to 1 and 2 on a binomial tree); each reports once
    assert sorted(reports) == sorted(set(reports)) and "0" in reports, out.stderr
    assert "2" not in reports, out.stderr
    assert "Bcast #2 on MPI_COMM_WORLD, root 0, 4 segment(s), pending:" in out.stderr
    assert re.search(r"send to rank 2: segment \d \(tag \d+\)", out.stderr), out.stderr


def test_watchdog_abort_ends_a_job_whose_rank_never_calls():
    out = _run(300.0, ADAPTCOLL_WATCHDOG="2", ADAPTCOLL_WATCHDOG_ABORT="1")
    assert out.returncode != 0
    assert "rank 0 done" not in out.stdout
    assert re.search(r"^adaptcoll watchdog: rank 0 \(of COMM_WORLD\) has waited \d+ s", out.stderr, re.M), out.stderr
    assert "Bcast #2 on MPI_COMM_WORLD, root 0" in out.stderr
    assert re.search(r"send to rank 2: segment \d \(tag \d+\)", out.stderr), out.stderr


STRADDLE = textwrap.dedent(
    """
    import numpy as np
    import adaptcoll
    from mpi4py import MPI
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD)
    n = 3000 if comm.rank == 0 else 10  # 24000 B served by adaptcoll, 80 B native: an erroneous program
    comm.Allreduce(np.ones(n), np.zeros(n))
    print(f"rank {comm.rank} done", flush=True)
    """
)


def test_counts_on_both_sides_of_the_native_threshold_are_named_not_a_silent_hang():
    """Issue 10, item 6, last part: the served rank waits for the communicator's set-up that the native
    rank never joins; the watchdog names the set-up, the collective queued behind it and the likely cause."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(
        ADAPTCOLL_NATIVE_BELOW="1000", ADAPTCOLL_WATCHDOG="2", ADAPTCOLL_WATCHDOG_ABORT="1", MPIEXEC_TIMEOUT="100"
    )
    out = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-c", STRADDLE], env=env, capture_output=True, text=True, timeout=110
    )
    assert out.returncode != 0
    assert "rank 0 done" not in out.stdout
    assert "set-up of MPI_COMM_WORLD: private duplicate (MPI_Comm_idup), with 1 collective(s) queued" in out.stderr, (
        out.stderr
    )
    assert "below ADAPTCOLL_NATIVE_BELOW" in out.stderr, out.stderr
