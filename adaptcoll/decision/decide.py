"""The decision layer: serve one call with adaptcoll's protocols, or hand it to native MPI.

`bcast`, `reduce` and `allreduce` return either a `Prepared` operation (buffers parsed, trees built,
segment plan sized, protocols ready to start) or a typed `Native` value. Every form of a collective
(blocking, nonblocking, persistent, pickled) asks here, so all of them decide alike.

A decision depends only on arguments MPI requires to match across ranks (and on the settings, which
must match too, and the communicator's tuning, the same on every rank): buffers count by their type
signature (element type and count, adaptcoll.buffers), never by the form a rank used. Apart from the
tuning exchange of a communicator's first blocking call (made before any buffer is looked at), it is
made before any collective set-up (the private Idup, topology discovery), so ranks never disagree
about whether to communicate. A buffer mpi4py would reject on
some rank (read-only or non-contiguous) does not change the decision: that rank takes part with
scratch memory and raises mpi4py's error afterwards (`Prepared.error`).

Device memory: the three decisions pass every `Native` they return through `device.route_native`
(the `_device_routed` decorator), so when MPI is not CUDA-aware a device buffer is never handed to MPI:
the call is staged through pinned host memory instead (a `Prepared` whose `native_reason` says so).
Device buffers use their own threshold (`device_native_below`), not the host ones.

The per-call configuration (serve or native, algorithm, segments, roots, windows) comes from one place,
`CommTuning.choose` (adaptcoll.tune): the communicator's tuning table, exchanged by its first blocking
call, or before that the provisional shipped rule; explicit settings win field by field.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
from mpi4py import MPI

from .. import buffers, device
from ..backends.base import ArrayBackend, ReduceOp
from ..plans import forests
from ..plans.dealing import Link, tree_links
from ..plans.segments import SegmentPlan
from ..protocols.algorithms import ALLREDUCE_ALGORITHMS, AllreduceAlgorithm
from ..protocols.allreduce import Allreduce
from ..protocols.bcast import Bcast
from ..protocols.context import OpContext
from ..protocols.operation import Operation
from ..protocols.reduce import Reduce
from ..runtime import compiled, settings
from ..runtime.native import (
    ALGORITHM_NATIVE,
    BELOW_THRESHOLD,
    INVALID_ARGUMENTS,
    OP_NOT_SERVED,
    OP_TYPE_NOT_SERVED,
    USER_OP_DERIVED,
    Kind,
    Native,
)
from ..state import shm
from ..state.comm_state import HOST_BACKEND, CommState, comm_state
from ..tune.choose import comm_tuning, explicitly_native
from ..tune.config import CallConfig
from ..tune.policy import CommTuning
from . import node as shm_decide
from . import ops
from .starts import started as _started

__all__ = [
    "Prepared",
    "Decision",
    "bcast",
    "reduce",
    "allreduce",
    "root_ok",
    "in_place_send",
    "in_place_send_at_root",
]

_IN_PLACE = MPI.IN_PLACE
_Callback = Callable[[], None]


@dataclass(frozen=True)
class Prepared:
    """A call adaptcoll serves, decided and set up on this rank: each `start()` takes fresh tags and
    starts it (once for a one-shot call, once per Start() of a persistent request).
    `error`: a buffer of this rank was bad (the root's recvbuf, a read-only or non-contiguous buffer):
    the rank still takes part with scratch memory, so the others complete, then this is raised.
    `native_reason`: set for a native call that adaptcoll runs itself (device memory staged through host
    memory); it is counted as native with this reason. `run`: the blocking form of such a call, which
    blocking collectives use instead of start() + wait. `note`: why the call runs on the point-to-point
    trees although the shm node level was asked for (counted in stats())."""

    start: Callable[[], Operation]
    error: Optional[BaseException] = None
    native_reason: Optional[str] = None
    run: Optional[Callable[[], None]] = None
    note: Optional[str] = None
    config: Optional[CallConfig] = None
    engine: Optional[str] = None
    """Which engine runs the protocols ("compiled" or "python"; None: no protocols of adaptcoll's)."""
    run_blocking: Optional[Callable[[], None]] = None
    """A served call's start and wait in one, for the blocking forms (the compiled path: one call into C
    starts it and sweeps until it is done); None: they use start() and wait."""
    state: Optional[CommState] = None
    """The communicator's state whose set-up queue `start` goes through (CommState.submit), so a start
    need not look it up (an MPI attribute lookup); None: look it up."""
    restart: Optional[Callable[[Operation], Operation]] = None
    """A persistent request's next start on the compiled path, given its previous run's operation (done),
    which it numbers and starts again where it can instead of making a new one; None: `start`."""
    tallies: dict[str, list[int]] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)
    """Its stats() counters by the name it was called under (counters.tally), made at its first count:
    a remembered decision counts its repeats without building `record`'s key."""


Decision = Union[Prepared, Native]
_Decide = Callable[..., Decision]


def _device_routed(collective: str) -> Callable[[_Decide], _Decide]:
    """Pass every Native decision through device.route_native (the rule for device memory)."""

    def wrap(decide_call: _Decide) -> _Decide:
        @functools.wraps(decide_call)
        def routed(comm: MPI.Intracomm, *args: Any, **kwargs: Any) -> Decision:
            decision = decide_call(comm, *args, **kwargs)
            for spec in args[:1] if collective == "bcast" else args[:2]:
                note = device.interface_note(spec)
                if note is not None:  # stats() says what memory a CUDA interface was
                    joined = note if decision.note is None else f"{decision.note}; {note}"
                    decision = dataclasses.replace(decision, note=joined)
            if not isinstance(decision, Native):
                return decision
            route = device.route_native(collective, decision, comm, args)
            if isinstance(route, Native):
                return route
            return Prepared(route.start, native_reason=device.staged_reason(decision), run=route.run)

        return routed

    return wrap


# -- argument helpers shared by every form --------------------------------------------------------
def root_ok(root: Any, size: int) -> bool:
    """Whether `root` is a valid root rank (an int, not a bool, in range)."""
    return (type(root) is int and 0 <= root < size) or (
        isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= int(root) < size
    )


def in_place_send(sendbuf: Any, recvbuf: Any) -> Any:
    """Allreduce's sendbuf for native MPI: `sendbuf is recvbuf` means IN_PLACE (as the next mpi4py treats it)."""
    return _IN_PLACE if sendbuf is recvbuf else sendbuf


def in_place_send_at_root(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, root: Any) -> Any:
    """Reduce's sendbuf for native MPI: at the root, `sendbuf is recvbuf` means IN_PLACE."""
    if sendbuf is recvbuf and sendbuf is not None and root == comm.Get_rank():
        return _IN_PLACE
    return sendbuf


def _parse(spec: Any, writable: bool) -> tuple[Union[buffers.Message, Native], bool]:
    """(Message or Native, whether it is device memory served through CuPy). adaptcoll.device says what
    memory the buffer is; only host memory reaches adaptcoll.buffers."""
    if type(spec) is not np.ndarray and device.is_device_spec(spec):  # straight to the device parser
        return device.parse_device(spec, writable), True
    msg = buffers.parse(spec, writable)
    if isinstance(msg, Native) and msg.kind is Kind.DEVICE:
        return device.parse_device(spec, writable), True
    return msg, False


def _state_for(comm: MPI.Intracomm, algorithm: str) -> CommState:
    """The communicator's state, with the set-up steps this call needs added (the private Idup, and
    topology discovery for `topo` trees without ADAPTCOLL_TOPOLOGY). Nothing here blocks: the steps
    complete asynchronously and every start waits for them (CommState.submit).

    Called only once every rank has decided to serve the call, so ranks that pass the same message in
    different legal forms still add the same steps.
    """
    state = comm_state(comm)
    if algorithm.startswith("topo"):
        state.require_topology()
    return state


def _call(tuning: CommTuning, collective: str, nbytes: int, on_device: bool) -> CallConfig:
    """The configuration of this call (CommTuning.choose). Device memory keeps its own threshold
    (`device_native_below`): whether to serve it is not a host band's question."""
    call = tuning.choose(collective, nbytes, on_device)
    if on_device:
        serve = nbytes >= settings.current().device_threshold(collective)
        if serve != call.serve:
            call = dataclasses.replace(call, serve=serve, native=None if serve else BELOW_THRESHOLD)
    return call


NO_FOREST_AT_ROOT = Native("forest schedule has no forest rooted at the call's root")
"""A `forest:PATH` Bcast/Reduce whose root the schedule has no forest for: native MPI, counted in stats()."""


def _forest_check(algorithm: str, size: int, root: Optional[int]) -> Optional[Native]:
    """For a `forest:PATH` setting: raise the schedule's error (unreadable, or made for another number
    of ranks: the same on every rank, before anything is sent); NO_FOREST_AT_ROOT when it cannot serve
    this root (as other algorithms that cannot serve a call, e.g. ring with a non-commutative op)."""
    if not forests.is_forest(algorithm):
        return None
    if root is None:
        forests.schedule(algorithm, size)
        return None
    return None if forests.has_root(algorithm, size, root) else NO_FOREST_AT_ROOT


def _ordered_note(trees: Sequence[Any]) -> Optional[str]:
    """stats()'s note when a non-commutative op runs the rank-ordered tree instead of a schedule's forest."""
    if trees and trees[0].kind != forests.KIND:
        return "forest: non-commutative op on the rank-ordered tree (the forest does not fold in rank order)"
    return None


def _fold_op(
    msg: buffers.Message, op: MPI.Op, call: CallConfig, backend: ArrayBackend = HOST_BACKEND
) -> Union[ReduceOp, Native]:
    """The ReduceOp adaptcoll folds `op` with on msg's type, else why it goes native."""
    if not call.serve:
        return call.native or BELOW_THRESHOLD
    rop = ops.reduce_op(op, msg.datatype)
    if rop is None:
        return OP_NOT_SERVED
    if rop.user_fold is not None and msg.derived is not None:
        # a user op sees the datatype it was given (MPI requires the same one on every rank of a reduction)
        return USER_OP_DERIVED
    if not backend.supports(rop, msg.array.dtype):
        return OP_TYPE_NOT_SERVED
    return rop


def _compiled_call(
    kind: int, local: Any, target: Any, base: OpContext, on_device: bool, op_name: str = ""
) -> Optional[compiled.CompiledCall]:
    """The compiled progress path's share of a host call it serves (see compiled.prepare), else None."""
    if on_device or settings.current().trace:
        return None
    return compiled.prepare(kind, local, target, base.plan, base, op_name)


def _engine_name(call: Optional[compiled.CompiledCall]) -> str:
    return "python" if call is None else "compiled"


def _node_level(
    st: CommState, algorithm: str, on_device: bool, blocking: bool, prepare: Callable[[shm.NodeLevel], Any]
) -> tuple[Optional[Callable[[], Operation]], Optional[str], str]:
    """For a `shm` / `topo:intra=shm` setting: (start, None, algorithm) when the node level serves the
    call, else (None, why not, the point-to-point tree setting to use). Only a blocking call sets the
    node level up (collectively), so nonblocking and persistent calls never block (adaptcoll.state.shm)."""
    if not shm.uses_shm(algorithm):
        return None, None, algorithm
    if on_device:
        return None, "shm: device memory (host memory only)", settings.point_to_point_tree(algorithm)
    level, note = shm.node_level(st, blocking)
    if level is not None:
        started = prepare(level)
        if not isinstance(started, str):
            return started, None, algorithm
        note = started
    return None, note, settings.point_to_point_tree(algorithm)


# -- broadcast ------------------------------------------------------------------------------------
@_device_routed("bcast")
def bcast(comm: MPI.Intracomm, buf: Any, root: Any, blocking: bool = False) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up a broadcast (`blocking`: may
    set up the communicator's tuning and the shared-memory node level)."""
    if not root_ok(root, comm.Get_size()):
        return INVALID_ARGUMENTS
    if explicitly_native("bcast"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm, blocking)  # before any buffer is looked at: a blocking first call sets it up
    root = int(root)
    rank = comm.Get_rank()
    msg, on_device = _parse(buf, writable=rank != root)
    if isinstance(msg, Native):
        return msg
    nbytes = msg.nbytes
    call = _call(tuning, "bcast", nbytes, on_device)
    if not call.serve:
        return call.native or BELOW_THRESHOLD
    unserved = _forest_check(call.algorithm, comm.Get_size(), root)
    if unserved is not None:
        return unserved
    st = _state_for(comm, call.algorithm)
    transport, backend, _ = st.kit(on_device)
    itemsize = msg.array.itemsize
    data = msg.array.view(np.uint8)
    loads, stores = ([msg.load], []) if rank == root else ([], [msg.store])
    if on_device:  # every start waits for the user's stream: it may write the buffer between starts
        loads.insert(0, device.producers_wait((buf,)))
    started, note, algorithm = _node_level(
        st,
        call.algorithm,
        on_device,
        blocking,
        lambda lv: shm_decide.bcast(st, lv, call.algorithm, data, root, buf, (loads, stores)),
    )
    if started is not None:
        return Prepared(started, msg.error, config=call, state=st)
    segment = max(itemsize, call.segment_size // itemsize * itemsize)
    shape = st.plan_shape(nbytes, 1, segment, max_segments=call.max_segments)
    base = OpContext(transport, backend, shape, call.send_window, call.recv_window, call.sync_sends)

    def make_links() -> list[Link]:
        return tree_links(st.trees(algorithm, root), rank, shape.nseg)

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        Bcast(ctx, link.parent, link.children, data, link.segs, done).start()

    fast = _compiled_call(compiled.BCAST, data, None, base, on_device)
    started_trees, run, again = _started(st, make_links, buf, base, start_one, "Bcast", root, loads, stores, fast)
    return Prepared(
        started_trees,
        msg.error,
        note=note,
        config=call,
        engine=_engine_name(fast),
        run_blocking=run,
        state=st,
        restart=again,
    )


# -- reduce ---------------------------------------------------------------------------------------
@_device_routed("reduce")
def reduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, root: Any, blocking: bool = False) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up a reduce (`blocking`: may set
    up the communicator's tuning and the shared-memory node level)."""
    size = comm.Get_size()
    if not isinstance(op, MPI.Op) or not root_ok(root, size):
        return INVALID_ARGUMENTS
    if explicitly_native("reduce"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm, blocking)  # before any buffer is looked at: a blocking first call sets it up
    root = int(root)
    rank = comm.Get_rank()
    is_root = rank == root
    in_place = is_root and (sendbuf is _IN_PLACE or (sendbuf is recvbuf and recvbuf is not None))
    if in_place:
        msg, on_device = _parse(recvbuf, writable=True)
    elif sendbuf is _IN_PLACE:
        return INVALID_ARGUMENTS
    else:
        msg, on_device = _parse(sendbuf, writable=False)
    if isinstance(msg, Native):
        return msg
    call = _call(tuning, "reduce", msg.nbytes, on_device)
    rop = _fold_op(msg, op, call)
    if isinstance(rop, Native):
        return rop
    ordered_needed = not rop.commutative
    unserved = _forest_check(call.algorithm, size, root)
    if unserved is not None:
        return unserved
    if ordered_needed and root != 0:
        return Native("non-commutative op with root != 0")
    st = _state_for(comm, call.algorithm)
    transport, backend, pools = st.kit(on_device)
    error = msg.error
    loads, stores = [msg.load], []
    if on_device:  # every start waits for the user's stream (as in bcast)
        loads.insert(0, device.producers_wait((sendbuf, recvbuf)))
    if in_place:
        target = local = msg.array
        stores.append(msg.store)
    elif is_root:
        target, store, recv_error = _root_target(recvbuf, msg, on_device, backend)
        stores.append(store)
        error = recv_error or error  # mpi4py reads the root's recvbuf first
        local = msg.array
    else:
        target, local = None, msg.array
    started, note, algorithm = _node_level(
        st,
        call.algorithm,
        on_device,
        blocking,
        lambda lv: shm_decide.reduce(
            st, lv, call.algorithm, local, target, rop, root, (sendbuf, recvbuf), (loads, stores)
        ),
    )
    if started is not None:
        return Prepared(started, error, config=call, state=st)
    dtype = msg.array.dtype
    shape = st.plan_shape(msg.count, dtype.itemsize, call.segment_size, max_segments=call.max_segments)

    if ordered_needed and note is None and forests.is_forest(algorithm):
        note = _ordered_note(st.trees(algorithm, root, rank_ordered=True))

    def make_links() -> list[Link]:
        return tree_links(st.trees(algorithm, root, rank_ordered=ordered_needed), rank, shape.nseg)

    base = OpContext(
        transport,
        backend,
        shape,
        call.send_window,
        call.recv_window,
        call.sync_sends,
        ordered_needed or call.reproducible,
        pools(dtype),
    )

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        Reduce(ctx, link.parent, link.children, local, target, rop, link.segs, done).start()

    fast = (
        None if rop.user_fold is not None else _compiled_call(compiled.REDUCE, local, target, base, on_device, rop.name)
    )
    started_trees, run, again = _started(
        st, make_links, (sendbuf, recvbuf), base, start_one, "Reduce", root, loads, stores, fast
    )
    engine = _engine_name(fast)
    return Prepared(
        started_trees, error, note=note, config=call, engine=engine, run_blocking=run, state=st, restart=again
    )


def _root_target(
    recvbuf: Any, msg: buffers.Message, on_device: bool, backend: ArrayBackend
) -> tuple[Any, Optional[_Callback], Optional[BaseException]]:
    """The root's result array and the step that writes it back (None: nothing to write), or a
    scratch array plus the error mpi4py would raise for `recvbuf`."""
    found = _recvbuf_error(recvbuf, msg, on_device)
    if isinstance(found, BaseException):
        return backend.empty(msg.count, msg.array.dtype), None, found
    return found.array, found.store, found.error


def _recvbuf_error(recvbuf: Any, msg: buffers.Message, on_device: bool) -> Union[buffers.Message, BaseException]:
    """The root's parsed recvbuf (its `error` set for a buffer mpi4py rejects: read-only, non-contiguous),
    or the error mpi4py would raise for it."""
    if recvbuf is None or recvbuf is _IN_PLACE:
        return TypeError("message: expecting buffer or list/tuple")
    rmsg, recv_on_device = _parse(recvbuf, writable=True)
    if isinstance(rmsg, Native):
        if rmsg.kind is Kind.BAD_BUFFER:  # device memory adaptcoll cannot use (host buffers carry rmsg.error)
            return BufferError(f"recvbuf: {rmsg.reason}")
        return NotImplementedError(
            f"adaptcoll Reduce: recvbuf not served ({rmsg.reason}); set ADAPTCOLL_REDUCE_ALGORITHM=native"
        )
    if recv_on_device != on_device:
        return ValueError("adaptcoll Reduce: sendbuf and recvbuf must both be host or both be device memory")
    if rmsg.count != msg.count:
        return ValueError(f"mismatch in send count {msg.count} and receive count {rmsg.count}")
    if rmsg.array.dtype != msg.array.dtype:
        return ValueError("mismatch in send and receive MPI datatypes")
    if not on_device and rmsg.error is None and np.may_share_memory(rmsg.array, msg.array):
        return ValueError("sendbuf and recvbuf overlap (use MPI.IN_PLACE)")
    return rmsg


# -- allreduce ------------------------------------------------------------------------------------
@_device_routed("allreduce")
def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, op: Any, blocking: bool = False) -> Decision:
    """Decide (locally, from arguments every rank shares), then set up an allreduce (`blocking`: may
    set up the communicator's tuning and the shared-memory node level)."""
    if not isinstance(op, MPI.Op):
        return INVALID_ARGUMENTS
    if explicitly_native("allreduce"):
        return ALGORITHM_NATIVE
    tuning = comm_tuning(comm, blocking)  # before any buffer is looked at: a blocking first call sets it up
    in_place = sendbuf is _IN_PLACE or sendbuf is recvbuf
    rmsg, on_device = _parse(recvbuf, writable=True)
    if isinstance(rmsg, Native):
        return rmsg
    error = rmsg.error
    if in_place:
        local = rmsg.array
        load = rmsg.load
    else:
        smsg, send_on_device = _parse(sendbuf, writable=False)
        if isinstance(smsg, Native):
            return smsg
        if send_on_device != on_device:
            raise ValueError("adaptcoll Allreduce: sendbuf and recvbuf must both be host or both be device memory")
        if smsg.count != rmsg.count or smsg.array.dtype != rmsg.array.dtype:
            return INVALID_ARGUMENTS
        if not on_device and np.may_share_memory(smsg.array, rmsg.array):
            return INVALID_ARGUMENTS
        local = smsg.array
        load = smsg.load
        error = error or smsg.error
    call = _call(tuning, "allreduce", rmsg.nbytes, on_device)
    rop = _fold_op(rmsg, op, call)
    if isinstance(rop, Native):
        return rop
    ordered_needed = not rop.commutative
    by_blocks = ALLREDUCE_ALGORITHMS.get(call.algorithm.partition(":")[0])
    if by_blocks is not None and ordered_needed and not by_blocks.rank_ordered:
        return Native(f"non-commutative op with {by_blocks.name} allreduce")
    _forest_check(call.algorithm, comm.Get_size(), None)
    st = _state_for(comm, call.algorithm)
    transport, backend, pools = st.kit(on_device)
    loads = [device.producers_wait((sendbuf, recvbuf)), load] if on_device else [load]  # as in bcast
    started, note, algorithm = _node_level(
        st,
        call.algorithm,
        on_device,
        blocking,
        lambda lv: shm_decide.allreduce(
            st,
            lv,
            call.algorithm,
            call.roots,
            local,
            rmsg.array,
            rop,
            (sendbuf, recvbuf),
            (loads, [rmsg.store]),
        ),
    )
    if started is not None:
        return Prepared(started, error, config=call, state=st)
    rank = comm.Get_rank()
    dtype = rmsg.array.dtype
    if by_blocks is not None:
        block_shape = _block_shape(st, by_blocks, call, rmsg.count, dtype.itemsize)
        if block_shape is None:  # a tag space smaller than one segment's tags (settings and TAG_UB match on all ranks)
            return Native(f"tag space too small for {by_blocks.name} allreduce")
        shape = block_shape
    else:
        shape = st.plan_shape(rmsg.count, dtype.itemsize, call.segment_size, max_segments=call.max_segments)
    roots = call.roots
    if ordered_needed and note is None and forests.is_forest(algorithm):
        note = _ordered_note(st.allreduce_trees(algorithm, roots, rank_ordered=True))

    def make_links() -> list[Link]:
        if by_blocks is not None:  # one protocol per rank, no trees: a single link carrying every segment
            return [Link(None, (), range(shape.nseg))]
        return tree_links(st.allreduce_trees(algorithm, roots, ordered_needed, shape.nseg), rank, shape.nseg)

    base = OpContext(
        transport,
        backend,
        shape,
        call.send_window,
        call.recv_window,
        call.sync_sends,
        ordered_needed or call.reproducible,
        pools(dtype),
    )
    result = rmsg.array

    def start_one(ctx: OpContext, link: Link, done: _Callback) -> None:
        if by_blocks is not None:
            by_blocks.start(ctx, local, result, rop, done)
        else:
            Allreduce(ctx, link.parent, link.children, local, result, rop, link.segs, done).start()

    fast = None
    if by_blocks is None and rop.user_fold is None:
        fast = _compiled_call(compiled.ALLREDUCE, local, result, base, on_device, rop.name)
    started_trees, run, again = _started(
        st, make_links, (sendbuf, recvbuf), base, start_one, "Allreduce", None, loads, [rmsg.store], fast
    )
    engine = _engine_name(fast)
    return Prepared(
        started_trees, error, note=note, config=call, engine=engine, run_blocking=run, state=st, restart=again
    )


def _block_shape(
    st: CommState, algorithm: AllreduceAlgorithm, call: CallConfig, count: int, itemsize: int
) -> Optional[SegmentPlan]:
    """The segment plan of a ring or recursive-halving allreduce (protocols.algorithms); None if the
    tags do not fit. Its segment size and per-block cap: the setting's parameters
    (`ring:segment_size=1M,max_segments=2`), else a tuning table's entry, else the algorithm's defaults."""
    _, params = settings.block_algorithm(call.algorithm)
    tuned = call.source.startswith("table")
    try:
        return st.plan_shape(
            count,
            itemsize,
            params.get("segment_size", call.segment_size if tuned else algorithm.segment_size),
            blocks=algorithm.blocks(st.size),
            tags_per_segment=algorithm.tags_per_segment,
            max_segments=params.get("max_segments", call.max_segments if tuned else algorithm.max_segments),
        )
    except ValueError:
        return None
