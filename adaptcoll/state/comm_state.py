"""adaptcoll's per-communicator state: a private duplicate for its own traffic, the tag sequence,
segment pools, trees, topology and the device context. Created by the first served collective on a
communicator, attached as an MPI attribute and freed with the communicator.

Creating the state communicates with no one: its collective set-up is a queue of asynchronous
`SetupStep`s (the private `Idup` first; topology discovery when a `topo` tree needs it; other modules
may add theirs) that the engine advances. Operations started before the set-up has completed are
queued in call order and started once it has (`submit`); they take their tags then, in that order,
so every rank still agrees. So a nonblocking collective never blocks on first use.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Optional, Protocol

import numpy as np
from mpi4py import MPI

from ..backends.base import ArrayBackend
from ..backends.numpy_backend import NumpyBackend
from ..backends.pool import SegmentPool
from ..device import DeviceContext
from ..plans import forests, topology
from ..plans.dealing import spread_root_trees
from ..plans.segments import SegmentPlan, plan_blocks, plan_segments
from ..plans.trees import Tree, build, build_all, parse_algorithm
from ..protocols.operation import Operation
from ..runtime import settings
from ..runtime.engine import NATIVE_LIVE, MessageSizeError, MPITransport, engine
from ..runtime.transport import Poll, Transport
from ..tune.exchange import exchange as tuning_exchange
from ..tune.policy import CommTuning
from . import discovery

__all__ = ["CommState", "SetupStep", "SetupWait", "comm_state", "release_state", "HOST_BACKEND"]

HOST_BACKEND = NumpyBackend()
"""The one NumPy backend every communicator's host segments use."""
TREE_CACHE = 64
"""Tree sets a communicator keeps (per algorithm, root and order), the least recently used dropped past
this: a tree at another root is O(1) to make for most kinds and answered per rank for `topo` from 1024
ranks, but a smaller `topo` tree is built whole, and a program broadcasting from every rank in turn
would otherwise keep one per root."""

PoolGetter = Callable[[Any], SegmentPool]
Starter = Callable[[], Operation]


class SetupStep(Protocol):
    """One step of a communicator's collective set-up. Every rank adds the same steps in the same order
    (from decisions every rank shares); each begins once the step before it has completed."""

    name: str

    def begin(self, state: CommState) -> Poll:
        """Start the step; return a poll that is True once it has completed (polled by the engine).
        It should not wait for other ranks: a step that does blocks wherever it begins (the call
        that added it, or the progress call that completed the step before it)."""


class SetupWait:
    """The engine's owner of a running set-up step: the watchdog names it (with the collectives queued
    behind it) when the other ranks do not take part, e.g. because they called a native collective."""

    __slots__ = ("state", "step", "error", "info", "reported")

    def __init__(self, state: CommState, step: SetupStep) -> None:
        self.state = state
        self.step = step
        self.error: Optional[BaseException] = None
        self.info = None
        self.reported = False

    def describe(self) -> str:
        return (
            f"set-up of {self.state.transport.label}: {self.step.name}, "
            f"with {len(self.state._queued)} collective(s) queued behind it"
        )

    pending = (
        "    the other ranks' part of this set-up (a rank that called a native collective instead, e.g. with a "
        "count below ADAPTCOLL_NATIVE_BELOW where others are above it, never joins)"
    )

    def fail(self, error: BaseException) -> bool:
        """The step failed (its poll raised, e.g. MPI_Comm_idup reported a mismatch): every collective
        queued behind it fails with `error`, so its waiter raises instead of waiting forever. Returns
        whether this is the first failure (the engine's contract for owners)."""
        if self.error is not None:
            return False
        self.error = error
        state = self.state
        state._step_running = False
        state._steps.clear()
        while state._queued:
            _, proxy = state._queued.popleft()
            proxy.fail(error)
        return True


class _DuplicateStep:
    """The private duplicate for adaptcoll's own traffic, made with MPI_Comm_idup (never blocks)."""

    name = "private duplicate (MPI_Comm_idup)"

    def begin(self, state: CommState) -> Poll:
        newcomm, request = MPI.Intracomm.Idup(state._plain)
        state._pending_dup = (newcomm, request)

        def done() -> bool:
            if state._pending_dup is None:  # already bound: free() completed the Idup first
                return True
            try:
                if not request.Test():
                    return False
            except MPI.Exception as exc:
                if exc.Get_error_class() != MPI.ERR_TRUNCATE:
                    raise
                raise MessageSizeError(
                    "adaptcoll: setting up this communicator (MPI_Comm_idup) failed "
                    f"({exc.Get_error_string().split(',')[0]}): the ranks did not all make their collectives "
                    "alike; counts that differ across ranks, some below the native threshold (ADAPTCOLL_NATIVE_BELOW: "
                    "native MPI) and some above it (adaptcoll), do that"
                ) from exc
            state._bind(MPI.Intracomm(newcomm))  # a plain mpi4py Intracomm, never a subclass
            return True

        return done


class _TopologyStep:
    """Topology discovery for `topo` trees (nonblocking: one Iallgather on the private duplicate)."""

    name = "topology discovery (MPI_Iallgather)"

    def begin(self, state: CommState) -> Poll:
        assert state.dup is not None
        poll = discovery.begin_discover(state.dup)

        def done() -> bool:
            found = poll()
            if found is None:
                return False
            state._topology = found
            return True

        return done


class CommState:
    """adaptcoll's state for one communicator (see the module docstring)."""

    def __init__(self, comm: MPI.Intracomm) -> None:
        self._plain = MPI.Intracomm(comm)  # shares the handle: Idup and Get_info without subclass methods
        self.dup: Optional[MPI.Intracomm] = None  # the private duplicate, once the set-up's Idup completed
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        # bound to the private duplicate once its Idup completes (_bind); operations start only then
        self.transport = MPITransport(None, engine(), comm.Get_name(), self.size, self.rank)
        self._lock = engine().lock  # the engine's: held by set-up steps and starts (add_step, submit)
        self.tag_space = self.transport.notice_tag  # tags 0..TAG_UB-1: TAG_UB carries error notices
        self.next_tag = 0
        self._pools: dict[np.dtype, SegmentPool] = {}
        self._trees: OrderedDict[tuple[str, int, bool], tuple[Tree, ...]] = OrderedDict()  # (see TREE_CACHE)
        self._topology: Optional[topology.Topology] = None
        self._device: Optional[DeviceContext] = None
        self._tuning: Optional[CommTuning] = None
        self._live: deque[tuple[int, Operation]] = deque()  # (tags held, operation), oldest first
        self._live_tags = 0
        self.shm: Any = None  # the shared-memory node level or why there is none (adaptcoll.state.shm.node_level)
        self._pending_dup: Optional[tuple[MPI.Intracomm, MPI.Request]] = None
        self._steps: deque[SetupStep] = deque()
        self._step_running = False
        self._queued: deque[tuple[Starter, Operation]] = deque()
        self._topology_step = False
        self._freed = False
        self.add_step(_DuplicateStep())

    # -- the collective set-up -----------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Whether every set-up step added so far has completed."""
        return not self._step_running and not self._steps

    @property
    def queued(self) -> bool:
        """Whether operations wait in the set-up queue (a new one must queue behind them)."""
        return bool(self._queued)

    def add_step(self, step: SetupStep) -> None:
        """Queue a set-up step (every rank adds the same steps in the same order); begins it now if the
        steps before it have completed. Operations submitted from now on start after it."""
        with self._lock:
            self._steps.append(step)
            if not self._step_running:
                self._next_step()

    def _next_step(self) -> None:
        """Begin steps until one is still running (the engine then polls it) or none is left."""
        while self._steps:
            step = self._steps.popleft()
            poll = step.begin(self)
            if not poll():
                self._step_running = True
                eng = engine()
                previous, eng.owner = eng.owner, SetupWait(self, step)  # what the watchdog names
                try:
                    eng.watch(poll, self._step_done)
                finally:
                    eng.owner = previous
                return
        self._step_running = False
        self._start_queued()

    def _step_done(self) -> None:
        self._step_running = False
        self._next_step()

    def _bind(self, dup: MPI.Intracomm) -> None:
        """The Idup completed: the private duplicate and its transport are usable."""
        self.dup = dup
        self.transport.bind(dup)
        self._pending_dup = None

    def submit(self, start: Starter) -> Operation:
        """Start an operation now if the set-up is complete, else queue it (in call order) and return an
        Operation that completes with it."""
        lock = self._lock
        lock.acquire()  # (acquire / release: about 0.1 us less than `with`)
        try:
            if not (self._step_running or self._steps or self._queued):  # ready, nothing queued
                return start()
            proxy = Operation()
            self._queued.append((start, proxy))
            return proxy
        finally:
            lock.release()

    def _start_queued(self) -> None:
        while self._queued and self.ready:
            start, proxy = self._queued.popleft()
            try:
                operation = start()
            except Exception as exc:  # e.g. the communicator is out of step: the waiter raises it
                proxy.fail(exc)
                continue
            if operation.done:
                _finish_proxy(proxy, operation)
            else:
                operation.on_done = functools.partial(_finish_proxy, proxy, operation)

    def wait_ready(self) -> None:
        """Progress until the set-up has completed (for blocking users of the private duplicate)."""
        if not self.ready:
            engine().wait_for(lambda: self.ready)

    def require_topology(self) -> None:
        """Make sure `topology()` can answer: discovery becomes a set-up step unless ADAPTCOLL_TOPOLOGY
        declares the topology (then it is parsed here, locally)."""
        if self._topology is not None or self._topology_step:
            return
        spec = settings.current().topology
        if spec:
            self._topology = topology.parse(spec, self.size)
        else:
            self._topology_step = True
            self.add_step(_TopologyStep())

    # -- segment plans and tags ----------------------------------------------------------------
    def plan_shape(
        self,
        count: int,
        itemsize: int,
        segment_bytes: int,
        blocks: int = 0,
        tags_per_segment: int = 1,
        max_segments: Optional[int] = None,
    ) -> SegmentPlan:
        """The segment plan for a message under the current settings, with tag base 0.

        `blocks` > 0: segments tile that many blocks (plan.plan_blocks; `max_segments` per block), each
        segment holding `tags_per_segment` tags (the ring and recursive-halving allreduces).
        """
        cfg = settings.current()
        space = min(self.tag_space, cfg.tag_space) if cfg.tag_space else self.tag_space
        cap = cfg.max_segments if max_segments is None else max_segments
        if blocks:
            return plan_blocks(count, itemsize, segment_bytes, blocks, 0, space, cap, tags_per_segment)
        return plan_segments(count, itemsize, segment_bytes, 0, space, cap)

    def take_tags(self, shape: SegmentPlan) -> SegmentPlan:
        """`shape` with the next tag base of this communicator's sequence (which it advances).

        Tags are reused only once the operations that held them have finished: if the operations
        still running hold so many tags that the new range would wrap onto theirs, this waits
        (progressing everything) for the oldest to finish. Every rank issues the same sequence, so
        every rank waits for the same operations. With MPICH's TAG_UB that takes ~5e8 segments in flight.
        """
        base = self.take_tag_base(shape.ntags, shape.tag_space)
        return SegmentPlan(shape.count, shape.seg_count, base, shape.tag_space, shape.tags_per_segment)

    def take_tag_base(self, need: int, tag_space: int) -> int:
        """take_tags for `need` tags of `tag_space`, returning only the tag base (no plan is made)."""
        live = self._live
        if live:
            if live[0][1].done:
                self._reclaim()
            while live and self._live_tags + need > tag_space:
                oldest = self._live[0][1]
                engine().wait_for(_done_check(oldest))
                self._reclaim()
        base = self.next_tag % tag_space
        self.next_tag = (base + need) % tag_space
        return base

    def track(self, plan: SegmentPlan, operation: Operation) -> Operation:
        """Remember that `operation` holds `plan`'s tags until it is done (see take_tags)."""
        if not operation.done:
            tags = plan.ntags
            self._live.append((tags, operation))
            self._live_tags += tags
        return operation

    def track_tags(self, ntags: int, operation: Operation) -> Operation:
        """`track` for an operation holding `ntags` tags (no plan needed)."""
        if not operation.done:
            self._live.append((ntags, operation))
            self._live_tags += ntags
        return operation

    def _reclaim(self) -> None:
        live = self._live
        while live and live[0][1].done:
            self._live_tags -= live.popleft()[0]

    def plan(self, count: int, itemsize: int, segment_bytes: int) -> SegmentPlan:
        """The segment plan of the next operation; advances this communicator's tag sequence."""
        return self.take_tags(self.plan_shape(count, itemsize, segment_bytes))

    # -- memory and transports -----------------------------------------------------------------
    def pool(self, dtype: Any) -> SegmentPool:
        """The host segment-buffer pool for `dtype`."""
        key = np.dtype(dtype)
        found = self._pools.get(key)
        if found is None:
            found = self._pools[key] = SegmentPool(HOST_BACKEND, key)
        return found

    def device(self) -> DeviceContext:
        """The DeviceContext for device buffers (CuPy backend, device pools, staging if not CUDA-aware)."""
        if self._device is None:
            self._device = DeviceContext(self.transport, self._plain)
        return self._device

    def kit(self, on_device: bool) -> tuple[Transport, ArrayBackend, PoolGetter]:
        """(transport, backend, pool getter) for host or device segments."""
        if on_device:
            ctx = self.device()
            return ctx.transport, ctx.backend, ctx.pool
        return self.transport, HOST_BACKEND, self.pool

    # -- tuning --------------------------------------------------------------------------------
    def tuning(self, blocking: bool) -> Optional[CommTuning]:
        """The communicator's tuning, or None while it is not known and this call does not block.

        The first *blocking* adaptcoll collective on the communicator sets it up (collectively, once:
        the table read on rank 0 and exchanged over the private duplicate, after its Idup). Calls
        before that one (nonblocking, persistent) use the provisional tuning (`tune.choose`), so an
        I-call never blocks. Every rank issues the same collectives in the same order, so every rank
        switches at the same call (like the shm node level)."""
        if self._tuning is None and blocking:
            self.wait_ready()
            assert self.dup is not None
            self._tuning = tuning_exchange(self.dup)
        return self._tuning

    # -- trees ---------------------------------------------------------------------------------
    def topology(self) -> topology.Topology:
        """The topology used by `topo` trees: ADAPTCOLL_TOPOLOGY if set, else discovered by the set-up
        step `require_topology` added (called only once the set-up has completed)."""
        if self._topology is None:
            self.require_topology()
            self.wait_ready()
        assert self._topology is not None
        return self._topology

    def trees(self, algorithm: str, root: int, rank_ordered: bool = False) -> tuple[Tree, ...]:
        """The tree(s) for an algorithm setting such as 'binomial' or 'knomial:radix=4' (cached); for
        `forest:PATH` the schedule's forest rooted at `root` (adaptcoll.plans.forests)."""
        key = (algorithm, root, rank_ordered)
        found = self._kept_trees(key)
        if found is not None:
            return found
        if forests.is_forest(algorithm):
            found = forests.root_trees(algorithm, self.size, root, rank_ordered) or self._ordered()
        elif rank_ordered:
            found = self._ordered()
        else:
            kind, params = parse_algorithm(algorithm)
            if kind == "topo":
                params.setdefault("levels", self.topology())
            found = build_all(kind, self.size, root, **params)
        return self._keep_trees(key, found)

    def _kept_trees(self, key: tuple[str, int, bool]) -> Optional[tuple[Tree, ...]]:
        """The tree set cached under `key` (now the most recently used), or None."""
        found = self._trees.get(key)
        if found is not None:
            self._trees.move_to_end(key)
        return found

    def _keep_trees(self, key: tuple[str, int, bool], found: tuple[Tree, ...]) -> tuple[Tree, ...]:
        """Cache `found` under `key`, dropping the least recently used tree set past TREE_CACHE."""
        self._trees[key] = found
        if len(self._trees) > TREE_CACHE:
            self._trees.popitem(last=False)
        return found

    def _ordered(self) -> tuple[Tree, ...]:
        """The rank-ordered tree non-commutative reductions run on (root 0)."""
        return (build("in_order_binomial", self.size, 0),)

    def allreduce_trees(
        self, algorithm: str, roots: int, rank_ordered: bool = False, nseg: Optional[int] = None
    ) -> tuple[Tree, ...]:
        """Allreduce's trees: one (or two, for two_tree) per root, roots spread evenly over the ranks.

        Segments are dealt round-robin over the returned trees, so with several roots the reduce and
        broadcast work of the roots is shared out, as reduce-scatter + allgather shares it; `roots` 0
        means one root per rank. With `nseg`, only the trees that carry segments (`spread_root_trees`).
        Rank-ordered (non-commutative) folds use the single root 0.
        `forest:PATH`: every forest of the schedule, whatever `roots` (adaptcoll.plans.forests).
        """
        if forests.is_forest(algorithm):
            key = (algorithm, -1, rank_ordered)
            found = self._kept_trees(key)
            if found is not None:
                return found
            return self._keep_trees(key, forests.allreduce_trees(algorithm, self.size, rank_ordered) or self._ordered())
        if rank_ordered:
            return self.trees(algorithm, 0, rank_ordered=True)
        return spread_root_trees(self.size, roots, lambda root: self.trees(algorithm, root), nseg)

    def free(self) -> None:
        """Free this state from a call where MPI calls are safe: the adaptcoll communicator's Free, free
        and Disconnect call it before MPI_Comm_free. The node level is freed now (collectively, as the
        communicator is) and a pending set-up Idup completed; the private duplicate once the operations
        on it have finished (MPI lets a freed communicator's operations complete), now or from a later
        engine sweep."""
        if self._freed or MPI.Is_finalized():
            return
        self._freed = True
        if self.shm is not None:
            self.shm.free()
        if self._pending_dup is not None:  # the set-up step's poll completes and binds it (the watchdog
            # names it if other ranks never join); a failed step (its Idup reported an error) stops it
            engine().wait_for(lambda: self._pending_dup is None or not self._step_running)
        if not self._release():
            engine().defer(self._release)

    def free_later(self) -> None:
        """Free this state without an MPI call. MPI_Comm_free of a communicator that a pending request
        still holds (the set-up's Idup) only marks it; MPICH then runs the attribute delete callback
        inside the MPI call that completes that request, with its lock held, where any MPI call
        deadlocks or aborts (`Assertion failed in mpir_request.h`, `pthread_mutex_lock: Resource
        deadlock avoided`). The engine releases the private duplicate from a later sweep (or at exit);
        a node level (whose free is collective, which a deferred release cannot be) is forgotten and its
        window left to MPI_Finalize."""
        if self._freed:
            return
        self._freed = True
        engine().defer(self._release)

    def _release(self) -> bool:
        """Close the transport and free the private duplicate (and forget a node level not freed yet)
        unless something is still to begin or running on them; returns whether it did. (A set-up step
        already begun may still run: MPI completes requests on a freed communicator.)"""
        if MPI.Is_finalized():
            return True
        if self._pending_dup is not None or self._steps or self._queued:
            return False  # set-up steps or operations would still begin on the private duplicate
        if any(not operation.done for _, operation in self._live):
            return False
        if self.shm is not None:
            if self.shm.busy:
                return False
            self.shm.abandon()
        self.transport.close()
        if self.dup is not None and self.dup != MPI.COMM_NULL:
            self.dup.Free()
        return True


def _finish_proxy(proxy: Operation, operation: Operation) -> None:
    """A queued operation's stand-in ends as the operation did (complete, or failed with its error)."""
    if operation.error is not None:
        proxy.fail(operation.error)
    else:
        proxy.complete()


def _done_check(operation: Operation) -> Callable[[], bool]:
    return lambda: operation.done


def _delete_state(comm: MPI.Comm, keyval: int, state: Any) -> None:
    """MPI's attribute delete callback, for a communicator whose own Free did not call `free` first
    (mpi4py's Free on a plain object sharing the handle). Under MPICH, a request that held the
    communicator when it was freed (the set-up's Idup, or a native request adaptcoll made for the
    user) means this may run inside the MPI call completing that request, where no MPI call may be
    made: free_later. Otherwise (and always under Open MPI, DELETE_IN_FREE) this runs in the user's
    MPI_Comm_free itself: free now. (A plain Free with the user's own requests pending on the
    communicator is the one case left under MPICH: free the adaptcoll object instead.)"""
    if not DELETE_IN_FREE and (state._pending_dup is not None or NATIVE_LIVE):
        state.free_later()
        return
    try:
        state.free()
    except MPI.Exception:  # pragma: no cover - MPI shutting down
        pass


def release_state(comm: MPI.Comm) -> None:
    """Before `comm` is freed (its Free, free or Disconnect): free adaptcoll's state of it here, in the
    caller's MPI call, rather than from the delete callback (CommState.free). Nothing for the
    communicators whose free is an error (null, COMM_WORLD, COMM_SELF: their state stays)."""
    if comm in _UNFREEABLE:
        return
    state = comm.Get_attr(_KEYVAL)
    if isinstance(state, CommState):
        state.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_state)
_UNFREEABLE = (MPI.COMM_NULL, MPI.COMM_WORLD, MPI.COMM_SELF)  # compared by handle


DELETE_IN_FREE = MPI.get_vendor()[0] == "Open MPI"
"""Open MPI (5.0.11, measured) runs a communicator's attribute delete callbacks inside MPI_Comm_free
itself, even while requests still hold the communicator: a set-up Idup still pending on it must be
completed there (left pending, its next Test crashed the process). MPICH runs them when the last
reference goes, which can be inside the MPI call that completes a request (CommState.free_later); MPI
libraries derived from MPICH are taken to do the same."""

IDUP_OVERLAP_BREAKS = MPI.get_vendor()[0] == "Open MPI"
"""Open MPI (5.0.11, measured): an MPI_Comm_idup still pending while another nonblocking collective runs
on the same communicator makes that collective fail (`MPI Error in NBC subrequest: 15`, truncation)
and later ones crash. MPICH runs them side by side, as MPI allows."""


def settle_setup(comm: MPI.Intracomm) -> None:
    """Before a native nonblocking or persistent collective on `comm`: under an MPI whose pending Idup
    breaks concurrent nonblocking collectives (IDUP_OVERLAP_BREAKS), finish adaptcoll's set-up of `comm`
    first. Every rank started that set-up at the same call (its first adaptcoll call on `comm`), so it
    completes as the others reach any MPI call; elsewhere, and once it is done, nothing happens."""
    if not IDUP_OVERLAP_BREAKS:
        return
    state = comm.Get_attr(_KEYVAL)
    if isinstance(state, CommState) and not state.ready:
        state.wait_ready()


def comm_state(comm: MPI.Intracomm) -> CommState:
    """The CommState of `comm` (created, collectively, on first use; freed when `comm` is freed)."""
    state = comm.Get_attr(_KEYVAL)
    if state is None:
        engine().run_deferred()  # private duplicates of communicators freed since (see CommState.free_later)
        state = CommState(comm)
        comm.Set_attr(_KEYVAL, state)
    assert isinstance(state, CommState)
    return state
