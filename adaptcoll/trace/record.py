"""Recording: a per-process buffer of segment events, and the tracing transport and backend that fill it.

Tracing never touches the protocols or the engine's hot path. The decision layer, only when tracing is
on, gives an operation an `OpContext` whose transport and backend are the tracing versions below: they
record each post and completion (with the peer, the segment, the bytes) and each fold, then call the
real ones. The segment of a message is its tag's offset in the operation's tag range (the plan maps
segment s to tag base + s). A fold is attributed to the segment and peer whose arrival (or polled fold)
is being handled when the fold starts: protocols fold only from those callbacks. Idle time comes from
one engine counter (`idle_sweeps`): when it moved since the operation's previous event, an IDLE record
covers the gap. No MPI here, so the loopback world can be traced too.

Memory is bounded: events are buffered as tuples and written as 29-byte records whenever the buffer
holds `BUFFER_EVENTS`, and at exit. A file holds at most `MAX_EVENTS` events and `MAX_OPERATIONS`
operations (about 61 MiB + 3 MiB); after that, new operations are not traced and further events are
dropped and counted (the merge tool warns).
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..backends.base import ArrayBackend, ReduceOp
from ..plans.segments import SegmentPlan
from ..protocols.context import OpContext
from ..runtime.transport import Callback, Poll, Transport
from . import format as fmt

__all__ = [
    "BUFFER_EVENTS",
    "MAX_EVENTS",
    "MAX_OPERATIONS",
    "Recorder",
    "OpTrace",
    "TracingTransport",
    "TracingBackend",
    "traced_context",
    "recorder",
    "flush",
    "close",
]

BUFFER_EVENTS = 1 << 16
"""Events held in memory before they are written out (a few MB of tuples)."""
MAX_EVENTS = 1 << 21
"""Events one process writes to one trace file at most (29 bytes each: 58 MiB)."""
MAX_OPERATIONS = 1 << 16
"""Operations one process traces into one file at most (48 bytes each)."""

_now = time.perf_counter_ns  # CLOCK_MONOTONIC on Linux


class Recorder:
    """One process's trace file in one directory: buffered events, operation headers and metadata.

    `process` is this process's description (its COMM_WORLD rank at least); the file is created (and an
    older one of the same rank replaced) at once, so a run that traces anything leaves a readable file.
    """

    def __init__(self, directory: str | Path, process: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / fmt.file_name(int(process["world_rank"]))
        self.events: list[tuple[int, int, int, int, int, int]] = []
        self._operations: list[tuple[int, ...]] = []
        self._comms: list[dict[str, Any]] = []
        self._names: dict[str, int] = {}
        self._new_names: list[str] = []
        self._lock = threading.Lock()
        self.written = 0
        self.dropped = 0
        self.operations = 0
        self.comms = 0
        with open(self.path, "wb") as f:
            fmt.write_header(f)
            fmt.write_chunk(f, b"M", json.dumps({"process": process}).encode())

    @property
    def full(self) -> bool:
        """Whether the file reached its bound: new operations are then not traced."""
        return self.written + len(self.events) >= MAX_EVENTS or self.operations >= MAX_OPERATIONS

    def add_comm(self, entry: dict[str, Any]) -> int:
        """Register a communicator (members, clock offset, ...); returns its index in this file."""
        index = self.comms
        self.comms += 1
        self._comms.append(dict(entry, index=index))
        return index

    def begin(self, comm: int, comm_op: int, name: str, plan: SegmentPlan) -> int:
        """Register an operation; returns its process-wide id (the `op` of its events)."""
        key = self._names.get(name)
        if key is None:
            key = self._names[name] = len(self._names)
            self._new_names.append(name)
        op = self.operations
        self.operations += 1
        self._operations.append(
            (op, comm, comm_op, key, plan.nseg, plan.seg_count, plan.count, plan.tag_base, plan.tag_space)
        )
        return op

    def spill(self) -> None:
        """The buffer is full: write it out (called from the recording path)."""
        self.flush()

    def flush(self) -> None:
        """Append what is buffered to the file (events beyond MAX_EVENTS are counted as dropped)."""
        with self._lock:
            n = len(self.events)
            batch = self.events[:n]
            del self.events[:n]
            room = max(0, MAX_EVENTS - self.written)
            if len(batch) > room:
                self.dropped += len(batch) - room
                batch = batch[:room]
            ops, self._operations = self._operations, []
            comms, self._comms = self._comms, []
            names, self._new_names = self._new_names, []
            with open(self.path, "ab") as f:
                if batch:
                    fmt.write_chunk(f, b"E", _records(batch).tobytes())
                    self.written += len(batch)
                if ops:
                    fmt.write_chunk(f, b"O", np.array(ops, dtype=fmt.OPERATION).tobytes())
                meta = {"comms": comms, "names": names, "dropped": self.dropped, "written": self.written}
                fmt.write_chunk(f, b"M", json.dumps(meta).encode())


def _records(batch: list[tuple[int, int, int, int, int, int]]) -> np.ndarray:
    """Event tuples as EVENT records (through one int64 array: 3x faster than from the tuples)."""
    flat = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int64, count=6 * len(batch)).reshape(-1, 6)
    out = np.empty(len(batch), fmt.EVENT)
    for i, name in enumerate(fmt.EVENT.names or ()):
        out[name] = flat[:, i]
    return out


class OpTrace:
    """What one traced operation records on one rank: events tagged with its id, peers as world ranks."""

    __slots__ = ("id", "world", "received", "current", "_rec", "_events", "_base", "_space", "_idle", "_seen", "_last")

    def __init__(
        self, rec: Recorder, op_id: int, world: Sequence[int], plan: SegmentPlan, idle_source: Any = None
    ) -> None:
        self.id = op_id
        self.world = world  # communicator rank -> COMM_WORLD rank
        self.received: set[int] = set()
        self.current = (-1, -1)  # (segment, peer) of the completion being handled: what a fold belongs to
        self._rec = rec
        self._events = rec.events
        self._base = plan.tag_base
        self._space = plan.tag_space
        self._idle = idle_source
        self._seen = idle_source.idle_sweeps if idle_source is not None else 0
        self._last = _now()
        self._events.append((self._last, op_id, fmt.OP_START, -1, -1, 0))

    def segment(self, tag: int) -> int:
        """The segment a tag carries in this operation."""
        return (tag - self._base) % self._space

    def event(self, kind: int, peer: int, seg: int, nbytes: int) -> None:
        """Record one event now (and, first, the idle sweeps since the previous one)."""
        t = _now()
        idle = self._idle
        if idle is not None and idle.idle_sweeps != self._seen:
            swept = idle.idle_sweeps
            self._events.append((self._last, self.id, fmt.IDLE, -1, -1, swept - self._seen))
            self._seen = swept
        self._last = t
        events = self._events
        events.append((t, self.id, kind, peer, seg, nbytes))
        if len(events) >= BUFFER_EVENTS:
            self._rec.spill()

    def done_callback(self, done: Callback) -> Callback:
        """`done` preceded by an OP_END record (one per tree link; the operation ends at the last)."""

        def finished() -> None:
            self.event(fmt.OP_END, -1, -1, 0)
            done()

        return finished


class TracingTransport:
    """A Transport that records every post and completion of one operation, then calls `inner`."""

    def __init__(self, inner: Transport, op: OpTrace) -> None:
        self._inner = inner
        self._op = op
        self.rank = inner.rank
        self.size = inner.size

    def isend(self, buf: Any, dest: int, tag: int, on_done: Callback, synchronous: bool = False) -> None:
        op = self._op
        seg, peer, nbytes = op.segment(tag), op.world[dest], buf.nbytes
        op.event(fmt.FORWARD if seg in op.received else fmt.SEND_POST, peer, seg, nbytes)

        def sent() -> None:
            op.event(fmt.SEND_DONE, peer, seg, nbytes)
            on_done()

        self._inner.isend(buf, dest, tag, sent, synchronous)

    def irecv(self, buf: Any, source: int, tag: int, on_done: Callback) -> None:
        op = self._op
        seg, peer, nbytes = op.segment(tag), op.world[source], buf.nbytes
        op.event(fmt.RECV_POST, peer, seg, nbytes)

        def arrived() -> None:
            op.event(fmt.RECV_DONE, peer, seg, nbytes)
            op.received.add(seg)
            op.current = (seg, peer)
            on_done()

        self._inner.irecv(buf, source, tag, arrived)

    def watch(self, poll: Poll, on_done: Callback) -> None:
        op = self._op
        current = op.current

        def fired() -> None:
            op.current = current
            on_done()

        self._inner.watch(poll, fired)

    def __getattr__(self, name: str) -> Any:  # anything else a transport offers (untraced)
        return getattr(self._inner, name)


class TracingBackend(ArrayBackend):
    """An ArrayBackend that records fold start and end (polled folds end when their poll says so)."""

    def __init__(self, inner: ArrayBackend, op: OpTrace) -> None:
        self._inner = inner
        self._op = op
        self.name = inner.name

    def empty(self, count: int, dtype: Any) -> Any:
        return self._inner.empty(count, dtype)

    def copy(self, dst: Any, src: Any) -> None:
        self._inner.copy(dst, src)

    def supports(self, op: ReduceOp, dtype: Any) -> bool:
        return self._inner.supports(op, dtype)

    def combine(self, op: ReduceOp, lower: Any, higher: Any, out: Any) -> Optional[Poll]:
        trace = self._op
        seg, peer = trace.current
        nbytes = out.nbytes
        trace.event(fmt.FOLD_START, peer, seg, nbytes)
        poll = self._inner.combine(op, lower, higher, out)
        if poll is None:
            trace.event(fmt.FOLD_END, peer, seg, nbytes)
            return None
        inner_poll = poll

        def folded() -> bool:
            if not inner_poll():
                return False
            trace.event(fmt.FOLD_END, peer, seg, nbytes)
            return True

        return folded

    def __getattr__(self, name: str) -> Any:  # anything else a backend offers (streams, ...)
        return getattr(self._inner, name)


def traced_context(ctx: OpContext, op: OpTrace) -> OpContext:
    """`ctx` with the tracing transport and backend of `op`."""
    return dataclasses.replace(
        ctx, transport=TracingTransport(ctx.transport, op), backend=TracingBackend(ctx.backend, op)
    )


_recorders: dict[Path, Recorder] = {}
_registry_lock = threading.Lock()


def recorder(directory: str, process: Callable[[], dict[str, Any]]) -> Recorder:
    """The recorder of `directory` in this process (created on first use, written at exit)."""
    key = Path(directory).expanduser()
    found = _recorders.get(key)
    if found is None:
        with _registry_lock:
            found = _recorders.get(key)
            if found is None:
                if not _recorders:
                    atexit.register(_flush_at_exit)
                found = _recorders[key] = Recorder(key, process())
    return found


def flush() -> None:
    """Write every buffered event of this process to its trace file(s) now (also done at exit)."""
    for rec in list(_recorders.values()):
        rec.flush()


def close(directory: str | Path) -> None:
    """Write out and forget the recorder of `directory` (a later traced operation starts a new file)."""
    with _registry_lock:
        rec = _recorders.pop(Path(directory).expanduser(), None)
    if rec is not None:
        rec.flush()


def _flush_at_exit() -> None:
    for rec in list(_recorders.values()):
        try:
            rec.flush()
        except OSError as exc:  # the directory went away: say so, exit normally
            sys.stderr.write(f"adaptcoll.trace: could not write {rec.path}: {exc}\n")
