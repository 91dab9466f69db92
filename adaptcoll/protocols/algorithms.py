"""The block-based allreduce algorithms by name: everything the decision layer (or a tuner) needs to run one.

`ALLREDUCE_ALGORITHMS[name]` says how to plan the message (how many blocks on p ranks, how many tags
per segment), whether the algorithm folds in MPI's rank order (so it may serve non-commutative ops),
and which protocol to start. The names are the values of ADAPTCOLL_ALLREDUCE_ALGORITHM besides the tree
kinds; a tuner picks one by name and calls `AllreduceAlgorithm.start` with the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..backends.base import ReduceOp
from ..runtime.transport import Callback
from . import rabenseifner, ring
from .context import OpContext

__all__ = ["AllreduceAlgorithm", "ALLREDUCE_ALGORITHMS", "AllreduceProtocol"]


class AllreduceProtocol(Protocol):
    """One rank's part of an allreduce of `local` into `result` (the same array when in place)."""

    def __init__(self, ctx: OpContext, local: Any, result: Any, op: ReduceOp, on_complete: Callback) -> None: ...

    def start(self) -> None: ...


@dataclass(frozen=True)
class AllreduceAlgorithm:
    """How to run one block-based allreduce (see the module docstring)."""

    name: str
    protocol: Callable[[OpContext, Any, Any, ReduceOp, Callback], AllreduceProtocol]
    blocks: Callable[[int], int]
    """The number of blocks the message is cut into on p ranks (plan.plan_blocks)."""
    tags_per_segment: int
    rank_ordered: bool
    """Folds every block in MPI's rank order (x0 op x1 op ... op x_p-1): serves non-commutative ops."""
    segment_size: int
    """Default segment size in bytes (`ring:segment_size=...` overrides it; see bench/RESULTS.md)."""
    max_segments: int
    """Default cap on segments per block, 0: none (`ring:max_segments=...` overrides it)."""

    def start(self, ctx: OpContext, local: Any, result: Any, op: ReduceOp, on_complete: Callback) -> None:
        """Start this rank's part; `on_complete()` fires once its result is in `result`."""
        self.protocol(ctx, local, result, op, on_complete).start()


def _ring_blocks(p: int) -> int:
    return p


ALLREDUCE_ALGORITHMS: dict[str, AllreduceAlgorithm] = {
    "ring": AllreduceAlgorithm(
        "ring",
        ring.RingAllreduce,
        _ring_blocks,
        ring.TAGS_PER_SEGMENT,
        rank_ordered=False,
        segment_size=4 << 20,
        max_segments=0,
    ),
    "rabenseifner": AllreduceAlgorithm(
        "rabenseifner",
        rabenseifner.RabenseifnerAllreduce,
        rabenseifner.main_ranks,
        rabenseifner.TAGS_PER_SEGMENT,
        rank_ordered=True,
        segment_size=4 << 20,
        max_segments=0,
    ),
}
"""Algorithm name -> set-up. The ring's block b folds in the order b, b+1, ..., b-1 (reproducible, not rank
order); recursive halving folds adjacent rank ranges lowest first (rank order)."""
