"""Remembered decisions (adaptcoll.decision.cache) and the blocking compiled run (one call into C per
call): repeated calls on the same arrays reuse the decision while it is valid, and never when the
arrays, the settings or the tuning changed; results always equal native MPI's."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.decision import cache

SERVE = {"native_below": 0, "bcast_native_below": 0, "reduce_native_below": 0, "allreduce_native_below": 0}


def _calls(comm: adaptcoll.Intracomm) -> dict:
    return getattr(comm, cache.CALLS_ATTR, {})


def _world() -> adaptcoll.Intracomm:
    comm = adaptcoll.Intracomm(MPI.COMM_WORLD.Dup())
    comm.Barrier()
    data = np.zeros(4)
    comm.Bcast(data, 0)  # the first blocking call sets the tuning up: from here on decisions are remembered
    return comm


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_repeated_calls_reuse_the_decision_and_match_native(mpi_ranks):
    comm = _world()
    rank, size = comm.Get_rank(), comm.Get_size()
    with adaptcoll.configured(**SERVE, bcast_segment_size="4K", reduce_segment_size="4K", allreduce_segment_size="4K"):
        for count in (1, 100, 5000):
            buf = np.zeros(count)
            send = np.arange(count, dtype=np.float64) + rank
            out, want = np.zeros(count), np.zeros(count)
            adaptcoll.reset_stats()
            for it in range(6):
                root = it % size
                buf[:] = np.arange(count) * (it + 1) if rank == root else -1
                comm.Bcast(buf, root)
                assert (buf == np.arange(count) * (it + 1)).all()
                send += 1
                comm.Reduce(send, out, MPI.SUM, root)
                MPI.COMM_WORLD.Reduce(send, want, MPI.SUM, root)
                if rank == root:
                    assert (out == want).all()
                comm.Allreduce(send, out, MPI.MAX)
                MPI.COMM_WORLD.Allreduce(send, want, MPI.MAX)
                assert (out == want).all()
                req = comm.Iallreduce(send, out, MPI.SUM)
                req.Wait()
                MPI.COMM_WORLD.Allreduce(send, want, MPI.SUM)
                assert (out == want).all()
            stats = adaptcoll.stats()
            for name in ("Bcast", "Reduce", "Allreduce", "Iallreduce"):
                assert stats[name]["adaptcoll"] == 6, stats[name]
            # one remembered decision per (collective, form, root, op, arrays)
            keys = _calls(comm).keys()
            assert sum(1 for k in keys if k[0] == "bcast" and k[3] == id(buf)) == size
            assert any(k[0] == "allreduce" and k[1] is False for k in keys)
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_changed_arrays_settings_and_flags_are_not_served_from_memory(mpi_ranks):
    comm = _world()
    rank = comm.Get_rank()
    with adaptcoll.configured(**SERVE, bcast_segment_size="4K", reduce_segment_size="4K", allreduce_segment_size="4K"):
        buf = np.zeros(64)
        buf[:] = 3 if rank == 0 else 0
        comm.Bcast(buf, 0)
        assert (buf == 3).all()
        # the same object, now seen as 32 complex numbers: another signature, decided afresh
        buf.dtype = np.complex128
        buf[:] = 5 + 1j if rank == 0 else 0
        comm.Bcast(buf, 0)
        assert (buf == 5 + 1j).all()
        buf.dtype = np.float64
        # read-only on the receiving rank: mpi4py's error there, although the call was remembered writable
        if rank == 1:
            buf.flags.writeable = False
            with pytest.raises(BufferError):
                comm.Bcast(buf, 0)
            buf.flags.writeable = True
        else:
            comm.Bcast(buf, 0)
        comm.Barrier()
        # settings changed: the new ones apply (another algorithm, counted under its label)
        adaptcoll.reset_stats()
        with adaptcoll.configured(bcast_algorithm="chain"):
            buf[:] = 7 if rank == 0 else 0
            comm.Bcast(buf, 0)
            assert (buf == 7).all()
        buf[:] = 8 if rank == 0 else 0
        comm.Bcast(buf, 0)
        assert (buf == 8).all()
        labels = adaptcoll.stats()["Bcast"]["configs"]
        assert any(label.startswith("chain") for label in labels), labels
        assert any(not label.startswith("chain") for label in labels), labels
        # going native by setting is honoured at once
        adaptcoll.reset_stats()
        with adaptcoll.configured(bcast_algorithm="native"):
            comm.Bcast(buf, 0)
        assert adaptcoll.stats()["Bcast"]["native"] == 1
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_borrowed_and_large_arrays_are_not_held(mpi_ranks):
    comm = _world()
    rank = comm.Get_rank()
    with adaptcoll.configured(**SERVE):
        # memory owned by a bytearray: holding the array would keep the bytearray from being resized
        raw = bytearray(8 * 16)
        view = np.frombuffer(raw, dtype=np.float64)
        view[:] = 2 if rank == 0 else 0
        comm.Bcast(view, 0)
        assert (view == 2).all()
        assert not any(k[3] == id(view) for k in _calls(comm) if k[0] == "bcast")
        del view
        gc.collect()  # the Python engine's protocol objects hold their views in reference cycles
        raw.extend(b"\0" * 8)  # BufferError if anything still exported it (a remembered decision would)
        # more than MAX_BYTES: served, not remembered
        big = np.zeros(cache.MAX_BYTES // 8 + 1)
        comm.Allreduce(MPI.IN_PLACE, big, MPI.SUM)
        assert not any(id(big) in k for k in _calls(comm))
        # a bounded number of entries per communicator
        for _ in range(cache.MAX_ENTRIES + 5):
            a = np.ones(3)
            comm.Allreduce(MPI.IN_PLACE, a, MPI.SUM)
            assert (a == comm.Get_size()).all()
        assert len(_calls(comm)) <= cache.MAX_ENTRIES
        held = _calls(comm).held
        assert 0 < held <= cache.MAX_BYTES
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_a_16_mib_call_and_a_small_one_are_both_remembered(mpi_ranks):
    """A program that alternates a 16 MiB Bcast (or a Reduce of 2 x 16 MiB) with a small call decides each
    once: the byte budget holds both (with 16 MiB they evicted each other, and each call decided afresh)."""
    comm = _world()
    rank = comm.Get_rank()
    big, small = np.zeros(2 << 20), np.zeros(1)
    send, out, want = np.arange(2 << 20, dtype=np.float64) + rank, np.zeros(2 << 20), np.zeros(2 << 20)
    with adaptcoll.configured(**SERVE):
        decisions = []
        for it in range(3):
            big[:] = it if rank == 0 else -1
            comm.Bcast(big, 0)
            small[:] = it + 1 if rank == 0 else -1
            comm.Bcast(small, 0)
            assert (big == it).all() and (small == it + 1).all()
            comm.Reduce(send, out, MPI.SUM, 0)
            MPI.COMM_WORLD.Reduce(send, want, MPI.SUM, 0)
            assert rank != 0 or (out == want).all()
            entries = _calls(comm)
            mine = [[v[4] for k, v in entries.items() if id(a) in k] for a in (big, small, send)]
            assert [len(found) for found in mine] == [1, 1, 1], [len(found) for found in mine]
            decisions.append([found[0] for found in mine])
        assert all(d is first for later in decisions[1:] for d, first in zip(later, decisions[0]))
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_ranks_may_remember_differently(mpi_ranks):
    """One rank reuses its arrays, the other passes fresh ones each time: the decisions still agree."""
    comm = _world()
    rank = comm.Get_rank()
    with adaptcoll.configured(**SERVE, reduce_segment_size="1K", allreduce_segment_size="1K"):
        keep_send, keep_out = np.zeros(1000), np.zeros(1000)
        for it in range(8):
            send = keep_send if rank == 0 else np.zeros(1000)
            out = keep_out if rank == 0 else np.zeros(1000)
            send[:] = it + rank
            comm.Allreduce(send, out, MPI.SUM)
            assert (out == 2 * it + 1).all()
            comm.Reduce(send, out, MPI.SUM, 1)
            if rank == 1:
                assert (out == 2 * it + 1).all()
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_blocking_run_fails_on_every_rank_when_counts_differ_again_and_again(mpi_ranks):
    """The blocking compiled run on a remembered decision: a differing count fails on every rank, each
    time, and the communicator stays usable once the counts agree again."""
    comm = _world()
    rank = comm.Get_rank()
    with adaptcoll.configured(**SERVE, allreduce_segment_size="1M"):
        good = np.ones(8)
        bad = np.ones(8 if rank == 0 else 6)
        for _ in range(3):
            comm.Allreduce(MPI.IN_PLACE, good, MPI.SUM)
            with pytest.raises((adaptcoll.MessageSizeError, adaptcoll.CollectiveError)):
                comm.Allreduce(MPI.IN_PLACE, bad, MPI.SUM)
            comm.Barrier()
            good[:] = 1
        comm.Allreduce(MPI.IN_PLACE, good, MPI.SUM)
        assert (good == 2).all()
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_remember_off_decides_every_call(mpi_ranks):
    comm = _world()
    with adaptcoll.configured(**SERVE, remember=False):
        buf = np.zeros(32)
        for it in range(3):
            buf[:] = it if comm.Get_rank() == 0 else -1
            comm.Bcast(buf, 0)
            assert (buf == it).all()
        assert not any(k[0] == "bcast" and k[3] == id(buf) for k in _calls(comm))
    comm.Free()
