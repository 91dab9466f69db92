"""The shared-slots interface of a node's shared-memory level, and the ring that drives it (no MPI).

Every rank of a node owns a ring of `nslots` slots of `slot_bytes` bytes in memory all ranks of the
node can read, plus per-slot sequence flags: POSTED (this rank's data for sequence q is in the slot),
FOLDED (its folded chunk for q is in the slot) and DONE (it has finished reading every slot for q).
Each segment of a node-level operation takes the next sequence number q of the node (the same on
every rank of the node: collectives start in the same order everywhere) and uses slot q % nslots.
Flags only grow, so a slot written for an earlier q can never pass for q. A rank writes its slot for
q only once every rank's DONE flag for that slot reads >= q - nslots (everyone finished the previous
use). Ordering follows the MPI shared-memory model (docs/shm.md): the writer stores data, `sync()`,
then the flag; the reader sees the flag, `sync()`, then reads; a reader `sync()`s before its DONE.

`adaptcoll.state.shm.WindowSlots` implements `SharedSlots` over an MPI shared window;
`adaptcoll.protocols.loopback_slots.FakeRegion` implements it in one process with a weak-memory model for tests.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..runtime.transport import Transport

__all__ = ["POSTED", "FOLDED", "DONE", "FLAG_KINDS", "SharedSlots", "NodeStage", "SlotRing", "slot_geometry"]

POSTED = 0
"""Flag kind: the owner's data (contribution or broadcast segment) for sequence q is in its slot."""
FOLDED = 1
"""Flag kind: the owner's folded chunk for sequence q is in its slot."""
DONE = 2
"""Flag kind: the owner has finished every read (of any rank's slot) for sequence q."""
FLAG_KINDS = 3
_ALIGN = 64


def slot_geometry(largest: int, segment: int, nslots: int, cap: int) -> tuple[int, int]:
    """(slot bytes, bytes per rank) for `largest` ranks on a node: slots of `segment` bytes (whole
    64-byte lines), shrunk until the node's window fits in `cap` bytes; (0, 0) if even 64-byte
    slots do not fit."""
    flag_bytes = -(-FLAG_KINDS * nslots * 8 // _ALIGN) * _ALIGN
    slot = max(_ALIGN, segment // _ALIGN * _ALIGN)
    per_rank = _ALIGN + flag_bytes + nslots * slot  # + alignment slack
    if largest * per_rank > cap:
        slot = (cap // largest - _ALIGN - flag_bytes) // nslots // _ALIGN * _ALIGN
        if slot < _ALIGN:
            return 0, 0
        per_rank = _ALIGN + flag_bytes + nslots * slot
    return slot, per_rank


class SharedSlots(Protocol):
    """One rank's view of its node's slot rings (see the module docstring).

    `slot(rank, k)` is a 1-D uint8 array of `slot_bytes`: this rank writes only its own slots and reads
    the others'. `flag(rank, kind, k)` reads a flag (0 before first use); `set_flag(kind, k, value)`
    stores one of this rank's own flags. `sync()` is the memory barrier of the model (MPI_Win_sync).
    """

    rank: int
    size: int
    nslots: int
    slot_bytes: int

    def slot(self, rank: int, k: int) -> Any:
        """Slot k of `rank` as a uint8 array (writable only for this rank's own slots)."""

    def flag(self, rank: int, kind: int, k: int) -> int:
        """The current value of `rank`'s flag `kind` of slot k."""

    def set_flag(self, kind: int, k: int, value: int) -> None:
        """Store this rank's flag `kind` of slot k (after a sync() that orders the data before it)."""

    def sync(self) -> None:
        """Memory barrier: earlier loads and stores complete before later ones (MPI_Win_sync)."""


class NodeStage(Protocol):
    """A node-level protocol on one rank, driven by its SlotRing."""

    done: bool

    def ready(self) -> bool:
        """Whether advance() would make progress now (only loads flags: it runs on every engine sweep)."""

    def advance(self) -> None:
        """Make every step that can be made now (copies, folds, flag stores, completion callbacks)."""


class SlotRing:
    """The node's slot ring on one rank: hands out sequence numbers and drives the node stages.

    One engine watch per ring, not per operation: its poll asks the running stages (oldest first)
    whether a step is possible, its callback advances them and re-arms while any is left. Waiting
    is therefore event-driven like a request: an idle sweep just reads a few flags, then the engine
    yields the CPU.
    """

    __slots__ = ("slots", "_transport", "_next", "_active", "_armed", "_ready", "_advance")

    def __init__(self, slots: SharedSlots, transport: Transport) -> None:
        self.slots = slots
        self._transport = transport
        self._next = 1  # flags start at 0, so sequence 0 is never used
        self._active: list[NodeStage] = []
        self._armed = False
        self._ready = self._any_ready
        self._advance = self._advance_all

    def take(self, count: int) -> int:
        """The first of `count` consecutive sequence numbers for one operation's node stage(s)."""
        first = self._next
        self._next += count
        return first

    @property
    def next_sequence(self) -> int:
        """The sequence number the next operation will start at (the same on every rank of a node)."""
        return self._next

    @property
    def active(self) -> int:
        """Node stages still running on this rank."""
        return len(self._active)

    def start(self, stage: NodeStage) -> None:
        """Drive `stage` from now on: make its first steps at once if it can (no sweep's delay), then
        let the engine poll it."""
        if not stage.done and stage.ready():
            stage.advance()
        if stage.done:
            return
        self._active.append(stage)
        self.kick()

    def kick(self) -> None:
        """Make sure the engine polls this ring (after a stage became able to move, e.g. a gate opened)."""
        if not self._armed and self._active:
            self._armed = True
            self._transport.watch(self._ready, self._advance)

    def _any_ready(self) -> bool:
        for stage in self._active:  # noqa: SIM110 - polled every sweep: no generator
            if stage.ready():
                return True
        return False

    def _advance_all(self) -> None:
        self._armed = False
        try:
            for stage in list(self._active):
                if not stage.done:
                    stage.advance()
        finally:
            self._active = [s for s in self._active if not s.done]
            self.kick()
