"""The protocols in-process, on the loopback transport: every tree, sizes up to 33, random completion
orders, asynchronous (deferred, out-of-order) folds like a GPU's, bounded extra memory."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.deferred import DeferredBackend
from adaptcoll.backends.numpy_backend import NumpyBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.plans import trees
from adaptcoll.plans.dealing import tree_links
from adaptcoll.plans.segments import plan_segments
from adaptcoll.plans.topology import parse as parse_topology
from adaptcoll.protocols.allreduce import Allreduce
from adaptcoll.protocols.bcast import Bcast
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.links import start_on_links
from adaptcoll.protocols.reduce import Reduce
from adaptcoll.runtime.loopback import LoopbackWorld

KINDS = list(trees.KINDS)  # every tree kind


def _trees(kind, size, root):
    params = {"levels": parse_topology(f"nodes={min(3, size)}", size)} if kind == "topo" else {}
    return trees.build_all(kind, size, root, **params)


def _start_all(world, tset, nseg, start_one):
    """One protocol per tree per rank through the library's own link dealing; returns the operations."""
    ops = []
    for r in range(world.size):
        links = tree_links(tset, r, nseg)
        ops.append(start_on_links(links, None, lambda link, done, r=r: start_one(r, link, done)))
    return ops


def _all_done(ops):
    return lambda: all(op.done for op in ops)


def run_bcast(size, root, kind, count, seg, seed, window=(2, 3), sync="first"):
    world = LoopbackWorld(size, seed)
    plan = plan_segments(count, 1, seg, tag_base=seed, tag_space=1 << 15)
    tset = _trees(kind, size, root)
    expect = np.random.default_rng(seed).integers(0, 255, count).astype(np.uint8)
    bufs = [expect.copy() if r == root else np.zeros(count, np.uint8) for r in range(size)]
    be = NumpyBackend()
    ctxs = [OpContext(world.transports[r], be, plan, window[0], window[1], sync) for r in range(size)]
    ops = _start_all(
        world,
        tset,
        plan.nseg,
        lambda r, link, done: Bcast(ctxs[r], link.parent, link.children, bufs[r], link.segs, done).start(),
    )
    world.run(_all_done(ops))
    assert world.unmatched == 0
    for r in range(size):
        np.testing.assert_array_equal(bufs[r], expect)
    return world


def run_reduce(
    size,
    root,
    kind,
    count,
    seg_elems,
    seed,
    backend,
    ordered=False,
    in_place=False,
    allreduce=False,
    op=ReduceOp("SUM"),
    dtype="i8",
    data=None,
):
    world = LoopbackWorld(size, seed)
    plan = plan_segments(count, 1, seg_elems, tag_base=3 * seed, tag_space=1 << 15)
    tset = _trees(kind, size, root)
    if data is None:
        data = [np.random.default_rng(seed * 100 + r).integers(-5, 6, count).astype(dtype) for r in range(size)]
    original = [d.copy() for d in data]
    outs = [d if in_place and (allreduce or r == root) else np.zeros(count, dtype) for r, d in enumerate(data)]
    pools = [SegmentPool(backend, np.dtype(dtype)) for _ in range(size)]
    ctxs = [OpContext(world.transports[r], backend, plan, 2, 3, "first", ordered, pools[r]) for r in range(size)]

    def start_one(r, link, done):
        if allreduce:
            Allreduce(ctxs[r], link.parent, link.children, data[r], outs[r], op, link.segs, done).start()
        else:
            target = outs[r] if r == root else None
            Reduce(ctxs[r], link.parent, link.children, data[r], target, op, link.segs, done).start()

    ops = _start_all(world, tset, plan.nseg, start_one)
    world.run(_all_done(ops))
    assert world.unmatched == 0
    for r in range(size):
        if not (in_place and (allreduce or r == root)):
            np.testing.assert_array_equal(data[r], original[r], err_msg="a contribution was modified")
    return world, outs, original, pools


@pytest.mark.parametrize("kind", KINDS)
def test_bcast_every_tree(kind):
    for size, seed in itertools.product([1, 2, 3, 5, 8, 13, 33], range(2)):
        for root in sorted({0, size - 1, size // 3}):
            for count, seg in [(0, 4), (1, 4), (7, 8), (64, 8), (100, 7)]:
                run_bcast(size, root, kind, count, seg, seed)


@pytest.mark.parametrize("kind", KINDS)
def test_reduce_and_allreduce_every_tree(kind):
    be = NumpyBackend()
    for size, seed in [(1, 0), (2, 1), (3, 0), (6, 1), (9, 0), (17, 1)]:
        for root in sorted({0, size - 1, size // 2}):
            for (count, seg), ordered, in_place in itertools.product(
                [(0, 8), (1, 8), (37, 1), (37, 8)], [False, True], [False, True]
            ):
                for allreduce in (False, True):
                    _, outs, original, _ = run_reduce(
                        size, root, kind, count, seg, seed, be, ordered, in_place, allreduce
                    )
                    expect = np.sum(original, axis=0) if count else np.zeros(0, "i8")
                    ranks = range(size) if allreduce else [root]
                    for r in ranks:
                        np.testing.assert_array_equal(outs[r], expect, err_msg=f"rank {r}")


def test_asynchronous_folds_deferred_and_out_of_order():
    """Folds that finish later, out of order (as GPU kernels polled by event): results still exact,
    nothing sent or read before its fold finished (DeferredBackend computes only at completion)."""
    checked = 0
    for size, kind, seed in itertools.product([2, 4, 7, 12], ["binomial", "binary", "two_tree", "pipeline"], range(2)):
        be = DeferredBackend(seed=seed, max_delay_polls=6)
        for ordered, allreduce, in_place in itertools.product([False, True], [False, True], [False, True]):
            _, outs, original, _ = run_reduce(size, size // 2, kind, 97, 4, seed, be, ordered, in_place, allreduce)
            expect = np.sum(original, axis=0)
            for r in range(size) if allreduce else [size // 2]:
                np.testing.assert_array_equal(outs[r], expect)
            checked += 1
        assert be.stats.completed_out_of_order > 0, "the deferred backend never reordered completions"
        assert be.stats.max_in_flight > 1
        assert be.pending == 0
    assert checked == 4 * 4 * 2 * 8


def _affine(lower, higher):
    """higher = lower o higher for affine maps x -> a*x + b mod 2^32 packed as (a, b) in uint64: non-commutative."""
    a1, b1 = lower >> np.uint64(32), lower & np.uint64(0xFFFFFFFF)
    a2, b2 = higher >> np.uint64(32), higher & np.uint64(0xFFFFFFFF)
    a = (a1 * a2) & np.uint64(0xFFFFFFFF)
    b = (a2 * b1 + b2) & np.uint64(0xFFFFFFFF)
    higher[...] = (a << np.uint64(32)) | b


def test_ordered_mode_gives_rank_order_for_noncommutative_ops():
    op = ReduceOp("USER", commutative=False, user_fold=_affine)
    be = NumpyBackend()
    for size, seed in itertools.product([2, 3, 5, 8, 11], range(3)):
        rng = np.random.default_rng(seed)
        data = [rng.integers(1, 1 << 32, 50, dtype=np.uint64) for _ in range(size)]
        expect = data[0].copy()
        for r in range(1, size):
            nxt = data[r].copy()
            _affine(expect, nxt)
            expect = nxt
        for allreduce in (False, True):
            _, outs, _, _ = run_reduce(
                size,
                0,
                "in_order_binomial",
                50,
                7,
                seed,
                be,
                ordered=True,
                allreduce=allreduce,
                op=op,
                dtype="u8",
                data=[d.copy() for d in data],
            )
            np.testing.assert_array_equal(outs[0], expect)


def test_reproducible_mode_is_independent_of_arrival_order():
    be = NumpyBackend()
    rng = np.random.default_rng(5)
    data = [rng.standard_normal(300) * 10.0 ** rng.integers(-8, 8, 300) for _ in range(9)]
    results = set()
    for seed in range(8):
        _, outs, _, _ = run_reduce(
            9, 0, "binomial", 300, 16, seed, be, ordered=True, dtype="f8", data=[d.copy() for d in data]
        )
        results.add(outs[0].tobytes())
    assert len(results) == 1
    arrival = set()
    for seed in range(8):
        _, outs, _, _ = run_reduce(
            9, 0, "binomial", 300, 16, seed, be, ordered=False, dtype="f8", data=[d.copy() for d in data]
        )
        arrival.add(outs[0].tobytes())
    assert len(arrival) > 1, "arrival order never changed the float sum: the test shows nothing"


def test_extra_memory_bounded_by_windows_not_message_size():
    be = NumpyBackend()
    for nseg in (50, 400):
        _, _, _, pools = run_reduce(8, 0, "binomial", nseg * 4, 4, 1, be)
        worst = max(p.allocated for p in pools)
        # children x recv_window + lookahead (recv + send window), per rank, whatever the message size
        assert worst <= 3 * 3 + 5, worst


def test_sync_modes_and_windows():
    for sync, window in itertools.product(["first", "all", "none"], [(1, 1), (2, 3), (4, 8)]):
        world = run_bcast(9, 4, "binary", 200, 8, 3, window=window, sync=sync)
        if sync == "none":
            assert world.sync_sends == 0
        elif sync == "all":
            assert world.sync_sends == world.messages
        else:
            assert 0 < world.sync_sends < world.messages


def test_segment_views_made_on_use_for_huge_segment_counts(monkeypatch):
    """Past EAGER_VIEWS segments an operation makes its views on use (bounded memory): same results."""
    from adaptcoll.protocols import pieces

    monkeypatch.setattr(pieces, "EAGER_VIEWS", 0)
    be = NumpyBackend()
    for size, kind in [(5, "binomial"), (7, "binary")]:
        run_bcast(size, 1, kind, 100, 7, 1)
        _, outs, original, _ = run_reduce(size, 0, kind, 37, 4, 1, be, allreduce=True)
        for r in range(size):
            np.testing.assert_array_equal(outs[r], np.sum(original, axis=0))
