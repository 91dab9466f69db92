"""adaptcoll: event-driven, segmented, noise-tolerant MPI collectives (ADAPT style) for mpi4py.

`adaptcoll.Intracomm(comm)` wraps an mpi4py communicator (sharing its handle) so that Bcast, Reduce,
Allreduce and their nonblocking forms run adaptcoll's tree protocols; everything else is mpi4py's.
"""

from __future__ import annotations

from . import settings as _settings

_settings.load_environ()

from .comm import Intracomm  # noqa: E402
from .counters import format_table as stats_table  # noqa: E402
from .counters import reset_stats, stats  # noqa: E402
from .engine import MessageSizeError  # noqa: E402
from .requests import Request  # noqa: E402
from .settings import configure, configured  # noqa: E402
from .settings import current as current_settings  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Intracomm",
    "Request",
    "MessageSizeError",
    "stats",
    "stats_table",
    "reset_stats",
    "configure",
    "configured",
    "current_settings",
]
