"""Drop-in plumbing: adaptcoll versions of COMM_WORLD/COMM_SELF (every communicator derived from them
is an adaptcoll one too, see `adaptcoll.comm.adopt`), and `install()`/`uninstall()`, which swap them
into mpi4py.MPI for unchanged programs.

(Named `dropin`, not `install`: a submodule called `install` would shadow the function
`adaptcoll.install` as soon as anything imported the submodule.)
"""

from __future__ import annotations

import copyreg
import threading
from typing import Any, Optional

from mpi4py import MPI

from .comm import PREDEFINED_NAMES, Intracomm, plain_predefined, predefined

__all__ = [
    "world",
    "self_comm",
    "install",
    "uninstall",
    "installed",
]


_lock = threading.Lock()
_saved: Optional[tuple[Any, Any]] = None


def world() -> Intracomm:
    """The adaptcoll COMM_WORLD (one object per process, shared by adaptcoll.MPI and install())."""
    return predefined("COMM_WORLD")


def self_comm() -> Intracomm:
    """The adaptcoll COMM_SELF (one object per process)."""
    return predefined("COMM_SELF")


def _reduce_plain_intracomm(comm: MPI.Intracomm) -> Any:
    """Pickle mpi4py's own COMM_WORLD / COMM_SELF while installed. mpi4py pickles a constant by name,
    as `mpi4py.MPI.COMM_WORLD`, and pickle refuses when that attribute (now adaptcoll's object) is not
    the constant itself; this reduces it to a lookup of mpi4py's object instead (used by, e.g., pickling
    `MPI.Intracomm(MPI.COMM_WORLD)`). Every other communicator reduces as mpi4py reduces it."""
    for name in PREDEFINED_NAMES:
        if comm is plain_predefined(name):
            return (plain_predefined, (name,))
    return MPI.Intracomm.__reduce__(comm)


def install() -> None:
    """Make mpi4py.MPI.COMM_WORLD and COMM_SELF adaptcoll communicators (and so everything derived
    from them); code that reads `MPI.COMM_WORLD` afterwards gets adaptcoll's. Idempotent."""
    global _saved
    with _lock:
        if _saved is not None:
            return
        plain = (MPI.COMM_WORLD, MPI.COMM_SELF)
    wrapped = (world(), self_comm())
    with _lock:
        if _saved is None:
            _saved = plain
            MPI.COMM_WORLD, MPI.COMM_SELF = wrapped  # type: ignore[misc]  # the point of install()
            copyreg.pickle(MPI.Intracomm, _reduce_plain_intracomm)


def uninstall() -> None:
    """Put mpi4py's own COMM_WORLD and COMM_SELF back. Communicators already derived from the
    adaptcoll ones stay adaptcoll communicators. Idempotent."""
    global _saved
    with _lock:
        if _saved is None:
            return
        MPI.COMM_WORLD, MPI.COMM_SELF = _saved  # type: ignore[misc]
        _saved = None
        if copyreg.dispatch_table.get(MPI.Intracomm) is _reduce_plain_intracomm:
            del copyreg.dispatch_table[MPI.Intracomm]


def installed() -> bool:
    """Whether install() is in effect."""
    return _saved is not None
