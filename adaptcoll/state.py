"""adaptcoll's per-communicator state: a private duplicate for its own traffic, the tag sequence,
segment pools, trees, topology and the device context. Created collectively by the first served
collective on a communicator, attached as an MPI attribute and freed with the communicator."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from . import discovery, settings, topology
from .backends.base import ArrayBackend
from .backends.numpy_backend import NumpyBackend
from .device import DeviceContext
from .engine import MPITransport, engine
from .plan import SegmentPlan, plan_segments
from .pool import SegmentPool
from .protocols.operation import Operation
from .transport import Transport
from .trees import Tree, build, build_all, parse_algorithm
from .tune.exchange import exchange as tuning_exchange
from .tune.policy import CommTuning

__all__ = ["CommState", "comm_state", "HOST_BACKEND"]

HOST_BACKEND = NumpyBackend()
"""The one NumPy backend every communicator's host segments use."""

PoolGetter = Callable[[Any], SegmentPool]


class CommState:
    """adaptcoll's state for one communicator (see the module docstring)."""

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.dup = MPI.Intracomm(MPI.Intracomm.Dup(comm))  # a plain mpi4py Intracomm, never a subclass
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.transport = MPITransport(self.dup, engine())
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        self.tag_space = tag_ub + 1
        self.next_tag = 0
        self._pools: dict[np.dtype, SegmentPool] = {}
        self._trees: dict[tuple[str, int, bool], tuple[Tree, ...]] = {}
        self._topology: Optional[topology.Topology] = None
        self._device: Optional[DeviceContext] = None
        self._tuning: Optional[CommTuning] = None
        self._live: deque[tuple[int, Operation]] = deque()  # (tags held, operation), oldest first
        self._live_tags = 0

    # -- segment plans and tags ----------------------------------------------------------------
    def plan_shape(
        self, count: int, itemsize: int, segment_bytes: int, max_segments: Optional[int] = None
    ) -> SegmentPlan:
        """The segment plan for a message (max_segments: the call's cap, else the setting), tag base 0."""
        cfg = settings.current()
        space = min(self.tag_space, cfg.tag_space) if cfg.tag_space else self.tag_space
        cap = cfg.max_segments if max_segments is None else max_segments
        return plan_segments(count, itemsize, segment_bytes, 0, space, cap)

    def take_tags(self, shape: SegmentPlan) -> SegmentPlan:
        """`shape` with the next tag base of this communicator's sequence (which it advances).

        Tags are reused only once the operations that held them have finished: if the operations
        still running hold so many tags that the new range would wrap onto theirs, this waits
        (progressing everything) for the oldest to finish. Every rank issues the same sequence, so
        every rank waits for the same operations. With MPICH's TAG_UB that takes ~5e8 segments in flight.
        """
        need = max(1, shape.nseg)
        self._reclaim()
        while self._live and self._live_tags + need > shape.tag_space:
            oldest = self._live[0][1]
            engine().wait_for(_done_check(oldest))
            self._reclaim()
        base = self.next_tag % shape.tag_space
        self.next_tag = (base + need) % shape.tag_space
        return SegmentPlan(shape.count, shape.seg_count, base, shape.tag_space)

    def track(self, plan: SegmentPlan, operation: Operation) -> Operation:
        """Remember that `operation` holds `plan`'s tags until it is done (see take_tags)."""
        if not operation.done:
            tags = max(1, plan.nseg)
            self._live.append((tags, operation))
            self._live_tags += tags
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
            self._device = DeviceContext(self.transport, self.dup)
        return self._device

    def kit(self, on_device: bool) -> tuple[Transport, ArrayBackend, PoolGetter]:
        """(transport, backend, pool getter) for host or device segments."""
        if on_device:
            ctx = self.device()
            return ctx.transport, ctx.backend, ctx.pool
        return self.transport, HOST_BACKEND, self.pool

    # -- tuning --------------------------------------------------------------------------------
    def tuning(self) -> CommTuning:
        """The communicator's tuning (table read on rank 0 and exchanged over the private duplicate;
        collective, once, blocking for now: a candidate step of an asynchronous set-up)."""
        if self._tuning is None:
            self._tuning = tuning_exchange(self.dup)
        return self._tuning

    # -- trees ---------------------------------------------------------------------------------
    def topology(self) -> topology.Topology:
        """The topology used by `topo` trees: ADAPTCOLL_TOPOLOGY if set, else discovered (collective, once)."""
        if self._topology is None:
            spec = settings.current().topology
            self._topology = topology.parse(spec, self.size) if spec else discovery.discover(self.dup)
        return self._topology

    def trees(self, algorithm: str, root: int, rank_ordered: bool = False) -> tuple[Tree, ...]:
        """The tree(s) for an algorithm setting such as 'binomial' or 'knomial:radix=4' (cached)."""
        key = (algorithm, root, rank_ordered)
        found = self._trees.get(key)
        if found is None:
            if rank_ordered:
                found = (build("in_order_binomial", self.size, 0),)
            else:
                kind, params = parse_algorithm(algorithm)
                if kind == "topo":
                    params.setdefault("levels", self.topology())
                found = build_all(kind, self.size, root, **params)
            self._trees[key] = found
        return found

    def allreduce_trees(self, algorithm: str, roots: int, rank_ordered: bool = False) -> tuple[Tree, ...]:
        """Allreduce's trees: one (or two, for two_tree) per root, roots spread evenly over the ranks.

        Segments are dealt round-robin over the returned trees, so with several roots the reduce and
        broadcast work of the roots is shared out, as reduce-scatter + allgather shares it; `roots` 0
        means one root per rank. Rank-ordered (non-commutative) folds use the single root 0.
        """
        if rank_ordered:
            return self.trees(algorithm, 0, rank_ordered=True)
        count = min(self.size, roots or self.size)
        found: list[Tree] = []
        for k in range(count):
            found.extend(self.trees(algorithm, (k * self.size) // count))
        return tuple(found)

    def free(self) -> None:
        """Free the private duplicate."""
        if not MPI.Is_finalized() and self.dup != MPI.COMM_NULL:
            self.dup.Free()


def _done_check(operation: Operation) -> Callable[[], bool]:
    return lambda: operation.done


def _delete_state(comm: MPI.Comm, keyval: int, state: Any) -> None:
    try:
        state.free()
    except MPI.Exception:  # pragma: no cover - MPI shutting down
        pass


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_state)


def comm_state(comm: MPI.Intracomm) -> CommState:
    """The CommState of `comm` (created, collectively, on first use; freed when `comm` is freed)."""
    state = comm.Get_attr(_KEYVAL)
    if state is None:
        state = CommState(comm)
        comm.Set_attr(_KEYVAL, state)
    assert isinstance(state, CommState)
    return state
