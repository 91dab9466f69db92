"""The layouts of the last few gradient sets (Horovod's response cache, locally): a training loop
reduces the same arrays every step, so `Allreduce_multi` keeps, per set of arrays (by identity), the
checked arguments, the layout and the packing datatypes, and on the next call with the same arrays
only re-checks that they are alive and have their dtypes (device arrays: their address, dtype and
size, except CuPy arrays, which cannot change them). An entry holds weak references only (a
loop that makes new arrays every step keeps no old ones alive: their entries just stop matching);
at most `MAX_ENTRIES` are kept. Groups with objects that take no weak reference are not cached."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from operator import attrgetter
from typing import Any, Optional, Union

from .args import Group
from .devpack import DevicePacker, fixed, signature
from .layout import Unit
from .packing import HostPacker

__all__ = ["Entry", "Packer", "lookup", "store", "clear", "MAX_ENTRIES"]

MAX_ENTRIES = 4
Packer = Union[HostPacker, DevicePacker]
_DTYPE = attrgetter("dtype")


def _dtypes(arrays: Sequence[Any]) -> list[Any]:
    """The dtypes of `arrays` (an array's address and size cannot change while it lives: `data` is
    read-only and NumPy refuses to resize an array others reference; a dtype can be reassigned)."""
    return list(map(_DTYPE, arrays))


class Entry:
    """A checked group (its arrays weakly), its layout and, per packed unit, its packers (source,
    destination)."""

    __slots__ = (
        "units",
        "packers",
        "of_array",
        "_meta",
        "_refs",
        "_hosts_r",
        "_hosts_s",
        "_dtypes",
        "_devs_r",
        "_devs_s",
        "stale",
        "busy",
        "evicted",
        "__weakref__",
    )

    def __init__(self, group: Group, units: list[Unit], packers: list[Optional[tuple[Packer, Packer]]]) -> None:
        self.units = units
        self.packers = packers
        self.of_array = [0] * len(group)
        """the index of the unit carrying each array"""
        for k, u in enumerate(units):
            for i in u.arrays:
                self.of_array[i] = k
        self._meta = (group.in_place, group.packable, group.nbytes, group.kinds, None, group.on_device)
        device = group.on_device or (False,) * len(group)
        self._hosts_r = [i for i, p in enumerate(group.packable) if p and not device[i]]
        self._hosts_s = [i for i in self._hosts_r if not group.in_place[i]]
        # device arrays whose address, dtype and size may change while they live (not CuPy arrays)
        self._devs_r = [i for i, d in enumerate(device) if d and not fixed(group.recvs[i])]
        self._devs_s = [i for i, d in enumerate(device) if d and not group.in_place[i] and not fixed(group.sends[i])]
        self._dtypes = self._host_dtypes(group.sends, group.recvs)
        self.stale = False
        """set when an array of the group has been freed (its id may now name another object)"""
        dead = _Stale(self)
        try:
            self._refs: list[Any] = [weakref.ref(r, dead) for r in group.recvs]
            self._refs += [weakref.ref(group.sends[i], dead) for i in range(len(group)) if not group.in_place[i]]
        except TypeError:  # an object without weak references: the entry is never found again
            self.stale = True
        self.busy = 1  # the creator's hold: released once it has started its operations
        self.evicted = False

    def _host_dtypes(self, sends: Sequence[Any], recvs: Sequence[Any]) -> list[Any]:
        found = _dtypes([recvs[i] for i in self._hosts_r]) + _dtypes([sends[i] for i in self._hosts_s])
        if self._devs_r or self._devs_s:
            found += [signature(recvs[i]) for i in self._devs_r] + [signature(sends[i]) for i in self._devs_s]
        return found

    @property
    def cacheable(self) -> bool:
        """Whether every object of the group takes a weak reference."""
        return not self.stale

    def group(self, sends: Sequence[Any], recvs: Sequence[Any]) -> Optional[Group]:
        """The group of a call with the same objects (`sends[i]`, `recvs[i]`: the call's lists, in
        place ones alike), if none of them was freed since and the arrays have their dtypes."""
        if self.stale or self._host_dtypes(sends, recvs) != self._dtypes:
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


class _Stale:
    """The weak references' callback: marks its entry stale (holding the entry weakly in turn)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: Entry) -> None:
        self._entry = weakref.ref(entry)

    def __call__(self, _ref: Any) -> None:
        entry = self._entry()
        if entry is not None:
            entry.stale = True


_entries: OrderedDict[Hashable, Entry] = OrderedDict()
_lock = threading.Lock()  # collectives on different communicators may run in several threads


def _evict(entry: Entry) -> None:
    entry.evicted = True
    if entry.busy == 0:
        entry._free()


def lookup(key: Hashable, sends: Sequence[Any], recvs: Sequence[Any]) -> Optional[tuple[Entry, Group]]:
    """The entry for `key` (the ids of the call's `sends`, `recvs`) and its group if its arrays are
    alive and unchanged (a stale entry is dropped), held for the caller (`release()` it once its
    operations are started)."""
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            return None
        group = entry.group(sends, recvs)
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
