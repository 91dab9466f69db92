"""OS-style detours: a co-located process pinned to the rank's CPUs steals d seconds at frequency f.

The detour process is a separate OS process, so it hits the rank whatever the rank is doing,
including while it sits inside an MPI C call (a Python signal handler would not run there).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DetourStats", "Detours", "PATTERNS"]

PATTERNS = ("periodic", "poisson")
_CHILD_SCRIPT = Path(__file__).with_name("_detour_child.py")
_LIVE: weakref.WeakSet[Detours] = weakref.WeakSet()
# Variables through which an MPI launcher talks to its ranks; the detour process must not see them.
_LAUNCHER_ENV_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "MPICH_", "HYDRA_", "I_MPI_")


@dataclass(frozen=True)
class DetourStats:
    """What the detour process measured about itself between start() and stop()."""

    detours: int
    skipped: int
    elapsed_s: float
    mean_duration_s: float
    mean_wall_s: float
    min_wall_s: float
    max_wall_s: float
    mean_late_s: float
    max_late_s: float
    cpu_total_s: float
    realtime: bool

    @property
    def achieved_frequency_hz(self) -> float:
        """Detours per second of the schedule's lifetime."""
        return self.detours / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def noise_fraction(self) -> float:
        """Share of the CPU taken by detours: achieved f times mean CPU duration d."""
        return self.achieved_frequency_hz * self.mean_duration_s

    @property
    def cpu_fraction(self) -> float:
        """Share of the CPU the detour process really used (all its CPU time over the elapsed time)."""
        return self.cpu_total_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @classmethod
    def from_child(cls, raw: dict) -> DetourStats:
        """Build from the JSON line the detour process prints at exit."""
        n = raw["detours"]
        return cls(
            detours=n,
            skipped=raw["skipped"],
            elapsed_s=raw["elapsed_s"],
            mean_duration_s=raw["sum_cpu_s"] / n if n else 0.0,
            mean_wall_s=raw["sum_wall_s"] / n if n else 0.0,
            min_wall_s=raw["min_wall_s"],
            max_wall_s=raw["max_wall_s"],
            mean_late_s=raw["mean_late_s"],
            max_late_s=raw["max_late_s"],
            cpu_total_s=raw["cpu_total_s"],
            realtime=raw["realtime"],
        )

    def summary(self) -> str:
        """One human-readable line."""
        return (
            f"{self.detours} detours in {self.elapsed_s:.3f} s: f = {self.achieved_frequency_hz:.1f} Hz, "
            f"d = {self.mean_duration_s * 1e6:.1f} us cpu ({self.mean_wall_s * 1e6:.1f} us wall), "
            f"noise fraction {self.noise_fraction:.4f} (cpu {self.cpu_fraction:.4f}), skipped {self.skipped}, "
            f"mean lateness {self.mean_late_s * 1e6:.1f} us"
        )


class Detours:
    """Start/stop a detour process: `frequency_hz` wake-ups per second, each burning `duration_s` of CPU.

    pattern: "periodic" (fixed period, random phase per (seed, rank)) or "poisson" (exponential gaps).
    cpus: CPUs to pin to; default the calling process's affinity (bind ranks so detours hit them).
    budget: "cpu" spins until d of CPU time is consumed, so d is stolen even when the rank competes
    for the core under fair scheduling; "wall" spins d of wall time.
    realtime: ask for SCHED_FIFO (preempts like kernel noise; needs CAP_SYS_NICE, else ignored).
    """

    def __init__(
        self,
        frequency_hz: float,
        duration_s: float,
        pattern: str = "periodic",
        seed: int = 0,
        rank: int = 0,
        cpus: Iterable[int] | None = None,
        budget: str = "cpu",
        realtime: bool = False,
    ) -> None:
        if not frequency_hz > 0:
            raise ValueError(f"frequency_hz must be > 0, got {frequency_hz!r}")
        if not duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {duration_s!r}")
        if frequency_hz * duration_s >= 1.0:
            raise ValueError(f"frequency_hz * duration_s = {frequency_hz * duration_s:g} must be < 1")
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
        if budget not in ("cpu", "wall"):
            raise ValueError(f"budget must be 'cpu' or 'wall', got {budget!r}")
        self.frequency_hz = float(frequency_hz)
        self.duration_s = float(duration_s)
        self.pattern = pattern
        self.seed = int(seed)
        self.rank = int(rank)
        self.cpus = sorted(set(cpus)) if cpus is not None else None
        self.budget = budget
        self.realtime = bool(realtime)
        self.stats: DetourStats | None = None
        self.child_cpus: list[int] = []
        self.child_realtime = False
        self._proc: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return (
            f"Detours({self.frequency_hz:g} Hz x {self.duration_s * 1e6:g} us, {self.pattern}, "
            f"seed={self.seed}, rank={self.rank}, cpus={self.cpus})"
        )

    @property
    def pid(self) -> int | None:
        """Process id of the running detour process, None when stopped."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._proc is not None

    def start(self) -> Detours:
        """Spawn the detour process and wait until it is pinned and running."""
        if self._proc is not None:
            raise RuntimeError("Detours already started")
        cpus = self.cpus if self.cpus is not None else sorted(os.sched_getaffinity(0))
        env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_ENV_PREFIXES)}
        cmd = [
            sys.executable,
            "-I",
            "-S",
            str(_CHILD_SCRIPT),
            "--frequency",
            repr(self.frequency_hz),
            "--duration",
            repr(self.duration_s),
            "--pattern",
            self.pattern,
            "--seed",
            str(self.seed),
            "--rank",
            str(self.rank),
            "--cpus",
            ",".join(map(str, cpus)),
            "--budget",
            self.budget,
            "--realtime",
            str(int(self.realtime)),
            "--parent-pid",
            str(os.getpid()),
        ]
        # close_fds (default) keeps the launcher's PMI sockets out of the child.
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"detour process failed to start (exit code {proc.returncode})")
        hello = json.loads(line)
        self.child_cpus = hello["cpus"]
        self.child_realtime = hello["realtime"]
        self._proc = proc
        self.stats = None
        _LIVE.add(self)
        return self

    def stop(self, timeout_s: float = 5.0) -> DetourStats | None:
        """Stop the detour process (close its stdin), reap it, and return its statistics."""
        proc, self._proc = self._proc, None
        _LIVE.discard(self)
        if proc is None:
            return self.stats
        try:
            out, _ = proc.communicate(timeout=timeout_s)  # closes stdin: the child sees EOF
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        lines = [ln for ln in (out or "").splitlines() if ln.strip()]
        if lines:
            try:
                self.stats = DetourStats.from_child(json.loads(lines[-1]))
            except (ValueError, KeyError):
                self.stats = None
        return self.stats

    def __enter__(self) -> Detours:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()


@atexit.register
def _stop_all() -> None:
    """Leave no detour process behind when the interpreter exits normally."""
    for detours in list(_LIVE):
        detours.stop(timeout_s=1.0)
