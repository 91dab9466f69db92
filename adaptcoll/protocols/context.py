"""The per-operation context every protocol of one collective shares on one rank.

One frozen value instead of long positional lists: the transport and array backend to use, the
segment pool, the segment plan (with this operation's tags), the windows, the synchronous-send mode
and whether folds keep a fixed order. Built once per started operation by the decision layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..backends.base import ArrayBackend
from ..backends.pool import SegmentPool
from ..plans.segments import SegmentPlan
from ..runtime.transport import Transport

__all__ = ["OpContext", "SYNC_MODES"]

SYNC_MODES = ("first", "all", "none")
"""'first': the first window of sends to each peer is synchronous (tracks the receiver); 'all'; 'none'."""


@dataclass(frozen=True, slots=True)
class OpContext:
    """What one operation's protocols share on one rank (see the module docstring).

    `send_window`: sends in flight per peer; `recv_window`: receives posted per peer; `ordered`:
    fold contributions strictly as self, child 1, child 2, ... (reproducible or non-commutative).
    `pool` is None for protocols that never fold (broadcast).
    """

    transport: Transport
    backend: ArrayBackend
    plan: SegmentPlan
    send_window: int
    recv_window: int
    sync_mode: str = "first"
    ordered: bool = False
    pool: Optional[SegmentPool] = None

    def with_plan(self, plan: SegmentPlan) -> OpContext:
        """The same context for another plan (a persistent request's next start takes fresh tags)."""
        return OpContext(
            self.transport,
            self.backend,
            plan,
            self.send_window,
            self.recv_window,
            self.sync_mode,
            self.ordered,
            self.pool,
        )
