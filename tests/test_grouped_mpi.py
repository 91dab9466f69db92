"""Grouped Allreduce over MPI against native MPI, array by array: groups of 1..17 arrays of mixed sizes,
shapes and dtypes, every form (blocking, in place three ways, nonblocking with per-array requests,
persistent started twice), served and native units, packed buckets, several ops; errors on every rank
(one launch per rank count: a launch costs seconds on 2 cores)."""

from __future__ import annotations

import numpy as np
import pytest
from exact_values import exact_data
from mpi4py import MPI

import adaptcoll
from adaptcoll.forms.grouped import cache

DTYPES = ("f4", "f8", "i4", "f4", "i8")  # 1 rank: tests/test_grouped.py, in process
SETTINGS = (
    {},  # shipped rule: all small here, packed and native
    {"native_below": 0, "multi_pack_below": 64, "multi_bucket_size": 200},  # served alone and in buckets
    {"native_below": 0, "multi_pack_below": 0, "allreduce_segment_size": 64},  # every array alone, many segments
)


def _group(rank: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)  # same layout on every rank, rank-dependent values
    out = []
    for i in range(n):
        count = int(rng.integers(0, 90)) if i % 5 else int(rng.integers(0, 3))
        dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
        a = exact_data(rank, count, dtype, seed * 100 + i)
        out.append(a.reshape(-1, 1) if count % 2 == 0 and count else a)
    return out


def _reference(world: MPI.Intracomm, sends: list[np.ndarray], op: MPI.Op) -> list[np.ndarray]:
    refs = [np.empty_like(s) for s in sends]
    for s, r in zip(sends, refs):
        world.Allreduce(s, r, op)
    return refs


def _same(got: list[np.ndarray], ref: list[np.ndarray]) -> bool:
    return all(g.dtype == r.dtype and np.array_equal(g, r) for g, r in zip(got, ref))


@pytest.mark.mpi(ranks=[2, 3, 4, 5], timeout=180)
def test_grouped_equals_native(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world.Dup())
    rank = world.Get_rank()
    for k, settings in enumerate(SETTINGS):
        with adaptcoll.configured(**settings):
            for n in range(1, 18) if k < 2 else (1, 2, 9, 17):
                op = (MPI.SUM, MPI.MAX, MPI.PROD)[n % 3]
                sends = _group(rank, n, 17 * k + n)
                ref = _reference(world, sends, op)
                recvs = [np.full_like(s, 7) for s in sends]
                comm.Allreduce_multi(sends, recvs, op)
                assert _same(recvs, ref), (settings, n, "blocking")
                inplace = [s.copy() for s in sends]
                comm.Allreduce_multi(inplace, None, op)
                assert _same(inplace, ref), (settings, n, "recvbufs=None")
                inplace = [s.copy() for s in sends]
                req = comm.Iallreduce_multi(MPI.IN_PLACE, inplace, op)
                adaptcoll.Request.Waitall(req.requests[::-1])
                assert req.Test()
                assert _same(inplace, ref), (settings, n, "Iallreduce_multi IN_PLACE")
                mixed = [s.copy() for s in sends]
                send_mixed = [MPI.IN_PLACE if i % 2 else s for i, s in enumerate(sends)]
                for i in range(1, n, 2):
                    mixed[i] = sends[i].copy()
                comm.Iallreduce_multi(send_mixed, mixed, op).Wait()
                assert _same(mixed, ref), (settings, n, "per-array IN_PLACE")
                if n in (1, 8, 17):
                    recvs = [np.zeros_like(s) for s in sends]
                    preq = comm.Allreduce_multi_init(sends, recvs, op)
                    for _ in range(2):
                        for r in recvs:
                            r[...] = 3
                        preq.Start()
                        preq.Wait()
                        assert _same(recvs, ref), (settings, n, "Allreduce_multi_init")
                    preq.Free()
    stats = adaptcoll.stats()
    assert stats["Allreduce_multi"]["adaptcoll"] > 0 and stats["Allreduce_multi"]["native"] > 0
    _errors_on_every_rank(world, comm)
    cache.clear()
    comm.Free()


def _errors_on_every_rank(world: MPI.Intracomm, comm: adaptcoll.Intracomm) -> None:
    """The same bad arguments raise the same error on every rank, before anything is sent."""
    a, b = np.ones(4, "f4"), np.ones(4, "f8")
    cases = [
        (([a, a.copy()], [a.copy()]), ValueError, "2 sendbufs but 1 recvbufs"),
        (([a], [b]), ValueError, "is float32 but recvbufs"),
        (([np.ones(8, "f4")[::2]], None), BufferError, "not contiguous"),
        ((a, None), TypeError, "list or tuple"),
    ]
    for args, error, text in cases:
        with pytest.raises(error, match=text):
            comm.Allreduce_multi(*args)
        with pytest.raises(error, match=text):
            comm.Iallreduce_multi(*args)
    # a bad array on one rank only: that rank takes part with a copy and raises, the others finish
    rank, size = world.Get_rank(), world.Get_size()
    mine = np.full(5, rank + 1.0)
    if rank == size - 1:
        mine.flags.writeable = False
        with pytest.raises(BufferError, match=r"sendbufs\[1\] is read-only"):
            comm.Allreduce_multi([np.ones(3), mine])
        assert np.all(mine == rank + 1.0)
    else:
        ones = np.ones(3)
        comm.Allreduce_multi([ones, mine])
        assert np.all(ones == size) and np.all(mine == size * (size + 1) / 2)
    # the communicator still works afterwards, on every rank
    x = [np.full(3, world.Get_rank() + 1.0)]
    comm.Allreduce_multi(x)
    assert np.all(x[0] == world.Get_size() * (world.Get_size() + 1) / 2)


DEVICE_SETTINGS = (
    {},  # shipped: every bucket below the device threshold, staged whole
    {"device_native_below": 0, "multi_device_bucket_size": 200},  # served buckets, several per dtype
    {"device_native_below": 0, "multi_device_bucket_size": 8, "allreduce_segment_size": 64},  # cap < one array
    {"multi_device_pack_below": 0},  # none packed: each device array alone
)


@pytest.mark.mpi(ranks=[2, 3], timeout=240)
def test_grouped_device_equals_native(mpi_ranks, monkeypatch):
    """Device arrays (the stand-in CuPy of tests/fake_device.py, MPI not CUDA-aware) packed on the device
    beside host arrays: every form against native per-array Allreduce on host copies, bucket caps of
    several sizes, persistent started twice with the inputs changed between starts; buckets are packed."""

    import fake_device as fd

    from adaptcoll.backends import cupy_backend

    cupy, _ = fd.patch_in(monkeypatch, seed=7)
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world.Dup())
    rank = world.Get_rank()

    def on_device(arrays, where):  # where[i]: 0 host, 1 CuPy array, 2 __cuda_array_interface__ only
        return [a if w == 0 else cupy.asarray(a) if w == 1 else fd.CAIBuffer(a) for a, w in zip(arrays, where)]

    def host(arrays):
        return [a if type(a) is np.ndarray else a.get() if hasattr(a, "get") else np.asarray(a) for a in arrays]

    def fill(arrays, values):
        for a, v in zip(arrays, values):
            if type(a) is np.ndarray:
                a[...] = v
            else:
                a.set(v)

    adaptcoll.reset_stats()
    for k, settings in enumerate(DEVICE_SETTINGS):
        with adaptcoll.configured(**settings):
            for n in (1, 2, 5, 9, 17, 70):  # 70: buckets of many arrays, copied by the gather/scatter kernels
                op = (MPI.SUM, MPI.MAX, MPI.PROD)[n % 3]
                sends_h = _group(rank, n, 31 * k + n)
                where = [int(x) for x in np.random.default_rng(n).integers(0, 3, n)]
                if n > 1:
                    where[0] = 1  # at least one device array
                ref = _reference(world, sends_h, op)
                sends = on_device(sends_h, where)
                recvs = on_device([np.full_like(s, 7) for s in sends_h], where)
                comm.Allreduce_multi(sends, recvs, op)
                assert _same(host(recvs), ref), (settings, n, "blocking")
                inplace = on_device([s.copy() for s in sends_h], where)
                comm.Allreduce_multi(inplace, None, op)
                assert _same(host(inplace), ref), (settings, n, "recvbufs=None")
                inplace = on_device([s.copy() for s in sends_h], where)
                req = comm.Iallreduce_multi(MPI.IN_PLACE, inplace, op)
                adaptcoll.Request.Waitall(req.requests[::-1])
                assert req.Test()
                assert _same(host(inplace), ref), (settings, n, "Iallreduce_multi IN_PLACE")
                mixed = on_device([s.copy() if i % 2 else np.full_like(s, 5) for i, s in enumerate(sends_h)], where)
                send_mixed = [MPI.IN_PLACE if i % 2 else s for i, s in enumerate(sends)]
                comm.Iallreduce_multi(send_mixed, mixed, op).Wait()
                assert _same(host(mixed), ref), (settings, n, "per-array IN_PLACE")
                if n in (5, 17):
                    sends = on_device([s.copy() for s in sends_h], where)
                    recvs = on_device([np.zeros_like(s) for s in sends_h], where)
                    preq = comm.Allreduce_multi_init(sends, recvs, op)
                    for step in range(2):
                        changed = [s + step if op != MPI.PROD else s * (1 - 2 * step) for s in sends_h]
                        fill(sends, changed)
                        fill(recvs, [np.full_like(s, 3) for s in sends_h])
                        preq.Start()
                        preq.Wait()
                        assert _same(host(recvs), _reference(world, changed, op)), (settings, n, "init", step)
                    preq.Free()
    notes = adaptcoll.stats()["Allreduce_multi"].get("notes", {})
    assert notes.get("packed device unit", 0) > 0, notes
    gather = cupy_backend.load_kernel("adaptcoll_gather_pieces").kernel
    assert len(gather.launches) > 0  # the batched copies were taken
    _device_errors_on_one_rank(world, comm, fd)
    cache.clear()
    comm.Free()


def _device_errors_on_one_rank(world: MPI.Intracomm, comm: adaptcoll.Intracomm, fd) -> None:
    """A bad device array on one rank only: that rank packs a device copy in its place (every rank lays
    out the same buckets) and raises once the call is done; the others finish with the right sums."""
    rank, size = world.Get_rank(), world.Get_size()
    good = fd.CAIBuffer(np.ones(3))
    mine = fd.CAIBuffer(np.full(5, rank + 1.0), readonly=rank == size - 1)
    if rank == size - 1:
        with pytest.raises(BufferError, match=r"sendbufs\[1\] is read-only"):
            comm.Allreduce_multi([good, mine])
        assert np.all(mine.get() == rank + 1.0)  # not written
    else:
        comm.Allreduce_multi([good, mine])
        assert np.all(mine.get() == size * (size + 1) / 2)
    assert np.all(good.get() == size)
    send = fd.Strided(np.arange(12.0)) if rank == 0 else fd.CAIBuffer(np.ones(6))
    recvs = [fd.CAIBuffer(np.zeros(6)), fd.CAIBuffer(np.zeros(2))]
    if rank == 0:
        with pytest.raises(BufferError, match=r"sendbufs\[0\] is not contiguous"):
            comm.Allreduce_multi([send, fd.CAIBuffer(np.ones(2))], recvs)
    else:
        comm.Allreduce_multi([send, fd.CAIBuffer(np.ones(2))], recvs)
        assert np.array_equal(recvs[0].get(), np.arange(0.0, 12.0, 2) + size - 1)
    assert np.all(recvs[1].get() == size)
    x = [fd.CAIBuffer(np.full(3, rank + 1.0)), fd.CAIBuffer(np.ones(2))]  # the communicator still works
    comm.Allreduce_multi(x)
    assert np.all(x[0].get() == size * (size + 1) / 2) and np.all(x[1].get() == size)
