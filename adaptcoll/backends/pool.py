"""A free list of segment buffers, so reductions allocate once and reuse across segments and calls."""

from __future__ import annotations

from typing import Any

from .base import ArrayBackend

__all__ = ["SegmentPool"]


class SegmentPool:
    """Buffers of one dtype from one backend, kept by length; `take(n)` reuses a freed one if it can."""

    __slots__ = ("_backend", "_dtype", "_free", "allocated")

    def __init__(self, backend: ArrayBackend, dtype: Any) -> None:
        self._backend = backend
        self._dtype = dtype
        self._free: dict[int, list[Any]] = {}
        self.allocated = 0

    def take(self, n: int) -> Any:
        """A buffer of n elements (contents undefined)."""
        free = self._free.get(n)
        if free:
            return free.pop()
        self.allocated += 1
        return self._backend.empty(n, self._dtype)

    def give(self, buf: Any) -> None:
        """Return a buffer obtained from take()."""
        self._free.setdefault(len(buf), []).append(buf)

    @property
    def cached(self) -> int:
        """How many free buffers are held."""
        return sum(len(v) for v in self._free.values())
