"""Drop-in behaviour under MPI: `from adaptcoll import MPI`, install()/uninstall(), communicators derived
from adaptcoll ones, intercommunicators left native, pickle-based and persistent collectives."""

from __future__ import annotations

import gc
import operator

import numpy as np
import pytest
from mpi4py import MPI as mpi4py_MPI

import adaptcoll
from adaptcoll.comm import Cartcomm, Distgraphcomm, Graphcomm
from adaptcoll.forms import pickled
from adaptcoll.runtime.engine import engine


def _served_allreduce(comm, where):
    """An Allreduce on `comm` that adaptcoll must serve, checked against the sum of ranks."""
    before = adaptcoll.stats().get("Allreduce", {"adaptcoll": 0})["adaptcoll"]
    out = np.zeros(5, "i8")
    comm.Allreduce(np.full(5, comm.Get_rank() + 1, "i8"), out, mpi4py_MPI.SUM)
    n = comm.Get_size()
    assert (out == n * (n + 1) // 2).all(), where
    assert adaptcoll.stats()["Allreduce"]["adaptcoll"] == before + 1, where


@pytest.mark.mpi(ranks=[2, 4], timeout=120)
def test_module_install_and_derived_communicators(mpi_ranks):
    from adaptcoll import MPI

    world_plain = mpi4py_MPI.COMM_WORLD
    rank, size = world_plain.Get_rank(), world_plain.Get_size()
    with adaptcoll.configured(native_below=0):
        # the module: mpi4py's names, adaptcoll's predefined communicators
        assert isinstance(MPI.COMM_WORLD, adaptcoll.Intracomm) and isinstance(MPI.COMM_SELF, adaptcoll.Intracomm)
        assert world_plain == MPI.COMM_WORLD and MPI.COMM_SELF == mpi4py_MPI.COMM_SELF
        assert MPI.SUM is mpi4py_MPI.SUM and MPI.Intracomm is mpi4py_MPI.Intracomm and MPI.Get_version()
        assert "Allreduce" not in MPI.__all__ and "COMM_WORLD" in MPI.__all__ and "Wtime" in MPI.__all__
        namespace: dict = {}
        exec("from adaptcoll.MPI import *", namespace)
        assert namespace["COMM_WORLD"] is MPI.COMM_WORLD and namespace["DOUBLE"] is mpi4py_MPI.DOUBLE
        _served_allreduce(MPI.COMM_WORLD, "adaptcoll.MPI.COMM_WORLD")
        _served_allreduce(MPI.COMM_SELF, "adaptcoll.MPI.COMM_SELF")

        # install(): mpi4py's own module now hands out the same adaptcoll objects, uninstall() undoes it
        adaptcoll.install()
        try:
            from mpi4py import MPI as again

            assert again.COMM_WORLD is MPI.COMM_WORLD and again.COMM_SELF is MPI.COMM_SELF
            assert adaptcoll.dropin.installed()
            adaptcoll.install()  # idempotent
            _served_allreduce(again.COMM_WORLD, "installed COMM_WORLD")
        finally:
            adaptcoll.uninstall()
        assert mpi4py_MPI.COMM_WORLD is world_plain and type(mpi4py_MPI.COMM_WORLD) is mpi4py_MPI.Intracomm
        assert not adaptcoll.dropin.installed()
        adaptcoll.uninstall()  # idempotent

        # every way of deriving a communicator keeps it an adaptcoll one
        world = MPI.COMM_WORLD
        group = world.Get_group()
        derived = {
            "Dup": world.Dup(),
            "Clone": world.Clone(),
            "Dup_with_info": world.Dup_with_info(MPI.INFO_NULL),
            "Idup": None,
            "Split": world.Split(rank % 2, -rank),
            "Split_type": world.Split_type(MPI.COMM_TYPE_SHARED),
            "Create": world.Create(group),
            "Create_group": world.Create_group(group),
            "Create_from_group": adaptcoll.Intracomm.Create_from_group(group),
            "Create_cart": world.Create_cart([size], [True]),
            "Create_graph": world.Create_graph(list(range(1, size + 1)), [(r + 1) % size for r in range(size)]),
            "Create_dist_graph_adjacent": world.Create_dist_graph_adjacent([(rank - 1) % size], [(rank + 1) % size]),
        }
        idup, req = world.Idup()
        req.Wait()
        derived["Idup"] = idup
        derived["Dup of Split"] = derived["Split"].Dup()
        derived["Sub"] = derived["Create_cart"].Sub([True])
        derived["Split of Split"] = derived["Split"].Split(0, 0)
        group.Free()
        kinds = {
            "Create_cart": Cartcomm,
            "Sub": Cartcomm,
            "Create_graph": Graphcomm,
            "Create_dist_graph_adjacent": Distgraphcomm,
        }
        for name, comm in derived.items():
            assert isinstance(comm, adaptcoll.Intracomm), (name, type(comm))
            assert isinstance(comm, kinds.get(name, adaptcoll.Intracomm)), (name, type(comm))
            _served_allreduce(comm, name)
        assert derived["Create_cart"].Get_topo()[0] == [size]
        # colours that leave a rank out give COMM_NULL, as in mpi4py
        assert world.Split(MPI.UNDEFINED if rank == 0 else 0, 0) == MPI.COMM_NULL or rank != 0
        for comm in derived.values():
            comm.Free()

        # intercommunicators stay plain mpi4py ones (adaptcoll serves intracommunicators only)
        if size >= 2:
            half = world.Split(rank % 2, rank)
            inter = half.Create_intercomm(0, world, 1 - rank % 2, tag=7)
            assert type(inter) is MPI.Intercomm
            adaptcoll.reset_stats()
            buf = np.arange(4.0) if rank == 0 else np.zeros(4)
            root = MPI.ROOT if rank == 0 else (MPI.PROC_NULL if rank % 2 == 0 else 0)
            inter.Bcast(buf, root)
            if rank % 2 == 1:
                assert (buf == np.arange(4.0)).all()
            assert "Bcast" not in adaptcoll.stats()
            merged = inter.Merge(rank % 2 == 1)
            assert merged.Get_size() == size
            for c in (merged, inter, half):
                c.Free()


@pytest.mark.mpi(ranks=[1, 3], timeout=120)
def test_pickled_collectives_match_native(mpi_ranks):
    world = mpi4py_MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    saved = pickled.INLINE_BELOW
    big = np.arange(300_000, dtype="f8")  # 2.4 MB: an out-of-band pickle buffer
    try:
        with adaptcoll.configured(native_below=0, bcast_segment_size="64K"):
            for inline in (64 * 1024, 0):
                pickled.INLINE_BELOW = inline
                for root in range(size):
                    objects = [
                        None,
                        42,
                        "s" * 100_000,
                        {"a": big + root, "b": [np.ones(70_000)] * 2, "c": "x"},
                        [b"bytes" * 10_000, big[:10]],
                        np.arange(12).reshape(3, 4),
                    ]
                    for obj in objects:
                        adaptcoll.reset_stats()
                        got = comm.bcast(obj if rank == root else None, root)
                        ref = world.bcast(obj if rank == root else None, root)
                        assert repr(got) == repr(ref), (root, type(obj))
                        assert got is not obj or not isinstance(obj, (dict, list, np.ndarray))
                        row = adaptcoll.stats()["bcast"]
                        assert row["adaptcoll"] + row["native"] == 1
                    ops = [
                        (mpi4py_MPI.SUM, lambda r: [r, "x" * r]),
                        (mpi4py_MPI.SUM, lambda r: np.full(50_000, r)),
                        (mpi4py_MPI.MAX, lambda r: (r * 7) % 5),
                        (operator.add, lambda r: f"<{r}>"),
                        (lambda a, b: a + b, lambda r: (r,)),
                        (mpi4py_MPI.PROD, lambda r: r + 1.5),
                    ]
                    for op, make in ops:
                        got = comm.reduce(make(rank), op, root)
                        ref = world.reduce(make(rank), op, root)
                        assert repr(got) == repr(ref), (op, root, got, ref)
                        got = comm.allreduce(make(rank), op)
                        ref = world.allreduce(make(rank), op)
                        assert repr(got) == repr(ref), (op, got, ref)
            stats = adaptcoll.stats()
            assert stats["reduce"]["adaptcoll"] > 0 and stats["allreduce"]["adaptcoll"] > 0
            with pytest.raises(TypeError):
                comm.reduce(1, None)
            with adaptcoll.configured(bcast_algorithm="native"):
                adaptcoll.reset_stats()
                assert comm.bcast(big if rank == 0 else None, 0).sum() == big.sum()
                assert adaptcoll.stats()["bcast"]["native_reasons"] == {"algorithm=native": 1}
    finally:
        pickled.INLINE_BELOW = saved
    assert engine().pending == 0


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_persistent_requests_restart_and_free(mpi_ranks):
    world = mpi4py_MPI.COMM_WORLD
    MPI = mpi4py_MPI
    comm = adaptcoll.Intracomm(world).Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 5000
    with adaptcoll.configured(
        native_below=0, bcast_segment_size="4K", reduce_segment_size="2K", allreduce_segment_size="1K", tag_space=64
    ):
        b = np.zeros(n)
        s, r = np.zeros(n, "i8"), np.zeros(n, "i8")
        a_in, a_out = np.zeros(n, "f4"), np.zeros(n, "f4")
        inplace = np.zeros(n, "i4")
        pair = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT64_T]).Commit()
        nat = np.zeros(8)
        adaptcoll.reset_stats()
        requests = [
            comm.Bcast_init(b, root=size - 1),
            comm.Reduce_init(s, r, MPI.SUM, root=1 % size),
            comm.Allreduce_init(a_in, a_out, MPI.MAX),
            comm.Allreduce_init(MPI.IN_PLACE, inplace, MPI.SUM, info=MPI.INFO_NULL),
            comm.Bcast_init([nat, 4, pair], root=0),  # mixed signature: a native persistent request
        ]
        stats = adaptcoll.stats()
        row = stats["Bcast_init"]
        assert (row["adaptcoll"], row["native"], row["native_reasons"]) == (1, 1, {"datatype not served": 1})
        assert stats["Reduce_init"]["adaptcoll"] == 1 and stats["Allreduce_init"]["adaptcoll"] == 2
        assert all(req.Test() for req in requests)  # inactive requests test as complete
        reqs = requests[:4]
        for it in range(60):
            if rank == size - 1:
                b[:] = np.arange(n) * it
            s[:] = np.arange(n) + rank * it
            a_in[:] = (rank + it) % size
            inplace[:] = rank + it
            if rank == 0:
                nat[:] = it
            if it % 2:
                adaptcoll.Prequest.Startall(requests)
                adaptcoll.Request.Waitall(requests)
            else:
                for req in reqs:
                    req.Start()
                requests[4].Start()
                while not adaptcoll.Request.Testall(requests):
                    pass
                for req in requests:
                    assert req.Wait()
            np.testing.assert_array_equal(b, np.arange(n) * it)
            if rank == 1 % size:
                np.testing.assert_array_equal(r, size * np.arange(n) + it * sum(range(size)))
            np.testing.assert_array_equal(a_out, np.full(n, max((q + it) % size for q in range(size)), "f4"))
            np.testing.assert_array_equal(inplace, np.full(n, sum(range(size)) + size * it))
            np.testing.assert_array_equal(nat, np.full(8, it))
        requests[0].Start()
        with pytest.raises(RuntimeError):
            requests[0].Start()  # still active
        requests[0].Wait()
        for req in requests:
            req.Free()
        with pytest.raises(ValueError):
            requests[0].Start()
        pair.Free()
        del requests, reqs
        gc.collect()
        assert engine().pending == 0
        # the communicator's tag sequence was shared with ordinary calls all along
        x = np.arange(10.0) if rank == 0 else np.zeros(10)
        comm.Bcast(x, 0)
        assert (x == np.arange(10.0)).all()
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_predefined_communicators_behave_as_constants(mpi_ranks):
    """adaptcoll's COMM_WORLD / COMM_SELF act as mpi4py's constants: free() leaves them usable,
    Free() raises MPI's error and leaves them usable, they pickle by name (to themselves, also while
    installed, and so does a plain communicator sharing their handle), fromhandle/f2py give adaptcoll
    communicators equal to them, and a copy frees as any communicator does."""
    import pickle

    from adaptcoll import MPI

    for name in ("COMM_WORLD", "COMM_SELF"):
        comm = getattr(MPI, name)
        plain = getattr(mpi4py_MPI, name)
        for _ in range(3):
            comm.free()
            assert comm and comm == plain and comm.Get_size() == plain.Get_size()
        with pytest.raises(mpi4py_MPI.Exception):
            comm.Free()
        assert comm and comm.Get_rank() == plain.Get_rank()
        assert pickle.loads(pickle.dumps(comm)) is comm
        for other in (comm.py2f(),):
            again = adaptcoll.Intracomm.f2py(other)
            assert type(again) is adaptcoll.Intracomm and again == comm and again is not comm
        again = adaptcoll.Intracomm.fromhandle(comm.handle)
        assert type(again) is adaptcoll.Intracomm and again == comm
        clone = adaptcoll.Intracomm(comm)
        clone.free()
        assert not clone and comm  # a copy sharing the handle is not the constant
        with adaptcoll.configured(native_below=0):
            _served_allreduce(comm, f"{name} after free()")
    adaptcoll.install()
    try:
        for name in ("COMM_WORLD", "COMM_SELF"):
            comm = getattr(mpi4py_MPI, name)
            assert pickle.loads(pickle.dumps(comm)) is comm is getattr(MPI, name)
            copy = pickle.loads(pickle.dumps(mpi4py_MPI.Intracomm(comm)))
            assert copy == comm and copy is not comm
            comm.free()
            assert comm
    finally:
        adaptcoll.uninstall()
    assert pickle.loads(pickle.dumps(mpi4py_MPI.COMM_WORLD)) is mpi4py_MPI.COMM_WORLD
