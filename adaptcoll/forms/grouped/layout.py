"""Which arrays of a grouped Allreduce travel alone and which are packed together (plain data, no MPI).

Every rank computes the same layout from what MPI requires to match (per-array byte counts and
dtypes, in order, and where the arrays live: host or device memory on every rank alike), so every
rank starts the same operations in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Unit", "plan_units"]


@dataclass(frozen=True)
class Unit:
    """One Allreduce of a grouped call: `arrays` (indices into the call's lists, one dtype) reduced
    alone in their own memory (`packed=False`, exactly one array) or packed into one scratch buffer
    (in device memory when `device`: device arrays are packed only with device arrays)."""

    arrays: tuple[int, ...]
    packed: bool
    kind: str = ""
    """the packed arrays' dtype (`numpy.dtype.str`)"""
    nbytes: int = 0
    """the packed arrays' bytes together"""
    device: bool = False
    """a bucket of device arrays, packed in device memory"""

    @property
    def dtype(self) -> np.dtype:
        """The packed buffer's dtype."""
        return np.dtype(self.kind)

    @property
    def count(self) -> int:
        """Elements in the packed buffer."""
        return self.nbytes // self.dtype.itemsize


def _bucket(members: list[int], key: tuple[str, bool], size: int) -> Unit:
    """A closed bucket: packed, unless it holds one array (a copy would buy nothing)."""
    if len(members) == 1:
        return Unit((members[0],), False)
    return Unit(tuple(members), True, key[0], size, key[1])


def plan_units(
    nbytes: Sequence[int],
    kinds: Sequence[str],
    pack_below: int,
    bucket_bytes: int,
    packable: Sequence[bool],
    on_device: Sequence[bool] = (),
    device_pack_below: int = 0,
    device_bucket_bytes: int = 0,
) -> list[Unit]:
    """The units of a grouped call, in the order every rank starts them.

    Array i travels alone if it is not `packable` or it is at least the pack threshold
    (`pack_below` for host arrays, `device_pack_below` for those `on_device`); otherwise it joins
    the open bucket of its kind (dtype) and memory (host or device), in call order, which closes
    once adding the next array would take it past the cap (`bucket_bytes`, resp.
    `device_bucket_bytes`; 0: no cap). A unit is emitted when its bucket closes or its lone array
    comes; open buckets follow at the end, in order of first array. A bucket of one array is that
    array alone.
    """
    units: list[Unit] = []
    open_: dict[tuple[str, bool], tuple[list[int], int]] = {}
    for i, (n, kind) in enumerate(zip(nbytes, kinds)):
        device = bool(on_device) and on_device[i]
        if not packable[i] or n >= (device_pack_below if device else pack_below):
            units.append(Unit((i,), False))
            continue
        key = (kind, device)
        cap = device_bucket_bytes if device else bucket_bytes
        members, size = open_.get(key, ([], 0))
        if members and cap > 0 and size + n > cap:
            units.append(_bucket(members, key, size))
            members, size = [], 0
        members.append(i)
        open_[key] = (members, size + n)
    rest = sorted(((m, n, k) for k, (m, n) in open_.items() if m), key=lambda mnk: mnk[0][0])
    units.extend(_bucket(members, key, size) for members, size, key in rest)
    return units
