"""A host backend whose folds finish later and out of order, to test asynchronous (GPU-like) folds.

`combine` returns a poll that turns True only after a seeded random number of polls, and the
arithmetic happens at that moment: a protocol that reads, sends or reuses buffers before the poll
says done gets wrong data (or an error), which its tests then catch without a GPU.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .base import ArrayBackend, Poll, ReduceOp
from .numpy_backend import NumpyBackend

__all__ = ["DeferredBackend", "DeferredStats", "InputModifiedError"]


class InputModifiedError(RuntimeError):
    """A deferred fold's input changed between `combine` and completion (the caller reused it early)."""


@dataclass
class DeferredStats:
    """Counters a test can assert on (e.g. that out-of-order completion really happened)."""

    started: int = 0
    completed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    completed_out_of_order: int = 0
    polls: int = 0


class _DeferredFold:
    """One pending fold; calling it is the poll handed back by `combine`."""

    __slots__ = ("backend", "seq", "op", "lower", "higher", "out", "polls_left", "snapshot", "done")

    def __init__(
        self,
        backend: DeferredBackend,
        seq: int,
        op: ReduceOp,
        lower: Any,
        higher: Any,
        out: Any,
        delay: int,
        check_inputs: bool,
    ) -> None:
        self.backend = backend
        self.seq = seq
        self.op, self.lower, self.higher, self.out = op, lower, higher, out
        self.polls_left = delay
        self.snapshot = (np.array(lower, copy=True), np.array(higher, copy=True)) if check_inputs else None
        self.done = False

    def __call__(self) -> bool:
        if self.done:
            return True
        self.backend.stats.polls += 1
        if self.polls_left > 0:
            self.polls_left -= 1
            return False
        self.finish()
        return True

    def finish(self) -> None:
        """Check the inputs are untouched, do the arithmetic now, and update the backend's stats."""
        if self.snapshot is not None:
            for label, now, then in (
                ("lower", self.lower, self.snapshot[0]),
                ("higher", self.higher, self.snapshot[1]),
            ):
                if not np.array_equal(now, then, equal_nan=now.dtype.kind in "fc"):
                    raise InputModifiedError(f"deferred fold #{self.seq}: `{label}` changed before the fold completed")
        result = self.backend.inner.combine(self.op, self.lower, self.higher, self.out)
        while result is not None and not result():  # an asynchronous inner backend: wait it out
            pass
        self.done = True
        self.backend._retire(self)
        self.lower = self.higher = self.out = self.snapshot = None


class DeferredBackend(ArrayBackend):
    """Wraps a synchronous backend (NumPy by default); each fold completes after 1..max_delay_polls
    polls chosen by a seeded RNG, so completions come back out of order and reproducibly."""

    name = "deferred"

    def __init__(
        self, inner: Optional[ArrayBackend] = None, seed: int = 0, max_delay_polls: int = 5, check_inputs: bool = True
    ) -> None:
        if max_delay_polls < 1:
            raise ValueError("max_delay_polls must be >= 1 (a deferred fold is never done at once)")
        self.inner = inner if inner is not None else NumpyBackend()
        self.max_delay_polls = max_delay_polls
        self.check_inputs = check_inputs
        self.stats = DeferredStats()
        self._rng = random.Random(seed)
        self._pending: dict[int, _DeferredFold] = {}
        self._next_seq = 0

    def empty(self, count: int, dtype: Any) -> Any:
        """Allocated by the inner backend."""
        return self.inner.empty(count, dtype)

    def copy(self, dst: Any, src: Any) -> None:
        """Synchronous copy (so it is trivially ordered before later folds and sends of `dst`)."""
        self.inner.copy(dst, src)

    def supports(self, op: ReduceOp, dtype: Any) -> bool:
        """Whatever the inner backend folds."""
        return self.inner.supports(op, dtype)

    def combine(self, op: ReduceOp, lower: Any, higher: Any, out: Any) -> Optional[Poll]:
        """Queue `out = lower op higher`; the returned poll does it after a random number of polls."""
        seq = self._next_seq
        self._next_seq += 1
        delay = self._rng.randint(1, self.max_delay_polls)
        fold = _DeferredFold(self, seq, op, lower, higher, out, delay, self.check_inputs)
        self._pending[seq] = fold
        stats = self.stats
        stats.started += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        return fold

    @property
    def pending(self) -> int:
        """Folds started and not yet completed."""
        return len(self._pending)

    def flush(self) -> None:
        """Complete every pending fold now, oldest first (e.g. before a test inspects buffers)."""
        for seq in sorted(self._pending):
            fold = self._pending.get(seq)
            if fold is not None:
                fold.finish()

    def _retire(self, fold: _DeferredFold) -> None:
        """Book-keeping when `fold` completes: out of order if an older fold is still pending."""
        del self._pending[fold.seq]
        stats = self.stats
        stats.completed += 1
        stats.in_flight -= 1
        if self._pending and min(self._pending) < fold.seq:
            stats.completed_out_of_order += 1
