"""Test data whose sums, products, maxima and bitwise folds are exact in every dtype on up to 8 ranks,
so adaptcoll's results can be compared with native MPI's bit for bit whatever the fold order."""

from __future__ import annotations

import numpy as np

__all__ = ["exact_data"]


def exact_data(rank: int, count: int, dtype: str, salt: int) -> np.ndarray:
    """`count` small values of `dtype` for `rank` (seeded by `salt` and `rank`)."""
    rng = np.random.default_rng(1000 * salt + rank)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, count).astype(dt)
    if dt.kind == "u":
        return rng.integers(0, 3, count).astype(dt)
    if dt.kind == "c":
        return (rng.integers(-2, 3, count) + 1j * rng.integers(-2, 3, count)).astype(dt)
    return rng.integers(-2, 3, count).astype(dt)
