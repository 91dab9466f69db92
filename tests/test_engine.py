"""The progress engine in one process (COMM_SELF): callbacks fire once per completion, sizes are checked,
one failing callback does not stop the others, polls are watched, wait_for drives to completion; an
error fails its own operation only; a sweep tests a bounded chunk of requests; the watchdog's report."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import adaptcoll
from adaptcoll.forms.requests import Request
from adaptcoll.plans.segments import SegmentPlan
from adaptcoll.protocols.operation import Operation
from adaptcoll.runtime import engine as engine_module
from adaptcoll.runtime import settings
from adaptcoll.runtime.engine import IDLE_WORK_EVERY, SWEEP_CHUNK, Engine, MessageSizeError, MPITransport


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
    if MPI.get_vendor()[0] == "Open MPI":  # (measured on the 5.0.11 wheel, 2026-12-03)
        pytest.skip("Open MPI's self transport does not report truncation on COMM_SELF (no error, count 2 of 4)")
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


# -- errors belong to their operation (issue 10, item 5) ------------------------------------------
def _owned(eng: Engine, transport: MPITransport, collective: str = "Bcast", root: int | None = 0, nseg: int = 4):
    """An Operation numbered and owned by `transport` (what decide's start does), and a poster that posts
    under it."""
    op = Operation()
    plan = SegmentPlan(nseg, 1, 100 * (transport._seq + 1), 1 << 20)
    posted: list = []
    with eng.lock:
        transport.start_operation(op, collective, root, plan, lambda: posted.append(True))
    assert posted == [True] and op.info.seq == transport._seq

    def post(fn) -> None:
        previous, eng.owner = eng.owner, op
        try:
            fn()
        finally:
            eng.owner = previous

    return op, post


def test_size_error_fails_only_its_operation_and_is_never_raised_again(self_comm):
    eng = Engine()
    t = MPITransport(self_comm, eng, "test comm")
    bad, post_bad = _owned(eng, t, "Allreduce", None)
    good, post_good = _owned(eng, t, "Reduce", 0)
    landed = np.zeros(8)
    post_bad(lambda: t.irecv(np.zeros(8), 0, 1, lambda: pytest.fail("a short segment must not be delivered")))
    post_bad(lambda: t.irecv(landed, 0, 2, lambda: pytest.fail("its other receive must be cancelled")))
    post_good(lambda: t.irecv(np.zeros(4), 0, 3, good.complete))
    t.isend(np.ones(4), 0, 1, lambda: None)  # half the size the bad operation expects
    eng.wait_for(lambda: bad.done)  # no exception out of the engine
    assert isinstance(bad.error, MessageSizeError)
    assert "adaptcoll Allreduce: a segment from rank 0 had 32 bytes, this rank expected 64" in str(bad.error)
    with pytest.raises(MessageSizeError, match="Allreduce"):
        Request(bad).Wait()
    t.isend(np.full(4, 7.0), 0, 3, lambda: None)
    t.isend(np.ones(8), 0, 2, lambda: None)  # arrives after the failure: must not land in `landed`
    eng.wait_for(lambda: good.done)  # the other operation completes, nothing re-raised
    Request(good).Wait()
    assert good.error is None
    for _ in range(20):
        eng.progress()
    assert not landed.any(), "a failed operation's buffer was written after its error was raised"
    with pytest.raises(MessageSizeError):
        Request(bad).Test()  # its own handle keeps reporting its own error
    self_comm.Recv(np.zeros(8), 0, 2)  # drain the late message


def test_callback_error_fails_only_its_operation(self_comm):
    eng = Engine()
    t = MPITransport(self_comm, eng)
    broken, post_broken = _owned(eng, t)
    fine, post_fine = _owned(eng, t)

    def boom() -> None:
        raise RuntimeError("protocol bug")

    post_broken(lambda: t.irecv(np.zeros(1), 0, 5, boom))
    post_fine(lambda: t.irecv(np.zeros(1), 0, 6, fine.complete))
    for tag in (5, 6):
        MPI.Request.Wait(self_comm.Isend(np.ones(1), 0, tag))
    eng.wait_for(lambda: broken.done and fine.done)
    assert isinstance(broken.error, RuntimeError) and fine.error is None
    assert eng.pending == 0 and eng.progress() is False


# -- dropped requests drain in O(live requests) per sweep (issue 10, item 4) ---------------------
def test_a_sweep_tests_a_bounded_chunk_and_removes_in_place(self_comm, monkeypatch):
    eng = Engine()
    t = MPITransport(self_comm, eng)
    seen: list[int] = []
    real = engine_module._Testsome

    def counting(reqs, statuses=None):
        seen.append(len(reqs))
        return real(reqs, statuses)

    monkeypatch.setattr(engine_module, "_Testsome", counting)
    idle = 3 * SWEEP_CHUNK + 17  # receives that never match (like dropped requests' later segments)
    for k in range(idle):
        t.irecv(np.zeros(1), 0, 1000 + k, lambda: None)
    reqs, entries = eng._reqs, eng._entries
    fired: list[int] = []
    for k in range(50):
        t.irecv(np.zeros(1), 0, k, lambda k=k: fired.append(k))
        MPI.Request.Wait(self_comm.Isend(np.ones(1), 0, k))
    sweeps = 0
    while len(fired) < 50:
        eng.progress()
        sweeps += 1
    assert max(seen) <= SWEEP_CHUNK, "a sweep tested more than one chunk"
    assert sweeps <= 2 * (idle + 50) // SWEEP_CHUNK + 2, "completed requests took more than a turn to be found"
    assert eng._reqs is reqs and eng._entries is entries, "the request lists were rebuilt"
    assert eng.pending == idle and sorted(fired) == list(range(50))
    for req in eng._reqs:  # clean up: nothing will ever match them
        req.Cancel()
    eng.wait_for(lambda: eng.pending == 0)


# -- the watchdog (issue 10, item 9) --------------------------------------------------------------
def test_watchdog_names_the_operation_and_its_pending_segments_once(self_comm, capsys):
    eng = Engine()
    t = MPITransport(self_comm, eng, "MPI_COMM_WORLD")
    op, post = _owned(eng, t, "Bcast", 0, nseg=4)
    base = op.info.plan.tag_base
    post(lambda: t.irecv(np.zeros(2), 0, base + 2, lambda: None))
    post(lambda: t.isend(np.zeros(3), 0, base + 3, lambda: None, synchronous=True))
    with adaptcoll.configured(watchdog=0.2):
        deadline = time.monotonic() + 60
        while not op.info.reported:
            assert time.monotonic() < deadline, "the watchdog never reported"
            if not eng.progress():
                time.sleep(0.0005)
        for _ in range(5 * IDLE_WORK_EVERY):  # still stalled: no second report
            eng.progress()
        time.sleep(0.3)
        for _ in range(5 * IDLE_WORK_EVERY):
            eng.progress()
    err = capsys.readouterr().err
    assert err.count("adaptcoll watchdog") == 1, err
    assert "adaptcoll watchdog: rank 0 (of COMM_WORLD) has waited 0 s" in err
    assert "Bcast #1 on MPI_COMM_WORLD, root 0, 4 segment(s), pending:" in err
    assert f"receive from rank 0: segment 2 (tag {base + 2}, 16 B)" in err
    assert f"send to rank 0: segment 3 (tag {base + 3})" in err
    self_comm.Recv(np.zeros(3), 0, base + 3)  # completes the synchronous send
    eng._reqs[[e[1] >= 0 for e in eng._entries].index(True)].Cancel()
    eng.wait_for(lambda: eng.pending == 0)


def test_watchdog_setting_is_validated():
    assert settings.from_environ({"ADAPTCOLL_WATCHDOG": "0"}).watchdog == 0
    assert settings.from_environ({"ADAPTCOLL_WATCHDOG": "2.5"}).watchdog == 2.5
    assert settings.from_environ({"ADAPTCOLL_WATCHDOG_ABORT": "1"}).watchdog_abort is True
    for bad in ("-1", "soon", "inf", "nan"):
        with pytest.raises(ValueError, match="ADAPTCOLL_WATCHDOG: expected a number of seconds"):
            settings.from_environ({"ADAPTCOLL_WATCHDOG": bad})
