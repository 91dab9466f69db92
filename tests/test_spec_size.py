"""The fast path's message size (adaptcoll.forms.spec_size.host_nbytes) agrees with the full parse for every
form it sizes, and declines (-1) what it must leave to the decision: device memory, BOTTOM, odd forms."""

from __future__ import annotations

import array
import mmap
from typing import Any

import fake_device as fd
import numpy as np
import pytest
from mpi4py import MPI

from adaptcoll import buffers
from adaptcoll.forms.spec_size import host_nbytes


class HostCAI:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False)}


class _HostDLPack:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kwargs: object) -> object:
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.a.__dlpack_device__()


def _specs() -> list[object]:
    d = np.arange(24.0)
    b = np.zeros(40, np.uint8)
    vector = MPI.DOUBLE.Create_vector(2, 1, 3).Commit()
    out: list[object] = [
        d,
        d.reshape(4, 6),
        bytearray(13),
        bytes(7),
        memoryview(d),
        array.array("i", range(9)),
        mmap.mmap(-1, 64),
        [d, MPI.DOUBLE],
        (b, MPI.BYTE),
        [d, 5],
        [array.array("h", range(8)), 3],
        [d, 10, MPI.DOUBLE],
        (d, 10, "d"),
        [d, (7, 2), MPI.DOUBLE],
        [d, 6, 3, MPI.DOUBLE],
        [b, 0, MPI.BYTE],
        [mmap.mmap(-1, 64), 16, MPI.INT],
        [d, 3, vector],
        [HostCAI(d), 12, MPI.DOUBLE],
        HostCAI(d.reshape(3, 8)),
        _HostDLPack(np.arange(6, dtype="i4")),
    ]
    return out


@pytest.mark.parametrize("index", range(len(_specs())))
def test_sizes_agree_with_the_full_parse(index: int) -> None:
    spec = _specs()[index]
    found = host_nbytes(spec)
    parsed = buffers.parse(spec, writable=False)
    assert isinstance(parsed, buffers.Message), parsed
    assert found == parsed.nbytes, (spec, found, parsed.nbytes)


def test_declines_what_the_decision_must_see() -> None:
    d = np.arange(8.0)
    device = fd.CAIBuffer(d)  # device memory (the fake driver's arena)
    assert host_nbytes(device) == -1
    assert host_nbytes([device, 8, MPI.DOUBLE]) == -1
    assert host_nbytes([fd.DLPackBuffer(d), 8, MPI.DOUBLE]) == -1
    assert host_nbytes([None, 1, MPI.DOUBLE]) == -1 and host_nbytes([MPI.BOTTOM, 1, MPI.DOUBLE]) == -1
    assert host_nbytes(MPI.IN_PLACE) == -1 and host_nbytes(None) == -1 and host_nbytes("abc") == -1
    assert host_nbytes([d]) == -1 and host_nbytes([d, 1, 2, 3, MPI.DOUBLE]) == -1
    assert host_nbytes([d, -1, MPI.DOUBLE]) == -1 and host_nbytes([d, -1]) == -1
    assert host_nbytes([d, 2.0, MPI.DOUBLE]) == -1 and host_nbytes([d, (1, 2, 3), MPI.DOUBLE]) == -1
    assert host_nbytes([d, 2, MPI.DATATYPE_NULL]) == -1 and host_nbytes([d, 2, object()]) == -1
    assert host_nbytes([d, 2, "not a typecode"]) == -1
    assert host_nbytes(d.view(type("Sub", (np.ndarray,), {}))) == 64  # host memory, as the decision reads it
    assert host_nbytes(fd.DLPackBuffer(d)) == -1  # a CUDA DLPack producer


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_small_spec_calls_take_the_fast_path_and_match_native(mpi_ranks):
    """Below the threshold, `[buf, count, datatype]` and friends go straight to mpi4py (counted in
    stats() once under "below native_below", like a bare ndarray, whether the fast-call extension sized
    the form or Python did), ranks mixing forms included, with native results."""
    import adaptcoll

    def below(name: str) -> int:
        return adaptcoll.stats().get(name, {}).get("native_reasons", {}).get("below native_below", 0)

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank = world.Get_rank()
    comm.Bcast(np.zeros(1), 0)  # the first blocking call learns the communicator's thresholds
    n = 64
    forms = [
        lambda a: [a, n, MPI.DOUBLE],
        lambda a: [a, MPI.DOUBLE],
        lambda a: (a, (n, 0), "d"),
        lambda a: [HostCAI(a), n, MPI.DOUBLE],
        HostCAI,
    ]
    for i, form in enumerate(forms):
        mine = form if rank == 0 else forms[(i + 1) % len(forms)]  # ranks use different forms
        before = {name: below(name) for name in ("Bcast", "Allreduce", "Reduce")}
        buf = np.arange(n, dtype="d") if rank == 0 else np.zeros(n)
        comm.Bcast(mine(buf), 0)
        np.testing.assert_array_equal(buf, np.arange(n, dtype="d"))
        send, recv = np.arange(n, dtype="d") + rank, np.zeros(n)
        comm.Allreduce(mine(send), mine(recv), MPI.SUM)
        np.testing.assert_array_equal(recv, 2 * np.arange(n, dtype="d") + 1)
        comm.Reduce(mine(send), mine(recv) if rank == 0 else None, MPI.SUM, 0)
        for name in ("Bcast", "Allreduce", "Reduce"):
            assert below(name) == before[name] + 1, (i, name)


def _arrangement(mode: str, base: np.ndarray, rank: int, form: Any) -> tuple[Any, Any, np.ndarray]:
    """A reduction's (sendbuf, recvbuf) in one buffer arrangement ("plain", "aliased": `sendbuf is recvbuf`,
    "IN_PLACE"), each wrapped by form, and the array the result lands in."""
    recv = base + rank if mode != "plain" else np.zeros(len(base))
    recv_arg = form(recv)
    send = {"plain": form(base + rank), "aliased": recv_arg, "IN_PLACE": MPI.IN_PLACE}[mode]
    return send, recv_arg, recv


def _reduce_both(allreduce: Any, reduce: Any, mode: str, base: np.ndarray, root: int, form: Any = lambda a: a) -> None:
    """One SUM Allreduce and one Reduce to root in a buffer arrangement (a non-root Reduce passes its own
    sendbuf, and recvbuf None when plain), each result checked against the sum over ranks."""
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    want = sum(base + r for r in range(size))
    send, recv_arg, recv = _arrangement(mode, base, rank, form)
    allreduce(send, recv_arg, MPI.SUM)
    np.testing.assert_array_equal(recv, want, err_msg=f"{allreduce} {mode}")
    send, recv_arg, recv = _arrangement(mode, base, rank, form)
    if rank != root:
        send, recv_arg = form(base + rank), (None if mode == "plain" else recv_arg)
    reduce(send, recv_arg, MPI.SUM, root)
    if rank == root:
        np.testing.assert_array_equal(recv, want, err_msg=f"{reduce} {mode} root {root}")


def _assert_all_below(calls: dict[str, int]) -> None:
    """stats() counted exactly calls[name] calls of each collective, every one native "below native_below"."""
    import adaptcoll

    stats = adaptcoll.stats()
    for name, k in calls.items():
        assert stats[name]["native"] == k and stats[name]["adaptcoll"] == 0, (name, stats[name])
        assert stats[name]["native_reasons"] == {"below native_below": k}, (name, stats[name])


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_the_osu_demos_form_goes_native_with_natives_data(mpi_ranks):
    """mpi4py's demo/osu_bcast.py's call, `comm.Bcast([mmap, size, MPI.BYTE], 0)`, at sizes on both sides
    of a threshold of 4 KiB: the root's bytes arrive and nothing past the count changes, each call below
    the threshold is counted once under "below native_below" (sized by the fast-call extension where it
    is built), the others decided."""
    import mmap

    import adaptcoll

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    limit = 4096
    top = 4 * limit
    buf = mmap.mmap(-1, top)
    sizes = [0, 1, 8, 1000, limit - 1, limit, limit + 1, top]
    with adaptcoll.configured(bcast_native_below=limit):
        comm = adaptcoll.Intracomm(world.Dup())
        comm.Bcast(np.zeros(1), 0)  # the first blocking call learns the communicator's thresholds
        assert comm._adaptcoll_below["bcast"] == limit
        adaptcoll.reset_stats()
        for size in sizes:
            buf[:] = bytes([(size + rank * 3) % 251]) * top  # rank 0: the byte to send; rank 1: another
            comm.Bcast([buf, size, MPI.BYTE], 0)
            assert buf[:size] == bytes([size % 251]) * size, size
            assert buf[size:] == bytes([(size + rank * 3) % 251]) * (top - size), size  # nothing past the count
        stats = adaptcoll.stats()["Bcast"]
    below = sum(1 for size in sizes if size < limit)
    assert stats["native_reasons"].get("below native_below") == below, stats
    assert stats["native"] + stats["adaptcoll"] == len(sizes), stats
    comm.Free()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_small_ndarray_calls_take_the_first_test_and_count_in_stats(mpi_ranks):
    """A bare NumPy array below the threshold goes to mpi4py at the wrapper's first test (Bcast, Reduce,
    Allreduce), with native results in every buffer arrangement that test admits or passes on (plain,
    `sendbuf is recvbuf` read as IN_PLACE, IN_PLACE itself, a non-root's recvbuf None): each call is
    counted once under "below native_below", and reset_stats() zeros those counts."""
    import adaptcoll

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    rank, size = world.Get_rank(), world.Get_size()
    comm.Bcast(np.zeros(1), 0)  # the first blocking call learns the communicator's thresholds
    n = 64
    base = np.arange(n, dtype="d")
    adaptcoll.reset_stats()
    calls = {"Bcast": 0, "Reduce": 0, "Allreduce": 0}
    for root in range(size):
        buf = base * (root + 1) if rank == root else np.zeros(n)
        comm.Bcast(buf, root)
        np.testing.assert_array_equal(buf, base * (root + 1))
        calls["Bcast"] += 1
        for mode in ("plain", "aliased", "IN_PLACE"):
            _reduce_both(comm.Allreduce, comm.Reduce, mode, base, root)
            calls["Allreduce"] += 1
            calls["Reduce"] += 1
    _assert_all_below(calls)
    adaptcoll.reset_stats()
    assert not any(adaptcoll.stats().get(name, {}).get("native") for name in calls), adaptcoll.stats()
    comm.Bcast(np.zeros(n), 0)
    assert adaptcoll.stats()["Bcast"]["native_reasons"] == {"below native_below": 1}


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_small_nonblocking_calls_after_the_tuning_go_native_counted_once(mpi_ranks):
    """After the first blocking call (the fast-call extension's gates then test and count where it is
    built), small Ibcast / Ireduce / Iallreduce on ndarrays and on `[buf, count, datatype]` go to mpi4py
    with native results in every buffer arrangement (plain, `sendbuf is recvbuf`, IN_PLACE, a non-root's
    recvbuf None), each counted once under "below native_below"."""
    import adaptcoll

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world.Dup())
    rank, size = world.Get_rank(), world.Get_size()
    comm.Bcast(np.zeros(1), 0)
    n = 64
    base = np.arange(n, dtype="d")
    adaptcoll.reset_stats()
    calls = {"Ibcast": 0, "Ireduce": 0, "Iallreduce": 0}
    for form in (lambda a: a, lambda a: [a, n, MPI.DOUBLE]):
        for root in range(size):
            buf = base * (root + 1) if rank == root else np.zeros(n)
            comm.Ibcast(form(buf), root).Wait()
            np.testing.assert_array_equal(buf, base * (root + 1))
            calls["Ibcast"] += 1
            for mode in ("plain", "aliased", "IN_PLACE"):
                _reduce_both(
                    lambda *a: comm.Iallreduce(*a).Wait(), lambda *a: comm.Ireduce(*a).Wait(), mode, base, root, form
                )
                calls["Iallreduce"] += 1
                calls["Ireduce"] += 1
    _assert_all_below(calls)
    comm.Free()
