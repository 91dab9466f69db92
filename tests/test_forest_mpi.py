"""`forest:PATH` over MPI: a schedule file written by the test (random weighted forests, a root of its own
for some ranks) serves Bcast / Reduce / Allreduce with the results of native MPI for several dtype/op
pairs at every root the file has; a root it has none for goes native (counted); non-commutative ops keep
rank order; a schedule for another number of ranks, or a bad file, raises the same error on every rank."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from forest_files import random_schedule
from mpi4py import MPI
from noncommutative import matmul_mpi

import adaptcoll
from adaptcoll.decision.decide import NO_FOREST_AT_ROOT

CASES = [("f8", MPI.SUM), ("i4", MPI.MAX), ("i8", MPI.PROD), ("f4", MPI.MIN)]


def _shared_dir(world: MPI.Intracomm) -> Path:
    """A directory every rank sees (rank 0 makes it: the ranks share this machine)."""
    name = tempfile.mkdtemp(prefix="adaptcoll-forest-") if world.Get_rank() == 0 else None
    return Path(world.bcast(name, 0))


def _write(world: MPI.Intracomm, path: Path, text: str) -> str:
    if world.Get_rank() == 0:
        path.write_text(text)
    world.Barrier()
    return f"forest:{path}"


def _remove(world: MPI.Intracomm, folder: Path) -> None:
    world.Barrier()
    if world.Get_rank() == 0:
        shutil.rmtree(folder)


def _error(call) -> str:
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _serving(algorithm: str):
    return adaptcoll.configured(
        bcast_algorithm=algorithm,
        reduce_algorithm=algorithm,
        allreduce_algorithm=algorithm,
        bcast_segment_size=64,
        reduce_segment_size=64,
        allreduce_segment_size=64,
        max_segments=0,
        native_below=0,
    )


@pytest.mark.mpi(ranks=[2, 5], timeout=60)
def test_forest_collectives_equal_native(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = adaptcoll.Intracomm(world)
    folder = _shared_dir(world)
    roots = sorted({0, size - 1})
    schedule = random_schedule(size, roots, random.Random(size))
    algorithm = _write(world, folder / "forest.json", json.dumps(schedule))
    rng = np.random.default_rng(rank)
    stats0 = adaptcoll.stats()
    served0 = {c: stats0.get(c, {}).get("adaptcoll", 0) for c in ("Bcast", "Reduce", "Allreduce")}
    calls = 0
    with _serving(algorithm):
        for count in (1, 37, 300):
            for dtype, op in CASES:
                mine = (rng.integers(1, 4, count) if op == MPI.PROD else rng.integers(-50, 50, count)).astype(dtype)
                for root in roots:
                    ref = mine.copy() if rank == root else np.zeros(count, dtype)
                    got = ref.copy()
                    world.Bcast(ref, root)
                    comm.Bcast(got, root)
                    np.testing.assert_array_equal(got, ref, err_msg=f"Bcast {dtype} root={root}")
                    ref_r, got_r = np.zeros(count, dtype), np.zeros(count, dtype)
                    world.Reduce(mine, ref_r, op, root)
                    comm.Reduce(mine, got_r, op, root)
                    if rank == root:
                        np.testing.assert_array_equal(got_r, ref_r, err_msg=f"Reduce {dtype} {op} root={root}")
                    calls += 1
                ref_a, got_a = np.zeros(count, dtype), np.zeros(count, dtype)
                world.Allreduce(mine, ref_a, op)
                comm.Allreduce(mine, got_a, op)
                np.testing.assert_array_equal(got_a, ref_a, err_msg=f"Allreduce {dtype} {op}")
        if size > 2:  # a root the schedule has no forest for: native MPI, counted in stats()
            middle = size // 2
            ref = np.arange(9.0) if rank == middle else np.zeros(9)
            comm.Bcast(ref, middle)
            assert (ref == np.arange(9.0)).all()
    stats = adaptcoll.stats()
    assert stats["Bcast"]["adaptcoll"] - served0["Bcast"] == calls
    assert stats["Reduce"]["adaptcoll"] - served0["Reduce"] == calls
    assert stats["Allreduce"]["adaptcoll"] - served0["Allreduce"] == calls // len(roots)
    if size > 2:
        assert stats["Bcast"]["native_reasons"].get(NO_FOREST_AT_ROOT.reason, 0) >= 1
    assert any(label.startswith(algorithm) for label in stats["Bcast"]["configs"]), stats["Bcast"]["configs"]
    _non_commutative_keeps_rank_order(world, comm, folder)
    _remove(world, folder)


def _non_commutative_keeps_rank_order(world: MPI.Intracomm, comm: MPI.Intracomm, folder: Path) -> None:
    """A forest folding in rank order (a chain and a star at root 0) runs a non-commutative op itself; any
    other forest (the star serving its children backwards) leaves it to the rank-ordered tree, noted in
    stats()."""
    rank, size = world.Get_rank(), world.Get_size()
    chain = {"weight": 2, "children": [[r + 1] if r + 1 < size else [] for r in range(size)]}
    star = {"weight": 1, "children": [list(range(1, size))] + [[] for _ in range(size - 1)]}
    backwards = {"weight": 1, "children": [list(range(size - 1, 0, -1))] + [[] for _ in range(size - 1)]}
    op = MPI.Op.Create(matmul_mpi, commute=False)
    note = "forest: non-commutative op on the rank-ordered tree (the forest does not fold in rank order)"
    try:
        for name, trees in (("ordered", [chain, star]), ("other", [chain, backwards])):
            schedule = {"format": "adaptcoll.schedule/1", "collective": "reduce", "ranks": size,
                        "forests": [{"root": 0, "trees": trees}]}  # fmt: skip
            algorithm = _write(world, folder / f"{name}.json", json.dumps(schedule))
            before = adaptcoll.stats().get("Allreduce", {}).get("notes", {}).get(note, 0)
            with _serving(algorithm):
                m = np.random.default_rng(rank).integers(0, 251, (50, 4)).astype(np.uint32)
                mine = m[:, 0] | (m[:, 1] << 8) | (m[:, 2] << 16) | (m[:, 3] << 24)
                ref, got = np.zeros(50, np.uint32), np.zeros(50, np.uint32)
                world.Reduce(mine, ref, op, 0)
                comm.Reduce(mine, got, op, 0)
                if rank == 0:
                    np.testing.assert_array_equal(got, ref, err_msg=name)
                world.Allreduce(mine, ref, op)
                comm.Allreduce(mine, got, op)
                np.testing.assert_array_equal(got, ref, err_msg=name)
            noted = adaptcoll.stats()["Allreduce"].get("notes", {}).get(note, 0) - before
            assert noted == (1 if name == "other" and size > 2 else 0), (name, noted)
    finally:
        op.Free()


@pytest.mark.mpi(ranks=[3], timeout=40)
def test_wrong_size_and_bad_files_raise_the_same_on_every_rank(mpi_ranks):
    world = MPI.COMM_WORLD
    size = world.Get_size()
    comm = adaptcoll.Intracomm(world)
    folder = _shared_dir(world)
    wrong = _write(world, folder / "wrong.json", json.dumps(random_schedule(size + 1, [0], random.Random(1))))
    a = np.ones(20)
    with _serving(wrong):
        for call in (lambda: comm.Bcast(a.copy(), 0), lambda: comm.Allreduce(a, a.copy(), MPI.SUM)):
            message = _error(call)
            assert f"is for {size + 1} ranks but the communicator has {size}" in message, message
            assert world.allgather(message) == [message] * size
    bad = _write(world, folder / "bad.json", '{"format": "adaptcoll.schedule/1", "ranks": 2}')
    message = _error(lambda: adaptcoll.configure(reduce_algorithm=bad))
    assert message.startswith(
        f"ValueError: reduce_algorithm: schedule {folder / 'bad.json'}: collective: must be one of"
    )
    assert world.allgather(message) == [message] * size
    # the communicator still works afterwards
    x = np.arange(5.0) if world.Get_rank() == 0 else np.zeros(5)
    comm.Bcast(x, 0)
    assert (x == np.arange(5.0)).all()
    _remove(world, folder)
