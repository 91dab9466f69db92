"""The shared-memory node level in the simulator: `shm` and `topo:intra=shm` set up as adaptcoll.state.shm and
adaptcoll.decision.node set them up, run by the library's own protocols (adaptcoll.protocols.hier) over
simulated slot regions (adaptcoll.simulate.region).

The node of a rank is what adaptcoll.state.shm finds: its shared-memory domain (the simulated node,
`rank // ranks_per_node`, the last one possibly smaller) refined by the first level of
ADAPTCOLL_TOPOLOGY. Slots: ADAPTCOLL_SHM_SLOTS per rank of ADAPTCOLL_SHM_SEGMENT_SIZE bytes (or the
job's `--segment`), shrunk to fit ADAPTCOLL_SHM_BYTES; segment s is the same elements inside nodes
and on the trees between node leaders (`shm`: binomial; `topo:intra=shm,inner=X`: X). Where the real
library would fall back to the point-to-point trees (no room for one slot per rank, more segments than
tags, a non-commutative op across nodes) the simulator raises ValueError instead of simulating
something else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..backends.base import ReduceOp
from ..plans.dealing import Link
from ..plans.nodemap import NodeMap, inner_shape, uses_shm
from ..plans.segments import SegmentPlan, plan_segments
from ..plans.topology import parse as parse_topology
from ..plans.trees import Tree, check_params, parse_algorithm
from ..protocols.context import OpContext
from ..protocols.hier import start_allreduce, start_bcast, start_reduce
from ..protocols.slots import SlotRing, slot_geometry
from ..runtime import settings as settings_mod
from ..runtime.transport import Callback
from .region import Meter, SlotRegion, Span
from .world import World

__all__ = ["NodeSetup", "node_ids", "prepare_node_level", "uses_shm"]


def node_ids(size: int, ranks_per_node: int, topology: str = "") -> tuple[int, ...]:
    """Per rank: its node as adaptcoll.state.shm finds it (shared-memory domain `rank // ranks_per_node`,
    refined by the declared topology's first level), numbered by its lowest rank."""
    declared: Sequence[int] = (0,) * size
    if topology:
        levels = parse_topology(topology, size).levels
        if levels:
            declared = levels[0]
    first: dict[tuple[int, int], int] = {}
    return tuple(first.setdefault((declared[r], r // ranks_per_node), r) for r in range(size))


def _check_algorithm(algorithm: str) -> None:
    """The checks the settings make on an ADAPTCOLL_*_ALGORITHM value that asks for the node level."""
    kind, _, params = algorithm.partition(":")
    if kind.strip() == "shm":
        if params:
            raise ValueError(
                f"algorithm {algorithm!r}: shm takes no parameters (between nodes use topo:intra=shm,inner=...)"
            )
        return
    try:
        check_params(*parse_algorithm(settings_mod.point_to_point_tree(algorithm)))
        inner_shape(algorithm)
    except ValueError as exc:
        raise ValueError(f"algorithm {algorithm!r}: {exc}") from None


@dataclass(frozen=True)
class NodeSetup:
    """One call on the node level, decided for every rank (what shm_decide's templates hold).

    `links[r]`: rank r's places in the trees between node leaders (empty unless it leads a node and
    there are several); `leader[r]`: the node rank of r's node's entry (bcast), leader (reduce) or
    leader (allreduce over several nodes; None on one node); `scratch[r]`: r reduces its node into a
    scratch array (a leader that is not the root).
    """

    collective: str
    algorithm: str
    dtype: Any
    nodes: NodeMap
    nslots: int
    slot_bytes: int
    plan: SegmentPlan
    trees: tuple[Tree, ...]
    links: tuple[tuple[Link, ...], ...]
    leader: tuple[Optional[int], ...]
    scratch: tuple[bool, ...]

    def check_op(self, op: ReduceOp) -> None:
        """The real library serves a non-commutative op across nodes with a rank-ordered tree instead."""
        if self.collective != "bcast" and self.nodes.count > 1 and not op.commutative:
            raise ValueError(
                f"{self.algorithm}: a non-commutative op across nodes runs on a rank-ordered tree in the "
                "library, not on the node level"
            )

    def describe(self) -> dict[str, int]:
        """What a report says about the node level: nodes, ranks on the largest, slots and their size."""
        return {
            "nodes": self.nodes.count,
            "largest_node": self.nodes.largest,
            "slots": self.nslots,
            "slot_bytes": self.slot_bytes,
        }

    def start(self, ctx: OpContext, rank: int, buf: Any, result: Any, op: ReduceOp, on_complete: Callback) -> None:
        """Start rank `rank`'s part (its CPU is running), as shm_decide's start functions do."""
        world: World = ctx.transport.world  # type: ignore[attr-defined]
        shared = _shared(self, world)
        ring = shared.rings[rank]
        buf, result = shared.array(buf), shared.array(result)
        links, leader = self.links[rank], self.leader[rank]
        link = links[0] if links else None
        if self.collective == "bcast":
            assert leader is not None
            start_bcast(ctx, ring, link, buf, leader, on_complete)
        elif self.collective == "reduce":
            assert leader is not None and ctx.pool is not None
            node_target, done = result, on_complete
            if self.scratch[rank]:
                pool = ctx.pool
                node_target = pool.take(len(buf))

                def done() -> None:
                    pool.give(node_target)
                    on_complete()

            start_reduce(ctx, ring, link, buf, result, node_target, op, leader, done)
        else:
            start_allreduce(ctx, ring, links, buf, result, op, leader, on_complete)


class _Shared:
    """A run's simulated slot regions (one per node) and every rank's SlotRing."""

    def __init__(self, setup: NodeSetup, world: World) -> None:
        params = world.params
        self.meter = Meter(world, params.shm_copy)
        self.dtype = setup.dtype
        self.rings: list[SlotRing] = []
        rings: dict[int, SlotRing] = {}
        for members in setup.nodes.nodes:
            region = SlotRegion(world, members, setup.nslots, setup.slot_bytes, self.meter, params.shm_flag, world.data)
            for i, rank in enumerate(members):
                rings[rank] = SlotRing(region.views[i], world.ranks[rank])
        self.rings = [rings[r] for r in range(world.size)]

    def array(self, buf: Any) -> Any:
        """A rank's buffer as the protocols need it: data as is, a `range` stand-in as a Span."""
        return Span(len(buf), self.dtype, self.meter) if isinstance(buf, range) else buf


def _shared(setup: NodeSetup, world: World) -> _Shared:
    """The regions of `setup` in `world` (kept by the world: one run), made at its first rank's start."""
    key = ("node level", id(setup))
    found = world.shared.get(key)
    if found is None:
        found = world.shared[key] = _Shared(setup, world)
    assert isinstance(found, _Shared)
    return found


def prepare_node_level(
    collective: str,
    size: int,
    count: int,
    dtype: Any,
    root: int,
    algorithm: str,
    segment: int,
    roots: int,
    cfg: settings_mod.Settings,
    ranks_per_node: int,
    tag_space: int,
) -> NodeSetup:
    """Decide a node-level call for every rank, as adaptcoll.state.shm and shm_decide would; ValueError where
    the library would not run it on the node level. `segment` > 0 sets the slot size (else
    ADAPTCOLL_SHM_SEGMENT_SIZE); `roots`: the allreduce's trees between leaders (0: one per node)."""
    _check_algorithm(algorithm)
    itemsize = np.dtype(dtype).itemsize
    nodes = NodeMap(node_ids(size, ranks_per_node, cfg.topology))
    slot_bytes, _ = slot_geometry(nodes.largest, segment or cfg.shm_segment_size, cfg.shm_slots, cfg.shm_bytes)
    if not slot_bytes:
        raise ValueError(
            f"shm: ADAPTCOLL_SHM_BYTES={cfg.shm_bytes} cannot hold {cfg.shm_slots} slots for each of "
            f"{nodes.largest} ranks on a node (the library would use the point-to-point trees)"
        )
    multi = nodes.count > 1
    plan = plan_segments(count, itemsize, slot_bytes, 0, tag_space if multi else max(1, count))
    if plan.seg_count * itemsize > slot_bytes:
        raise ValueError(
            f"shm: {-(-count * itemsize // slot_bytes)} slot-sized segments but only {tag_space} tags "
            "(the library would use the point-to-point trees)"
        )
    shape, params = inner_shape(algorithm)
    ids = nodes.ids
    trees: tuple[Tree, ...] = ()
    links: list[tuple[Link, ...]] = []
    leader: list[Optional[int]] = []
    scratch = [False] * size
    if collective == "allreduce":
        if multi:
            count_roots = min(nodes.count, roots or nodes.count)
            trees = nodes.inter_trees(
                shape, params, tuple((k * nodes.count) // count_roots for k in range(count_roots))
            )
        for r in range(size):
            links.append(tuple(nodes.inter_links(trees, r, plan.nseg)) if multi else ())
            leader.append(nodes.local_rank(nodes.leader(ids[r])) if multi else None)
    else:
        if multi:
            trees = nodes.inter_trees(shape, params, (ids[root],))
        for r in range(size):
            head = nodes.leader(ids[r], root)
            links.append(tuple(nodes.inter_links(trees, r, plan.nseg, root)) if multi else ())
            leader.append(nodes.local_rank(head))
            scratch[r] = collective == "reduce" and multi and r == head and r != root
    return NodeSetup(
        collective,
        algorithm,
        np.dtype(dtype),
        nodes,
        cfg.shm_slots,
        slot_bytes,
        plan,
        trees,
        tuple(links),
        tuple(leader),
        tuple(scratch),
    )
