"""Completion state of one collective on one rank, shared by the protocols that run it and the request
handles that wait on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

__all__ = ["Operation"]


class Operation:
    """Completion state of one adaptcoll collective on this rank; keeps its buffers alive until done."""

    __slots__ = ("done", "keep", "on_done")

    def __init__(self, keep: Any = None) -> None:
        self.done = False
        self.keep = keep
        self.on_done: Optional[Callable[[], None]] = None

    def complete(self) -> None:
        """Called by the protocol when this rank's part is finished."""
        self.done = True
        self.keep = None
        if self.on_done is not None:
            self.on_done()
