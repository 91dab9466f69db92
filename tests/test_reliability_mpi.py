"""No hang where MPI would not hang (issue 10): every rank completes or raises, within the timeout.

Legal buffer forms that differ across ranks, nonblocking calls on first use (set-up never blocks),
bad receive buffers on some ranks only, two threads on one communicator, strict DLPack producers.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from dlpack_producer import LegacyProducer, Producer, late_calls, outstanding
from mpi4py import MPI

import adaptcoll
from adaptcoll.forms.threads import ConcurrentCollectiveError

SMALL_SEGMENTS = {"bcast_segment_size": "1K", "reduce_segment_size": "1K", "allreduce_segment_size": "1K"}


def _forms(n: int) -> list[tuple[str, Callable[[np.ndarray], Any]]]:
    """Legal specifications of the same n doubles, each over a base array `b` of n doubles (name, make)."""

    def vector(b: np.ndarray) -> Any:  # every other double of a wider scratch: packed through MPI
        wide = np.zeros(2 * n)
        wide[::2] = b
        dt = MPI.DOUBLE.Create_vector(n, 1, 2).Commit()
        return _Strided(wide, dt, b)

    def bottom(b: np.ndarray) -> Any:
        dt = MPI.DOUBLE.Create_hindexed([n // 2, n - n // 2], [MPI.Get_address(b), MPI.Get_address(b[n // 2 :])])
        return [MPI.BOTTOM, 1, dt.Commit()]

    def halves(b: np.ndarray) -> Any:  # dense: a view of b, not packed
        return [b, 1, MPI.DOUBLE.Create_indexed([n // 2, n - n // 2], [0, n // 2]).Commit()]

    return [
        ("array", lambda b: b),
        ("[b, n, DOUBLE]", lambda b: [b, n, MPI.DOUBLE]),
        ("[b, 1, contiguous(n)]", lambda b: [b, 1, MPI.DOUBLE.Create_contiguous(n).Commit()]),
        ("(b, (n, 0), 'd')", lambda b: (b, (n, 0), "d")),
        ("memoryview", lambda b: memoryview(b)),
        ("dlpack", lambda b: Producer(b)),
        ("[b, 1, indexed(two halves)]", halves),
        ("vector (packed)", vector),
        ("BOTTOM + hindexed", bottom),
    ]


class _Strided:
    """A packed form: `spec` reads/writes every other double of `wide`; `sync()` copies back into `b`."""

    def __init__(self, wide: np.ndarray, dt: MPI.Datatype, b: np.ndarray) -> None:
        self.wide, self.dt, self.b = wide, dt, b
        self.spec = [wide, 1, dt]

    def sync(self) -> None:
        self.b[:] = self.wide[::2]


def _spec(made: Any) -> Any:
    return made.spec if isinstance(made, _Strided) else made


def _sync(made: Any) -> None:
    if isinstance(made, _Strided):
        made.sync()


def _free(made: Any) -> None:
    dt = made.dt if isinstance(made, _Strided) else (made[-1] if isinstance(made, list) else None)
    if isinstance(dt, MPI.Datatype) and not dt.is_predefined:
        dt.Free()


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_mixed_legal_forms_decide_alike(mpi_ranks):
    """Each rank describes the same message with another legal form (derived datatypes, BOTTOM, DLPack,
    packed layouts), on both sides of the native threshold: every call completes with native's result."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    checked = 0
    # 8K = 1024 doubles; None: the default segments (a large message), served (native_below=0)
    for native_below, n in ((0, 1000), ("8K", 1023), ("8K", 1025), (None, 1 << 18)):
        overrides: dict = dict(SMALL_SEGMENTS) if native_below is not None else {}
        overrides["native_below"] = native_below if native_below is not None else 0
        forms = _forms(n)
        with adaptcoll.configured(**overrides):
            for shift in range(len(forms)):
                name, make = forms[(rank + shift) % len(forms)]  # ranks use different forms
                where = f"n={n} native_below={native_below} form={name}"
                root = shift % size
                # Bcast (and Ibcast): signatures match, so MPI allows the forms to differ
                for call in ("Bcast", "Ibcast"):
                    b = np.arange(n, dtype="f8") * (shift + 1) if rank == root else np.zeros(n)
                    made = make(b)
                    if isinstance(made, _Strided) and rank == root:
                        made.wide[::2] = b
                    adaptcoll.reset_stats()
                    if call == "Bcast":
                        comm.Bcast(_spec(made), root)
                    else:
                        comm.Ibcast(_spec(made), root).Wait()
                    _sync(made)
                    np.testing.assert_array_equal(b, np.arange(n, dtype="f8") * (shift + 1), err_msg=where)
                    _free(made)
                    served = adaptcoll.stats()[call]["adaptcoll"]
                    assert world.allgather(served) == [served] * size, f"{call} {where}: ranks decided apart"
                if native_below is not None and native_below != 0:
                    checked += 1
                    continue  # below the threshold MPICH itself refuses predefined ops on derived types
                # Allreduce and Reduce with a predefined op: served from the signature on every rank
                contrib = np.arange(n, dtype="f8") + rank
                expect = size * np.arange(n, dtype="f8") + sum(range(size))
                out = np.zeros(n)
                made = make(out)
                comm.Allreduce(contrib, _spec(made), MPI.SUM)
                _sync(made)
                np.testing.assert_array_equal(out, expect, err_msg=f"Allreduce {where}")
                _free(made)
                mine = contrib.copy()
                made = make(mine)
                if isinstance(made, _Strided):
                    made.wide[::2] = mine
                out = np.zeros(n)
                comm.Reduce(_spec(made), out if rank == root else None, MPI.SUM, root)
                if rank == root:
                    np.testing.assert_array_equal(out, expect, err_msg=f"Reduce {where}")
                _free(made)
                checked += 1
    assert checked == 4 * 9


@pytest.mark.mpi(ranks=[2], timeout=90)
def test_nonblocking_calls_never_block_on_first_use(mpi_ranks):
    """Rank 0 starts I-calls on a fresh communicator, then sends to rank 1, which makes the same I-calls
    only after receiving: with a blocking set-up (Dup, topology discovery) rank 0 would wait forever."""
    world = MPI.COMM_WORLD
    for algorithm in ("binomial", "topo"):
        comm = adaptcoll.Intracomm(world).Dup()  # a communicator adaptcoll has never seen
        algorithms = {f"{c}_algorithm": algorithm for c in ("bcast", "reduce", "allreduce")}
        with adaptcoll.configured(native_below=0, topology="", **algorithms, **SMALL_SEGMENTS):
            _first_use_round(world, comm, 1000)
        comm.Free()


def _first_use_round(world: MPI.Intracomm, comm: MPI.Intracomm, n: int) -> None:
    rank = world.Get_rank()
    x = np.zeros(1)
    b = np.arange(n, dtype="f8") if rank == 0 else np.zeros(n)
    s = np.full(n, rank + 1.0)
    red, allr, allr2 = np.zeros(n), np.zeros(n), np.zeros(n)
    persistent = comm.Allreduce_init(s, allr2, MPI.SUM)

    def start_all() -> list[Any]:
        persistent.Start()
        return [
            comm.Ibcast(b, 0),
            comm.Ireduce(s, red if rank == 0 else None, MPI.SUM, 0),
            comm.Iallreduce(s, allr, MPI.SUM),
            persistent,
        ]

    if rank == 0:
        reqs = start_all()  # all queued behind the set-up, in call order
        comm.Send(x, 1)
    else:
        comm.Recv(x, 0)
        reqs = start_all()
    adaptcoll.Request.Waitall(reqs)
    np.testing.assert_array_equal(b, np.arange(n, dtype="f8"))
    np.testing.assert_array_equal(allr, np.full(n, 3.0))
    np.testing.assert_array_equal(allr2, np.full(n, 3.0))
    if rank == 0:
        np.testing.assert_array_equal(red, np.full(n, 3.0))
    stats = adaptcoll.stats()
    assert stats["Ibcast"]["adaptcoll"] >= 1 and stats["Iallreduce"]["adaptcoll"] >= 1, stats
    persistent.Free()


@pytest.mark.mpi(ranks=[3], timeout=120)
def test_bad_buffers_on_some_ranks_raise_there_and_others_complete(mpi_ranks):
    """Read-only and non-contiguous buffers on some ranks: those ranks take part (scratch memory) and
    raise mpi4py's error after; the others complete with the right data. Bad on every rank: every rank
    raises exactly what native mpi4py raises."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    n = 1000

    def read_only(a: np.ndarray) -> np.ndarray:
        a.flags.writeable = False
        return a

    def strided(a: np.ndarray) -> np.ndarray:
        wide = np.zeros(2 * len(a), a.dtype)
        wide[::2] = a
        return wide[::2]

    def error(fn: Callable[[], Any]) -> Any:
        try:
            fn()
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return None

    with adaptcoll.configured(native_below=0, **SMALL_SEGMENTS):
        for bad_ranks in ({1}, {2}, {1, 2}):
            for spoil in (read_only, strided):
                where = f"{spoil.__name__} on {sorted(bad_ranks)}"
                bad = rank in bad_ranks
                # Bcast / Ibcast from root 0 into a bad buffer on some non-roots
                for call in (comm.Bcast, lambda buf, root: comm.Ibcast(buf, root).Wait()):
                    b = np.arange(n, dtype="f8") if rank == 0 else np.zeros(n)
                    buf = spoil(b) if bad else b
                    got = error(lambda: call(buf, 0))  # noqa: B023
                    if bad:
                        expect = error(lambda: MPI.buffer.frombuffer(buf, readonly=False))  # noqa: B023
                        assert got == expect and got is not None, f"Bcast {where}: {got}"
                    else:
                        assert got is None, f"Bcast {where}: {got}"
                        np.testing.assert_array_equal(b, np.arange(n, dtype="f8"))
                # Allreduce: a bad recvbuf (received into) on some ranks
                contrib = np.full(n, rank + 1.0)
                out = np.zeros(n)
                got = error(lambda: comm.Allreduce(contrib, spoil(out) if bad else out, MPI.SUM))  # noqa: B023
                assert (got is not None) == bad, f"Allreduce {where}: {got}"
                if not bad:
                    np.testing.assert_array_equal(out, np.full(n, size * (size + 1) / 2))
                # Iallreduce: a non-contiguous sendbuf on some ranks still contributes its data
                out = np.zeros(n)
                send = strided(contrib) if bad else contrib
                got = error(lambda: comm.Iallreduce(send, out, MPI.SUM).Wait())  # noqa: B023
                assert (got is not None) == bad, f"Iallreduce sendbuf {where}: {got}"
                np.testing.assert_array_equal(out, np.full(n, size * (size + 1) / 2))
        # bad on every rank: exactly native mpi4py's error everywhere
        cases = {
            "Bcast non-contiguous": lambda c: c.Bcast(strided(np.zeros(n)), 0),
            "Allreduce read-only": lambda c: c.Allreduce(np.ones(n), read_only(np.zeros(n)), MPI.SUM),
            "Reduce non-contiguous send": lambda c: c.Reduce(strided(np.ones(n)), np.zeros(n), MPI.SUM, 0),
        }
        for name, case in cases.items():
            native = error(lambda: case(world))  # noqa: B023
            ours = error(lambda: case(comm))  # noqa: B023
            assert native is not None and ours == native, f"{name}: adaptcoll {ours}, native {native}"
            assert world.allgather(ours) == [ours] * size, name
        x = np.arange(5.0) if rank == 0 else np.zeros(5)
        comm.Bcast(x, 0)  # still in step
        np.testing.assert_array_equal(x, np.arange(5.0))


@pytest.mark.mpi(ranks=[2], timeout=90)
def test_two_threads_on_one_communicator_get_a_clear_error(mpi_ranks):
    """While thread A is inside a collective on a communicator (held there until the peer joins),
    thread B's collective on the same communicator raises a RuntimeError naming both; A completes.
    The first round runs on a communicator adaptcoll has not set up yet."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world).Dup()
    n = 1 << 17
    with adaptcoll.configured(native_below=0, sync_sends="all", **SMALL_SEGMENTS):
        for late in (1, 0):  # each rank in turn joins late, so the other's thread A stays inside
            _thread_round(world, comm, late, n)
        # afterwards the communicator works, from any one thread at a time
        out = np.zeros(8)
        comm.Allreduce(np.ones(8), out, MPI.SUM)
        np.testing.assert_array_equal(out, np.full(8, 2.0))
    comm.Free()


def _thread_round(world: MPI.Intracomm, comm: MPI.Intracomm, late: int, n: int) -> None:
    rank = world.Get_rank()
    b = np.arange(n, dtype="f8") if rank == 0 else np.zeros(n)
    inside = threading.Event()
    failures: list[BaseException] = []

    def thread_a() -> None:
        try:
            inside.set()
            comm.Bcast(b, 0)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    worker = threading.Thread(target=thread_a)
    if rank == late:
        world.Barrier()  # the other rank's thread A is inside now (it cannot finish without us)
        time.sleep(0.3)
        worker.start()
    else:
        worker.start()
        inside.wait()
        time.sleep(0.3)
        with pytest.raises(ConcurrentCollectiveError, match=r"Allreduce .* inside Bcast"):
            comm.Allreduce(np.ones(4), np.zeros(4), MPI.SUM)
        world.Barrier()
    worker.join(60)
    assert not worker.is_alive() and not failures, failures
    np.testing.assert_array_equal(b, np.arange(n, dtype="f8"))


@pytest.mark.mpi(ranks=[2], timeout=90)
def test_strict_dlpack_producers_every_form(mpi_ranks):
    """ctypes DLPack producers whose capsules free their tensors (both protocol versions; bool, int8,
    float16, complex, lanes > 1) in every buffer-spec form, on every collective, served and equal to
    native; the int8 Ireduce with `(array, datatype)` and IN_PLACE at the root completes; afterwards every
    capsule has called its deleter exactly once and none late (nothing consumed, nothing kept)."""
    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    n = 24
    kinds = [  # (NumPy values, DLPack dtype override, MPI type mpi4py infers, op)
        (lambda: (np.arange(n) % 2).astype("?"), None, "?", MPI.LOR),
        (lambda: (np.arange(n) % 7).astype("i1"), None, "b", MPI.SUM),
        (lambda: np.arange(n, dtype="e") / 4, None, "e", MPI.MAX),
        (lambda: np.arange(n) * (1 + 1j), None, "D", MPI.SUM),
        (lambda: np.arange(n, dtype="i1"), (0, 8, 4), "B", MPI.BOR),  # 4 lanes: n bytes
        (lambda: np.arange(n, dtype="f8"), (2, 64, 2), "D", MPI.SUM),  # 2 float lanes: n/2 complex
    ]
    start_late = late_calls()
    with adaptcoll.configured(native_below=0, bcast_segment_size=16, reduce_segment_size=16, allreduce_segment_size=16):
        for make_values, dl_dtype, code, op in kinds:
            values = make_values()
            lanes = dl_dtype[2] if dl_dtype else 1
            shape = (len(values) // lanes,) if lanes > 1 and dl_dtype and dl_dtype[0] == 0 else None
            if dl_dtype and dl_dtype[0] == 2:
                shape = (len(values) // 2,)
            count = len(values.view(np.uint8)) // np.dtype(MPI.Datatype.fromcode(code).tocode()).itemsize
            dt = MPI.Datatype.fromcode(code)
            forms = {
                "buf": lambda p: p,
                "(buf, count)": lambda p: (p, count),  # noqa: B023
                "(buf, datatype)": lambda p: (p, dt),  # noqa: B023
                "(buf, count, typecode)": lambda p: (p, count, code),  # noqa: B023
                "(buf, (count, displ), datatype)": lambda p: (p, (count, 0), dt),  # noqa: B023
                "[buf, count, displ, datatype]": lambda p: [p, count, 0, dt],  # noqa: B023
            }
            for producer in (Producer, LegacyProducer):
                for label, form in forms.items():
                    where = f"{code} {dl_dtype} {producer.__name__} {label}"

                    def wrap(a: np.ndarray) -> Any:
                        return form(producer(a, dl_dtype=dl_dtype, shape=shape))  # noqa: B023

                    # Bcast
                    mine = values.copy() if rank == 0 else np.zeros_like(values)
                    adaptcoll.reset_stats()
                    comm.Bcast(wrap(mine), 0)
                    assert mine.tobytes() == values.tobytes(), where
                    assert adaptcoll.stats()["Bcast"]["adaptcoll"] == 1, (where, adaptcoll.stats())
                    # Allreduce and Reduce: equal to native on plain arrays of the same type
                    contrib = values.copy()
                    ref = np.zeros_like(values)
                    world.Allreduce([contrib, dt], [ref, dt], op)
                    got = np.zeros_like(values)
                    comm.Allreduce(wrap(contrib), wrap(got), op)
                    assert got.tobytes() == ref.tobytes(), f"Allreduce {where}"
                    got = np.zeros_like(values)
                    comm.Reduce(wrap(contrib), wrap(got) if rank == 0 else None, op, 0)
                    if rank == 0:
                        assert got.tobytes() == ref.tobytes(), f"Reduce {where}"
                    # Ireduce, IN_PLACE at the root
                    got = values.copy()
                    send = MPI.IN_PLACE if rank == 0 else wrap(got)
                    comm.Ireduce(send, wrap(got) if rank == 0 else None, op, 0).Wait()
                    if rank == 0:
                        assert got.tobytes() == ref.tobytes(), f"Ireduce IN_PLACE {where}"
        # the reported hang: 2 ranks, int8 arrays as (array, datatype), IN_PLACE at the root
        a = (np.arange(100) % 5).astype("i1")
        ref = np.zeros_like(a)
        world.Reduce(a, ref, MPI.SUM, 0)
        got = a.copy()
        if rank == 0:
            comm.Ireduce(MPI.IN_PLACE, (LegacyProducer(got), MPI.INT8_T), MPI.SUM, 0).Wait()
            assert got.tobytes() == ref.tobytes()
        else:
            comm.Ireduce((LegacyProducer(got), MPI.INT8_T), None, MPI.SUM, 0).Wait()
    gc.collect()
    assert outstanding() == 0, "a capsule was kept or consumed"
    assert late_calls() == start_late, "a deleter ran after its capsule was gone"
    assert size == 2
