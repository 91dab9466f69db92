"""Statistics of timing samples: percentiles, the distribution-free confidence interval of a median,
paired ratios native/adaptcoll and the verdict a user reads (faster / same / slower)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["percentile", "summarize_samples", "median_ci", "paired_ratios", "Verdict", "verdict"]


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation (NumPy's default)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def summarize_samples(samples_us: Sequence[float] | np.ndarray) -> dict[str, float]:
    """median, p95, p99, mean, min, max of a list of per-iteration times (us)."""
    a = np.asarray(samples_us, dtype=float)
    return {
        "median_us": float(np.median(a)),
        "p95_us": percentile(a, 95),
        "p99_us": percentile(a, 99),
        "mean_us": float(a.mean()),
        "min_us": float(a.min()),
        "max_us": float(a.max()),
    }


def median_ci(values: Sequence[float]) -> tuple[float, float]:
    """The 95% confidence interval of the median of `values`: the order statistics around the middle
    that a sign test puts 1.96 standard deviations away (the whole range for very few values)."""
    if not len(values):
        return 0.0, 0.0
    x = sorted(values)
    n = len(x)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return float(x[lo]), float(x[hi])


def paired_ratios(reference: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """Per-iteration ratios reference/candidate of samples taken in the same iteration (interleaved),
    so that a slow phase of the machine slows both sides of a ratio alike; > 1: the candidate is faster."""
    if len(reference) != len(candidate):
        raise ValueError(f"paired samples differ in number: {len(reference)} and {len(candidate)}")
    return [r / c if c > 0 else math.inf for r, c in zip(reference, candidate)]


@dataclass(frozen=True)
class Verdict:
    """What a cell of paired ratios says: the median, its 95% CI and the word for it."""

    ratio: float
    ci_low: float
    ci_high: float
    samples: int
    word: str  # "faster", "same", "slower"


def verdict(ratios: Sequence[float], margin: float = 0.03) -> Verdict:
    """'faster' when the median ratio is above 1 + margin and its whole 95% CI above 1, 'slower' when
    below 1 - margin and the CI below 1, else 'same' (too close, or too noisy to say)."""
    if not len(ratios):
        raise ValueError("verdict of no samples")
    med = float(np.median(np.asarray(ratios, dtype=float)))
    lo, hi = median_ci(ratios)
    if med >= 1.0 + margin and lo > 1.0:
        word = "faster"
    elif med <= 1.0 - margin and hi < 1.0:
        word = "slower"
    else:
        word = "same"
    return Verdict(med, lo, hi, len(ratios), word)
