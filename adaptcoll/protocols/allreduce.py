"""Pipelined allreduce: a segmented reduce to the root whose finished segments are broadcast at once.

ADAPT has no allreduce; this one keeps its event-driven style. The root starts broadcasting segment s
the moment s is fully reduced there; a non-root posts the receive for the result of s only after its
own contribution to s has left (so an in-place buffer is never read and written at the same time).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..backends.base import ReduceOp
from ..runtime.transport import Callback
from .context import OpContext
from .pieces import ChildSendQueues, Join, WindowedReceiver, segment_views
from .reduce import Reduce

__all__ = ["Allreduce"]


class Allreduce:
    """Allreduce segments `segs` of `local` into `result` over one tree, as seen from one rank."""

    def __init__(
        self,
        ctx: OpContext,
        parent: Optional[int],
        children: Sequence[int],
        local: Any,
        result: Any,
        op: ReduceOp,
        segs: Sequence[int],
        on_complete: Callback,
        gated: bool = False,
        on_result: Optional[Callable[[int], None]] = None,
    ) -> None:
        """`gated`: the local contribution of position pos arrives later, through contribute(pos);
        `on_result(pos)` fires once the result of position pos is final in `result` on this rank."""
        nseg = len(segs)
        parts = 1 + (1 if children and nseg else 0) + (1 if parent is not None and nseg else 0)
        self._join = Join(parts, on_complete)
        views = segment_views(result, ctx.plan, segs) if nseg and (children or parent is not None) else []
        self._down = ChildSendQueues(ctx, children, result, segs, self._join.part_done, views)
        self._result_recv: Optional[WindowedReceiver] = None
        on_final = on_sent = None
        final = self._down.segment_ready if on_result is None else _both(self._down.segment_ready, on_result)
        if parent is None:
            on_final = final
        elif nseg:
            forward: Optional[Callable[[int], None]]
            if on_result is None:
                forward = self._down.segment_ready if children else None
            else:
                forward = final if children else on_result
            self._result_recv = WindowedReceiver(
                ctx,
                parent,
                result,
                segs,
                forward,
                self._join.part_done,
                gated=True,
                views=views,
            )
            on_sent = self._result_recv.allow
        self._up = Reduce(
            ctx,
            parent,
            children,
            local,
            result if parent is None else None,
            op,
            segs,
            self._join.part_done,
            on_final=on_final,
            on_sent=on_sent,
            gated=gated,
        )
        self.contribute = self._up.contribute

    def start(self) -> None:
        if self._result_recv is not None:
            self._result_recv.start()
        self._up.start()
        self._join.start()


def _both(first: Callable[[int], None], second: Callable[[int], None]) -> Callable[[int], None]:
    def both(pos: int) -> None:
        first(pos)
        second(pos)

    return both
