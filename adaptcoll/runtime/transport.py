"""The transport interface the protocols talk to (they never import MPI).

A transport moves contiguous array segments between the ranks of one communicator and reports
completions through callbacks. `adaptcoll.runtime.engine.MPITransport` is the MPI implementation;
`adaptcoll.runtime.loopback.LoopbackWorld` is an in-process one used by tests and the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..backends.base import Poll

__all__ = ["Callback", "Poll", "Transport"]

Callback = Callable[[], None]
"""Called with no arguments once an operation has completed."""


class Transport(Protocol):
    """Nonblocking point-to-point with completion callbacks, for the ranks of one communicator."""

    rank: int
    size: int

    def isend(self, buf: Any, dest: int, tag: int, on_done: Callback, synchronous: bool = False) -> None:
        """Start sending the contiguous array `buf` to `dest`; call `on_done()` when `buf` may be reused.

        `synchronous=True` asks for a send that completes only once the receiver has matched it
        (MPI_Issend): completion then tracks the receiver and does not flood its unexpected queue.
        """

    def irecv(self, buf: Any, source: int, tag: int, on_done: Callback) -> None:
        """Start receiving into the contiguous array `buf` from `source`; call `on_done()` when it is filled."""

    def watch(self, poll: Poll, on_done: Callback) -> None:
        """Call `on_done()` once `poll()` returns True; the engine polls it on every progress sweep."""
