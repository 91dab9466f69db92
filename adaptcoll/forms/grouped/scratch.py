"""Scratch buffers for packed arrays, kept between calls so that a training loop does not allocate (and
page-fault) a fresh buffer every step; a buffer is lent to one operation at a time."""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["take", "give", "KEEP_BYTES"]

KEEP_BYTES = 256 << 20
"""At most this many bytes of idle scratch are kept."""

_free: dict[tuple[str, int], list[np.ndarray]] = {}
_held = 0
_lock = threading.Lock()


def take(dtype: np.dtype, count: int) -> np.ndarray:
    """A host array of `count` elements of `dtype`, not in use by anyone else until given back."""
    global _held
    with _lock:
        found = _free.get((dtype.str, count))
        if found:
            buf = found.pop()
            _held -= buf.nbytes
            return buf
    return np.empty(count, dtype)


def give(buf: np.ndarray) -> None:
    """Give back a buffer from `take` (kept for the next call if there is room)."""
    global _held
    with _lock:
        if _held + buf.nbytes > KEEP_BYTES:
            return
        _free.setdefault((buf.dtype.str, buf.size), []).append(buf)
        _held += buf.nbytes
