"""Completion state of one collective on one rank, shared by the protocols that run it and the request
handles that wait on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

__all__ = ["Operation"]


class Operation:
    """Completion state of one adaptcoll collective on this rank; keeps its buffers alive until done.

    An operation ends either complete or failed: `fail(error)` (called by the engine when one of its
    segments or callbacks goes wrong here, or when another rank reports its part failed) makes it done
    with `error` set, which whoever waits on it raises. `info` is the engine's description of it.
    """

    __slots__ = ("done", "keep", "on_done", "error", "info", "handle")

    def __init__(self, keep: Any = None) -> None:
        self.done = False
        self.keep = keep
        self.on_done: Optional[Callable[[], None]] = None
        self.error: Optional[BaseException] = None
        self.info: Any = None
        self.handle = 0
        """The compiled engine's handle of this operation once it runs there (0: none); lets a waiter wait
        for it in C (Engine.wait_operation), and the engine's `_fail` stop its requests there."""

    def complete(self) -> None:
        """Called by the protocol when this rank's part is finished."""
        if self.done:  # already failed
            return
        self.done = True
        self.keep = None
        if self.on_done is not None:
            self.on_done()

    def fail(self, error: BaseException) -> bool:
        """Finish with `error` (the buffers stay referenced); False if the operation had already finished."""
        if self.done:
            return False
        self.error = error
        self.done = True
        if self.on_done is not None:
            self.on_done()
        return True
