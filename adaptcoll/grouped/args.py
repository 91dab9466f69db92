"""Reading the arguments of a grouped Allreduce: which arrays, in place or not, and their errors.

Errors are raised before anything is sent, with the same type and message on every rank that passes
the same arguments (mpi4py's kinds: TypeError for what is not a sequence of buffers or not an op,
ValueError for lengths, sizes or dtypes that do not match, BufferError for non-contiguous or
read-only arrays).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = ["NAME", "Group", "parse_group"]

NAME = "Allreduce_multi"
_IN_PLACE = MPI.IN_PLACE


@dataclass(frozen=True)
class Group:
    """A grouped call's arrays: array i reduces `sends[i]` (the receive array itself when in place)
    into `recvs[i]`; `packable[i]`: a host NumPy array, which may be packed with others."""

    sends: tuple[Any, ...]
    recvs: tuple[Any, ...]
    in_place: tuple[bool, ...]
    packable: tuple[bool, ...]
    nbytes: tuple[int, ...]
    """bytes of each packable array (0 for the others)"""
    kinds: tuple[str, ...]
    """dtype of each packable array ("" for the others)"""

    def __len__(self) -> int:
        return len(self.recvs)


def _sequence(value: Any, what: str) -> Sequence[Any]:
    if isinstance(value, (list, tuple)):
        return value
    raise TypeError(f"{NAME}: {what} must be a list or tuple of arrays, got {type(value).__name__}")


def _check_array(a: Any, what: str, writable: bool) -> bool:
    """Checks one buffer; True if it is a host NumPy array (packable)."""
    if isinstance(a, np.ndarray):
        if not (a.flags.c_contiguous or a.flags.f_contiguous):
            raise BufferError(f"{NAME}: {what} is not contiguous")
        if writable and not a.flags.writeable:
            raise BufferError(f"{NAME}: {what} is read-only")
        return True
    if a is None or a is _IN_PLACE:
        raise TypeError(f"{NAME}: {what} is {'None' if a is None else 'MPI.IN_PLACE'}, not a buffer")
    return False  # device arrays and other buffer specifications: decided and checked one by one


def _matches(s: Any, r: Any, i: int) -> None:
    if isinstance(s, np.ndarray) and isinstance(r, np.ndarray):
        if s.dtype != r.dtype:
            raise ValueError(f"{NAME}: sendbufs[{i}] is {s.dtype} but recvbufs[{i}] is {r.dtype}")
        if s.size != r.size:
            raise ValueError(f"{NAME}: sendbufs[{i}] has {s.size} elements but recvbufs[{i}] has {r.size}")


def _fast_in_place(arrays: Sequence[Any], name: str) -> Group:
    """In place on host NumPy arrays only: one tight loop (the common training-loop call)."""
    nd = np.ndarray
    nbytes, kinds = [], []
    for i, a in enumerate(arrays):
        if type(a) is not nd:
            return _general(arrays, arrays, True, name)
        f = a.flags
        if not (f.contiguous or f.f_contiguous) or not f.writeable:
            _check_array(a, f"{name}[{i}]", True)
        nbytes.append(a.nbytes)
        kinds.append(a.dtype.str)
    t = tuple(arrays)
    n = len(t)
    return Group(t, t, (True,) * n, (True,) * n, tuple(nbytes), tuple(kinds))


def _general(sends: Sequence[Any], recvs: Sequence[Any], all_in_place: bool, name: str) -> Group:
    out_sends, in_place, packable, nbytes, kinds = [], [], [], [], []
    for i, (s, r) in enumerate(zip(sends, recvs)):
        host_r = _check_array(r, f"{name if all_in_place else 'recvbufs'}[{i}]", True)
        if all_in_place or s is _IN_PLACE or s is r:
            out_sends.append(r)
            in_place.append(True)
            packable.append(host_r)
        else:
            host_s = _check_array(s, f"sendbufs[{i}]", False)
            _matches(s, r, i)
            out_sends.append(s)
            in_place.append(False)
            packable.append(host_r and host_s)
        nbytes.append(r.nbytes if packable[-1] else 0)
        kinds.append(r.dtype.str if packable[-1] else "")
    return Group(tuple(out_sends), tuple(recvs), tuple(in_place), tuple(packable), tuple(nbytes), tuple(kinds))


def _fast(sends: Sequence[Any], recvs: Sequence[Any]) -> Group:
    """Not in place, host NumPy arrays only: one tight loop."""
    nd = np.ndarray
    nbytes, kinds = [], []
    for s, r in zip(sends, recvs):
        if type(s) is not nd or type(r) is not nd or s is r:
            return _general(sends, recvs, False, "recvbufs")
        fr, fs = r.flags, s.flags
        dt = r.dtype
        if (
            not (fr.contiguous or fr.f_contiguous)
            or not fr.writeable
            or not (fs.contiguous or fs.f_contiguous)
            or s.dtype != dt
            or s.size != r.size
        ):
            return _general(sends, recvs, False, "recvbufs")
        nbytes.append(r.nbytes)
        kinds.append(dt.str)
    n = len(recvs)
    return Group(tuple(sends), tuple(recvs), (False,) * n, (True,) * n, tuple(nbytes), tuple(kinds))


def parse_group(sendbufs: Any, recvbufs: Any, op: Any) -> Group:
    """The arrays of `Allreduce_multi(sendbufs, recvbufs, op)`: `recvbufs=None` or
    `sendbufs=MPI.IN_PLACE` reduce in place (in `sendbufs`, resp. `recvbufs`); an entry
    `sendbufs[i]` that is `MPI.IN_PLACE` or `recvbufs[i]` itself reduces that array in place."""
    if not isinstance(op, MPI.Op):
        raise TypeError(f"Argument 'op' has incorrect type (expected mpi4py.MPI.Op, got {type(op).__name__})")
    if recvbufs is None or sendbufs is _IN_PLACE:
        name = "sendbufs" if recvbufs is None else "recvbufs"
        return _fast_in_place(_sequence(sendbufs if recvbufs is None else recvbufs, name), name)
    sends, recvs = _sequence(sendbufs, "sendbufs"), _sequence(recvbufs, "recvbufs")
    if len(sends) != len(recvs):
        raise ValueError(f"{NAME}: {len(sends)} sendbufs but {len(recvs)} recvbufs")
    return _fast(sends, recvs)
