"""`adaptcoll.Intracomm`: an mpi4py Intracomm (same handle, as in mpi4py.util.pkl5) whose Bcast, Reduce,
Allreduce, their nonblocking, persistent and pickle-based forms run adaptcoll's protocols; every other
method is mpi4py's own. Each method is one call into the module that does the work
(`collectives`, `persistent`, `pickled`), which asks `decide` whether to serve the call or hand it,
unchanged, to native MPI (counted in `adaptcoll.stats()`).

Communicators derived from an adaptcoll communicator (Split, Create, Create_cart, ...) are adaptcoll
communicators too: `adopt` wraps them, with the Cartcomm/Graphcomm/Distgraphcomm flavours defined here.

Like mpi4py.util.pkl5, the nonblocking and persistent forms return adaptcoll's own request types (MPI
cannot progress adaptcoll operations), hence the `override` type-checker exemptions on those methods.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Optional

from mpi4py import MPI

from .forms import blocks as block_collectives
from .forms import collectives, grouped, persistent, pickled
from .forms.persistent import Prequest
from .forms.requests import Request
from .runtime import fastcalls
from .state.comm_state import release_state

__all__ = [
    "Intracomm",
    "Cartcomm",
    "Graphcomm",
    "Distgraphcomm",
    "adopt",
    "predefined",
    "plain_predefined",
    "PREDEFINED_NAMES",
]

PREDEFINED_NAMES = ("COMM_WORLD", "COMM_SELF")
# mpi4py's own constants, captured before anything (adaptcoll.install) can replace them in mpi4py.MPI.
_PLAIN_PREDEFINED: dict[str, MPI.Intracomm] = {name: getattr(MPI, name) for name in PREDEFINED_NAMES}
_predefined: dict[str, Intracomm] = {}
_predefined_lock = threading.Lock()


class Intracomm(MPI.Intracomm):
    """An mpi4py Intracomm sharing `comm`'s handle whose Bcast/Reduce/Allreduce (and I-forms) are adaptcoll's."""

    def __new__(cls, comm: Optional[MPI.Intracomm] = None) -> Intracomm:
        return super().__new__(cls, MPI.COMM_NULL if comm is None else comm)

    # -- adaptcoll's COMM_WORLD / COMM_SELF are constants, as mpi4py's are -----------------------
    def free(self) -> None:
        """mpi4py semantics: a no-op on the predefined COMM_WORLD / COMM_SELF objects (mpi4py 4's
        `free()` leaves constants alone); any other communicator is freed and becomes null."""
        if _predefined_name(self) is None:
            release_state(self)
            super().free()

    # -- freeing: adaptcoll's state first, here, where MPI calls are safe ------------------------
    def Free(self) -> None:
        """MPI_Comm_free, after freeing adaptcoll's state of this communicator (its private duplicate
        and node level; adaptcoll.state.comm_state.release_state)."""
        release_state(self)
        super().Free()

    def Disconnect(self) -> None:
        """MPI_Comm_disconnect, after freeing adaptcoll's state of this communicator (as Free)."""
        release_state(self)
        super().Disconnect()

    def __reduce__(self) -> Any:
        """Pickle the predefined objects by name (unpickled, they are this process's objects again), as
        mpi4py pickles its constants; other communicators pickle as mpi4py's do."""
        name = _predefined_name(self)
        if name is not None:
            return (predefined, (name,))
        return super().__reduce__()

    @classmethod
    def fromhandle(cls, handle: int) -> MPI.Intracomm:
        """mpi4py's `fromhandle`, giving an adaptcoll communicator (mpi4py's returns its own class)."""
        return adopt(MPI.Comm.fromhandle(handle))

    @classmethod
    def f2py(cls, arg: int) -> MPI.Intracomm:
        """mpi4py's `f2py`, giving an adaptcoll communicator (mpi4py's returns its own class)."""
        return adopt(MPI.Comm.f2py(arg))

    # -- buffer collectives ----------------------------------------------------------------------
    # Bcast, Reduce and Allreduce and their I-forms are the module functions themselves, not methods
    # calling them: a call that goes native then costs only their small-message check (see
    # adaptcoll.forms.collectives). The I-forms return an adaptcoll Request (which keeps the buffers alive).
    Bcast = collectives.bcast
    Reduce = collectives.reduce
    Allreduce = collectives.allreduce
    Ibcast = collectives.ibcast  # type: ignore[assignment]
    Ireduce = collectives.ireduce  # type: ignore[assignment]
    Iallreduce = collectives.iallreduce  # type: ignore[assignment]

    # Allgather and Reduce-scatter: the ring (adaptcoll.forms.blocks), same signatures as mpi4py's
    Allgather = block_collectives.allgather
    Reduce_scatter_block = block_collectives.reduce_scatter_block
    Reduce_scatter = block_collectives.reduce_scatter

    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:  # type: ignore[override]
        """Nonblocking allgather; returns an adaptcoll Request (which keeps the buffers alive)."""
        return block_collectives.iallgather(self, sendbuf, recvbuf)

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> Request:  # type: ignore[override]
        """Nonblocking reduce-scatter of equal blocks; returns an adaptcoll Request."""
        return block_collectives.ireduce_scatter_block(self, sendbuf, recvbuf, op)

    def Ireduce_scatter(  # type: ignore[override]
        self, sendbuf: Any, recvbuf: Any, recvcounts: Optional[Sequence[int]] = None, op: MPI.Op = MPI.SUM
    ) -> Request:
        """Nonblocking reduce-scatter with recvcounts; returns an adaptcoll Request."""
        return block_collectives.ireduce_scatter(self, sendbuf, recvbuf, recvcounts, op)

    # -- persistent collectives ------------------------------------------------------------------
    def Bcast_init(self, buf: Any, root: int = 0, info: MPI.Info = MPI.INFO_NULL) -> Prequest:  # type: ignore[override]
        """Persistent broadcast: a request to Start() many times; tree, plan and buffers are set up once."""
        return persistent.bcast_init(self, buf, root, info)

    def Reduce_init(  # type: ignore[override]
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0, info: MPI.Info = MPI.INFO_NULL
    ) -> Prequest:
        """Persistent reduce (see Bcast_init)."""
        return persistent.reduce_init(self, sendbuf, recvbuf, op, root, info)

    def Allreduce_init(  # type: ignore[override]
        self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, info: MPI.Info = MPI.INFO_NULL
    ) -> Prequest:
        """Persistent allreduce (see Bcast_init)."""
        return persistent.allreduce_init(self, sendbuf, recvbuf, op, info)

    # -- grouped Allreduce over many arrays (adaptcoll's own; docs in README, "Grouped Allreduce") ------
    def Allreduce_multi(self, sendbufs: Any, recvbufs: Any = None, op: MPI.Op = MPI.SUM) -> None:
        """Allreduce every array of `sendbufs` into `recvbufs` (None / MPI.IN_PLACE: in place)."""
        grouped.allreduce_multi(self, sendbufs, recvbufs, op)

    def Iallreduce_multi(self, sendbufs: Any, recvbufs: Any = None, op: MPI.Op = MPI.SUM) -> grouped.MultiRequest:
        """Nonblocking Allreduce_multi: one request for the group, `.requests` one per array."""
        return grouped.iallreduce_multi(self, sendbufs, recvbufs, op)

    def Allreduce_multi_init(self, sendbufs: Any, recvbufs: Any = None, op: MPI.Op = MPI.SUM) -> grouped.MultiPrequest:
        """Persistent Allreduce_multi: layout, packing datatypes and buffers made once; Start()/Wait()."""
        return grouped.allreduce_multi_init(self, sendbufs, recvbufs, op)

    # -- pickle-based collectives ----------------------------------------------------------------
    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a Python object; large ones travel as segmented out-of-band pickle buffers."""
        return pickled.bcast(self, obj, root)

    def reduce(self, sendobj: Any, op: Any = MPI.SUM, root: int = 0) -> Any:
        """Reduce Python objects with an MPI.Op or any callable (rank order kept); None on non-roots."""
        return pickled.reduce(self, sendobj, op, root)

    def allreduce(self, sendobj: Any, op: Any = MPI.SUM) -> Any:
        """Allreduce Python objects: reduce to rank 0, then the pickled broadcast of the result."""
        return pickled.allreduce(self, sendobj, op)

    # -- derived communicators are adaptcoll communicators ---------------------------------------
    # (Dup/Clone/Idup/Dup_with_info already keep the subclass; these would return plain mpi4py ones.)
    def Split(self, color: int = 0, key: int = 0) -> MPI.Intracomm:
        """Split (mpi4py semantics); the new communicator is an adaptcoll one."""
        return adopt(super().Split(color, key))

    def Split_type(self, split_type: int, key: int = 0, info: MPI.Info = MPI.INFO_NULL) -> MPI.Intracomm:
        """Split_type (mpi4py semantics); the new communicator is an adaptcoll one."""
        return adopt(super().Split_type(split_type, key, info))

    def Create(self, group: MPI.Group) -> MPI.Intracomm:
        """Create (mpi4py semantics); the new communicator is an adaptcoll one."""
        return adopt(super().Create(group))

    def Create_group(self, group: MPI.Group, tag: int = 0) -> MPI.Intracomm:
        """Create_group (mpi4py semantics); the new communicator is an adaptcoll one."""
        return adopt(super().Create_group(group, tag))

    @classmethod
    def Create_from_group(
        cls,
        group: MPI.Group,
        stringtag: str = "org.mpi4py",
        info: MPI.Info = MPI.INFO_NULL,
        errhandler: Optional[MPI.Errhandler] = None,
    ) -> MPI.Intracomm:
        """Create_from_group (mpi4py semantics); the new communicator is an adaptcoll one."""
        return adopt(MPI.Intracomm.Create_from_group(group, stringtag, info, errhandler))

    def Create_cart(
        self, dims: Sequence[int], periods: Optional[Sequence[bool]] = None, reorder: bool = False
    ) -> MPI.Cartcomm:
        """Create_cart (mpi4py semantics); the result is an adaptcoll Cartcomm."""
        return adopt(super().Create_cart(dims, periods, reorder))

    def Create_graph(self, index: Sequence[int], edges: Sequence[int], reorder: bool = False) -> MPI.Graphcomm:
        """Create_graph (mpi4py semantics); the result is an adaptcoll Graphcomm."""
        return adopt(super().Create_graph(index, edges, reorder))

    def Create_dist_graph_adjacent(
        self,
        sources: Sequence[int],
        destinations: Sequence[int],
        sourceweights: Any = None,
        destweights: Any = None,
        info: MPI.Info = MPI.INFO_NULL,
        reorder: bool = False,
    ) -> MPI.Distgraphcomm:
        """Create_dist_graph_adjacent (mpi4py semantics); the result is an adaptcoll Distgraphcomm."""
        return adopt(
            super().Create_dist_graph_adjacent(sources, destinations, sourceweights, destweights, info, reorder)
        )

    def Create_dist_graph(
        self,
        sources: Sequence[int],
        degrees: Sequence[int],
        destinations: Sequence[int],
        weights: Any = None,
        info: MPI.Info = MPI.INFO_NULL,
        reorder: bool = False,
    ) -> MPI.Distgraphcomm:
        """Create_dist_graph (mpi4py semantics); the result is an adaptcoll Distgraphcomm."""
        return adopt(super().Create_dist_graph(sources, degrees, destinations, weights, info, reorder))


class Cartcomm(MPI.Cartcomm, Intracomm):
    """An mpi4py Cartcomm (same handle) with adaptcoll's collectives."""

    def __new__(cls, comm: Optional[MPI.Cartcomm] = None) -> Cartcomm:
        return MPI.Cartcomm.__new__(cls, MPI.COMM_NULL if comm is None else comm)

    def Sub(self, remain_dims: Any) -> MPI.Cartcomm:
        """Sub (mpi4py semantics); the result is an adaptcoll Cartcomm."""
        return adopt(super().Sub(remain_dims))


class Graphcomm(MPI.Graphcomm, Intracomm):
    """An mpi4py Graphcomm (same handle) with adaptcoll's collectives."""

    def __new__(cls, comm: Optional[MPI.Graphcomm] = None) -> Graphcomm:
        return MPI.Graphcomm.__new__(cls, MPI.COMM_NULL if comm is None else comm)


class Distgraphcomm(MPI.Distgraphcomm, Intracomm):
    """An mpi4py Distgraphcomm (same handle) with adaptcoll's collectives."""

    def __new__(cls, comm: Optional[MPI.Distgraphcomm] = None) -> Distgraphcomm:
        return MPI.Distgraphcomm.__new__(cls, MPI.COMM_NULL if comm is None else comm)


def _use_native_forms(module: Any) -> None:
    """Once the fast-call extension is loaded, Bcast, Reduce, Allreduce and their I-forms are their C forms
    (collectives.native_forms: the native path in C, every other call the Python form's). A method
    replaced before (a program's or a test's own wrapper) stays."""
    for name, form in collectives.native_forms(module).items():
        if Intracomm.__dict__.get(name) is form.__wrapped__:
            setattr(Intracomm, name, form)


fastcalls.when_loaded(_use_native_forms)


_WRAPPERS: tuple[tuple[type, type], ...] = (
    (MPI.Cartcomm, Cartcomm),
    (MPI.Graphcomm, Graphcomm),
    (MPI.Distgraphcomm, Distgraphcomm),
    (MPI.Intracomm, Intracomm),
)


def adopt(comm: Any) -> Any:
    """`comm` as an adaptcoll communicator sharing its handle; intercommunicators, COMM_NULL and
    non-communicators come back unchanged (adaptcoll serves intracommunicators only)."""
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        return comm
    for plain, wrapper in _WRAPPERS:
        if isinstance(comm, wrapper):
            return comm
        if isinstance(comm, plain):
            return wrapper(comm)
    return comm  # pragma: no cover - every Intracomm matches the last entry


def predefined(name: str) -> Intracomm:
    """The adaptcoll communicator for mpi4py's predefined `name` ("COMM_WORLD" or "COMM_SELF"): one
    object per process, which behaves as a constant (`free()` is a no-op, pickled by name)."""
    found = _predefined.get(name)
    if found is None:
        if name not in _PLAIN_PREDEFINED:
            raise ValueError(f"no predefined communicator {name!r} (expected one of {PREDEFINED_NAMES})")
        with _predefined_lock:
            found = _predefined.get(name)
            if found is None:
                found = _predefined[name] = Intracomm(_PLAIN_PREDEFINED[name])
    return found


def plain_predefined(name: str) -> MPI.Intracomm:
    """mpi4py's own predefined communicator `name` (even while adaptcoll.install() is in effect)."""
    return _PLAIN_PREDEFINED[name]


def _predefined_name(comm: Any) -> Optional[str]:
    """ "COMM_WORLD"/"COMM_SELF" when `comm` is that adaptcoll object itself, else None."""
    for name, obj in _predefined.items():
        if obj is comm:
            return name
    return None
