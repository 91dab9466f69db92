"""The layouts of the last few gradient sets (Horovod's response cache, locally): a training loop
reduces the same arrays every step, so `Allreduce_multi` keeps, per set of arrays (by identity), the
checked arguments, the layout and the packing datatypes, and on the next call with the same arrays
only re-checks their dtypes. An entry holds references to its arrays (which also keeps
NumPy from resizing them in place); at most `MAX_ENTRIES` are kept."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from operator import attrgetter
from typing import Any, Optional

from .args import Group
from .layout import Unit
from .packing import HostPacker

__all__ = ["Entry", "lookup", "store", "clear", "MAX_ENTRIES"]

MAX_ENTRIES = 4
_DTYPE = attrgetter("dtype")


def _dtypes(arrays: Sequence[Any]) -> list[Any]:
    """The dtypes of the host arrays among `arrays` (their addresses and sizes cannot change while the
    entry holds them: NumPy refuses to resize a referenced array and `data` is read-only; a dtype can
    be reassigned in place)."""
    return list(map(_DTYPE, arrays))


class Entry:
    """A checked group, its layout and, per packed unit, its packers (source, destination)."""

    __slots__ = ("group", "units", "packers", "of_array", "_hosts", "_dtypes", "busy", "evicted")

    def __init__(self, group: Group, units: list[Unit], packers: list[Optional[tuple[HostPacker, HostPacker]]]) -> None:
        self.group = group
        self.units = units
        self.packers = packers
        self.of_array = [0] * len(group)
        """the index of the unit carrying each array"""
        for k, u in enumerate(units):
            for i in u.arrays:
                self.of_array[i] = k
        hosts = [a for a, p in zip(group.recvs, group.packable) if p]
        hosts += [a for a, p, ip in zip(group.sends, group.packable, group.in_place) if p and not ip]
        self._hosts = hosts
        self._dtypes = _dtypes(hosts)
        self.busy = 1  # the creator's hold: released once it has started its operations
        self.evicted = False

    def still_valid(self) -> bool:
        """The host arrays have the dtypes they had when the entry was made."""
        return _dtypes(self._hosts) == self._dtypes

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


def lookup(key: Hashable) -> Optional[Entry]:
    """The entry for `key` if its arrays are unchanged (a changed one is dropped), held for the caller
    (`release()` it once its operations are started)."""
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            return None
        if not entry.still_valid():
            del _entries[key]
            _evict(entry)
            return None
        _entries.move_to_end(key)
        entry.busy += 1
        return entry


def store(key: Optional[Hashable], entry: Entry) -> None:
    """Keep `entry` (None: do not keep it, its packers are freed once released), dropping the least
    recently used beyond MAX_ENTRIES."""
    if key is None:
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
