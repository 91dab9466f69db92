"""An in-process transport: every rank of a small world in one Python process, for protocol tests.

Messages match by (source, dest, tag) in posting order, as in MPI. Completions are delivered in a
seeded random order, so tests see reorderings that real networks produce only sometimes. Standard
sends are buffered (they complete at once, like MPI's eager protocol); synchronous sends complete only
when matched. A world that stops making progress with work outstanding raises `Deadlock`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from .transport import Callback, Poll

__all__ = ["LoopbackWorld", "LoopbackTransport", "Deadlock", "SizeMismatch"]


class Deadlock(RuntimeError):
    """Raised when nothing can complete but operations are still posted."""


class SizeMismatch(RuntimeError):
    """Raised when a message and the receive it matches have different sizes."""


class LoopbackTransport:
    """One rank's view of a LoopbackWorld (implements adaptcoll.runtime.transport.Transport)."""

    def __init__(self, world: LoopbackWorld, rank: int) -> None:
        self.world = world
        self.rank = rank
        self.size = world.size
        # the world's own functions with this rank bound: no extra frame per message
        self.isend: Callable[..., None] = functools.partial(world._send, rank)
        self.irecv: Callable[..., None] = functools.partial(world._recv, rank)

    def watch(self, poll: Poll, on_done: Callback) -> None:
        self.world._watches.append((poll, on_done))


class LoopbackWorld:
    """`size` ranks in one process; `run(done)` delivers completions until `done()` is true."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.rng = random.Random(seed)
        self._below = self.rng._randbelow  # type: ignore[attr-defined]  # randrange(n) without its checks
        self.transports = [LoopbackTransport(self, r) for r in range(size)]
        self._sends: dict[tuple[int, int, int], list] = {}  # unmatched, by (source, dest, tag)
        self._recvs: dict[tuple[int, int, int], list] = {}
        self._ready: list[Callback] = []
        self._watches: list[tuple[Poll, Callback]] = []
        self.messages = 0
        self.bytes = 0
        self.sync_sends = 0

    def _deliver(self, src_buf: Any, dst_buf: Any, key: tuple[int, int, int]) -> None:
        if type(src_buf) is np.ndarray and type(dst_buf) is np.ndarray and src_buf.dtype is dst_buf.dtype:
            nbytes = src_buf.nbytes
            if nbytes != dst_buf.nbytes:
                raise SizeMismatch(f"message {key} has {nbytes} bytes, receive expects {dst_buf.nbytes}")
            dst_buf[...] = src_buf if src_buf.shape == dst_buf.shape else src_buf.reshape(dst_buf.shape)
        else:
            src = np.asarray(src_buf).view(np.uint8).reshape(-1)
            dst = np.asarray(dst_buf).view(np.uint8).reshape(-1)
            nbytes = src.nbytes
            if nbytes != dst.nbytes:
                raise SizeMismatch(f"message {key} has {nbytes} bytes, receive expects {dst.nbytes}")
            dst[...] = src
        self.messages += 1
        self.bytes += nbytes

    def _send(self, src: int, buf: Any, dst: int, tag: int, on_done: Callback, sync: bool = False) -> None:
        """Rank `src`'s isend (LoopbackTransport binds `src`)."""
        key = (src, dst, tag)
        self.sync_sends += sync
        recvs = self._recvs.get(key)
        if recvs:
            rbuf, rcb = recvs.pop(0)
            if not recvs:
                del self._recvs[key]
            self._deliver(buf, rbuf, key)
            self._ready += (on_done, rcb)
            return
        item: tuple[Any, Optional[Callback], bool]
        if sync:
            item = (buf, on_done, True)
        else:  # buffered, like MPI's eager protocol: the sender may reuse `buf` at once
            item = (buf.copy() if type(buf) is np.ndarray else np.array(np.asarray(buf), copy=True), None, False)
        sends = self._sends.get(key)
        if sends is None:
            self._sends[key] = [item]
        else:
            sends.append(item)
        if not sync:
            self._ready.append(on_done)

    def _recv(self, dst: int, buf: Any, src: int, tag: int, on_done: Callback) -> None:
        """Rank `dst`'s irecv (LoopbackTransport binds `dst`)."""
        key = (src, dst, tag)
        sends = self._sends.get(key)
        if sends:
            sbuf, scb, _ = sends.pop(0)
            if not sends:
                del self._sends[key]
            self._deliver(sbuf, buf, key)
            self._ready.append(on_done)
            if scb is not None:
                self._ready.append(scb)
            return
        recvs = self._recvs.get(key)
        if recvs is None:
            self._recvs[key] = [(buf, on_done)]
        else:
            recvs.append((buf, on_done))

    def step(self) -> bool:
        """Fire one completion (chosen at random) or finished watch; False if none could fire."""
        ready = self._ready
        if self._watches:
            done_watches = [i for i, (poll, _) in enumerate(self._watches) if poll()]
            for i in reversed(done_watches):
                ready.append(self._watches.pop(i)[1])
        n = len(ready)
        if not n:
            return False
        i = self._below(n)
        last = ready.pop()
        if i == n - 1:
            last()
        else:
            chosen = ready[i]
            ready[i] = last
            chosen()
        return True

    def run(self, done: Callable[[], bool], max_steps: int = 10_000_000) -> int:
        """Deliver completions until `done()`; returns the number of steps. Raises Deadlock if stuck."""
        steps = 0
        idle_polls = 0
        ready, below = self._ready, self._below
        while not done():
            n = len(ready)
            if n and not self._watches:  # `step()` inlined: the common case, one completion fired
                i = below(n)
                last = ready.pop()
                if i == n - 1:
                    last()
                else:
                    chosen = ready[i]
                    ready[i] = last
                    chosen()
                idle_polls = 0
            elif self.step():
                idle_polls = 0
            elif self._watches and idle_polls < 1000:
                idle_polls += 1  # deferred work may need more polls to finish
            else:
                raise Deadlock(self.describe())
            steps += 1
            if steps > max_steps:
                raise Deadlock("step limit reached: " + self.describe())
        return steps

    def describe(self) -> str:
        """Outstanding sends and receives, for deadlock reports."""
        sends = {k: len(v) for k, v in self._sends.items() if v}
        recvs = {k: len(v) for k, v in self._recvs.items() if v}
        return f"pending sends {sends}, pending receives {recvs}, watches {len(self._watches)}"

    @property
    def unmatched(self) -> int:
        """Messages sent but never received plus receives never matched."""
        return sum(len(v) for v in self._sends.values()) + sum(len(v) for v in self._recvs.values())
