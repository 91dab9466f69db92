"""Check the detour injector with a fixed-work-quantum loop (FWQ) sharing one CPU with it.

A detour process that takes a fraction f*d of the CPU should slow a CPU-bound loop on the same CPU by
about 1 / (1 - f*d); calibrate() measures both sides and returns them for comparison.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

from .detours import Detours, DetourStats

__all__ = ["CalibrationResult", "calibrate", "fwq", "merge_stats"]


def _quantum(iterations: int) -> int:
    """One fixed work quantum: a pure-Python integer loop (CPU-bound, no memory traffic)."""
    acc = 0
    for i in range(iterations):
        acc ^= i
    return acc


def fwq(quanta: int, iterations: int) -> list[float]:
    """Run `quanta` fixed work quanta of `iterations` loop steps; return each quantum's wall time."""
    times = []
    clock = time.perf_counter
    for _ in range(quanta):
        t0 = clock()
        _quantum(iterations)
        times.append(clock() - t0)
    return times


def _iterations_for(quantum_s: float) -> int:
    """Loop steps that take about `quantum_s` seconds here (best of a few tries)."""
    probe = 20000
    best = min(fwq(5, probe))
    return max(1, int(probe * quantum_s / best))


@dataclass(frozen=True)
class CalibrationResult:
    """Measured detour frequency/duration and FWQ slowdown against the 1/(1 - f*d) expectation."""

    cpu: int
    frequency_hz: float
    duration_s: float
    noise_fraction: float
    expected_slowdown: float
    measured_slowdown: float
    round_slowdowns: tuple[float, ...]
    quiet_s: float
    noisy_s: float
    quiet_cpu_share: float
    quanta: int
    quantum_s: float
    stats: DetourStats

    @property
    def disturbed(self) -> bool:
        """True when outside load took over 20% of the CPU in the quiet segments."""
        return self.quiet_cpu_share < 0.8

    @property
    def expected_slowdown_loaded(self) -> float:
        """1 / (1 - f*d / S), S = the FWQ's CPU share when quiet: on a shared machine (cgroup fair
        share) the detours' CPU comes out of this process group's share S, not out of a whole CPU."""
        load = self.noise_fraction / max(self.quiet_cpu_share, 1e-9)
        return 1.0 / (1.0 - load) if load < 1.0 else float("inf")

    @property
    def relative_error(self) -> float:
        """(measured - expected) / expected slowdown."""
        return (self.measured_slowdown - self.expected_slowdown) / self.expected_slowdown

    def summary(self) -> str:
        """One human-readable line."""
        return (
            f"cpu {self.cpu}: f = {self.frequency_hz:.1f} Hz, d = {self.duration_s * 1e6:.1f} us, "
            f"f*d = {self.noise_fraction:.4f}; FWQ slowdown {self.measured_slowdown:.4f} vs expected "
            f"{self.expected_slowdown:.4f} ({self.relative_error:+.2%}), {self.expected_slowdown_loaded:.4f} "
            f"adjusted for the quiet CPU share {self.quiet_cpu_share:.2f}; rounds "
            f"{', '.join(f'{r:.3f}' for r in self.round_slowdowns)}); quiet {self.quiet_s:.3f} s, "
            f"noisy {self.noisy_s:.3f} s, {self.quanta} quanta of {self.quantum_s * 1e3:.2f} ms"
        )


def calibrate(
    frequency_hz: float = 100.0,
    duration_s: float = 2e-3,
    pattern: str = "periodic",
    cpu: int | None = None,
    seconds: float = 1.0,
    quantum_s: float = 1e-3,
    rounds: int = 5,
    seed: int = 0,
    budget: str = "cpu",
    realtime: bool = False,
) -> CalibrationResult:
    """Pin this process and a Detours process to one CPU; compare FWQ slowdown with 1/(1 - f*d).

    Runs `rounds` pairs of (quiet, noisy) FWQ segments, `seconds` of noisy work in all, and takes the
    median of the per-round slowdowns, so a burst of outside load spoils one round, not the result.
    f and d are what the detour process measured. cpu defaults to the highest CPU this process may
    use; this process's affinity is restored afterwards.
    """
    saved = os.sched_getaffinity(0)
    cpu = max(saved) if cpu is None else cpu
    os.sched_setaffinity(0, {cpu})
    ratios, all_stats = [], []
    quiet_total = noisy_total = quiet_cpu = 0.0
    try:
        iterations = _iterations_for(quantum_s)
        quanta = max(10, int(seconds / rounds / quantum_s))
        for r in range(rounds):
            cpu0 = time.thread_time()
            quiet = sum(fwq(quanta, iterations))
            quiet_cpu += time.thread_time() - cpu0
            with Detours(
                frequency_hz, duration_s, pattern, seed=seed, rank=r, cpus=[cpu], budget=budget, realtime=realtime
            ) as detours:
                noisy = sum(fwq(quanta, iterations))
            if detours.stats is None or detours.stats.detours == 0:
                raise RuntimeError("the detour process reported no detours")
            all_stats.append(detours.stats)
            ratios.append(noisy / quiet)
            quiet_total += quiet
            noisy_total += noisy
    finally:
        os.sched_setaffinity(0, saved)
    stats = merge_stats(all_stats)
    fraction = stats.noise_fraction
    return CalibrationResult(
        cpu=cpu,
        frequency_hz=stats.achieved_frequency_hz,
        duration_s=stats.mean_duration_s,
        noise_fraction=fraction,
        expected_slowdown=1.0 / (1.0 - fraction),
        measured_slowdown=statistics.median(ratios),
        round_slowdowns=tuple(ratios),
        quiet_s=quiet_total,
        noisy_s=noisy_total,
        quiet_cpu_share=quiet_cpu / quiet_total,
        quanta=quanta * rounds,
        quantum_s=quiet_total / (quanta * rounds),
        stats=stats,
    )


def merge_stats(parts: list[DetourStats]) -> DetourStats:
    """Pool the statistics of several detour runs into one."""
    n = sum(p.detours for p in parts)
    return DetourStats(
        detours=n,
        skipped=sum(p.skipped for p in parts),
        elapsed_s=sum(p.elapsed_s for p in parts),
        mean_duration_s=sum(p.mean_duration_s * p.detours for p in parts) / n if n else 0.0,
        mean_wall_s=sum(p.mean_wall_s * p.detours for p in parts) / n if n else 0.0,
        min_wall_s=min(p.min_wall_s for p in parts),
        max_wall_s=max(p.max_wall_s for p in parts),
        mean_late_s=sum(p.mean_late_s * p.detours for p in parts) / n if n else 0.0,
        max_late_s=max(p.max_late_s for p in parts),
        cpu_total_s=sum(p.cpu_total_s for p in parts),
        realtime=all(p.realtime for p in parts),
    )
