"""How a prepared call starts: its start function (fresh tags, the operation numbered, one protocol per
tree link on the Python engine, or one call into C on the compiled path), and for the compiled path the
blocking forms' start-and-wait in one (`run_blocking`), which keeps a small served call within a few
microseconds of MPI's own: the tag base, the operation's number and one two-argument call into C
(ac_call_run) that starts it and sweeps until it is done; objects for error messages and the watchdog
are made only if it is still running or failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..plans.dealing import Link
from ..plans.segments import SegmentPlan
from ..protocols.context import OpContext
from ..protocols.links import run_all, start_on_links
from ..protocols.operation import Operation
from ..runtime import compiled, settings
from ..runtime.engine import OpInfo, engine
from ..state.comm_state import CommState
from ..trace.attach import traced

__all__ = ["started"]

_Callback = Callable[[], None]
_current = settings.current
_ST_DONE = compiled.ST_DONE
_ST_FAILED = compiled.ST_FAILED
_NOTICE = compiled.NOTICE


def started(
    st: CommState,
    make_links: Callable[[], list[Link]],
    keep: Any,
    base: OpContext,
    start_one: Callable[[OpContext, Link, _Callback], None],
    collective: str,
    root: Optional[int],
    loads: Sequence[Optional[_Callback]] = (),
    stores: Sequence[Optional[_Callback]] = (),
    compiled_call: Optional[compiled.CompiledCall] = None,
) -> tuple[Callable[[], Operation], Optional[Callable[[], None]], Optional[Callable[[Operation], Operation]]]:
    """(start, run_blocking, restart) of a prepared call. `start()`: fresh tags, one protocol per tree
    link, tags tracked; `run_blocking()` (compiled path only, else None): start and wait in one, raising
    the operation's error; `restart(previous)` (compiled path only, else None): a persistent request's
    next start, which uses its previous run's operation again where it can (see `_compiled_starts`).

    The tree links are made at the first start (a `topo` tree needs the communicator's set-up, which
    every start waits for, see CommState.submit). `loads` fill scratch arrays from the user's buffers
    (and wait for device buffers' producers) before the protocols read or write them; `stores` write
    received scratch arrays back once the operation is done. The communicator's transport numbers the
    operation and owns what its protocols post (errors are the operation's own; the watchdog names it).
    """
    shape = base.plan
    links: list[list[Link]] = []
    fill = [f for f in loads if f is not None]
    finish = run_all([f for f in stores if f is not None])

    def start() -> Operation:
        if not links:
            links.append(make_links())
        for load in fill:
            load()
        plan = st.take_tags(shape)
        ctx, one = base.with_plan(plan), start_one
        if _current().trace:  # ADAPTCOLL_TRACE: tracing transport and backend for this operation
            ctx, one = traced(st, ctx, start_one)
        operation = Operation(keep)
        st.transport.start_operation(
            operation,
            collective,
            root,
            plan,
            lambda: start_on_links(links[0], keep, lambda link, done: one(ctx, link, done), finish, operation),
        )
        return st.track(plan, operation)

    if compiled_call is None:
        return start, None, None
    return _compiled_starts(st, compiled_call, links, make_links, keep, shape, fill, finish, collective, root, start)


def _compiled_engine() -> compiled.CompiledEngine:
    eng = engine()
    comp = eng.compiled
    if comp is None:
        lib = compiled.library()
        assert lib is not None, "a CompiledCall exists only where the library is loaded"
        comp = eng.compiled = compiled.engine_for(lib)
    return comp


def _ready(st: CommState, call: compiled.CompiledCall, links: list[Link]) -> compiled.CompiledEngine:
    """The compiled engine, with `call`'s C side made and bound (at its first start)."""
    comp = _compiled_engine()
    if not call.bound:
        if not call.handle:
            call.set_links(links, comp.lib)
        transport = st.transport
        assert transport.comm is not None
        comp.bind(call, transport.comm.handle, call.tag_space, transport.notice_slot)
    return comp


def _compiled_starts(
    st: CommState,
    call: compiled.CompiledCall,
    links: list[list[Link]],
    make_links: Callable[[], list[Link]],
    keep: Any,
    shape: SegmentPlan,
    fill: Sequence[_Callback],
    finish: Optional[_Callback],
    collective: str,
    root: Optional[int],
    python_start: Callable[[], Operation],
) -> tuple[Callable[[], Operation], Callable[[], None], Callable[[Operation], Operation]]:
    """(start, run_blocking) of a call on the compiled path. `start()` takes the tags, numbers the
    operation and starts it with one call into C (ac_call_start); a traced call runs the Python
    protocols instead (`python_start`). `run_blocking()` is the blocking forms' start-and-wait (see the
    module docstring): if the call is still running after RUN_BUDGET seconds of idle sweeps in C, it
    becomes an ordinary started operation that the Python engine's loop waits for; a call that must
    queue behind its communicator's set-up, or that is traced, takes the ordinary start() and wait."""
    eng = engine()
    lock = eng.lock
    transport = st.transport
    space = shape.tag_space
    ntags = shape.ntags
    finished = Operation()  # what the transport remembers of a run that finished in C (for late notices)
    finished.info = OpInfo(collective, root, 0, shape, transport)
    finished.complete()
    ran: list[Any] = []  # [the compiled engine, ac_call_run, the call's C handle, ac_call_start, its ops] once bound

    def bind() -> None:
        if not links:
            links.append(make_links())
        comp = _ready(st, call, links[0])
        ran.extend((comp, comp.run_call, call.handle, comp.start_call, comp.ops))

    def start() -> Operation:
        if _current().trace:
            return python_start()
        if not ran:
            bind()
        for load in fill:
            load()
        operation = Operation(keep)
        tag_base = common_tags()
        if tag_base < 0:  # tags to wait for, or a vote: the ordinary steps
            tag_base = st.take_tag_base(ntags, space)
            if transport.begin(operation, collective, root, shape, tag_base):  # numbered (else failed at once)
                ran[0].start(call, tag_base, space, 0, operation, _completion(operation, finish))
            return st.track_tags(ntags, operation)
        operation.info = OpInfo(collective, root, transport.number(operation), shape, transport, tag_base)
        return launch(operation, tag_base)

    # The common case of a start, inline (CommState.take_tag_base, MPITransport.begin, CompiledEngine.start
    # and CommState.track_tags with no tags to wait for and nothing to vote on): a small nonblocking or
    # persistent start is mostly Python calls, about 0.1-0.3 us each.
    def common_tags() -> int:
        """The next tag base when the common case applies (finished operations' tags reclaimed, as
        CommState._reclaim), else -1: tags must be waited for, or a failure is being voted on."""
        live = st._live
        while live and live[0][1].done:
            st._live_tags -= live.popleft()[0]
        if (live and st._live_tags + ntags > space) or not transport.settled:
            return -1
        tag_base = st.next_tag % space
        st.next_tag = (tag_base + ntags) % space
        return tag_base

    def launch(operation: Operation, tag_base: int, kept: Optional[list[Any]] = None) -> Operation:
        """Start the numbered `operation` in C (ac_call_start), with the compiled engine tracking it and the
        communicator its tags. `kept` (a persistent request's, `restart`): [operation, its entry in the
        engine's ops, its entry in the live tags] of the last restart, reused when it is this operation's
        (so a request's runs make them once), else made and kept there."""
        h = ran[3](ran[2], tag_base)
        if not h:
            operation.done = True
            raise MemoryError("adaptcoll: out of memory starting a compiled operation")
        if kept is not None and kept[0] is operation:
            entry, tags = kept[1], kept[2]
        else:
            entry = (operation, operation.complete if finish is None else _completion(operation, finish), call)
            tags = (ntags, operation)
            if kept is not None:
                kept[:] = (operation, entry, tags)
        ran[4][h] = entry
        operation.handle = h
        st._live.append(tags)
        st._live_tags += ntags
        return operation

    def run_blocking() -> None:
        lock.acquire()  # (acquire / release: about 0.1 us less than `with`)
        try:
            if st._step_running or st._steps or st._queued or not transport.settled or _current().trace:
                operation = st.submit(start)  # queued, votes awaited, or traced
            else:
                if not ran:
                    bind()
                for load in fill:
                    load()
                tag_base = st.take_tag_base(ntags, space)
                seq = transport.number(finished)
                state = ran[1](ran[2], tag_base)
                notice = state >= _NOTICE  # an error notice waits: received once this call is registered
                if notice:
                    state -= _NOTICE
                if state == _ST_DONE:
                    if finish is not None:
                        finish()
                    if notice:
                        transport.poll_notices()
                    return
                operation = _unfinished(st, call, keep, shape, tag_base, seq, state, finish, collective, root)
                if notice:  # it may fail this very call (another rank's part of it failed)
                    transport.poll_notices()
        finally:
            lock.release()
        if not operation.done:
            eng.wait_for(lambda: operation.done)
        if operation.error is not None:
            raise operation.error

    kept: list[Any] = [None, None, None]  # the last restart's operation and its entries (see `launch`)

    def restart(previous: Operation) -> Operation:
        """A persistent request's next start: `previous`, its last run's operation (done), numbered and
        started again in the common case (set-up done, nothing queued, no tags to wait for, no vote, a
        run that ended well, no trace), which makes neither an Operation nor an OpInfo, and the engine's
        entries for it only at its first restart; else `start()` through the set-up queue. The transport
        keeps the finished placeholder under the old number, for notices about that run that arrive
        later."""
        lock.acquire()
        try:
            info = previous.info
            if (
                st._step_running
                or st._steps
                or st._queued
                or not ran
                or fill
                or previous.error is not None
                or previous.on_done is not None
                or type(info) is not OpInfo
                or info.plan is not shape  # (a run of the Python protocols: a traced start)
                or info.transport is not transport
                or _current().trace
            ):
                return st.submit(start)
            tag_base = common_tags()
            if tag_base < 0:
                return st.submit(start)
            info.seq = transport.renumber(previous, info.seq, finished)
            info.tag_base = tag_base
            info.reported = False
            previous.done = False
            previous.keep = keep
            return launch(previous, tag_base, kept)
        finally:
            lock.release()

    return start, run_blocking, restart


def _unfinished(
    st: CommState,
    call: compiled.CompiledCall,
    keep: Any,
    shape: SegmentPlan,
    tag_base: int,
    seq: int,
    state: int,
    finish: Optional[_Callback],
    collective: str,
    root: Optional[int],
) -> Operation:
    """A run that ac_call_run left running or failed, as an ordinary operation: numbered `seq` (the
    transport now remembers it instead of the finished placeholder), its tags tracked, adopted by the
    compiled engine or failed (the other ranks are told)."""
    eng = engine()
    comp = _compiled_engine()
    if state < 0:
        raise MemoryError("adaptcoll: out of memory starting a compiled operation")
    handle = comp.lib.ac_call_last(call.handle)
    operation = Operation(keep)
    transport = st.transport
    operation.info = OpInfo(collective, root, seq, shape, transport, tag_base)
    transport.remember(seq, operation)
    if state == _ST_FAILED:
        error = comp.error(handle, operation)
        comp.release(handle)
        eng._fail(operation, error)
    else:
        comp.adopt(handle, call, operation, _completion(operation, finish))
        st.track_tags(shape.ntags, operation)
    return operation


def _completion(operation: Operation, finish: Optional[_Callback]) -> _Callback:
    """What the compiled engine calls once `operation` has finished here: its stores (`finish`), then it
    completes (the bound method itself when there is nothing to store)."""
    if finish is None:
        return operation.complete

    def done() -> None:
        try:
            finish()
        finally:
            operation.complete()

    return done
