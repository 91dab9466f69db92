"""Request handles with MPI semantics, in one process: Test/Wait/Get_status, reported requests become
inactive, Waitall/Testall/Waitany/Testany/Waitsome/Testsome over adaptcoll and MPI requests mixed."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from adaptcoll.forms.requests import NativeRequest, Request
from adaptcoll.protocols.operation import Operation
from adaptcoll.runtime.engine import engine


def _later(polls: int) -> Operation:
    """An operation the engine completes after `polls` sweeps (a watched poll)."""
    op = Operation()
    left = [polls]

    def poll() -> bool:
        left[0] -= 1
        return left[0] <= 0

    engine().watch(poll, op.complete)
    return op


def test_test_wait_and_status():
    req = Request(_later(3))
    status = MPI.Status()
    assert req.Test() is False
    assert req.Wait(status) is True
    assert status.Get_source() == MPI.ANY_SOURCE and status.Get_error() == MPI.SUCCESS
    assert req.Test() is True


def test_get_status_does_not_deactivate():
    req = Request(_later(1))
    engine().wait_for(lambda: req.Get_status())
    assert Request.Testany([req]) == (0, True)  # still active for Testany
    assert Request.Testany([req]) == (MPI.UNDEFINED, True)  # now reported: inactive


def test_waitany_skips_reported_requests():
    reqs = [Request(_later(1)), Request(_later(4))]
    first = Request.Waitany(reqs)
    second = Request.Waitany(reqs)
    assert {first, second} == {0, 1}
    assert Request.Waitany(reqs) == MPI.UNDEFINED


def test_testall_consumes_nothing_unless_all_done():
    reqs = [Request(_later(1)), Request(_later(50))]
    engine().wait_for(lambda: reqs[0]._finished())
    assert Request.Testall(reqs) is False
    assert Request.Waitany(reqs) == 0  # the first was not consumed by the failed Testall
    assert Request.Waitall(reqs) is True


def test_waitsome_and_testsome():
    reqs = [Request(_later(1)), Request(_later(1))]
    got: list[int] = []
    while len(got) < 2:
        done = Request.Waitsome(reqs)
        assert done
        got += done
    assert sorted(got) == [0, 1]
    assert Request.Testsome(reqs) is None and Request.Waitsome(reqs) is None


def test_mixed_with_mpi_requests():
    comm = MPI.COMM_SELF.Dup()
    try:
        dst = np.zeros(4)
        mpi_reqs = [comm.Irecv(dst, 0, 3), comm.Isend(np.arange(4.0), 0, 3)]
        reqs = [Request(_later(2)), *mpi_reqs, NativeRequest(comm.Ibarrier())]
        statuses: list = []
        assert Request.Waitall(reqs, statuses) is True
        assert len(statuses) == 4
        np.testing.assert_array_equal(dst, np.arange(4.0))
        assert all(r == MPI.REQUEST_NULL for r in mpi_reqs)
    finally:
        comm.Free()


def test_cancel_is_refused():
    with pytest.raises(NotImplementedError, match="cannot be cancelled"):
        Request(Operation()).Cancel()


def test_mpi_waitall_on_adaptcoll_requests_raises_the_documented_typeerror():
    """README and docs/dropin.md quote this message and give the fix (adaptcoll.Request.Waitall)."""
    done = Operation()
    done.complete()
    with pytest.raises(TypeError, match=r"Cannot convert Request to mpi4py\.MPI\.Request"):
        MPI.Request.Waitall([Request(done)])
    assert Request.Waitall([Request(done), MPI.REQUEST_NULL])
