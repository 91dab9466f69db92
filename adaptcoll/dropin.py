"""Drop-in plumbing: adaptcoll versions of COMM_WORLD/COMM_SELF (every communicator derived from them
is an adaptcoll one too, see `adaptcoll.comm.adopt`), and `install()`/`uninstall()`, which swap them
into mpi4py.MPI for unchanged programs.

(Named `dropin`, not `install`: a submodule called `install` would shadow the function
`adaptcoll.install` as soon as anything imported the submodule.)
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from mpi4py import MPI

from .comm import Intracomm

__all__ = [
    "world",
    "self_comm",
    "install",
    "uninstall",
    "installed",
]


_lock = threading.Lock()
_shared_comms: dict[str, Intracomm] = {}
_saved: Optional[tuple[Any, Any]] = None


def _plain(name: str) -> MPI.Intracomm:
    """mpi4py's own predefined communicator `name` (even while installed)."""
    if _saved is not None:
        return _saved[0] if name == "COMM_WORLD" else _saved[1]
    return getattr(MPI, name)


def _shared(name: str) -> Intracomm:
    """One adaptcoll communicator per process for mpi4py's predefined `name`."""
    found = _shared_comms.get(name)
    if found is None:
        with _lock:
            found = _shared_comms.get(name)
            if found is None:
                found = _shared_comms[name] = Intracomm(_plain(name))
    return found


def world() -> Intracomm:
    """The adaptcoll COMM_WORLD (one object per process, shared by adaptcoll.MPI and install())."""
    return _shared("COMM_WORLD")


def self_comm() -> Intracomm:
    """The adaptcoll COMM_SELF (one object per process)."""
    return _shared("COMM_SELF")


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


def uninstall() -> None:
    """Put mpi4py's own COMM_WORLD and COMM_SELF back. Communicators already derived from the
    adaptcoll ones stay adaptcoll communicators. Idempotent."""
    global _saved
    with _lock:
        if _saved is None:
            return
        MPI.COMM_WORLD, MPI.COMM_SELF = _saved  # type: ignore[misc]
        _saved = None


def installed() -> bool:
    """Whether install() is in effect."""
    return _saved is not None
