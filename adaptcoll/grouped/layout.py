"""Which arrays of a grouped Allreduce travel alone and which are packed together (plain data, no MPI).

Every rank computes the same layout from what MPI requires to match (per-array byte counts and
dtypes, in order), so every rank starts the same operations in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Unit", "plan_units"]


@dataclass(frozen=True)
class Unit:
    """One Allreduce of a grouped call: `arrays` (indices into the call's lists, one dtype) reduced
    alone in their own memory (`packed=False`, exactly one array) or packed into one scratch buffer."""

    arrays: tuple[int, ...]
    packed: bool
    kind: str = ""
    """the packed arrays' dtype (`numpy.dtype.str`)"""
    nbytes: int = 0
    """the packed arrays' bytes together"""

    @property
    def dtype(self) -> np.dtype:
        """The packed buffer's dtype."""
        return np.dtype(self.kind)

    @property
    def count(self) -> int:
        """Elements in the packed buffer."""
        return self.nbytes // self.dtype.itemsize


def _bucket(members: list[int], kind: str, size: int) -> Unit:
    """A closed bucket: packed, unless it holds one array (a copy would buy nothing)."""
    if len(members) == 1:
        return Unit((members[0],), False)
    return Unit(tuple(members), True, kind, size)


def plan_units(
    nbytes: Sequence[int], kinds: Sequence[str], pack_below: int, bucket_bytes: int, packable: Sequence[bool]
) -> list[Unit]:
    """The units of a grouped call, in the order every rank starts them.

    Array i travels alone if `nbytes[i] >= pack_below` or it is not `packable` (device memory);
    otherwise it joins the open bucket of its kind (dtype), in call order, which closes once adding
    the next array would take it past `bucket_bytes` (0: no cap). A unit is emitted when its
    bucket closes or its lone array comes; open buckets follow at the end, in order of first array.
    A bucket of one array is that array alone.
    """
    units: list[Unit] = []
    open_: dict[str, tuple[list[int], int]] = {}
    for i, (n, kind) in enumerate(zip(nbytes, kinds)):
        if n >= pack_below or not packable[i]:
            units.append(Unit((i,), False))
            continue
        members, size = open_.get(kind, ([], 0))
        if members and bucket_bytes > 0 and size + n > bucket_bytes:
            units.append(_bucket(members, kind, size))
            members, size = [], 0
        members.append(i)
        open_[kind] = (members, size + n)
    rest = sorted(((m, n, k) for k, (m, n) in open_.items() if m), key=lambda mnk: mnk[0][0])
    units.extend(_bucket(members, kind, size) for members, size, kind in rest)
    return units
