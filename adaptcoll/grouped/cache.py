"""The layouts of the last few gradient sets (Horovod's response cache, locally): a training loop
reduces the same arrays every step, so `Allreduce_multi` keeps, per set of arrays (by identity), the
checked arguments, the layout and the packing datatypes, and on the next call with the same arrays
only re-checks that they are alive and have their dtypes. An entry holds weak references only (a
loop that makes new arrays every step keeps no old ones alive: their entries just stop matching);
at most `MAX_ENTRIES` are kept. Groups with objects that take no weak reference are not cached."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from functools import partial
from operator import attrgetter, is_
from typing import Any, Optional

from .args import Group
from .layout import Unit
from .packing import HostPacker

__all__ = ["Entry", "lookup", "store", "clear", "MAX_ENTRIES"]

MAX_ENTRIES = 4
_DTYPE = attrgetter("dtype")
_IS_NONE = partial(is_, None)


def _dtypes(arrays: Sequence[Any]) -> list[Any]:
    """The dtypes of `arrays` (an array's address and size cannot change while it lives: `data` is
    read-only and NumPy refuses to resize an array others reference; a dtype can be reassigned)."""
    return list(map(_DTYPE, arrays))


class Entry:
    """A checked group (its arrays weakly), its layout and, per packed unit, its packers (source,
    destination)."""

    __slots__ = ("units", "packers", "of_array", "_meta", "_sends", "_recvs", "_hosts", "_dtypes", "busy", "evicted")

    def __init__(self, group: Group, units: list[Unit], packers: list[Optional[tuple[HostPacker, HostPacker]]]) -> None:
        self.units = units
        self.packers = packers
        self.of_array = [0] * len(group)
        """the index of the unit carrying each array"""
        for k, u in enumerate(units):
            for i in u.arrays:
                self.of_array[i] = k
        self._meta = (group.in_place, group.packable, group.nbytes, group.kinds)
        self._recvs: Optional[list[Any]] = None
        self._sends: list[Any] = []
        self._hosts = [i for i, p in enumerate(group.packable) if p]
        self._dtypes = _dtypes([group.recvs[i] for i in self._hosts] + [group.sends[i] for i in self._hosts])
        try:
            self._recvs = [weakref.ref(r) for r in group.recvs]
            self._sends = [r if ip else weakref.ref(s) for r, s, ip in zip(self._recvs, group.sends, group.in_place)]
        except TypeError:  # an object without weak references: the entry is never found again
            self._recvs = None
        self.busy = 1  # the creator's hold: released once it has started its operations
        self.evicted = False

    @property
    def cacheable(self) -> bool:
        """Whether every object of the group takes a weak reference."""
        return self._recvs is not None

    def group(self) -> Optional[Group]:
        """The group again if all its arrays are alive with their dtypes (None: the entry is stale)."""
        if self._recvs is None:
            return None
        recvs = [r() for r in self._recvs]
        sends = [s() for s in self._sends]
        if any(map(_IS_NONE, recvs)) or any(map(_IS_NONE, sends)):  # (`None in` would compare arrays)
            return None
        hosts = self._hosts
        if _dtypes([recvs[i] for i in hosts] + [sends[i] for i in hosts]) != self._dtypes:
            return None
        return Group(tuple(sends), tuple(recvs), *self._meta)

    def acquire(self) -> None:
        """One more operation uses the packers."""
        with _lock:
            self.busy += 1

    def release(self) -> None:
        """One operation using the packers finished: free them if the entry was evicted meanwhile."""
        with _lock:
            self.busy -= 1
            if self.evicted and self.busy == 0:
                self._free()

    def _free(self) -> None:
        for pair in self.packers:
            if pair is not None:
                src, dst = pair
                if src is not dst:
                    src.free()
                dst.free()
        self.packers = []


_entries: OrderedDict[Hashable, Entry] = OrderedDict()
_lock = threading.Lock()  # collectives on different communicators may run in several threads


def _evict(entry: Entry) -> None:
    entry.evicted = True
    if entry.busy == 0:
        entry._free()


def lookup(key: Hashable) -> Optional[tuple[Entry, Group]]:
    """The entry for `key` and its group if its arrays are alive and unchanged (a stale entry is
    dropped), held for the caller (`release()` it once its operations are started)."""
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            return None
        group = entry.group()
        if group is None:
            del _entries[key]
            _evict(entry)
            return None
        _entries.move_to_end(key)
        entry.busy += 1
        return entry, group


def store(key: Optional[Hashable], entry: Entry) -> None:
    """Keep `entry` (None: do not keep it, its packers are freed once released), dropping the least
    recently used beyond MAX_ENTRIES."""
    if key is None or not entry.cacheable:
        entry.evicted = True
        return
    with _lock:
        _entries[key] = entry
        while len(_entries) > MAX_ENTRIES:
            _, old = _entries.popitem(last=False)
            _evict(old)


def clear() -> None:
    """Drop every entry (tests; freeing arrays early)."""
    with _lock:
        while _entries:
            _, old = _entries.popitem()
            _evict(old)
