"""Clock offsets between the ranks of a communicator, measured when tracing starts on it.

Rank 0 plays `ROUNDS` ping-pongs with every other rank in turn. In round k rank 0 reads its clock
(t0) and sends; rank r reads its clock (tr) on arrival and answers; rank 0 reads its clock again (t1)
on the answer and sends t1 along with the next ping. Rank r keeps the round with the shortest round
trip: its clock minus rank 0's is tr - (t0 + t1) / 2, off by at most half that round trip (the two
one-way delays may differ). Every wait drives the engine, so other ranks' pending operations keep
moving while a rank waits for its turn; a barrier at the end lets the ranks leave together, so the
first traced operation does not start skewed by the measurement. The messages use the starting
operation's first tag on the private communicator, which no other operation holds and which the
operation itself uses only after.
"""

from __future__ import annotations

import os
import time

import numpy as np
from mpi4py import MPI

from ..runtime.engine import Engine

__all__ = ["ROUNDS", "measure_offset"]

ROUNDS = 16
"""Ping-pongs per rank; the shortest round trip wins."""

_now = time.perf_counter_ns


def _wait(requests: list[MPI.Request], eng: Engine) -> None:
    while not MPI.Request.Testall(requests):
        if not eng.progress():
            os.sched_yield()


def measure_offset(comm: MPI.Intracomm, tag: int, eng: Engine, rounds: int = ROUNDS) -> tuple[int, int]:
    """(this rank's clock minus comm rank 0's, the round trip it was measured with), in ns (collective)."""
    if comm.Get_size() == 1:
        return 0, 0
    found = _ping_pong(comm, tag, eng, rounds)
    _wait([comm.Ibarrier()], eng)
    return found


def _ping_pong(comm: MPI.Intracomm, tag: int, eng: Engine, rounds: int) -> tuple[int, int]:
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        ping = np.zeros(2, np.int64)
        pong = np.zeros(1, np.int64)
        for peer in range(1, size):
            ping[1] = 0
            for _ in range(rounds):
                answer = comm.Irecv(pong, peer, tag)
                ping[0] = _now()
                _wait([comm.Isend(ping, peer, tag), answer], eng)
                ping[1] = _now()
            ping[0] = 0
            _wait([comm.Isend(ping, peer, tag)], eng)  # the last round's t1
        return 0, 0
    t0 = np.zeros(rounds, np.int64)
    tr = np.zeros(rounds, np.int64)
    t1 = np.zeros(rounds, np.int64)
    msg = np.zeros(2, np.int64)
    reply = np.zeros(1, np.int64)
    for k in range(rounds + 1):
        _wait([comm.Irecv(msg, 0, tag)], eng)
        arrived = _now()
        if k:
            t1[k - 1] = msg[1]
        if k < rounds:
            t0[k], tr[k] = msg[0], arrived
            _wait([comm.Isend(reply, 0, tag)], eng)
    rtt = t1 - t0
    best = int(np.argmin(rtt))
    return int(tr[best] - (t0[best] + t1[best]) // 2), int(rtt[best])
