"""The progress engine: one per process, it drives every pending adaptcoll operation over MPI.

A sweep is one `Testsome` over the live MPI requests (at most `SWEEP_CHUNK` of them, in turn, so a
sweep costs the same however many operations are pending), then the completion callbacks, then the
poll functions (GPU events, deferred folds). A sweep that made no progress ends with `os.sched_yield()`:
on oversubscribed nodes spinning starves the very ranks we wait for (30-100x slower here).

Every request and poll belongs to the operation whose start or callback posted it (`Engine.owner`).
An error found in a completion (a segment of the wrong size, a callback that raised) fails that
operation only: whoever waits on it gets the error, the engine goes on with the others, and the
communicator's `MPITransport` sends an error notice to the other ranks, whose own part of the
operation then fails too instead of waiting forever. Notices and the watchdog (`ADAPTCOLL_WATCHDOG`)
are looked at on idle sweeps only, so they cost nothing while segments are moving.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from . import settings
from .transport import Callback, Poll

__all__ = [
    "NATIVE_LIVE",
    "Engine",
    "MPITransport",
    "MessageSizeError",
    "CollectiveError",
    "OpInfo",
    "engine",
    "SWEEP_CHUNK",
    "IDLE_WORK_EVERY",
]

SWEEP_CHUNK = 1024
"""At most this many requests are tested per sweep; more are tested in turn, chunk by chunk, so that a
sweep stays cheap with thousands of dropped requests pending (each sweep still drives MPI's progress)."""

IDLE_WORK_EVERY = 64
"""Every this many idle sweeps, error notices are received and the watchdog looks at the clock."""

NOTICE_BYTES = 2048
"""Size of the standing receive for error notices (a notice is a short text)."""

_BYTE = MPI.BYTE
_REQUEST_NULL = MPI.REQUEST_NULL
_Testsome = MPI.Request.Testsome
_ST_DONE = 1
"""ac_op_wait's "finished well" (adaptcoll.runtime.compiled.ST_DONE; that module imports this one)."""
_SEP = "\x1f"
_HANDLE_BITS = (1 << 64) - 1


class MessageSizeError(ValueError):
    """A segment arrived with another size than this rank expected: counts differ across ranks."""


class CollectiveError(RuntimeError):
    """Another rank's part of this collective failed (its own error is in the message)."""


def _noop() -> None:
    """The callback of a request whose operation has failed."""


class OpInfo:
    """What the engine knows of one served operation: for error messages, notices and the watchdog.

    `plan` is the operation's segment plan (nseg, tag_base, tag_space); `seq` numbers the served
    operations of one communicator alike on every rank.
    """

    __slots__ = ("collective", "root", "seq", "plan", "transport", "reported", "tag_base")

    def __init__(
        self,
        collective: str,
        root: Optional[int],
        seq: int,
        plan: Any,
        transport: MPITransport,
        tag_base: Optional[int] = None,
    ) -> None:
        """`tag_base`: the operation's tag base when `plan` is its shape (the plan without tags), else None."""
        self.collective = collective
        self.root = root
        self.seq = seq
        self.plan = plan
        self.transport = transport
        self.reported = False
        self.tag_base = plan.tag_base if tag_base is None else tag_base

    def segment(self, tag: int) -> int:
        """The segment index a tag of this operation carries."""
        return (tag - self.tag_base) % self.plan.tag_space

    def title(self) -> str:
        root = "" if self.root is None else f", root {self.root}"
        return f"{self.collective} #{self.seq} on {self.transport.label}{root}, {self.plan.nseg} segment(s)"


NATIVE_LIVE: set[int] = set()
"""id() of the native MPI requests adaptcoll made on users' communicators and has not seen end (routed
I-forms until complete, persistent ones until freed; a set because its add and discard are atomic
across threads). While any is live, a communicator's attribute delete callback may be running inside
the MPI call that completes one, where MPI calls are unsafe (adaptcoll.state.comm_state.CommState.free_later)."""


# An entry of the engine: (callback, expected bytes for a receive or -1 for a send, owner, peer, tag).
Entry = tuple[Callback, int, Any, int, int]


class Engine:
    """Live MPI requests with their callbacks, plus polled completions; `progress()` makes one sweep.

    Requests are added (`add`, or the transports' isend/irecv) from completion callbacks or while
    `lock` is held (the collectives start operations under it); the lists are kept in place and a
    completed request is swapped out, so nothing is rebuilt per sweep.
    """

    def __init__(self) -> None:
        self._reqs: list[MPI.Request] = []
        self._entries: list[Entry] = []
        self._statuses: list[MPI.Status] = []
        self._watches: list[tuple[Poll, Callback, Any]] = []
        self._cursor = 0
        self._lock = threading.RLock()
        self._listeners: list[MPITransport] = []
        self._deferred: deque[Callable[[], bool]] = deque()
        self._at_exit = False
        self.owner: Any = None
        """The operation whose start or callback is running: what is posted now belongs to it."""
        self.sweeps = 0
        self.idle_sweeps = 0
        self.events = 0
        self._stall_mark: tuple[int, int, int] = (-1, 0, 0)
        self._stall_since = 0.0
        self.compiled: Any = None
        """The compiled half (adaptcoll.runtime.compiled.CompiledEngine) once a compiled operation started:
        each sweep sweeps its requests too, and completes or fails the operations that finished there."""
        self.compiled_events = 0

    @property
    def lock(self) -> threading.RLock:
        """Held while a sweep runs; hold it while starting an operation so no callback races the start."""
        return self._lock

    def add(self, req: MPI.Request, callback: Callback, expect_bytes: int = -1) -> None:
        """Track `req`; call `callback()` from a later sweep once it has completed (see the class docstring)."""
        self._reqs.append(req)
        self._entries.append((callback, expect_bytes, self.owner, -1, -1))

    def watch(self, poll: Poll, callback: Callback) -> None:
        """Call `callback()` from a later sweep once `poll()` returns True."""
        self._watches.append((poll, callback, self.owner))

    @property
    def pending(self) -> int:
        """Number of MPI requests and polls still outstanding (a running compiled operation counts one)."""
        comp = self.compiled
        return len(self._reqs) + len(self._watches) + (len(comp.ops) if comp is not None else 0)

    def quiet(self) -> bool:
        """True when no operation needs this rank's progress: nothing pending, or only requests left
        behind by finished operations (sends of a failed operation that its peers will never receive)."""
        if self._watches or (self.compiled is not None and self.compiled.ops):
            return False
        for entry in self._entries:
            owner = entry[2]
            if owner is None or not owner.done:
                return False
        return True

    # -- the sweep -----------------------------------------------------------------------------
    def progress(self) -> bool:
        """One sweep; returns whether anything completed. Thread-safe (one sweep at a time).

        Every completed request's callback runs even if another raises. An error of an operation
        fails that operation; an error of a request that belongs to none is re-raised at the end of
        the sweep.
        """
        lock = self._lock  # (acquire / release: about 0.1 us less than `with` on every sweep)
        lock.acquire()
        try:
            self.sweeps += 1
            fired: list[Entry] = []
            error: Optional[BaseException] = None
            failed = False
            reqs = self._reqs
            if reqs:
                n = len(reqs)
                base = 0
                batch = reqs
                if n > SWEEP_CHUNK:
                    base = self._cursor
                    if base >= n:
                        base = 0
                    batch = reqs[base : base + SWEEP_CHUNK]
                    self._cursor = base + SWEEP_CHUNK
                statuses = self._statuses
                if len(statuses) < len(batch):
                    statuses.extend(MPI.Status() for _ in range(len(batch) - len(statuses)))
                try:
                    done = _Testsome(batch, statuses)
                    bad: Optional[list[bool]] = None
                except MPI.Exception as exc:
                    if exc.Get_error_class() not in (MPI.ERR_IN_STATUS, MPI.ERR_TRUNCATE):
                        raise
                    done = [i for i, r in enumerate(batch) if r == _REQUEST_NULL]
                    bad = [statuses[j].Get_error() != MPI.SUCCESS for j in range(len(done))]
                if done:
                    entries = self._entries
                    for j, i in enumerate(done):
                        entry = entries[base + i]
                        want = entry[1]
                        if want >= 0:
                            got = -1 if bad is not None and bad[j] else statuses[j].Get_count(_BYTE)
                            if got != want:
                                if bad is None and statuses[j].Is_cancelled():
                                    continue  # cancelled (its operation failed, or at exit): nothing arrived
                                failed = True
                                exc2 = _size_error(entry, got, want)
                                if entry[2] is None:
                                    error = error or exc2
                                else:
                                    self._fail(entry[2], exc2)
                                continue
                        fired.append(entry)
                    if len(done) > 1:
                        done = sorted(done, reverse=True)
                    for i in done:  # swap the completed ones out, highest index first
                        i += base
                        last_req = reqs.pop()
                        last_entry = entries.pop()
                        if i < len(reqs):
                            reqs[i] = last_req
                            entries[i] = last_entry
            if self._watches:
                error = self._poll_watches(fired) or error
            comp = self.compiled
            if comp is not None and comp.ops and self._sweep_compiled(comp, not (fired or reqs or self._watches)):
                fired.append((_noop, -1, None, -1, -1))
            if not fired:
                self.idle_sweeps += 1
                if not self.idle_sweeps % IDLE_WORK_EVERY:
                    self._idle_work()
                if error is not None:
                    raise error
                return failed
            self.events += len(fired)
            previous = self.owner
            for entry in fired:  # every completion fires, even if one of them raises
                owner = entry[2]
                if failed and owner is not None and owner.error is not None:
                    continue  # its operation failed in this sweep
                self.owner = owner
                try:
                    entry[0]()
                except Exception as exc:
                    if owner is None:
                        error = error or exc
                    else:
                        failed = True
                        self._fail(owner, exc)
            self.owner = previous
            if error is not None:
                raise error
            return True
        finally:
            lock.release()

    def _sweep_compiled(self, comp: Any, alone: bool) -> bool:
        """Sweep the compiled operations' requests (many sweeps in C when nothing else is pending, one
        otherwise), then complete or fail those that finished; returns whether anything moved."""
        events, finished = comp.sweep(256, 1 << 16) if alone else comp.sweep(1, 64)
        self.compiled_events += events
        self._finish_compiled(comp, finished)
        return bool(events or finished)

    def _finish_compiled(self, comp: Any, finished: list[Any]) -> None:
        """Complete or fail compiled operations handed back (CompiledEngine.sweep / wait), then release them."""
        for operation, handle, on_done, error in finished:
            try:
                if error is not None:
                    if operation is not None:
                        previous, self.owner = self.owner, operation
                        try:
                            self._fail(operation, error)
                        finally:
                            self.owner = previous
                else:
                    self._complete(operation, on_done)
            finally:
                if handle:
                    comp.release(handle)

    def _complete(self, operation: Any, on_done: Callable[[], None]) -> None:
        """Run the on_done of an operation that finished here (compiled), as its owner; an exception
        from it fails the operation."""
        if operation is None or operation.done:
            return
        previous, self.owner = self.owner, operation
        try:
            on_done()
        except Exception as exc:
            self._fail(operation, exc)
        finally:
            self.owner = previous

    def wait_operation(self, operation: Any, finished: Callable[[], bool]) -> None:
        """wait_for(finished), where `finished` waits for `operation` (call it when `finished()` is False):
        a compiled operation is first waited for in C (one call, CompiledEngine.wait) when nothing else
        needs this engine's sweeps; if it is still running after that call's budget, the ordinary loop
        goes on."""
        comp = self.compiled
        h = operation.handle
        if h and comp is not None:
            lock = self._lock
            lock.acquire()
            try:
                if h in comp.ops and not self._reqs and not self._watches:
                    state = comp.wait_state(h)
                    if state == _ST_DONE:  # the common case: finished, no notice waiting (so `operation` is done)
                        done_op, on_done, _ = comp.ops.pop(h)  # (C freed it: nothing to release)
                        self._complete(done_op, on_done)
                        return
                    found, notice = comp.wait(h, state)
                    if found is not None:
                        self._finish_compiled(comp, [found])
                    if notice:
                        info = getattr(operation, "info", None)
                        if isinstance(info, OpInfo):
                            info.transport.poll_notices()
            finally:
                lock.release()
        if not finished():
            self.wait_for(finished)

    def _poll_watches(self, fired: list[Entry]) -> Optional[BaseException]:
        watches = self._watches
        ready: list[int] = []
        error: Optional[BaseException] = None
        for k, (poll, cb, owner) in enumerate(watches):
            try:
                if poll():
                    ready.append(k)
                    fired.append((cb, -1, owner, -1, -1))
            except Exception as exc:
                ready.append(k)
                if owner is None:
                    error = error or exc
                else:
                    self._fail(owner, exc)
        for k in reversed(ready):
            last = watches.pop()
            if k < len(watches):
                watches[k] = last
        return error

    def wait_for(self, finished: Callable[[], bool]) -> None:
        """Drive progress until `finished()`; yields the CPU after every idle sweep."""
        progress, sched_yield = self.progress, os.sched_yield
        while not finished():
            if not progress():
                sched_yield()

    # -- failures ------------------------------------------------------------------------------
    def fail(self, owner: Any, error: BaseException, notify: bool = True) -> None:
        """Fail operation `owner` with `error` (see `_fail`); takes the lock."""
        with self._lock:
            self._fail(owner, error, notify)

    def _fail(self, owner: Any, error: BaseException, notify: bool = True) -> None:
        """Fail `owner` (its waiters raise `error`), drop its callbacks, cancel its receives (so nothing is
        written into its buffers any more) and, if `notify`, tell the other ranks of its communicator."""
        if not owner.fail(error):
            return
        h = getattr(owner, "handle", 0)
        comp = self.compiled
        if h and comp is not None and h in comp.ops:  # running in C: stop its requests there
            comp.abort(h)
        reqs, entries = self._reqs, self._entries
        for i, entry in enumerate(entries):
            if entry[2] is owner:
                if entry[1] >= 0:
                    try:
                        reqs[i].Cancel()
                    except MPI.Exception:  # pragma: no cover - already complete
                        pass
                entries[i] = (_noop, -1, owner, entry[3], entry[4])
        watches = self._watches
        for k, (poll, _cb, o) in enumerate(watches):
            if o is owner:
                watches[k] = (poll, _noop, o)
        info = getattr(owner, "info", None)
        if notify and isinstance(info, OpInfo):
            info.transport.notify_failure(info, error)

    # -- idle work: notices and the watchdog ---------------------------------------------------
    def listen(self, transport: MPITransport) -> None:
        """Look at `transport`'s error notices on idle sweeps (until `unlisten`)."""
        with self._lock:
            self._close_at_exit()
            self._listeners.append(transport)

    def _close_at_exit(self) -> None:
        if not self._at_exit:
            self._at_exit = True
            atexit.register(self.close_all)

    def defer(self, task: Callable[[], bool]) -> None:
        """Run `task()` later, outside any MPI call (from idle sweeps, `run_deferred` and at exit) until it
        returns True. Makes no MPI call and takes no lock, so MPI's own callbacks may use it: MPICH runs
        an attribute delete callback inside the call that completes the communicator's last request,
        where any MPI call deadlocks."""
        self._deferred.append(task)
        self._close_at_exit()

    def run_deferred(self) -> None:
        """Run the deferred tasks once each; those not finished stay for a later call."""
        tasks = self._deferred
        if not tasks:
            return
        with self._lock:
            for _ in range(len(tasks)):
                task = tasks.popleft()
                try:
                    finished = task()
                except MPI.Exception:  # pragma: no cover - MPI shutting down
                    finished = True
                if not finished:
                    tasks.append(task)

    def unlisten(self, transport: MPITransport) -> None:
        with self._lock:
            if transport in self._listeners:
                self._listeners.remove(transport)

    def close_all(self) -> None:
        """Run the deferred tasks once and cancel every standing notice receive (at exit, before MPI
        finalizes); tasks still unfinished are dropped (what they would free, MPI_Finalize frees)."""
        with self._lock:
            if not MPI.Is_finalized():
                self.run_deferred()
            self._deferred.clear()
            for transport in list(self._listeners):
                transport.close()

    def _idle_work(self) -> None:
        for transport in self._listeners:
            transport.poll_notices()
        if self._deferred:
            self.run_deferred()
        limit = settings.current().watchdog
        if limit > 0:
            self._watchdog(limit)

    def _watchdog(self, limit: float) -> None:
        now = time.monotonic()
        comp = self.compiled
        mark = (self.events + self.compiled_events, len(self._reqs), len(self._watches))
        if mark != self._stall_mark or not (self._reqs or self._watches or (comp is not None and comp.ops)):
            self._stall_mark, self._stall_since = mark, now
            return
        if now - self._stall_since < limit:
            return
        report = self.stall_report(now - self._stall_since)
        self._stall_since = now  # the next report (of other operations) after another `limit` seconds
        if report:
            abort = settings.current().watchdog_abort
            tail = (
                "adaptcoll watchdog: aborting the job (ADAPTCOLL_WATCHDOG_ABORT=1)\n"
                if abort
                else f"  (reported once; ADAPTCOLL_WATCHDOG={limit:g} sets this wait, 0 turns it off, "
                "ADAPTCOLL_WATCHDOG_ABORT=1 ends the job instead)\n"
            )
            sys.stderr.write(report + tail)
            sys.stderr.flush()
            if abort:
                # MPI_Abort makes the launcher kill every process at once, which can drop output still in
                # the pipe to it: give it a moment to forward the report first (once, before the job ends)
                time.sleep(1.0)
                MPI.COMM_WORLD.Abort(3)

    def stall_report(self, stalled_for: float) -> str:
        """The watchdog's text for the operations not yet reported: each with its pending segments
        (peer, tag, bytes); marks them reported. Empty if there is nothing new to report."""
        by_owner: dict[int, tuple[Any, list[str]]] = {}
        pending = [(owner, peer, tag, want) for _callback, want, owner, peer, tag in self._entries]
        comp = self.compiled
        if comp is not None and comp.ops:  # the compiled operations' requests (want -1: a send)
            pending += [(comp.ops.get(h, (None,))[0], peer, tag, want) for h, _, peer, tag, want in comp.pending()]
        for owner, peer, tag, want in pending:
            if owner is None or owner.error is not None:
                continue
            info = getattr(owner, "info", None)
            if isinstance(info, OpInfo) and info.reported:
                continue
            lines = by_owner.setdefault(id(owner), (owner, []))[1]
            what = "receive from" if want >= 0 else "send to"
            seg = f"segment {info.segment(tag)} " if isinstance(info, OpInfo) and tag >= 0 else ""
            size = f", {want} B" if want >= 0 else ""
            lines.append(f"    {what} rank {peer}: {seg}(tag {tag}{size})")
        for _poll, _cb, owner in self._watches:
            if owner is not None and owner.error is None:
                info = getattr(owner, "info", None)
                if not (isinstance(info, OpInfo) and info.reported) and not getattr(owner, "reported", False):
                    what = getattr(owner, "pending", "    a local fold or copy (polled)")
                    by_owner.setdefault(id(owner), (owner, []))[1].append(what)
        if not by_owner:
            return ""
        rank = MPI.COMM_WORLD.Get_rank()
        out = [
            f"adaptcoll watchdog: rank {rank} (of COMM_WORLD) has waited {stalled_for:.0f} s without any segment "
            f"moving; {len(by_owner)} operation(s) pending (a rank may never have called the collective, or "
            "called another one):\n"
        ]
        for owner, lines in by_owner.values():
            info = getattr(owner, "info", None)
            if isinstance(info, OpInfo):
                info.reported = True
                out.append(f"  {info.title()}, pending:\n")
            elif hasattr(owner, "describe"):  # a communicator's set-up step (state.SetupWait)
                owner.reported = True
                out.append(f"  {owner.describe()}, pending:\n")
            else:
                out.append("  an operation with no description, pending:\n")
            out.extend(line + "\n" for line in sorted(lines))
        return "".join(out)


def _size_error(entry: Entry, got: int, want: int) -> MessageSizeError:
    info = getattr(entry[2], "info", None)
    who = f"adaptcoll {info.collective}" if isinstance(info, OpInfo) else "adaptcoll"
    if got < 0:
        return MessageSizeError(
            f"{who}: a segment from rank {entry[3]} was larger than this rank expected ({want} bytes): "
            "are the counts and datatypes the same on all ranks?"
        )
    return MessageSizeError(
        f"{who}: a segment from rank {entry[3]} had {got} bytes, this rank expected {want}: are the counts and "
        "datatypes the same on all ranks?"
    )


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
    """The Transport of one private communicator (a duplicate of the user's), driven by the engine.

    It also numbers the served operations of its communicator (`start_operation`, the same numbers on
    every rank) and carries error notices between ranks: a standing receive on the reserved tag
    `notice_tag` (TAG_UB, which the segment tags never use), looked at on idle sweeps only.

    A rank whose part of operation #k failed tells every other rank, whose own part of #k then fails
    with an error naming the collective. Every rank that learns of the failure also tells the others
    how many segments #k had here (the detector's notice carries its own): counts that differ across
    ranks can make the ranks cut a message into different numbers of segments, after which their
    tag sequences are out of step. A rank that knows #k failed starts its next operation on this
    communicator only once it has every rank's count; all ranks then reach the same verdict: in step
    (go on) or out of step (every later operation on this communicator raises, on every rank).
    """

    RECENT = 256
    """Finished operations remembered (for notices that arrive after a rank's part has finished)."""

    def __init__(
        self, comm: Optional[MPI.Intracomm], eng: Engine, label: str = "", size: int = 0, rank: int = 0
    ) -> None:
        """`comm`: the private communicator, or None while it is being made (MPI_Comm_idup): then
        `size`/`rank` are given, and `bind(comm)` comes before any operation starts (CommState.submit)."""
        self.comm: Optional[MPI.Intracomm] = None
        self.rank = rank if comm is None else comm.Get_rank()
        self.size = size if comm is None else comm.Get_size()
        self.label = label or (comm.Get_name() if comm is not None else "") or "a communicator"
        self.notice_tag = int(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767)
        self._engine = eng
        self._reqs = eng._reqs
        self._entries = eng._entries
        self._seq = 0
        self._ops: dict[int, Any] = {}  # recent operations: seq -> operation (its info.plan: the segment count)
        self._oldest = 1  # the lowest number in _ops (numbers start at 1 and are never skipped)
        self._early: dict[int, BaseException] = {}  # failures reported for operations not started here yet
        self._votes: dict[int, dict[int, int]] = {}  # failed operations: seq -> {rank: its segment count}
        self._voted: set[int] = set()
        self._broken: Optional[tuple[int, str]] = None
        self._notice_buf = np.empty(NOTICE_BYTES, np.uint8)
        self._notice_status = MPI.Status()
        self._notice_req: Optional[MPI.Request] = None
        self.notice_slot = np.zeros(1, np.uint64)  # the handle's bits (mpi4py gives it as an unsigned int)
        """The standing notice receive's MPI handle (0: none), kept current for the compiled path, which
        looks at it (MPI_Request_get_status) after every blocking run (adaptcoll.runtime.compiled)."""
        if comm is not None:
            self.bind(comm)

    def bind(self, comm: MPI.Intracomm) -> None:
        """Use `comm` from now on (once): post the standing receive for error notices."""
        assert self.comm is None, "adaptcoll: a transport is bound to one communicator"
        self.comm = comm
        self._isend = comm.Isend
        self._issend = comm.Issend
        self._irecv = comm.Irecv
        if self.size > 1:
            self._post_notice_receive()
            self._engine.listen(self)

    def isend(self, buf: Any, dest: int, tag: int, on_done: Callback, synchronous: bool = False) -> None:
        self._reqs.append((self._issend if synchronous else self._isend)(buf, dest, tag))
        self._entries.append((on_done, -1, self._engine.owner, dest, tag))

    def irecv(self, buf: Any, source: int, tag: int, on_done: Callback) -> None:
        self._reqs.append(self._irecv(buf, source, tag))
        self._entries.append((on_done, buf.nbytes, self._engine.owner, source, tag))

    def watch(self, poll: Poll, on_done: Callback) -> None:
        self._engine.watch(poll, on_done)

    # -- operations ----------------------------------------------------------------------------
    def start_operation(
        self, operation: Any, collective: str, root: Optional[int], plan: Any, post: Callable[[], Any]
    ) -> None:
        """Number `operation`, then call `post()` (which starts its protocols) with `operation` as the
        engine's owner, so that every request it posts belongs to it. If this communicator is out of
        step, or another rank already reported this operation failed, `operation` fails instead (its
        waiter raises: a nonblocking call still returns its request). Call with the engine lock held."""
        if not self.begin(operation, collective, root, plan):
            return
        eng = self._engine
        previous = eng.owner
        eng.owner = operation
        try:
            post()
        finally:
            eng.owner = previous

    @property
    def settled(self) -> bool:
        """No failure is being voted on or waits to be raised, and the communicator is in step: `number`
        may be used (else the ordinary `begin` must decide)."""
        return not (self._votes or self._early or self._broken is not None)

    def number(self, finished: Any) -> int:
        """The blocking compiled path's numbering (adaptcoll.decision.starts), only while `settled`: the
        next number, with `finished` (an already-finished placeholder operation, its `info` describing the
        call) remembered under it. Engine lock held."""
        seq = self._seq = self._seq + 1
        ops = self._ops
        ops[seq] = finished
        if len(ops) > self.RECENT + 64:
            self._trim()
        return seq

    def renumber(self, operation: Any, seq: int, finished: Any) -> int:
        """`number` for an operation that runs again (a persistent request's next run, only while
        `settled`): the next number, with `finished` (a finished placeholder describing the same call)
        standing for it under its old number `seq`, so a late notice about the old run finds that, not
        the new run. Engine lock held."""
        ops = self._ops
        if ops.get(seq) is operation:
            ops[seq] = finished
        return self.number(operation)

    def remember(self, seq: int, operation: Any) -> None:
        """Remember `operation` as #seq (replacing a placeholder `number` put there)."""
        self._ops[seq] = operation

    def begin(
        self, operation: Any, collective: str, root: Optional[int], plan: Any, tag_base: Optional[int] = None
    ) -> bool:
        """Number `operation` (start_operation without the post): False if it failed at once (this
        communicator is out of step, or another rank already reported it failed). Engine lock held.
        `tag_base`: given when `plan` is the operation's shape (its plan without the tags, see OpInfo)."""
        seq = self._seq + 1
        if self._votes:
            self._await_votes(seq)
        self._seq = seq
        operation.info = OpInfo(collective, root, seq, plan, self, tag_base)
        if not self.settled:  # rare: a failure was reported (the votes before #seq are in by now)
            early = self._early.pop(seq, None)
            if early is not None:  # failed on another rank already: fails here too, raised by its waiter
                self._ops[seq] = operation
                self._learned(seq)
                operation.fail(early)
                return False
            broken = self._broken
            if broken is not None and seq >= broken[0]:
                operation.fail(MessageSizeError(self._broken_text(collective, broken[1])))
                return False
        ops = self._ops
        ops[seq] = operation
        if len(ops) > self.RECENT + 64:
            self._trim()
        return True

    def _trim(self) -> None:
        """Forget up to 64 of the oldest finished operations (kept: RECENT, trimmed in batches). The numbers
        in `_ops` run without gaps from `_oldest`, so the oldest is found by number: `next(iter(ops))`
        after deletions at a dict's front scans the deleted slots (about 0.4 us a call, amortized)."""
        ops = self._ops
        oldest = self._oldest
        for _ in range(64):
            found = ops.get(oldest)
            if found is None or not found.done:
                break
            del ops[oldest]
            oldest += 1
        self._oldest = oldest

    def _await_votes(self, seq: int) -> None:
        """Wait until every rank's segment count of each failed operation before #seq is in (see the
        class docstring); if some rank has not answered after the watchdog's time, give up on this
        communicator."""
        limit = settings.current().watchdog or 300.0
        deadline = time.monotonic() + limit
        eng = self._engine
        while any(k < seq for k in self._votes):
            if time.monotonic() > deadline:
                first = min(self._votes)
                self._break(first + 1, f"operation #{first} failed and not every rank answered within {limit:.0f} s")
                return
            if not eng.progress():
                os.sched_yield()

    # -- error notices -------------------------------------------------------------------------
    def notify_failure(self, info: OpInfo, error: BaseException) -> None:
        """Tell every other rank that this rank's part of operation `info` failed with `error` (the
        notice carries this rank's segment count: its vote)."""
        kind = "size" if isinstance(error, MessageSizeError) else "error"
        self._vote(info.seq, self.rank, info.plan.nseg)
        if info.seq not in self._voted:
            self._voted.add(info.seq)
            self._send_notice(_SEP.join((kind, str(info.seq), str(info.plan.nseg), info.collective, str(error))))

    def _learned(self, seq: int) -> None:
        """This rank learned that operation #seq failed: send its segment count, once."""
        if seq in self._voted or seq > self._seq or self.size == 1:
            return  # voted already, or votes when it starts #seq
        self._voted.add(seq)
        found = self._ops.get(seq)
        nseg = found.info.plan.nseg if found is not None else -1
        collective = found.info.collective if found is not None else ""
        self._vote(seq, self.rank, nseg)
        self._send_notice(_SEP.join(("count", str(seq), str(nseg), collective, "")))

    def _vote(self, seq: int, rank: int, nseg: int) -> None:
        if self._broken is not None and seq >= self._broken[0]:
            return
        votes = self._votes.setdefault(seq, {})
        votes[rank] = nseg
        if len(votes) < self.size:
            return
        del self._votes[seq]
        if len(set(votes.values())) > 1:
            counts = ", ".join(f"rank {r}: {n}" for r, n in sorted(votes.items()))
            self._break(seq + 1, f"operation #{seq} failed with segment counts that differ across ranks ({counts})")

    def _send_notice(self, text: str) -> None:
        if self._notice_req is None:
            return
        data = np.frombuffer(text.encode()[:NOTICE_BYTES], np.uint8).copy()
        for peer in range(self.size):
            if peer != self.rank:
                self._reqs.append(self._isend(data, peer, self.notice_tag))
                self._entries.append((_noop, -1, None, peer, self.notice_tag))

    def _post_notice_receive(self) -> None:
        """(Re)post the standing receive for error notices and keep its handle in `notice_slot`."""
        req = self._notice_req = self._irecv(self._notice_buf, MPI.ANY_SOURCE, self.notice_tag)
        self.notice_slot[0] = req.handle & _HANDLE_BITS

    def poll_notices(self) -> None:
        """Receive the error notices that have arrived (called on idle sweeps, engine lock held)."""
        status = self._notice_status
        while self._notice_req is not None and self._notice_req.Test(status):
            text = bytes(self._notice_buf[: status.Get_count(_BYTE)]).decode(errors="replace")
            source = status.Get_source()
            self._post_notice_receive()
            self._on_notice(source, text)

    def _on_notice(self, source: int, text: str) -> None:
        parts = text.split(_SEP, 4)
        if len(parts) != 5:  # pragma: no cover - not one of ours
            return
        kind, seq_text, nseg_text, collective, why = parts
        seq = int(seq_text)
        self._vote(seq, source, int(nseg_text))
        prefix = f"adaptcoll {collective}: "
        if kind == "count":
            error: BaseException = MessageSizeError(f"{prefix}failed on another rank (rank {source} says so)")
        else:
            cls = MessageSizeError if kind == "size" else CollectiveError
            why = why[len(prefix) :] if why.startswith(prefix) else why
            error = cls(f"{prefix}failed on rank {source}: {why.replace('this rank', f'rank {source}')}")
        found = self._ops.get(seq)
        if found is None:
            if seq > self._seq:  # this rank has not started it yet: it fails when it does
                if kind != "count" or seq not in self._early:
                    self._early[seq] = error
            else:
                self._learned(seq)
            return
        self._learned(seq)
        self._engine._fail(found, error, notify=False)

    def _break(self, first: int, why: str) -> None:
        """Mark operations #first on unusable (the ranks' tag sequences are out of step) and fail those
        running; every rank reaches the same verdict from the same counts."""
        if self._broken is not None and self._broken[0] <= first:
            return
        self._broken = (first, why)
        for seq in [k for k in self._votes if k >= first - 1]:
            del self._votes[seq]
        for seq, operation in list(self._ops.items()):
            if seq >= first and not operation.done:
                error = MessageSizeError(self._broken_text(operation.info.collective, why))
                self._engine._fail(operation, error, notify=False)

    def _broken_text(self, collective: str, why: str) -> str:
        return (
            f"adaptcoll {collective}: the adaptcoll collectives on {self.label} are out of step across ranks since "
            f"{why}; adaptcoll cannot serve this communicator any more (free it and use a new one)"
        )

    def close(self) -> None:
        """Cancel the standing notice receive (before the communicator is freed or MPI finalizes)."""
        req, self._notice_req = self._notice_req, None
        self.notice_slot[0] = 0
        self._engine.unlisten(self)
        if req is not None and not MPI.Is_finalized():
            try:
                req.Cancel()
                req.Wait()
                self._drain_notices()
            except MPI.Exception:  # pragma: no cover - MPI shutting down
                pass

    def _drain_notices(self) -> None:
        """Receive (and drop) the notices that arrived but were never read: left unmatched, they would
        match the standing receive of a later communicator that MPI gives the same context id (MPICH
        reuses them), which then failed its first operation with this one's error (found by
        `python -m adaptcoll.check` at 3 ranks: a Reduce raising "adaptcoll Bcast: failed on another rank")."""
        comm, status = self.comm, self._notice_status
        if comm is None:
            return
        while comm.Iprobe(MPI.ANY_SOURCE, self.notice_tag, status):
            comm.Recv(self._notice_buf, status.Get_source(), self.notice_tag)
