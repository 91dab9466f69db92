"""What the simulated ranks run: adaptcoll's real protocols, set up as the decision layer sets them up.

`Job` describes one collective call (collective, ranks, bytes, segment, algorithm, settings). For
adaptcoll, `prepare` mirrors `adaptcoll.decision.decide`: the segment plan (`plan_segments` with the
settings' `max_segments`), the trees (`trees.build_all`, Allreduce's trees per root; a `forest:PATH`
schedule's forests through `adaptcoll.plans.forests`, segments dealt by weight), the windows and the sync mode,
then one protocol per tree link through `protocols.links` on every rank.

Protocols are plugged in by name: `register_protocol(collective, name, start_one)` makes
`--algorithm name` run `start_one(RankJob)` on every rank instead of the tree protocol. A new class
taking `(ctx, ..., on_complete)` needs one line, e.g.
`register_protocol("allreduce", "ring", lambda j: Ring(j.ctx, j.rank, j.size, j.buf, j.result, j.op,
j.on_complete).start())`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np

from ..backends.base import ReduceOp
from ..backends.pool import SegmentPool
from ..plans import forests
from ..plans.blocks import plan_block_segments, tag_plan
from ..plans.dealing import spread_root_trees, tree_links
from ..plans.segments import SegmentPlan, plan_blocks, plan_segments
from ..plans.topology import parse as parse_topology
from ..plans.trees import Tree, build_all, parse_algorithm
from ..protocols.algorithms import ALLREDUCE_ALGORITHMS
from ..protocols.allreduce import Allreduce
from ..protocols.bcast import Bcast
from ..protocols.blockring import RingAllgather, RingReduceScatter
from ..protocols.context import OpContext
from ..protocols.links import start_on_links
from ..protocols.reduce import Reduce
from ..runtime import settings as settings_mod
from ..runtime.transport import Callback
from .choice import Choice, choose
from .nodelevel import NodeSetup, prepare_node_level, uses_shm
from .world import World

__all__ = [
    "COLLECTIVES",
    "ITEMSIZE",
    "Job",
    "RankJob",
    "Buffers",
    "Prepared",
    "register_protocol",
    "protocol_names",
    "prepare",
    "make_buffers",
    "library_goes_native",
    "runs_trees",
    "SUM",
    "TOPO_NEEDS_NODES",
    "BLOCK_COLLECTIVES",
]

COLLECTIVES = ("bcast", "reduce", "allreduce", "allgather", "reduce_scatter_block")
BLOCK_COLLECTIVES = {"allgather": "allgather", "reduce_scatter_block": "reduce_scatter"}
"""The ring's collectives (adaptcoll.protocols.blockring) -> their settings' name. Their message is the
whole array (p blocks of size // p // itemsize elements: the Allgather's result, the Reduce-scatter's
input)."""
ITEMSIZE = {"bcast": 1, "reduce": 4, "allreduce": 4, "allgather": 4, "reduce_scatter_block": 4}
"""Bytes per element: Bcast moves bytes, the others float32 with SUM (as bench/osu.py)."""
DTYPE = {c: np.dtype(np.uint8) if c == "bcast" else np.dtype(np.float32) for c in COLLECTIVES}
SUM = ReduceOp("SUM")
MPICH_TAG_SPACE = 1 << 30
"""Tags available to the simulated library when the settings do not cap them (MPICH's TAG_UB is larger)."""


@dataclass(frozen=True)
class Job:
    """One collective call to simulate. `segment`: bytes per segment, or 0 for what the shipped rule
    chooses for the call (algorithm, segment, cap, roots; see `choice`). `algorithm`: a tree setting
    ('binomial', 'knomial:radix=4', ...) or the name of a registered protocol; empty means the
    settings' algorithm for the collective (or, with segment 0, the rule's)."""

    collective: str
    size: int
    nbytes: int
    segment: int
    algorithm: str = ""
    settings: settings_mod.Settings = field(default_factory=settings_mod.current)
    root: int = 0

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {self.collective!r}")
        if self.size < 1:
            raise ValueError(f"ranks must be >= 1, got {self.size}")
        if self.nbytes < ITEMSIZE[self.collective]:
            raise ValueError(f"size must be at least {ITEMSIZE[self.collective]} bytes for {self.collective}")
        if self.segment < 0:
            raise ValueError(f"segment must be at least 1 byte (or 0: the shipped rule's), got {self.segment}")
        if not 0 <= self.root < self.size:
            raise ValueError(f"root must be in 0..{self.size - 1}, got {self.root}")

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.collective]

    @property
    def count(self) -> int:
        """Elements in the message."""
        return self.nbytes // self.itemsize

    @property
    def algorithm_setting(self) -> str:
        return self.algorithm or self.settings.algorithm(BLOCK_COLLECTIVES.get(self.collective, self.collective))

    @property
    def block(self) -> int:
        """Elements per block of an Allgather / Reduce_scatter_block (0 for the other collectives)."""
        return self.count // self.size if self.collective in BLOCK_COLLECTIVES else 0


@dataclass(frozen=True)
class RankJob:
    """What a protocol on one simulated rank gets, built as the decision layer builds a real call.

    bcast: `buf` is the message (`result` the same). reduce: `buf` is the local contribution,
    `result` the root's target (None elsewhere). allreduce: `buf` local, `result` the result.
    `trees` is empty for protocols that do not run on trees.
    """

    ctx: OpContext
    rank: int
    size: int
    root: int
    buf: Any
    result: Any
    op: ReduceOp
    trees: tuple[Tree, ...]
    on_complete: Callback


StartOne = Callable[[RankJob], None]
PlanFor = Callable[["Job", Choice], SegmentPlan]
"""(job, its configuration) -> the segment plan a protocol runs on (default: the tree protocols' plan)."""
_PROTOCOLS: dict[tuple[str, str], StartOne] = {}
_PLANS: dict[tuple[str, str], PlanFor] = {}


def register_protocol(collective: str, name: str, start_one: StartOne, plan: Optional[PlanFor] = None) -> None:
    """Make `algorithm=name` (or `name:params`) run `start_one(rank_job)` on every rank for `collective`,
    on the segment plan `plan(job, choice)` makes (default: the tree protocols' plan)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    _PROTOCOLS[(collective, name)] = start_one
    if plan is not None:
        _PLANS[(collective, name)] = plan
    else:
        _PLANS.pop((collective, name), None)


def protocol_names(collective: str) -> list[str]:
    """Registered non-tree protocols for a collective (tree kinds are always accepted as well)."""
    return sorted(name for c, name in _PROTOCOLS if c == collective and name != "tree")


def _links_start(j: RankJob, make: Callable[[Any, Callback], Any]) -> None:
    """One protocol per tree link of this rank, joined as the library joins them."""
    links = tree_links(j.trees, j.rank, j.ctx.plan.nseg)
    op = start_on_links(links, None, lambda link, done: make(link, done).start())
    if op.done:
        j.on_complete()
    else:
        op.on_done = j.on_complete


def _tree_bcast(j: RankJob) -> None:
    _links_start(j, lambda link, done: Bcast(j.ctx, link.parent, link.children, j.buf, link.segs, done))


def _tree_reduce(j: RankJob) -> None:
    _links_start(
        j, lambda link, done: Reduce(j.ctx, link.parent, link.children, j.buf, j.result, j.op, link.segs, done)
    )


def _tree_allreduce(j: RankJob) -> None:
    _links_start(
        j, lambda link, done: Allreduce(j.ctx, link.parent, link.children, j.buf, j.result, j.op, link.segs, done)
    )


register_protocol("bcast", "tree", _tree_bcast)
register_protocol("reduce", "tree", _tree_reduce)
register_protocol("allreduce", "tree", _tree_allreduce)


def _block_plan(job: Job, chosen: Choice) -> SegmentPlan:
    """The plan of a ring or recursive-halving allreduce, as decide._block_shape makes it: the setting's
    parameters (`ring:segment_size=1M,max_segments=2`) win, then the call's segment, then an explicit
    ADAPTCOLL_MAX_SEGMENTS, else the algorithm's own cap."""
    name, params = settings_mod.block_algorithm(chosen.algorithm)
    algorithm = ALLREDUCE_ALGORITHMS[name]
    cfg = job.settings
    cap = cfg.max_segments if cfg.is_explicit("max_segments") else algorithm.max_segments
    return plan_blocks(
        job.count,
        job.itemsize,
        params.get("segment_size", chosen.segment),
        algorithm.blocks(job.size),
        0,
        _tag_space(cfg),
        params.get("max_segments", cap),
        algorithm.tags_per_segment,
    )


def _register_block_allreduces() -> None:
    for name, algorithm in ALLREDUCE_ALGORITHMS.items():

        def start(j: RankJob, algorithm: Any = algorithm) -> None:
            algorithm.start(j.ctx, j.buf, j.result, j.op, j.on_complete)

        register_protocol("allreduce", name, start, _block_plan)


_register_block_allreduces()


# -- buffers ---------------------------------------------------------------------------------------
@dataclass
class Buffers:
    """Per-rank buffers: real arrays in data mode (with the expected results), else shared `range`s."""

    collective: str
    local: list[Any]
    result: list[Any]
    expected: Optional[np.ndarray] = None

    def check(self, root: int = 0) -> None:
        """Raise AssertionError unless every rank holds the right result (data mode only)."""
        if self.expected is None:
            raise ValueError("buffers were made without data: nothing to check")
        ranks = [root] if self.collective == "reduce" else range(len(self.result))
        for r in ranks:
            got = self.result[r]
            expected = self.expected
            if self.collective == "reduce_scatter_block":  # rank r's block of the reduction
                expected = expected[r * len(got) : (r + 1) * len(got)]
            if not np.array_equal(got, expected):
                bad = int(np.flatnonzero(got != expected)[0])
                raise AssertionError(
                    f"{self.collective}: rank {r} element {bad} is {got[bad]!r}, expected {expected[bad]!r}"
                )


def make_buffers(collective: str, size: int, count: int, root: int = 0, data: bool = False, seed: int = 0) -> Buffers:
    """The buffers of one call: `range` stand-ins (sizes only), or real data whose result is known.
    Allgather / Reduce_scatter_block: `count` // size elements per block."""
    if collective in BLOCK_COLLECTIVES:
        return _block_buffers(collective, size, count // size, data, seed)
    if not data:
        contribution, target = range(count), range(count)
        if collective == "bcast":
            return Buffers(collective, [contribution] * size, [contribution] * size)
        if collective == "reduce":
            return Buffers(collective, [contribution] * size, [target if r == root else None for r in range(size)])
        return Buffers(collective, [contribution] * size, [target] * size)
    rng = np.random.default_rng(seed)
    if collective == "bcast":
        message = rng.integers(0, 256, count, dtype=np.uint8)
        bufs: list[Any] = [message.copy() if r == root else np.zeros(count, np.uint8) for r in range(size)]
        return Buffers(collective, bufs, bufs, message)
    # small integers in float32: every fold order gives the exact same sum (drawn as int8: half the time)
    local: list[Any] = [rng.integers(0, 8, count, dtype=np.int8).astype(np.float32) for _ in range(size)]
    expected = np.asarray(np.sum(np.stack(local), axis=0, dtype=np.float64), dtype=np.float32)
    result: list[Any]
    if collective == "reduce":
        result = [np.full(count, -1.0, np.float32) if r == root else None for r in range(size)]
    else:
        result = [np.full(count, -1.0, np.float32) for _ in range(size)]
    return Buffers(collective, local, result, expected)


def _block_buffers(collective: str, size: int, n: int, data: bool, seed: int) -> Buffers:
    """Allgather: each rank's block (n) into the whole array (n x size); Reduce_scatter_block: the
    whole input (n x size) into each rank's block."""
    gather = collective == "allgather"
    if not data:
        mine, whole = range(n), range(n * size)
        return Buffers(collective, [mine if gather else whole] * size, [whole if gather else mine] * size)
    rng = np.random.default_rng(seed)
    if gather:
        expected = rng.integers(0, 8, n * size, dtype=np.int8).astype(np.float32)
        local: list[Any] = [expected[r * n : (r + 1) * n].copy() for r in range(size)]
        result: list[Any] = [np.full(n * size, -1.0, np.float32) for _ in range(size)]
        return Buffers(collective, local, result, expected)
    local = [rng.integers(0, 8, n * size, dtype=np.int8).astype(np.float32) for _ in range(size)]
    expected = np.asarray(np.sum(np.stack(local), axis=0, dtype=np.float64), dtype=np.float32)
    return Buffers(collective, local, [np.full(n, -1.0, np.float32) for _ in range(size)], expected)


# -- adaptcoll set-up (mirrors adaptcoll.decision.decide) -----------------------------------------------------
@dataclass(frozen=True)
class Prepared:
    """A job set up for adaptcoll: its plan, trees, windows and the protocol to start on each rank."""

    job: Job
    plan: SegmentPlan
    trees: tuple[Tree, ...]
    send_window: int
    recv_window: int
    sync_mode: str
    ordered: bool
    start_one: StartOne
    protocol: str
    choice: Choice
    node: Optional[NodeSetup] = None
    """The shared-memory node level's set-up (`shm`, `topo:intra=shm`), else None."""

    def starter(self, world: World, bufs: Buffers, op: ReduceOp = SUM) -> Callable[[int], Callback]:
        """rank -> the function that starts this call on that rank (run as its first CPU event), folding
        with `op` (float32 SUM unless a test asks for another)."""
        job, plan = self.job, self.plan
        dtype = DTYPE[job.collective]
        if self.node is not None:
            self.node.check_op(op)

        def for_rank(r: int) -> Callback:
            def start() -> None:
                sim_rank = world.ranks[r]
                pool = SegmentPool(sim_rank, dtype) if job.collective != "bcast" else None
                ctx = OpContext(
                    sim_rank, sim_rank, plan, self.send_window, self.recv_window, self.sync_mode, self.ordered, pool
                )
                local, result, finish = bufs.local[r], bufs.result[r], lambda: world.done(r)
                self.start_one(RankJob(ctx, r, job.size, job.root, local, result, op, self.trees, finish))

            return start

        return for_rank


TOPO_NEEDS_NODES = (
    "topo trees need a topology: simulate several ranks per node (--ranks-per-node) or set "
    "ADAPTCOLL_TOPOLOGY (e.g. 'nodes=64')"
)


def _tag_space(cfg: settings_mod.Settings) -> int:
    return min(MPICH_TAG_SPACE, cfg.tag_space) if cfg.tag_space else MPICH_TAG_SPACE


def _tree_set(job: Job, kind_spec: str, root: int, rank_ordered: bool, ranks_per_node: int = 1) -> tuple[Tree, ...]:
    """Trees as CommState.trees builds them (topo levels from the settings' topology, else from the
    simulated nodes: what discovery would find, ranks r // ranks_per_node sharing a node)."""
    if forests.is_forest(kind_spec):  # forest:PATH: the schedule's forest rooted at `root`, as the library runs it
        found = forests.root_trees(kind_spec, job.size, root, rank_ordered)
        return found if found is not None else build_all("in_order_binomial", job.size, 0)
    if rank_ordered:
        return build_all("in_order_binomial", job.size, 0)
    kind, params = parse_algorithm(kind_spec)
    if kind == "topo" and "levels" not in params:
        spec = job.settings.topology
        if not spec and ranks_per_node > 1:
            spec = "node=" + ",".join(str(r // ranks_per_node) for r in range(job.size))
        if not spec:
            raise ValueError(TOPO_NEEDS_NODES)
        params["levels"] = parse_topology(spec, job.size)
    return build_all(kind, job.size, root, **params)


def _allreduce_trees(job: Job, kind_spec: str, nseg: int, roots: int, ranks_per_node: int = 1) -> tuple[Tree, ...]:
    """CommState.allreduce_trees with the segment count: only the trees that carry segments, as the
    library builds them (`spread_root_trees`)."""
    size = job.size
    if forests.is_forest(kind_spec):  # every forest of the schedule (CommState.allreduce_trees), dealt by weight
        return forests.allreduce_trees(kind_spec, size) or ()
    return spread_root_trees(size, roots, lambda root: _tree_set(job, kind_spec, root, False, ranks_per_node), nseg)


def prepare(job: Job, ranks_per_node: int = 1) -> Prepared:
    """Set `job` up as adaptcoll.decision.decide would (plan, trees, windows, sync mode), for every rank.

    Without a segment (`job.segment == 0`) the call runs what the shipped rule chooses for it on a
    cluster of `ranks_per_node` ranks per node (`choice.choose`); `Prepared.choice` says what."""
    cfg = job.settings
    c = job.collective
    itemsize = job.itemsize
    space = _tag_space(cfg)
    if c in BLOCK_COLLECTIVES:
        return _prepare_blocks(job, ranks_per_node)
    chosen = choose(c, job.size, job.nbytes, job.segment, cfg, ranks_per_node)
    algorithm = job.algorithm or chosen.algorithm
    if job.algorithm:
        chosen = replace(chosen, algorithm=algorithm)
    if job.algorithm or cfg.is_explicit(f"{c}_algorithm"):  # a forest's own cap, as CommTuning gives it
        chosen = replace(
            chosen, max_segments=forests.segment_cap(algorithm, chosen.max_segments, cfg.is_explicit("max_segments"))
        )
    if c == "bcast":
        segment = max(itemsize, chosen.segment // itemsize * itemsize)
        plan = plan_segments(job.nbytes, 1, segment, 0, space, chosen.max_segments)
    else:
        plan = plan_segments(job.count, itemsize, chosen.segment, 0, space, chosen.max_segments)
    ordered = c != "bcast" and cfg.reproducible
    send_window, recv_window = cfg.windows(c)
    if uses_shm(algorithm):
        return _prepare_node_level(job, chosen, algorithm, ranks_per_node)
    name = algorithm.partition(":")[0]
    custom = _PROTOCOLS.get((c, name))
    if custom is not None and name != "tree":
        plan_for = _PLANS.get((c, name))
        if plan_for is not None:
            plan = plan_for(job, chosen)
        elif name != algorithm:
            raise ValueError(f"protocol {name!r} takes no parameters, got {algorithm!r}")
        return Prepared(job, plan, (), send_window, recv_window, cfg.sync_sends, ordered, custom, algorithm, chosen)
    if algorithm == "native":
        raise ValueError("algorithm 'native' is MPI's own collective: simulate it with --baseline instead")
    try:
        if c == "allreduce":
            tree_set = _allreduce_trees(job, algorithm, plan.nseg, chosen.roots, ranks_per_node)
        else:
            tree_set = _tree_set(job, algorithm, job.root, False, ranks_per_node)
    except ValueError as exc:
        if "unknown tree kind" not in str(exc):
            raise
        names = ", ".join(protocol_names(c)) or "none"
        raise ValueError(f"{exc}; or a protocol registered for {c}: {names}") from None
    return Prepared(
        job,
        plan,
        tree_set,
        send_window,
        recv_window,
        cfg.sync_sends,
        ordered,
        _PROTOCOLS[(c, "tree")],
        algorithm,
        chosen,
    )


def _prepare_node_level(job: Job, chosen: Choice, algorithm: str, ranks_per_node: int) -> Prepared:
    """`shm` / `topo:intra=shm`: the node level inside nodes, trees between node leaders (nodelevel)."""
    cfg = job.settings
    c = job.collective
    if algorithm.partition(":")[0].strip() == "topo" and not cfg.topology and ranks_per_node == 1 and job.size > 1:
        raise ValueError(TOPO_NEEDS_NODES)
    node = prepare_node_level(
        c,
        job.size,
        job.count,
        DTYPE[c],
        job.root,
        algorithm,
        job.segment,
        chosen.roots,
        cfg,
        ranks_per_node,
        _tag_space(cfg),
    )
    chosen = replace(chosen, algorithm=algorithm, segment=node.slot_bytes, max_segments=0)
    send_window, recv_window = cfg.windows(c)

    def start_one(j: RankJob) -> None:
        node.start(j.ctx, j.rank, j.buf, j.result, j.op, j.on_complete)

    return Prepared(
        job,
        node.plan,
        node.trees,
        send_window,
        recv_window,
        cfg.sync_sends,
        c != "bcast" and cfg.reproducible,
        start_one,
        algorithm,
        chosen,
        node,
    )


def _prepare_blocks(job: Job, ranks_per_node: int) -> Prepared:
    """An Allgather / Reduce_scatter_block set up as adaptcoll.decision.blocks does: blocks of job.block
    elements in segments (plan_block_segments), one tag per segment, the ring protocol on every rank."""
    if job.algorithm not in ("", "ring"):
        raise ValueError(f"{job.collective} runs the ring only (algorithm 'ring'), got {job.algorithm!r}")
    cfg = job.settings
    chosen = choose(job.collective, job.size, job.nbytes, job.segment, cfg, ranks_per_node)
    space = _tag_space(cfg)
    blocks = plan_block_segments((job.block,) * job.size, job.itemsize, chosen.segment, space, chosen.max_segments)
    send_window, recv_window = cfg.windows(BLOCK_COLLECTIVES[job.collective])

    def start_one(j: RankJob) -> None:
        if job.collective == "allgather":
            RingAllgather(j.ctx, blocks, j.buf, j.result, j.on_complete).start()
        else:
            RingReduceScatter(j.ctx, blocks, j.buf, j.result, j.op, j.on_complete).start()

    plan = tag_plan(blocks, 0, space)
    return Prepared(job, plan, (), send_window, recv_window, cfg.sync_sends, False, start_one, "ring", chosen)


def runs_trees(prepared: Prepared) -> bool:
    """Whether `prepared` runs the tree protocols (Bcast / Reduce / Allreduce on its trees, no node level)."""
    c = prepared.job.collective
    return prepared.node is None and prepared.start_one is _PROTOCOLS.get((c, "tree"))


def library_goes_native(job: Job, ranks_per_node: int = 1) -> bool:
    """Whether the real library would hand this call to native MPI (below the collective's threshold,
    or, without an explicit segment, in a native band of the shipped rule)."""
    return not choose(job.collective, job.size, job.nbytes, job.segment, job.settings, ranks_per_node).serve
