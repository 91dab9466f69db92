"""The discrete-event core: simulated ranks with one CPU each, a LogGP network, timed completions.

Each `SimRank` is both the Transport and the ArrayBackend of the protocols running on that rank, so
the library's real state machines post sends and receives and fold segments here exactly as they do
over MPI. Time only advances through events, processed in time order (ties first come, first served):

- a completion (a send or receive finished, a protocol started) runs its callback on the rank's CPU
  when the CPU is free; the callback costs `event_cost`, each send or receive it posts `post_cost`,
  each fold `fold` per byte, and all of it is stretched by the rank's CPU noise (`cpu_noise`);
- a message leaves when it may: eager ones at once; rendezvous ones (and synchronous sends) one
  latency after both sides have posted, and only once the receiver's engine can see the handshake
  (its CPU is not inside a callback or a detour: no progress without the CPU). It then crosses its
  sender's and its receiver's node links (`network.py`: shared fairly or first come first served,
  `G` per byte, `L` latency), or the links of its route through a described network (`pathlinks.py`);
  the receive completes when the last byte is in, a rendezvous send at the same moment, an eager send
  when its last byte has left.
- with `transfer="cpu"` (shared memory), and between ranks of one node (`ranks_per_node`), the
  receiver's CPU copies rendezvous data instead (`copy`, default `G`, per byte of CPU time, stretched
  by its noise, between its callbacks); links are not used for it. The ranks of a node share its link.
- a watch (`Transport.watch`: the shared-memory node level's slot rings) is polled after each callback
  of its rank and whenever an event calls `poll(rank)` (a slot flag became visible, see `region.py`);
  once ready, its callback runs as a completion.

Messages match by (source, dest, tag) in posting order, as in MPI. A transport never calls back from
inside isend/irecv (completions are events), as the Transport interface requires. In data mode the
bytes really move (tests check results); otherwise buffers are `range` objects and only sizes count.
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from ..backends.base import ArrayBackend, ReduceOp
from ..backends.numpy_backend import NumpyBackend
from ..runtime.transport import Callback, Poll
from .network import FairLinks, FifoLinks
from .params import CostParams
from .pathlinks import PathLinks
from .routes import Routes
from .timelines import Timeline

__all__ = ["World", "SimRank", "Deadlock", "SizeMismatch", "TraceLog"]

_INF = float("inf")
_NUMPY = NumpyBackend()


class Deadlock(RuntimeError):
    """No event is left but some rank has not finished its operation."""


class SizeMismatch(RuntimeError):
    """A message and the receive it matched have different sizes."""


class TraceLog:
    """What a traced run records: transfers, folds and detours per rank (see adaptcoll.simulate.trace)."""

    def __init__(self) -> None:
        self.sends: list[tuple[int, int, int, int, float, float, int]] = []  # src, dst, tag, bytes, t0, t1, id
        self.recvs: list[tuple[int, int, int, int, float, float, int]] = []  # dst, src, tag, bytes, t0, t1, id
        self.folds: list[tuple[int, int, int, float, float]] = []  # rank, tag, bytes, t0, t1


class _Msg:
    """One point-to-point message from posting to delivery."""

    __slots__ = (
        "src",
        "dst",
        "tag",
        "n",
        "sbuf",
        "scb",
        "ts",
        "eager",
        "rbuf",
        "rcb",
        "tr",
        "landed",
        "start",
        "end",
        "rem",
        "rate",
        "tupd",
        "ver",
        "snode",
        "dnode",
        "tfin",
        "sq",
        "path",  # the rest: set and used by PathLinks only (a described network's routes)
        "plat",
        "weights",
        "stamp",
        "worst",  # max-min sharing (maxmin.py): slowest link's cost, bottleneck link, scratch
        "bn",
        "nrate",
        "nbn",
        "mark",
    )

    def __init__(self, src: int, dst: int, tag: int, n: int, sbuf: Any, scb: Callback, ts: float, eager: bool) -> None:
        self.src, self.dst, self.tag, self.n = src, dst, tag, n
        self.sbuf, self.scb, self.ts, self.eager = sbuf, scb, ts, eager
        self.rbuf: Any = None
        self.rcb: Optional[Callback] = None
        self.tr = 0.0
        self.landed = False
        self.start = self.end = 0.0
        self.rem = self.rate = self.tupd = 0.0
        self.ver = 0
        self.snode = self.dnode = self.sq = 0
        self.tfin = 0.0


class SimRank(ArrayBackend):
    """One simulated rank: the Transport its protocols post to and the ArrayBackend they fold with."""

    name = "simulated"

    def __init__(self, world: World, rank: int) -> None:
        self.world = world
        self.rank = rank
        self.size = world.size
        # bound straight to the world's handlers: one call less per message on the hot path
        self.isend = functools.partial(world._isend, rank)  # type: ignore[method-assign]
        self.irecv = functools.partial(world._irecv, rank)  # type: ignore[method-assign]

    # -- Transport -------------------------------------------------------------------------------
    def isend(self, buf: Any, dest: int, tag: int, on_done: Callback, synchronous: bool = False) -> None:
        self.world._isend(self.rank, buf, dest, tag, on_done, synchronous)

    def irecv(self, buf: Any, source: int, tag: int, on_done: Callback) -> None:
        self.world._irecv(self.rank, buf, source, tag, on_done)

    def watch(self, poll: Poll, on_done: Callback) -> None:
        self.world._watch(self.rank, poll, on_done)

    # -- ArrayBackend ----------------------------------------------------------------------------
    def empty(self, count: int, dtype: Any) -> Any:
        return np.empty(count, dtype) if self.world.data else range(count)

    def copy(self, dst: Any, src: Any) -> None:
        self.world._fold_work(len(dst))
        if self.world.data:
            np.copyto(dst, src)

    def touch(self, elements: int, allocated: int) -> None:
        """First touch of `elements` of a temporary of `allocated` elements a lock-step baseline (MPICH)
        allocates for one call: CPU work of `fault` per byte when the block is at least `fault_from` bytes
        (mapped afresh at each call; see CostParams)."""
        world = self.world
        if world._fault_cost and allocated >= world._fault_elems:
            world._work(elements * world._fault_cost)

    def combine(self, op: ReduceOp, lower: Any, higher: Any, out: Any) -> None:
        self.world._fold_work(len(out))
        if self.world.data:
            _NUMPY.combine(op, lower, higher, out)

    def supports(self, op: ReduceOp, dtype: Any) -> bool:
        return True


class World:
    """`size` simulated ranks; `start(rank, t, fn)` schedules a rank's start, `run()` runs to the end.

    itemsize: bytes per buffer element (buffers are counted in elements). event_cost / post_cost: CPU
    per completion callback / per posted send or receive (adaptcoll: params.engine / params.o;
    lock-step baselines inside MPI: 0 / params.native_o). data: move real bytes. record: keep every
    delivery as (src, dst, tag, elements) in `delivered`. trace: a TraceLog to fill. topology: the
    routes of a described network (`routes.Routes`) whose links replace the per-node links.
    start_cost: CPU each rank pays when its part starts, before its first step (an adaptcoll call's
    fixed cost, params.call; 0 for the lock-step baselines).
    """

    def __init__(
        self,
        size: int,
        params: CostParams,
        itemsize: int = 1,
        event_cost: float = 0.0,
        post_cost: float = 0.0,
        cpu_noise: Optional[Timeline] = None,
        net_noise: Optional[Timeline] = None,
        data: bool = False,
        record: bool = False,
        trace: Optional[TraceLog] = None,
        topology: Optional[Routes] = None,
        start_cost: float = 0.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"a simulated world needs at least 1 rank, got {size}")
        if topology is not None:
            topology.check_size(size)
            if params.links == "fifo":
                raise ValueError(
                    f"a described network shares its links fairly: links must be 'fair' or 'pair', got {params.links!r}"
                )
        self.size = size
        self.params = params
        self.itemsize = itemsize
        self.event_cost = event_cost
        self.post_cost = post_cost
        self.start_cost = start_cost
        self.data = data
        self.record = record
        self.delivered: list[tuple[int, int, int, int]] = []
        self._trace = trace
        self._cpu = cpu_noise
        self._net = net_noise
        self._L = params.L
        self._g = params.g
        self._bytecost = params.G * itemsize
        self._copycost = (params.copy or params.G) * itemsize
        self._foldcost = params.fold * itemsize
        # a copy or fold of more than `large_from` bytes at once, out of the caches (params.large_cost)
        self._large_elems = params.large_from // itemsize if params.large_from else 1 << 62
        self._large_cost = params.large_cost
        # MPICH's fresh temporaries of `fault_from` bytes and more: pages faulted in on first touch (params.fault)
        self._fault_cost = params.fault * itemsize
        self._fault_elems = params.fault_from // itemsize
        self._eager_elems = params.eager // itemsize
        self._cpu_copy = params.transfer == "cpu"
        self._copy_poll = params.copy_order == "poll"
        self._node_bw = params.node_bw
        self._contention = params.copy_contention
        self._share = bool(self._node_bw or self._contention)  # copies of one node affect one another (_shared)
        self._node_copies: dict[int, list[float]] = {}  # node -> end times of its shared-memory copies
        self._rpn = params.ranks_per_node
        self._plain = not (data or record or trace is not None)
        self.ranks = [SimRank(self, r) for r in range(size)]
        self.now = 0.0
        self.clock = 0.0
        self.cur = -1
        self.cur_tag = -1
        self._heap: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._dropped = 0  # events taken out of the heap unpopped (stale link entries): still events
        self._seq = itertools.count().__next__
        self._sends: dict[tuple[int, int, int], list[_Msg]] = {}
        self._recvs: dict[tuple[int, int, int], list[tuple[Any, Callback, float]]] = {}
        nodes = -(-size // params.ranks_per_node)  # links are per node: its ranks share the NIC
        self._links: Any
        self._handshake: Optional[Callable[[int, int], float]] = None  # rendezvous handshake latency (else L)
        if topology is not None:
            self._links = PathLinks(self, topology, itemsize, self._g, net_noise)
            self._routes = topology
            self._handshake = self._route_latency
        else:
            policy = FifoLinks if params.links == "fifo" else FairLinks
            self._links = policy(self, nodes, self._rpn, self._bytecost, self._L, self._g, net_noise)
        self._busy = [-_INF] * size
        self._pairs: Optional[dict[tuple[int, int], deque[_Msg]]] = {} if params.links == "pair" else None
        """links 'pair': per sender-receiver pair with a message on the network, the ones waiting behind it"""
        self._queued: dict[int, list[Callback]] = {}
        self._watches: dict[int, list[tuple[Poll, Callback]]] = {}
        self.shared: dict[Any, Any] = {}
        """State a set-up keeps for this run, by its own key (the node level's slot regions)."""
        self.started = [0.0] * size
        self.finished = [-1.0] * size
        self._left = size
        self.events = 0
        self.callbacks = 0
        self.messages = 0
        self.bytes = 0
        # the event handlers, bound once (not one bound-method object per scheduled event)
        self._wake_h = self._wake
        self._ready_h = self._ready
        self._depart_h = self._depart
        self._arrive_h = self._arrive
        self._eager_sent_h = self._eager_sent
        self._late_recv_h = self._late_recv
        self._callback_h = self._callback_evt
        self._pair_next_h = self._pair_next

    # -- scheduling ------------------------------------------------------------------------------
    def _push(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        heapq.heappush(self._heap, (t, self._seq(), fn, arg))

    def start(self, rank: int, t: float, fn: Callback) -> None:
        """Run `fn` (which starts this rank's part of the operation) on `rank`'s CPU at time `t`."""
        self.started[rank] = t
        self._push(t, self._start_evt, (rank, fn))

    def _start_evt(self, arg: tuple[int, Callback]) -> None:
        rank, fn = arg
        if self.start_cost:
            start_cost, work = self.start_cost, self._work

            def charged() -> None:
                work(start_cost)
                fn()

            self._complete(rank, charged)
            return
        self._complete(rank, fn)

    def done(self, rank: int) -> None:
        """Called (from inside one of its callbacks) when `rank`'s part of the operation is finished."""
        if self.finished[rank] >= 0:
            raise RuntimeError(f"rank {rank} reported its operation finished twice")
        self.finished[rank] = self.clock
        self._left -= 1

    def run(self) -> float:
        """Process events until none is left; returns the last finish time. Raises Deadlock if stuck."""
        heap = self._heap
        pop = heapq.heappop
        n = 0
        # The protocols allocate many small objects that live until the end of the run; Python's cyclic
        # collector would walk all of them again and again (most of the time of a large run). Nothing
        # here needs it during the run: pause it.
        collecting = gc.isenabled()
        gc.disable()
        try:
            while heap:
                t, _, fn, arg = pop(heap)
                self.now = t
                fn(arg)
                n += 1
        finally:
            if collecting:
                gc.enable()
        self.events += n + self._dropped
        self._dropped = 0
        if self._links.latest > self.now:  # a link event left out of the heap came last (a no-op)
            self.now = self._links.latest
        if self._left:
            raise Deadlock(self.describe())
        return max(self.finished)

    def describe(self) -> str:
        """Unfinished ranks and unmatched operations, for deadlock reports."""
        waiting = [r for r in range(self.size) if self.finished[r] < 0]
        sends = sum(len(v) for v in self._sends.values())
        recvs = sum(len(v) for v in self._recvs.values())
        watches = sum(len(v) for v in self._watches.values())
        return (
            f"{len(waiting)} of {self.size} ranks never finished (first: {waiting[:8]}); "
            f"{sends} sends and {recvs} receives unmatched, {watches} watches pending"
        )

    @property
    def cpu_noise(self) -> Optional[Timeline]:
        """The CPU detour timeline of this run (None when quiet)."""
        return self._cpu

    @property
    def unmatched(self) -> int:
        """Sends never received plus receives never matched."""
        return sum(len(v) for v in self._sends.values()) + sum(len(v) for v in self._recvs.values())

    # -- the CPUs --------------------------------------------------------------------------------
    def _complete(self, rank: int, cb: Callback) -> None:
        """A completion for `rank` at time `now`: run its callback now if the CPU is free, else queue it."""
        now = self.now
        busy = self._busy
        queued = self._queued
        if busy[rank] <= now and rank not in queued:
            self.cur = rank
            cpu = self._cpu
            self.clock = now + self.event_cost if cpu is None else cpu.advance(rank, now, self.event_cost)
            cb()
            busy[rank] = self.clock
            self.callbacks += 1
            if self._watches and rank in self._watches:
                self._poll_watches(rank)
            return
        queue = queued.get(rank)
        if queue is None:
            queued[rank] = [cb]
            heapq.heappush(self._heap, (busy[rank], self._seq(), self._wake_h, rank))
        else:
            queue.append(cb)

    def _wake(self, rank: int) -> None:
        busy = self._busy
        now = self.now
        if busy[rank] > now:  # a copy took the CPU meanwhile (transfer "cpu")
            heapq.heappush(self._heap, (busy[rank], self._seq(), self._wake_h, rank))
            return
        queue = self._queued[rank]
        cb = queue.pop(0)
        if not queue:
            del self._queued[rank]
        # run it (as _complete does)
        self.cur = rank
        cpu = self._cpu
        self.clock = now + self.event_cost if cpu is None else cpu.advance(rank, now, self.event_cost)
        cb()
        busy[rank] = self.clock
        self.callbacks += 1
        if self._watches and rank in self._watches:
            self._poll_watches(rank)
        if queue:
            heapq.heappush(self._heap, (busy[rank], self._seq(), self._wake_h, rank))

    def _work(self, seconds: float) -> None:
        """Charge `seconds` of CPU work to the running callback's rank."""
        cpu = self._cpu
        self.clock = self.clock + seconds if cpu is None else cpu.advance(self.cur, self.clock, seconds)

    def _fold_work(self, elements: int) -> None:
        t0 = self.clock
        cost = elements * self._foldcost
        self._work(cost if elements <= self._large_elems else cost * self._large_cost)
        if self._trace is not None:
            self._trace.folds.append((self.cur, self.cur_tag, elements * self.itemsize, t0, self.clock))

    def _watch(self, rank: int, poll: Poll, on_done: Callback) -> None:
        self._watches.setdefault(rank, []).append((poll, on_done))

    def _poll_watches(self, rank: int) -> None:
        pending = self._watches[rank]
        keep = []
        for poll, on_done in pending:
            if poll():
                self._push(self.clock, self._callback_h, (rank, on_done))
            else:
                keep.append((poll, on_done))
        if keep:
            self._watches[rank] = keep
        else:
            del self._watches[rank]

    def at(self, t: float, fn: Callable[[Any], None], arg: Any) -> None:
        """Run `fn(arg)` as an event at time `t` (>= now), outside any rank's CPU (e.g. a flag that
        becomes visible): it may call `poll`, not post or charge work."""
        heapq.heappush(self._heap, (t, self._seq(), fn, arg))

    def poll(self, rank: int) -> None:
        """Poll `rank`'s watches now, from an event (something they wait for may have changed): each one
        that is ready runs its callback as a completion (queued while the rank's CPU is busy)."""
        pending = self._watches.get(rank)
        if pending is None:
            return
        keep = []
        for poll, on_done in pending:
            if poll():
                heapq.heappush(self._heap, (self.now, self._seq(), self._callback_h, (rank, on_done)))
            else:
                keep.append((poll, on_done))
        if keep:
            self._watches[rank] = keep
        else:
            del self._watches[rank]

    def _callback_evt(self, arg: tuple[int, Callback]) -> None:
        self._complete(arg[0], arg[1])

    # -- posting ---------------------------------------------------------------------------------
    def _check_poster(self, rank: int) -> None:
        if rank != self.cur:
            raise RuntimeError(f"rank {rank} posted an operation outside its own callbacks (running: {self.cur})")

    def _isend(self, rank: int, buf: Any, dest: int, tag: int, cb: Callback, sync: bool = False) -> None:
        if rank != self.cur:
            self._check_poster(rank)
        cpu = self._cpu
        ts = self.clock = self.clock + self.post_cost if cpu is None else cpu.advance(rank, self.clock, self.post_cost)
        n = len(buf)
        eager = not sync and n <= self._eager_elems
        msg = _Msg(rank, dest, tag, n, buf, cb, ts, eager)
        key = (rank, dest, tag)
        recvs = self._recvs
        pending = recvs.pop(key, None)
        if pending is not None:
            msg.rbuf, msg.rcb, tr = pending.pop(0)
            msg.tr = tr
            if pending:
                recvs[key] = pending
            if not eager:
                hs = self._L if self._handshake is None else self._handshake(rank, dest)
                heapq.heappush(self._heap, ((ts if ts > tr else tr) + hs, self._seq(), self._ready_h, msg))
                return
        else:
            found = self._sends.get(key)
            if found is None:
                self._sends[key] = [msg]
            else:
                found.append(msg)
        if eager:
            heapq.heappush(self._heap, (ts, self._seq(), self._ready_h, msg))

    def _irecv(self, rank: int, buf: Any, source: int, tag: int, cb: Callback) -> None:
        if rank != self.cur:
            self._check_poster(rank)
        cpu = self._cpu
        tr = self.clock = self.clock + self.post_cost if cpu is None else cpu.advance(rank, self.clock, self.post_cost)
        key = (source, rank, tag)
        sends = self._sends
        found = sends.pop(key, None)
        if found is not None:
            msg = found.pop(0)
            if found:
                sends[key] = found
            msg.rbuf, msg.rcb, msg.tr = buf, cb, tr
            if not msg.eager:
                ts = msg.ts
                hs = self._L if self._handshake is None else self._handshake(source, rank)
                heapq.heappush(self._heap, ((ts if ts > tr else tr) + hs, self._seq(), self._ready_h, msg))
            elif msg.landed:  # the eager message is already here: complete once the receive is posted
                self._push(tr, self._late_recv_h, msg)
        else:
            pending = self._recvs.get(key)
            if pending is None:
                self._recvs[key] = [(buf, cb, tr)]
            else:
                pending.append((buf, cb, tr))

    # -- the network -----------------------------------------------------------------------------
    def _ready(self, msg: _Msg) -> None:
        """The message may leave (eager: posted; rendezvous: both sides posted and the handshake done)."""
        if not msg.eager:
            dst, now = msg.dst, self.now
            busy = self._busy[dst]
            start = busy if busy > now else now
            cpu = self._cpu
            rpn = self._rpn
            if self._cpu_copy or (rpn > 1 and msg.src // rpn == dst // rpn):  # the receiver copies (shared memory)
                if self._copy_poll and (busy > now or dst in self._queued):
                    # copy_order "poll": the receiver's CPU is taken, or completions wait for it; they run
                    # first (its engine handles them before its next poll makes this copy)
                    heapq.heappush(self._heap, (start, self._seq(), self._ready_h, msg))
                    return
                dur = msg.n * self._copycost
                if msg.n > self._large_elems:
                    dur *= self._large_cost
                if self._share:
                    dur = self._shared(dst, start, msg.n, dur)
                end = start + dur if cpu is None else cpu.advance(dst, start, dur)
                if self._share:
                    self._node_copies[self._node_of(dst)].append(end)
                self._busy[dst] = end
                msg.start = msg.end = start
                self._count(msg, start, end, start, end)
                heapq.heappush(self._heap, (end, self._seq(), self._arrive_h, msg))
                return
            # over a NIC the receiver's engine must see the handshake: at its next poll after the callback
            # running now, and not inside a detour
            if cpu is not None:
                start = cpu.advance(dst, start, 0.0)
            if start > now:
                heapq.heappush(self._heap, (start, self._seq(), self._depart_h, msg))
                return
        self._depart(msg)

    def _node_of(self, rank: int) -> int:
        """The node of `rank` for `node_bw` (one rank per node under transfer 'cpu': all of them share one)."""
        rpn = self._rpn
        return rank // rpn if rpn > 1 else 0

    def _shared(self, dst: int, start: float, n: int, dur: float) -> float:
        """A shared-memory copy of `n` elements into `dst` starting at `start`, under `node_bw` and
        `copy_contention`: the copies of one node share its memory bandwidth, each getting an equal share
        fixed when it starts (k copies running: node_bw / k), at most its own rate (`dur`, which k copies
        stretch by k**copy_contention). The caller records its end."""
        ends = self._node_copies.setdefault(self._node_of(dst), [])
        ends[:] = [e for e in ends if e > start]
        k = len(ends) + 1
        if self._contention:
            dur *= k**self._contention
        return max(dur, n * self.itemsize * k / self._node_bw) if self._node_bw else dur

    def _depart(self, msg: _Msg) -> None:
        """Onto the network; eager messages between ranks of one node go through shared memory instead."""
        rpn = self._rpn
        if rpn > 1 and msg.src // rpn == msg.dst // rpn:
            now = self.now
            copy = msg.n * self._copycost
            if msg.n > self._large_elems:
                copy *= self._large_cost
            if self._share:
                copy = self._shared(msg.dst, now, msg.n, copy)
                self._node_copies[self._node_of(msg.dst)].append(now + copy)
            msg.start, msg.end = now, now + copy
            self._land(msg, now + self._L + copy)
            return
        pairs = self._pairs
        if pairs is not None:  # one pair's messages in order: wait behind the one on the network
            waiting = pairs.get((msg.src, msg.dst))
            if waiting is not None:
                waiting.append(msg)
                return
            pairs[(msg.src, msg.dst)] = deque()
        self._links.depart(msg)

    def _pair_next(self, key: tuple[int, int]) -> None:
        """links 'pair': the pair's message on the network has left; the next one behind it departs."""
        assert self._pairs is not None
        waiting = self._pairs[key]
        if waiting:
            self._links.depart(waiting.popleft())
        else:
            del self._pairs[key]

    def _count(self, msg: _Msg, t0: float, t1: float, r0: float, r1: float) -> None:
        self.messages += 1
        self.bytes += msg.n * self.itemsize
        if self._trace is not None:
            self._trace_msg(msg, t0, t1, r0, r1)

    def _trace_msg(self, msg: _Msg, t0: float, t1: float, r0: float, r1: float) -> None:
        """Record the message just counted (the `messages`-th) in the trace."""
        assert self._trace is not None
        nbytes = msg.n * self.itemsize
        mid = self.messages
        self._trace.sends.append((msg.src, msg.dst, msg.tag, nbytes, t0, t1, mid))
        self._trace.recvs.append((msg.dst, msg.src, msg.tag, nbytes, r0, r1, mid))

    def _land(self, msg: _Msg, arrival: float, rx: float = -1.0) -> None:
        """Schedule the completions of a message whose last byte arrives at `arrival`."""
        heap, seq = self._heap, self._seq
        if self._pairs is not None and (msg.src, msg.dst) in self._pairs:  # its last byte has left now
            heapq.heappush(heap, (self.now, seq(), self._pair_next_h, (msg.src, msg.dst)))
        if msg.eager:
            if self.data:
                msg.sbuf = np.array(msg.sbuf, copy=True)  # the sender may reuse its buffer once it has left
            heapq.heappush(heap, (msg.end, seq(), self._eager_sent_h, msg))
        heapq.heappush(heap, (arrival, seq(), self._arrive_h, msg))
        self.messages += 1
        self.bytes += msg.n * self.itemsize
        if self._trace is not None:
            start = msg.start
            self._trace_msg(msg, start, msg.end, rx if rx >= 0 else start, arrival)

    def _route_latency(self, src: int, dst: int) -> float:
        """A rendezvous handshake over a described network: its route's latency (L within a node)."""
        rpn = self._rpn
        if self._cpu_copy or (rpn > 1 and src // rpn == dst // rpn):
            return self._L
        return self._routes.route(src, dst)[1]

    def _eager_sent(self, msg: _Msg) -> None:
        self._complete(msg.src, msg.scb)

    def _arrive(self, msg: _Msg) -> None:
        rcb = msg.rcb
        if rcb is None:  # eager, receive not posted yet: it completes when posted
            msg.landed = True
            return
        if self._plain and len(msg.rbuf) == msg.n:  # the common case, without data, records or traces
            self._complete(msg.dst, rcb)
        else:
            self._deliver(msg)
        if not msg.eager:
            self._complete(msg.src, msg.scb)

    def _late_recv(self, msg: _Msg) -> None:
        self._deliver(msg)

    def _deliver(self, msg: _Msg) -> None:
        rbuf = msg.rbuf
        if len(rbuf) != msg.n:
            raise SizeMismatch(
                f"message {msg.src}->{msg.dst} tag {msg.tag} has {msg.n} elements, the receive expects {len(rbuf)}"
            )
        if self.data:
            np.copyto(rbuf, msg.sbuf)
        if self.record:
            self.delivered.append((msg.src, msg.dst, msg.tag, msg.n))
        rcb = msg.rcb
        assert rcb is not None
        if self._trace is not None:
            rcb = self._tagged(msg.tag, rcb)
        self._complete(msg.dst, rcb)

    def _tagged(self, tag: int, cb: Callback) -> Callback:
        """A receive callback that tells traced folds which message they belong to."""

        def run() -> None:
            self.cur_tag = tag
            cb()
            self.cur_tag = -1

        return run
