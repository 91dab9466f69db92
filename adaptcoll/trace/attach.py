"""Tracing one started operation: the decision layer calls `traced` only when ADAPTCOLL_TRACE is set.

The first traced operation on a communicator (per trace directory) registers it in this process's trace
file: its members as COMM_WORLD ranks, and this rank's clock offset to the communicator's rank 0
(measured then, collectively: see `clock`). Every rank of a communicator traces the same operations,
because the setting must be the same on all ranks, so all of them take part in that measurement.
"""

from __future__ import annotations

import os
import platform
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from ..plans.dealing import Link
from ..protocols.context import OpContext
from ..runtime import settings
from ..runtime.engine import engine
from ..runtime.transport import Callback
from ..state.comm_state import CommState
from . import clock
from .record import OpTrace, Recorder, recorder, traced_context

__all__ = ["traced"]

StartOne = Callable[[OpContext, Link, Callback], None]


@dataclass
class _CommTrace:
    """A communicator as registered in one trace file."""

    recorder: Recorder
    index: int
    world: tuple[int, ...]
    ops: int = 0


@dataclass
class _Instances:
    """Per trace file: how many communicators with the same members were registered (a shared key)."""

    seen: dict[tuple[int, ...], int] = field(default_factory=dict)


_comms: weakref.WeakKeyDictionary[CommState, _CommTrace] = weakref.WeakKeyDictionary()
_instances: weakref.WeakKeyDictionary[Recorder, _Instances] = weakref.WeakKeyDictionary()


def _boot_id() -> str:
    """This kernel's boot id: processes that share it read the same CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _process() -> dict[str, Any]:
    world = MPI.COMM_WORLD
    return {
        "format": 1,
        "world_rank": world.Get_rank(),
        "world_size": world.Get_size(),
        "pid": os.getpid(),
        "host": platform.node(),
        "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)",
        "boot_id": _boot_id(),
        "started_unix_s": time.time(),
    }


def _world_ranks(comm: MPI.Intracomm) -> tuple[int, ...]:
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return tuple(int(r) for r in MPI.Group.Translate_ranks(group, list(range(comm.Get_size())), world))
    finally:
        group.Free()
        world.Free()


def _register(st: CommState, rec: Recorder, tag: int) -> _CommTrace:
    dup = st.dup
    assert dup is not None, "operations start only once the communicator's set-up (Idup) completed"
    members = _world_ranks(dup)
    instances = _instances.setdefault(rec, _Instances())
    instance = instances.seen.get(members, 0)
    instances.seen[members] = instance + 1
    offset, rtt = clock.measure_offset(dup, tag, engine())
    entry = {
        "members": list(members),
        "instance": instance,
        "rank": st.rank,
        "size": st.size,
        "ref": members[0],
        "offset_ns": offset,
        "rtt_ns": rtt,
        "rounds": clock.ROUNDS,
    }
    found = _comms[st] = _CommTrace(rec, rec.add_comm(entry), members)
    return found


def traced(st: CommState, ctx: OpContext, start_one: StartOne) -> tuple[OpContext, StartOne]:
    """`ctx` with tracing transport and backend, and `start_one` recording each link's end.

    The operation's name is that of the function that defined `start_one` (decide.bcast, reduce, ...).
    """
    rec = recorder(settings.current().trace, _process)
    found = _comms.get(st)
    if found is None or found.recorder is not rec:
        found = _register(st, rec, ctx.plan.tag(0))  # collective: before any check that may differ by rank
    comm_op = found.ops
    found.ops += 1
    if rec.full:
        return ctx, start_one
    name = getattr(start_one, "__qualname__", "operation").split(".")[0]
    op = OpTrace(rec, rec.begin(found.index, comm_op, name, ctx.plan), found.world, ctx.plan, engine())
    traced_ctx = traced_context(ctx, op)

    def start_traced(c: OpContext, link: Link, done: Callback) -> None:
        start_one(c, link, op.done_callback(done))

    return traced_ctx, start_traced
