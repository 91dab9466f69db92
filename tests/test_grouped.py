"""Grouped Allreduce in one process: the layout (which arrays go alone, which are packed, in which
buckets) for every group size 1..17, packing through MPI datatypes against NumPy's own copies,
argument errors, the layout cache, and the calls on one rank (the result is each rank's own data)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.forms.grouped import cache
from adaptcoll.forms.grouped.args import parse_group
from adaptcoll.forms.grouped.layout import plan_units
from adaptcoll.forms.grouped.packing import HostPacker

KINDS = ("<f4", "<f8", "<i4")


@pytest.mark.parametrize("n", range(1, 18))
def test_layout_covers_every_array_once(n):
    rng = np.random.default_rng(n)
    for pack_below, bucket in ((0, 0), (64, 0), (64, 100), (1 << 20, 48), (1 << 20, 1 << 20)):
        nbytes = [int(x) for x in rng.integers(0, 160, n)]
        kinds = [KINDS[int(k)] for k in rng.integers(0, 3, n)]
        packable = [bool(p) for p in rng.random(n) < 0.85]
        units = plan_units(nbytes, kinds, pack_below, bucket, packable)
        lone = 0  # small arrays alone: a bucket of one (at most one open bucket per kind at the end, or capped)
        seen = sorted(i for u in units for i in u.arrays)
        assert seen == list(range(n))
        for u in units:
            assert list(u.arrays) == sorted(u.arrays)
            if not u.packed:
                (i,) = u.arrays
                lone += nbytes[i] < pack_below and packable[i]
                continue
            assert len(u.arrays) > 1
            assert all(nbytes[i] < pack_below and packable[i] for i in u.arrays)
            assert {kinds[i] for i in u.arrays} == {u.kind}
            assert u.nbytes == sum(nbytes[i] for i in u.arrays)
            if bucket and len(u.arrays) > 1:
                assert u.nbytes <= bucket
        if not bucket:
            assert lone <= len(KINDS)
        # same inputs, same layout (every rank computes it alone)
        assert plan_units(nbytes, kinds, pack_below, bucket, packable) == units


@pytest.mark.parametrize("n", range(1, 18))
def test_layout_keeps_device_and_host_apart(n):
    """Device arrays are packed only with device arrays of their dtype, under the device threshold and
    cap; host arrays under the host ones; the same inputs give the same layout."""
    rng = np.random.default_rng(100 + n)
    nbytes = [int(x) for x in rng.integers(0, 400, n)]
    kinds = [KINDS[int(k)] for k in rng.integers(0, 2, n)]
    on_device = [bool(d) for d in rng.random(n) < 0.5]
    packable = [True] * n
    for device_below, device_cap in ((0, 0), (300, 0), (300, 500), (1000, 64)):
        units = plan_units(nbytes, kinds, 100, 150, packable, on_device, device_below, device_cap)
        assert sorted(i for u in units for i in u.arrays) == list(range(n))
        for u in units:
            if not u.packed:
                continue
            assert {on_device[i] for i in u.arrays} == {u.device} and {kinds[i] for i in u.arrays} == {u.kind}
            below, cap = (device_below, device_cap) if u.device else (100, 150)
            assert all(nbytes[i] < below for i in u.arrays)
            assert not cap or u.nbytes <= cap
        packed_device = {i for u in units if u.packed and u.device for i in u.arrays}
        if device_below == 0:
            assert not packed_device
        assert plan_units(nbytes, kinds, 100, 150, packable, on_device, device_below, device_cap) == units


def _arrays(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        shape = tuple(int(x) for x in rng.integers(0, 5, 1 + i % 3))
        a = rng.integers(-100, 100, shape).astype("f4")
        out.append(np.asfortranarray(a) if i % 4 == 3 else a)
    return out


@pytest.mark.parametrize("n", range(1, 18))
def test_packer_round_trip(n):
    arrays = _arrays(n, n)
    total = sum(a.size for a in arrays)
    packer = HostPacker(arrays)
    buf = np.full(total + 3, -7, "f4")
    packer.pack(buf)
    expected = np.concatenate([a.ravel(order="K") for a in arrays]) if total else np.zeros(0, "f4")
    assert np.array_equal(buf[:total], expected)
    assert np.all(buf[total:] == -7)
    copies = [a.copy(order="K") for a in arrays]
    for a in arrays:
        a[...] = 0
    packer.unpack(buf)
    assert all(np.array_equal(a, c) for a, c in zip(arrays, copies))
    packer.free()


def test_argument_errors():
    a, b = np.zeros(4, "f4"), np.zeros(4, "f4")
    with pytest.raises(ValueError, match="2 sendbufs but 1 recvbufs"):
        parse_group([a, b], [a], MPI.SUM)
    with pytest.raises(TypeError, match="list or tuple"):
        parse_group(a, None, MPI.SUM)
    with pytest.raises(TypeError, match="op"):
        parse_group([a], None, "sum")
    with pytest.raises(TypeError, match=r"sendbufs\[1\] is None"):
        parse_group([a, None], None, MPI.SUM)
    g = parse_group([a, MPI.IN_PLACE], [b, a], MPI.SUM)
    assert g.in_place == (False, True) and g.sends[1] is a and g.error is None
    g = parse_group(MPI.IN_PLACE, [a, b], MPI.SUM)
    assert g.in_place == (True, True) and g.sends == g.recvs


def test_bad_arrays_get_stand_ins():
    """This rank's own bad arrays: a stand-in takes part, the error is kept for afterwards."""
    b = np.zeros(4, "f4")
    ro = np.arange(4, dtype="f4")
    ro.flags.writeable = False
    strided = np.arange(8, dtype="f4")[::2]
    cases = [
        (([np.zeros(4)], [b]), ValueError, r"sendbufs\[0\] is float64 but recvbufs\[0\] is float32"),
        (([np.zeros(5, "f4")], [b]), ValueError, r"sendbufs\[0\] has 5 elements but recvbufs\[0\] has 4"),
        (([b.copy()], [strided]), BufferError, r"recvbufs\[0\] is not contiguous"),
        (([strided], [b]), BufferError, r"sendbufs\[0\] is not contiguous"),
        (([b.copy()], [ro]), BufferError, r"recvbufs\[0\] is read-only"),
        (([ro], None), BufferError, r"sendbufs\[0\] is read-only"),
    ]
    for args, error, text in cases:
        g = parse_group(*args, MPI.SUM)
        assert isinstance(g.error, error) and re.search(text, str(g.error))
        r, s = g.recvs[0], g.sends[0]
        assert r.flags.c_contiguous and r.flags.writeable and r.dtype == np.float32 and r.size == 4
        assert s.dtype == r.dtype and s.size == r.size
    g = parse_group([ro], None, MPI.SUM)
    assert np.array_equal(g.recvs[0], ro) and g.recvs[0] is not ro  # the data still counts for the others


@pytest.fixture
def comm():
    c = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    yield c
    cache.clear()
    c.Free()


@pytest.mark.parametrize("settings", [{}, {"multi_pack_below": 0, "native_below": 0}, {"multi_bucket_size": 40}])
def test_one_rank_forms(comm, settings):
    with adaptcoll.configured(**settings):
        for n in (1, 5, 17):
            sends = _arrays(n, 100 + n) + [np.arange(7, dtype="f8"), np.arange(3, dtype="i4")]
            recvs = [np.full_like(s, 99) for s in sends]
            comm.Allreduce_multi(sends, recvs, MPI.SUM)
            assert all(np.array_equal(r, s) for r, s in zip(recvs, sends))
            copies = [s.copy() for s in sends]
            comm.Allreduce_multi(sends)  # in place
            assert all(np.array_equal(r, s) for r, s in zip(copies, sends))
            req = comm.Iallreduce_multi(MPI.IN_PLACE, recvs, MPI.MAX)
            assert len(req.requests) == len(recvs)
            adaptcoll.Request.Waitall(req.requests)
            req.Wait()
            preq = comm.Allreduce_multi_init(sends, recvs)
            for _ in range(2):
                for r in recvs:
                    r[...] = 5
                preq.Start()
                preq.Wait()
                assert all(np.array_equal(r, s) for r, s in zip(recvs, sends))
            preq.Free()
    assert adaptcoll.stats()["Allreduce_multi"]["native"] + adaptcoll.stats()["Allreduce_multi"]["adaptcoll"] > 0


def test_empty_groups(comm):
    comm.Allreduce_multi([])
    assert comm.Iallreduce_multi([], []).Test()
    empties = [np.zeros(0, "f4"), np.zeros((0, 3), "f8"), np.zeros(0, "f4")]
    comm.Allreduce_multi(empties)
    preq = comm.Allreduce_multi_init([])
    preq.Start()
    preq.Wait()
    preq.Free()


def test_bad_array_raises_after_the_call(comm):
    ro = np.ones(3, "f4")
    ro.flags.writeable = False
    good = np.ones(2, "f4")
    with pytest.raises(BufferError, match=r"recvbufs\[1\] is read-only"):
        comm.Allreduce_multi([good, good.copy()], [np.zeros(2, "f4"), ro])
    out = [np.zeros(2, "f4"), np.full(2, 9, "f8")]
    with pytest.raises(ValueError, match=r"sendbufs\[1\] is float32 but recvbufs\[1\] is float64"):
        comm.Allreduce_multi([good, good.copy()], out)
    assert np.all(out[0] == 1) and np.all(out[1] == 9)  # the good pair reduced, the bad one untouched
    with pytest.raises(BufferError, match="read-only"):
        comm.Iallreduce_multi([ro])
    with pytest.raises(BufferError, match="read-only"):
        comm.Allreduce_multi_init([ro]).Start()
    assert np.all(ro == 1)


def test_cache_reuses_and_drops(comm):
    cache.clear()
    arrays = [np.ones(3, "f4"), np.ones(5, "f4")]
    comm.Allreduce_multi(arrays)
    key = next(iter(cache._entries))
    found = cache.lookup(key, arrays, arrays)
    assert found is not None
    entry = found[0]
    assert entry.busy == 1  # held by lookup
    entry.release()
    comm.Allreduce_multi(arrays)
    found = cache.lookup(key, arrays, arrays)
    assert found is not None and found[0] is entry  # same arrays: same layout and datatypes
    entry.release()
    arrays[1] = arrays[1].view("i4")  # a different object: a different key
    comm.Allreduce_multi(arrays)
    assert len(cache._entries) == 2
    alive = [[np.ones(k + 1, "f4"), np.ones(2, "f4")] for k in range(cache.MAX_ENTRIES + 2)]
    for group in alive:
        comm.Allreduce_multi(group)
    assert len(cache._entries) == cache.MAX_ENTRIES
    assert entry.evicted and entry.packers == [] and entry.busy == 0


def test_cache_keeps_no_array_alive(comm):
    """Entries hold weak references: arrays made anew every step are freed, their entries stop matching."""
    import gc
    import warnings
    import weakref

    cache.clear()
    arrays = [np.ones(3, "f4"), np.ones(5, "f4")]
    comm.Allreduce_multi(arrays)
    key = next(iter(cache._entries))
    watch = weakref.ref(arrays[0])
    del arrays
    gc.collect()
    assert watch() is None
    again = [np.ones(3, "f4"), np.ones(5, "f4")]
    assert cache.lookup(key, again, again) is None and not cache._entries  # the stale entry is dropped
    arrays = [np.ones(3, "f4"), np.ones(5, "f4")]
    arrays[1] = arrays[1].view("i4")  # a dtype that changed in place is not taken for the old one
    comm.Allreduce_multi(arrays)
    key = next(iter(cache._entries))
    try:  # NumPy 2.5 deprecates setting a dtype in place (a later NumPy refuses it: nothing to check then)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            arrays[0].dtype = np.dtype("i4")
    except (AttributeError, TypeError):
        return
    assert cache.lookup(key, arrays, arrays) is None


@pytest.fixture
def fake_cupy(monkeypatch):
    """The stand-in CuPy (tests/fake_device.py) in sys.modules, MPI not CUDA-aware."""

    import fake_device as fd

    cupy, _ = fd.patch_in(monkeypatch, seed=5)
    yield cupy
    cache.clear()


def _device_notes() -> tuple[int, int]:
    """(packed device units, packed host units) counted so far under Allreduce_multi."""
    notes = adaptcoll.stats().get("Allreduce_multi", {}).get("notes", {})
    return notes.get("packed device unit", 0), notes.get("packed unit", 0)


def test_device_arrays_are_packed_on_the_device(fake_cupy):
    """Small device arrays (host memory posing as CUDA memory, tests/fake_device.py) are packed with
    the device arrays of their dtype, on the device (device-to-device copies: the stand-in refuses host
    pointers), into buckets reduced by one Allreduce each (staged below the device threshold, served
    above), beside host arrays packed with host arrays, in every form; large ones go alone."""
    import fake_device as fd

    from adaptcoll.forms.grouped.args import parse_group
    from adaptcoll.forms.grouped.multi import _layout

    cupy = fake_cupy
    comm = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    adaptcoll.reset_stats()
    try:
        hosts = [np.arange(n, dtype="f4") for n in (3, 50, 7)]
        dev_src = [np.arange(n, dtype="f8") + 1 for n in (40, 5, 9)] + [np.arange(6, dtype="f4") - 2]
        devs = [fd.CAIBuffer(dev_src[0]), cupy.asarray(dev_src[1]), fd.CAIBuffer(dev_src[2]), cupy.asarray(dev_src[3])]
        out_h = [np.zeros_like(h) for h in hosts]
        out_d = [fd.CAIBuffer(np.zeros_like(h)) for h in dev_src]
        group = parse_group(hosts + devs, out_h + out_d, MPI.SUM)
        assert group.on_device == (False,) * 3 + (True,) * 4
        units = _layout(group)
        packed = sorted((u.arrays, u.device) for u in units if u.packed)
        assert packed == [((0, 1, 2), False), ((3, 4, 5), True)]  # the lone f4 device array: alone
        for device_native_below in (4 << 20, 0):
            with adaptcoll.configured(device_native_below=device_native_below):
                before = _device_notes()
                comm.Allreduce_multi(hosts + devs, out_h + out_d, MPI.SUM)
                assert all(np.array_equal(o, h) for o, h in zip(out_h, hosts))
                assert all(np.array_equal(o.get(), h) for o, h in zip(out_d, dev_src))
                req = comm.Iallreduce_multi([*hosts, *out_d], None, MPI.MAX)  # in place, mixed
                adaptcoll.Request.Waitall(req.requests[::-1])
                assert all(np.array_equal(o.get(), h) for o, h in zip(out_d, dev_src))
                after = _device_notes()
                assert (after[0] - before[0], after[1] - before[1]) == (2, 2)
        row = adaptcoll.stats()["Allreduce_multi"]
        assert row["adaptcoll"] >= 2  # the device buckets with the threshold at 0, served
        assert row["native_reasons"].get("native (staged): below native_below", 0) >= 2
        # a device array at or above multi_device_pack_below goes alone; 0 packs none
        with adaptcoll.configured(multi_device_pack_below=0):
            before = _device_notes()
            comm.Allreduce_multi(devs, out_d, MPI.SUM)
            assert _device_notes()[0] == before[0]
            assert all(np.array_equal(o.get(), h) for o, h in zip(out_d, dev_src))
        with adaptcoll.configured(multi_device_pack_below=100):  # 40 f8 = 320 bytes: alone
            units = _layout(parse_group(devs, out_d, MPI.SUM))
            assert sorted(u.arrays for u in units if u.packed) == [(1, 2)]
    finally:
        comm.Free()


def test_device_bucket_reused_and_refreshed(fake_cupy):
    """The cached layout of device arrays holds while they keep their memory, and a persistent grouped
    call's device bucket sees inputs changed between starts."""
    import fake_device as fd

    comm = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    try:
        cache.clear()
        src = [np.arange(n, dtype="i4") for n in (4, 0, 9, 3)]
        devs = [fd.CAIBuffer(h) for h in src]
        outs = [fd.CAIBuffer(np.zeros_like(h)) for h in src]
        comm.Allreduce_multi(devs, outs)
        comm.Allreduce_multi(devs, outs)
        assert len(cache._entries) == 1
        devs[2].array = fd.device_array(np.full(9, 5, "i4"))  # pointed at other memory: a new layout
        comm.Allreduce_multi(devs, outs)
        assert len(cache._entries) == 1 and np.all(outs[2].get() == 5)
        preq = comm.Allreduce_multi_init(devs, outs)
        synchronized = fake_cupy.cuda.runtime.synchronized
        for step in range(2):
            for d, h in zip(devs, src):
                d.set(h * (step + 2))
            for o in outs:
                o.set(np.full(o.array.shape, -1, "i4"))
            synchronized.clear()
            preq.Start()
            assert synchronized.count(1) >= 1  # the producers' stream (CAIBuffer's: 1), waited for
            preq.Wait()
            assert all(np.array_equal(o.get(), h * (step + 2)) for o, h in zip(outs, src))
        preq.Free()
    finally:
        comm.Free()


def test_device_bucket_completes_once_its_copies_back_land(fake_cupy, monkeypatch):
    """A device bucket's arrays complete (their requests, and the group's) only once the event recorded
    after the copies back is done: Test() says False until then, Wait() waits for it."""
    import fake_device as fd

    events: list = []

    class HeldEvent:  # done only once released
        def __init__(self) -> None:
            self.released, self.waited = False, False
            events.append(self)

        @property
        def done(self) -> bool:
            return self.released

        def synchronize(self) -> None:
            self.waited = self.released = True

    from adaptcoll.forms.grouped.devpack import DevicePacker

    unpack = DevicePacker.unpack

    def held_unpack(self, src, stream):
        unpack(self, src, stream)
        return HeldEvent()

    monkeypatch.setattr(DevicePacker, "unpack", held_unpack)
    comm = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    try:
        src = [np.arange(n, dtype="f4") + 1 for n in (5, 7)]
        devs = [fd.CAIBuffer(h) for h in src]
        big = np.zeros(1 << 20, "u1")  # a host array alone (no event)
        req = comm.Iallreduce_multi([*devs, big], None, MPI.SUM)
        for _ in range(50):
            assert not req.requests[0].Test() and not req.requests[1].Test() and not req.Test()
        assert len(events) == 1  # the bucket's copies back were enqueued
        assert req.requests[2].Test()  # the host array is done meanwhile
        events[0].released = True
        assert req.requests[0].Test() and req.requests[1].Test() and req.Test()
        assert all(np.array_equal(d.get(), h) for d, h in zip(devs, src))
        events.clear()
        comm.Iallreduce_multi(devs, None, MPI.SUM).Wait()  # Wait synchronizes the event
        assert len(events) == 1 and events[0].waited
    finally:
        comm.Free()


def _piece_launches() -> tuple[list, list]:
    """The fake gather and scatter kernels' launches so far: (grid, block, stream, pieces, table address)."""
    from adaptcoll.backends.cupy_backend import PIECE_KERNELS, load_kernel

    gather, scatter = (load_kernel(name).kernel for name in PIECE_KERNELS)
    return gather.launches, scatter.launches


def test_device_buckets_copy_with_one_kernel_each_way(fake_cupy, monkeypatch):
    """Hundreds of small device arrays of several dtypes (CuPy arrays and interface-only ones) go into
    their buckets with one gather launch and come back with one scatter launch per bucket of at least
    BATCH_FROM arrays (memcpyAsync below), over a device table made once per layout (the cached layout
    and a persistent request launch with the same table); results hold in every form, persistent
    started twice with changed inputs; small bucket caps spread the arrays over several tables and
    small pieces split the arrays."""
    import fake_device as fd

    from adaptcoll.forms.grouped import devpack
    from adaptcoll.forms.grouped.args import parse_group
    from adaptcoll.forms.grouped.multi import _layout

    cupy = fake_cupy
    rng = np.random.default_rng(11)
    dtypes = ("f4", "f8", "i4", "u1", "f2")
    src = [np.asarray(rng.integers(-50, 50, int(rng.integers(0, 1200))), dtypes[i % 5]) for i in range(300)]
    src[7] = src[7][:0]  # empty arrays take part too

    def dev(host, i):
        return fd.CAIBuffer(host) if i % 7 == 3 else cupy.asarray(host)

    def host(arrays):
        return [a.get() for a in arrays]

    def batched_buckets(sends, recvs):
        units = _layout(parse_group(sends, recvs, MPI.SUM))
        group = parse_group(sends, recvs, MPI.SUM)
        return [u for u in units if u.device and sum(group.nbytes[i] > 0 for i in u.arrays) >= devpack.BATCH_FROM]

    comm = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    try:
        cache.clear()
        gather, scatter = _piece_launches()
        sends = [dev(h, i) for i, h in enumerate(src)]
        recvs = [dev(np.full_like(h, 7), i) for i, h in enumerate(src)]
        expected = len(batched_buckets(sends, recvs))
        assert expected == 5  # one bucket per dtype, each of many arrays
        seen: list = []
        for _ in range(2):  # the second call: the cached layout, its tables again
            g0, s0 = len(gather), len(scatter)
            comm.Allreduce_multi(sends, recvs, MPI.SUM)
            assert all(np.array_equal(r, h) for r, h in zip(host(recvs), src))
            assert len(gather) - g0 == expected and len(scatter) - s0 == expected
            seen.append(sorted(launch[4] for launch in gather[g0:]))
        assert seen[0] == seen[1]
        inplace = [dev(h.copy(), i) for i, h in enumerate(src)]
        g0 = len(gather)
        comm.Iallreduce_multi(inplace, None, MPI.MAX).Wait()
        assert all(np.array_equal(r, h) for r, h in zip(host(inplace), src)) and len(gather) - g0 == expected
        # few arrays: memcpyAsync, no launch
        g0 = len(gather)
        few = [cupy.asarray(h) for h in src[:15:5]]
        comm.Allreduce_multi(few, [cupy.asarray(np.zeros_like(h)) for h in src[:15:5]])
        assert len(gather) == g0
        # small buckets: several tables per dtype; small pieces: arrays cut into several
        with monkeypatch.context() as patch, adaptcoll.configured(multi_device_bucket_size=40000):
            patch.setattr(devpack, "PIECE_BYTES", 48)
            recvs2 = [dev(np.zeros_like(h), i) for i, h in enumerate(src)]
            several = len(batched_buckets(sends, recvs2))
            assert several > 2 * expected
            g0 = len(gather)
            comm.Allreduce_multi(sends, recvs2, MPI.SUM)
            assert all(np.array_equal(r, h) for r, h in zip(host(recvs2), src))
            assert len(gather) - g0 == several
            assert any(launch[3] > 30 for launch in gather[g0:])  # pieces beyond the arrays' count
        # persistent: one table each way for good, inputs changed between starts
        preq = comm.Allreduce_multi_init(sends, recvs, MPI.SUM)
        seen = []
        for step in range(2):
            changed = [(h * (step + 2)).astype(h.dtype) for h in src]
            for s, c in zip(sends, changed):
                s.set(c)
            for r, h in zip(recvs, src):
                r.set(np.full_like(h, 9))
            g0 = len(gather)
            preq.Start()
            preq.Wait()
            assert all(np.array_equal(r, c) for r, c in zip(host(recvs), changed)), step
            seen.append(sorted(launch[4] for launch in gather[g0:]))
            assert len(seen[-1]) == expected
        assert seen[0] == seen[1]
        preq.Free()
    finally:
        comm.Free()


def test_fake_piece_kernels_refuse_host_memory(fake_cupy):
    """The stand-in gather kernel refuses a table naming host memory, as a GPU would fault."""
    from adaptcoll.backends.cupy_backend import load_kernel
    from adaptcoll.forms.grouped.devpack import piece_table

    cupy = fake_cupy
    bucket = cupy.empty(8, "u1")
    on_host = np.arange(8, dtype="u1")
    table = cupy.asarray(piece_table([(on_host.ctypes.data, 0, 8)]))
    gather = load_kernel("adaptcoll_gather_pieces").kernel
    with pytest.raises(AssertionError, match="not device memory"):
        gather((1,), (256,), (bucket, table, np.uint64(1)), 0, cupy.cuda.Stream())
    with pytest.raises(AssertionError, match="not device memory"):
        gather((1,), (256,), (on_host, table, np.uint64(1)), 0, cupy.cuda.Stream())


def test_cached_layout_of_cupy_arrays_checks_no_address(fake_cupy, monkeypatch):
    """A cached layout is reused for the same CuPy arrays without reading any array's address (they
    cannot change it), while an interface-only array's address is still compared on every call."""
    import fake_device as fd

    calls: list = []
    real = cache.signature
    monkeypatch.setattr(cache, "signature", lambda a: calls.append(a) or real(a))
    comm = adaptcoll.Intracomm(MPI.COMM_SELF.Dup())
    try:
        cache.clear()
        cupy = fake_cupy
        arrays = [cupy.asarray(np.arange(n, dtype="f4")) for n in (3, 9, 4, 12, 5)]
        comm.Allreduce_multi(arrays)
        comm.Allreduce_multi(arrays)
        assert len(cache._entries) == 1 and calls == []
        cai = fd.CAIBuffer(np.arange(6, dtype="f4"))
        comm.Allreduce_multi([*arrays, cai])
        del calls[:]
        comm.Allreduce_multi([*arrays, cai])
        assert calls == [cai]
        cai.array = fd.device_array(np.full(6, 2, "f4"))  # pointed elsewhere: a new layout
        comm.Allreduce_multi([*arrays, cai])
        assert np.all(cai.get() == 2) and all(np.array_equal(a.get(), np.arange(a.size)) for a in arrays)
    finally:
        comm.Free()
