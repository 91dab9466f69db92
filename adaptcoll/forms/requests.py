"""Request handles for nonblocking adaptcoll collectives (and native ones wrapped alike).

Like `mpi4py.util.pkl5.Request`, these are not MPI requests: MPI cannot progress them, so wait on
them with their own methods (`Wait`, `Test`, `Request.Waitall`, ...), which also progress every other
pending adaptcoll operation of the process. Each request holds references to its buffers until done.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

from mpi4py import MPI

from ..protocols.operation import Operation
from ..runtime import engine as _engines
from ..runtime import fastcalls
from ..runtime.engine import NATIVE_LIVE, engine

__all__ = ["Request", "NativeRequest"]

_native_started = NATIVE_LIVE.add
_native_ended = NATIVE_LIVE.discard


def _fill(status: Optional[MPI.Status]) -> None:
    if status is not None:
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_error(MPI.SUCCESS)


class Request:
    """A nonblocking adaptcoll collective: Test/Wait/Get_status and Waitall/Testall/Waitany/... .

    As in MPI, a request whose completion has been reported (by Test, Wait or one of the class
    methods) becomes inactive: Waitany/Testany/Waitsome/Testsome skip it afterwards.
    """

    __slots__ = ("_op", "_reported")

    def __init__(self, op: Operation) -> None:
        self._op = op
        self._reported = False

    def _finished(self) -> bool:
        return self._op.done

    def _failure(self) -> Optional[BaseException]:
        """The error the operation failed with (None if it succeeded or is still running)."""
        return self._op.error

    def Test(self, status: Optional[MPI.Status] = None) -> bool:
        """Progress once; True (and `status` filled) if the operation has completed."""
        if not self._finished():
            engine().progress()
        done = self._finished()
        if done:
            self._reported = True
            _fill(status)
            _raise_failed([self])
        return done

    def Wait(self, status: Optional[MPI.Status] = None) -> bool:
        """Progress until the operation has completed; returns True like mpi4py's Request.Wait.
        Raises the operation's error if it failed.

        Reads the operation itself (`_finished` and `_failure` inline: a small nonblocking call's Wait
        is a few Python steps around one call into C); a subclass whose completion is something else
        overrides `_finished` and `_failure` and takes `_wait_polled` as its Wait."""
        op = self._op
        if not op.done:
            (_engines._engine or engine()).wait_operation(op, self._finished)
        self._reported = True
        if status is not None:
            _fill(status)
        if op.error is not None:
            raise op.error
        return True

    def _wait_polled(self, status: Optional[MPI.Status] = None) -> bool:
        """Wait through `_finished` and `_failure` (for subclasses that track completion otherwise)."""
        if not self._finished():
            engine().wait_for(self._finished)
        self._reported = True
        if status is not None:
            _fill(status)
        error = self._failure()
        if error is not None:
            raise error
        return True

    def Get_status(self, status: Optional[MPI.Status] = None) -> bool:
        """Progress once; True if complete, without marking the request inactive (as MPI_Request_get_status)."""
        if not self._finished():
            engine().progress()
        done = self._finished()
        if done:
            _fill(status)
        return done

    def Free(self) -> None:
        """Drop the handle; the operation itself still runs to completion (as MPI_Request_free)."""

    def Cancel(self) -> None:
        """Collectives cannot be cancelled (MPI says the same); raises NotImplementedError."""
        raise NotImplementedError("collective operations cannot be cancelled")

    # lower-case aliases in mpi4py.util.pkl5 style
    def test(self) -> bool:
        return self.Test()

    def wait(self) -> None:
        self.Wait()

    @classmethod
    def Waitall(cls, requests: Sequence[Request | MPI.Request], statuses: Optional[list] = None) -> bool:
        """Wait for all; accepts adaptcoll and plain MPI requests mixed."""
        progress = engine().progress
        pending = [r for r in requests if _active(r)]
        while pending:
            pending = [r for r in pending if not _complete(r)]
            if pending and not progress():
                os.sched_yield()
        for r in requests:
            _report(r)
        _fill_list(statuses, len(requests))
        _raise_failed(requests)
        return True

    @classmethod
    def Testall(cls, requests: Sequence[Request | MPI.Request], statuses: Optional[list] = None) -> bool:
        """True (all reported) if every request has completed; otherwise False and nothing is consumed."""
        engine().progress()
        if not all(_complete(r) for r in requests if _active(r)):
            return False
        for r in requests:
            _report(r)
        _fill_list(statuses, len(requests))
        _raise_failed(requests)
        return True

    @classmethod
    def Waitany(cls, requests: Sequence[Request | MPI.Request], status: Optional[MPI.Status] = None) -> int:
        """Index of one completed active request (MPI.UNDEFINED if none is active)."""
        progress = engine().progress
        while True:
            active = [i for i, r in enumerate(requests) if _active(r)]
            if not active:
                return MPI.UNDEFINED
            for i in active:
                if _complete(requests[i]):
                    _report(requests[i])
                    _fill(status)
                    _raise_failed([requests[i]])
                    return i
            if not progress():
                os.sched_yield()

    @classmethod
    def Testany(
        cls, requests: Sequence[Request | MPI.Request], status: Optional[MPI.Status] = None
    ) -> tuple[int, bool]:
        """(index, True) for a completed active request, (MPI.UNDEFINED, True) if none is active,
        else (MPI.UNDEFINED, False)."""
        engine().progress()
        active = [i for i, r in enumerate(requests) if _active(r)]
        if not active:
            return MPI.UNDEFINED, True
        for i in active:
            if _complete(requests[i]):
                _report(requests[i])
                _fill(status)
                _raise_failed([requests[i]])
                return i, True
        return MPI.UNDEFINED, False

    @classmethod
    def Waitsome(
        cls, requests: Sequence[Request | MPI.Request], statuses: Optional[list] = None
    ) -> Optional[list[int]]:
        """Indices of the completed active requests, waiting for at least one (None if none is active)."""
        progress = engine().progress
        while True:
            done = _take_completed(requests)
            if done is None or done:
                _fill_list(statuses, len(done or ()))
                return done
            if not progress():
                os.sched_yield()

    @classmethod
    def Testsome(
        cls, requests: Sequence[Request | MPI.Request], statuses: Optional[list] = None
    ) -> Optional[list[int]]:
        """Indices of the active requests that have completed (progresses once; None if none is active)."""
        engine().progress()
        done = _take_completed(requests)
        _fill_list(statuses, len(done or ()))
        return done


class NativeRequest(Request):
    """A native MPI request dressed as an adaptcoll Request (keeps the buffers alive until done).

    Made by every I-form that goes native, so its making and Wait are a few steps: the routed calls
    pass `keep` by position (a keyword to a class call cost 0.1 us more on CPython 3.11,
    bench/RESULTS.md "Small nonblocking calls that go native: the request around MPI's"). Where the
    fast-call extension is loaded, Ibcast / Ireduce / Iallreduce make it in C and its Wait is a C method
    for the common case (`_use_c_request` below)."""

    __slots__ = ("_req", "_keep", "_done")

    def __init__(self, req: MPI.Request, keep: Any = None, /) -> None:
        self._req = req
        self._keep = keep
        self._done = False
        self._reported = False
        _native_started(id(self))  # holds its communicator until complete (see NATIVE_LIVE)

    def _finished(self) -> bool:
        if not self._done and self._req.Test():
            self._completed()
        return self._done

    def _completed(self) -> None:
        self._done = True
        self._keep = None
        _native_ended(id(self))

    def _failure(self) -> Optional[BaseException]:
        return None  # native MPI raises its own errors from Test

    def Wait(self, status: Optional[MPI.Status] = None) -> bool:
        """MPI's own Wait when this rank has no adaptcoll traffic to progress meanwhile (nothing of ours
        can be holding the others up); else progress both. Test + sched_yield turns took Iallreduce
        4 KiB from 11 to 51 us at 2 ranks (`python -m adaptcoll.check --full`, bench/RESULTS.md)."""
        if not self._done:
            eng = _engines._engine or engine()
            if not eng.quiet():
                eng.wait_for(self._finished)
                _fill(status)
            else:
                self._req.Wait(status)
                self._completed()
        else:
            _fill(status)
        self._reported = True
        return True

    def Free(self) -> None:
        """Keep the buffers until MPI is done with them, then drop the handle."""
        if not self._done:
            engine().wait_for(self._finished)


_PYTHON_WAIT = NativeRequest.Wait


def _use_c_request(module: Any) -> None:
    """Once the fast-call extension is loaded, the native I-forms make their requests in C (see
    adaptcoll.forms.collectives) and NativeRequest's Wait takes its common case there (no status, nothing
    of adaptcoll's pending: MPI's Wait and the completion; every other case is the Python Wait above)."""
    module.request_facts(NativeRequest, NATIVE_LIVE, _engines, _PYTHON_WAIT)
    NativeRequest.Wait = module.request_wait_method()  # type: ignore[method-assign]


fastcalls.when_loaded(_use_c_request)


def _active(r: Request | MPI.Request) -> bool:
    """Not yet reported complete (MPI requests: not REQUEST_NULL)."""
    if isinstance(r, Request):
        return not r._reported
    return r != MPI.REQUEST_NULL


def _complete(r: Request | MPI.Request) -> bool:
    """Completed, without consuming it."""
    if isinstance(r, Request):
        return r._finished()
    return bool(r.Get_status())


def _report(r: Request | MPI.Request) -> None:
    """Mark a completed request inactive (an MPI request is freed by its final Test)."""
    if isinstance(r, Request):
        r._reported = True
    elif r != MPI.REQUEST_NULL:
        r.Test()


def _take_completed(requests: Sequence[Request | MPI.Request]) -> Optional[list[int]]:
    active = [i for i, r in enumerate(requests) if _active(r)]
    if not active:
        return None
    done = [i for i in active if _complete(requests[i])]
    for i in done:
        _report(requests[i])
    _raise_failed([requests[i] for i in done])
    return done


def _raise_failed(requests: Sequence[Request | MPI.Request]) -> None:
    """Raise the error of the first failed adaptcoll operation among `requests` (after they are reported)."""
    for r in requests:
        if isinstance(r, Request):
            error = r._failure()
            if error is not None:
                raise error


def _fill_list(statuses: Optional[list], n: int) -> None:
    if statuses is None:
        return
    while len(statuses) < n:
        statuses.append(MPI.Status())
    for st in statuses[:n]:
        _fill(st)
