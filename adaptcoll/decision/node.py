"""The node level's share of the decision layer: set up one call on shared slots (and trees between
node leaders) once `adaptcoll.decision.decide` has chosen to serve it and `adaptcoll.state.shm` has a node level.

Each function returns the start function of the call (fresh sequence numbers, and tags when there
are several nodes, at every start) or, when this call cannot use the node level, why (a note counted
in stats(); the caller then uses the point-to-point trees). The reasons depend only on arguments
every rank shares, so every rank decides alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional, Union

from ..backends.base import ReduceOp
from ..plans.dealing import Link
from ..plans.nodemap import inner_shape
from ..plans.segments import SegmentPlan, plan_segments
from ..plans.trees import Tree
from ..protocols.context import OpContext
from ..protocols.hier import start_allreduce, start_bcast, start_reduce
from ..protocols.links import run_all, start_on_links
from ..protocols.operation import Operation
from ..runtime import settings
from ..runtime.transport import Callback
from ..state.comm_state import HOST_BACKEND, CommState
from ..state.shm import NodeLevel

__all__ = ["bcast", "reduce", "allreduce"]

Start = Callable[[], Operation]
_CACHED = 64

NONCOMMUTATIVE_ACROSS_NODES = "shm: non-commutative op across nodes (rank-ordered tree instead)"
TOO_MANY_SEGMENTS = "shm: more slot-sized segments than tags"


def _shape(st: CommState, level: NodeLevel, count: int, itemsize: int) -> Union[SegmentPlan, str]:
    """Slot-sized segments (tags only matter between nodes); a reason if the tag space forces larger ones."""
    cfg = settings.current()
    if level.nodes.count == 1:
        space = max(1, count)  # no messages, no tags: never let the tag space grow the segments
    else:
        space = min(st.tag_space, cfg.tag_space) if cfg.tag_space else st.tag_space
    shape = plan_segments(count, itemsize, level.slot_bytes, 0, space)
    if shape.seg_count * itemsize > level.slot_bytes:
        return TOO_MANY_SEGMENTS
    return shape


def _trees(level: NodeLevel, algorithm: str, roots: tuple[int, ...]) -> tuple[Tree, ...]:
    shape, params = inner_shape(algorithm)
    return level.nodes.inter_trees(shape, params, roots)


class _Template(NamedTuple):
    """What a call's shape fixes on this rank (cached per node level, call shape and settings):
    the context with the slot-sized plan, this rank's links between leaders, its node's leader (or
    entry) as a node rank, whether it reduces into a scratch array (a leader that is not the root), and
    whether there are several nodes (then every rank takes tags, leader or not, so that the tag sequence
    stays the same on all ranks)."""

    base: OpContext
    links: tuple[Link, ...]
    leader: Optional[int]
    scratch: bool
    multi: bool


def _template(
    level: NodeLevel, key: tuple[Any, ...], build: Callable[[], Union[_Template, str]]
) -> Union[_Template, str]:
    cfg = settings.current()
    cache = level.templates
    found = cache.get(key)
    if found is None or found[0] is not cfg:
        if len(cache) >= _CACHED:
            cache.clear()
        found = cache[key] = (cfg, build())
    result: Union[_Template, str] = found[1]
    return result


def _context(st: CommState, collective: str, shape: SegmentPlan, pool: Any = None) -> OpContext:
    cfg = settings.current()
    send_window, recv_window = cfg.windows(collective)
    return OpContext(
        st.transport, HOST_BACKEND, shape, send_window, recv_window, cfg.sync_sends, cfg.reproducible, pool
    )


Scratch = tuple[Sequence[Optional[Callback]], Sequence[Optional[Callback]]]
"""(loads, stores) of a call's packed buffers (decide._started): filled before, written back after."""


def _starter(
    st: CommState,
    tpl: _Template,
    keep: Any,
    run: Callable[[OpContext, Callback], None],
    collective: str,
    root: Optional[int],
    scratch: Scratch,
) -> Start:
    """The start function: packed buffers loaded, tags taken when there are several nodes, the
    operation numbered by the communicator's transport (errors are its own), results stored back."""
    base, multi = tpl.base, tpl.multi
    shape = base.plan
    fill = [f for f in scratch[0] if f is not None]
    finish = run_all([f for f in scratch[1] if f is not None])
    whole = [Link(None, (), range(shape.nseg))]  # one protocol per rank on the node level

    def start() -> Operation:
        for load in fill:
            load()
        operation = Operation(keep=keep)
        ctx, plan = base, shape
        if multi:
            plan = st.take_tags(shape)
            ctx = base.with_plan(plan)
        st.transport.start_operation(
            operation,
            collective,
            root,
            plan,
            lambda: start_on_links(whole, keep, lambda _link, done: run(ctx, done), finish, operation),
        )
        return st.track(plan, operation) if multi else operation

    return start


def bcast(
    st: CommState, level: NodeLevel, algorithm: str, data: Any, root: int, keep: Any, scratch: Scratch = ((), ())
) -> Union[Start, str]:
    """A broadcast of `data` (1-D uint8) from `root`."""

    def build() -> Union[_Template, str]:
        shape = _shape(st, level, data.size, 1)
        if isinstance(shape, str):
            return shape
        nodes, rank = level.nodes, level.rank
        links: list[Link] = []
        if nodes.count > 1:
            links = nodes.inter_links(_trees(level, algorithm, (nodes.ids[root],)), rank, shape.nseg, root)
        entry = nodes.local_rank(nodes.leader(nodes.ids[rank], root))
        return _Template(_context(st, "bcast", shape), tuple(links), entry, False, nodes.count > 1)

    tpl = _template(level, ("bcast", data.size, root, algorithm), build)
    if isinstance(tpl, str):
        return tpl
    ring, entry = level.ring, tpl.leader
    link = tpl.links[0] if tpl.links else None
    assert entry is not None

    def run(ctx: OpContext, done: Callback) -> None:
        start_bcast(ctx, ring, link, data, entry, done)

    return _starter(st, tpl, keep, run, "Bcast", root, scratch)


def reduce(
    st: CommState,
    level: NodeLevel,
    algorithm: str,
    local: Any,
    target: Any,
    op: ReduceOp,
    root: int,
    keep: Any,
    scratch: Scratch = ((), ()),
) -> Union[Start, str]:
    """A reduce of `local` into the root's `target` (None on other ranks; `local` itself in place)."""
    dtype = local.dtype

    def build() -> Union[_Template, str]:
        nodes, rank = level.nodes, level.rank
        multi = nodes.count > 1
        if multi and not op.commutative:
            return NONCOMMUTATIVE_ACROSS_NODES
        shape = _shape(st, level, local.size, dtype.itemsize)
        if isinstance(shape, str):
            return shape
        leader_rank = nodes.leader(nodes.ids[rank], root)
        links: list[Link] = []
        if multi:
            links = nodes.inter_links(_trees(level, algorithm, (nodes.ids[root],)), rank, shape.nseg, root)
        scratch = multi and rank == leader_rank and rank != root
        ctx = _context(st, "reduce", shape, st.pool(dtype))
        return _Template(ctx, tuple(links), nodes.local_rank(leader_rank), scratch, multi)

    tpl = _template(level, ("reduce", local.size, dtype, root, algorithm, op.commutative), build)
    if isinstance(tpl, str):
        return tpl
    ring, leader, scratch_target = level.ring, tpl.leader, tpl.scratch
    link = tpl.links[0] if tpl.links else None
    pool = tpl.base.pool
    count = local.size
    assert leader is not None and pool is not None

    def run(ctx: OpContext, complete: Callback) -> None:
        node_target = target
        done = complete
        if scratch_target:
            node_target = pool.take(count)

            def done() -> None:
                pool.give(node_target)
                complete()

        start_reduce(ctx, ring, link, local, target, node_target, op, leader, done)

    return _starter(st, tpl, keep, run, "Reduce", root, scratch)


def allreduce(
    st: CommState,
    level: NodeLevel,
    algorithm: str,
    roots: int,
    local: Any,
    result: Any,
    op: ReduceOp,
    keep: Any,
    scratch: Scratch = ((), ()),
) -> Union[Start, str]:
    """An allreduce of `local` into `result` (may be `local` itself); between nodes, segments are
    dealt over trees rooted at `roots` node leaders (0: every node's)."""
    dtype = result.dtype

    def build() -> Union[_Template, str]:
        nodes, rank = level.nodes, level.rank
        multi = nodes.count > 1
        if multi and not op.commutative:
            return NONCOMMUTATIVE_ACROSS_NODES
        shape = _shape(st, level, result.size, dtype.itemsize)
        if isinstance(shape, str):
            return shape
        links: list[Link] = []
        leader = None
        if multi:
            count = min(nodes.count, roots or nodes.count)
            tree_set = _trees(level, algorithm, tuple((k * nodes.count) // count for k in range(count)))
            links = nodes.inter_links(tree_set, rank, shape.nseg)
            leader = nodes.local_rank(nodes.leader(nodes.ids[rank]))
        return _Template(_context(st, "allreduce", shape, st.pool(dtype)), tuple(links), leader, False, multi)

    tpl = _template(level, ("allreduce", result.size, dtype, algorithm, roots, op.commutative), build)
    if isinstance(tpl, str):
        return tpl
    ring, links, leader = level.ring, tpl.links, tpl.leader

    def run(ctx: OpContext, done: Callback) -> None:
        start_allreduce(ctx, ring, links, local, result, op, leader, done)

    return _starter(st, tpl, keep, run, "Allreduce", None, scratch)
