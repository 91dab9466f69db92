"""Freeing a communicator while requests still hold it: its set-up Idup, a served or a routed-native
collective. MPICH then runs adaptcoll's attribute delete callback inside the MPI call that completes
the last such request, where an MPI call aborted the job (`Assertion failed in mpir_request.h`,
`pthread_mutex_lock: Resource deadlock avoided`); adaptcoll.state.comm_state.CommState.free_later."""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.runtime.engine import NATIVE_LIVE, engine
from adaptcoll.state import comm_state as cs

N = 1 << 16


def _ibcast(comm: MPI.Intracomm, rank: int) -> tuple[np.ndarray, adaptcoll.Request]:
    buf = np.arange(N, dtype="i4") if rank == 0 else np.full(N, -1, "i4")
    return buf, comm.Ibcast(buf, root=0)


def _released(state: cs.CommState) -> bool:
    engine().run_deferred()
    return state._freed and state.dup is not None and state.dup == MPI.COMM_NULL


def _late(rank: int) -> None:
    """Rank 1 starts late, so rank 0's set-up Idup is still pending when it frees the communicator."""
    if rank == 1:
        time.sleep(0.1)


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_free_with_requests_pending_completes_them(mpi_ranks):
    """adaptcoll's Free (state freed first, in the caller's call) and mpi4py's own Free on a plain
    object sharing the handle (the delete callback alone), each before the Ibcast completed: as the
    communicator's first call (its set-up Idup pending on rank 0) and after a first call; the Ibcast
    served, and routed to native MPI."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    cases = itertools.product((0, 1 << 30), ("adaptcoll", "mpi4py"), (True, False, True))
    for native_below, how, first in cases:
        with adaptcoll.configured(native_below=native_below, bcast_segment_size="16K"):
            plain = world.Dup()
            comm = adaptcoll.Intracomm(plain)
            if not first:
                buf, req = _ibcast(comm, rank)
                req.Wait()
            _late(rank)
            buf, req = _ibcast(comm, rank)
            state = comm.Get_attr(cs._KEYVAL)
            if how == "adaptcoll":
                comm.Free()
            else:
                MPI.Intracomm.Free(plain)
            req.Wait()
            np.testing.assert_array_equal(buf, np.arange(N, dtype="i4"))
            assert state is not None  # the first call took the full path, which set the state up
            engine().wait_for(functools.partial(_released, state))  # the private duplicate is freed
    assert not NATIVE_LIVE


@pytest.mark.mpi(ranks=[2], timeout=180)
def test_private_duplicates_of_plainly_freed_communicators_are_released(mpi_ranks):
    """The deferred releases free every private duplicate: 2100 communicators freed by mpi4py's Free
    with a served Iallreduce pending would exhaust MPICH's 2048 context ids otherwise."""
    world = MPI.COMM_WORLD
    out = np.zeros(4, "i8")
    with adaptcoll.configured(native_below=0):
        for i in range(2100):
            plain = world.Dup()
            comm = adaptcoll.Intracomm(plain)
            req = comm.Iallreduce(np.full(4, i, "i8"), out)
            MPI.Intracomm.Free(plain)
            req.Wait()
            assert (out == 2 * i).all()


UNJOINED = textwrap.dedent(
    """
    import numpy as np
    from mpi4py import MPI
    import adaptcoll
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD.Dup())
    if comm.rank == 0:  # an erroneous program: rank 1 never makes the collective, so never the set-up
        req = comm.Ibcast(np.zeros(1 << 16), 0)
    comm.Free()
    print(f"rank {comm.rank} freed", flush=True)
    """
)


def test_free_waiting_for_a_set_up_the_others_never_join_is_named_not_a_silent_hang():
    """Free completes a pending set-up through the engine, so the watchdog names it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(ADAPTCOLL_NATIVE_BELOW="0", ADAPTCOLL_WATCHDOG="2", ADAPTCOLL_WATCHDOG_ABORT="1", MPIEXEC_TIMEOUT="100")
    out = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-c", UNJOINED], env=env, capture_output=True, text=True, timeout=110
    )
    assert out.returncode != 0
    assert "rank 0 freed" not in out.stdout
    assert "set-up of" in out.stderr and "private duplicate (MPI_Comm_idup)" in out.stderr, out.stderr
