"""The array backend interface: allocation, copies and reduction folds on one kind of memory.

Protocols fold segments only through a backend, so the same state machine runs on NumPy (host),
CuPy (device, asynchronous on a stream) or a deferred test backend whose folds finish later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["Poll", "ReduceOp", "ArrayBackend", "PREDEFINED_OPS"]

Poll = Callable[[], bool]
"""Returns True once some asynchronous work (a GPU event, a deferred fold) has finished; the engine
polls it (`Transport.watch`). Defined here, at the bottom, because the backends make such work."""

PREDEFINED_OPS = ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR")
"""Reduction operations a backend folds itself (by name); anything else is a user op or goes native."""


@dataclass(frozen=True)
class ReduceOp:
    """A reduction operation as protocols see it.

    `name` is one of PREDEFINED_OPS, or "USER" with `user_fold` set. `user_fold(lower, higher)`
    computes `higher = lower op higher` in place (MPI's user-function convention, where `lower`
    holds the contributions of lower ranks), on host arrays.
    """

    name: str
    commutative: bool = True
    user_fold: Optional[Callable[[Any, Any], None]] = field(default=None, compare=False)


class ArrayBackend:
    """Allocation, copy and fold on one kind of memory. Subclasses: NumpyBackend, CupyBackend, ..."""

    name: str = "abstract"

    def empty(self, count: int, dtype: Any) -> Any:
        """A new 1-D array of `count` elements of `dtype` (contents undefined)."""
        raise NotImplementedError

    def copy(self, dst: Any, src: Any) -> None:
        """`dst[...] = src` (same shape and dtype); ordered before any later fold or send of `dst`."""
        raise NotImplementedError

    def combine(self, op: ReduceOp, lower: Any, higher: Any, out: Any) -> Optional[Poll]:
        """Start `out = lower op higher` elementwise; `out` may be `lower` or `higher`.

        Returns None when the result is already in `out`, otherwise a poll function that returns
        True once it is (the caller hands it to `Transport.watch` and must not read `out`, nor
        reuse `lower`/`higher`, before then).
        """
        raise NotImplementedError

    def supports(self, op: ReduceOp, dtype: Any) -> bool:
        """Whether this backend folds `op` on `dtype` itself (else the call goes to native MPI)."""
        raise NotImplementedError
