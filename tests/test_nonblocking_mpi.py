"""Nonblocking adaptcoll collectives: several in flight at once, mixed with user point-to-point traffic."""

from __future__ import annotations

import functools
import gc

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll import Request


@pytest.mark.mpi(ranks=[2, 5], timeout=120)
def test_many_in_flight_with_user_traffic(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    with adaptcoll.configured(
        native_below=0, bcast_segment_size=256, reduce_segment_size=256, allreduce_segment_size=256
    ):
        # a pending user receive that matches anything: adaptcoll's traffic must never satisfy it
        user_buf = np.zeros(4, "i8")
        status = MPI.Status()
        user_req = comm.Irecv(user_buf, MPI.ANY_SOURCE, MPI.ANY_TAG)
        n = 1000
        b1 = np.arange(n, dtype="f8") if rank == 0 else np.zeros(n)
        b2 = np.full(n, 7, "i4") if rank == size - 1 else np.zeros(n, "i4")
        contrib = np.arange(n, dtype="i8") + rank
        red = np.zeros(n, "i8")
        allr = np.zeros(n, "f4")
        reqs = [
            comm.Ibcast(b1, 0),
            comm.Ireduce(contrib, red, MPI.SUM, size // 2),
            comm.Iallreduce(np.full(n, rank, "f4"), allr, MPI.MAX),
            comm.Ibcast(b2, size - 1),
        ]
        del contrib  # the request must keep its buffers alive
        gc.collect()
        Request.Waitall(reqs)
        assert not user_req.Test(status), "adaptcoll traffic matched a user ANY_TAG receive"
        np.testing.assert_array_equal(b1, np.arange(n, dtype="f8"))
        np.testing.assert_array_equal(b2, np.full(n, 7, "i4"))
        if rank == size // 2:
            np.testing.assert_array_equal(red, size * np.arange(n) + sum(range(size)))
        np.testing.assert_array_equal(allr, np.full(n, size - 1, "f4"))
        # now the user's own message arrives and is the one that matches
        world.Barrier()
        if rank == (1 % size):
            comm.Send(np.array([1, 2, 3, 4], "i8"), 0, tag=77)
        if rank == 0:
            user_req.Wait(status)
            assert status.Get_tag() == 77 and list(user_buf) == [1, 2, 3, 4]
        else:
            user_req.Cancel()
            user_req.Wait()
        # Test / Get_status / Waitany / Testsome on adaptcoll requests
        x = np.zeros(10) if rank else np.ones(10)
        req = comm.Ibcast(x, 0)
        while not req.Get_status():
            pass
        assert req.Test() and req.Wait()
        assert (x == 1).all()
        r1, r2 = comm.Ibcast(np.zeros(3) if rank else np.ones(3), 0), comm.Iallreduce(np.ones(5), np.zeros(5))
        first = Request.Waitany([r1, r2])
        assert first in (0, 1)
        assert Request.Waitany([r1, r2]) == 1 - first  # a reported request is inactive, as in MPI
        assert Request.Waitany([r1, r2]) == MPI.UNDEFINED
        assert Request.Testsome([r1, r2]) is None and Request.Waitsome([r1, r2]) is None
        assert Request.Testany([r1, r2]) == (MPI.UNDEFINED, True)
        r3, r4 = comm.Ibcast(np.zeros(3) if rank else np.ones(3), 0), comm.Iallreduce(np.ones(5), np.zeros(5))
        statuses = []
        Request.Waitall([r3, r4], statuses)
        assert len(statuses) == 2 and Request.Testall([r3, r4])
        served = adaptcoll.stats()
        assert served["Ibcast"]["adaptcoll"] >= 4 and served["Iallreduce"]["adaptcoll"] >= 2


@pytest.mark.mpi(ranks=[2, 4], timeout=120)
def test_tag_space_wraps_and_more_segments_than_tags(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    with adaptcoll.configured(
        native_below=0, tag_space=5, bcast_segment_size=8, reduce_segment_size=8, allreduce_segment_size=8
    ):
        for rep in range(7):  # the sequence wraps around the 5 tags many times
            n = 3 + 11 * rep  # up to 69 segments of 8 bytes wanted; never more than 5 used
            a = np.arange(n, dtype="f8") + rep if rank == 0 else np.zeros(n)
            comm.Bcast(a, 0)
            np.testing.assert_array_equal(a, np.arange(n) + rep)
            out = np.zeros(n, "i8")
            comm.Allreduce(np.arange(n, dtype="i8") * (rank + 1), out)
            np.testing.assert_array_equal(out, np.arange(n) * sum(range(1, world.Get_size() + 1)))
            # several in flight at once hold more tags than exist: they must not mix their segments
            bufs = [np.arange(n, dtype="f8") * (k + 2) if rank == 0 else np.zeros(n) for k in range(4)]
            reqs = [comm.Ibcast(b, 0) for b in bufs]
            outs = [np.zeros(n, "i8") for _ in range(3)]
            reqs += [comm.Iallreduce(np.arange(n, dtype="i8") + k + rank, outs[k]) for k in range(3)]
            Request.Waitall(reqs)
            for k, b in enumerate(bufs):
                np.testing.assert_array_equal(b, np.arange(n) * (k + 2))
            size = world.Get_size()
            for k, o in enumerate(outs):
                np.testing.assert_array_equal(o, size * (np.arange(n) + k) + sum(range(size)))


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_threads_on_different_communicators(mpi_ranks):
    import threading

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comms = [adaptcoll.Intracomm(world.Dup()) for _ in range(3)]
    errors = []

    def work(k):
        try:
            c = comms[k]
            for it in range(20):
                out = np.zeros(500, "i8")
                c.Allreduce(np.full(500, k + it + rank, "i8"), out)
                assert (out == size * (k + it) + sum(range(size))).all()
                b = np.full(300, k) if rank == 0 else np.zeros(300, "i8")
                c.Bcast(b, 0)
                assert (b == k).all()
        except BaseException as exc:
            errors.append(exc)

    with adaptcoll.configured(native_below=0, allreduce_segment_size=512, bcast_segment_size=512):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for c in comms:
        MPI.Intracomm.Free(c)
    assert not errors, errors


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_private_duplicate_is_freed_with_the_communicator(mpi_ranks):
    """MPICH has 2048 context ids: leaking adaptcoll's private Dup per communicator would run out here."""
    world = MPI.COMM_WORLD
    out = np.zeros(4, "i8")
    with adaptcoll.configured(native_below=0):
        for i in range(2500):
            comm = adaptcoll.Intracomm(world.Dup())
            comm.Allreduce(np.full(4, i, "i8"), out)
            assert (out == 2 * i).all()
            comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_a_communicator_of_nonblocking_calls_only_takes_the_fast_path(mpi_ranks):
    """Small I-calls (Allgather and Reduce-scatter's too) go straight to mpi4py from the second call on
    (the provisional tuning's thresholds), not through a decision each (an 8-byte Iallreduce + Wait
    took 66 us against mpi4py's 8), with native results; the first blocking call then brings the
    communicator's own tuning."""
    from adaptcoll.decision import blocks as block_decide
    from adaptcoll.decision import decide

    def below(name: str) -> int:  # (counted in Python or by the fast-call extension's gate: stats() has both)
        return adaptcoll.stats().get(name, {}).get("native_reasons", {}).get("below native_below", 0)

    names = ("Iallreduce", "Ibcast", "Ireduce", "Iallgather", "Ireduce_scatter_block")
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    comm = adaptcoll.Intracomm(world.Dup())
    decided: list[str] = []
    modules = {"bcast": decide, "reduce": decide, "allreduce": decide}
    modules.update(allgather=block_decide, reduce_scatter=block_decide)
    real = {name: getattr(module, name) for name, module in modules.items()}

    def counting(name: str, *args, **kwargs):
        decided.append(name)
        return real[name](*args, **kwargs)

    before = {name: below(name) for name in names}
    try:
        for name, module in modules.items():
            setattr(module, name, functools.partial(counting, name))
        for i in range(10):
            send, out = np.full(4, i + rank, "f8"), np.zeros(4)
            comm.Iallreduce(send, out).Wait()
            np.testing.assert_array_equal(out, np.full(4, 2 * i + 1.0))
            buf = np.full(4, i, "i8") if rank == 0 else np.zeros(4, "i8")
            comm.Ibcast(buf, 0).Wait()
            np.testing.assert_array_equal(buf, np.full(4, i))
            comm.Ireduce(send, out, MPI.MAX, 1).Wait()
            assert rank != 1 or (out == i + 1).all()
            gathered, block = np.zeros(8), np.zeros(2)
            comm.Iallgather(send[:4], gathered).Wait()
            np.testing.assert_array_equal(gathered, [i] * 4 + [i + 1] * 4)
            comm.Ireduce_scatter_block(np.arange(4.0) + rank, block).Wait()
            np.testing.assert_array_equal(block, 2 * np.arange(4.0)[2 * rank : 2 * rank + 2] + 1)
        assert decided == ["allreduce"], decided  # the first call only
        assert len(comm._adaptcoll_nb_blocks_below_settings) == 1  # computed once, not per call
        assert comm._adaptcoll_nb_below["allreduce"] > 32
        comm.Allreduce(send, out)  # the first blocking call sets the tuning up
        assert decided[1:] == ["allreduce"], decided
        assert comm._adaptcoll_nb_below is comm._adaptcoll_below
    finally:
        for name, module in modules.items():
            setattr(module, name, real[name])
    for name in names:
        assert below(name) - before[name] == 10, name  # (the first Iallreduce decided, as "below" too)
    comm.Free()
