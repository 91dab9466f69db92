"""Reading the arguments of a grouped Allreduce: which arrays, in place or not, and their errors.

Errors have mpi4py's kinds: TypeError for what is not a list of buffers or not an op, ValueError for
lengths, sizes or dtypes that do not match, BufferError for non-contiguous or read-only arrays. Those
that leave no buffer to take part with (not a list, lists of different lengths, a None entry, a bad
op) are raised before anything is sent; for a bad array this rank takes part with a copy in its
place (so no other rank waits for it) and raises once the call is done, like the single-buffer calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from .devpack import device_pair, is_device

__all__ = ["NAME", "Group", "parse_group"]

NAME = "Allreduce_multi"
_IN_PLACE = MPI.IN_PLACE


@dataclass(frozen=True)
class Group:
    """A grouped call's arrays: array i reduces `sends[i]` (the receive array itself when in place)
    into `recvs[i]`; `packable[i]`: a host NumPy array, or a device array (`on_device[i]`), which may
    be packed with others of its dtype and memory."""

    sends: tuple[Any, ...]
    recvs: tuple[Any, ...]
    in_place: tuple[bool, ...]
    packable: tuple[bool, ...]
    nbytes: tuple[int, ...]
    """bytes of each packable array (0 for the others)"""
    kinds: tuple[str, ...]
    """dtype of each packable array ("" for the others)"""
    error: Optional[BaseException] = None
    """an error of this rank's own arrays, raised once the call is done (stand-ins took their place)"""
    on_device: tuple[bool, ...] = ()
    """whether each packable array is device memory (empty: none is)"""

    def __len__(self) -> int:
        return len(self.recvs)


def _sequence(value: Any, what: str) -> Sequence[Any]:
    if isinstance(value, (list, tuple)):
        return value
    raise TypeError(f"{NAME}: {what} must be a list or tuple of arrays, got {type(value).__name__}")


def _stand_in(a: Any, what: str, writable: bool) -> tuple[Any, Optional[BaseException]]:
    """The buffer this rank takes part with, and the error to raise once the others have their data
    (None: `a` itself, fine). A non-contiguous or read-only array is replaced by a contiguous copy."""
    if isinstance(a, np.ndarray):
        if not (a.flags.c_contiguous or a.flags.f_contiguous):
            return np.array(a, order="C"), BufferError(f"{NAME}: {what} is not contiguous")
        if writable and not a.flags.writeable:
            return a.copy(), BufferError(f"{NAME}: {what} is read-only")
        return a, None
    if a is None or a is _IN_PLACE:
        raise TypeError(f"{NAME}: {what} is {'None' if a is None else 'MPI.IN_PLACE'}, not a buffer")
    return a, None  # device arrays and other buffer specifications: decided and checked one by one


def _mismatch(s: Any, r: Any, i: int) -> Optional[BaseException]:
    if _host(s) and _host(r):
        if s.dtype != r.dtype:
            return ValueError(f"{NAME}: sendbufs[{i}] is {s.dtype} but recvbufs[{i}] is {r.dtype}")
        if s.size != r.size:
            return ValueError(f"{NAME}: sendbufs[{i}] has {s.size} elements but recvbufs[{i}] has {r.size}")
    return None


def _host(a: Any) -> bool:
    """Whether `a` is a host NumPy array (a CuPy stand-in may subclass ndarray: it is not)."""
    return type(a) is np.ndarray or (isinstance(a, np.ndarray) and not is_device(a))


def _fast_in_place(arrays: Sequence[Any], name: str) -> Group:
    """In place on host NumPy arrays only: one tight loop (the common training-loop call)."""
    nd = np.ndarray
    nbytes, kinds = [], []
    for a in arrays:
        if type(a) is not nd:
            return _general(arrays, arrays, True, name)
        f = a.flags
        if not (f.contiguous or f.f_contiguous) or not f.writeable:
            return _general(arrays, arrays, True, name)
        nbytes.append(a.nbytes)
        kinds.append(a.dtype.str)
    t = tuple(arrays)
    n = len(t)
    return Group(t, t, (True,) * n, (True,) * n, tuple(nbytes), tuple(kinds))


def _general(sends: Sequence[Any], recvs: Sequence[Any], all_in_place: bool, name: str) -> Group:
    """Any mix of arrays and forms; this rank's own bad arrays are replaced by stand-ins (`Group.error`)."""
    out_sends, out_recvs, in_place, packable, nbytes, kinds, on_device = [], [], [], [], [], [], []
    first: Optional[BaseException] = None
    for i, (s, r) in enumerate(zip(sends, recvs)):
        r2, error = _stand_in(r, f"{name if all_in_place else 'recvbufs'}[{i}]", True)
        first = first or error
        if all_in_place or s is _IN_PLACE or s is r:
            s2, own = r2, True
        else:
            s2, error = _stand_in(s, f"sendbufs[{i}]", False)
            first = first or error
            error = _mismatch(s2, r2, i)
            if error is not None:  # zeros take part, into a scratch receive: recvbufs[i] stays untouched
                first = first or error
                s2 = np.zeros(r2.shape, r2.dtype)
                r2 = np.zeros(r2.shape, r2.dtype)
            own = s2 is r2
        host = _host(r2) and _host(s2)
        what_r = f"{name if all_in_place else 'recvbufs'}[{i}]"
        device = None if host else device_pair(s2, r2, own, f"sendbufs[{i}]", what_r, NAME)
        if device is not None:
            s2, r2, n, kind, error = device
            first = first or error
            own = own and s2 is r2
        out_sends.append(s2)
        out_recvs.append(r2)
        in_place.append(own)
        packable.append(host or device is not None)
        on_device.append(device is not None)
        if device is not None:
            nbytes.append(n)
            kinds.append(kind)
        else:
            nbytes.append(r2.nbytes if host else 0)
            kinds.append(r2.dtype.str if host else "")
    return Group(
        tuple(out_sends),
        tuple(out_recvs),
        tuple(in_place),
        tuple(packable),
        tuple(nbytes),
        tuple(kinds),
        first,
        tuple(on_device) if any(on_device) else (),
    )


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
