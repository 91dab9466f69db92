"""A communicator's asynchronous set-up (adaptcoll.state.comm_state): a step that fails fails the collectives queued
behind it instead of leaving them waiting, and the Open MPI guard finishes a pending set-up before a
native nonblocking collective (in one process, on COMM_SELF duplicates)."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from adaptcoll.protocols.operation import Operation
from adaptcoll.runtime.engine import engine
from adaptcoll.state import comm_state as state_mod


class _Step:
    """A set-up step that stays pending for `pending` polls, then completes or raises `error`."""

    name = "test step"

    def __init__(self, pending: int, error: BaseException | None = None) -> None:
        self.pending, self.error = pending, error

    def begin(self, state: state_mod.CommState):
        polls = []

        def poll() -> bool:
            polls.append(1)
            if len(polls) <= self.pending:
                return False
            if self.error is not None:
                raise self.error
            return True

        return poll


def _ready_state() -> tuple[MPI.Intracomm, state_mod.CommState]:
    comm = MPI.COMM_SELF.Dup()
    found = state_mod.comm_state(comm)
    found.wait_ready()
    return comm, found


def test_a_failed_step_fails_the_collectives_queued_behind_it() -> None:
    comm, found = _ready_state()
    try:
        found.add_step(_Step(pending=2, error=RuntimeError("set-up failed")))
        assert not found.ready
        queued = [found.submit(lambda: pytest.fail("started despite the failed set-up")) for _ in range(2)]
        engine().wait_for(lambda: all(op.done for op in queued))
        assert all(isinstance(op.error, RuntimeError) and "set-up failed" in str(op.error) for op in queued)
        assert found.ready  # a later call is not queued behind the dead step
        started = found.submit(lambda: _finished())
        assert started.done and started.error is None
    finally:
        comm.Free()


def _finished() -> Operation:
    op = Operation()
    op.complete()
    return op


def test_settle_setup_finishes_a_pending_setup_only_where_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    comm, found = _ready_state()
    try:
        monkeypatch.setattr(state_mod, "IDUP_OVERLAP_BREAKS", False)
        found.add_step(_Step(pending=3))
        state_mod.settle_setup(comm)
        assert not found.ready  # MPICH: nonblocking collectives may overlap the set-up
        monkeypatch.setattr(state_mod, "IDUP_OVERLAP_BREAKS", True)
        state_mod.settle_setup(comm)
        assert found.ready  # Open MPI: finished before the native call is posted
        fresh = MPI.COMM_SELF.Dup()
        state_mod.settle_setup(fresh)  # no state yet: nothing to do, nothing created
        assert fresh.Get_attr(state_mod._KEYVAL) is None
        fresh.Free()
    finally:
        comm.Free()
