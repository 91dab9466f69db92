"""MPI reduction operations as the protocols see them (ReduceOp), or None when native MPI must do it."""

from __future__ import annotations

from typing import Optional

from mpi4py import MPI

from ..backends.base import ReduceOp

__all__ = ["reduce_op", "PREDEFINED_BY_HANDLE"]

PREDEFINED_BY_HANDLE: dict[int, ReduceOp] = {
    getattr(MPI, name).handle: ReduceOp(name)
    for name in ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR")
}
"""Handle of each predefined op adaptcoll folds itself -> its ReduceOp (MINLOC, MAXLOC, REPLACE,
NO_OP are not here: they go to native MPI)."""


def reduce_op(op: MPI.Op, datatype: MPI.Datatype) -> Optional[ReduceOp]:
    """The ReduceOp for `op` on `datatype`, or None when adaptcoll leaves it to native MPI."""
    found = PREDEFINED_BY_HANDLE.get(op.handle)
    if found is not None:
        return found
    if op.is_predefined:
        return None

    def user_fold(lower, higher, _op=op, _dt=datatype) -> None:
        _op.Reduce_local([lower, _dt], [higher, _dt])

    return ReduceOp("USER", commutative=bool(op.Is_commutative()), user_fold=user_fold)
