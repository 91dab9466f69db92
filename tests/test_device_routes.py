"""The rule "when MPI is not CUDA-aware, no device pointer is ever passed to MPI", checked without a GPU.

Device memory is faked with host memory from one arena (tests/fake_device.py) behind
`__cuda_array_interface__` / CUDA `__dlpack__`, and a stand-in CuPy moves and folds it. An MPI guard
(tests/device_guard.py: a PMPI library generated from mpi.h, preloaded into every rank) counts every
buffer argument of every MPI call that points into the arena. tests/programs/device_routes.py runs every
route (below/above the device threshold, buffer specifications, derived types, MINLOC, algorithm=native,
bad arguments, nonblocking, persistent, pickle-based with device memory inside) with results checked
against native MPI; with ADAPTCOLL_CUDA_AWARE=0 the guard must see no device pointer, and with =1 (the
control) it must see them, which shows the routes really reach MPI and the guard really watches them.
In-process tests check the routing decisions and the staged call on COMM_SELF.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import fake_device as fd
import numpy as np
import pytest
from device_guard import GuardUnavailable, build, preloaded, wrappers_source
from mpi4py import MPI

from adaptcoll.decision import decide
from adaptcoll.device import aware as cuda_aware
from adaptcoll.device import route as device_route
from adaptcoll.device.staged import StagedCall
from adaptcoll.runtime import settings
from adaptcoll.runtime.engine import engine
from adaptcoll.runtime.native import BELOW_THRESHOLD, Kind, Native

PROGRAM = Path(__file__).parent / "programs" / "device_routes.py"
RANKS = 3


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    try:
        return build(tmp_path_factory.mktemp("guard"))
    except GuardUnavailable as why:
        pytest.skip(f"the MPI guard cannot be built here: {why}")


def _launch(library: Path, aware: str, out: Path, timeout: float = 300) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(ADAPTCOLL_CUDA_AWARE=aware, MPIEXEC_TIMEOUT=str(int(timeout) - 10), DEVICE_ROUTES_OUT=str(out))
    command = preloaded(RANKS, library, env)
    command += [sys.executable, "-m", "mpi4py", str(PROGRAM)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"stdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-6000:]}"
    reports = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    assert sorted(r["rank"] for r in reports) == list(range(RANKS)), run.stdout
    return reports


def test_guard_wraps_every_buffer_taking_mpi_call(guard: tuple[Path, list[str]]) -> None:
    _, wrapped = guard
    large_count = "MPI_Send_c" in wrapped  # (MPI 4's large-count calls: MPICH has them, Open MPI 5.0 not)
    for name in ("Bcast", "Ibcast", "Bcast_init", "Reduce", "Ireduce", "Reduce_init", "Allreduce", "Iallreduce"):
        assert f"MPI_{name}" in wrapped and (f"MPI_{name}_c" in wrapped or not large_count), name
    assert large_count or MPI.get_vendor()[0] != "MPICH"
    for name in ("Isend", "Issend", "Irecv", "Send", "Recv", "Mrecv", "Reduce_local", "Allgather", "Gather"):
        assert f"MPI_{name}" in wrapped, name
    assert "MPI_Comm_rank" not in wrapped and "MPI_Wtime" not in wrapped


def test_wrappers_check_each_buffer_argument() -> None:
    header = (
        "int MPI_Sendrecv(const void *sendbuf, int n, MPI_Datatype t, int dest, int tag, void *recvbuf, int m, "
        "MPI_Datatype u, int source, int rtag, MPI_Comm comm, MPI_Status *status);\n"
        "int PMPI_Sendrecv(const void *sendbuf, int n, MPI_Datatype t, int dest, int tag, void *recvbuf, int m, "
        "MPI_Datatype u, int source, int rtag, MPI_Comm comm, MPI_Status *status);\n"
        "int MPI_Comm_size(MPI_Comm comm, int *size);\nint PMPI_Comm_size(MPI_Comm comm, int *size);\n"
        "int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr);\n"
        "int PMPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr);\n"
    )
    source, wrapped = wrappers_source(header)
    assert wrapped == ["MPI_Sendrecv"]
    assert 'adaptcoll_guard_check("MPI_Sendrecv", sendbuf);' in source
    assert 'adaptcoll_guard_check("MPI_Sendrecv", recvbuf);' in source
    assert "return PMPI_Sendrecv(sendbuf, n, t, dest, tag, recvbuf, m, u, source, rtag, comm, status);" in source


def test_no_device_pointer_reaches_mpi_when_it_is_not_cuda_aware(guard: tuple[Path, list[str]], tmp_path: Path) -> None:
    reports = _launch(guard[0], "0", tmp_path)
    for report in reports:
        assert report["hits"] == 0, f"rank {report['rank']}: device pointers reached {report['calls']}"
        assert report["control_hits"] >= 1, "the guard did not see a device pointer handed to MPI directly"
        assert report["checked"] > 100
    routes = reports[0]["routes"]
    staged = {label for label, how in routes.items() if how.startswith("native (staged): ")}
    served = {label for label, how in routes.items() if how == "adaptcoll"}
    for label in (
        "Allreduce 1024B f4",
        "Bcast (buf, n/2, FLOAT)",
        "Bcast (buf, 1, vector)",
        "Allreduce MINLOC",
        "Reduce non-commutative root=last",
        "Allreduce algorithm=native",
        "Iallreduce 1024B",
        "Reduce_init 1024B",
        "Iallreduce algorithm=native",
        "Bcast 1024B dlpack",
        "Allreduce 1MiB f4 shipped defaults",
    ):
        assert label in staged, (label, routes.get(label))
    for label in (
        "Allreduce 4MiB f4 shipped defaults",
        "Allreduce [buf, FLOAT]",
        "Bcast plain vs [buf, 1, contiguous(n)]",
        "Allreduce 65536B dlpack",
        "Ibcast 65536B",
        "Bcast_init 65536B",
    ):
        assert label in served, (label, routes.get(label))
    assert routes["Bcast root out of range"] == "error Exception"
    assert routes["Allreduce non-contiguous"] == "error BufferError"
    # small exact CuPy arrays: staged without a decision (adaptcoll.device.small), every root
    assert routes["small arrays decided"] == "0"
    for root in range(RANKS):
        for label in (
            f"small Bcast root={root}",
            f"small Reduce f4 root={root}",
            f"small Reduce in place (IN_PLACE) root={root}",
            f"small Ibcast root={root}",
            f"small Ireduce root={root}",
        ):
            assert routes[label] == "native (staged): below native_below", (label, routes.get(label))


def test_guard_sees_the_routes_when_mpi_is_cuda_aware(guard: tuple[Path, list[str]], tmp_path: Path) -> None:
    """The control: with ADAPTCOLL_CUDA_AWARE=1 the same program hands device pointers to MPI (natively
    decided calls directly, served calls segment by segment), and the guard counts them."""
    reports = _launch(guard[0], "1", tmp_path)
    for report in reports:
        calls = {name.removesuffix("_c") for name in report["calls"]}
        assert report["hits"] > 0
        assert {"MPI_Allreduce", "MPI_Bcast", "MPI_Iallreduce"} <= calls, calls
        assert calls & {"MPI_Isend", "MPI_Issend", "MPI_Irecv"}, calls  # served calls: segments on the device
    routes = reports[0]["routes"]
    assert not any(how.startswith("native (staged)") for how in routes.values()), routes
    assert int(routes["small arrays decided"]) > 0  # CUDA-aware: no small-array fast path, every call decided


# -- in-process: the decisions, and the staged call on COMM_SELF ----------------------------------------


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch):
    """The stand-in CuPy for this test only (module caches included), and a private communicator whose
    device context dies with it."""
    fd.patch_in(monkeypatch, seed=3)
    comm = MPI.COMM_SELF.Dup()
    yield comm
    comm.Free()


def test_route_native_keeps_host_calls_and_cuda_aware_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    host = np.zeros(8)
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "0")
    assert device_route.route_native("bcast", BELOW_THRESHOLD, MPI.COMM_SELF, (host, 0)) is BELOW_THRESHOLD
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "1")
    dev = fd.CAIBuffer(np.zeros(8))
    assert device_route.route_native("allreduce", BELOW_THRESHOLD, MPI.COMM_SELF, (dev, dev, MPI.SUM)) is (
        BELOW_THRESHOLD
    )
    with_error = Native("x", Kind.INVALID, ValueError("raised before MPI"))
    assert device_route.route_native("bcast", with_error, MPI.COMM_SELF, (dev, 0)) is with_error


def test_without_cupy_device_buffers_are_staged_through_the_cuda_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CuPy and a non-CUDA-aware MPI: device memory is copied to and from host memory by the CUDA
    driver (here the fake driver over the arena) around the native call; nothing is refused, so a rank
    passing device memory and one passing host memory (or IN_PLACE) still enter the same collective."""
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "0")
    monkeypatch.setattr(device_route, "cupy_available", lambda: False)
    comm = MPI.COMM_SELF
    host = np.arange(16, dtype="f4")
    copies, streams = len(fd.DRIVER.copies), len(fd.DRIVER.streams)
    cases = [
        ("bcast", lambda: (fd.CAIBuffer(host, stream=2), 0)),
        ("bcast", lambda: ([fd.DLPackBuffer(host), MPI.FLOAT], 0)),
        ("allreduce", lambda: (fd.CAIBuffer(host), fd.CAIBuffer(np.zeros(16, "f4")), MPI.SUM)),
        ("allreduce", lambda: (MPI.IN_PLACE, fd.CAIBuffer(host), MPI.SUM)),
        ("reduce", lambda: (fd.DLPackBuffer(host), fd.CAIBuffer(np.zeros(16, "f4")), MPI.SUM, 0)),
    ]
    for collective, make in cases:
        for form in ("run", "start"):
            args = make()
            found = device_route.route_native(collective, BELOW_THRESHOLD, comm, args)
            assert isinstance(found, StagedCall) and not found.with_cupy, (collective, args)
            if form == "run":
                found.run()
            else:
                operation = found.start()
                engine().wait_for(lambda op=operation: op.done)
            out = args[0] if collective == "bcast" else args[1]
            out = out[0] if isinstance(out, list) else out
            np.testing.assert_array_equal(out.get(), host, err_msg=f"{collective} {form}")
    assert len(fd.DRIVER.copies) > copies
    assert 2 in fd.DRIVER.streams[streams:] and 1 in fd.DRIVER.streams[streams:]  # CAI's stream; DLPack's legacy


def test_awareness_is_decided_once_per_override_value(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr(cuda_aware, "_DECIDED", {})
    monkeypatch.setattr(cuda_aware, "cuda_aware_mpi", lambda comm=None: asked.append(1) or (False, "test"))
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "0")
    assert cuda_aware.mpi_cuda_aware() == cuda_aware.mpi_cuda_aware() == (False, "test")
    monkeypatch.setenv("ADAPTCOLL_CUDA_AWARE", "1")
    cuda_aware.mpi_cuda_aware()
    assert len(asked) == 2


def test_staged_plans_copy_only_what_the_call_reads_and_writes() -> None:
    def dev(spec: object) -> bool:
        return isinstance(spec[0] if isinstance(spec, (list, tuple)) else spec, fd.CAIBuffer)

    comm = MPI.COMM_SELF
    a, b = fd.CAIBuffer(np.zeros(4)), fd.CAIBuffer(np.zeros(4))

    def slots(collective: str, args: tuple) -> tuple[list[tuple[int, bool, bool]], list]:
        call = StagedCall(collective, comm, args, dev)
        return [(s.index, s.copy_in, s.copy_out) for s in call.slots], call.args

    assert slots("bcast", (a, 0))[0] == [(0, True, False)]  # the root sends
    assert slots("bcast", (a, 1))[0] == [(0, False, True)]  # a receiver: nothing to copy in
    assert slots("bcast", ([a, MPI.DOUBLE], 1))[0] == [(0, True, True)]  # a datatype may leave holes
    assert slots("allreduce", (a, b, MPI.SUM))[0] == [(0, True, False), (1, False, True)]
    plan, args = slots("allreduce", (a, a, MPI.SUM))
    assert plan == [(1, True, True)] and args[0] is MPI.IN_PLACE
    plan, args = slots("reduce", (MPI.IN_PLACE, a, MPI.SUM, 0))
    assert plan == [(1, True, True)] and args[0] is MPI.IN_PLACE
    plan, args = slots("reduce", (a, b, MPI.SUM, 1))  # rank 0 is not the root: recvbuf ignored
    assert plan == [(0, True, False)] and args[1] is None


def test_staged_call_on_comm_self_blocking_and_nonblocking(fake_cupy) -> None:
    comm = fake_cupy
    host = np.arange(64, dtype="f4")
    for form in ("run", "start"):
        send, recv = fd.CAIBuffer(host), fd.CAIBuffer(np.zeros(64, "f4"))
        decision = decide.allreduce(comm, send, recv, MPI.SUM)
        assert isinstance(decision, decide.Prepared) and decision.run is not None
        assert decision.native_reason == "native (staged): below native_below"
        if form == "run":
            decision.run()
        else:
            operation = decision.start()
            engine().wait_for(lambda op=operation: op.done)
        np.testing.assert_array_equal(recv.get(), host)
        np.testing.assert_array_equal(send.get(), host)
    # MINLOC on a buffer specification, above the device threshold: staged, any form
    with settings.configured(device_native_below=0):
        pairs = np.zeros(8, np.dtype([("v", "f8"), ("i", "i4")], align=True))  # MPI.DOUBLE_INT's layout
        pairs["v"] = np.arange(8)
        dev_in, dev_out = fd.CAIBuffer(pairs), fd.CAIBuffer(np.zeros_like(pairs))
        decision = decide.allreduce(comm, [dev_in, MPI.DOUBLE_INT], [dev_out, MPI.DOUBLE_INT], MPI.MINLOC)
        assert isinstance(decision, decide.Prepared)
        assert decision.native_reason == "native (staged): datatype not served"
        decision.run()
        got = dev_out.get()  # fields only: MPICH's MINLOC writes the struct's padding bytes too
        np.testing.assert_array_equal(got["v"], pairs["v"])
        np.testing.assert_array_equal(got["i"], pairs["i"])
        # served above the threshold: no native reason
        served = decide.allreduce(comm, fd.CAIBuffer(host), fd.CAIBuffer(host * 0), MPI.SUM)
        assert isinstance(served, decide.Prepared) and served.native_reason is None and served.run is None


def test_device_buffers_use_their_own_threshold(fake_cupy) -> None:
    comm = fake_cupy
    n = (2 << 20) // 4  # 2 MiB float32: at a host Allreduce threshold of 1M, below the device one (4M)
    with settings.configured(allreduce_native_below="1M"):
        host = decide.allreduce(comm, np.ones(n, "f4"), np.zeros(n, "f4"), MPI.SUM)
        assert isinstance(host, decide.Prepared) and host.native_reason is None
        dev = decide.allreduce(comm, fd.CAIBuffer(np.ones(n, "f4")), fd.CAIBuffer(np.zeros(n, "f4")), MPI.SUM)
        assert isinstance(dev, decide.Prepared) and dev.native_reason == "native (staged): below native_below"
        four = 2 * n  # 4 MiB: served on the device
        dev = decide.allreduce(comm, fd.CAIBuffer(np.ones(four, "f4")), fd.CAIBuffer(np.zeros(four, "f4")), MPI.SUM)
        assert isinstance(dev, decide.Prepared) and dev.native_reason is None


def test_pickle_buffers_of_device_memory_are_copied_to_host() -> None:
    managed = fd.ManagedArray.of(np.arange(1000.0))
    pickle_buffer = pickle.PickleBuffer(managed)
    flat = np.frombuffer(memoryview(pickle_buffer).cast("B"), np.uint8)
    copied = device_route.host_pickle_buffer(pickle_buffer, flat)
    assert copied is not flat and not fd.on_device(copied) and fd.on_device(flat)
    np.testing.assert_array_equal(copied.view("f8"), np.arange(1000.0))
    host = np.arange(10.0)
    host_flat = np.frombuffer(memoryview(host).cast("B"), np.uint8)
    assert device_route.host_pickle_buffer(pickle.PickleBuffer(host), host_flat) is host_flat


def test_device_buffers_are_read_after_their_producer_finished(fake_cupy) -> None:
    """The stream contract at the door: a CAI producer's stream is synchronized, and a DLPack producer is
    asked to order its work before CuPy's current stream, which is then synchronized."""
    from adaptcoll.device import parse_device

    waited = sys.modules["cupy"].cuda.runtime.synchronized
    cai = fd.CAIBuffer(np.ones(16, "f4"), stream=0x77)
    assert parse_device(cai, writable=False).count == 16
    assert 0x77 in waited
    waited.clear()
    dlpack = fd.DLPackBuffer(np.ones(16, "f4"))
    assert parse_device(dlpack, writable=True).count == 16
    assert dlpack.streams == [1] and waited == [0]  # legacy default stream: asked with 1, then synchronized
    readonly = fd.CAIBuffer(np.ones(16, "f4"), readonly=True)
    assert parse_device(readonly, writable=True) == Native("read-only buffer", Kind.BAD_BUFFER)


def test_every_start_waits_for_the_producers_of_device_buffers(fake_cupy) -> None:
    """A persistent request's device buffers may be rewritten on the user's stream between starts (the
    H100 check refilled a Bcast buffer with CuPy and the next start's receive landed before the refill,
    which then overwrote it): every start of a served call synchronizes the producers of its buffers
    again, not only the decision (which waits once, in parse_device)."""
    comm = fake_cupy
    waited = sys.modules["cupy"].cuda.runtime.synchronized
    n = 1 << 12
    buf = fd.CAIBuffer(np.arange(n, dtype="f4"), stream=0x71)
    send, recv = fd.CAIBuffer(np.ones(n, "f4"), stream=0x72), fd.CAIBuffer(np.zeros(n, "f4"), stream=0x73)
    with settings.configured(device_native_below=0):
        decisions = {
            "Bcast": (decide.bcast(comm, buf, 0), {0x71}),
            "Reduce": (decide.reduce(comm, send, recv, MPI.SUM, 0), {0x72, 0x73}),
            "Allreduce": (decide.allreduce(comm, send, recv, MPI.SUM), {0x72, 0x73}),
            "Allreduce in place": (decide.allreduce(comm, MPI.IN_PLACE, recv, MPI.SUM), {0x73}),
        }
    for name, (decision, producers) in decisions.items():
        assert isinstance(decision, decide.Prepared) and decision.native_reason is None, name
        for start in (1, 2):
            waited.clear()
            operation = decision.start()
            engine().wait_for(lambda op=operation: op.done)
            assert producers <= set(waited), f"{name}, start {start}: waited for {waited}"
    np.testing.assert_array_equal(buf.get(), np.arange(n, dtype="f4"))
    np.testing.assert_array_equal(recv.get(), np.ones(n, "f4"))


def test_osu_device_benchmark_on_fake_device_memory(guard: tuple[Path, list[str]], tmp_path: Path) -> None:
    """bench/osu.py --device cupy end to end on the stand-in CuPy, under the guard: adaptcoll and the
    hand-written staged path agree with native MPI (its result check), native on device buffers is
    refused without CUDA-aware MPI, and no device pointer reaches MPI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(ADAPTCOLL_CUDA_AWARE="0", MPIEXEC_TIMEOUT="110", DEVICE_ROUTES_OUT=str(tmp_path))
    wrapper = Path(__file__).parent / "programs" / "osu_fake_device.py"
    base = [*preloaded(2, guard[0], env), sys.executable, "-m", "mpi4py", str(wrapper)]
    args = ["--device", "cupy", "-c", "bcast,reduce,allreduce", "--sizes", "4K,2M", "-i", "3", "-x", "1", "--quiet"]
    run = subprocess.run(base + args, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.count("# Implementation: adaptcoll") == 3 and run.stdout.count("# Implementation: staged") == 3
    for path in sorted(tmp_path.glob("osu-rank*.json")):
        report = json.loads(path.read_text())
        assert report["hits"] == 0 and report["checked"] > 0, report
    refused = subprocess.run(base + args + ["--impl", "native"], env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "not CUDA-aware" in refused.stderr, refused.stderr[-2000:]


def test_grouped_device_benchmark_on_fake_device_memory(guard: tuple[Path, list[str]], tmp_path: Path) -> None:
    """bench/grouped.py --device cupy end to end on the stand-in CuPy at 2 ranks, under the guard: every
    implementation (hand-staged per array, hand-packed, grouped, persistent, with a setting) agrees with
    native MPI (its first-step check), lands in the JSON, and no device pointer reaches MPI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADAPTCOLL_", "PYTEST_"))}
    env.update(ADAPTCOLL_CUDA_AWARE="0", MPIEXEC_TIMEOUT="110", DEVICE_ROUTES_OUT=str(tmp_path))
    wrapper = Path(__file__).parent / "programs" / "grouped_fake_device.py"
    base = [*preloaded(2, guard[0], env), sys.executable, "-m", "mpi4py", str(wrapper)]
    served = "grouped:multi_device_bucket_size=8K;device_native_below=0"
    impls = ["per_array", "packed", "grouped", "grouped_init", served]
    out = tmp_path / "grouped.json"
    args = ["--device", "cupy", "--set", "resnet50", "--max-arrays", "12", "--iters", "2", "--warmup", "1"]
    args += [a for impl in impls for a in ("--impl", impl)] + ["--json", str(out)]
    run = subprocess.run(base + args, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["device"] == "cupy" and doc["arrays"] == 12 and sorted(doc["impls"]) == sorted(impls)
    assert all(len(v["samples_s"]) == 2 for v in doc["impls"].values())
    notes = doc["stats"]["Allreduce_multi"]["notes"]
    assert notes.get("packed device unit", 0) > 0, notes
    for path in sorted(tmp_path.glob("grouped-rank*.json")):
        report = json.loads(path.read_text())
        assert report["hits"] == 0 and report["checked"] > 0, report
