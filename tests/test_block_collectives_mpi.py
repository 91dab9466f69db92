"""Allgather, Reduce_scatter_block and Reduce_scatter (and I-forms) over MPI against native MPI at 1-5
ranks: sizes around the segment edges, dtypes and ops, in place and not, derived datatypes, uneven
recvcounts; bad input raises native's error on every rank; what goes native is counted with its reason.
One launch loops over many cases (a launch costs seconds on 2 cores)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from exact_values import exact_data
from mpi4py import MPI
from noncommutative import matmul_mpi

import adaptcoll
from adaptcoll.forms.requests import Request

SEG = 24  # bytes per segment: a few elements, many segments per block
OPS = [("SUM", "f8"), ("SUM", "i4"), ("PROD", "f4"), ("MAX", "i8"), ("MIN", "f2"), ("BXOR", "u2"), ("LAND", "?")]


def _serving(**more):
    alg = f"ring:segment_size={SEG}"
    return adaptcoll.configured(allgather_algorithm=alg, reduce_scatter_algorithm=alg, native_below=0, **more)


def _served(name: str) -> int:
    return adaptcoll.stats().get(name, {}).get("adaptcoll", 0)


def _native(name: str, reason: str) -> int:
    return adaptcoll.stats().get(name, {}).get("native_reasons", {}).get(reason, 0)


@pytest.mark.mpi(ranks=[1, 2, 3, 5], timeout=120)
def test_equal_native(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, p = world.Get_rank(), world.Get_size()
    names = ("Allgather", "Iallgather", "Reduce_scatter_block", "Ireduce_scatter_block", "Reduce_scatter")
    before = {n: _served(n) for n in names}
    with _serving():
        for k, (opname, dtype) in enumerate(OPS):
            op = getattr(MPI, opname)
            for n in (0, 1, 3, 4, 13):
                label = f"{opname} {dtype} n={n}"
                # Allgather: n per rank, not in place and in place, blocking and not
                mine = exact_data(rank, n, dtype, k + n)
                ref = np.zeros(n * p, dtype)
                world.Allgather(mine, ref)
                got = np.zeros(n * p, dtype)
                comm.Allgather(mine, got)
                np.testing.assert_array_equal(got, ref, err_msg=f"Allgather {label}")
                buf = exact_data(rank, n * p, dtype, 7)
                buf[rank * n : (rank + 1) * n] = mine
                comm.Iallgather(MPI.IN_PLACE, buf).Wait()
                np.testing.assert_array_equal(buf, ref, err_msg=f"Iallgather in place {label}")
                # Reduce_scatter_block: n per rank
                full = exact_data(rank, n * p, dtype, k + 2 * n)
                ref = np.zeros(n, dtype)
                world.Reduce_scatter_block(full, ref, op)
                got = np.zeros(n, dtype)
                comm.Reduce_scatter_block(full, got, op)
                np.testing.assert_array_equal(got, ref, err_msg=f"Reduce_scatter_block {label}")
                buf = full.copy()
                Request.Waitall([comm.Ireduce_scatter_block(MPI.IN_PLACE, buf, op)])
                np.testing.assert_array_equal(buf[:n], ref, err_msg=f"in place {label}")
                np.testing.assert_array_equal(buf[n:], full[n:], err_msg=f"in place tail {label}")
                # Reduce_scatter: uneven recvcounts, empty ones included
                counts = [(n * (j + 1) + k) % 6 * (j % 3 != 1) for j in range(p)]
                full = exact_data(rank, sum(counts), dtype, k + 3 * n)
                ref = np.zeros(counts[rank], dtype)
                world.Reduce_scatter(full, ref, counts, op)
                got = np.zeros(counts[rank], dtype)
                comm.Reduce_scatter(full, got, counts, op)
                np.testing.assert_array_equal(got, ref, err_msg=f"Reduce_scatter {counts} {label}")
        # other buffer forms: [buf, count, datatype], a strided vector (packed through MPI), a nonblocking mix
        vec = MPI.DOUBLE.Create_vector(5, 1, 2).Commit()
        try:
            src = np.arange(10.0) + rank
            ref = np.zeros(5 * p)
            world.Allgather([src, 1, vec], ref)
            got = np.zeros(5 * p)
            comm.Allgather([src, 1, vec], [got, 5 * p, MPI.DOUBLE])
            np.testing.assert_array_equal(got, ref)
        finally:
            vec.Free()
        a = exact_data(rank, 6 * p, "i8", 1)
        outs = [np.zeros(6, "i8") for _ in range(3)]
        reqs = [comm.Ireduce_scatter_block(a, outs[0]), comm.Ireduce_scatter(a, outs[1], [6] * p, MPI.SUM)]
        reqs.append(comm.Ireduce_scatter_block(a, outs[2], MPI.MAX))
        Request.Waitall(reqs)
        ref = np.zeros(6, "i8")
        world.Reduce_scatter_block(a, ref)
        np.testing.assert_array_equal(outs[0], ref)
        np.testing.assert_array_equal(outs[1], ref)
        world.Reduce_scatter_block(a, ref, MPI.MAX)
        np.testing.assert_array_equal(outs[2], ref)
    after = {n: _served(n) - before[n] for n in names}
    assert after == {
        "Allgather": 5 * len(OPS) + 1,
        "Iallgather": 5 * len(OPS),
        "Reduce_scatter_block": 5 * len(OPS),
        "Ireduce_scatter_block": 5 * len(OPS) + 2,
        "Reduce_scatter": 5 * len(OPS),
    }
    assert "Reduce_scatter_block" in adaptcoll.runtime.counters.format_table()


def _error(fn):
    try:
        fn()
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else ""
        code = exc.Get_error_class() if isinstance(exc, MPI.Exception) else None
        return type(exc).__name__, msg, code
    return None


@pytest.mark.mpi(ranks=[3], timeout=90)
def test_bad_input_raises_native_error_on_every_rank_and_native_reasons(mpi_ranks):
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, p = world.Get_rank(), world.Get_size()
    readonly = np.zeros(2 * p)
    readonly.flags.writeable = False
    cases = {
        "Allgather recvbuf not a multiple": lambda c: c.Allgather(np.zeros(2), np.zeros(2 * p + 1)),
        "Allgather read-only recvbuf": lambda c: c.Allgather(np.zeros(2), readonly),
        "Reduce_scatter_block op None": lambda c: c.Reduce_scatter_block(np.zeros(2 * p), np.zeros(2), op=None),
        "Reduce_scatter_block in place not a multiple": lambda c: c.Reduce_scatter_block(
            MPI.IN_PLACE, np.zeros(2 * p + 1)
        ),
        "Reduce_scatter sum mismatch": lambda c: c.Reduce_scatter(np.zeros(5), np.zeros(1), [1] * p),
        "Reduce_scatter too few counts": lambda c: c.Reduce_scatter(np.zeros(5), np.zeros(1), [1]),
        "Ireduce_scatter op None": lambda c: c.Ireduce_scatter(np.zeros(p), np.zeros(1), [1] * p, op=None),
    }
    with _serving():
        for name, case in cases.items():
            native = _error(lambda: case(world))  # noqa: B023 - called at once
            ours = _error(lambda: case(comm))  # noqa: B023
            assert native is not None, name
            assert ours == native, f"{name}: adaptcoll raised {ours}, native {native}"
            everyone = world.allgather(ours)
            assert all(e == ours for e in everyone), f"{name}: ranks disagree: {everyone}"
        # native, with the reason counted: a non-commutative op, Reduce_scatter without recvcounts, MINLOC
        matmul = MPI.Op.Create(matmul_mpi, commute=False)
        try:
            full = (np.arange(3 * p, dtype=np.uint32) * 7 + rank) % 200 + 1
            ref, got = np.zeros(3, np.uint32), np.zeros(3, np.uint32)
            world.Reduce_scatter_block(full, ref, matmul)
            before = _native("Reduce_scatter_block", "non-commutative op with ring reduce_scatter")
            comm.Reduce_scatter_block(full, got, matmul)
            np.testing.assert_array_equal(got, ref)
            assert _native("Reduce_scatter_block", "non-commutative op with ring reduce_scatter") == before + 1
        finally:
            matmul.Free()
        got = np.zeros(2)
        comm.Reduce_scatter(np.ones(2 * p), got)  # mpi4py gathers the counts itself
        assert (got == p).all() and _native("Reduce_scatter", "Reduce_scatter without recvcounts") >= 1
        # counts that differ across ranks: MessageSizeError on every rank, never wrong data or a hang (the
        # segment counts differ too, so that communicator is out of step afterwards: a duplicate, freed)
        n = 100 if rank == 0 else 200
        for call in (
            lambda c: c.Allgather(np.ones(n), np.zeros(n * p)),
            lambda c: c.Reduce_scatter_block(np.ones(n * p), np.zeros(n)),
        ):
            dup = comm.Dup()
            try:
                with pytest.raises(adaptcoll.MessageSizeError):
                    call(dup)
            finally:
                dup.Free()
    # the shipped rule on this machine: small messages go native through the fast path, counted as below
    adaptcoll.reset_stats()
    comm.Allreduce(MPI.IN_PLACE, np.zeros(1))  # the communicator's tuning (first blocking call)
    got = np.zeros(4 * p)
    comm.Allgather(np.full(4, float(rank)), got)
    np.testing.assert_array_equal(got, np.repeat(np.arange(p, dtype="f8"), 4))
    with adaptcoll.configured(allgather_algorithm="native", native_below=0):
        comm.Allgather(np.zeros(4), got)
    stats = adaptcoll.stats()["Allgather"]
    assert stats["native_reasons"] == {"below native_below": 1, "algorithm=native": 1}, stats
    # still in step afterwards
    with _serving():
        out = np.zeros(3)
        comm.Reduce_scatter_block(np.ones(3 * p), out)
        assert (out == p).all()


def test_stats_of_python_m_adaptcoll_name_them():
    """`python -m adaptcoll --stats` counts the new calls under their own names (an unchanged program;
    the grouped Allreduce, which only adaptcoll's communicators have, once per operation: here one
    packed bucket)."""
    code = (
        "from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; p = c.size; "
        "c.Allgather(np.ones(4), np.zeros(4 * p)); c.Reduce_scatter_block(np.ones(4 * p), np.zeros(4)); "
        "c.Ireduce_scatter(np.ones(4 * p), np.zeros(4), [4] * p).Wait(); "
        "out = np.zeros(4); c.Reduce_scatter(np.ones(4 * p), out, [4] * p); assert (out == p).all(); "
        "g = [np.ones(4), np.ones(3)]; c.Allreduce_multi(g, None); assert all((a == p).all() for a in g); "
        "print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env["MPIEXEC_TIMEOUT"] = "55"
    run = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-m", "adaptcoll", "--native-below", "0", "--stats", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout.count("ok") == 2, run.stdout + run.stderr  # lines may interleave
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s+\d+", run.stderr, re.M)}
    assert rows == {
        "Allgather": 1, "Reduce_scatter_block": 1, "Ireduce_scatter": 1, "Reduce_scatter": 1, "Allreduce_multi": 1,
    }, run.stderr  # fmt: skip
    assert re.search(r"^Allreduce_multi\s+1\s+0\s+packed unit x1$", run.stderr, re.M), run.stderr
