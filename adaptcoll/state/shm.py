"""The shared-memory node level over MPI: node groups, one shared window per communicator, its slots.

Set up collectively by the first *blocking* adaptcoll call on a communicator that asks for it
(`ADAPTCOLL_*_ALGORITHM=shm` or `topo:intra=shm`), because `Comm.Split_type` and
`Win.Allocate_shared` are blocking collectives and an `I`-call must never block: calls made before
that one (nonblocking or persistent) use the point-to-point trees. Every rank issues the same
collectives in the same order, so every rank reaches the same blocking call first and every rank
decides alike (docs/shm.md).

The set-up: node groups = the ranks that share memory (`Split_type(COMM_TYPE_SHARED)`), refined by
the declared ADAPTCOLL_TOPOLOGY nodes (so several "nodes" can be tested on one machine); a node
communicator per group; one `MPI.Win.Allocate_shared` window on it holding, per rank, a ring of
ADAPTCOLL_SHM_SLOTS slots of ADAPTCOLL_SHM_SEGMENT_SIZE bytes plus the slot flags, at most
ADAPTCOLL_SHM_BYTES per node (slots shrink to fit). The window stays in a `Lock_all` epoch for its
life (so `Win.Sync` orders loads and stores) and is freed with the communicator. If anything fails
on any rank (the cap, too little /dev/shm, the allocation, a separate memory model) every rank falls
back to the point-to-point trees, rank 0 warns once per process, and `stats()` counts the reason.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, Optional, cast

import numpy as np
from mpi4py import MPI

from ..plans.nodemap import NodeMap, uses_shm
from ..plans.topology import parse as parse_topology
from ..protocols.slots import FLAG_KINDS, SlotRing, slot_geometry
from ..runtime import settings
from ..runtime.engine import engine
from .comm_state import CommState

__all__ = [
    "NodeLevel",
    "WindowSlots",
    "node_level",
    "uses_shm",
    "slot_geometry",
    "live_windows",
    "NOT_SET_UP",
]

NOT_SET_UP = "shm: not set up yet (nonblocking or persistent call before the first blocking one)"
"""The note counted for calls served by the point-to-point trees before the node level exists."""

_ALIGN = 64
_SHM_DIR = "/dev/shm"
_live: dict[int, NodeLevel] = {}
_warned = False


def live_windows() -> int:
    """Shared windows this process holds now (one per communicator with a node level)."""
    return len(_live)


class WindowSlots:
    """`SharedSlots` over one rank's MPI shared window: slot arrays and flag views of every node rank."""

    def __init__(self, win: MPI.Win, rank: int, size: int, nslots: int, slot_bytes: int) -> None:
        self.rank = rank
        self.size = size
        self.nslots = nslots
        self.slot_bytes = slot_bytes
        self._slots: list[list[np.ndarray]] = []
        self._flags: list[Any] = []
        for q in range(size):
            buf, _ = win.Shared_query(q)
            raw = np.frombuffer(cast(Any, buf), np.uint8)
            start = -raw.ctypes.data % _ALIGN
            flags = raw[start : start + FLAG_KINDS * nslots * 8]
            data = start + -(-FLAG_KINDS * nslots * 8 // _ALIGN) * _ALIGN
            self._slots.append([raw[data + k * slot_bytes : data + (k + 1) * slot_bytes] for k in range(nslots)])
            self._flags.append(memoryview(cast(Any, flags)).cast("B").cast("q"))  # aligned 8-byte loads and stores
        self._own = self._flags[rank]
        self.sync: Callable[[], None] = win.Sync

    def slot(self, rank: int, k: int) -> np.ndarray:
        return self._slots[rank][k]

    def flag(self, rank: int, kind: int, k: int) -> int:
        value: int = self._flags[rank][kind * self.nslots + k]
        return value

    def set_flag(self, kind: int, k: int, value: int) -> None:
        self._own[kind * self.nslots + k] = value

    def clear(self) -> None:
        """Zero this rank's flags (before first use: window memory is not guaranteed zeroed)."""
        for i in range(len(self._own)):
            self._own[i] = 0

    def release(self) -> None:
        """Drop every view of the window (before it is freed)."""
        self._slots = []
        self._flags = []
        self._own = memoryview(b"")


class NodeLevel:
    """A communicator's shared-memory node level on this rank: node map, window, slots and ring."""

    def __init__(
        self, nodes: NodeMap, rank: int, node_comm: MPI.Intracomm, win: MPI.Win, slots: WindowSlots, ring: SlotRing
    ) -> None:
        self.nodes = nodes
        self.rank = rank
        self.local_rank = nodes.local_rank(rank)
        self.local_size = len(nodes.members(rank))
        self.node_comm = node_comm
        self.window = win
        self.slots = slots
        self.ring = ring
        self.slot_bytes = slots.slot_bytes
        self.nslots = slots.nslots
        self.templates: dict[tuple[Any, ...], Any] = {}  # per call shape, see adaptcoll.decision.node

    def free(self) -> None:
        """Finish this rank's node stages, end the epoch, free the window and the node communicator
        (collective over the node: called when the communicator is freed, which is collective)."""
        if self.window == MPI.WIN_NULL:
            return
        if self.ring.active:
            engine().wait_for(lambda: self.ring.active == 0)
        _live.pop(id(self), None)
        self.slots.release()
        if not MPI.Is_finalized():
            self.window.Unlock_all()
            self.window.Free()
            self.node_comm.Free()
        self.window = MPI.WIN_NULL

    @property
    def busy(self) -> bool:
        """Whether node stages of this rank are still running."""
        return self.window != MPI.WIN_NULL and bool(self.ring.active)

    def abandon(self) -> None:
        """Forget the window without an MPI call (its free is collective over the node, which a
        communicator freed from inside MPI's progress cannot do: see CommState.free_later); MPI_Finalize
        releases it."""
        _live.pop(id(self), None)
        self.slots.release()
        self.window = MPI.WIN_NULL

    def __repr__(self) -> str:
        return (
            f"<NodeLevel {self.nodes!r}, node rank {self.local_rank}/{self.local_size}, "
            f"{self.nslots} slots of {self.slot_bytes} B>"
        )


class _Failed:
    """Why a communicator has no node level (cached, so the set-up is tried once)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    busy = False

    def free(self) -> None:
        pass

    def abandon(self) -> None:
        pass


def precheck(node_bytes: int) -> Optional[str]:
    """Why a window of `node_bytes` on this node cannot be had before asking MPI, or None.

    A tmpfs /dev/shm smaller than the window makes the allocation succeed and the first touch of a
    page beyond its size kill the process (SIGBUS), so its free space is checked here. Tests replace
    this function to simulate a failure on one rank.
    """
    try:
        stat = os.statvfs(_SHM_DIR)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free < node_bytes:
        return f"shm: {_SHM_DIR} has {free} bytes free, the window needs {node_bytes}"
    return None


def _agree(comm: MPI.Intracomm, reason: Optional[str]) -> Optional[str]:
    """The first reason any rank of `comm` has (the same on every rank), or None if no rank has one."""
    reasons = comm.allgather(reason)
    return next((r for r in reasons if r is not None), None)


def _node_ids(dup: MPI.Intracomm, cfg: settings.Settings) -> tuple[int, ...]:
    """Per rank: its node, as the pair (declared node, shared-memory domain) numbered by lowest rank."""
    rank, size = dup.Get_rank(), dup.Get_size()
    shared = dup.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    try:
        domain = shared.allreduce(rank, op=MPI.MIN)
    finally:
        shared.Free()
    declared = 0
    if cfg.topology:
        topo = parse_topology(cfg.topology, size)
        declared = topo.levels[0][rank] if topo.levels else 0
    keys = dup.allgather((declared, domain))
    first: dict[tuple[int, int], int] = {}
    for r, key in enumerate(keys):
        first.setdefault(key, r)
    return tuple(first[key] for key in keys)


def _set_up(st: CommState) -> Any:
    """Collective over the communicator: a NodeLevel, or a _Failed with the reason (same on all ranks)."""
    cfg = settings.current()
    dup = st.dup
    assert dup is not None, "adaptcoll: the node level is set up after the communicator's Idup (node_level)"
    rank = dup.Get_rank()
    nodes = NodeMap(_node_ids(dup, cfg))
    slot_bytes, per_rank = slot_geometry(nodes.largest, cfg.shm_segment_size, cfg.shm_slots, cfg.shm_bytes)
    reason: Optional[str] = None
    if not slot_bytes:
        reason = (
            f"shm: ADAPTCOLL_SHM_BYTES={cfg.shm_bytes} cannot hold {cfg.shm_slots} slots for each of "
            f"{nodes.largest} ranks on a node"
        )
    else:
        reason = precheck(per_rank * len(nodes.members(rank)))
    reason = _agree(dup, reason)
    if reason is not None:
        return _Failed(reason)
    node_comm = MPI.Intracomm(dup.Split(nodes.ids[rank], key=rank))
    info = MPI.Info.Create()
    info.Set("alloc_shared_noncontig", "true")
    win = None
    try:
        win = MPI.Win.Allocate_shared(per_rank, 1, info=info, comm=node_comm)
        if win.Get_attr(MPI.WIN_MODEL) != MPI.WIN_UNIFIED:
            reason = "shm: the shared window has the separate memory model"
    except MPI.Exception as exc:
        reason = f"shm: MPI_Win_allocate_shared failed ({exc.Get_error_string().splitlines()[0]})"
    finally:
        info.Free()
    reason = _agree(dup, reason)
    if reason is not None:
        if _agree(node_comm, "no window" if win is None else None) is None:
            assert win is not None
            win.Free()  # every rank of this node has its window: free it together (else it is leaked)
        node_comm.Free()
        return _Failed(reason)
    assert win is not None
    win.Lock_all(MPI.MODE_NOCHECK)
    local = nodes.local_rank(rank)
    slots = WindowSlots(win, local, len(nodes.members(rank)), cfg.shm_slots, slot_bytes)
    slots.clear()
    win.Sync()
    node_comm.Barrier()  # every rank's flags are zero before any rank reads them
    level = NodeLevel(nodes, rank, node_comm, win, slots, SlotRing(slots, st.transport))
    _live[id(level)] = level
    return level


def _warn_once(st: CommState, reason: str) -> None:
    global _warned
    if not _warned and st.rank == 0:
        _warned = True
        warnings.warn(
            f"adaptcoll: no shared-memory node level ({reason}); using the point-to-point trees",
            RuntimeWarning,
            stacklevel=4,
        )


def node_level(st: CommState, blocking: bool) -> tuple[Optional[NodeLevel], Optional[str]]:
    """The communicator's node level, set up now if this call is blocking and it was never tried;
    else (None, why the point-to-point trees serve this call: counted in stats())."""
    found = st.shm
    if found is None:
        if not blocking:
            return None, NOT_SET_UP
        st.wait_ready()  # the private duplicate (its Idup) and earlier set-up steps: this call blocks anyway
        found = st.shm = _set_up(st)
        if isinstance(found, _Failed):
            _warn_once(st, found.reason)
    if isinstance(found, _Failed):
        return None, found.reason
    assert isinstance(found, NodeLevel)
    return found, None
