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
    out = _run(4.0, ADAPTCOLL_WATCHDOG="1")
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
    """Issue 10, item 6, last part: counts on both sides of the native threshold send one rank to native
    MPI and the other to adaptcoll; the served rank's watchdog names the collective and what it waits for."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(
        ADAPTCOLL_NATIVE_BELOW="1000", ADAPTCOLL_WATCHDOG="2", ADAPTCOLL_WATCHDOG_ABORT="1", MPIEXEC_TIMEOUT="100"
    )
    out = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-c", STRADDLE], env=env, capture_output=True, text=True, timeout=110
    )
    assert out.returncode != 0
    assert "rank 0 done" not in out.stdout
    # every rank took part in the communicator's set-up (its first blocking call exchanges the tuning before
    # any buffer is looked at), so the served rank waits for segments the native rank never sends
    assert "Allreduce #1 on MPI_COMM_WORLD, 1 segment(s), pending:" in out.stderr, out.stderr
    assert re.search(r"receive from rank 1: segment 0 \(tag \d+, 24000 B\)", out.stderr), out.stderr
