"""Hierarchical collectives: the shared-memory node level inside each node, the tree protocols between
node leaders, pipelined segment by segment (no MPI here).

- Bcast: the root publishes every segment to its node and sends it down the tree between leaders; a
  leader publishes segment s to its node the moment s arrives from its parent (and forwards it).
- Reduce: every node reduces segment s to its leader over shared slots; the leader feeds the node
  result of s into the tree reduce between leaders at once (`Reduce(..., gated=True).contribute`), so
  s can be on the network while s+1 is still being folded on the node.
- Allreduce: node reduce to the leader, the allreduce trees between leaders (segments dealt over
  several roots as usual), then the leader broadcasts the final segment s to its node as it lands.
  On a single node it is the node allreduce itself (every rank folds one chunk, all copy the result).

Each function starts one rank's part of one operation and calls `on_complete()` once that part is
done. `ctx` is the context between nodes (transport, backend, plan, windows, pool); its plan is also
the node level's plan (segment s is the same elements at both levels, its size at most one slot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from ..backends.base import ReduceOp
from ..plans.dealing import Link
from ..plans.segments import SegmentPlan
from ..runtime.transport import Callback
from .allreduce import Allreduce
from .context import OpContext
from .node import NodeBcast, NodeReduce
from .pieces import ChildSendQueues, Join, WindowedReceiver
from .reduce import Reduce
from .slots import SlotRing

__all__ = ["start_bcast", "start_reduce", "start_allreduce", "byte_plan"]


def byte_plan(plan: SegmentPlan, itemsize: int) -> SegmentPlan:
    """`plan` in bytes (for broadcasting a typed result segment by segment)."""
    return SegmentPlan(plan.count * itemsize, plan.seg_count * itemsize, plan.tag_base, plan.tag_space)


def start_bcast(
    ctx: OpContext, ring: SlotRing, link: Optional[Link], buf: Any, entry: int, on_complete: Callback
) -> None:
    """Broadcast `buf` (1-D uint8); `link`: this rank's place in the tree between node leaders (None
    unless it leads its node and there are several nodes); `entry`: the node rank that brings the data
    into the node (the root, or the node's leader)."""
    if link is None:
        NodeBcast(ring, ctx.plan, buf, entry, on_complete).start()
        return
    segs = link.segs
    has_parent = link.parent is not None and bool(segs)
    parts = 1 + (1 if link.children and segs else 0) + (1 if has_parent else 0)
    join = Join(parts, on_complete)
    sendq = ChildSendQueues(ctx, link.children, buf, segs, join.part_done)
    node = NodeBcast(ring, ctx.plan, buf, entry, join.part_done, gated=link.parent is not None)
    if link.parent is None:
        sendq.all_ready()
    elif segs:

        def arrived(pos: int) -> None:
            sendq.segment_ready(pos)
            node.allow(segs[pos])

        WindowedReceiver(ctx, link.parent, buf, segs, arrived, join.part_done).start()
    node.start()
    join.start()


def start_reduce(
    ctx: OpContext,
    ring: SlotRing,
    link: Optional[Link],
    local: Any,
    target: Any,
    node_target: Any,
    op: ReduceOp,
    leader: int,
    on_complete: Callback,
) -> None:
    """Reduce `local` to the root's `target`. `leader`: the node rank of this node's leader (the root
    on the root's node); `node_target`: where the node's result lands on the leader (the root's target,
    or a scratch array on other leaders; None elsewhere); `link` as in start_bcast."""
    if link is None:
        NodeReduce(ring, ctx.plan, local, node_target, op, ctx.backend, leader, on_complete).start()
        return
    join = Join(2, on_complete)
    tree = Reduce(ctx, link.parent, link.children, node_target, target, op, link.segs, join.part_done, gated=True)
    node = NodeReduce(
        ring, ctx.plan, local, node_target, op, ctx.backend, leader, join.part_done, on_segment=tree.contribute
    )
    tree.start()
    node.start()
    join.start()


def start_allreduce(
    ctx: OpContext,
    ring: SlotRing,
    links: Sequence[Link],
    local: Any,
    result: Any,
    op: ReduceOp,
    leader: Optional[int],
    on_complete: Callback,
) -> None:
    """Allreduce `local` into `result`. `leader` None: a single node (the node allreduce); otherwise
    the node rank of this node's leader, and `links` this rank's places in the allreduce trees between
    leaders (empty unless it leads its node)."""
    plan = ctx.plan
    if leader is None:
        NodeReduce(ring, plan, local, result, op, ctx.backend, None, on_complete).start()
        return
    is_leader = bool(links)
    join = Join(2 + len(links), on_complete)
    data = result.view(np.uint8)
    trees: list[Allreduce] = []
    ntrees = max(1, len(links))
    contribute = None
    if is_leader:

        def contribute(s: int) -> None:
            trees[s % ntrees].contribute(s // ntrees)

    node_reduce = NodeReduce(
        ring,
        plan,
        local,
        result if is_leader else None,
        op,
        ctx.backend,
        leader,
        join.part_done,
        on_segment=contribute,
    )
    node_bcast = NodeBcast(ring, byte_plan(plan, result.dtype.itemsize), data, leader, join.part_done, gated=is_leader)
    for link in links:

        def landed(pos: int, segs: Sequence[int] = link.segs) -> None:
            node_bcast.allow(segs[pos])

        trees.append(
            Allreduce(
                ctx,
                link.parent,
                link.children,
                result,
                result,
                op,
                link.segs,
                join.part_done,
                gated=True,
                on_result=landed,
            )
        )
    for tree in trees:
        tree.start()
    node_reduce.start()
    node_bcast.start()
    join.start()
