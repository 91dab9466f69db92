"""The compiled engine's progress thread (ADAPTCOLL_PROGRESS_THREAD): a nonblocking collective moves on
while the program computes, results equal native MPI's with the thread sweeping beside the program's
own calls, and the thread stops making MPI calls when it is turned off."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI
from pytest_again import run_again

import adaptcoll
from adaptcoll import Request
from adaptcoll.runtime import compiled
from adaptcoll.runtime.engine import engine

pytestmark = pytest.mark.skipif(
    compiled.status()[0] != "compiled", reason=f"compiled progress path not available: {compiled.status()[1]}"
)

GUARANTEES = ["tests/test_failures_mpi.py"]
"""Run again with the thread on: its error paths (a sweep on the thread may fail an operation)."""
SERVE = {"native_below": 0, "bcast_native_below": 0, "reduce_native_below": 0, "allreduce_native_below": 0}
SMALL_SEGMENTS = {
    "bcast_segment_size": "4K",
    "reduce_segment_size": "4K",
    "allreduce_segment_size": "4K",
    "max_segments": 0,
}


def _pending_after_sleep(comm: adaptcoll.Intracomm, a: np.ndarray, out: np.ndarray, limit: float) -> int:
    """Start an Iallreduce, then make no adaptcoll or MPI call (the C counters only read) until it has no
    request pending or `limit` seconds have passed; returns what is still pending, after waiting for it."""
    comp = engine().compiled
    assert comp is not None
    req = comm.Iallreduce(a, out)
    deadline = time.monotonic() + limit
    pending = comp.counters()[0]
    while pending and time.monotonic() < deadline:
        time.sleep(0.02)
        pending = comp.counters()[0]
    req.Wait()
    return pending


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_a_nonblocking_allreduce_moves_on_while_the_program_sleeps(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    n = (1 << 20) // 8  # 1 MiB in 4 KiB segments: 256 per tree, far more than one window
    a = np.arange(n, dtype="f8") * (world.Get_rank() + 1)
    want = np.empty_like(a)
    world.Allreduce(a, want)
    with adaptcoll.configured(**SERVE, **SMALL_SEGMENTS, allreduce_algorithm="binomial"):
        out = np.empty_like(a)
        comm.Allreduce(a, out)  # the communicator's set-up, outside the measured part
        assert engine().compiled is not None and engine().compiled.thread_pause_us == 0
        world.Barrier()
        # no thread: nothing moves between the program's calls
        assert _pending_after_sleep(comm, a, out, 0.3) > 0
        np.testing.assert_array_equal(out, want)
        with adaptcoll.configured(progress_thread="on"):
            assert engine().compiled.thread_pause_us == 50.0
            world.Barrier()
            out[:] = 0
            assert _pending_after_sleep(comm, a, out, 30.0) == 0, "the progress thread did not finish the call"
            np.testing.assert_array_equal(out, want)
        # off again: the thread waits, the requests wait for the program's calls
        assert engine().compiled.thread_pause_us == 0
        world.Barrier()
        out[:] = 0
        assert _pending_after_sleep(comm, a, out, 0.3) > 0
        np.testing.assert_array_equal(out, want)


@pytest.mark.mpi(ranks=[2, 3], timeout=180)
def test_every_form_equals_native_with_the_thread_sweeping(mpi_ranks):
    """Blocking, nonblocking (several in flight) and persistent calls, every root, with the progress thread
    on (a short pause, so that it sweeps between the program's own calls) and small segments."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng(7)
    with adaptcoll.configured(**SERVE, **SMALL_SEGMENTS, progress_thread=1):
        for count in (1, 1000, 50_000):
            for root in range(size):
                x = rng.integers(-1000, 1000, count).astype("i8") * (rank + 1)
                b = x.copy() if rank == root else np.zeros_like(x)
                want_b = b.copy()
                world.Bcast(want_b, root)
                want_r = np.zeros_like(x)
                world.Reduce(x, want_r, MPI.SUM, root)
                want_a = np.zeros_like(x)
                world.Allreduce(x, want_a, MPI.MAX)
                # blocking
                got = b.copy()
                comm.Bcast(got, root)
                np.testing.assert_array_equal(got, want_b)
                red = np.zeros_like(x)
                comm.Reduce(x, red, MPI.SUM, root)
                if rank == root:
                    np.testing.assert_array_equal(red, want_r)
                # nonblocking, all in flight at once, the program busy meanwhile
                g1, r1, a1 = b.copy(), np.zeros_like(x), np.zeros_like(x)
                reqs = [comm.Ibcast(g1, root), comm.Ireduce(x, r1, MPI.SUM, root), comm.Iallreduce(x, a1, MPI.MAX)]
                time.sleep(0.002)
                Request.Waitall(reqs)
                np.testing.assert_array_equal(g1, want_b)
                np.testing.assert_array_equal(a1, want_a)
                if rank == root:
                    np.testing.assert_array_equal(r1, want_r)
                # persistent, started three times
                a2 = np.zeros_like(x)
                p = comm.Allreduce_init(x, a2, MPI.MAX)
                for _ in range(3):
                    a2[:] = 0
                    p.Start()
                    p.Wait()
                    np.testing.assert_array_equal(a2, want_a)
                p.Free()
    assert engine().compiled.thread_pause_us == 0


@pytest.mark.timeout(600)
def test_failure_guarantees_hold_with_the_thread_on() -> None:
    """The error paths (MessageSizeError and notices on every rank, no hang) run again with the progress
    thread sweeping: an operation may now fail on the thread, between the program's calls."""
    run_again(GUARANTEES, {"ADAPTCOLL_PROGRESS_THREAD": "on"})
