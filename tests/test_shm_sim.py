"""The shared-memory node level in one process: node protocols on a fake shared region with a weak memory
model and seeded interleavings, hierarchical compositions with the loopback transport between nodes,
and the plain-data helpers (node maps, slot geometry, settings parsing of shm algorithms)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adaptcoll.backends.base import ReduceOp
from adaptcoll.backends.numpy_backend import NumpyBackend
from adaptcoll.backends.pool import SegmentPool
from adaptcoll.plans.nodemap import NodeMap, inner_shape
from adaptcoll.plans.segments import plan_segments
from adaptcoll.protocols import loopback_slots as slotsim
from adaptcoll.protocols.context import OpContext
from adaptcoll.protocols.hier import start_allreduce, start_bcast, start_reduce
from adaptcoll.protocols.loopback_slots import FakeRegion, FakeSlots
from adaptcoll.protocols.node import NodeBcast, NodeReduce, chunk_bounds
from adaptcoll.protocols.slots import DONE, POSTED, SlotRing
from adaptcoll.runtime import settings
from adaptcoll.runtime.loopback import Deadlock, LoopbackWorld
from adaptcoll.state import shm

BACKEND = NumpyBackend()
SLOT = 64  # bytes: a few elements per slot, so messages take many slots and rings wrap


def _lower_minus_higher(lower, higher):
    """A non-commutative user op: higher = lower * 3 - higher (the order of the operands shows)."""
    np.subtract(lower * 3, higher, out=higher)


NONCOMMUTATIVE = ReduceOp("USER", commutative=False, user_fold=_lower_minus_higher)


def _reference(op: ReduceOp, inputs: list[np.ndarray]) -> np.ndarray:
    """MPI's result: inputs folded in rank order, acc = acc op x."""
    acc = inputs[0].copy()
    for x in inputs[1:]:
        nxt = x.copy()
        BACKEND.combine(op, acc, nxt, nxt)
        acc = nxt
    return acc


def _counts(itemsize: int) -> list[int]:
    per_slot = SLOT // itemsize
    return [0, 1, per_slot - 1, per_slot, per_slot + 1, 7 * per_slot + 3]


def _data(rank: int, count: int, dtype: str, salt: int) -> np.ndarray:
    return np.random.default_rng(1000 * salt + rank).integers(-2, 3, count).astype(dtype)


class _Node:
    """One node of `size` ranks on a fake region, with the loopback world's watches driving the rings."""

    def __init__(self, size: int, seed: int, nslots: int = 2) -> None:
        self.world = LoopbackWorld(size, seed)
        self.region = FakeRegion(size, nslots, SLOT, seed)
        self.rings = [SlotRing(self.region.views[r], self.world.transports[r]) for r in range(size)]
        self.flags: list[list[bool]] = []

    def done_flag(self, rank: int):
        flag = [False]
        self.flags.append(flag)
        return lambda: flag.__setitem__(0, True)

    def run(self) -> None:
        slotsim.run(self.world, [self.region], lambda: all(f[0] for f in self.flags))


def _node_bcast(node: _Node, count: int, entry: int, salt: int) -> tuple[list[np.ndarray], np.ndarray]:
    size = len(node.rings)
    plan = plan_segments(count, 1, SLOT, 0, 1 << 15)
    expect = np.random.default_rng(salt).integers(0, 256, count).astype(np.uint8)
    bufs = [expect.copy() if r == entry else np.zeros(count, np.uint8) for r in range(size)]
    for r in range(size):
        NodeBcast(node.rings[r], plan, bufs[r], entry, node.done_flag(r)).start()
    return bufs, expect


def _node_reduce(node: _Node, count: int, root, op: ReduceOp, dtype: str, in_place: bool, salt: int):
    size = len(node.rings)
    plan = plan_segments(count, np.dtype(dtype).itemsize, SLOT, 0, 1 << 15)
    local = [_data(r, count, dtype, salt) for r in range(size)]
    expect = _reference(op, local)
    targets = []
    for r in range(size):
        target = None
        if root is None or r == root:
            target = local[r] if in_place else np.zeros(count, dtype)
        targets.append(target)
        NodeReduce(node.rings[r], plan, local[r], target, op, BACKEND, root, node.done_flag(r)).start()
    return targets, expect


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_node_bcast_every_size_entry_and_interleaving(size):
    cases = 0
    for seed, count in itertools.product(range(4), _counts(1)):
        node = _Node(size, seed)
        ops = [_node_bcast(node, count, (seed + k) % size, 31 * seed + k) for k in range(3)]  # back to back
        node.run()
        for bufs, expect in ops:
            for r, buf in enumerate(bufs):
                np.testing.assert_array_equal(buf, expect, err_msg=f"size={size} seed={seed} count={count} rank={r}")
        cases += 1
    assert cases == 24


OPS = [("SUM", "i8"), ("PROD", "f8"), ("MAX", "i2"), ("BXOR", "u4"), ("USER", "f8")]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_node_reduce_and_allreduce_in_rank_order(size):
    for (name, dtype), seed in itertools.product(OPS, range(2)):
        op = NONCOMMUTATIVE if name == "USER" else ReduceOp(name)
        for count in _counts(np.dtype(dtype).itemsize):
            for in_place in (False, True):
                node = _Node(size, seed + 7 * count)
                ops = [
                    _node_reduce(node, count, root, op, dtype, in_place, salt)
                    for salt, root in enumerate([None, 0, size - 1, size // 2])  # several in flight on one ring
                ]
                node.run()
                for targets, expect in ops:
                    for r, target in enumerate(targets):
                        if target is not None:
                            np.testing.assert_array_equal(
                                target, expect, err_msg=f"{name} {dtype} size={size} count={count} rank={r}"
                            )


def test_slot_reuse_many_operations_two_rings_one_world():
    """Two communicators (rings on two regions) on the same ranks, many operations in flight on each."""
    size, seed = 4, 3
    world = LoopbackWorld(size, seed)
    regions = [FakeRegion(size, 2, SLOT, seed + i) for i in range(2)]
    rings = [[SlotRing(reg.views[r], world.transports[r]) for r in range(size)] for reg in regions]
    flags: list[list[bool]] = []
    checks = []
    for k in range(12):
        ring_set = rings[k % 2]
        count = 5 + 3 * k
        plan = plan_segments(count, 8, SLOT, 0, 1 << 15)
        local = [_data(r, count, "i8", k) for r in range(size)]
        out = [np.zeros(count, "i8") for _ in range(size)]
        for r in range(size):
            flag = [False]
            flags.append(flag)
            NodeReduce(
                ring_set[r],
                plan,
                local[r],
                out[r],
                ReduceOp("SUM"),
                BACKEND,
                None,
                lambda f=flag: f.__setitem__(0, True),
            ).start()
        checks.append((out, sum(local)))
    steps = slotsim.run(world, regions, lambda: all(f[0] for f in flags))
    assert steps > 0
    for out, expect in checks:
        for r in range(size):
            np.testing.assert_array_equal(out[r], expect)
    assert all(ring.active == 0 for ring_set in rings for ring in ring_set)
    assert rings[0][0].next_sequence == rings[0][3].next_sequence > 12


def test_a_protocol_waiting_for_a_flag_that_never_comes_is_a_deadlock():
    node = _Node(2, 0)
    plan = plan_segments(10, 1, SLOT, 0, 1 << 15)
    NodeBcast(node.rings[1], plan, np.zeros(10, np.uint8), 0, node.done_flag(1)).start()  # rank 0 never starts
    with pytest.raises(Deadlock):
        node.run()


# -- the weak memory model catches ordering mistakes ------------------------------------------
def test_fake_region_store_buffer_and_snapshots():
    region = FakeRegion(2, 2, 64, seed=1)
    writer, reader = region.views
    writer.slot(0, 1)[:4] = 7
    writer.set_flag(POSTED, 1, 5)
    assert writer.flag(0, POSTED, 1) == 5  # a rank sees its own stores
    assert reader.flag(0, POSTED, 1) == 0 and reader.slot(0, 1)[0] == 0  # nothing visible yet
    writer.sync()
    assert reader.flag(0, POSTED, 1) == 5
    assert reader.slot(0, 1)[0] == 0  # the reader's snapshot predates the store ...
    reader.sync()
    assert reader.slot(0, 1)[0] == 7  # ... until it syncs
    with pytest.raises(ValueError):
        reader.slot(0, 1)[0] = 1  # another rank's slot is read-only
    writer.set_flag(DONE, 0, 1)
    writer.set_flag(DONE, 0, 2)
    while region.commit_one():
        pass
    assert reader.flag(0, DONE, 0) == 2  # stores to one flag commit in order


def _broken(monkeypatch, commit: bool, refresh: bool) -> None:
    def sync(self: FakeSlots) -> None:
        if commit:
            self.commit_data()
            for kind, k, value in self._flags:
                self.region.flags[self.rank, kind, k] = value
            self._flags.clear()
        if refresh:
            self._snapshot = self.region.memory.copy()

    monkeypatch.setattr(FakeSlots, "sync", sync)


@pytest.mark.parametrize("commit, refresh", [(False, True), (True, False)])
def test_missing_barrier_on_either_side_gives_wrong_data(monkeypatch, commit, refresh):
    """A writer whose barrier does not order its data before its flag, or a reader whose barrier does
    not order its flag load before its data loads, reads stale slots under some interleaving."""
    _broken(monkeypatch, commit, refresh)
    wrong = 0
    for seed in range(10):
        node = _Node(3, seed)
        bufs, expect = _node_bcast(node, 5 * SLOT, 0, seed)
        node.run()
        wrong += any(not np.array_equal(b, expect) for b in bufs)
    assert wrong > 0


# -- hierarchical: node level inside nodes, trees between leaders -----------------------------
NODE_LAYOUTS = [[0], [0, 0], [0, 1], [0, 0, 1], [0, 0, 1, 1, 1], [0, 1, 1, 2, 2, 2], [0, 0, 0, 1, 1, 1, 2, 2]]


class _Cluster:
    def __init__(self, ids: list[int], seed: int) -> None:
        self.nodes = NodeMap(ids)
        self.world = LoopbackWorld(self.nodes.size, seed)
        self.regions = [FakeRegion(len(m), 2, SLOT, seed + i) for i, m in enumerate(self.nodes.nodes)]
        self.rings = [
            SlotRing(self.regions[self.nodes.ids[r]].views[self.nodes.local_rank(r)], self.world.transports[r])
            for r in range(self.nodes.size)
        ]
        self.flags: list[list[bool]] = []

    def done_flag(self):
        flag = [False]
        self.flags.append(flag)
        return lambda: flag.__setitem__(0, True)

    def ctx(self, rank: int, plan, dtype, ordered: bool = False) -> OpContext:
        pool = SegmentPool(BACKEND, np.dtype(dtype))
        return OpContext(self.world.transports[rank], BACKEND, plan, 2, 3, "first", ordered, pool)

    def run(self) -> None:
        slotsim.run(self.world, self.regions, lambda: all(f[0] for f in self.flags))
        assert self.world.unmatched == 0


@pytest.mark.parametrize("ids", NODE_LAYOUTS)
def test_hierarchical_bcast(ids):
    for seed, count in itertools.product(range(2), [0, 1, SLOT, 5 * SLOT + 3]):
        cl = _Cluster(ids, seed)
        size = cl.nodes.size
        checks = []
        for k, root in enumerate(sorted({0, size - 1, size // 2})):
            plan = plan_segments(count, 1, SLOT, 100 * k, 1 << 15)
            trees = cl.nodes.inter_trees("binomial", {}, [cl.nodes.ids[root]])
            expect = np.random.default_rng(seed + k).integers(0, 256, count).astype(np.uint8)
            bufs = [expect.copy() if r == root else np.zeros(count, np.uint8) for r in range(size)]
            for r in range(size):
                links = cl.nodes.inter_links(trees, r, plan.nseg, root)
                entry = cl.nodes.local_rank(cl.nodes.leader(cl.nodes.ids[r], root))
                start_bcast(
                    cl.ctx(r, plan, "u1"), cl.rings[r], links[0] if links else None, bufs[r], entry, cl.done_flag()
                )
            checks.append((bufs, expect))
        cl.run()
        for bufs, expect in checks:
            for r, buf in enumerate(bufs):
                np.testing.assert_array_equal(buf, expect, err_msg=f"{ids} root rank {r} count={count}")


@pytest.mark.parametrize("ids", NODE_LAYOUTS)
def test_hierarchical_reduce_and_allreduce(ids):
    op = ReduceOp("SUM")
    for seed, count, in_place, ordered in itertools.product(range(2), [0, 1, 8, 41], (False, True), (False, True)):
        cl = _Cluster(ids, seed)
        size, nodes = cl.nodes.size, cl.nodes
        checks = []
        for k, root in enumerate(sorted({0, size - 1, size // 2})):
            plan = plan_segments(count, 8, SLOT, 100 * k, 1 << 15)
            local = [_data(r, count, "i8", 10 * seed + k) for r in range(size)]
            expect = sum(local)
            trees = nodes.inter_trees("binomial", {}, [nodes.ids[root]])
            leader = [nodes.leader(nodes.ids[r], root) for r in range(size)]
            target = [None] * size
            target[root] = local[root] if in_place else np.zeros(count, "i8")
            for r in range(size):
                links = nodes.inter_links(trees, r, plan.nseg, root)
                node_target = target[r] if r == root else (np.zeros(count, "i8") if r == leader[r] else None)
                start_reduce(
                    cl.ctx(r, plan, "i8", ordered),
                    cl.rings[r],
                    links[0] if links else None,
                    local[r],
                    target[r],
                    node_target,
                    op,
                    nodes.local_rank(leader[r]),
                    cl.done_flag(),
                )
            checks.append(([target[root]], expect))
        # allreduce over one tree root per node (segments dealt round-robin)
        plan = plan_segments(count, 8, SLOT, 999, 1 << 15)
        local = [_data(r, count, "i8", 77 + seed) for r in range(size)]
        expect = sum(local)
        result = [local[r] if in_place else np.zeros(count, "i8") for r in range(size)]
        multi = nodes.count > 1
        trees = nodes.inter_trees("binomial", {}, list(range(nodes.count))) if multi else ()
        for r in range(size):
            links = nodes.inter_links(trees, r, plan.nseg) if multi else []
            leader_local = nodes.local_rank(nodes.leader(nodes.ids[r])) if multi else None
            start_allreduce(
                cl.ctx(r, plan, "i8", ordered),
                cl.rings[r],
                links,
                local[r],
                result[r],
                op,
                leader_local,
                cl.done_flag(),
            )
        checks.append((result, expect))
        cl.run()
        for outs, exp in checks:
            for out in outs:
                np.testing.assert_array_equal(out, exp, err_msg=f"{ids} seed={seed} count={count} in_place={in_place}")


# -- plain data -------------------------------------------------------------------------------
def test_node_map():
    nodes = NodeMap([5, 5, 2, 2, 2, 5, 9])
    assert nodes.ids == (0, 0, 1, 1, 1, 0, 2)
    assert nodes.nodes == ((0, 1, 5), (2, 3, 4), (6,))
    assert (nodes.count, nodes.largest, nodes.local_rank(5), nodes.members(3)) == (3, 3, 2, (2, 3, 4))
    assert nodes.leaders() == (0, 2, 6) and nodes.leaders(root=4) == (0, 4, 6)
    trees = nodes.inter_trees("binomial", {}, [1])
    (link,) = nodes.inter_links(trees, 4, 5, root=4)
    assert link.parent is None and set(link.children) == {0, 6}
    assert nodes.inter_links(trees, 3, 5, root=4) == []  # not a leader
    assert NodeMap([0, 0]).inter_links(NodeMap([0, 0]).inter_trees("binomial", {}, [0]), 0, 3) == []  # one node


def test_chunks_cover_the_segment_on_cache_lines():
    for n, parts, itemsize in itertools.product([0, 1, 7, 8, 9, 100, 1000], [1, 2, 3, 8], [1, 2, 4, 8, 16]):
        bounds = chunk_bounds(n, parts, itemsize)
        assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == parts + 1
        assert all(a <= b for a, b in itertools.pairwise(bounds))
        assert all((b * itemsize) % 64 == 0 for b in bounds[:-1] if 0 < b < n)


def test_slot_geometry_shrinks_to_the_cap():
    slot, per_rank = shm.slot_geometry(4, 512 * 1024, 4, 64 << 20)
    assert slot == 512 * 1024 and 4 * per_rank <= 64 << 20
    slot, per_rank = shm.slot_geometry(64, 1 << 20, 4, 64 << 20)  # 64 ranks x 4 x 1 MiB > 64 MiB: shrink
    assert 0 < slot < 1 << 20 and slot % 64 == 0 and 64 * per_rank <= 64 << 20
    assert shm.slot_geometry(8, 1 << 20, 4, 1000) == (0, 0)  # not even 64-byte slots fit


def test_algorithm_strings():
    assert shm.uses_shm("shm") and shm.uses_shm("topo:inner=chain,intra=shm") and not shm.uses_shm("topo")
    assert not shm.uses_shm("binomial") and not shm.uses_shm("topo:inner=shm")
    assert settings.point_to_point_tree("shm") == "binomial"
    assert settings.point_to_point_tree("topo:inner=chain,intra=shm") == "topo:inner=chain,intra=binomial"
    assert inner_shape("shm") == ("binomial", {})
    assert inner_shape("topo:inner=chain,intra=shm") == ("chain", {})
    with pytest.raises(ValueError):
        inner_shape("topo:inner=two_tree,intra=shm")
