"""Freeing a communicator while requests still hold it: its set-up Idup, a served or a routed-native
collective. MPICH then runs adaptcoll's attribute delete callback inside the MPI call that completes
the last such request, where an MPI call aborted the job (`Assertion failed in mpir_request.h`,
`pthread_mutex_lock: Resource deadlock avoided`); adaptcoll.state.comm_state.CommState.free_later."""

from __future__ import annotations

import functools
import itertools
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
@pytest.mark.parametrize("native_below", [0, 1 << 30], ids=["served", "native"])
def test_free_with_requests_pending_completes_them(mpi_ranks, native_below):
    """adaptcoll's Free (state freed first, in the caller's call) and mpi4py's own Free on a plain
    object sharing the handle (the delete callback alone), each before the Ibcast completed: as the
    communicator's first call (its set-up Idup pending on rank 0) and after a first call."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    with adaptcoll.configured(native_below=native_below, bcast_segment_size="16K"):
        for how, first in itertools.product(("adaptcoll", "mpi4py"), (True, False, True)):
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
            if state is not None:  # the private duplicate is freed (once the Idup, which holds
                engine().wait_for(functools.partial(_released, state))  # the communicator, completed)
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
