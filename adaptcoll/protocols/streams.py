"""Ordered message streams between two ranks: the building blocks of the ring and recursive-halving allreduces.

Each directed pair of ranks that talks in an operation has one fixed list of messages that both sides
know: the sender posts them in that order as they become ready, the receiver posts receives in the
same order, each side within its window. Because both sides agree on the order, no reordering of
completions can leave a send waiting for a receive that is never posted (the same rule as the tree
protocols' in-order sends, see pieces.ChildSendQueues). Every message of a stream has its own tag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..runtime.transport import Callback
from .context import OpContext
from .pieces import sync_flag

__all__ = ["SendStream", "RecvStream"]


class SendStream:
    """Messages 0..n-1 to `peer` with tags `tags`, sent in order as they become ready.

    `ready(i, buf)` hands message i its buffer; it leaves once every earlier message has been posted
    and fewer than `ctx.send_window` are in flight. `on_sent(i)` fires when the send of i completed
    (its buffer may be written again); `on_done()` after the last one.
    """

    __slots__ = ("_t", "_peer", "_tags", "_n", "_bufs", "_next", "_inflight", "_left", "_window", "_sync", "_on_sent")

    def __init__(
        self,
        ctx: OpContext,
        peer: int,
        tags: Sequence[int],
        on_sent: Optional[Callable[[int], None]],
        on_done: Callback,
    ) -> None:
        self._t = ctx.transport
        self._peer = peer
        self._tags = tags
        self._n = len(tags)
        self._bufs: list[Any] = [None] * self._n
        self._next = 0
        self._inflight = 0
        self._left = self._n
        self._window = ctx.send_window
        self._sync = ctx.sync_mode
        self._on_sent = _sent_hook(on_sent, on_done, self)

    def __len__(self) -> int:
        return self._n

    def ready(self, i: int, buf: Any) -> None:
        """Message i may go, carrying `buf` (which must stay unchanged until on_sent(i))."""
        self._bufs[i] = buf
        if i == self._next:
            self._pump()

    def _pump(self) -> None:
        bufs, n = self._bufs, self._n
        while self._inflight < self._window and self._next < n:
            i = self._next
            buf = bufs[i]
            if buf is None:
                return
            bufs[i] = None
            self._next = i + 1
            self._inflight += 1
            self._t.isend(buf, self._peer, self._tags[i], self._on_sent(i), sync_flag(self._sync, i, self._window))

    def _sent(self) -> bool:
        """Book-keeping of one completed send; True when it was the last one."""
        self._inflight -= 1
        self._left -= 1
        if self._left:
            self._pump()
            return False
        return True


def _sent_hook(
    on_sent: Optional[Callable[[int], None]], on_done: Callback, stream: SendStream
) -> Callable[[int], Callback]:
    """The per-message completion callback factory of a SendStream."""

    def make(i: int) -> Callback:
        def sent() -> None:
            last = stream._sent()
            if on_sent is not None:
                on_sent(i)
            if last:
                on_done()

        return sent

    return make


class RecvStream:
    """Messages 0..n-1 from `peer` with tags `tags`, received in order, at most `ctx.recv_window` posted.

    `dests[i]` is where message i lands: an array (a slice of the result) or None for a buffer of
    `sizes[i]` elements from `ctx.pool`, which the protocol hands back with `release(i, buf)` once it
    has folded it. A pooled message is posted only while i < (oldest unreleased pooled message) +
    recv_window + send_window, so the pool memory of a stream is bounded by its windows. Message i with
    `allowed[i]` false waits for `allow(i)` (its result slice is still read or sent by this rank).
    `on_arrival(i, buf)` fires per arrival; `on_done()` after the last arrival.
    """

    __slots__ = (
        "_t",
        "_peer",
        "_tags",
        "_dests",
        "_sizes",
        "_pool",
        "_n",
        "_allowed",
        "_released",
        "_low",
        "_lookahead",
        "_window",
        "_next",
        "_inflight",
        "_left",
        "_on_arrival",
        "_on_done",
    )

    def __init__(
        self,
        ctx: OpContext,
        peer: int,
        tags: Sequence[int],
        dests: Sequence[Any],
        sizes: Sequence[int],
        allowed: Sequence[int],
        on_arrival: Callable[[int, Any], None],
        on_done: Callback,
    ) -> None:
        n = len(tags)
        self._t = ctx.transport
        self._peer = peer
        self._tags = tags
        self._dests = dests
        self._sizes = sizes
        self._pool: Any = ctx.pool
        self._n = n
        self._allowed = bytearray(allowed)
        self._released = bytearray(n)
        self._low = 0
        self._lookahead = ctx.recv_window + ctx.send_window
        self._window = ctx.recv_window
        self._next = 0
        self._inflight = 0
        self._left = n
        self._on_arrival = on_arrival
        self._on_done = on_done
        self._advance_low()
        if self._low < n and self._pool is None:
            raise ValueError("a stream into pool buffers needs a segment pool in its context (ctx.pool)")

    def __len__(self) -> int:
        return self._n

    def start(self) -> None:
        self._pump()

    def allow(self, i: int) -> None:
        """Message i may now be received into its destination."""
        self._allowed[i] = 1
        if i == self._next:
            self._pump()

    def release(self, i: int, buf: Any) -> None:
        """Message i has been consumed: a pool buffer goes back to the pool, and receives reach further ahead."""
        if self._dests[i] is not None:
            return
        self._pool.give(buf)
        self._released[i] = 1
        if i == self._low:
            self._advance_low()
            self._pump()

    def _advance_low(self) -> None:
        """The oldest pooled message not yet released (messages into the result hold no pool memory)."""
        low, released, dests, n = self._low, self._released, self._dests, self._n
        while low < n and (released[low] or dests[low] is not None):
            low += 1
        self._low = low

    def _pump(self) -> None:
        n, dests, allowed = self._n, self._dests, self._allowed
        while self._inflight < self._window and self._next < n:
            i = self._next
            if not allowed[i]:
                return
            buf = dests[i]
            if buf is None:
                if i >= self._low + self._lookahead:
                    return
                buf = self._pool.take(self._sizes[i])
            self._next = i + 1
            self._inflight += 1
            self._t.irecv(buf, self._peer, self._tags[i], self._make_arrived(i, buf))

    def _make_arrived(self, i: int, buf: Any) -> Callback:
        def arrived() -> None:
            self._inflight -= 1
            self._left -= 1
            self._on_arrival(i, buf)
            if self._left == 0:
                self._on_done()
            else:
                self._pump()

        return arrived
