"""The decision layer's entry into tuning: `choose(comm, collective, nbytes, on_device)` returns the
`CallConfig` a call uses, and `comm_tuning(comm)` the communicator's tuning, set up collectively on
its first collective call (CommState's private duplicate + the table exchange).

The small-message fast path (adaptcoll.forms.collectives) reads `comm._adaptcoll_below[collective]` (and, for
CuPy arrays, `comm._adaptcoll_device_below[collective]`): the communicator's thresholds, set on the
Python communicator object here once its tuning is known and kept in step with the settings; before
that it finds `UNKNOWN` (every threshold 0), so the first call on a communicator takes the full path on
every rank, which sets the communicator up collectively.
"""

from __future__ import annotations

from mpi4py import MPI

from ..runtime import fastcalls, settings
from ..state.comm_state import comm_state
from .config import CallConfig
from .exchange import mpi_library
from .policy import CommFacts, CommTuning, resolve

__all__ = [
    "UNKNOWN",
    "BELOW_ATTR",
    "NB_BELOW_ATTR",
    "DEVICE_BELOW_ATTR",
    "NB_DEVICE_BELOW_ATTR",
    "TUNING_ATTR",
    "comm_tuning",
    "choose",
    "explicitly_native",
    "provisional",
]

BELOW_ATTR = "_adaptcoll_below"
"""Attribute of an adaptcoll communicator object: its per-collective fast-path thresholds."""
NB_BELOW_ATTR = "_adaptcoll_nb_below"
"""Attribute of an adaptcoll communicator object: the nonblocking forms' fast-path thresholds. Set by
the first nonblocking call to the provisional tuning's (which is what those calls decide with until the
first blocking call sets the communicator's tuning up), then to the tuning's. Without it a communicator
that only sees nonblocking calls took the full decision for every small call: an 8-byte Iallreduce +
Wait 66 us against mpi4py's 8 at 2 ranks."""
DEVICE_BELOW_ATTR = "_adaptcoll_device_below"
"""Attribute of an adaptcoll communicator object: its per-collective thresholds for small device arrays
(CommTuning.device_below; the fast path of adaptcoll.device.small)."""
NB_DEVICE_BELOW_ATTR = "_adaptcoll_nb_device_below"
"""As NB_BELOW_ATTR, for small device arrays in the nonblocking forms."""
TUNING_ATTR = "_adaptcoll_tuning"
"""Attribute of an adaptcoll communicator object: its tuning, once set up (adaptcoll.decision.cache checks it)."""

UNKNOWN: dict[str, int] = {c: 0 for c in settings.COLLECTIVES}
"""The thresholds of a communicator whose tuning is not known yet (the fast path never fires)."""


def comm_tuning(comm: MPI.Intracomm, blocking: bool = True) -> CommTuning:
    """The communicator's tuning: set up (collectively) by the first blocking call on `comm`, local
    afterwards; before that, the provisional tuning (see `provisional`)."""
    found = getattr(comm, TUNING_ATTR, None)
    if found is None:
        known = comm_state(comm).tuning(blocking)
        found = provisional(comm.Get_size()) if known is None else known
        cached: dict[str, object] = {NB_BELOW_ATTR: found.below, NB_DEVICE_BELOW_ATTR: found.device_below}
        if known is not None:  # the fast paths of every form, from now on
            cached.update({TUNING_ATTR: found, BELOW_ATTR: found.below, DEVICE_BELOW_ATTR: found.device_below})
            fastcalls.load()  # (once per process: the native path's test in C, adaptcoll.runtime.fastcalls)
        try:
            for name, value in cached.items():
                setattr(comm, name, value)
        except AttributeError:  # a plain mpi4py communicator object: no cache, the state has it
            pass
    assert isinstance(found, CommTuning)
    return found


def provisional(size: int) -> CommTuning:
    """The tuning of a communicator of `size` ranks before its first blocking call: no table, the
    shipped rule for one rank per core (the facts that need an exchange are assumed), explicit settings
    winning as always. Local and the same on every rank, so nonblocking calls decide alike without
    waiting for anyone."""
    found = _provisional.get(size)
    if found is None:
        facts = CommFacts(size, 1, size, 1.0, mpi_library())
        found = _provisional[size] = resolve(b"", "", facts, warn=False)
    return found


_provisional: dict[int, CommTuning] = {}


def choose(
    comm: MPI.Intracomm, collective: str, nbytes: int, on_device: bool = False, blocking: bool = True
) -> CallConfig:
    """The configuration for one call (see CommTuning.choose)."""
    return comm_tuning(comm, blocking).choose(collective, nbytes, on_device)


def explicitly_native(collective: str) -> bool:
    """The collective's algorithm is set to 'native' (explicit settings only: no set-up needed)."""
    return settings.current().algorithm(collective) == "native"
