"""`adaptcoll.Intracomm`: an mpi4py Intracomm (same handle, as in mpi4py.util.pkl5) whose Bcast, Reduce,
Allreduce and their nonblocking forms run adaptcoll's protocols; every other method is mpi4py's own.

Calls adaptcoll does not serve (a native threshold, derived datatypes, MINLOC, ...) go unchanged to
the native collective, which also raises mpi4py's own errors for bad input on every rank. Which
calls went where is counted in `adaptcoll.stats()`. Every decision depends only on arguments that
MPI requires to match across ranks, so all ranks always take the same path.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any, Callable, Optional, Sequence

import numpy as np
from mpi4py import MPI

from . import buffers, counters, ops, settings, trees
from .backends.numpy_backend import NumpyBackend
from .engine import MPITransport, engine
from .plan import SegmentPlan, plan_segments
from .pool import SegmentPool
from .protocols.allreduce import Allreduce
from .protocols.bcast import Bcast
from .protocols.pieces import Join
from .protocols.reduce import Reduce
from .requests import NativeRequest, Operation, Request

__all__ = ["Intracomm", "CommState", "comm_state"]

_NUMPY = NumpyBackend()
_IN_PLACE = MPI.IN_PLACE
_NATIVE_BCAST = MPI.Intracomm.Bcast
_NATIVE_REDUCE = MPI.Intracomm.Reduce
_NATIVE_ALLREDUCE = MPI.Intracomm.Allreduce
_BELOW = "below native_below"


class CommState:
    """adaptcoll's per-communicator state: a private duplicate for its traffic, the tag sequence,
    segment pools, trees and topology. Created by the first adaptcoll collective on a communicator
    (collectively) and freed with the communicator."""

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.dup = MPI.Intracomm(MPI.Intracomm.Dup(comm))  # a plain mpi4py Intracomm, never a subclass
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.transport = MPITransport(self.dup, engine())
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        self.tag_space = tag_ub + 1
        self.next_tag = 0
        self._pools: dict[np.dtype, SegmentPool] = {}
        self._trees: dict[tuple[str, int, bool], tuple[trees.Tree, ...]] = {}
        self._topology: Any = None
        self._device: Any = None
        self._live: deque[tuple[int, Operation]] = deque()  # (tags held, operation), oldest first
        self._live_tags = 0

    def plan_shape(self, count: int, itemsize: int, segment_bytes: int) -> SegmentPlan:
        """The segment plan for a message under the current settings, with tag base 0."""
        cfg = settings.current()
        space = min(self.tag_space, cfg.tag_space) if cfg.tag_space else self.tag_space
        return plan_segments(count, itemsize, segment_bytes, 0, space, cfg.max_segments)

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
            engine().wait_for(lambda: oldest.done)
            self._reclaim()
        base = self.next_tag % shape.tag_space
        self.next_tag = (base + max(1, shape.nseg)) % shape.tag_space
        plan = SegmentPlan(shape.count, shape.seg_count, base, shape.tag_space)
        return plan

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

    def pool(self, dtype: np.dtype) -> SegmentPool:
        """The segment-buffer pool for `dtype`."""
        found = self._pools.get(dtype)
        if found is None:
            found = self._pools[dtype] = SegmentPool(_NUMPY, dtype)
        return found

    def device(self) -> Any:
        """The DeviceContext for device buffers (CuPy backend, device pools, staging if not CUDA-aware)."""
        if self._device is None:
            from .device import DeviceContext

            self._device = DeviceContext(self.transport, self.dup)
        return self._device

    def kit(self, on_device: bool) -> tuple[Any, Any, Any]:
        """(transport, backend, pool getter) for host or device segments."""
        if on_device:
            ctx = self.device()
            return ctx.transport, ctx.backend, ctx.pool
        return self.transport, _NUMPY, self.pool

    def topology(self) -> Any:
        """The topology used by `topo` trees: ADAPTCOLL_TOPOLOGY if set, else discovered (collective, once)."""
        if self._topology is None:
            from . import topology

            spec = settings.current().topology
            self._topology = topology.parse(spec, self.size) if spec else topology.discover(self.dup)
        return self._topology

    def trees(self, algorithm: str, root: int, rank_ordered: bool = False) -> tuple[trees.Tree, ...]:
        """The tree(s) for an algorithm setting such as 'binomial' or 'knomial:radix=4' (cached)."""
        key = (algorithm, root, rank_ordered)
        found = self._trees.get(key)
        if found is None:
            if rank_ordered:
                found = (trees.build("in_order_binomial", self.size, 0),)
            else:
                kind, params = trees.parse_algorithm(algorithm)
                if kind == "topo":
                    params.setdefault("levels", self.topology())
                found = trees.build_all(kind, self.size, root, **params)
            self._trees[key] = found
        return found

    def allreduce_trees(self, algorithm: str, roots: int, rank_ordered: bool = False) -> tuple[trees.Tree, ...]:
        """Allreduce's trees: one (or two, for two_tree) per root, roots spread evenly over the ranks.

        Segments are dealt round-robin over the returned trees, so with several roots the reduce and
        broadcast work of the roots is shared out, as reduce-scatter + allgather shares it; `roots` 0
        means one root per rank. Rank-ordered (non-commutative) folds use the single root 0.
        """
        if rank_ordered:
            return self.trees(algorithm, 0, rank_ordered=True)
        count = min(self.size, roots or self.size)
        found: list[trees.Tree] = []
        for k in range(count):
            found.extend(self.trees(algorithm, (k * self.size) // count))
        return tuple(found)

    def free(self) -> None:
        """Free the private duplicate."""
        if not MPI.Is_finalized() and self.dup != MPI.COMM_NULL:
            self.dup.Free()


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
    return state


def _root_ok(root: Any, size: int) -> bool:
    return type(root) is int and 0 <= root < size or (
        isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= int(root) < size)


def _segs(nseg: int, k: int, ntrees: int) -> Sequence[int]:
    return range(k, nseg, ntrees)


Link = tuple[Optional[int], Sequence[int], Sequence[int]]
"""(parent, children, segment positions) of this rank in one tree."""


def tree_links(tree_set: Sequence[trees.Tree], rank: int, nseg: int) -> list[Link]:
    """This rank's place in each tree, with the segments dealt round-robin over the trees."""
    n = len(tree_set)
    return [(tree.parent(rank), tuple(tree.children(rank)), _segs(nseg, k, n)) for k, tree in enumerate(tree_set)]


def start_on_links(links: Sequence[Link], keep: Any,
                   start_one: Callable[[Optional[int], Sequence[int], Sequence[int], Callable[[], None]], None]
                   ) -> Operation:
    """Start one protocol per tree link (`start_one(parent, children, segs, done)`) and join them."""
    operation = Operation(keep=keep)
    join = Join(len(links), operation.complete)
    for parent, children, segs in links:
        start_one(parent, children, segs, join.part_done)
    join.start()
    return operation


class Intracomm(MPI.Intracomm):
    """An mpi4py Intracomm sharing `comm`'s handle whose Bcast/Reduce/Allreduce (and I-forms) are adaptcoll's."""

    def __new__(cls, comm: Optional[MPI.Intracomm] = None) -> "Intracomm":
        if comm is None:
            comm = MPI.COMM_NULL
        return super().__new__(cls, comm)

    # -- broadcast -----------------------------------------------------------------------------
    def _start_bcast(self, name: str, buf: Any, root: Any) -> Optional[Operation]:
        return _start(name, self._prepare_bcast(buf, root))

    def _prepare_bcast(self, buf: Any, root: Any) -> "Prepared | str":
        """Decide (locally, from arguments every rank shares), then set up; a reason string = go native."""
        cfg = settings.current()
        size = self.Get_size()
        if not _root_ok(root, size):
            return "invalid arguments"
        if cfg.bcast_algorithm == "native":
            return "algorithm=native"
        root = int(root)
        rank = self.Get_rank()
        msg, on_device = _parse(buf, writable=rank != root)
        if isinstance(msg, str):
            return msg
        nbytes = msg.nbytes
        if nbytes < cfg.threshold("bcast"):
            return _BELOW
        st = _prepare(self, "bcast")
        transport = st.kit(on_device)[0]
        itemsize = msg.array.itemsize
        data = msg.array.view(np.uint8)
        shape = st.plan_shape(nbytes, 1, max(itemsize, cfg.bcast_segment_size // itemsize * itemsize))
        links = tree_links(st.trees(cfg.bcast_algorithm, root), rank, shape.nseg)
        sw, rw, sync = cfg.bcast_send_window, cfg.bcast_recv_window, cfg.sync_sends

        def start() -> Operation:
            plan = st.take_tags(shape)
            return st.track(plan, start_on_links(links, buf, lambda parent, children, segs, done: Bcast(
                transport, parent, children, data, plan, segs, sw, rw, sync, done).start()))
        return Prepared(start)

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast `buf` from `root` (mpi4py signature and semantics)."""
        if type(buf) is np.ndarray and buf.nbytes < settings._current.thresholds["bcast"]:
            counters.record("Bcast", _BELOW)
            return _NATIVE_BCAST(self, buf, root)
        op = self._start_bcast("Bcast", buf, root)
        if op is None:
            return super().Bcast(buf, root)
        if not op.done:
            engine().wait_for(lambda: op.done)
        return None

    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        """Nonblocking broadcast; returns an adaptcoll Request."""
        op = self._start_bcast("Ibcast", buf, root)
        if op is None:
            return NativeRequest(super().Ibcast(buf, root), keep=buf)
        return Request(op)

    # -- reduce --------------------------------------------------------------------------------
    def _start_reduce(self, name: str, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> Optional[Operation]:
        return _start(name, self._prepare_reduce(sendbuf, recvbuf, op, root))

    def _prepare_reduce(self, sendbuf: Any, recvbuf: Any, op: Any, root: Any) -> "Prepared | str":
        """Decide (locally, from arguments every rank shares), then set up; a reason string = go native."""
        cfg = settings.current()
        size = self.Get_size()
        if not isinstance(op, MPI.Op) or not _root_ok(root, size):
            return "invalid arguments"
        if cfg.reduce_algorithm == "native":
            return "algorithm=native"
        root = int(root)
        rank = self.Get_rank()
        is_root = rank == root
        in_place = is_root and (sendbuf is _IN_PLACE or (sendbuf is recvbuf and recvbuf is not None))
        if in_place:
            msg, on_device = _parse(recvbuf, writable=True)
        elif sendbuf is _IN_PLACE:
            return "invalid arguments"
        else:
            msg, on_device = _parse(sendbuf, writable=False)
        if isinstance(msg, str):
            return msg
        why = _reduce_unserved(msg, op, cfg.threshold("reduce"))
        if isinstance(why, str):
            return why
        rop, ordered_needed = why
        if ordered_needed and root != 0:
            return "non-commutative op with root != 0"
        st = _prepare(self, "reduce")
        transport, backend, pools = st.kit(on_device)
        target = None
        error: Optional[BaseException] = None
        if is_root:
            if in_place:
                target = msg.array
            else:
                target, error = _root_target(recvbuf, msg, on_device, backend)
        dtype = msg.array.dtype
        shape = st.plan_shape(msg.count, dtype.itemsize, cfg.reduce_segment_size)
        links = tree_links(st.trees(cfg.reduce_algorithm, root, rank_ordered=ordered_needed), rank, shape.nseg)
        local = target if in_place else msg.array
        ordered = ordered_needed or cfg.reproducible
        sw, rw, sync = cfg.reduce_send_window, cfg.reduce_recv_window, cfg.sync_sends
        pool = pools(dtype)
        keep = (sendbuf, recvbuf)

        def start() -> Operation:
            plan = st.take_tags(shape)
            return st.track(plan, start_on_links(links, keep, lambda parent, children, segs, done: Reduce(
                transport, backend, pool, parent, children, local, target, rop, plan, segs, sw, rw, sync, ordered,
                done).start()))
        return Prepared(start, error)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0) -> None:
        """Reduce to `root` (mpi4py signature and semantics; non-root `recvbuf` is ignored)."""
        if _below_native_threshold(sendbuf, recvbuf, "reduce"):
            counters.record("Reduce", _BELOW)
            return _NATIVE_REDUCE(self, _aliased_to_in_place(self, sendbuf, recvbuf, root), recvbuf, op, root)
        operation = self._start_reduce("Reduce", sendbuf, recvbuf, op, root)
        if operation is None:
            return super().Reduce(_aliased_to_in_place(self, sendbuf, recvbuf, root), recvbuf, op, root)
        if not operation.done:
            engine().wait_for(lambda: operation.done)
        return None

    def Ireduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0) -> Request:
        """Nonblocking reduce; returns an adaptcoll Request (which keeps the buffers alive)."""
        operation = self._start_reduce("Ireduce", sendbuf, recvbuf, op, root)
        if operation is None:
            return NativeRequest(super().Ireduce(_aliased_to_in_place(self, sendbuf, recvbuf, root), recvbuf, op, root),
                                 keep=(sendbuf, recvbuf))
        return Request(operation)

    # -- allreduce -----------------------------------------------------------------------------
    def _start_allreduce(self, name: str, sendbuf: Any, recvbuf: Any, op: Any) -> Optional[Operation]:
        return _start(name, self._prepare_allreduce(sendbuf, recvbuf, op))

    def _prepare_allreduce(self, sendbuf: Any, recvbuf: Any, op: Any) -> "Prepared | str":
        """Decide (locally, from arguments every rank shares), then set up; a reason string = go native."""
        cfg = settings.current()
        if not isinstance(op, MPI.Op):
            return "invalid arguments"
        if cfg.allreduce_algorithm == "native":
            return "algorithm=native"
        in_place = sendbuf is _IN_PLACE or sendbuf is recvbuf
        rmsg, on_device = _parse(recvbuf, writable=True)
        if isinstance(rmsg, str):
            return rmsg
        if in_place:
            local = rmsg.array
        else:
            smsg, send_on_device = _parse(sendbuf, writable=False)
            if isinstance(smsg, str):
                return smsg
            if send_on_device != on_device:
                raise ValueError("adaptcoll Allreduce: sendbuf and recvbuf must both be host or both be device memory")
            if smsg.count != rmsg.count or smsg.array.dtype != rmsg.array.dtype:
                return "invalid arguments"
            if not on_device and np.may_share_memory(smsg.array, rmsg.array):
                return "invalid arguments"
            local = smsg.array
        why = _reduce_unserved(rmsg, op, cfg.threshold("allreduce"))
        if isinstance(why, str):
            return why
        rop, ordered_needed = why
        st = _prepare(self, "allreduce")
        transport, backend, pools = st.kit(on_device)
        rank = self.Get_rank()
        dtype = rmsg.array.dtype
        shape = st.plan_shape(rmsg.count, dtype.itemsize, cfg.allreduce_segment_size)
        links = tree_links(st.allreduce_trees(cfg.allreduce_algorithm, cfg.allreduce_roots,
                                              rank_ordered=ordered_needed), rank, shape.nseg)
        ordered = ordered_needed or cfg.reproducible
        sw, rw, sync = cfg.reduce_send_window, cfg.reduce_recv_window, cfg.sync_sends
        pool = pools(dtype)
        result = rmsg.array
        keep = (sendbuf, recvbuf)

        def start() -> Operation:
            plan = st.take_tags(shape)
            return st.track(plan, start_on_links(links, keep, lambda parent, children, segs, done: Allreduce(
                transport, backend, pool, parent, children, local, result, rop, plan, segs, sw, rw, sync, ordered,
                done).start()))
        return Prepared(start)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> None:
        """Allreduce (mpi4py signature; `sendbuf is recvbuf` is treated as IN_PLACE)."""
        if _below_native_threshold(sendbuf, recvbuf, "allreduce"):
            counters.record("Allreduce", _BELOW)
            return _NATIVE_ALLREDUCE(self, _IN_PLACE if sendbuf is recvbuf else sendbuf, recvbuf, op)
        operation = self._start_allreduce("Allreduce", sendbuf, recvbuf, op)
        if operation is None:
            return super().Allreduce(_IN_PLACE if sendbuf is recvbuf else sendbuf, recvbuf, op)
        if not operation.done:
            engine().wait_for(lambda: operation.done)
        return None

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM) -> Request:
        """Nonblocking allreduce; returns an adaptcoll Request (which keeps the buffers alive)."""
        operation = self._start_allreduce("Iallreduce", sendbuf, recvbuf, op)
        if operation is None:
            return NativeRequest(super().Iallreduce(_IN_PLACE if sendbuf is recvbuf else sendbuf, recvbuf, op),
                                 keep=(sendbuf, recvbuf))
        return Request(operation)

    # -- communicators derived from an adaptcoll communicator are adaptcoll communicators ------
    # (Dup/Clone/Idup/Dup_with_info already keep the subclass; these would return plain mpi4py ones.)
    def Split(self, color: int = 0, key: int = 0) -> MPI.Intracomm:
        """Split (mpi4py semantics); the new communicator is an adaptcoll one."""
        from .dropin import adopt
        return adopt(super().Split(color, key))

    def Split_type(self, split_type: int, key: int = 0, info: MPI.Info = MPI.INFO_NULL) -> MPI.Intracomm:
        """Split_type (mpi4py semantics); the new communicator is an adaptcoll one."""
        from .dropin import adopt
        return adopt(super().Split_type(split_type, key, info))

    def Create(self, group: MPI.Group) -> MPI.Intracomm:
        """Create (mpi4py semantics); the new communicator is an adaptcoll one."""
        from .dropin import adopt
        return adopt(super().Create(group))

    def Create_group(self, group: MPI.Group, tag: int = 0) -> MPI.Intracomm:
        """Create_group (mpi4py semantics); the new communicator is an adaptcoll one."""
        from .dropin import adopt
        return adopt(super().Create_group(group, tag))

    @classmethod
    def Create_from_group(cls, group: MPI.Group, stringtag: str = "org.mpi4py", info: MPI.Info = MPI.INFO_NULL,
                          errhandler: Optional[MPI.Errhandler] = None) -> MPI.Intracomm:
        """Create_from_group (mpi4py semantics); the new communicator is an adaptcoll one."""
        from .dropin import adopt
        return adopt(MPI.Intracomm.Create_from_group(group, stringtag, info, errhandler))

    def Create_cart(self, dims: Sequence[int], periods: Optional[Sequence[bool]] = None,
                    reorder: bool = False) -> MPI.Cartcomm:
        """Create_cart (mpi4py semantics); the result is an adaptcoll Cartcomm."""
        from .dropin import adopt
        return adopt(super().Create_cart(dims, periods, reorder))

    def Create_graph(self, index: Sequence[int], edges: Sequence[int], reorder: bool = False) -> MPI.Graphcomm:
        """Create_graph (mpi4py semantics); the result is an adaptcoll Graphcomm."""
        from .dropin import adopt
        return adopt(super().Create_graph(index, edges, reorder))

    def Create_dist_graph_adjacent(self, sources: Sequence[int], destinations: Sequence[int],
                                   sourceweights: Any = None, destweights: Any = None,
                                   info: MPI.Info = MPI.INFO_NULL, reorder: bool = False) -> MPI.Distgraphcomm:
        """Create_dist_graph_adjacent (mpi4py semantics); the result is an adaptcoll Distgraphcomm."""
        from .dropin import adopt
        return adopt(super().Create_dist_graph_adjacent(sources, destinations, sourceweights, destweights,
                                                        info, reorder))

    def Create_dist_graph(self, sources: Sequence[int], degrees: Sequence[int], destinations: Sequence[int],
                          weights: Any = None, info: MPI.Info = MPI.INFO_NULL,
                          reorder: bool = False) -> MPI.Distgraphcomm:
        """Create_dist_graph (mpi4py semantics); the result is an adaptcoll Distgraphcomm."""
        from .dropin import adopt
        return adopt(super().Create_dist_graph(sources, degrees, destinations, weights, info, reorder))

    # -- persistent collectives (adaptcoll.persistent) -----------------------------------------
    def Bcast_init(self, buf: Any, root: int = 0, info: MPI.Info = MPI.INFO_NULL) -> Any:
        """Persistent broadcast: a request to Start() many times; tree, plan and buffers are set up once."""
        from .persistent import bcast_init
        return bcast_init(self, buf, root, info)

    def Reduce_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0,
                    info: MPI.Info = MPI.INFO_NULL) -> Any:
        """Persistent reduce (see Bcast_init)."""
        from .persistent import reduce_init
        return reduce_init(self, sendbuf, recvbuf, op, root, info)

    def Allreduce_init(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, info: MPI.Info = MPI.INFO_NULL) -> Any:
        """Persistent allreduce (see Bcast_init)."""
        from .persistent import allreduce_init
        return allreduce_init(self, sendbuf, recvbuf, op, info)

    # -- pickle-based collectives (adaptcoll.pickled) ------------------------------------------
    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a Python object; large ones travel as segmented out-of-band pickle buffers."""
        from .pickled import bcast
        return bcast(self, obj, root)

    def reduce(self, sendobj: Any, op: Any = MPI.SUM, root: int = 0) -> Any:
        """Reduce Python objects with an MPI.Op or any callable (rank order kept); None on non-roots."""
        from .pickled import reduce
        return reduce(self, sendobj, op, root)

    def allreduce(self, sendobj: Any, op: Any = MPI.SUM) -> Any:
        """Allreduce Python objects: reduce to rank 0, then the pickled broadcast of the result."""
        from .pickled import allreduce
        return allreduce(self, sendobj, op)


def _aliased_to_in_place(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, root: Any) -> Any:
    """At the root, `sendbuf is recvbuf` means IN_PLACE (as the next mpi4py treats it)."""
    if sendbuf is recvbuf and sendbuf is not None and root == comm.Get_rank():
        return _IN_PLACE
    return sendbuf


def _below_native_threshold(sendbuf: Any, recvbuf: Any, collective: str) -> bool:
    """Fast path for small plain arrays: below the collective's native threshold (well under a microsecond)."""
    buf = recvbuf if sendbuf is _IN_PLACE else sendbuf
    return type(buf) is np.ndarray and buf.nbytes < settings._current.thresholds[collective]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A call adaptcoll serves, decided and set up on this rank: each `start()` takes fresh tags and
    starts it (once for Bcast/Reduce/Allreduce, once per Start() for a persistent request).
    `error`: the root's recvbuf was bad; the others' data is still drained, then this is raised."""

    start: Callable[[], Operation]
    error: Optional[BaseException] = None


def _start(name: str, prepared: "Prepared | str") -> Optional[Operation]:
    """Start a prepared call under the engine lock (None, counted as native, for a reason string)."""
    if isinstance(prepared, str):
        return _native(name, prepared)
    with engine().lock:
        operation = prepared.start()
    counters.record(name)
    if prepared.error is not None:
        engine().wait_for(lambda: operation.done)
        raise prepared.error
    return operation


def _prepare(comm: MPI.Intracomm, collective: str) -> CommState:
    """The communicator's state, after the collective set-up steps (private Dup, topology discovery).

    Called only once every rank has decided to serve the call (decisions use arguments all ranks
    share), so ranks that pass the same message in different legal forms still agree on the Dup; and
    before the engine lock is taken, because another thread may hold the lock while it waits for this
    rank in a collective of its own.
    """
    state = comm_state(comm)
    if settings.current().algorithm(collective).startswith("topo"):
        state.topology()
    return state


def _native(name: str, reason: str) -> None:
    counters.record(name, reason)
    return None


def _parse(spec: Any, writable: bool) -> tuple[Any, bool]:
    """(Message or reason, whether it is device memory served through CuPy)."""
    msg = buffers.parse(spec, writable)
    if msg == "device memory":
        from .device import parse_device

        return parse_device(spec, writable), True
    return msg, False


def _reduce_unserved(msg: buffers.Message, op: MPI.Op, native_below: int, backend: Any = _NUMPY) -> Any:
    """(ReduceOp, needs rank order) if adaptcoll folds `op` on msg's type, else the reason it does not."""
    if msg.nbytes < native_below:
        return _BELOW
    rop = ops.reduce_op(op, msg.datatype)
    if rop is None:
        return "op not served"
    if not backend.supports(rop, msg.array.dtype):
        return "op/type not served"
    return rop, not rop.commutative


def _root_target(recvbuf: Any, msg: buffers.Message, on_device: bool = False, backend: Any = _NUMPY
                 ) -> tuple[Any, Optional[BaseException]]:
    """The root's result array, or a scratch one plus the error mpi4py would raise for `recvbuf`."""
    if recvbuf is None or recvbuf is _IN_PLACE:
        return backend.empty(msg.count, msg.array.dtype), TypeError("message: expecting buffer or list/tuple")
    rmsg, recv_on_device = _parse(recvbuf, writable=True)
    if not isinstance(rmsg, str) and recv_on_device != on_device:
        return backend.empty(msg.count, msg.array.dtype), ValueError(
            "adaptcoll Reduce: sendbuf and recvbuf must both be host or both be device memory")
    if isinstance(rmsg, str):
        exc: BaseException = (BufferError(f"recvbuf: {rmsg}") if "buffer" in rmsg
                              else NotImplementedError(f"adaptcoll Reduce: recvbuf not served ({rmsg}); "
                                                       "set ADAPTCOLL_REDUCE_ALGORITHM=native"))
        return backend.empty(msg.count, msg.array.dtype), exc
    if rmsg.count != msg.count:
        return backend.empty(msg.count, msg.array.dtype), ValueError(
            f"mismatch in send count {msg.count} and receive count {rmsg.count}")
    if rmsg.array.dtype != msg.array.dtype:
        return backend.empty(msg.count, msg.array.dtype), ValueError("mismatch in send and receive MPI datatypes")
    if not on_device and np.may_share_memory(rmsg.array, msg.array):
        return backend.empty(msg.count, msg.array.dtype), ValueError("sendbuf and recvbuf overlap (use MPI.IN_PLACE)")
    return rmsg.array, None
