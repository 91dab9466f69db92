"""Tests for adaptcoll.noise: detour process lifecycle and accuracy, spec parsing, skew, network noise, FWQ."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from adaptcoll import noise

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)


# --- detours: lifecycle ---------------------------------------------------------------------------


def test_detours_start_stop_context_manager_leaves_no_child():
    cpu = max(os.sched_getaffinity(0))
    with noise.Detours(200, 100e-6, cpus=[cpu]) as det:
        pid = det.pid
        assert pid is not None and _alive(pid)
        assert os.sched_getaffinity(pid) == {cpu}
        assert det.child_cpus == [cpu]
        time.sleep(0.2)
    assert det.pid is None and not det.running
    assert not _alive(pid)
    assert det.stats is not None and det.stats.detours > 10


def test_detours_explicit_start_stop_and_restart():
    det = noise.Detours(100, 100e-6, pattern="poisson", seed=3, rank=1)
    assert det.stop() is None  # never started: nothing to stop
    det.start()
    with pytest.raises(RuntimeError):
        det.start()
    first = det.pid
    assert os.sched_getaffinity(first) == os.sched_getaffinity(0)  # default: the caller's CPUs
    det.stop()
    assert not _alive(first)
    det.start()
    second = det.pid
    assert second != first
    det.stop()
    assert not _alive(second)


def test_detours_child_dies_when_parent_is_sigkilled():
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from adaptcoll.noise.detours import Detours
        det = Detours(100, 50e-6).start()
        print(det.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(child, 2.0), "detour process outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_detours_child_stops_at_parent_exit_without_stop():
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from adaptcoll.noise.detours import Detours
        det = Detours(100, 50e-6).start()
        print(det.pid, flush=True)
    """)  # exits without stop(): atexit must reap the child
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert _wait_gone(int(out.stdout.split()[0]), 2.0)


def test_detours_child_does_not_see_launcher_variables(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    with noise.Detours(50, 50e-6) as det:
        environ = Path(f"/proc/{det.pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{det.pid}/cmdline").read_bytes().split(b"\0")
    assert not any(e.startswith((b"PMI_", b"OMPI_")) for e in environ)
    assert any(c.endswith(b"_detour_child.py") for c in cmdline)


# --- detours: accuracy ----------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["periodic", "poisson"])
@pytest.mark.parametrize("frequency, duration", [(100, 250e-6), (20, 2.5e-3)])
def test_detours_achieve_frequency_and_duration(pattern, frequency, duration):
    cpu = max(os.sched_getaffinity(0))
    seconds = 0.6 if frequency >= 100 else 1.0
    for attempt in range(2):
        with noise.Detours(frequency, duration, pattern, seed=attempt, cpus=[cpu]) as det:
            time.sleep(seconds)
        s = det.stats
        expected = frequency * s.elapsed_s
        # Poisson counts have sd sqrt(n); allow 4 sd, periodic within 10% (a slow wake-up may skip one).
        allowed = 4 * math.sqrt(expected) if pattern == "poisson" else 0.1 * expected + 1
        ok = (
            abs(s.detours - expected) <= allowed
            and abs(s.mean_duration_s - duration) < 0.1 * duration
            and s.min_wall_s > 0
            and s.cpu_total_s >= 0.9 * s.detours * duration
        )
        if ok:
            break
    assert ok, s.summary()
    assert math.isclose(s.noise_fraction, s.achieved_frequency_hz * s.mean_duration_s)


def test_detours_1khz_25us_is_reported_honestly():
    # Wake-up costs count against d (budget "cpu"): where a wake-up alone costs more than 25 us the
    # reported d exceeds 25 us rather than pretending; it never falls short.
    with noise.Detours(1000, 25e-6, cpus=[max(os.sched_getaffinity(0))]) as det:
        time.sleep(0.5)
    s = det.stats
    assert 0.8 * 1000 * s.elapsed_s <= s.detours + s.skipped <= 1.1 * 1000 * s.elapsed_s + 1, s.summary()
    assert s.mean_duration_s >= 24e-6, s.summary()
    assert s.cpu_total_s >= 0.95 * s.detours * 25e-6


def test_detours_argument_errors():
    for bad in [
        dict(frequency_hz=0, duration_s=1e-3),
        dict(frequency_hz=10, duration_s=-1),
        dict(frequency_hz=1000, duration_s=1e-3),
        dict(frequency_hz=10, duration_s=1e-3, pattern="x"),
        dict(frequency_hz=10, duration_s=1e-3, budget="x"),
    ]:
        with pytest.raises(ValueError):
            noise.Detours(**bad)


def test_phases_differ_across_ranks_and_repeat_per_seed():
    # The child's schedule comes from (seed, rank): same key -> same first gap, different ranks differ.
    import random

    first = {r: random.Random(f"adaptcoll.noise:7:{r}").random() for r in range(4)}
    assert len(set(first.values())) == 4
    assert random.Random("adaptcoll.noise:7:2").random() == first[2]


# --- spec parsing ---------------------------------------------------------------------------------


def test_parse_spec_grammar():
    s = noise.parse_spec("1000Hz x 25us, poisson")
    assert (s.frequency_hz, s.duration_s, s.pattern) == (1000.0, 25e-6, "poisson")
    assert math.isclose(s.noise_fraction, 0.025)
    s = noise.parse_spec(" 10 hz * 2.5 ms ; seed=7; cpus=0-2+5; budget=wall; realtime ")
    assert (s.frequency_hz, s.duration_s, s.pattern, s.seed) == (10.0, 2.5e-3, "periodic", 7)
    assert s.cpus == (0, 1, 2, 5) and s.budget == "wall" and s.realtime
    s = noise.parse_spec("1kHz×25µs")
    assert (s.frequency_hz, s.duration_s) == (1000.0, 25e-6)
    assert noise.parse_spec("0.1MHz x 100ns").frequency_hz == 1e5
    for off in ["", "off", "none", "0", " OFF "]:
        assert noise.parse_spec(off) is None


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("1000 x 25us", "<frequency> x <duration>"),
        ("1000Hz", "<frequency> x <duration>"),
        ("10GHz x 1us", "unknown frequency unit"),
        ("10Hz x 1min", "unknown duration unit"),
        ("1kHz x 1ms", "leaves no CPU"),
        ("10Hz x 1ms, gaussian", "unknown option"),
        ("10Hz x 1ms, seed=abc", "seed must be an integer"),
        ("10Hz x 1ms, cpus=3-1", "cpus must look like"),
    ],
)
def test_parse_spec_errors(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        noise.parse_spec(text)


def test_from_spec_and_from_env():
    det = noise.from_spec("100Hz x 250us, poisson, seed=4", rank=3)
    assert isinstance(det, noise.Detours) and not det.running
    assert (det.frequency_hz, det.duration_s, det.pattern, det.seed, det.rank) == (100, 250e-6, "poisson", 4, 3)
    assert noise.from_spec("off") is None
    assert noise.from_env(environ={}) is None
    assert noise.from_env(environ={"ADAPTCOLL_NOISE": "off"}) is None
    det = noise.from_env(environ={"ADAPTCOLL_NOISE": "10Hz x 2.5ms", "PMI_RANK": "5"})
    assert det.rank == 5 and det.duration_s == 2.5e-3
    det = noise.from_env(environ={"ADAPTCOLL_NOISE": "10Hz x 2.5ms", "SLURM_PROCID": "2"}, seed=9)
    assert (det.rank, det.seed) == (2, 9)
    with pytest.raises(ValueError, match=r"^ADAPTCOLL_NOISE='10Hz'"):
        noise.from_env(environ={"ADAPTCOLL_NOISE": "10Hz"})
    with pytest.raises(ValueError, match=r"^MY_NOISE="):
        noise.from_env("MY_NOISE", environ={"MY_NOISE": "fast"})


def test_from_env_detours_run():
    det = noise.from_env(environ={"ADAPTCOLL_NOISE": "200Hz x 100us, poisson"}, rank=1)
    with det:
        time.sleep(0.3)
    assert det.stats.detours > 10


def test_rank_from_env_order():
    assert noise.rank_from_env({}) == 0
    assert noise.rank_from_env({"SLURM_PROCID": "4"}) == 4
    assert noise.rank_from_env({"SLURM_PROCID": "4", "PMI_RANK": "6"}) == 6
    assert noise.rank_from_env({"OMPI_COMM_WORLD_RANK": "1", "PMI_RANK": "6"}) == 1


# --- skew -----------------------------------------------------------------------------------------


def test_skew_is_reproducible_per_seed_rank_iteration():
    a = noise.Skew("exponential", 1e-4, seed=1, rank=2)
    b = noise.Skew("exponential", 1e-4, seed=1, rank=2)
    assert [a.sample(i) for i in range(50)] == [b.sample(i) for i in range(50)]
    assert [a.sample(i) for i in range(50)][::-1] == [b.sample(i) for i in reversed(range(50))]
    other_rank = noise.Skew("exponential", 1e-4, seed=1, rank=3)
    other_seed = noise.Skew("exponential", 1e-4, seed=2, rank=2)
    assert a.sample(0) != other_rank.sample(0) and a.sample(0) != other_seed.sample(0)


def test_skew_distributions():
    n, scale = 20000, 1e-3
    uni = [noise.Skew("uniform", scale, seed=5, rank=r).sample(i) for r in range(4) for i in range(n // 4)]
    assert all(0 <= x <= scale for x in uni)
    assert abs(sum(uni) / n - scale / 2) < 0.02 * scale  # sd of the mean ~ 0.002 * scale
    assert abs(sum(1 for x in uni if x < scale / 4) / n - 0.25) < 0.02
    exp = [noise.Skew("exponential", scale, seed=6).sample(i) for i in range(n)]
    mean = sum(exp) / n
    assert abs(mean - scale) < 0.04 * scale
    assert abs(sum(1 for x in exp if x > scale) / n - math.exp(-1)) < 0.02
    assert all(noise.Skew("fixed", scale).sample(i) == scale for i in range(10))
    gated = [noise.Skew("fixed", scale, probability=0.3, seed=8).sample(i) for i in range(n)]
    assert abs(sum(1 for x in gated if x > 0) / n - 0.3) < 0.02
    assert all(x in (0.0, scale) for x in gated)


def test_skew_slow_ranks_and_delay():
    slow = noise.Skew("fixed", 2e-3, rank=1, slow_ranks=[1])
    fast = noise.Skew("fixed", 2e-3, rank=0, slow_ranks=[1])
    assert fast.delay() == 0.0 and fast.iteration == 1
    t0 = time.perf_counter()
    waited = slow.delay()
    assert 2e-3 <= waited <= time.perf_counter() - t0
    assert slow.iteration == 1 and slow.total_delay_s == waited
    sleeper = noise.Skew("fixed", 2e-3, mode="sleep")
    assert sleeper.delay(iteration=10) >= 2e-3 and sleeper.iteration == 11
    for bad in [dict(distribution="normal"), dict(scale_s=-1), dict(probability=1.5), dict(mode="x")]:
        with pytest.raises(ValueError):
            noise.Skew(**bad)


def test_unit_random_is_uniform_and_keyed():
    xs = [noise.unit_random(0, i) for i in range(10000)]
    assert all(0 <= x < 1 for x in xs) and abs(sum(xs) / len(xs) - 0.5) < 0.01
    assert noise.unit_random(1, 2, 3) == noise.unit_random(1, 2, 3) != noise.unit_random(1, 3, 2)


# --- network noise (MPI) --------------------------------------------------------------------------


def test_network_noise_pairs_validation():
    class FakeComm:
        def Get_size(self):
            return 6

        def Get_rank(self):
            return 4

    assert noise.default_pairs(6) == [(0, 3), (1, 4), (2, 5)]
    assert noise.NetworkNoise(FakeComm()).partner == 1
    assert noise.NetworkNoise(FakeComm(), pairs=1).partner is None
    assert noise.NetworkNoise(FakeComm(), pairs=[(4, 5)]).partner == 5
    for bad in [[(0, 6)], [(1, 1)], [(0, 1), (1, 2)]]:
        with pytest.raises(ValueError):
            noise.NetworkNoise(FakeComm(), pairs=bad)


@pytest.mark.mpi(ranks=[2, 4], timeout=120)
def test_network_noise_under_mpi(mpi_ranks):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cases = [
        dict(pairs=None, nbytes=1 << 20),
        dict(pairs=[(0, size - 1)], nbytes=10 << 20),
        dict(pairs=None, nbytes=3, poll_interval_s=1e-4),
    ]
    for case in cases:
        net = noise.NetworkNoise(comm, **case)
        with net:
            # The application keeps communicating on the original communicator meanwhile.
            deadline = time.perf_counter() + 0.3
            while True:
                flag = np.array([time.perf_counter() < deadline], dtype=np.int32)
                comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.LAND)
                if not flag[0]:
                    break
                x = np.full(1000, rank, dtype=np.float64)
                comm.Allreduce(MPI.IN_PLACE, x)
                assert x[0] == size * (size - 1) / 2
        s = net.stats
        if net.partner is None:
            assert s.rounds == 0 and s.bytes_sent == 0
        else:
            assert s.rounds >= 2 and s.bytes_sent == s.rounds * case["nbytes"] == s.bytes_received
            assert s.payload_errors == 0
        # Both partners leave after the same round.
        rounds = comm.allgather((net.partner, s.rounds))
        for r, (partner, n) in enumerate(rounds):
            if partner is not None:
                assert rounds[partner] == (r, n)
        assert not net.running
    # Stopping right after starting must not hang either.
    net = noise.NetworkNoise(comm).start()
    net.stop()
    comm.Barrier()


# --- calibration ----------------------------------------------------------------------------------


def test_calibration_fwq_slowdown_matches_detour_fraction():
    # 100 Hz x 2 ms = 20% of one CPU shared by the FWQ loop and the detour process: the loop should
    # take 1/(1 - 0.2) = 1.25x as long. When other jobs share the CPU, the FWQ gets a share S < 1 even
    # when quiet and the detours' CPU comes out of S: 1/(1 - f*d/S). Generous tolerance, two retries (on
    # the 2-core VM one CI run of seven on 2026-11-27 measured 1.074 and 1.079 in both attempts of two).
    results = []
    for attempt in range(3):
        r = noise.calibrate(100, 2e-3, seconds=1.0, rounds=6, seed=attempt)
        results.append(r)
        expected = r.expected_slowdown if not r.disturbed else r.expected_slowdown_loaded
        excess, expected_excess = r.measured_slowdown - 1, expected - 1
        if (
            abs(r.duration_s - 2e-3) < 0.1 * 2e-3
            and 50 <= r.frequency_hz <= 110
            and 0.35 * expected_excess <= excess <= 1.6 * expected_excess
        ):
            print(r.summary())
            return
    text = " | ".join(r.summary() for r in results)
    if all(r.noise_fraction / r.quiet_cpu_share > 0.8 for r in results):
        pytest.skip("machine too loaded for FWQ calibration (detours would take most of our share): " + text)
    # Under other load (the FWQ loop got < 80 % of its CPU even without detours, in every attempt) the
    # scheduler shares the detour process's CPU among every runnable task, not only the loop, and the
    # loaded expectation over-predicts: a run of the suite beside two CPU-bound jobs on the 2-core VM
    # (2026-12-03) measured 1.00-1.05 against 1.46-1.53 at CPU shares 0.58-0.63. The injector cannot be
    # checked then; on a machine that gives the loop its CPU it still must pass.
    if all(r.disturbed for r in results):
        pytest.skip("machine too loaded for FWQ calibration (the loop had < 80 % of its CPU quiet): " + text)
    pytest.fail("calibration out of tolerance: " + text)


# --- the run wrapper: the wrapped rank dies with it ------------------------------------------------
_STUBBORN = (
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(os.getpid(), flush=True); time.sleep(60)"
)  # a rank that survives SIGTERM, as the orphan did


def _start_wrapper(*options: str) -> tuple[subprocess.Popen, int]:
    wrapper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adaptcoll.noise",
            "run",
            "--spec",
            "off",
            *options,
            "--",
            sys.executable,
            "-c",
            _STUBBORN,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    return wrapper, int(wrapper.stdout.readline())


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_wrapped_rank_dies_with_its_wrapper(how):
    """SIGKILL of the wrapper: PR_SET_PDEATHSIG takes the rank with it. SIGTERM: forwarded, and a rank
    that ignores it is SIGKILLed --kill-after seconds later; the wrapper exits 128 + 9 then."""
    wrapper, child = _start_wrapper("--kill-after", "0.5")
    try:
        assert _alive(child)
        os.kill(wrapper.pid, getattr(signal, how))
        code = wrapper.wait(timeout=20)
        assert _wait_gone(child, 3.0), f"the wrapped rank outlived its wrapper ({how})"
        assert code == (-signal.SIGKILL if how == "SIGKILL" else 128 + signal.SIGKILL)
    finally:
        for pid in (wrapper.pid, child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        wrapper.wait()


def test_watchdog_kills_the_rank_when_the_wrapper_is_gone():
    """The fallback where PR_SET_PDEATHSIG does not exist: a watchdog process (the wrapper's child) on
    the wrapper's pid SIGKILLs the rank once the wrapper is gone, then exits."""
    from adaptcoll.noise.__main__ import WATCHDOG

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fake_wrapper = (
        "import os, subprocess, sys, time; "
        f"w = subprocess.Popen([sys.executable, '-I', '-S', '-c', {WATCHDOG!r}, str(os.getpid()), '{child.pid}']); "
        "print(w.pid, flush=True); time.sleep(60)"
    )
    wrapper = subprocess.Popen([sys.executable, "-c", fake_wrapper], stdout=subprocess.PIPE, text=True)
    watchdog = int(wrapper.stdout.readline())
    try:
        time.sleep(0.5)
        assert child.poll() is None and _alive(watchdog)
        wrapper.kill()
        wrapper.wait()
        assert child.wait(timeout=5) == -signal.SIGKILL
        assert _wait_gone(watchdog, 5.0)
    finally:
        for proc in (wrapper, child):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_wrapper_refuses_when_mpi_is_initialized_in_it():
    """Importing adaptcoll does not import mpi4py.MPI, so plain `-m adaptcoll.noise run` is safe; if
    something did initialize MPI in the wrapper under a launcher, it refuses with the fix in the message."""
    check = "import sys, adaptcoll, adaptcoll.noise.__main__; print('mpi4py.MPI' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr
    code = (
        "import mpi4py.MPI; from adaptcoll.noise.__main__ import main; "
        "raise SystemExit(main(['run', '--spec', 'off', '--', 'true']))"
    )
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "0"}  # a launcher's rank variable (MPICH ignores it)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert out.returncode == 1 and "MPI is initialized in the wrapper" in out.stderr, out.stderr
