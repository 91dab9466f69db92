"""The noise of a simulated run, from `--noise` values: CPU detours, a replayed trace, a fixed fraction,
arrival skew, network noise.

Each `--noise` value is one component:

    "1kHz x 25us, poisson"       CPU detours on every rank, in adaptcoll.noise's spec grammar
                                 (parse_spec: periodic with a random phase per rank, or poisson)
    "trace: FILE"                CPU detours replayed from a measured trace (timelines.read_trace)
    "fraction: 2.5%"             every piece of CPU work takes 1/(1 - 0.025) longer (no detours)
    "skew: uniform:1ms[,p=0.5]"  each rank starts late by a draw of adaptcoll.noise.Skew
                                 (uniform | exponential | fixed), as bench/osu.py --skew
    "net: 100Hz x 250us"         each rank's link is taken away by detours of this spec (extra latency)

At most one CPU component (detours, trace or fraction) per run. Spec options that only matter for the
real injector (cpus=, budget=, realtime) are accepted and ignored; `seed=` mixes into the run's seed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ..noise.skew import DISTRIBUTIONS, Skew, unit_random
from ..noise.spec import NoiseSpec, parse_spec
from .timelines import FixedFraction, Periodic, Poisson, Replay, Timeline, read_trace

__all__ = ["NoiseSetup", "parse_noise", "mix_seed"]

_OFF = {"", "off", "none", "0", "no", "false"}
_SECONDS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(s|ms|us|µs|ns)\s*$", re.IGNORECASE)
_SECOND_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def mix_seed(*keys: int) -> int:
    """One 53-bit seed from several integers (counter-based, the same on every machine)."""
    return int(unit_random(*keys) * (1 << 53))


@dataclass(frozen=True)
class _Detours:
    spec: NoiseSpec


@dataclass(frozen=True)
class _Trace:
    path: str
    starts: tuple[float, ...]
    durations: tuple[float, ...]
    span: float


@dataclass(frozen=True)
class _Fraction:
    fraction: float


@dataclass(frozen=True)
class _Skew:
    distribution: str
    scale_s: float
    probability: float


@dataclass(frozen=True)
class NoiseSetup:
    """The parsed noise of a run; `texts` are the values as given (recorded in results)."""

    texts: tuple[str, ...] = ()
    cpu: Optional[object] = None  # one of _Detours, _Trace, _Fraction
    net: Optional[NoiseSpec] = None
    skew: Optional[_Skew] = None

    @property
    def quiet(self) -> bool:
        """True when no component is set."""
        return self.cpu is None and self.net is None and self.skew is None

    @property
    def cpu_fraction(self) -> float:
        """Nominal share of each rank's CPU taken by the CPU component."""
        cpu = self.cpu
        if isinstance(cpu, _Detours):
            return cpu.spec.noise_fraction
        if isinstance(cpu, _Trace):
            return sum(cpu.durations) / cpu.span
        if isinstance(cpu, _Fraction):
            return cpu.fraction
        return 0.0

    def cpu_timeline(self, size: int, seed: int) -> Optional[Timeline]:
        """The CPU detour timeline of all ranks for one sample (seed already mixed per sample)."""
        cpu = self.cpu
        if isinstance(cpu, _Detours):
            return _detour_timeline(cpu.spec, size, mix_seed(seed, cpu.spec.seed, 1))
        if isinstance(cpu, _Trace):
            return Replay(size, mix_seed(seed, 2), cpu.starts, cpu.durations, cpu.span)
        if isinstance(cpu, _Fraction):
            return FixedFraction(size, seed, cpu.fraction)
        return None

    def net_timeline(self, size: int, seed: int) -> Optional[Timeline]:
        """The link detour timeline of all ranks for one sample."""
        if self.net is None:
            return None
        return _detour_timeline(self.net, size, mix_seed(seed, self.net.seed, 3))

    def start_times(self, size: int, seed: int, sample: int) -> Optional[list[float]]:
        """Per-rank start offsets from the skew component (None without skew)."""
        if self.skew is None:
            return None
        sk = Skew(self.skew.distribution, self.skew.scale_s, self.skew.probability, seed=mix_seed(seed, 4))
        out = []
        for r in range(size):
            sk.rank = r
            out.append(sk.sample(sample))
        return out


def _detour_timeline(spec: NoiseSpec, size: int, seed: int) -> Timeline:
    if spec.pattern == "poisson":
        return Poisson(size, seed, spec.frequency_hz, spec.duration_s)
    return Periodic(size, seed, spec.frequency_hz, spec.duration_s)


def _seconds(text: str, where: str) -> float:
    match = _SECONDS.match(text)
    if not match:
        raise ValueError(f"{where}: expected a time such as 1ms, 250us or 0.5s, got {text!r}")
    return float(match.group(1)) * _SECOND_UNITS[match.group(2).lower()]


def _parse_skew(rest: str, where: str) -> _Skew:
    head, *options = [p.strip() for p in rest.split(",")]
    dist, sep, scale = (p.strip() for p in head.partition(":"))
    if not sep or dist not in DISTRIBUTIONS:
        raise ValueError(f"{where}: expected 'skew: DIST:SCALE[,p=P]' with DIST one of {', '.join(DISTRIBUTIONS)}")
    probability = 1.0
    for option in options:
        key, eq, value = (p.strip() for p in option.partition("="))
        if key != "p" or not eq:
            raise ValueError(f"{where}: unknown skew option {option!r} (only p=PROBABILITY)")
        try:
            probability = float(value)
        except ValueError:
            raise ValueError(f"{where}: p must be a number in [0, 1], got {value!r}") from None
    seconds = _seconds(scale, where)
    Skew(dist, seconds, probability)  # validates with adaptcoll.noise's own messages
    return _Skew(dist, seconds, probability)


def _parse_fraction(rest: str, where: str) -> _Fraction:
    text = rest.strip()
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{where}: expected a fraction such as 2.5% or 0.025, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{where}: the fraction must be in [0, 1), got {text!r}")
    return _Fraction(value)


def parse_noise(values: Sequence[str]) -> NoiseSetup:
    """Parse `--noise` values (see the module docstring); ValueError naming the bad value."""
    cpu: Optional[object] = None
    net: Optional[NoiseSpec] = None
    skew: Optional[_Skew] = None
    texts = []
    for text in values:
        if text is None or text.strip().lower() in _OFF:
            continue
        texts.append(text)
        where = f"--noise {text!r}"
        kind, sep, rest = text.partition(":")
        kind = kind.strip().lower()
        new_cpu: Optional[object] = None
        if sep and kind == "net":
            if net is not None:
                raise ValueError(f"{where}: network noise given twice")
            net = parse_spec(rest, name="--noise net")
            if net is None:
                texts.pop()
        elif sep and kind == "skew":
            if skew is not None:
                raise ValueError(f"{where}: skew given twice")
            skew = _parse_skew(rest, where)
        elif sep and kind == "trace":
            starts, durations, span = read_trace(rest.strip())
            new_cpu = _Trace(rest.strip(), tuple(starts), tuple(durations), span)
        elif sep and kind == "fraction":
            new_cpu = _Fraction(value) if (value := _parse_fraction(rest, where).fraction) > 0 else None
        else:
            spec = parse_spec(text, name="--noise")
            new_cpu = _Detours(spec) if spec is not None else None
        if new_cpu is not None:
            if cpu is not None:
                raise ValueError(f"{where}: only one CPU noise (detours, trace or fraction) per run")
            cpu = new_cpu
    return NoiseSetup(tuple(texts), cpu, net, skew)
