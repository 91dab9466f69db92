"""A non-commutative reduction for tests: 2x2 matrices over Z/251 packed 4 x 8 bits in a uint32, folded
as `higher = lower @ higher`, so a wrong fold order gives a different result (checked against native MPI
with the same function as a user op)."""

from __future__ import annotations

import numpy as np

__all__ = ["matmul_fold", "matmul_mpi"]


def matmul_fold(lower: np.ndarray, higher: np.ndarray) -> None:
    """higher = lower @ higher, element by element (each uint32 is one packed matrix)."""

    def unpack(x):
        return [(x >> (8 * k)) & 0xFF for k in range(4)]

    a, b, c, d = unpack(lower.astype(np.uint64))
    e, f, g, h = unpack(higher.astype(np.uint64))
    out = [(a * e + b * g) % 251, (a * f + b * h) % 251, (c * e + d * g) % 251, (c * f + d * h) % 251]
    higher[...] = (out[0] | (out[1] << 8) | (out[2] << 16) | (out[3] << 24)).astype(np.uint32)


def matmul_mpi(inbuf, inoutbuf, datatype) -> None:
    """The same fold as an MPI user-op function (`MPI.Op.Create(matmul_mpi, commute=False)`)."""
    matmul_fold(np.frombuffer(inbuf, dtype=np.uint32), np.frombuffer(inoutbuf, dtype=np.uint32))
