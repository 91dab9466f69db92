"""adaptcoll's Bcast/Reduce/Allreduce against native MPI on 1..5 ranks, every tree, several roots and sizes.

Each test is one launch that loops over many cases (a launch costs seconds on 2 cores); every case
compares with the native collective on the same data and checks that adaptcoll served the call.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from exact_values import exact_data
from mpi4py import MPI
from noncommutative import matmul_mpi

import adaptcoll
from adaptcoll.plans import trees

RANKS = [1, 4, 5]  # 1, a power of two and not (2, 3 and 8 ranks reach no other path; 8 is 4x oversubscribed here)
TREES = list(trees.KINDS)  # every tree kind
SEG_BYTES = 64  # small segments: many segments per message, so the windows and queues are exercised


def _roots(size: int) -> list[int]:
    return sorted({0, size - 1, size // 2})


def _counts(itemsize: int) -> list[int]:
    seg = max(1, SEG_BYTES // itemsize)
    return [0, 1, seg - 1, seg, seg + 1, 7 * seg + 3]


_data = exact_data


def _serving(comm: MPI.Intracomm, tree: str):
    """Settings that make adaptcoll serve every size with small segments on `tree`."""
    topo = f"nodes={min(3, comm.Get_size())}" if comm.Get_size() > 1 else ""
    return adaptcoll.configured(
        bcast_algorithm=tree,
        reduce_algorithm=tree,
        allreduce_algorithm=tree,
        bcast_segment_size=SEG_BYTES,
        reduce_segment_size=SEG_BYTES,
        allreduce_segment_size=SEG_BYTES,
        native_below=0,
        topology=topo,
    )


def _served(name: str) -> int:
    return adaptcoll.stats().get(name, {}).get("adaptcoll", 0)


@pytest.mark.mpi(ranks=RANKS, timeout=240)
def test_bcast_equals_native(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    before = _served("Bcast")
    calls = 0
    for tree in TREES:
        with _serving(world, tree):
            for root, dtype in itertools.product(_roots(size), ["f8", "i1", "c16", "u2"]):
                for count in _counts(np.dtype(dtype).itemsize):
                    ref = _data(root, count, dtype, 7) if rank == root else np.zeros(count, dtype)
                    got = ref.copy()
                    world.Bcast(ref, root)
                    comm.Bcast(got, root)
                    calls += 1
                    np.testing.assert_array_equal(got, ref, err_msg=f"{tree} root={root} count={count} {dtype}")
    assert _served("Bcast") - before == calls


OP_TYPES = {
    "SUM": ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16"],
    "PROD": ["i1", "u2", "i4", "i8", "f4", "f8", "c16"],
    "MAX": ["i1", "u1", "i2", "u4", "i8", "u8", "f2", "f4", "f8"],
    "MIN": ["i1", "u2", "i4", "u8", "f4", "f8"],
    "LAND": ["i4", "u1", "?"],
    "LOR": ["i2", "u8", "?"],
    "LXOR": ["i8", "u4", "?"],
    "BAND": ["i1", "u2", "i4", "u8"],
    "BOR": ["u1", "i2", "u4", "i8"],
    "BXOR": ["i1", "u2", "i4", "u8"],
}


def _check_reduce(comm, world, rank, root, op, dtype, count, salt, label):
    mine = _data(rank, count, dtype, salt)
    ref = np.zeros(count, dtype)
    got = np.zeros(count, dtype)
    world.Reduce(mine, ref, getattr(MPI, op), root)
    comm.Reduce(mine, got, getattr(MPI, op), root)
    if rank == root:
        np.testing.assert_array_equal(got, ref, err_msg=f"Reduce {label}")
    ref_all = np.zeros(count, dtype)
    got_all = np.zeros(count, dtype)
    world.Allreduce(mine, ref_all, getattr(MPI, op))
    comm.Allreduce(mine, got_all, getattr(MPI, op))
    np.testing.assert_array_equal(got_all, ref_all, err_msg=f"Allreduce {label}")


@pytest.mark.mpi(ranks=RANKS, timeout=240)
def test_reduce_allreduce_trees_roots_sizes(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    before = _served("Reduce"), _served("Allreduce")
    calls = 0
    for tree in TREES:
        with _serving(world, tree):
            for root, (op, dtype) in itertools.product(_roots(size), [("SUM", "f8"), ("BXOR", "i4"), ("MAX", "f2")]):
                for count in _counts(np.dtype(dtype).itemsize):
                    _check_reduce(
                        comm,
                        world,
                        rank,
                        root,
                        op,
                        dtype,
                        count,
                        root + count,
                        f"{tree} root={root} {op} {dtype} count={count}",
                    )
                    calls += 1
    assert (_served("Reduce") - before[0], _served("Allreduce") - before[1]) == (calls, calls)


@pytest.mark.mpi(ranks=[1, 3], timeout=240)
def test_every_op_and_type(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    before = _served("Reduce")
    calls = 0
    for reproducible in (False, True):
        with _serving(world, "binomial"), adaptcoll.configured(reproducible=reproducible):
            for op, dtypes in OP_TYPES.items():
                for dtype in dtypes:
                    count = 3 * max(1, SEG_BYTES // np.dtype(dtype).itemsize) + 1
                    _check_reduce(
                        comm, world, rank, size - 1, op, dtype, count, 3, f"{op} {dtype} reproducible={reproducible}"
                    )
                    calls += 1
    assert _served("Reduce") - before == calls


@pytest.mark.mpi(ranks=[3, 5], timeout=180)
def test_noncommutative_user_op_rank_order(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    op = MPI.Op.Create(matmul_mpi, commute=False)
    try:
        rng = np.random.default_rng(rank)
        before = _served("Reduce"), _served("Allreduce")
        with _serving(world, "binomial"):
            for count in (1, 15, 16, 17, 100):
                m = rng.integers(0, 251, (count, 4)).astype(np.uint32)
                mine = m[:, 0] | (m[:, 1] << 8) | (m[:, 2] << 16) | (m[:, 3] << 24)
                ref, got = np.zeros(count, np.uint32), np.zeros(count, np.uint32)
                world.Reduce(mine, ref, op, 0)
                comm.Reduce(mine, got, op, 0)
                if rank == 0:
                    np.testing.assert_array_equal(got, ref)
                world.Allreduce(mine, ref, op)
                comm.Allreduce(mine, got, op)
                np.testing.assert_array_equal(got, ref)
                # root != 0: handed to native (counted), still correct
                comm.Reduce(mine, got, op, world.Get_size() - 1)
                world.Reduce(mine, ref, op, world.Get_size() - 1)
                if rank == world.Get_size() - 1:
                    np.testing.assert_array_equal(got, ref)
        assert _served("Reduce") - before[0] == 5 and _served("Allreduce") - before[1] == 5
        assert adaptcoll.stats()["Reduce"]["native_reasons"].get("non-commutative op with root != 0", 0) >= 5
    finally:
        op.Free()


@pytest.mark.mpi(ranks=[2, 4], timeout=180)
def test_in_place_and_aliased(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    with _serving(world, "binomial"):
        for count in (1, 9, 100):
            mine = _data(rank, count, "i8", 5)
            ref = np.zeros(count, "i8")
            world.Allreduce(mine, ref, MPI.SUM)
            buf = mine.copy()
            comm.Allreduce(MPI.IN_PLACE, buf, MPI.SUM)
            np.testing.assert_array_equal(buf, ref)
            buf = mine.copy()
            comm.Allreduce(buf, buf, MPI.SUM)  # sendbuf is recvbuf: treated as IN_PLACE
            np.testing.assert_array_equal(buf, ref)
            for root in _roots(size):
                world.Reduce(mine, ref, MPI.SUM, root)
                buf = mine.copy()
                if rank == root:
                    comm.Reduce(MPI.IN_PLACE, buf, MPI.SUM, root)
                    np.testing.assert_array_equal(buf, ref)
                else:
                    comm.Reduce(buf, None, MPI.SUM, root)
                    np.testing.assert_array_equal(buf, mine)  # a non-root's sendbuf is never written


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_large_messages_default_settings(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    with adaptcoll.configured(native_below=0):
        for nbytes in (1 << 20, 5 * (1 << 20) + 8):
            n = nbytes // 8
            a = np.arange(n, dtype="f8") if rank == 1 else np.zeros(n)
            comm.Bcast(a, 1)
            np.testing.assert_array_equal(a, np.arange(n, dtype="f8"))
            mine = np.full(n, rank + 1.0)
            out = np.zeros(n)
            comm.Reduce(mine, out, MPI.SUM, 2)
            if rank == 2:
                assert (out == sum(range(1, world.Get_size() + 1))).all()
            comm.Allreduce(mine, out, MPI.MAX)
            assert (out == world.Get_size()).all()


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_minloc_goes_native_and_derived_types_are_served_correctly(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    pair = np.dtype([("value", "f8"), ("index", "i4")], align=True)  # MPI.DOUBLE_INT layout
    mine = np.zeros(5, pair)
    mine["value"] = (np.arange(5) - rank) ** 2
    mine["index"] = rank
    with adaptcoll.configured(native_below=0):
        for op in (MPI.MINLOC, MPI.MAXLOC):
            ref, got = np.zeros(5, pair), np.zeros(5, pair)
            world.Allreduce([mine, MPI.DOUBLE_INT], [ref, MPI.DOUBLE_INT], op)
            comm.Allreduce([mine, MPI.DOUBLE_INT], [got, MPI.DOUBLE_INT], op)
            assert ref.tobytes() == got.tobytes()
        # a derived (contiguous) datatype of one basic type: served by its signature (8 doubles)
        vec = MPI.DOUBLE.Create_contiguous(2).Commit()
        try:
            data = np.arange(8, dtype="f8") + 1 if rank == 1 else np.zeros(8)
            comm.Bcast([data, 4, vec], 1)
            np.testing.assert_array_equal(data, np.arange(8, dtype="f8") + 1)
        finally:
            vec.Free()
    stats = adaptcoll.stats()
    assert stats["Allreduce"]["native_reasons"].get("datatype not served", 0) >= 2, stats  # double + int
    assert stats["Bcast"]["adaptcoll"] >= 1, stats
