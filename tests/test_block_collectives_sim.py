"""The ring Allgather and ring Reduce-scatter in-process, on the loopback transport: every p in 1..17,
even and uneven blocks (empty ones included), segments of a few elements, in place and not, random
completion orders, windows and sync modes, asynchronous out-of-order folds; exact results, inputs
untouched, one message per segment per link with unique tags, fixed fold order."""

from __future__ import annotations

import numpy as np
import pytest

from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.deferred import DeferredBackend
from adaptcoll.backends.numpy_backend import UFUNC_BY_OP, NumpyBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.plans.blocks import block_segments, plan_block_segments, tag_plan
from adaptcoll.protocols.blockring import RingAllgather, RingReduceScatter
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.operation import Operation
from adaptcoll.runtime.loopback import LoopbackWorld

SEG = 3  # elements per segment


class RecordingTransport:
    """Wraps a loopback transport and records every send as (source, dest, tag)."""

    def __init__(self, inner, log):
        self._inner, self._log = inner, log
        self.rank, self.size = inner.rank, inner.size

    def isend(self, buf, dest, tag, on_done, synchronous=False):
        self._log.append((self.rank, dest, tag))
        self._inner.isend(buf, dest, tag, on_done, synchronous)

    def irecv(self, buf, source, tag, on_done):
        self._inner.irecv(buf, source, tag, on_done)

    def watch(self, poll, on_done):
        self._inner.watch(poll, on_done)


def _counts(p, k):
    """Block lengths for case k: even (n = 0, 1, SEG, several segments plus a rest) or uneven with empty blocks."""
    even = [0, 1, SEG, 2 * SEG + 1, 5 * SEG]
    if k < len(even):
        return (even[k],) * p
    rng = np.random.default_rng(100 * p + k)
    return tuple(int(x) for x in rng.integers(0, 3 * SEG, p) * rng.integers(0, 2, p))


def _data(p, total, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(-3, 4, total).astype(dtype) for _ in range(p)]


def _world(p, seed, window=(2, 3), sync="first", backend=None, log=None, dtype="i8"):
    world = LoopbackWorld(p, seed)
    backend = backend or NumpyBackend()
    pools = [SegmentPool(backend, np.dtype(dtype)) for _ in range(p)]

    def ctx(r, plan):
        t = world.transports[r] if log is None else RecordingTransport(world.transports[r], log)
        return OpContext(t, backend, plan, window[0], window[1], sync, False, pools[r])

    return world, ctx, pools


def run_allgather(p, counts, seed, in_place=False, **kw):
    blocks = block_segments(counts, SEG)
    plan = tag_plan(blocks, 11 * seed, 1 << 15)
    world, ctx, _ = _world(p, seed, **kw)
    total = sum(counts)
    full = _data(1, total, "i8", seed)[0]
    outs, ops = [], []
    for r in range(p):
        lo, hi = blocks.displs[r], blocks.displs[r] + counts[r]
        out = np.full(total, -99, "i8")
        local = None
        if in_place:
            out[lo:hi] = full[lo:hi]
        else:
            local = full[lo:hi].copy()
        op = Operation()
        RingAllgather(ctx(r, plan), blocks, local, out, op.complete).start()
        outs.append(out)
        ops.append(op)
    world.run(lambda: all(o.done for o in ops))
    assert world.unmatched == 0
    return outs, full


def run_reduce_scatter(p, counts, seed, in_place=False, op=ReduceOp("SUM"), dtype="i8", **kw):
    blocks = block_segments(counts, SEG)
    plan = tag_plan(blocks, 5 * seed, 1 << 15)
    world, ctx, pools = _world(p, seed, dtype=dtype, **kw)
    total = sum(counts)
    data = _data(p, total, dtype, seed)
    given = [d.copy() for d in data]
    outs, ops = [], []
    for r in range(p):
        result = data[r][: counts[r]] if in_place else np.full(counts[r], 99, dtype)
        operation = Operation()
        RingReduceScatter(ctx(r, plan), blocks, data[r], result, op, operation.complete, in_place).start()
        outs.append(result)
        ops.append(operation)
    world.run(lambda: all(o.done for o in ops))
    assert world.unmatched == 0
    for r in range(p):
        if in_place:  # the rest of the contribution is left as it was (as MPICH leaves it)
            np.testing.assert_array_equal(data[r][counts[r] :], given[r][counts[r] :])
        else:
            np.testing.assert_array_equal(data[r], given[r], err_msg="a contribution was modified")
    return outs, given, blocks, pools


def _sum(given, op):
    acc = given[0].copy()
    for x in given[1:]:
        UFUNC_BY_OP[op.name](acc, x, out=acc)
    return acc


@pytest.mark.parametrize("in_place", [False, True])
def test_allgather_every_p_and_block_shape(in_place):
    for p in range(1, 18):
        for k in range(7):
            counts = _counts(p, k)
            outs, full = run_allgather(p, counts, seed=p * 10 + k, in_place=in_place)
            for r in range(p):
                np.testing.assert_array_equal(outs[r], full, err_msg=f"p={p} counts={counts} rank {r}")


OP_TYPES = [("SUM", "i8"), ("PROD", "i4"), ("MAX", "f4"), ("MIN", "i2"), ("BXOR", "u1"), ("SUM", "f8")]


@pytest.mark.parametrize("in_place", [False, True])
def test_reduce_scatter_every_p_and_block_shape(in_place):
    for p in range(1, 18):
        for k in range(7):
            counts = _counts(p, k)
            opname, dtype = OP_TYPES[(p + k) % len(OP_TYPES)]
            op = ReduceOp(opname)
            outs, given, blocks, _ = run_reduce_scatter(p, counts, p * 10 + k, in_place, op, dtype)
            expect = _sum(given, op)
            for r in range(p):
                lo = blocks.displs[r]
                np.testing.assert_array_equal(
                    outs[r], expect[lo : lo + counts[r]], err_msg=f"p={p} counts={counts} {opname} rank {r}"
                )


@pytest.mark.parametrize("window,sync", [((1, 1), "all"), ((2, 3), "none"), ((4, 2), "first")])
def test_windows_sync_modes_and_reordering(window, sync):
    for p in (2, 3, 5, 8):
        for seed in range(4):
            counts = (4 * SEG + 1,) * p
            outs, full = run_allgather(p, counts, seed, in_place=seed % 2 == 1, window=window, sync=sync)
            assert all(np.array_equal(o, full) for o in outs)
            outs, given, blocks, _ = run_reduce_scatter(p, counts, seed, seed % 2 == 1, window=window, sync=sync)
            expect = _sum(given, ReduceOp("SUM"))
            for r in range(p):
                np.testing.assert_array_equal(outs[r], expect[blocks.displs[r] : blocks.displs[r] + counts[r]])


def test_asynchronous_folds_deferred_and_out_of_order():
    """Folds that finish late and out of order (GPU-like): no buffer is sent or reused before its fold is done."""
    for p in (2, 3, 4, 7):
        for seed in range(3):
            be = DeferredBackend(seed=seed, max_delay_polls=6)
            counts = (3 * SEG + 2,) * p
            outs, given, blocks, _ = run_reduce_scatter(p, counts, seed, seed == 1, backend=be)
            expect = _sum(given, ReduceOp("SUM"))
            for r in range(p):
                np.testing.assert_array_equal(outs[r], expect[blocks.displs[r] : blocks.displs[r] + counts[r]])
            assert be.stats.completed == be.stats.started > 0


def test_one_message_per_segment_per_link_with_unique_tags():
    for p in (2, 3, 6):
        counts = (2 * SEG + 1,) * p
        nseg = block_segments(counts, SEG).nseg
        for run in (run_allgather, run_reduce_scatter):
            log: list = []
            run(p, counts, 3, log=log)
            assert len(log) == (p - 1) * nseg  # every rank sends p-1 blocks
            assert all(dest == (src + 1) % p for src, dest, _ in log)  # the ring only
            assert len(set(log)) == len(log)  # a tag is used once per link


def test_reduce_scatter_memory_is_one_scratch_array_reused():
    counts = (4 * SEG,) * 4
    _, _, _, pools = run_reduce_scatter(4, counts, 1)
    assert all(pool.allocated == 1 and pool.cached == 1 for pool in pools)
    _, _, _, pools = run_reduce_scatter(2, counts[:2], 1)  # two ranks, not in place: no scratch at all
    assert all(pool.allocated == 0 for pool in pools)


def test_fixed_fold_order_is_independent_of_timing():
    counts = (5 * SEG,) * 5
    first = None
    for seed in range(4):
        be = DeferredBackend(seed=seed, max_delay_polls=4) if seed % 2 else None
        rng = np.random.default_rng(0)
        data = [rng.standard_normal(sum(counts)) for _ in range(5)]  # floats: the order shows in the bits
        blocks = block_segments(counts, SEG)
        world, ctx, _ = _world(5, seed, backend=be, dtype="f8")
        plan = tag_plan(blocks, 0, 1 << 15)
        outs, ops = [], []
        for r in range(5):
            out = np.zeros(counts[r])
            operation = Operation()
            RingReduceScatter(ctx(r, plan), blocks, data[r], out, ReduceOp("SUM"), operation.complete).start()
            outs.append(out)
            ops.append(operation)
        world.run(lambda ops=ops: all(o.done for o in ops))
        got = np.concatenate(outs)
        if first is None:
            first = got
        np.testing.assert_array_equal(got, first)


def test_plan_block_segments_caps_and_tag_space():
    blocks = plan_block_segments([10, 0, 7], 8, 16, 1 << 15)
    assert blocks.seg_count == 2 and blocks.nseg == 5 + 0 + 4
    assert [blocks.segments(b) for b in range(3)] == [range(0, 5), range(5, 5), range(5, 9)]
    assert plan_block_segments([10, 7], 8, 16, 1 << 15, max_segments=2).seg_count == 5
    small = plan_block_segments([1000] * 4, 1, 1, 16)
    assert small.nseg <= 16
    with pytest.raises(ValueError):
        plan_block_segments([1] * 4, 1, 1, 3)


def test_settings_and_the_shipped_rule():
    from adaptcoll.runtime import settings
    from adaptcoll.tune.blocks import block_below, choose_block
    from adaptcoll.tune.policy import NEVER, CommFacts, resolve

    with pytest.raises(ValueError, match="ADAPTCOLL_ALLGATHER_ALGORITHM"):
        settings.from_environ({"ADAPTCOLL_ALLGATHER_ALGORITHM": "binomial"})
    with pytest.raises(ValueError, match="ADAPTCOLL_REDUCE_SCATTER_ALGORITHM"):
        settings.from_environ({"ADAPTCOLL_REDUCE_SCATTER_ALGORITHM": "ring:radix=2"})
    two = resolve(b"", "", CommFacts(2, 1, 2, 1.0, "MPICH 5.0.2"), warn=False)
    four = resolve(b"", "", CommFacts(4, 1, 4, 1.0, "MPICH 5.0.2"), warn=False)
    with settings.configured():
        assert block_below(two, "reduce_scatter") == 4 << 20 and block_below(two, "allgather") == NEVER
        assert block_below(four, "reduce_scatter") == NEVER
        call = choose_block(two, "reduce_scatter", 16 << 20)
        assert call.serve and call.segment_size == 32 << 20 and call.source == "defaults"
        assert not choose_block(two, "reduce_scatter", 1 << 20).serve
        assert not choose_block(two, "allgather", 64 << 20).serve
    with settings.configured(native_below=0, reduce_scatter_algorithm="ring:segment_size=1K,max_segments=3"):
        assert block_below(four, "reduce_scatter") == 0
        call = choose_block(four, "reduce_scatter", 10)
        assert call.serve and (call.segment_size, call.max_segments) == (1024, 3)
        assert choose_block(four, "allgather", 10).serve
    with settings.configured(native_below=0, allgather_algorithm="native"):
        call = choose_block(four, "allgather", 1 << 30)
        assert not call.serve and call.native is not None and call.native.reason == "algorithm=native"


def test_simulator_runs_the_ring_allgather_and_reduce_scatter_on_real_data():
    """The simulator's Allgather / Reduce_scatter_block: the real protocols on 1..17 simulated ranks, with
    real data (fair and FIFO links, shared nodes, noise), and what the shipped rule would do."""
    from adaptcoll.runtime import settings
    from adaptcoll.simulate.noise_setup import parse_noise
    from adaptcoll.simulate.params import CostParams
    from adaptcoll.simulate.programs import Job, library_goes_native, prepare
    from adaptcoll.simulate.run import run_once

    noise = parse_noise(["1kHz x 40us, poisson", "skew: uniform:50us"])
    transfers = [CostParams(eager=2048), CostParams(eager=2048, links="fifo"), CostParams(ranks_per_node=3)]
    for coll in ("allgather", "reduce_scatter_block"):
        for size in range(1, 18):
            for i, n in enumerate((0, 1, 70 + size)):
                job = Job(coll, size, 4 * max(1, n * size), 64, "", settings.Settings())
                _, world, bufs = run_once(
                    job, transfers[(size + i) % 3], noise=noise if i == 1 else None, seed=size, data=True
                )
                bufs.check()
                assert world.unmatched == 0, (coll, size, n)
    served = prepare(Job("reduce_scatter_block", 2, 16 << 20, 0))
    assert served.choice.serve and served.plan.nseg == 2  # the rule at 2 ranks: one segment per block
    assert not library_goes_native(Job("reduce_scatter_block", 2, 16 << 20, 0))
    assert library_goes_native(Job("allgather", 2, 16 << 20, 0))
    with pytest.raises(ValueError, match="ring only"):
        prepare(Job("allgather", 4, 1 << 20, 0, "binomial"))


@pytest.mark.parametrize("run", ["allgather", "reduce_scatter"])
def test_block_lengths_that_differ_across_ranks_meet_a_message_of_another_size(run):
    """A tag means the same piece of the same block on every rank, so ranks that disagree about the
    block length meet a message of the wrong size (an error), never a piece of another block."""
    from adaptcoll.runtime.loopback import SizeMismatch

    p = 3
    world, ctx, _ = _world(p, 0, dtype="f8")
    ops = []
    for r in range(p):
        n = 10 if r == 0 else 20  # 4 segments of 3, 1 (rank 0) against 7 of 3, 2
        blocks = block_segments((n,) * p, SEG)
        plan = tag_plan(blocks, 0, 1 << 15)
        operation = Operation()
        if run == "allgather":
            RingAllgather(ctx(r, plan), blocks, np.ones(n), np.zeros(n * p), operation.complete).start()
        else:
            RingReduceScatter(
                ctx(r, plan), blocks, np.ones(n * p), np.zeros(n), ReduceOp("SUM"), operation.complete
            ).start()
        ops.append(operation)
    with pytest.raises(SizeMismatch):
        world.run(lambda: all(o.done for o in ops))
