"""Persistent collectives: Bcast_init / Reduce_init / Allreduce_init return a `Prequest` to Start()
many times. The decision and set-up are the one-shot calls' own (`adaptcoll.decision.decide`: buffers parsed,
trees built, segment plan sized, pool chosen), done once; each Start() only takes a fresh tag base
from the communicator's tag sequence and posts the protocols.

Settings in force at *_init time apply to every start (a persistent request is a fixed plan). Calls
adaptcoll does not serve become native MPI persistent requests behind the same interface.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional

from mpi4py import MPI

from ..decision import decide
from ..protocols.operation import Operation
from ..runtime import counters
from ..runtime.engine import NATIVE_LIVE, engine
from ..runtime.native import Native
from ..state.comm_state import comm_state, settle_setup
from . import threads as _threads
from .requests import Request

__all__ = ["Prequest", "NativePrequest", "bcast_init", "reduce_init", "allreduce_init"]

_IN_PLACE = MPI.IN_PLACE

Starter = Callable[[], Operation]


def _idle() -> Operation:
    """A completed operation: what an inactive persistent request holds."""
    op = Operation()
    op.complete()
    return op


class Prequest(Request):
    """A persistent adaptcoll collective: Start(), then Test()/Wait() (or Request.Waitall), any number
    of times; Free() when done. Inactive (never started, or completed) requests test as complete."""

    __slots__ = ("_start", "_keep", "_error", "_comm", "_again")

    def __init__(
        self,
        start: Starter,
        keep: Any = None,
        error: Optional[BaseException] = None,
        comm: Any = None,
        again: Optional[Callable[[Operation], Operation]] = None,
    ) -> None:
        """`again`: the compiled path's restart (Prepared.restart), which starts each run after the
        first with the previous run's operation; None: every Start() calls `start`."""
        super().__init__(_idle())
        self._reported = True  # inactive until started
        self._start: Optional[Starter] = start
        self._keep = keep
        self._error = error
        self._comm = comm  # for the concurrent-collective check of Start()
        self._again = again

    def _finished(self) -> bool:
        return self._op.done

    def Start(self) -> None:
        """Begin one more run of the collective (the previous one must have completed)."""
        if not self._op.done:  # (self._finished(), inline: Start and Wait are the calls a loop makes)
            raise RuntimeError("Start() on an active persistent request (Wait for it first)")
        if self._start is None:
            raise ValueError("Start() on a freed persistent request")
        key = _threads.enter(self._comm, "Start") if self._comm is not None else None
        try:
            again = self._again
            if again is not None and self._op.info is not None:  # a run of ours before: restart it
                self._op = again(self._op)
            else:
                self._op = self._start()  # CommState.submit: under the engine lock
        finally:
            _threads.leave(key)
        self._reported = False
        if self._error is not None:  # a buffer of this rank was bad: the others' data was drained, now report
            engine().wait_for(self._finished)
            raise self._error

    def Free(self) -> None:
        """Release the request (waits for an active run to finish first)."""
        if not self._finished():
            engine().wait_for(self._finished)
        self._start = self._keep = self._again = None
        self._op = _idle()

    @classmethod
    def Startall(cls, requests: Sequence[Prequest | MPI.Prequest]) -> None:
        """Start every request in the list (adaptcoll and native persistent requests alike)."""
        for r in requests:
            r.Start()


class NativePrequest(Prequest):
    """A native MPI persistent request behind the Prequest interface (for calls adaptcoll does not serve)."""

    __slots__ = ("_req",)

    def __init__(self, req: MPI.Prequest, keep: Any = None) -> None:
        super().__init__(lambda: Operation(), keep)
        self._req: Optional[MPI.Prequest] = req
        NATIVE_LIVE.add(id(self))  # holds its communicator until freed

    def _finished(self) -> bool:
        return self._req is None or bool(self._req.Test())

    Wait = Request._wait_polled  # (Request.Wait reads an adaptcoll operation, which this request has not)

    def Start(self) -> None:
        if self._req is None:
            raise ValueError("Start() on a freed persistent request")
        self._req.Start()
        self._reported = False

    def Free(self) -> None:
        if self._req is not None:
            engine().wait_for(self._finished)
            self._req.Free()
            NATIVE_LIVE.discard(id(self))
        self._req = self._keep = None


# -- the *_init calls: the one-shot calls' decision and set-up, started once per Start() -----------
def _prequest(
    name: str,
    comm: MPI.Intracomm,
    decide_call: Callable[[], decide.Decision],
    keep: Any,
    native: Callable[[], MPI.Prequest],
) -> Prequest:
    """A Prequest for a prepared call (each Start() goes through the communicator's set-up queue), or
    the native persistent request for a Native decision."""
    key = _threads.enter(comm, name)
    try:
        decision = decide_call()
        if isinstance(decision, Native):
            counters.record(name, decision.reason)
            if decision.note is not None:
                counters.note(name, decision.note)
            if decision.error is not None:
                raise decision.error
            settle_setup(comm)
            return NativePrequest(native(), keep=keep)
    finally:
        _threads.leave(key)
    counters.record(
        name, decision.native_reason, decision.config.label if decision.config is not None else None, decision.engine
    )
    if decision.note is not None:
        counters.note(name, decision.note)
    again = decision.restart if decision.error is None else None
    return Prequest(
        functools.partial(comm_state(comm).submit, decision.start),
        keep=keep,
        error=decision.error,
        comm=comm,
        again=again,
    )


def bcast_init(comm: MPI.Intracomm, buf: Any, root: int = 0, info: MPI.Info = MPI.INFO_NULL) -> Prequest:
    """comm.Bcast_init(buf, root, info): a persistent broadcast request."""
    return _prequest(
        "Bcast_init",
        comm,
        lambda: decide.bcast(comm, buf, root),
        buf,
        lambda: MPI.Intracomm.Bcast_init(comm, buf, root, info),
    )


def reduce_init(
    comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0, info: MPI.Info = MPI.INFO_NULL
) -> Prequest:
    """comm.Reduce_init(sendbuf, recvbuf, op, root, info): a persistent reduce request."""
    return _prequest(
        "Reduce_init",
        comm,
        lambda: decide.reduce(comm, sendbuf, recvbuf, op, root),
        (sendbuf, recvbuf),
        lambda: MPI.Intracomm.Reduce_init(
            comm, decide.in_place_send_at_root(comm, sendbuf, recvbuf, root), recvbuf, op, root, info
        ),
    )


def allreduce_init(
    comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, info: MPI.Info = MPI.INFO_NULL
) -> Prequest:
    """comm.Allreduce_init(sendbuf, recvbuf, op, info): a persistent allreduce request."""
    return _prequest(
        "Allreduce_init",
        comm,
        lambda: decide.allreduce(comm, sendbuf, recvbuf, op),
        (sendbuf, recvbuf),
        lambda: MPI.Intracomm.Allreduce_init(comm, decide.in_place_send(sendbuf, recvbuf), recvbuf, op, info),
    )


def _label(decision: Any) -> Optional[str]:
    """The configuration label stats() counts a served call under."""
    return decision.config.label if decision.config is not None else None
