"""An in-process shared-slots region with a weak memory model, for testing node-level protocols.

`FakeRegion(size, nslots, slot_bytes, seed)` holds the slots and flags of one node; `views[r]` is rank
r's `SharedSlots`. The model is deliberately weaker than x86 so that ordering mistakes show up:

- a rank's stores (to its own slots and flags) go to a private store buffer and become visible to
  the others only when committed: all at once by its `sync()`, or one at a time, in random order, by
  `commit_one()` (stores to one flag stay in order, as cache coherence guarantees);
- a rank reads other ranks' slots from a snapshot taken at its last `sync()`, while flag loads see
  the committed value at once.

So a flag stored without a `sync()` after its data may become visible before the data, and data read
without a `sync()` after the flag is stale: either mistake gives wrong results under some seed.
`run(world, region, done)` interleaves a `LoopbackWorld`'s completions (engine watches, messages)
with random commits and raises `Deadlock` when nothing can move.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from ..runtime.loopback import Deadlock, LoopbackWorld
from .slots import FLAG_KINDS

__all__ = ["FakeRegion", "FakeSlots", "run"]


class FakeSlots:
    """Rank `rank`'s view of a FakeRegion (implements adaptcoll.protocols.slots.SharedSlots)."""

    def __init__(self, region: FakeRegion, rank: int) -> None:
        self.region = region
        self.rank = rank
        self.size = region.size
        self.nslots = region.nslots
        self.slot_bytes = region.slot_bytes
        self._staging = region.memory[rank].copy()  # this rank's own slots, as it sees them
        self._snapshot = region.memory.copy()  # everyone's slots as of this rank's last sync
        self._snapshot.flags.writeable = False
        self._flags: list[tuple[int, int, int]] = []  # pending flag stores (kind, k, value), in program order
        self.syncs = 0

    # -- SharedSlots ---------------------------------------------------------------------------
    def slot(self, rank: int, k: int) -> Any:
        if rank == self.rank:
            return self._staging[k]
        return self._snapshot[rank, k]

    def flag(self, rank: int, kind: int, k: int) -> int:
        if rank == self.rank:
            for pk, pslot, value in reversed(self._flags):
                if pk == kind and pslot == k:
                    return value
        return int(self.region.flags[rank, kind, k])

    def set_flag(self, kind: int, k: int, value: int) -> None:
        self._flags.append((kind, k, value))

    def sync(self) -> None:
        self.syncs += 1
        self.commit_data()
        flags = self.region.flags
        for kind, k, value in self._flags:
            flags[self.rank, kind, k] = value
        self._flags.clear()
        self._snapshot = self.region.memory.copy()
        self._snapshot.flags.writeable = False

    # -- the store buffer ----------------------------------------------------------------------
    @property
    def pending(self) -> bool:
        """Whether some store of this rank is not visible to the others yet."""
        return bool(self._flags) or self._data_pending()

    def _data_pending(self) -> bool:
        return not np.array_equal(self._staging, self.region.memory[self.rank])

    def commit_data(self) -> None:
        """Make this rank's slot stores visible."""
        self.region.memory[self.rank] = self._staging

    def commit_one(self, rng: random.Random) -> None:
        """Make one pending store visible: the slot data, or one flag store (the oldest to its flag)."""
        choices: list[int] = [-1] if self._data_pending() else []
        seen: set[tuple[int, int]] = set()
        for i, (kind, k, _) in enumerate(self._flags):
            if (kind, k) not in seen:
                seen.add((kind, k))
                choices.append(i)
        if not choices:
            return
        pick = rng.choice(choices)
        if pick < 0:
            self.commit_data()
        else:
            kind, k, value = self._flags.pop(pick)
            self.region.flags[self.rank, kind, k] = value


class FakeRegion:
    """The slots and flags of one node of `size` ranks, with per-rank store buffers (module docstring)."""

    def __init__(self, size: int, nslots: int, slot_bytes: int, seed: int = 0) -> None:
        self.size = size
        self.nslots = nslots
        self.slot_bytes = slot_bytes
        self.rng = random.Random(seed)
        self.memory = np.zeros((size, nslots, slot_bytes), np.uint8)
        self.flags = np.zeros((size, FLAG_KINDS, nslots), np.int64)
        self.views = [FakeSlots(self, r) for r in range(size)]

    @property
    def pending(self) -> bool:
        """Whether any rank has stores the others cannot see yet."""
        return any(v.pending for v in self.views)

    def commit_one(self) -> bool:
        """Commit one pending store of a random rank; False if there was none."""
        busy = [v for v in self.views if v.pending]
        if not busy:
            return False
        self.rng.choice(busy).commit_one(self.rng)
        return True


def run(
    world: LoopbackWorld,
    regions: list[FakeRegion],
    done: Callable[[], bool],
    commit_chance: float = 0.3,
    max_steps: int = 2_000_000,
) -> int:
    """Interleave `world`'s completions with random commits of the regions' stores until `done()`.

    Raises Deadlock when no completion can fire and no store is left to commit (a protocol waiting
    for a flag that will never come), or after `max_steps`. Returns the number of steps.
    """
    rng = world.rng
    steps = idle = 0
    while not done():
        steps += 1
        if steps > max_steps:
            raise Deadlock("step limit reached: " + world.describe())
        busy = [r for r in regions if r.pending]
        if busy and rng.random() < commit_chance:
            rng.choice(busy).commit_one()
        elif world.step():
            idle = 0
        elif busy:
            rng.choice(busy).commit_one()
        else:
            idle += 1  # deferred folds may need more polls
            if idle > 1000:
                raise Deadlock("no completion can fire and no store is pending: " + world.describe())
    return steps
