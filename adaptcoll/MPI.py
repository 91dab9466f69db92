"""`from adaptcoll import MPI`: mpi4py.MPI, except that COMM_WORLD and COMM_SELF are adaptcoll
communicators (and so is every communicator derived from them).

Every other name is looked up on mpi4py.MPI at access time, so this is mpi4py's module in all but those
two attributes; mpi4py.MPI itself is left unchanged (see adaptcoll.install() for that).
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI as _MPI

from .dropin import self_comm as _self_comm
from .dropin import world as _world

COMM_WORLD = _world()
COMM_SELF = _self_comm()

__all__ = sorted({n for n in dir(_MPI) if not n.startswith("_")} | {"COMM_WORLD", "COMM_SELF"})


def __getattr__(name: str) -> Any:
    return getattr(_MPI, name)


def __dir__() -> list[str]:
    return sorted(set(dir(_MPI)) | set(globals()))
