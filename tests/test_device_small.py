"""The fast path for small CuPy arrays (adaptcoll.device.small), in process on the stand-in CuPy
(tests/fake_device.py): taken for the plain case without asking the decision layer, counted as the
decision counts it, the producer's stream ordered before every read and write of the user's buffer and
waited for before MPI and before the call returns; every other case takes the full decision.
Multi-rank results under the MPI guard: tests/programs/device_routes.py (small_array_cases)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import fake_device as fd
import numpy as np
import pytest
from device_guard import GuardUnavailable, build, preloaded
from mpi4py import MPI

import adaptcoll
from adaptcoll.decision import decide
from adaptcoll.device import small
from adaptcoll.forms import collectives
from adaptcoll.runtime import settings
from adaptcoll.runtime.native import BELOW_THRESHOLD
from adaptcoll.tune.config import ServeConfig
from adaptcoll.tune.policy import CommFacts, CommTuning, resolve
from adaptcoll.tune.table import Band

STAGED_BELOW = "native (staged): below native_below"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The stand-in CuPy, fresh fast-path state, an adaptcoll communicator over a COMM_SELF duplicate
    whose tuning is known (one blocking host call), and counters of the decisions asked for."""
    cupy, _ = fd.patch_in(monkeypatch, seed=5)
    monkeypatch.setattr(small, "_state", None)
    monkeypatch.setattr(small, "_POOL", {})
    saved, small.ARRAY_TYPE[0] = small.ARRAY_TYPE[0], None
    decided: list[str] = []
    for name in ("bcast", "reduce", "allreduce"):
        real = getattr(decide, name)
        monkeypatch.setattr(
            decide, name, lambda *a, _real=real, _name=name, **k: decided.append(_name) or _real(*a, **k)
        )
    base = MPI.COMM_SELF.Dup()
    comm = adaptcoll.Intracomm(base)
    comm.Allreduce(np.zeros(4), np.zeros(4))  # the communicator's tuning is set up by its first blocking call
    decided.clear()
    adaptcoll.reset_stats()
    yield cupy, comm, decided
    base.Free()
    small.ARRAY_TYPE[0] = saved


def staged_count(name: str) -> int:
    return adaptcoll.stats().get(name, {}).get("native_reasons", {}).get(STAGED_BELOW, 0)


def test_small_cupy_arrays_skip_the_decision_once_a_call_was_staged(env: Any) -> None:
    cupy, comm, decided = env
    host = np.arange(256, dtype="f4")
    x, y = fd.device_array(host), fd.device_array(np.zeros(256, "f4"))
    comm.Allreduce(x, y, MPI.SUM)  # the first one is decided (and staged): it enables the fast path
    assert decided == ["allreduce"] and small.ARRAY_TYPE[0] is cupy.ndarray
    decided.clear()
    calls = [
        ("Allreduce", lambda: comm.Allreduce(x, y, MPI.SUM), y, host),
        ("Reduce", lambda: comm.Reduce(x, y, MPI.MAX, 0), y, host),
        ("Bcast", lambda: comm.Bcast(x, 0), x, host),
    ]
    for name, call, out, want in calls:
        y[...] = 0
        before = staged_count(name)
        call()
        assert staged_count(name) == before + 1, name
        np.testing.assert_array_equal(out.get(), want, err_msg=name)
    inplace = fd.device_array(host)
    for name, call in (
        ("Allreduce", lambda: comm.Allreduce(MPI.IN_PLACE, inplace, MPI.SUM)),
        ("Allreduce", lambda: comm.Allreduce(inplace, inplace, MPI.SUM)),
        ("Reduce", lambda: comm.Reduce(MPI.IN_PLACE, inplace, MPI.SUM, 0)),
        ("Reduce", lambda: comm.Reduce(inplace, inplace, MPI.SUM, 0)),
    ):
        before = staged_count(name)
        call()
        assert staged_count(name) == before + 1, name
    np.testing.assert_array_equal(inplace.get(), host)
    assert decided == [], decided
    assert adaptcoll.stats()["Allreduce"]["native_reasons"] == {STAGED_BELOW: 4}


def test_nonblocking_forms_start_the_staged_call_without_a_decision(env: Any) -> None:
    cupy, comm, decided = env
    host = np.arange(128, dtype="f4")
    x, y, z = fd.device_array(host), fd.device_array(np.zeros(128, "f4")), fd.device_array(np.zeros(128, "f4"))
    comm.Allreduce(x, y, MPI.SUM)  # decided: enables the fast path
    decided.clear()
    y[...] = 0
    with cupy.cuda.Stream(non_blocking=True) as producer:
        waited = cupy.cuda.runtime.synchronized
        waited.clear()
        requests = [
            comm.Iallreduce(x, y, MPI.SUM),
            comm.Ireduce(x, z, MPI.SUM, 0),
            comm.Ibcast(x, 0),
            comm.Iallreduce(MPI.IN_PLACE, x, MPI.SUM),
        ]
        adaptcoll.Request.Waitall(requests)
        assert waited.count(producer.ptr) >= 4  # each start waited for the producer's stream (as_cupy)
    assert decided == [], decided
    for out in (y, z, x):
        np.testing.assert_array_equal(out.get(), host)
    for name, n in (("Iallreduce", 2), ("Ireduce", 1), ("Ibcast", 1)):
        assert staged_count(name) == n, name
    user_op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    comm.Iallreduce(x, y, user_op).Wait()  # not the plain case: decided
    user_op.Free()
    assert decided == ["allreduce"]


def test_copies_follow_the_producer_stream_and_are_waited_for(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every copy out of or into the user's buffer is enqueued on CuPy's current stream (the producer's,
    as its __cuda_array_interface__ names it), so it comes after the work that produced or still uses
    the buffer; the host waits for that stream before MPI reads the pinned copy and before returning."""
    cupy, comm, _ = env
    runtime = cupy.cuda.runtime
    log: list[tuple] = []
    real_copy = runtime.memcpyAsync
    monkeypatch.setattr(
        runtime, "memcpyAsync", lambda d, s, n, k, st: log.append(("copy", d, s, st)) or real_copy(d, s, n, k, st)
    )
    monkeypatch.setattr(runtime, "streamSynchronize", lambda st: log.append(("sync", st)))
    for name in ("_BCAST", "_REDUCE", "_ALLREDUCE"):
        real = getattr(small, name)
        monkeypatch.setattr(small, name, lambda *a, _real=real: log.append(("mpi",)) or _real(*a))
    host = np.arange(64, dtype="i4")
    x, y = fd.device_array(host), fd.device_array(np.zeros(64, "i4"))
    comm.Allreduce(x, y, MPI.SUM)  # decided: enables the fast path
    with cupy.cuda.Stream(non_blocking=True) as producer:
        s = producer.ptr
        xp, yp = x.data.ptr, y.data.ptr
        for call, want in (
            (
                lambda: comm.Allreduce(x, y, MPI.SUM),
                [("copy", None, xp, s), ("sync", s), ("mpi",), ("copy", yp, None, s), ("sync", s)],
            ),
            (
                lambda: comm.Reduce(x, y, MPI.SUM, 0),
                [("copy", None, xp, s), ("sync", s), ("mpi",), ("copy", yp, None, s), ("sync", s)],
            ),
            (
                lambda: comm.Allreduce(MPI.IN_PLACE, y, MPI.SUM),
                [("copy", None, yp, s), ("sync", s), ("mpi",), ("copy", yp, None, s), ("sync", s)],
            ),
            (lambda: comm.Bcast(x, 0), [("copy", None, xp, s), ("sync", s), ("mpi",)]),  # the root only sends
        ):
            log.clear()
            call()
            got = [tuple(None if w is None else g for g, w in zip(entry, pattern)) for entry, pattern in zip(log, want)]
            assert len(log) == len(want) and got == want, log
            for entry in log:
                if entry[0] == "copy":  # the other end is a pinned host buffer, never device memory
                    other = entry[1] if entry[2] in (xp, yp) else entry[2]
                    assert not fd.ARENA.contains(other)
    np.testing.assert_array_equal(y.get(), host)


def test_the_full_decision_takes_every_other_case(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, comm, decided = env
    host = np.arange(32, dtype="f8")
    x, y = fd.device_array(host), fd.device_array(np.zeros(32))
    comm.Allreduce(x, y, MPI.SUM)
    decided.clear()
    user_op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    pairs = np.dtype([("v", "f4"), ("i", "i4")])
    odd = [
        ("allreduce", "Allreduce", lambda: comm.Allreduce(fd.CAIBuffer(host), fd.CAIBuffer(host * 0), MPI.SUM)),
        ("allreduce", "Allreduce", lambda: comm.Allreduce(x, fd.device_array(np.zeros(32, "f4")), MPI.SUM)),
        ("allreduce", "Allreduce", lambda: comm.Allreduce(x, y, user_op)),
        ("reduce", "Reduce", lambda: comm.Reduce(x, y, MPI.SUM, np.int64(0))),
        ("reduce", "Reduce", lambda: comm.Reduce(x, np.zeros(32), MPI.SUM, 0)),
        ("bcast", "Bcast", lambda: comm.Bcast(fd.device_array(np.zeros((8, 4), "f4")).T, 0)),  # not C-contiguous
        ("bcast", "Bcast", lambda: comm.Bcast(fd.device_array(np.zeros(4, pairs)), 0)),  # a dtype MPI lacks
    ]
    for collective, name, call in odd:
        decided.clear()
        try:
            call()
        except Exception:  # mismatched buffers: MPI's (or mpi4py's) error, as before
            pass
        assert decided == [collective], (name, decided)
    user_op.Free()
    decided.clear()
    with settings.configured(allreduce_algorithm="native"):  # its own reason: decided, counted under it
        comm.Allreduce(x, y, MPI.SUM)
    assert decided == ["allreduce"]
    assert adaptcoll.stats()["Allreduce"]["native_reasons"].get("native (staged): algorithm=native") == 1
    with settings.configured(device_native_below="64"):  # 256 bytes: served above the threshold
        decided.clear()
        comm.Allreduce(x, y, MPI.SUM)
        assert decided == ["allreduce"]
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "1")  # the route decided under another answer: decided again
    decided.clear()
    comm.Bcast(x, 0)
    assert decided == ["bcast"] and adaptcoll.stats()["Bcast"]["native_reasons"].get("below native_below") == 1


def test_errors_are_the_full_paths(env: Any) -> None:
    """Bad roots go through the decision, which stages them and lets MPI raise its own error."""
    _, comm, decided = env
    x = fd.device_array(np.zeros(16, "f4"))
    comm.Bcast(x, 0)
    decided.clear()
    for root in (1, -1, None):
        with pytest.raises(Exception) as found:
            comm.Bcast(x, root)
        with pytest.raises(type(found.value)):
            MPI.COMM_SELF.Bcast(np.zeros(16, "f4"), root)
    assert decided == ["bcast"] * 3


def test_a_communicator_whose_tuning_is_unknown_takes_the_full_path(env: Any) -> None:
    """The first blocking call on a communicator sets its tuning up collectively: never skipped."""
    _, comm, decided = env
    x = fd.device_array(np.zeros(16, "f4"))
    comm.Bcast(x, 0)
    base = MPI.COMM_SELF.Dup()
    fresh = adaptcoll.Intracomm(base)
    decided.clear()
    fresh.Bcast(x, 0)
    fresh.Bcast(x, 0)
    assert decided == ["bcast"]
    base.Free()


def test_a_communicator_of_nonblocking_calls_only_skips_the_decision_after_its_first(env: Any) -> None:
    """Before its first blocking call a communicator's nonblocking forms decide with the provisional
    tuning, and their fast path uses its thresholds: only the first call decides."""
    _, comm, decided = env
    host = np.arange(32, dtype="f4")
    x, y = fd.device_array(host), fd.device_array(np.zeros(32, "f4"))
    comm.Iallreduce(x, y, MPI.SUM).Wait()  # a call staged: the fast path knows CuPy's array type
    base = MPI.COMM_SELF.Dup()
    fresh = adaptcoll.Intracomm(base)
    decided.clear()
    for _ in range(3):
        y[...] = 0
        fresh.Iallreduce(x, y, MPI.SUM).Wait()
        np.testing.assert_array_equal(y.get(), host)
        fresh.Ibcast(x, 0).Wait()
    assert decided == ["allreduce"], decided
    base.Free()


def test_host_arrays_and_numpy_fast_path_unchanged(env: Any) -> None:
    cupy, comm, _ = env
    comm.Bcast(fd.device_array(np.zeros(16, "f4")), 0)
    a = np.arange(8.0)
    b = np.zeros(8)
    comm.Allreduce(a, b)
    np.testing.assert_array_equal(b, a)
    assert collectives._DEVICE_ARRAY[0] is cupy.ndarray
    assert adaptcoll.stats()["Allreduce"]["native_reasons"] == {"below native_below": 1}


def test_bench_device_small_on_fake_device_memory(tmp_path: Path) -> None:
    """bench/device_small.py end to end on the stand-in CuPy under the MPI guard (2 ranks): its result and
    stats() checks pass, it writes its JSON, and no device pointer reaches MPI."""
    try:
        library, _ = build(tmp_path / "guard")
    except GuardUnavailable as why:
        pytest.skip(f"the MPI guard cannot be built here: {why}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(ADAPTCOLL_CUDA_AWARE="0", MPIEXEC_TIMEOUT="110", DEVICE_ROUTES_OUT=str(tmp_path))
    program = Path(__file__).parent / "programs" / "device_small_fake.py"
    out = tmp_path / "small.json"
    command = [*preloaded(2, library, env), sys.executable, "-m", "mpi4py", str(program)]
    command += ["--sizes", "4K,64K", "--iters", "5", "--warmup", "2", "--json", str(out)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    rows = json.loads(out.read_text())["results"]
    assert [(r["collective"], r["bytes"]) for r in rows] == [
        (c, b) for c in ("Bcast", "Reduce", "Allreduce") for b in (4096, 65536)
    ]
    for path in sorted(tmp_path.glob("small-rank*.json")):
        report = json.loads(path.read_text())
        assert report["hits"] == 0 and report["checked"] > 0, report


def test_device_threshold_is_where_the_decision_stops_saying_below_native_below() -> None:
    """CommTuning.device_below: below it, and only below it, the full decision makes a device call
    native with BELOW_THRESHOLD (so the fast path counts every call as the decision would); a tuned
    native band after a served one (TUNED_NATIVE) and algorithm=native (its own reason) stay decided."""
    base = resolve(b"", "", CommFacts(2, 1, 2, 1.0, "MPICH"), warn=False)
    config = ServeConfig()
    bands = dict(base.bands)
    bands[("allreduce", "device")] = (Band(0, False, config), Band(1 << 14, True, config), Band(1 << 20, False, config))
    tuning = CommTuning(base.facts, bands, base.sources)
    sizes = [1, 1 << 13, (1 << 14) + 4, (1 << 20) - 4, 1 << 20, 3 << 20, 4 << 20, 8 << 20]

    def below(collective: str) -> list[bool]:
        return [decide._call(tuning, collective, n, True).native is BELOW_THRESHOLD for n in sizes]

    def fast(collective: str) -> list[bool]:
        return [n < tuning.device_below[collective] for n in sizes]

    assert tuning.device_below["allreduce"] == 1 << 20
    assert fast("allreduce") == below("allreduce") and fast("bcast") == below("bcast")
    with settings.configured(device_native_below="2M"):
        assert fast("allreduce") == below("allreduce") and tuning.device_below["bcast"] == 2 << 20
    with settings.configured(allreduce_native_below="64K", device_native_below=-1):  # explicit: no tuned band
        assert tuning.device_below["allreduce"] == 64 << 10 and fast("allreduce") == below("allreduce")
    with settings.configured(allreduce_algorithm="native"):
        assert tuning.device_below["allreduce"] == 0
