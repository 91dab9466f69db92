"""Topology discovery: node, socket and NUMA groups of a communicator's ranks, from MPI and the OS.

Collective over the communicator. The result is an `adaptcoll.plans.topology.Topology`, the same value a
declared ADAPTCOLL_TOPOLOGY spec parses to. `discover` is blocking (Split_type, allreduce, allgather);
`begin_discover` is the nonblocking form a communicator's set-up uses (one Iallgather of each rank's
processor name and OS socket/NUMA ids), so that a nonblocking collective never blocks on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..plans.topology import ENV_VAR, Topology, os_numa_id, os_socket_id, parse

__all__ = ["discover", "begin_discover", "from_env_or_discover"]

_HW_TYPES = {"socket": ("socket", "Package", "package"), "numa": ("numanode", "NUMANode", "numa")}


def _leader_ids(comm: Any, sub: Any) -> tuple[int, ...]:
    """Per rank of `comm`: the lowest `comm` rank of its group in `sub` (a group id shared by the group)."""
    leader = sub.allreduce(comm.Get_rank(), op=MPI.MIN)
    return tuple(comm.allgather(leader))


def _hw_guided_ids(comm: Any, resource_types: Sequence[str]) -> tuple[int, ...] | None:
    """Group ids from MPI_COMM_TYPE_HW_GUIDED for the first resource type all ranks support, else None."""
    split_kind = getattr(MPI, "COMM_TYPE_HW_GUIDED", None)
    if split_kind is None:
        return None
    for resource in resource_types:
        info = MPI.Info.Create()
        info.Set("mpi_hw_resource_type", resource)
        try:
            sub = comm.Split_type(split_kind, key=comm.Get_rank(), info=info)
        except MPI.Exception:
            sub = MPI.COMM_NULL
        finally:
            info.Free()
        usable = sub != MPI.COMM_NULL
        try:
            if comm.allreduce(usable, op=MPI.LAND):
                return _leader_ids(comm, sub)
        finally:
            if usable:
                sub.Free()
    return None


def _os_ids(comm: Any, local_id: Callable[[set[int]], int | None]) -> tuple[int, ...] | None:
    """Group ids from this process's CPU affinity via `local_id`, or None unless every rank knows its id."""
    try:
        mine = local_id(set(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        mine = None
    ids = tuple(comm.allgather(mine))
    return None if None in ids else ids


def _refines(levels: list[tuple[int, ...]], ids: tuple[int, ...]) -> bool:
    """True if `ids` splits at least one group of the levels above it (else the level adds nothing)."""
    outer = set(zip(*levels))
    return len(set(zip(*levels, ids))) > len(outer)


def discover(comm: Any) -> Topology:
    """Collective: node level from Split_type(COMM_TYPE_SHARED), then socket and NUMA levels where known.

    Sockets/NUMA come from the OS (CPU affinity + sysfs, as `begin_discover` and so the collectives take
    them) when every rank can tell, else from COMM_TYPE_HW_GUIDED where the MPI supports the resource
    type (Open MPI 5.0 puts each unbound rank in a "socket" of its own); a level is dropped if unknown
    on any rank or if it splits no group.
    The node level is always present. Every communicator created here is freed.
    """
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        levels = [_leader_ids(comm, node)]
    finally:
        node.Free()
    names = ["node"]
    os_id = {"socket": os_socket_id, "numa": os_numa_id}
    for name in ("socket", "numa"):
        ids = _os_ids(comm, os_id[name])
        if ids is None:
            ids = _hw_guided_ids(comm, _HW_TYPES[name])
        if ids is not None and _refines(levels, ids):
            levels.append(ids)
            names.append(name)
    return Topology(tuple(levels), tuple(names))


_NAME = max(int(MPI.MAX_PROCESSOR_NAME), 1)
_RECORD = np.dtype([("name", f"S{_NAME}"), ("socket", "<i8"), ("numa", "<i8")])


def begin_discover(comm: Any) -> Callable[[], Topology | None]:
    """Start a nonblocking discovery on `comm` (collective: every rank calls it at the same point).

    Returns a poll that gives the Topology once the exchange has completed (None before): the node
    level groups ranks with the same processor name (ids: the lowest rank of each node), then a socket
    and a NUMA level from the OS as in `discover` (dropped if any rank cannot tell or if they split
    no group). Only MPI_Iallgather is used, so nothing here waits for the other ranks.
    """
    try:
        cpus = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = set()
    mine = np.zeros(1, _RECORD)
    mine["name"] = MPI.Get_processor_name().encode()[:_NAME]
    mine["socket"] = _or_unknown(os_socket_id(cpus) if cpus else None)
    mine["numa"] = _or_unknown(os_numa_id(cpus) if cpus else None)
    everyone = np.zeros(comm.Get_size(), _RECORD)
    request = comm.Iallgather([mine.view(np.uint8), MPI.BYTE], [everyone.view(np.uint8), MPI.BYTE])
    found: list[Topology] = []

    def poll() -> Topology | None:
        if not found:
            if not request.Test():
                return None
            found.append(_from_records(everyone))
        return found[0]

    return poll


def _or_unknown(value: int | None) -> int:
    return -1 if value is None else value


def _from_records(records: np.ndarray) -> Topology:
    """The Topology of per-rank (processor name, socket id, NUMA id) records (-1: unknown)."""
    first: dict[bytes, int] = {}
    levels = [tuple(first.setdefault(bytes(name), rank) for rank, name in enumerate(records["name"]))]
    names = ["node"]
    for name in ("socket", "numa"):
        ids = tuple(int(i) for i in records[name])
        if -1 not in ids and _refines(levels, ids):
            levels.append(ids)
            names.append(name)
    return Topology(tuple(levels), tuple(names))


def from_env_or_discover(comm: Any) -> Topology:
    """The ADAPTCOLL_TOPOLOGY spec if set (it must be the same on every rank), else `discover(comm)`."""
    spec = os.environ.get(ENV_VAR, "").strip()
    if spec:
        return parse(spec, comm.Get_size())
    return discover(comm)
