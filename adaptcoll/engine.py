"""The progress engine: one per process, it drives every pending adaptcoll operation over MPI.

A sweep is one `Testsome` over the live MPI requests, then the completion callbacks, then the poll
functions (GPU events, deferred folds). A sweep that made no progress ends with `os.sched_yield()`:
on oversubscribed nodes spinning starves the very ranks we wait for (30-100x slower here).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from .transport import Callback, Poll

__all__ = ["Engine", "MPITransport", "MessageSizeError", "engine"]


class MessageSizeError(ValueError):
    """A segment arrived with another size than this rank expected: counts differ across ranks."""


class Engine:
    """Live MPI requests with their callbacks, plus polled completions; `progress()` makes one sweep."""

    def __init__(self) -> None:
        self._reqs: list[MPI.Request] = []
        self._cbs: list[Callback] = []
        self._expect: list[int] = []  # expected byte count for receives, -1 for sends
        self._statuses: list[MPI.Status] = []
        self._watches: list[tuple[Poll, Callback]] = []
        self._lock = threading.RLock()
        self.sweeps = 0
        self.events = 0
        self.idle_sweeps = 0  # sweeps that completed nothing (tracing marks the time between events as idle)

    @property
    def lock(self) -> threading.RLock:
        """Held while a sweep runs; hold it while starting an operation so no callback races the start."""
        return self._lock

    def add(self, req: MPI.Request, callback: Callback, expect_bytes: int = -1) -> None:
        """Track `req`; call `callback()` from a later sweep once it has completed."""
        with self._lock:
            self._reqs.append(req)
            self._cbs.append(callback)
            self._expect.append(expect_bytes)

    def watch(self, poll: Poll, callback: Callback) -> None:
        """Call `callback()` from a later sweep once `poll()` returns True."""
        with self._lock:
            self._watches.append((poll, callback))

    @property
    def pending(self) -> int:
        """Number of MPI requests and polls still outstanding."""
        return len(self._reqs) + len(self._watches)

    def progress(self) -> bool:
        """One sweep; returns whether anything completed. Thread-safe (one sweep at a time).

        Every completed request's callback runs even if another raises; the first exception is
        re-raised at the end of the sweep (an operation that raised is broken, the others go on).
        """
        with self._lock:
            self.sweeps += 1
            fired: list[Callback] = []
            error: Exception | None = None
            reqs = self._reqs
            if reqs:
                statuses = self._statuses
                if len(statuses) < len(reqs):
                    statuses.extend(MPI.Status() for _ in range(len(reqs) - len(statuses)))
                try:
                    done = MPI.Request.Testsome(reqs, statuses)
                except MPI.Exception as exc:
                    if exc.Get_error_class() in (MPI.ERR_IN_STATUS, MPI.ERR_TRUNCATE):
                        raise MessageSizeError(
                            "adaptcoll: a segment was larger than this rank expected (MPI: "
                            f"{exc.Get_error_string().splitlines()[0]}): are the counts and datatypes the "
                            "same on all ranks?"
                        ) from exc
                    raise
                if done:
                    cbs, expect = self._cbs, self._expect
                    for j, i in enumerate(done):
                        want = expect[i]
                        if want >= 0 and error is None:
                            got = statuses[j].Get_count(MPI.BYTE)
                            if got != want:
                                error = MessageSizeError(
                                    f"adaptcoll: a segment from rank {statuses[j].Get_source()} had {got} bytes, "
                                    f"this rank expected {want}: are the counts and datatypes the same on all "
                                    "ranks?"
                                )
                                continue
                        fired.append(cbs[i])
                    gone = set(done)
                    keep = [i for i in range(len(reqs)) if i not in gone]
                    self._reqs = [reqs[i] for i in keep]
                    self._cbs = [cbs[i] for i in keep]
                    self._expect = [expect[i] for i in keep]
            if self._watches:
                still = []
                for poll, cb in self._watches:
                    try:
                        ready = poll()
                    except Exception as exc:
                        error = error or exc
                        continue
                    if ready:
                        fired.append(cb)
                    else:
                        still.append((poll, cb))
                self._watches = still
            self.events += len(fired)
            for cb in fired:  # every completion fires, even if one of them raises
                try:
                    cb()
                except Exception as exc:
                    error = error or exc
            if error is not None:
                raise error
            if not fired:
                self.idle_sweeps += 1
            return bool(fired)

    def wait_for(self, finished: Callable[[], bool]) -> None:
        """Drive progress until `finished()`; yields the CPU after every idle sweep."""
        progress, sched_yield = self.progress, os.sched_yield
        while not finished():
            if not progress():
                sched_yield()


_engine: Engine | None = None
_engine_lock = threading.Lock()


def engine() -> Engine:
    """The process's engine (created on first use)."""
    global _engine
    if _engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = Engine()
    return _engine


class MPITransport:
    """The Transport of one private communicator (a duplicate of the user's), driven by the engine."""

    def __init__(self, comm: MPI.Intracomm, eng: Engine) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._engine = eng
        self._isend = comm.Isend
        self._issend = comm.Issend
        self._irecv = comm.Irecv

    def isend(self, buf: Any, dest: int, tag: int, on_done: Callback, synchronous: bool = False) -> None:
        req = (self._issend if synchronous else self._isend)(buf, dest, tag)
        self._engine.add(req, on_done)

    def irecv(self, buf: Any, source: int, tag: int, on_done: Callback) -> None:
        self._engine.add(self._irecv(buf, source, tag), on_done, buf.nbytes)

    def watch(self, poll: Poll, on_done: Callback) -> None:
        self._engine.watch(poll, on_done)
