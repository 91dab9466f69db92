"""ADAPT's broadcast: a receive window from the parent and an independent send queue per child."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..runtime.transport import Callback
from .context import OpContext
from .pieces import ChildSendQueues, Join, WindowedReceiver, segment_views

__all__ = ["Bcast"]


class Bcast:
    """Broadcast segments `segs` of `buf` (1-D array) down one tree, as seen from one rank.

    The root has every segment ready at once; other ranks receive segments straight into `buf`
    (window `ctx.recv_window`) and forward each to their children as soon as it is that child's turn.
    Per child at most `ctx.send_window` sends are in flight. `on_complete()` fires when this rank's part is done.
    """

    def __init__(
        self,
        ctx: OpContext,
        parent: Optional[int],
        children: Sequence[int],
        buf: Any,
        segs: Sequence[int],
        on_complete: Callback,
    ) -> None:
        self._segs = segs
        self._parent = parent
        parts = (1 if children and segs else 0) + (1 if parent is not None and segs else 0)
        self._join = Join(parts, on_complete)
        views = segment_views(buf, ctx.plan, segs) if segs and (children or parent is not None) else []
        self._sendq = ChildSendQueues(ctx, children, buf, segs, self._join.part_done, views)
        self._recv = None
        if parent is not None and segs:
            forward = self._sendq.segment_ready if children else None
            self._recv = WindowedReceiver(
                ctx,
                parent,
                buf,
                segs,
                forward,
                self._join.part_done,
                views=views,
            )

    def start(self) -> None:
        """Post the first receives (or, at the root, the first sends)."""
        if self._recv is not None:
            self._recv.start()
        elif self._parent is None:
            self._sendq.all_ready()
        self._join.start()
