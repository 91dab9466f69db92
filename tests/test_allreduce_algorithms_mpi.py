"""ADAPTCOLL_ALLREDUCE_ALGORITHM=ring|rabenseifner over MPI against native MPI: sizes around the block and
segment edges, dtypes and ops, in place and not, nonblocking and persistent, reproducible mode, a
non-commutative user op (rank order, or native with the reason counted), tiny tag spaces. One launch
loops over many cases (a launch costs seconds on 2 cores)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from exact_values import exact_data
from gpu_available import gpu_reason
from mpi4py import MPI
from noncommutative import matmul_mpi

import adaptcoll
from adaptcoll.forms.requests import Request

ALGORITHMS = ("ring", "rabenseifner")
SEG_BYTES = 32  # a few elements per segment: many segments per block


_data = exact_data


def _serving(algorithm: str, **more):
    return adaptcoll.configured(
        allreduce_algorithm=f"{algorithm}:segment_size={SEG_BYTES},max_segments=0", native_below=0, **more
    )


def _counts(size: int, itemsize: int) -> list[int]:
    seg = max(1, SEG_BYTES // itemsize)
    return sorted({0, 1, max(1, size - 1), seg - 1, seg, size * seg + 1, 5 * size * seg + 3})


def _served(name: str) -> int:
    return adaptcoll.stats().get(name, {}).get("adaptcoll", 0)


OPS = [("SUM", "f8"), ("SUM", "i4"), ("PROD", "f4"), ("MAX", "i8"), ("MIN", "f2"), ("BXOR", "u2"), ("LAND", "?")]


@pytest.mark.mpi(ranks=[1, 3, 4, 5], timeout=200)
def test_algorithms_equal_native(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    before = _served("Allreduce")
    calls = 0
    for algorithm in ALGORITHMS:
        with _serving(algorithm):
            for k, (op, dtype) in enumerate(OPS):
                for count in _counts(size, np.dtype(dtype).itemsize):
                    mine = _data(rank, count, dtype, k + count)
                    ref = np.zeros(count, dtype)
                    world.Allreduce(mine, ref, getattr(MPI, op))
                    got = np.zeros(count, dtype)
                    comm.Allreduce(mine, got, getattr(MPI, op))
                    label = f"{algorithm} {op} {dtype} count={count}"
                    np.testing.assert_array_equal(got, ref, err_msg=label)
                    buf = mine.copy()
                    comm.Allreduce(MPI.IN_PLACE, buf, getattr(MPI, op))
                    np.testing.assert_array_equal(buf, ref, err_msg=f"in place {label}")
                    buf = mine.copy()
                    comm.Allreduce(buf, buf, getattr(MPI, op))  # sendbuf is recvbuf: treated as IN_PLACE
                    np.testing.assert_array_equal(buf, ref, err_msg=f"aliased {label}")
                    calls += 3
    assert _served("Allreduce") - before == calls


@pytest.mark.mpi(ranks=[3, 4], timeout=150)
def test_nonblocking_persistent_and_large(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    for algorithm in ALGORITHMS:
        with _serving(algorithm):
            # several in flight at once, overlapping in time and tags, waited in reverse order
            counts = [1, 17, 100, 333]
            mine = [_data(rank, n, "i8", n) for n in counts]
            outs = [np.zeros(n, "i8") for n in counts]
            reqs = [comm.Iallreduce(m, o, MPI.SUM) for m, o in zip(mine, outs)]
            for req in reversed(reqs):
                req.Wait()
            for m, o in zip(mine, outs):
                ref = np.zeros_like(o)
                world.Allreduce(m, ref, MPI.SUM)
                np.testing.assert_array_equal(o, ref)
            # persistent: started several times with changing data
            send, recv = np.zeros(50, "f8"), np.zeros(50, "f8")
            preq = comm.Allreduce_init(send, recv, MPI.MAX)
            try:
                for rep in range(4):
                    send[:] = _data(rank, 50, "f8", rep)
                    preq.Start()
                    preq.Wait()
                    ref = np.zeros(50)
                    world.Allreduce(send, ref, MPI.MAX)
                    np.testing.assert_array_equal(recv, ref)
            finally:
                preq.Free()
        # larger messages with the shipped segment sizes
        with adaptcoll.configured(allreduce_algorithm=algorithm, native_below=0):
            for nbytes in (1 << 20, 3 * (1 << 20) + 8):
                n = nbytes // 4
                x = np.full(n, rank + 1, "f4")
                out = np.zeros(n, "f4")
                req = comm.Iallreduce(x, out, MPI.SUM)
                Request.Waitall([req])
                assert (out == size * (size + 1) // 2).all()
    stats = adaptcoll.stats()
    assert stats["Iallreduce"]["adaptcoll"] >= 2 * (len(counts) + 2)
    assert stats["Allreduce_init"]["adaptcoll"] >= 2


@pytest.mark.mpi(ranks=[3, 5], timeout=120)
def test_reproducible_mode_and_float_agreement(mpi_ranks):
    """Results on every rank are bit-identical and do not change between repeated calls (fixed fold order)."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    rng = np.random.default_rng(rank)
    mine = rng.standard_normal(3000) * 10.0 ** rng.integers(-8, 8, 3000)
    for algorithm, reproducible in itertools.product(ALGORITHMS, (False, True)):
        with _serving(algorithm, reproducible=reproducible):
            results = set()
            for _ in range(4):
                out = np.zeros_like(mine)
                comm.Allreduce(mine, out, MPI.SUM)
                results.add(out.tobytes())
            assert len(results) == 1
            everyone = world.allgather(results.pop())
            assert len(set(everyone)) == 1, f"{algorithm}: ranks disagree"
            ref = np.zeros_like(mine)
            world.Allreduce(mine, ref, MPI.SUM)
            np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-6 * np.abs(ref).max())


@pytest.mark.mpi(ranks=[3, 6], timeout=120)
def test_noncommutative_user_op(mpi_ranks):
    """Recursive halving folds in rank order (served); the ring goes native with the reason counted."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    op = MPI.Op.Create(matmul_mpi, commute=False)
    try:
        rng = np.random.default_rng(rank)
        before = _served("Allreduce")
        reasons_before = adaptcoll.stats().get("Allreduce", {}).get("native_reasons", {})
        native_before = reasons_before.get("non-commutative op with ring allreduce", 0)
        for algorithm in ALGORITHMS:
            with _serving(algorithm):
                for count in (1, 7, 8, 9, 100):
                    m = rng.integers(0, 251, (count, 4)).astype(np.uint32)
                    mine = m[:, 0] | (m[:, 1] << 8) | (m[:, 2] << 16) | (m[:, 3] << 24)
                    ref, got = np.zeros(count, np.uint32), np.zeros(count, np.uint32)
                    world.Allreduce(mine, ref, op)
                    comm.Allreduce(mine, got, op)
                    np.testing.assert_array_equal(got, ref, err_msg=f"{algorithm} count={count}")
        stats = adaptcoll.stats()["Allreduce"]
        assert _served("Allreduce") - before == 5  # the rabenseifner calls
        assert stats["native_reasons"]["non-commutative op with ring allreduce"] - native_before == 5
    finally:
        op.Free()


@pytest.mark.mpi(ranks=[2, 4], timeout=120)
def test_small_tag_spaces(mpi_ranks):
    """Operations in flight together over a tag space smaller than their segments: segments grow, tags
    are not shared by live operations; a tag space too small for one ring segment goes native."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    for algorithm in ALGORITHMS:
        with _serving(algorithm, tag_space=5):
            for rep in range(4):
                n = 3 + 23 * rep
                outs = [np.zeros(n, "i8") for _ in range(3)]
                reqs = [comm.Iallreduce(np.arange(n, dtype="i8") + k + rank, outs[k]) for k in range(3)]
                Request.Waitall(reqs)
                for k, o in enumerate(outs):
                    np.testing.assert_array_equal(o, size * (np.arange(n) + k) + sum(range(size)))
    with _serving("ring", tag_space=1):  # one segment needs two tags
        out = np.zeros(10)
        comm.Allreduce(np.ones(10), out)
        assert (out == size).all()
    assert adaptcoll.stats()["Allreduce"]["native_reasons"]["tag space too small for ring allreduce"] >= 1


@pytest.mark.mpi(ranks=[6], timeout=120)
def test_algorithms_at_six_ranks(mpi_ranks):
    """p = 6: not a power of two with more than one rank over (recursive halving folds 2 pairs first;
    5 ranks, elsewhere, fold one). Was 12 ranks (4 pairs): 6x oversubscribed here, and no different path."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    for algorithm in ALGORITHMS:
        with _serving(algorithm):
            for count, in_place in [(5, False), (6 * 4 + 1, True), (700, False)]:
                mine = _data(rank, count, "i8", count)
                ref = np.zeros(count, "i8")
                world.Allreduce(mine, ref, MPI.SUM)
                if in_place:
                    comm.Allreduce(MPI.IN_PLACE, mine, MPI.SUM)
                    got = mine
                else:
                    got = np.zeros(count, "i8")
                    comm.Allreduce(mine, got, MPI.SUM)
                np.testing.assert_array_equal(got, ref, err_msg=f"{algorithm} count={count}")


@pytest.mark.skipif(gpu_reason() is not None, reason=gpu_reason() or "")
@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_device_buffers(mpi_ranks):
    """CuPy arrays: folds are kernels polled by event, segments move device memory (or through staging)."""
    import cupy

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    for algorithm in ALGORITHMS:
        with adaptcoll.configured(allreduce_algorithm=f"{algorithm}:segment_size=4K", native_below=0):
            for op, dtype in [("SUM", "f4"), ("MAX", "i8"), ("PROD", "f8"), ("BXOR", "u2")]:
                host = _data(rank, 50_001, dtype, 3)
                ref = np.zeros_like(host)
                world.Allreduce(host, ref, getattr(MPI, op))
                out = cupy.zeros(host.size, dtype)
                comm.Allreduce(cupy.asarray(host), out, getattr(MPI, op))
                np.testing.assert_array_equal(cupy.asnumpy(out), ref, err_msg=f"{algorithm} {op} {dtype}")
                dev = cupy.asarray(host)
                comm.Allreduce(MPI.IN_PLACE, dev, getattr(MPI, op))
                np.testing.assert_array_equal(cupy.asnumpy(dev), ref, err_msg=f"in place {algorithm} {op} {dtype}")


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_strided_buffers_and_mixed_forms(mpi_ranks):
    """Buffers that are not back to back (a vector datatype) are packed and unpacked around the ring and
    recursive halving like around the trees, and a rank may describe its buffer differently."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    count = 1000
    strided = MPI.DOUBLE.Create_vector(count, 1, 2).Commit()
    try:
        for algorithm in ALGORITHMS:
            with _serving(algorithm):
                mine = _data(rank, count, "f8", 7)
                ref = np.zeros(count)
                world.Allreduce(mine, ref, MPI.SUM)
                before = _served("Allreduce")
                wide, dense = np.full(2 * count, -1.0), np.zeros(count)
                comm.Allreduce(mine, [wide, 1, strided] if rank != 1 else dense, MPI.SUM)
                if rank == 1:
                    np.testing.assert_array_equal(dense, ref, err_msg=algorithm)
                else:
                    np.testing.assert_array_equal(wide[::2], ref, err_msg=algorithm)
                    assert (wide[1::2] == -1.0).all(), f"{algorithm}: holes of the strided buffer were written"
                assert _served("Allreduce") - before == 1, algorithm
    finally:
        strided.Free()
