"""The ring and recursive-halving (Rabenseifner) allreduces in-process, on the loopback transport: every
p in 1..9, 12, 16, sizes around the block and segment edges, dtypes and ops, in place and not, random
completion orders, asynchronous out-of-order folds; tags unique per link, bytes per rank, bounded pool
memory, fixed fold order (reproducible), rank order for non-commutative ops."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest

from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.deferred import DeferredBackend
from adaptcoll.backends.numpy_backend import UFUNC_BY_OP, NumpyBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.plans.segments import plan_blocks
from adaptcoll.protocols.algorithms import ALLREDUCE_ALGORITHMS
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.operation import Operation
from adaptcoll.protocols.rabenseifner import main_ranks
from adaptcoll.protocols.ring import block_segments
from adaptcoll.runtime import settings
from adaptcoll.runtime.loopback import LoopbackWorld

ALGORITHMS = sorted(ALLREDUCE_ALGORITHMS)
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]
SEG = 4  # elements per segment: messages of a few dozen elements already have many segments per block


class RecordingTransport:
    """Wraps a loopback transport and records every send as (source, dest, tag, bytes)."""

    def __init__(self, inner, log):
        self._inner, self._log = inner, log
        self.rank, self.size = inner.rank, inner.size

    def isend(self, buf, dest, tag, on_done, synchronous=False):
        self._log.append((self.rank, dest, tag, buf.nbytes))
        self._inner.isend(buf, dest, tag, on_done, synchronous)

    def irecv(self, buf, source, tag, on_done):
        self._inner.irecv(buf, source, tag, on_done)

    def watch(self, poll, on_done):
        self._inner.watch(poll, on_done)


def _counts(p):
    """Empty, one element, fewer elements than ranks, a segment minus one, a segment, many segments."""
    return sorted({0, 1, max(1, p - 1), SEG - 1, SEG, p * SEG, 7 * p * SEG + 3})


def _data(rank, count, dtype, seed):
    rng = np.random.default_rng(1000 * seed + rank)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, count).astype(dt)
    if dt.kind == "u":
        return rng.integers(0, 4, count).astype(dt)
    if dt.kind == "c":
        return (rng.integers(-2, 3, count) + 1j * rng.integers(-2, 3, count)).astype(dt)
    return rng.integers(-3, 4, count).astype(dt)  # integers: float sums and products stay exact


def _expected(data, op):
    if op.name == "USER":
        acc = data[0].copy()
        for x in data[1:]:
            nxt = x.copy()
            op.user_fold(acc, nxt)
            acc = nxt
        return acc
    acc = data[0].copy()
    for x in data[1:]:
        UFUNC_BY_OP[op.name](acc, x, out=acc)
    return acc


def run_allreduce(
    name,
    p,
    count,
    seed,
    backend=None,
    dtype="i8",
    op=ReduceOp("SUM"),
    in_place=False,
    window=(2, 3),
    sync="first",
    data=None,
    seg=SEG,
    log=None,
):
    """One allreduce on p loopback ranks; returns (results, contributions as given, pools, world)."""
    algorithm = ALLREDUCE_ALGORITHMS[name]
    backend = backend or NumpyBackend()
    world = LoopbackWorld(p, seed)
    dt = np.dtype(dtype)
    plan = plan_blocks(count, dt.itemsize, seg * dt.itemsize, algorithm.blocks(p), 7 * seed, 1 << 15, 0,
                       algorithm.tags_per_segment)  # fmt: skip
    if data is None:
        data = [_data(r, count, dt, seed) for r in range(p)]
    given = [d.copy() for d in data]
    outs = [d if in_place else np.full(count, 99, dt) for d in data]
    pools = [SegmentPool(backend, dt) for _ in range(p)]
    ops = []
    for r in range(p):
        transport = world.transports[r] if log is None else RecordingTransport(world.transports[r], log)
        ctx = OpContext(transport, backend, plan, window[0], window[1], sync, False, pools[r])
        operation = Operation()
        algorithm.start(ctx, data[r], outs[r], op, operation.complete)
        ops.append(operation)
    world.run(lambda: all(o.done for o in ops))
    assert world.unmatched == 0
    if not in_place:
        for r in range(p):
            np.testing.assert_array_equal(data[r], given[r], err_msg="a contribution was modified")
    return outs, given, pools, world


OP_TYPES = [("SUM", "i8"), ("SUM", "f8"), ("PROD", "i4"), ("MAX", "f4"), ("MIN", "i2"), ("BXOR", "u1"),
            ("LOR", "?"), ("SUM", "c16")]  # fmt: skip


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_size_op_and_type_exact(name):
    cases = 0
    for p in SIZES:
        for k, (count, in_place) in enumerate(itertools.product(_counts(p), [False, True])):
            opname, dtype = OP_TYPES[(p + k) % len(OP_TYPES)]  # every op/type meets many sizes and p
            op = ReduceOp(opname)
            outs, given, _, _ = run_allreduce(name, p, count, seed=p + k, dtype=dtype, op=op, in_place=in_place)
            expect = _expected(given, op) if count else np.zeros(0, dtype)
            for r in range(p):
                np.testing.assert_array_equal(
                    outs[r], expect, err_msg=f"{name} p={p} count={count} {opname} {dtype} in_place={in_place} rank {r}"
                )
            cases += 1
    assert cases == sum(len(_counts(p)) for p in SIZES) * 2


@pytest.mark.parametrize("name", ALGORITHMS)
def test_windows_sync_modes_and_reordering(name):
    """Tiny windows, synchronous sends everywhere (a send completes only when matched), many seeds."""
    for p, (window, sync), seed in itertools.product(
        [2, 3, 5, 6, 8], [((1, 1), "all"), ((1, 1), "none"), ((1, 2), "first"), ((4, 8), "all")], range(3)
    ):
        for in_place in (False, True):
            count = 5 * p * SEG + seed
            outs, given, _, world = run_allreduce(name, p, count, seed, in_place=in_place, window=window, sync=sync)
            expect = np.sum(given, axis=0)
            for r in range(p):
                np.testing.assert_array_equal(outs[r], expect)
            if sync == "all":
                assert world.sync_sends == world.messages
            if sync == "none":
                assert world.sync_sends == 0


@pytest.mark.parametrize("name", ALGORITHMS)
def test_asynchronous_folds_deferred_and_out_of_order(name):
    """Folds that finish later and out of order (as GPU kernels polled by event): still exact, and no
    input read or reused before its fold finished (DeferredBackend checks and computes only at completion)."""
    for p, seed in itertools.product([2, 3, 4, 5, 7, 8, 9, 12, 16], range(2)):
        be = DeferredBackend(seed=seed, max_delay_polls=6)
        for in_place, count in itertools.product([False, True], [p - 1 or 1, 3 * p * SEG + 1]):
            outs, given, _, _ = run_allreduce(name, p, count, seed, backend=be, in_place=in_place)
            expect = np.sum(given, axis=0)
            for r in range(p):
                np.testing.assert_array_equal(outs[r], expect)
        assert be.pending == 0
        if p > 2:
            assert be.stats.completed_out_of_order > 0, "the deferred backend never reordered completions"


@pytest.mark.parametrize("name", ALGORITHMS)
def test_tags_unique_on_every_link_and_bandwidth_per_rank(name):
    """Within one operation no two messages on a (source, dest) link share a tag, and each rank sends
    2(p-1)/p of the message (ring) or 2(p'-1)/p' (recursive halving, plus the whole message for a pair)."""
    for p in SIZES[1:]:
        count = 6 * ALLREDUCE_ALGORITHMS[name].blocks(p) * SEG  # whole segments in equal blocks: exact byte counts
        log: list = []
        run_allreduce(name, p, count, seed=p, log=log)
        per_link = defaultdict(list)
        for src, dst, tag, _ in log:
            per_link[src, dst].append(tag)
        for link, tags in per_link.items():
            assert len(tags) == len(set(tags)), f"{name} p={p}: a tag used twice on link {link}"
        sent = defaultdict(int)
        for src, _, _, nbytes in log:
            sent[src] += nbytes
        total = count * 8
        if name == "ring":
            assert all(sent[r] == 2 * (p - 1) * total // p for r in range(p)), (p, dict(sent))
            assert len(per_link) == p  # only neighbours talk
        else:
            pp = main_ranks(p)
            q = p - pp
            main = [r for r in range(p) if not (r < 2 * q and r % 2 == 0)]
            for r in range(p):
                if r < 2 * q:  # a pair: the whole message once each way, on top of the main share
                    want = total if r % 2 == 0 else 2 * (pp - 1) * total // pp + total
                else:
                    want = 2 * (pp - 1) * total // pp
                assert sent[r] == want, (p, r, dict(sent))
            assert len(main) == pp


@pytest.mark.parametrize("name", ALGORITHMS)
def test_pool_memory_bounded_by_windows_not_message_size(name):
    """In place (arrivals then need pool buffers) the buffers a rank allocates do not grow with the message;
    not in place no pool buffer is needed at all for the ring (arrivals land in the result)."""
    for p in (3, 4, 8):
        worst = []
        for nseg_per_block in (4, 200):
            _, _, pools, _ = run_allreduce(name, p, nseg_per_block * p * SEG, 1, in_place=True)
            worst.append(max(pool.allocated for pool in pools))
        # recv_window + send_window per receive stream (the ring has one, halving one per step + pair)
        streams = 1 if name == "ring" else (main_ranks(p).bit_length() - 1) + 1
        assert max(worst) <= streams * (3 + 2), (name, p, worst)
    _, _, pools, _ = run_allreduce("ring", 5, 40 * 5 * SEG, 1, in_place=False)
    assert max(pool.allocated for pool in pools) == 0


@pytest.mark.parametrize("name", ALGORITHMS)
def test_fixed_fold_order_is_independent_of_timing(name):
    """Floating-point results are bit-identical whatever the completion order and fold timing, and the
    same on every rank (each block is folded once, in an order fixed by the algorithm)."""
    rng = np.random.default_rng(5)
    for p in (3, 6, 9):
        data = [rng.standard_normal(40 * p) * 10.0 ** rng.integers(-8, 8, 40 * p) for _ in range(p)]
        results = set()
        for seed in range(6):
            backend = DeferredBackend(seed=seed, max_delay_polls=5) if seed % 2 else None
            outs, _, _, _ = run_allreduce(name, p, 40 * p, seed, backend=backend, dtype="f8", data=data)
            assert len({o.tobytes() for o in outs}) == 1, "ranks disagree"
            results.add(outs[0].tobytes())
        assert len(results) == 1, f"{name} p={p}: the result depends on timing"


def _affine(lower, higher):
    """higher = lower o higher for affine maps x -> a*x + b mod 2^32 packed as (a, b) in uint64: non-commutative."""
    a1, b1 = lower >> np.uint64(32), lower & np.uint64(0xFFFFFFFF)
    a2, b2 = higher >> np.uint64(32), higher & np.uint64(0xFFFFFFFF)
    a = (a1 * a2) & np.uint64(0xFFFFFFFF)
    b = (a2 * b1 + b2) & np.uint64(0xFFFFFFFF)
    higher[...] = (a << np.uint64(32)) | b


def test_rabenseifner_folds_noncommutative_ops_in_rank_order():
    assert ALLREDUCE_ALGORITHMS["rabenseifner"].rank_ordered and not ALLREDUCE_ALGORITHMS["ring"].rank_ordered
    op = ReduceOp("USER", commutative=False, user_fold=_affine)
    for p, seed, in_place in itertools.product(SIZES, range(2), [False, True]):
        rng = np.random.default_rng(seed)
        count = 3 * p * SEG + 1
        data = [rng.integers(1, 1 << 32, count, dtype=np.uint64) for _ in range(p)]
        backend = DeferredBackend(seed=seed) if seed else None
        outs, given, _, _ = run_allreduce(
            "rabenseifner", p, count, seed, backend=backend, dtype="u8", op=op, in_place=in_place, data=data
        )
        expect = _expected(given, op)
        for r in range(p):
            np.testing.assert_array_equal(outs[r], expect, err_msg=f"p={p} rank {r}")


def test_ring_order_is_not_rank_order():
    """Why the ring does not serve non-commutative ops: its blocks other than 0 fold in rotated order."""
    op = ReduceOp("USER", commutative=False, user_fold=_affine)
    rng = np.random.default_rng(1)
    data = [rng.integers(1, 1 << 32, 4 * SEG, dtype=np.uint64) for _ in range(4)]
    outs, given, _, _ = run_allreduce("ring", 4, 4 * SEG, 0, dtype="u8", op=op, data=data)
    assert not np.array_equal(outs[0], _expected(given, op))


def test_plan_blocks_tile_blocks_with_whole_segments():
    for count, blocks, seg in [(1000, 3, 100), (10, 4, 2), (3, 8, 4), (1 << 20, 16, 4096), (97, 5, 1)]:
        plan = plan_blocks(count, 4, seg * 4, blocks, 0, 1 << 15)
        sizes = [sum(plan.bounds(s)[1] - plan.bounds(s)[0] for s in block_segments(plan.nseg, blocks, b))
                 for b in range(blocks)]  # fmt: skip
        assert sum(sizes) == count
        assert max(sizes) - min(sizes) <= plan.seg_count, (count, blocks, sizes)  # at most one segment apart
    assert plan_blocks(1 << 20, 4, 4 << 20, 2, 0, 1 << 15, max_segments=3).nseg == 2  # 2 MiB blocks, 1 segment each
    assert plan_blocks(1 << 20, 4, 1 << 16, 2, 0, 1 << 15, max_segments=3).nseg == 6  # at most 3 per block
    tight = plan_blocks(1000, 8, 8, 4, 3, tag_space=9, tags_per_segment=2)
    assert tight.nseg * 2 <= 9 and tight.ntags == 2 * tight.nseg
    assert len({tight.tag(i) for i in range(tight.ntags)}) == tight.ntags
    with pytest.raises(ValueError, match="tag_space"):
        plan_blocks(10, 8, 8, 2, 0, tag_space=1, tags_per_segment=2)


def test_allreduce_algorithm_setting_is_allreduce_only():
    assert tuple(ALLREDUCE_ALGORITHMS) == settings.ALLREDUCE_ONLY
    for name in ALGORITHMS:
        assert settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": name}).allreduce_algorithm == name
        for var in ("ADAPTCOLL_BCAST_ALGORITHM", "ADAPTCOLL_REDUCE_ALGORITHM"):
            with pytest.raises(ValueError, match=f"{var}.*allreduce algorithm"):
                settings.from_environ({var: name})
        for bad in (f"{name}:k=1", f"{name}:segment_size=0", f"{name}:max_segments=-1", f"{name}:segment_size"):
            with pytest.raises(ValueError, match="ADAPTCOLL_ALLREDUCE_ALGORITHM"):
                settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": bad})
        value = f"{name}:segment_size=1M,max_segments=2"
        assert settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": value}).allreduce_algorithm == value
        assert settings.block_algorithm(value) == (name, {"segment_size": 1 << 20, "max_segments": 2})
        assert settings.block_algorithm(name) == (name, {})
    with pytest.raises(ValueError, match="rabenseifner"):  # listed among the choices
        settings.from_environ({"ADAPTCOLL_ALLREDUCE_ALGORITHM": "halving"})
