"""A simulated node's shared slots: the `SharedSlots` the node-level protocols run on, with their costs.

The protocols of `adaptcoll.protocols.node` copy segments into and out of slots with `np.copyto` and
fold with the backend, exactly as over an MPI shared window. Here:

- a copy into or out of a slot costs the copying rank's CPU `shm_copy` per byte (stretched by its
  noise, like a fold): slots are `SlotArray`s (data mode) or `Span`s (sizes only), whose
  `__array_function__` charges every `np.copyto` they take part in; folds cost `fold` (the backend);
- a flag a rank stores is seen at once by itself and by the other ranks of its node `shm_flag` later;
  at that moment the watches of those ranks are polled (`World.poll`), so a waiting rank's SlotRing
  runs its callback like any completion (the engine's cost per event, `engine`), as the real engine
  polls its watches every sweep;
- memory is sequentially consistent (`sync()` costs nothing and orders nothing more): data is in the
  slot as soon as it is copied, and a reader reads it only after the flag, so the weak-memory checks
  stay with `adaptcoll.protocols.loopback_slots`.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..protocols.slots import FLAG_KINDS
from .world import World

__all__ = ["Meter", "SlotArray", "Span", "SlotRegion", "SimSlots"]


class Meter:
    """Charges shared-memory copies to the running rank's CPU (`shm_copy` seconds per byte)."""

    __slots__ = ("world", "per_byte")

    def __init__(self, world: World, per_byte: float) -> None:
        self.world = world
        self.per_byte = per_byte

    def charge(self, nbytes: int) -> None:
        """A copy of `nbytes` by the rank whose callback is running."""
        self.world._work(nbytes * self.per_byte)


class SlotArray(np.ndarray):
    """A slot's bytes in data mode (an ndarray): every `np.copyto` into or out of it is charged."""

    meter: Optional[Meter] = None

    def __array_finalize__(self, obj: Any) -> None:
        self.meter = getattr(obj, "meter", None)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func is np.copyto and self.meter is not None:
            dst = args[0] if isinstance(args[0], np.ndarray) else args[1]
            self.meter.charge(dst.nbytes)
        return super().__array_function__(func, types, args, kwargs)


class Span:
    """A 1-D array's size and type without its data (runs without data): slices, `view`, `dtype`,
    `np.copyto` (charged, nothing moves) and `np.may_share_memory` (only with itself)."""

    __slots__ = ("n", "dtype", "meter")

    def __init__(self, n: int, dtype: Any, meter: Optional[Meter]) -> None:
        self.n = n
        self.dtype = np.dtype(dtype)
        self.meter = meter

    def __len__(self) -> int:
        return self.n

    @property
    def size(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return self.n * self.dtype.itemsize

    def __getitem__(self, key: slice) -> Span:
        if not isinstance(key, slice):
            raise TypeError(f"a Span is sliced, not indexed (got {key!r})")
        return Span(len(range(*key.indices(self.n))), self.dtype, self.meter)

    def view(self, dtype: Any) -> Span:
        new = np.dtype(dtype)
        nbytes = self.nbytes
        if nbytes % new.itemsize:
            raise ValueError(f"cannot view {nbytes} bytes as {new}")
        return Span(nbytes // new.itemsize, new, self.meter)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func is np.copyto:
            span = next(a for a in args[:2] if isinstance(a, Span))
            if span.meter is not None:
                span.meter.charge(span.nbytes)
            return None
        if func is np.may_share_memory or func is np.shares_memory:
            return args[0] is args[1]
        return NotImplemented

    def __repr__(self) -> str:
        return f"Span({self.n}, {self.dtype})"


class SlotRegion:
    """One simulated node's slots and flags: `views[i]` is the SharedSlots of its i-th rank (`ranks[i]`).

    Flags live in two flat lists indexed ((rank * FLAG_KINDS + kind) * nslots + k): what each owner
    has stored (it sees its own stores at once) and what the others see (`latency` later).
    """

    def __init__(
        self,
        world: World,
        ranks: tuple[int, ...],
        nslots: int,
        slot_bytes: int,
        meter: Meter,
        latency: float,
        data: bool,
    ) -> None:
        self.world = world
        self.ranks = ranks
        self.size = len(ranks)
        self.nslots = nslots
        self.slot_bytes = slot_bytes
        self.latency = latency
        n = self.size * FLAG_KINDS * nslots
        self.stored = [0] * n
        self.visible = [0] * n
        if data:
            memory = np.zeros((self.size, nslots, slot_bytes), np.uint8).view(SlotArray)
            memory.meter = meter
            self.slots: list[list[Any]] = [[memory[r, k] for k in range(nslots)] for r in range(self.size)]
        else:
            span = Span(slot_bytes, np.uint8, meter)
            self.slots = [[span] * nslots for _ in range(self.size)]
        self._publish_h = self._publish
        self.views = [SimSlots(self, i) for i in range(self.size)]

    def store(self, local: int, kind: int, k: int, value: int) -> None:
        """Rank `local` stores one of its flags now (inside its callback): the others see it `latency` later."""
        world = self.world
        if world.cur != self.ranks[local]:
            raise RuntimeError(f"rank {self.ranks[local]} stored a flag outside its own callbacks")
        i = (local * FLAG_KINDS + kind) * self.nslots + k
        self.stored[i] = value
        world.at(world.clock + self.latency, self._publish_h, (local, i, value))

    def _publish(self, arg: tuple[int, int, int]) -> None:
        local, i, value = arg
        if value > self.visible[i]:  # flags only grow
            self.visible[i] = value
        poll = self.world.poll
        for x, rank in enumerate(self.ranks):
            if x != local:
                poll(rank)


class SimSlots:
    """One rank's view of its node's SlotRegion (implements adaptcoll.protocols.slots.SharedSlots)."""

    __slots__ = ("rank", "size", "nslots", "slot_bytes", "_region", "_stored", "_visible", "_slots")

    def __init__(self, region: SlotRegion, rank: int) -> None:
        self.rank = rank
        self.size = region.size
        self.nslots = region.nslots
        self.slot_bytes = region.slot_bytes
        self._region = region
        self._stored = region.stored
        self._visible = region.visible
        self._slots = region.slots

    def slot(self, rank: int, k: int) -> Any:
        return self._slots[rank][k]

    def flag(self, rank: int, kind: int, k: int) -> int:
        i = (rank * FLAG_KINDS + kind) * self.nslots + k
        return self._stored[i] if rank == self.rank else self._visible[i]

    def set_flag(self, kind: int, k: int, value: int) -> None:
        self._region.store(self.rank, kind, k, value)

    def sync(self) -> None:
        """Nothing to order: the simulated memory is sequentially consistent (see the module docstring)."""
