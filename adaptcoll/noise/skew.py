"""Arrival skew: a reproducible random delay per (seed, rank, iteration) before each collective.

delay() busy-waits by default: skew models a rank still computing, which keeps its core busy, and a
perf_counter spin is accurate to about a microsecond where time.sleep overshoots by 50-100 us.
mode="sleep" yields the core instead (for oversubscribed runs, where spinning starves other ranks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

__all__ = ["Skew", "DISTRIBUTIONS", "unit_random"]

DISTRIBUTIONS = ("uniform", "exponential", "fixed")
_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def unit_random(*keys: int) -> float:
    """A uniform number in [0, 1) that depends only on the integer keys (counter-based, no state)."""
    h = 0x243F6A8885A308D3
    for key in keys:
        h = _splitmix64(h ^ (key & _MASK))
    return (h >> 11) * (1.0 / (1 << 53))


class Skew:
    """Delay this rank before each iteration: `delay(iteration)` spins for `sample(iteration)` seconds.

    distribution: "uniform" on [0, scale_s], "exponential" with mean scale_s, or "fixed" = scale_s.
    probability: chance that an iteration is delayed at all. slow_ranks: when given, only these
    ranks are ever delayed (one slow rank near the root vs at a leaf, say).
    """

    def __init__(
        self,
        distribution: str = "uniform",
        scale_s: float = 0.0,
        probability: float = 1.0,
        seed: int = 0,
        rank: int = 0,
        slow_ranks: Iterable[int] = (),
        mode: str = "spin",
    ) -> None:
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
        if not scale_s >= 0:
            raise ValueError(f"scale_s must be >= 0, got {scale_s!r}")
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {probability!r}")
        if mode not in ("spin", "sleep"):
            raise ValueError(f"mode must be 'spin' or 'sleep', got {mode!r}")
        self.distribution = distribution
        self.scale_s = float(scale_s)
        self.probability = float(probability)
        self.seed = int(seed)
        self.rank = int(rank)
        self.slow_ranks = frozenset(slow_ranks)
        self.mode = mode
        self.iteration = 0
        self.total_delay_s = 0.0

    def __repr__(self) -> str:
        return (
            f"Skew({self.distribution!r}, scale_s={self.scale_s:g}, probability={self.probability:g}, "
            f"seed={self.seed}, rank={self.rank}, slow_ranks={sorted(self.slow_ranks)})"
        )

    def sample(self, iteration: int) -> float:
        """The delay in seconds for `iteration` on this rank; the same for the same (seed, rank, iteration)."""
        if self.slow_ranks and self.rank not in self.slow_ranks:
            return 0.0
        if self.probability < 1.0 and unit_random(self.seed, self.rank, iteration, 1) >= self.probability:
            return 0.0
        if self.distribution == "fixed":
            return self.scale_s
        u = unit_random(self.seed, self.rank, iteration, 2)
        if self.distribution == "uniform":
            return u * self.scale_s
        return -math.log1p(-u) * self.scale_s  # exponential with mean scale_s

    def delay(self, iteration: int | None = None) -> float:
        """Wait out the delay for `iteration` (default: an internal counter); return the seconds waited."""
        if iteration is None:
            iteration = self.iteration
        self.iteration = iteration + 1
        seconds = self.sample(iteration)
        if seconds <= 0.0:
            return 0.0
        start = time.perf_counter()
        end = start + seconds
        if self.mode == "sleep":
            time.sleep(seconds)
        else:
            while time.perf_counter() < end:
                pass
        waited = time.perf_counter() - start
        self.total_delay_s += waited
        return waited
