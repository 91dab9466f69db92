"""Detect two threads calling collectives on the same communicator at the same time.

MPI forbids it (collectives on one communicator must be called in the same order on every rank, which
concurrent threads cannot promise); adaptcoll would otherwise start two set-ups or take tags in a
different order on different ranks and hang later. Every adaptcoll collective call marks its
communicator busy (by handle, so every Python object sharing the handle counts) for the duration of
the call; a second thread entering meanwhile gets a RuntimeError naming the communicator and both
collectives. Cost: one dict insert and delete per call (about 0.3 us), on the served path only.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from ..runtime import fastcalls

__all__ = ["ConcurrentCollectiveError", "enter", "leave"]


class ConcurrentCollectiveError(RuntimeError):
    """Two threads called collectives on one communicator at the same time (MPI forbids it)."""


_busy: dict[int, tuple[int, str]] = {}  # handle -> (thread ident, collective)
_get_ident = threading.get_ident


def enter(comm: Any, collective: str) -> Optional[int]:
    """Mark `comm` busy with `collective` in this thread; returns the key to pass to `leave` (None for a
    call nested in another collective of the same thread). Raises ConcurrentCollectiveError if another
    thread is inside a collective on the same communicator."""
    key = comm.handle
    mine = (_get_ident(), collective)
    held = _busy.setdefault(key, mine)
    if held is mine:
        return key
    if held[0] == mine[0]:
        return None
    _conflict(comm, collective, held)
    return None  # (not reached: _conflict raises)


def _conflict(comm: Any, collective: str, held: tuple[int, str]) -> None:
    """Raise ConcurrentCollectiveError: `collective` on `comm` while thread `held[0]` is inside `held[1]`."""
    key = comm.handle
    name = comm.Get_name() or "unnamed"
    here = threading.current_thread().name
    there = getattr(threading._active.get(held[0]), "name", f"ident {held[0]}")  # type: ignore[attr-defined]
    raise ConcurrentCollectiveError(
        f"adaptcoll: {collective} on communicator {name} (handle {key:#x}) was called in thread "
        f"{here!r} while thread {there!r} is inside {held[1]} on the same communicator: MPI forbids "
        "concurrent collectives on one communicator; give each thread its own communicator (comm.Dup())"
    )


def leave(key: Optional[int]) -> None:
    """End the call `enter` returned `key` for."""
    if key is not None:
        _busy.pop(key, None)


def _use_extension(module: Any) -> None:
    """`enter` and `leave` in C (adaptcoll.runtime.fastcalls' busy marker, on the same `_busy`), once the
    fast-call extension is loaded: about 1,500 instructions less per served call. Callers that look them
    up as `threads.enter` take them from then on; the Python ones above stay for the others."""
    global enter, leave
    marker = module.busy_marker(_busy, _conflict)
    enter, leave = marker.enter, marker.leave


fastcalls.when_loaded(_use_extension)
