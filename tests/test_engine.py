"""The progress engine in one process (COMM_SELF): callbacks fire once per completion, sizes are checked,
one failing callback does not stop the others, polls are watched, wait_for drives to completion."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from adaptcoll.engine import Engine, MessageSizeError, MPITransport


@pytest.fixture()
def self_comm():
    comm = MPI.COMM_SELF.Dup()
    yield comm
    comm.Free()


def test_idle_sweep_reports_no_progress():
    eng = Engine()
    assert eng.progress() is False
    assert eng.pending == 0


def test_send_and_receive_callbacks_fire_once(self_comm):
    eng = Engine()
    t = MPITransport(self_comm, eng)
    fired: list[str] = []
    src = np.arange(8.0)
    dst = np.zeros(8)
    t.irecv(dst, 0, 5, lambda: fired.append("recv"))
    t.isend(src, 0, 5, lambda: fired.append("send"))
    eng.wait_for(lambda: len(fired) == 2)
    for _ in range(3):
        eng.progress()
    assert sorted(fired) == ["recv", "send"]
    np.testing.assert_array_equal(dst, src)
    assert eng.pending == 0 and eng.events == 2


def test_short_segment_raises_message_size_error(self_comm):
    eng = Engine()
    t = MPITransport(self_comm, eng)
    dst = np.zeros(8)
    t.irecv(dst, 0, 1, lambda: pytest.fail("a short segment must not be delivered"))
    t.isend(np.ones(4), 0, 1, lambda: None)
    with pytest.raises(MessageSizeError, match="had 32 bytes, this rank expected 64"):
        eng.wait_for(lambda: False)


def test_long_segment_raises_message_size_error(self_comm):
    eng = Engine()
    t = MPITransport(self_comm, eng)
    t.irecv(np.zeros(2), 0, 2, lambda: None)
    t.isend(np.ones(4), 0, 2, lambda: None)
    with pytest.raises(MessageSizeError, match="larger than this rank expected"):
        eng.wait_for(lambda: False)


def test_a_raising_callback_does_not_stop_the_others(self_comm):
    eng = Engine()
    t = MPITransport(self_comm, eng)
    fired: list[int] = []

    def boom() -> None:
        raise RuntimeError("callback failed")

    bufs = [np.zeros(1) for _ in range(3)]
    t.irecv(bufs[0], 0, 0, boom)
    t.irecv(bufs[1], 0, 1, lambda: fired.append(1))
    t.irecv(bufs[2], 0, 2, lambda: fired.append(2))
    for tag in range(3):
        MPI.Request.Wait(self_comm.Isend(np.ones(1), 0, tag))
    with pytest.raises(RuntimeError, match="callback failed"):
        while len(fired) < 2:
            eng.progress()
    eng.wait_for(lambda: len(fired) == 2)
    assert sorted(fired) == [1, 2]


def test_watch_fires_when_poll_turns_true():
    eng = Engine()
    polls = [0]

    def poll() -> bool:
        polls[0] += 1
        return polls[0] >= 4

    fired: list[bool] = []
    eng.watch(poll, lambda: fired.append(True))
    assert eng.pending == 1
    eng.wait_for(lambda: bool(fired))
    assert polls[0] == 4 and fired == [True] and eng.pending == 0
