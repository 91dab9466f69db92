"""The shared-memory node level over MPI: results equal native MPI for every collective, op and type on
1-8 ranks and 1-3 declared nodes; slot reuse across many blocking and nonblocking calls on several
communicators; the set-up at the first blocking call; the fallback when no window can be had; the
window freed with its communicator; a rank killed mid-operation ends the job."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from exact_values import exact_data
from mpi4py import MPI
from noncommutative import matmul_mpi

import adaptcoll
from adaptcoll import Request
from adaptcoll.state import shm
from adaptcoll.state.comm_state import comm_state

SLOT = 64  # bytes per slot: messages take many slots and the rings wrap often


def _shm(algorithm: str = "shm", **more):
    """Settings that make adaptcoll serve every size with the node level and small slots."""
    values = dict(
        native_below=0,
        bcast_algorithm=algorithm,
        reduce_algorithm=algorithm,
        allreduce_algorithm=algorithm,
        shm_segment_size=SLOT,
        shm_slots=3,
    )
    values.update(more)
    return adaptcoll.configured(**values)


def _topologies(size: int) -> list[tuple[str, str]]:
    """(declared topology, algorithm) pairs: one node, and 2-3 declared nodes with several inner shapes."""
    found = [("", "shm")]
    if size >= 2:
        found.append(("nodes=2", "shm"))
    if size >= 3:
        uneven = ",".join("0" if r == 0 else "1" if r < size - 1 else "2" for r in range(size))
        found.append((f"node={uneven}", "topo:inner=pipeline,intra=shm"))
    return found


_data = exact_data


def _counts(itemsize: int) -> list[int]:
    per_slot = SLOT // itemsize
    return [0, 1, per_slot - 1, per_slot, 9 * per_slot + 3]


OP_TYPES = [
    ("SUM", "i1"),
    ("SUM", "u2"),
    ("SUM", "i4"),
    ("SUM", "f2"),
    ("SUM", "f4"),
    ("SUM", "f8"),
    ("SUM", "c8"),
    ("SUM", "c16"),
    ("PROD", "i8"),
    ("PROD", "c16"),
    ("MAX", "i1"),
    ("MAX", "f4"),
    ("MIN", "u8"),
    ("MIN", "f8"),
    ("LAND", "?"),
    ("LOR", "i4"),
    ("LXOR", "?"),
    ("BAND", "u1"),
    ("BOR", "i8"),
    ("BXOR", "u4"),
]


def _notes(name: str) -> dict[str, int]:
    return adaptcoll.stats().get(name, {}).get("notes", {})


def _served(name: str) -> int:
    return adaptcoll.stats().get(name, {}).get("adaptcoll", 0)


@pytest.mark.mpi(ranks=[1, 2, 5], timeout=300)
def test_every_collective_op_and_type_equals_native(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    before = {n: _served(n) for n in ("Bcast", "Reduce", "Allreduce")}
    calls = {n: 0 for n in before}
    for t, (topology, algorithm) in enumerate(_topologies(size)):
        comm = adaptcoll.Intracomm(world.Dup())  # the node groups are read once per communicator
        try:
            with _shm(algorithm, topology=topology):
                roots = itertools.cycle(sorted({0, size - 1, size // 2}))
                for dtype in ("u1", "f8", "c16"):
                    for count in _counts(np.dtype(dtype).itemsize):
                        root = next(roots)
                        ref = _data(root, count, dtype, count) if rank == root else np.zeros(count, dtype)
                        got = ref.copy()
                        world.Bcast(ref, root)
                        comm.Bcast(got, root)
                        calls["Bcast"] += 1
                        np.testing.assert_array_equal(got, ref, err_msg=f"Bcast {topology} {dtype} {count} {root}")
                for (op, dtype), in_place in itertools.product(OP_TYPES, (False, True)):
                    mpi_op = getattr(MPI, op)
                    for count in _counts(np.dtype(dtype).itemsize):
                        root = next(roots)
                        label = f"{op} {dtype} count={count} root={root} {topology} in_place={in_place}"
                        mine = _data(rank, count, dtype, count + t)
                        ref = np.zeros(count, dtype)
                        world.Reduce(mine, ref, mpi_op, root)
                        got = mine.copy() if in_place and rank == root else np.zeros(count, dtype)
                        comm.Reduce(MPI.IN_PLACE if in_place and rank == root else mine, got, mpi_op, root)
                        if rank == root:
                            np.testing.assert_array_equal(got, ref, err_msg=f"Reduce {label}")
                        world.Allreduce(mine, ref, mpi_op)
                        if in_place:
                            got = mine.copy()
                            comm.Allreduce(MPI.IN_PLACE, got, mpi_op)
                        else:
                            got = np.zeros_like(mine)
                            comm.Allreduce(mine, got, mpi_op)
                        np.testing.assert_array_equal(got, ref, err_msg=f"Allreduce {label}")
                        calls["Reduce"] += 1
                        calls["Allreduce"] += 1
            level = comm_state(comm).shm
            assert isinstance(level, shm.NodeLevel), level
            assert level.nodes.count == (1 if not topology else min(size, 2 if topology == "nodes=2" else 3))
        finally:
            MPI.Intracomm.Free(comm)
    for name, n in calls.items():
        assert _served(name) - before[name] == n
        assert not _notes(name), _notes(name)  # every call ran on the node level


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_strided_buffers_are_packed_around_the_node_level(mpi_ranks):
    """A vector datatype (elements not back to back) is packed into scratch before the node level reads
    it and unpacked after, like around the trees; the holes are never written."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    count = 500
    strided = MPI.DOUBLE.Create_vector(count, 1, 2).Commit()
    try:
        for topo, algorithm in _topologies(world.Get_size()):
            with _shm(algorithm, topology=topo):
                mine = _data(rank, count, "f8", 3)
                ref = np.zeros(count)
                world.Allreduce(mine, ref, MPI.SUM)
                wide = np.full(2 * count, -1.0)
                wide[::2] = mine
                comm.Allreduce(MPI.IN_PLACE, [wide, 1, strided], MPI.SUM)
                np.testing.assert_array_equal(wide[::2], ref, err_msg=f"allreduce {topo} {algorithm}")
                assert (wide[1::2] == -1.0).all(), f"allreduce {topo} {algorithm}: holes written"
                wide = np.full(2 * count, -1.0)
                if rank == 1:
                    wide[::2] = mine
                comm.Bcast([wide, 1, strided], root=1)
                bref = mine.copy()
                world.Bcast(bref, root=1)
                np.testing.assert_array_equal(wide[::2], bref, err_msg=f"bcast {topo} {algorithm}")
                assert (wide[1::2] == -1.0).all(), f"bcast {topo} {algorithm}: holes written"
        counted = adaptcoll.stats()
        assert counted["Allreduce"]["adaptcoll"] >= 1
        assert not counted["Allreduce"].get("notes") and not counted["Bcast"].get("notes"), counted  # node level used
    finally:
        strided.Free()


@pytest.mark.mpi(ranks=[3, 4], timeout=120)
def test_noncommutative_op_in_rank_order_on_one_node_and_trees_across_nodes(mpi_ranks):
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    op = MPI.Op.Create(matmul_mpi, commute=False)
    try:
        for topology, note_expected in (("", False), ("nodes=2", True)):
            comm = adaptcoll.Intracomm(world.Dup())
            adaptcoll.reset_stats()
            with _shm(topology=topology):
                for count in (1, 15, 16, 17, 100):
                    m = np.random.default_rng(rank + count).integers(0, 251, (count, 4)).astype(np.uint32)
                    mine = m[:, 0] | (m[:, 1] << 8) | (m[:, 2] << 16) | (m[:, 3] << 24)
                    ref, got = np.zeros(count, np.uint32), np.zeros(count, np.uint32)
                    world.Reduce(mine, ref, op, 0)
                    comm.Reduce(mine, got, op, 0)
                    if rank == 0:
                        np.testing.assert_array_equal(got, ref)
                    world.Allreduce(mine, ref, op)
                    comm.Allreduce(mine, got, op)
                    np.testing.assert_array_equal(got, ref)
            assert bool(_notes("Allreduce")) == note_expected, _notes("Allreduce")
            MPI.Intracomm.Free(comm)
    finally:
        op.Free()


@pytest.mark.mpi(ranks=[3, 4], timeout=150)
def test_set_up_at_first_blocking_call_and_slot_reuse_across_communicators(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    adaptcoll.reset_stats()
    comms = [adaptcoll.Intracomm(world.Dup()) for _ in range(2)]
    with _shm(topology="nodes=2" if size == 4 else ""):
        # nonblocking and persistent calls before any blocking one: point-to-point trees, never blocking
        n = 300
        early = [np.arange(n, dtype="f8") if rank == 0 else np.zeros(n) for _ in comms]
        reqs = [c.Ibcast(b, 0) for c, b in zip(comms, early)]
        persistent = comms[0].Allreduce_init(np.ones(n), pre := np.zeros(n), MPI.SUM)
        assert comm_state(comms[0]).shm is None
        Request.Waitall(reqs)
        persistent.Start()
        persistent.Wait()
        np.testing.assert_array_equal(pre, np.full(n, size))
        assert _notes("Ibcast") == {shm.NOT_SET_UP: 2}
        assert _notes("Allreduce_init") == {shm.NOT_SET_UP: 1}
        for b in early:
            np.testing.assert_array_equal(b, np.arange(n, dtype="f8"))
        # the first blocking call sets up the node level; from then on every form uses it
        for c in comms:
            c.Barrier()
            c.Bcast(np.zeros(10), 0)
            assert isinstance(comm_state(c).shm, shm.NodeLevel)
        rng = np.random.default_rng(5)  # the same sequence on every rank
        for it in range(40):
            count = int(rng.integers(0, 200))
            reqs, checks = [], []
            for k in range(int(rng.integers(1, 5))):  # several in flight, on both communicators
                c = comms[int(rng.integers(0, 2))]
                mine = np.arange(count, dtype="i8") * (rank + 1) + k
                kind = int(rng.integers(0, 3))
                if kind == 0:
                    buf = mine.copy() if rank == k % size else np.zeros(count, "i8")
                    reqs.append(c.Ibcast(buf, k % size))
                    checks.append((buf, np.arange(count, dtype="i8") * (k % size + 1) + k))
                elif kind == 1:
                    out = np.zeros(count, "i8")
                    reqs.append(c.Ireduce(mine, out, MPI.SUM, 0))
                    if rank == 0:
                        checks.append((out, np.arange(count) * sum(range(1, size + 1)) + k * size))
                else:
                    out = np.zeros(count, "i8")
                    reqs.append(c.Iallreduce(mine, out, MPI.MAX))
                    checks.append((out, np.arange(count, dtype="i8") * size + k))
            for r in reversed(reqs):
                r.Wait()
            for got, want in checks:
                np.testing.assert_array_equal(got, want, err_msg=f"iteration {it}")
            blocking = np.full(count, float(rank))
            comms[it % 2].Allreduce(MPI.IN_PLACE, blocking, MPI.SUM)
            np.testing.assert_array_equal(blocking, np.full(count, float(sum(range(size)))))
        again = comms[1].Bcast_init(b2 := (np.ones(50) if rank == 0 else np.zeros(50)), 0)
        for _ in range(5):
            again.Start()
            again.Wait()
        np.testing.assert_array_equal(b2, np.ones(50))
    assert "Bcast_init" not in {k for k, v in adaptcoll.stats().items() if v.get("notes")}
    assert _notes("Iallreduce") == {} and _notes("Allreduce") == {}
    for c in comms:
        MPI.Intracomm.Free(c)
    assert shm.live_windows() == 0


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_no_window_falls_back_with_one_warning_and_a_counted_reason(mpi_ranks, monkeypatch):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    adaptcoll.reset_stats()
    monkeypatch.setattr(shm, "_warned", False)
    n = 500
    # a cap too small for one 64-byte slot per rank
    comm = adaptcoll.Intracomm(world.Dup())
    with _shm(shm_bytes=100), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            out = np.zeros(n)
            comm.Allreduce(np.full(n, rank + 1.0), out, MPI.SUM)
            np.testing.assert_array_equal(out, np.full(n, size * (size + 1) / 2))
    mine = [w for w in caught if "shared-memory" in str(w.message)]
    assert len(mine) == (1 if rank == 0 else 0), [str(w.message) for w in caught]
    (reason,) = _notes("Allreduce")
    assert "ADAPTCOLL_SHM_BYTES=100" in reason and _notes("Allreduce")[reason] == 3
    MPI.Intracomm.Free(comm)
    # an allocation that fails on one rank only: every rank falls back alike
    adaptcoll.reset_stats()
    if rank == size - 1:
        monkeypatch.setattr(shm, "precheck", lambda nbytes: "shm: injected failure")
    comm = adaptcoll.Intracomm(world.Dup())
    with _shm(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buf = np.arange(n, dtype="f4") if rank == 0 else np.zeros(n, "f4")
        comm.Bcast(buf, 0)
        np.testing.assert_array_equal(buf, np.arange(n, dtype="f4"))
        out = np.zeros(n, "f4")
        comm.Reduce(np.ones(n, "f4"), out, MPI.SUM, size - 1)
        if rank == size - 1:
            np.testing.assert_array_equal(out, np.full(n, size, "f4"))
    assert _notes("Bcast") == {"shm: injected failure": 1} and _notes("Reduce") == {"shm: injected failure": 1}
    assert shm.live_windows() == 0
    MPI.Intracomm.Free(comm)


def _shm_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum("/dev/shm" in line or "mpich_shm" in line for line in f)


@pytest.mark.mpi(ranks=[2, 4], timeout=120)
def test_window_freed_with_its_communicator(mpi_ranks):
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    mapped = _shm_mappings()
    with _shm(shm_segment_size="64K"):
        for i in range(60):
            comm = adaptcoll.Intracomm(world.Split(i % 2 if size > 2 else 0, rank))
            out = np.zeros(1000)
            comm.Allreduce(np.ones(1000), out, MPI.SUM)
            np.testing.assert_array_equal(out, np.full(1000, comm.Get_size()))
            assert shm.live_windows() == 1
            MPI.Intracomm.Free(comm)
            assert shm.live_windows() == 0
    assert _shm_mappings() <= mapped  # every window's memory is unmapped again


KILLED = textwrap.dedent(
    """
    import os, signal, numpy as np
    from mpi4py import MPI
    import adaptcoll
    w = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(w)
    with adaptcoll.configured(native_below=0, allreduce_algorithm="shm", shm_segment_size=4096):
        comm.Allreduce(np.ones(10), np.zeros(10), MPI.SUM)  # sets the node level up
        req = comm.Iallreduce(np.ones(1 << 22), out := np.zeros(1 << 22), MPI.SUM)
        if w.Get_rank() == 1:
            req.Test()
            os.kill(os.getpid(), signal.SIGKILL)
        req.Wait()
    """
)


def test_rank_killed_mid_operation_ends_the_job(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env["MPIEXEC_TIMEOUT"] = "100"
    start = time.monotonic()
    proc = subprocess.run(
        ["mpiexec", "-n", "3", sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - start
    assert proc.returncode != 0
    assert took < 60, f"the job took {took:.0f} s to end (hang until the timeout?)\n{proc.stdout}\n{proc.stderr}"
    # (the launcher's own report of the killed rank: Hydra's, or Open MPI's prterun's)
    said = "noticed that process rank 1" if MPI.get_vendor()[0] == "Open MPI" else "BAD TERMINATION"
    assert said in proc.stdout + proc.stderr, proc.stdout + proc.stderr
