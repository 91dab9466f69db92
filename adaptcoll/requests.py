"""Request handles for nonblocking adaptcoll collectives (and native ones wrapped alike).

Like `mpi4py.util.pkl5.Request`, these are not MPI requests: MPI cannot progress them, so wait on
them with their own methods (`Wait`, `Test`, `Request.Waitall`, ...), which also progress every other
pending adaptcoll operation of the process. Each request holds references to its buffers until done.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

from mpi4py import MPI

from .engine import engine

__all__ = ["Request", "Operation", "NativeRequest"]


class Operation:
    """Completion state of one adaptcoll collective on this rank; keeps its buffers alive until done."""

    __slots__ = ("done", "keep", "on_done")

    def __init__(self, keep: Any = None) -> None:
        self.done = False
        self.keep = keep
        self.on_done: Optional[Callable[[], None]] = None

    def complete(self) -> None:
        """Called by the protocol when this rank's part is finished."""
        self.done = True
        self.keep = None
        if self.on_done is not None:
            self.on_done()


def _fill(status: Optional[MPI.Status]) -> None:
    if status is not None:
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_error(MPI.SUCCESS)


class Request:
    """A nonblocking adaptcoll collective: Test/Wait/Get_status and Waitall/Testall/Waitany/... ."""

    __slots__ = ("_op",)

    def __init__(self, op: Operation) -> None:
        self._op = op

    def _finished(self) -> bool:
        return self._op.done

    def Test(self, status: Optional[MPI.Status] = None) -> bool:
        """Progress once; True (and `status` filled) if the operation has completed."""
        if not self._finished():
            engine().progress()
        done = self._finished()
        if done:
            _fill(status)
        return done

    def Wait(self, status: Optional[MPI.Status] = None) -> bool:
        """Progress until the operation has completed; returns True like mpi4py's Request.Wait."""
        engine().wait_for(self._finished)
        _fill(status)
        return True

    def Get_status(self, status: Optional[MPI.Status] = None) -> bool:
        """Like Test, but never frees anything (adaptcoll requests need no freeing)."""
        return self.Test(status)

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
    def Waitall(cls, requests: Sequence["Request | MPI.Request"], statuses: Optional[list] = None) -> bool:
        """Wait for all; accepts adaptcoll and plain MPI requests mixed."""
        progress = engine().progress
        pending = list(requests)
        while pending:
            pending = [r for r in pending if not _test_one(r)]
            if pending and not progress():
                os.sched_yield()
        if statuses is not None:
            for s in statuses:
                _fill(s)
        return True

    @classmethod
    def Testall(cls, requests: Sequence["Request | MPI.Request"], statuses: Optional[list] = None) -> bool:
        """True if all have completed (progresses once)."""
        engine().progress()
        return all([_test_one(r) for r in requests])

    @classmethod
    def Waitany(cls, requests: Sequence["Request | MPI.Request"], status: Optional[MPI.Status] = None) -> int:
        """Index of one completed request (MPI.UNDEFINED if the list is empty)."""
        if not requests:
            return MPI.UNDEFINED
        progress = engine().progress
        while True:
            for i, r in enumerate(requests):
                if _test_one(r):
                    _fill(status)
                    return i
            if not progress():
                os.sched_yield()

    @classmethod
    def Testany(cls, requests: Sequence["Request | MPI.Request"], status: Optional[MPI.Status] = None
                ) -> tuple[int, bool]:
        """(index, True) of a completed request, or (MPI.UNDEFINED, False)."""
        engine().progress()
        for i, r in enumerate(requests):
            if _test_one(r):
                _fill(status)
                return i, True
        return MPI.UNDEFINED, False

    @classmethod
    def Waitsome(cls, requests: Sequence["Request | MPI.Request"], statuses: Optional[list] = None
                 ) -> Optional[list[int]]:
        """Indices of the completed requests, waiting until there is at least one."""
        if not requests:
            return None
        progress = engine().progress
        while True:
            done = [i for i, r in enumerate(requests) if _test_one(r)]
            if done:
                return done
            if not progress():
                os.sched_yield()

    @classmethod
    def Testsome(cls, requests: Sequence["Request | MPI.Request"], statuses: Optional[list] = None
                 ) -> Optional[list[int]]:
        """Indices of the requests that have completed (progresses once)."""
        if not requests:
            return None
        engine().progress()
        return [i for i, r in enumerate(requests) if _test_one(r)]


class NativeRequest(Request):
    """A native MPI request dressed as an adaptcoll Request (keeps the buffers alive until done)."""

    __slots__ = ("_req", "_keep", "_done")

    def __init__(self, req: MPI.Request, keep: Any = None) -> None:
        self._req = req
        self._keep = keep
        self._done = False

    def _finished(self) -> bool:
        if not self._done and self._req.Test():
            self._done = True
            self._keep = None
        return self._done

    def Test(self, status: Optional[MPI.Status] = None) -> bool:
        engine().progress()
        done = self._finished()
        if done:
            _fill(status)
        return done

    def Free(self) -> None:
        """Keep the buffers until MPI is done with them, then drop the handle."""
        if not self._done:
            engine().wait_for(self._finished)


def _test_one(r: "Request | MPI.Request") -> bool:
    if isinstance(r, Request):
        return r._finished()
    return bool(r.Test())
