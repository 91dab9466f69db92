"""adaptcoll: event-driven, segmented, noise-tolerant MPI collectives (ADAPT style) for mpi4py.

`adaptcoll.Intracomm(comm)` wraps an mpi4py communicator (sharing its handle) so that Bcast, Reduce,
Allreduce and their nonblocking forms run adaptcoll's tree protocols; everything else is mpi4py's.
Importing the package does not import MPI: the MPI-facing names load on first use, so tools such as
`python -m adaptcoll.trees` and `python -m adaptcoll.noise` work outside an MPI job.
"""

from __future__ import annotations

import importlib
from typing import Any

from .runtime import settings as _settings
from .runtime.counters import format_table as stats_table
from .runtime.counters import reset_stats, stats
from .runtime.settings import configure, configured
from .runtime.settings import current as current_settings

_settings.load_environ()

__version__ = "0.1.0"

_LAZY = {
    "Intracomm": ("comm", "Intracomm"),
    "Request": ("forms.requests", "Request"),
    "MessageSizeError": ("runtime.engine", "MessageSizeError"),
    "CollectiveError": ("runtime.engine", "CollectiveError"),
    "ConcurrentCollectiveError": ("forms.threads", "ConcurrentCollectiveError"),
    "Prequest": ("forms.persistent", "Prequest"),
    "install": ("dropin", "install"),
    "uninstall": ("dropin", "uninstall"),
}

__all__ = [
    "Intracomm",
    "Request",
    "MessageSizeError",
    "CollectiveError",
    "ConcurrentCollectiveError",
    "Prequest",
    "install",
    "uninstall",
    "stats",
    "stats_table",
    "reset_stats",
    "configure",
    "configured",
    "current_settings",
]


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'adaptcoll' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{found[0]}", __name__), found[1])
    globals()[name] = value
    return value
