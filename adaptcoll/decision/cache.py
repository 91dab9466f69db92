"""Decisions remembered per communicator and call signature, so a program that repeats a call (the
same arrays, root and op: a solver's iterations, a training loop) decides and sets up once.

A decision is a function of the call's arguments, the settings and the communicator's tuning
(adaptcoll.decision.decide), and every rank must reach the same one. An entry is therefore used only
while all of these are unchanged: the same NumPy array objects with the same dtype, shape, strides and
writeable flag, the same root and predefined op, the same `settings.current()` object and the same
tuning object (set up by the communicator's first blocking call: before it nothing is remembered).
Calls on the shared-memory node level are not remembered (whether it is set up changes over time).
`ADAPTCOLL_REMEMBER=0` (or `configure(remember=False)`) turns it off: every call decides afresh.
Entries hold the arrays (the prepared call points into them), so only arrays that own their memory
(or views of one that does) are remembered, at most `MAX_ENTRIES` calls and `MAX_BYTES` of arrays
per communicator; the oldest entry goes first. Decisions that raise are never remembered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ..runtime import fastcalls, settings
from ..runtime.native import Kind, Native
from ..state import shm
from ..tune.choose import TUNING_ATTR
from .decide import Decision, Prepared

__all__ = ["CALLS_ATTR", "MAX_ENTRIES", "MAX_BYTES", "lookup", "remember", "remembered", "op_key", "clear"]

CALLS_ATTR = "_adaptcoll_calls"
"""The attribute of an adaptcoll communicator object that holds its remembered decisions."""

MAX_ENTRIES = 16
MAX_BYTES = 64 << 20
"""At most this many bytes of the user's arrays are kept alive by one communicator's entries. (16 MiB
until 2026-12-03: a 16 MiB Bcast and any other call, or a Reduce of 2 x 16 MiB, were never both
remembered, and each call decided afresh: 240-310 us a call in a program that alternates them, the
caches emptied by the large transfer; bench/RESULTS.md "Large calls remembered".)"""

_NDARRAY = np.ndarray
_IN_PLACE = MPI.IN_PLACE
_OPS = frozenset(
    id(op) for op in (MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN, MPI.LAND, MPI.LOR, MPI.LXOR, MPI.BAND, MPI.BOR, MPI.BXOR)
)
_current = settings.current
_getattr = getattr
_FAST_UNCHANGED = fastcalls.UNCHANGED


class _Calls(dict[tuple[Any, ...], Any]):
    """key -> (arrays, their signatures, settings, tuning, decision, bytes held); `held`: bytes in all."""

    held = 0


def _signature(array: Any) -> Any:
    return (array.dtype, array.shape, array.strides, bool(array.flags.writeable))


def _owned_bytes(array: np.ndarray) -> int:
    """The bytes an entry keeps alive by holding `array`, or -1 if it must not hold it (memory owned by
    something else, e.g. an mmap or a bytearray, which holding it would keep from being closed or resized)."""
    base = array.base
    if base is None:
        return array.nbytes
    if type(base) is _NDARRAY and base.base is None:
        return base.nbytes
    return -1


def lookup(comm: Any, key: tuple[Any, ...], arrays: tuple[Any, ...]) -> Optional[Decision]:
    """The decision remembered for this call if it is still valid, else None (a stale entry is dropped).
    `key` names the call (collective, form, root, op, the ids of `arrays`, which the entry holds, so an
    id cannot have been reused); `arrays`: its buffer arguments (NumPy arrays, IN_PLACE or None)."""
    calls = _getattr(comm, CALLS_ATTR, None)
    if calls is None:
        return None
    entry = calls.get(key)
    if entry is None:
        return None
    if entry[2] is _current() and entry[3] is _getattr(comm, TUNING_ATTR, None) and _unchanged(arrays, entry[1]):
        return entry[4]
    calls.held -= entry[5]
    del calls[key]
    return None


def _unchanged(arrays: tuple[Any, ...], sigs: tuple[Any, ...]) -> bool:
    """Whether each array still has the dtype, shape, strides and writeable flag of its signature."""
    for array, sig in zip(arrays, sigs):
        if sig is not None and (
            array.dtype is not sig[0]
            or array.shape != sig[1]
            or array.strides != sig[2]
            or array.flags.writeable is not sig[3]
        ):
            return False
    return True


def remember(comm: Any, key: tuple[Any, ...], arrays: tuple[Any, ...], decision: Decision, cfg: Any) -> None:
    """Remember `decision` for `key` if it may be (see the module docstring); `cfg`: the settings object
    in force when it was made."""
    tuning = getattr(comm, TUNING_ATTR, None)
    if tuning is None or cfg is not _current() or not cfg.remember or not _may_remember(decision):
        return
    size = 0
    sigs: list[Any] = []
    for array in arrays:
        if array is None or array is _IN_PLACE:
            sigs.append(None)
            continue
        if type(array) is not _NDARRAY:
            return
        owned = _owned_bytes(array)
        if owned < 0:
            return
        size += owned
        sigs.append(_signature(array))
    if size > MAX_BYTES:
        return
    calls = getattr(comm, CALLS_ATTR, None)
    if calls is None:
        calls = _Calls()
        try:
            setattr(comm, CALLS_ATTR, calls)
        except AttributeError:  # a plain mpi4py communicator object: nothing is remembered
            return
    while calls and (len(calls) >= MAX_ENTRIES or calls.held + size > MAX_BYTES):
        calls.held -= calls.pop(next(iter(calls)))[5]
    calls[key] = (arrays, tuple(sigs), cfg, tuning, decision, size)
    calls.held += size


def remembered(
    comm: Any,
    key: tuple[Any, ...],
    arrays: tuple[Any, ...],
    decide: Callable[..., Decision],
    args: tuple[Any, ...],
    blocking: bool,
) -> Decision:
    """`lookup`, else `decide(*args, blocking=blocking)` and `remember` it. (A valid entry is taken
    here, without lookup's frame: a small repeated call's decision is one of its larger costs.)"""
    calls = _getattr(comm, CALLS_ATTR, None)
    if calls is not None:
        entry = calls.get(key)
        if entry is not None:
            fast = _FAST_UNCHANGED[0]  # (the same check in C, once the fast-call extension is loaded)
            if (
                entry[2] is _current()
                and entry[3] is _getattr(comm, TUNING_ATTR, None)
                and (_unchanged(arrays, entry[1]) if fast is None else fast(arrays, entry[1]))
            ):
                return entry[4]
            lookup(comm, key, arrays)  # drops the stale entry
    cfg = _current()
    decision = decide(*args, blocking=blocking)
    remember(comm, key, arrays, decision, cfg)
    return decision


def _may_remember(decision: Decision) -> bool:
    if isinstance(decision, Native):
        return decision.error is None and decision.kind is Kind.UNSERVED
    assert isinstance(decision, Prepared)
    if decision.error is not None or decision.run is not None or decision.native_reason is not None:
        return False
    return decision.config is not None and not shm.uses_shm(decision.config.algorithm)


def op_key(op: Any) -> Optional[int]:
    """The op's part of a key: predefined ops only (None: a user op, whose calls are not remembered)."""
    found = id(op)
    return found if found in _OPS else None


def clear(comm: Any) -> None:
    """Forget `comm`'s remembered decisions (its arrays are let go)."""
    try:
        delattr(comm, CALLS_ATTR)
    except AttributeError:
        pass
