"""The routed collectives' native path in C (adaptcoll.forms.collectives.native_forms: Bcast, Reduce,
Allreduce and their I-forms) and NativeRequest's Wait in C: mpi4py's results, the Python forms' counts,
requests and errors, every other call handed to the Python forms. (With ADAPTCOLL_FASTCALLS=off,
tests/test_engines.py reruns the nonblocking tests on the Python forms.)"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.forms import collectives
from adaptcoll.forms.requests import NativeRequest
from adaptcoll.runtime import engine as engines
from adaptcoll.runtime import fastcalls
from adaptcoll.runtime.engine import NATIVE_LIVE

NAMES = ("Ibcast", "Ireduce", "Iallreduce")
BLOCKING = ("Bcast", "Reduce", "Allreduce")


def _c_comm() -> adaptcoll.Intracomm:
    """A duplicate of COMM_WORLD after a first blocking call (the thresholds, and the extension loaded);
    skips where the extension is not loaded, else checks that the collectives are its C forms."""
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD.Dup())
    comm.Bcast(np.zeros(1), 0)
    how, why = fastcalls.status()
    if how != "extension":
        comm.Free()
        pytest.skip(f"the fast-call extension is not loaded here: {why}")
    for name in NAMES + BLOCKING:
        assert type(adaptcoll.Intracomm.__dict__[name]).__name__ == "NativeIForm", name
    return comm


def _native(name: str) -> int:
    return adaptcoll.stats().get(name, {}).get("native", 0)


def _waited(req: NativeRequest) -> None:
    """Wait as a program does, then what the Python Wait leaves: done, reported, buffers let go, not live."""
    assert type(req) is NativeRequest and id(req) in NATIVE_LIVE and req._keep is not None
    assert req.Wait() is True
    assert req._done and req._reported and req._keep is None and id(req) not in NATIVE_LIVE
    assert req.Wait() is True and req.Test() is True  # (completed requests stay complete)


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_the_c_forms_give_mpi4pys_results_and_the_python_forms_requests(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = _c_comm()
    before = {name: _native(name) for name in NAMES}
    calls = 0
    for dtype in ("f8", "i4", "u1", "c16"):
        for shape in ((5,), (3, 4), ()):
            for root in range(size):
                base = (np.arange(int(np.prod(shape))) + 1).reshape(shape).astype(dtype)
                buf = base.copy() if rank == root else np.zeros(shape, dtype)
                _waited(comm.Ibcast(buf, root) if root else comm.Ibcast(buf))
                np.testing.assert_array_equal(buf, base)
                send, out, want = np.array(base * (rank + 1)), np.zeros(shape, dtype), np.zeros(shape, dtype)
                world.Reduce(send, want, MPI.SUM, root)
                _waited(comm.Ireduce(send, out, MPI.SUM, root) if root else comm.Ireduce(send, out))
                if rank == root:
                    np.testing.assert_array_equal(out, want)
                inplace = send.copy()
                _waited(comm.Ireduce(MPI.IN_PLACE if rank == root else inplace, inplace, MPI.SUM, root))
                if rank == root:
                    np.testing.assert_array_equal(inplace, want)
                op = MPI.SUM if dtype == "c16" else MPI.MAX
                world.Allreduce(send, want, op)
                _waited(comm.Iallreduce(send, out, op))
                np.testing.assert_array_equal(out, want)
                inplace = send.copy()
                _waited(comm.Iallreduce(MPI.IN_PLACE, inplace, op))
                np.testing.assert_array_equal(inplace, want)
                calls += 1
    # a buffer specification the gate sizes takes the C path too
    spec = np.full(4, 3.0) if rank == 0 else np.zeros(4)
    _waited(comm.Ibcast([spec, 4, MPI.DOUBLE], 0))
    np.testing.assert_array_equal(spec, np.full(4, 3.0))
    counted = {name: _native(name) - before[name] for name in NAMES}
    assert counted == {"Ibcast": calls + 1, "Ireduce": 2 * calls, "Iallreduce": 2 * calls}, counted
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_the_c_forms_hand_every_other_call_to_the_python_forms(mpi_ranks):
    """Keywords, `sendbuf is recvbuf`, a status, above the threshold, bad arguments: the Python forms'
    results and errors, the same on every rank."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    comm = _c_comm()
    buf = np.arange(6.0) if rank == 1 else np.zeros(6)
    status = MPI.Status()
    status.Set_source(5)
    req = comm.Ibcast(buf, root=1)
    assert req.Wait(status) is True and status.Get_error() == MPI.SUCCESS  # (the Python Wait: MPI fills it)
    np.testing.assert_array_equal(buf, np.arange(6.0))
    same = np.full(3, rank + 1.0)
    _waited(comm.Iallreduce(same, same, op=MPI.SUM))
    np.testing.assert_array_equal(same, np.full(3, 3.0))
    same = np.full(3, rank + 1.0)
    _waited(comm.Ireduce(same, same, MPI.PROD, 0))
    assert rank != 0 or (same == 2.0).all()
    # the request keeps its buffer alive until done, as the Python form's does
    kept = np.arange(8.0) if rank == 0 else np.zeros(8)
    alive = weakref.ref(kept)
    req = comm.Ibcast(kept, 0)
    del kept
    gc.collect()
    assert alive() is not None
    req.Wait()
    gc.collect()
    assert alive() is None
    # bad arguments: the Python form's TypeError, mpi4py's MPI error
    for call in (lambda: comm.Ibcast(), lambda: comm.Ireduce(buf), lambda: comm.Iallreduce(buf, buf, MPI.SUM, 1)):
        with pytest.raises(TypeError) as c_form:
            call()
        assert "positional argument" in str(c_form.value)
    with pytest.raises(TypeError) as python_form:
        collectives.ibcast(comm)
    with pytest.raises(TypeError) as c_form:
        comm.Ibcast()
    assert str(c_form.value) == str(python_form.value)
    with pytest.raises(MPI.Exception) as plain:
        world.Ibcast(np.zeros(2), 7)
    with pytest.raises(MPI.Exception) as ours:
        comm.Ibcast(np.zeros(2), 7)
    assert ours.value.Get_error_class() == plain.value.Get_error_class()
    assert comm.Ibcast.__doc__ == collectives.ibcast.__doc__ and comm.Ibcast.__wrapped__ is collectives.ibcast
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_a_c_forms_wait_progresses_adaptcolls_pending_operations(mpi_ranks):
    """With a served operation pending, a native request's Wait is the Python Wait (which progresses
    both): both complete, with their results."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    comm = _c_comm()
    with adaptcoll.configured(native_below=0, bcast_segment_size=1024):
        served_comm = adaptcoll.Intracomm(world.Dup())
        big = np.arange(50000.0) if rank == 0 else np.zeros(50000)
        served = served_comm.Ibcast(big, 0)
    assert type(served) is not NativeRequest
    small = np.full(4, 9.0) if rank == 1 else np.zeros(4)
    native = comm.Ibcast(small, 1)
    assert not engines.engine().quiet()  # (nothing progresses the served one before a Wait or Test: pending)
    _waited(native)
    np.testing.assert_array_equal(small, np.full(4, 9.0))
    served.Wait()
    np.testing.assert_array_equal(big, np.arange(50000.0))
    served_comm.Free()
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_the_blocking_c_forms_give_mpi4pys_results_and_counts(mpi_ranks):
    """Bcast / Reduce / Allreduce below the threshold: mpi4py's results, one count each; `sendbuf is
    recvbuf`, keywords and a buffer specification go through the Python forms, with the same results."""
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = _c_comm()
    before = {name: _native(name) for name in BLOCKING}
    calls = 0
    for dtype in ("f8", "i4", "c16"):
        for shape in ((7,), (2, 3)):
            for root in range(size):
                base = (np.arange(int(np.prod(shape))) + 1).reshape(shape).astype(dtype)
                buf = base.copy() if rank == root else np.zeros(shape, dtype)
                assert (comm.Bcast(buf, root) if root else comm.Bcast(buf)) is None
                np.testing.assert_array_equal(buf, base)
                send, out, want = base * (rank + 1), np.zeros(shape, dtype), np.zeros(shape, dtype)
                world.Reduce(send, want, MPI.SUM, root)
                comm.Reduce(send, out, MPI.SUM, root) if root else comm.Reduce(send, out)
                if rank == root:
                    np.testing.assert_array_equal(out, want)
                world.Allreduce(send, want, MPI.SUM)
                comm.Allreduce(send, out)
                np.testing.assert_array_equal(out, want)
                inplace = send.copy()
                comm.Allreduce(MPI.IN_PLACE, inplace, MPI.SUM)
                np.testing.assert_array_equal(inplace, want)
                same = send.copy()
                comm.Allreduce(same, same, op=MPI.SUM)  # (the Python form: IN_PLACE, keyword)
                np.testing.assert_array_equal(same, want)
                calls += 1
    spec = np.full(4, 3.0) if rank == 0 else np.zeros(4)
    comm.Bcast([spec, 4, MPI.DOUBLE], root=0)
    np.testing.assert_array_equal(spec, np.full(4, 3.0))
    counted = {name: _native(name) - before[name] for name in BLOCKING}
    assert counted == {"Bcast": calls + 1, "Reduce": calls, "Allreduce": 3 * calls}, counted
    with pytest.raises(MPI.Exception) as plain:
        world.Bcast(np.zeros(2), 7)
    with pytest.raises(MPI.Exception) as ours:
        comm.Bcast(np.zeros(2), 7)
    assert ours.value.Get_error_class() == plain.value.Get_error_class()
    with pytest.raises(TypeError) as python_form:
        collectives.allreduce(comm, buf)
    with pytest.raises(TypeError) as c_form:
        comm.Allreduce(buf)
    assert str(c_form.value) == str(python_form.value)
    comm.Free()


def test_a_method_replaced_before_the_extension_loads_stays(monkeypatch):
    """A program's (or a test's) own wrapper of a collective is not overwritten by the C forms."""
    from adaptcoll import comm as comm_module

    module = fastcalls.load()[0]
    if module is None:
        pytest.skip(f"the fast-call extension is not built here: {fastcalls.status()[1]}")

    def mine(self, *args):
        return collectives.allreduce(self, *args)

    monkeypatch.setattr(adaptcoll.Intracomm, "Allreduce", mine)
    monkeypatch.setattr(adaptcoll.Intracomm, "Ibcast", collectives.ibcast)
    comm_module._use_native_forms(module)
    assert adaptcoll.Intracomm.__dict__["Allreduce"] is mine
    assert type(adaptcoll.Intracomm.__dict__["Ibcast"]).__name__ == "NativeIForm"  # (the Python form: replaced)


def test_the_c_forms_leave_no_reference_behind() -> None:
    """Many calls through every C path (start, both Waits, the fallbacks) keep no reference to the
    buffers, the request or the status (a leaked reference in C would keep them alive)."""
    import sys

    comm = adaptcoll.Intracomm(MPI.COMM_SELF)
    comm.Bcast(np.zeros(1), 0)
    if fastcalls.status()[0] != "extension":
        pytest.skip(f"the fast-call extension is not loaded here: {fastcalls.status()[1]}")
    buf, out, status = np.arange(8.0), np.zeros(8), MPI.Status()
    before = [sys.getrefcount(x) for x in (buf, out, status)]
    for _ in range(1000):
        comm.Ibcast(buf, 0).Wait()
        comm.Ibcast(buf, 0).Wait(status)
        comm.Ireduce(MPI.IN_PLACE, out, MPI.SUM, 0).Wait()
        comm.Iallreduce(buf, out, op=MPI.SUM).Wait()
        comm.Iallreduce(buf, out).Test()
        comm.Bcast(buf, 0)
        comm.Allreduce(buf, out)
        comm.Reduce(out, out)
    gc.collect()
    assert [sys.getrefcount(x) for x in (buf, out, status)] == before
    assert not NATIVE_LIVE
