"""The host (NumPy) array backend: synchronous folds with ufuncs writing straight into `out`.

This is the default backend of every protocol, so `combine` is kept to one dict lookup and one
ufunc call for predefined ops; which (op, dtype) pairs it folds follows MPI's rules.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .base import ArrayBackend, Poll, ReduceOp

__all__ = ["NumpyBackend", "UFUNC_BY_OP", "SUPPORTED_DTYPES_BY_OP"]

UFUNC_BY_OP: dict[str, np.ufunc] = {
    "SUM": np.add,
    "PROD": np.multiply,
    "MAX": np.maximum,
    "MIN": np.minimum,
    "LAND": np.logical_and,
    "LOR": np.logical_or,
    "LXOR": np.logical_xor,
    "BAND": np.bitwise_and,
    "BOR": np.bitwise_or,
    "BXOR": np.bitwise_xor,
}
"""The NumPy ufunc that folds each predefined op (logical ops on ints store 1/0, as MPI does)."""

_INTEGERS = frozenset(np.dtype(t) for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"))
_FLOATS = frozenset(np.dtype(t) for t in ("f2", "f4", "f8"))
_COMPLEX = frozenset(np.dtype(t) for t in ("c8", "c16"))
_BOOL = frozenset([np.dtype(np.bool_)])

SUPPORTED_DTYPES_BY_OP: dict[str, frozenset[np.dtype]] = {
    "SUM": _INTEGERS | _FLOATS | _COMPLEX,
    "PROD": _INTEGERS | _FLOATS | _COMPLEX,
    "MAX": _INTEGERS | _FLOATS,
    "MIN": _INTEGERS | _FLOATS,
    "LAND": _INTEGERS | _BOOL,
    "LOR": _INTEGERS | _BOOL,
    "LXOR": _INTEGERS | _BOOL,
    "BAND": _INTEGERS | _BOOL,
    "BOR": _INTEGERS | _BOOL,
    "BXOR": _INTEGERS | _BOOL,
}
"""MPI's op/type rules (native byte order only): arithmetic on numbers, MAX/MIN not on complex,
logical and bitwise ops on integers and C bool."""


class NumpyBackend(ArrayBackend):
    """Host arrays; every fold runs to completion inside `combine` (which therefore returns None)."""

    name = "numpy"

    def empty(self, count: int, dtype: Any) -> np.ndarray:
        """A new 1-D host array of `count` elements of `dtype`."""
        return np.empty(count, dtype)

    def copy(self, dst: np.ndarray, src: Any) -> None:
        """`dst[...] = src`, done on return."""
        np.copyto(dst, src)

    def combine(self, op: ReduceOp, lower: np.ndarray, higher: np.ndarray, out: np.ndarray) -> Optional[Poll]:
        """`out = lower op higher` now; `out` may alias `lower` or `higher` (ufuncs need no temporary)."""
        ufunc = UFUNC_BY_OP.get(op.name)
        if ufunc is not None:
            ufunc(lower, higher, out=out)
            return None
        _combine_user(op, lower, higher, out)
        return None

    def supports(self, op: ReduceOp, dtype: Any) -> bool:
        """Whether MPI defines `op` on `dtype` (user ops: whenever they carry a host fold)."""
        allowed = SUPPORTED_DTYPES_BY_OP.get(op.name)
        if allowed is None:
            return op.user_fold is not None
        try:
            return np.dtype(dtype) in allowed
        except TypeError:
            return False


def _combine_user(op: ReduceOp, lower: np.ndarray, higher: np.ndarray, out: np.ndarray) -> None:
    """Apply a user op's in-place fold so that `out = lower op higher`, leaving `lower`/`higher`
    intact unless `out` is one of them."""
    fold = op.user_fold
    if fold is None:
        raise ValueError(f"reduction op {op.name!r} is neither predefined nor carries a user_fold")
    if out is higher:
        fold(lower, higher)
    elif out is lower or np.may_share_memory(out, lower):
        result = higher.copy()
        fold(lower, result)
        np.copyto(out, result)
    else:
        np.copyto(out, higher)
        fold(lower, out)
