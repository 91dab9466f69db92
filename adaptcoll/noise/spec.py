"""Parse detour specifications such as "1kHz x 25us, poisson, seed=3" (and ADAPTCOLL_NOISE).

Grammar (case-insensitive, spaces optional):
    spec     := "" | "off" | "none" | "0"                     -> no noise
              | rate ("x" | "*" | "×") duration ("," option)*
    rate     := number ("Hz" | "kHz" | "MHz")
    duration := number ("s" | "ms" | "us" | "µs" | "ns")
    option   := "periodic" | "poisson" | "seed=" int | "cpus=" cpulist | "budget=" ("cpu"|"wall") | "realtime"
    cpulist  := item ("+" item)*,  item := int | int "-" int      (e.g. cpus=0-3+8)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .detours import PATTERNS, Detours

__all__ = ["NoiseSpec", "ENV_VAR", "RANK_VARIABLES", "parse_spec", "from_spec", "from_env", "rank_from_env"]

ENV_VAR = "ADAPTCOLL_NOISE"
_OFF = {"", "off", "none", "0", "no", "false"}
_RATE_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6}
_TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}  # divisors: 25us == 25 / 1e6 exactly
_NUMBER = r"([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)"
_HEAD = re.compile(rf"^\s*{_NUMBER}\s*([a-z]+)\s*[x*×]\s*{_NUMBER}\s*([a-zµ]+)\s*$", re.IGNORECASE)
# Launcher variables holding this process's rank in MPI_COMM_WORLD, most specific first.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "PALS_RANKID", "MV2_COMM_WORLD_RANK")


@dataclass(frozen=True)
class NoiseSpec:
    """A parsed detour specification; `detours(rank)` builds the injector for one rank."""

    frequency_hz: float
    duration_s: float
    pattern: str = "periodic"
    seed: int = 0
    cpus: tuple[int, ...] | None = None
    budget: str = "cpu"
    realtime: bool = False

    @property
    def noise_fraction(self) -> float:
        """Nominal share of the CPU taken: f * d."""
        return self.frequency_hz * self.duration_s

    def detours(self, rank: int = 0, seed: int | None = None) -> Detours:
        """An unstarted Detours for `rank` (seed overrides the spec's seed when given)."""
        return Detours(
            self.frequency_hz,
            self.duration_s,
            self.pattern,
            seed=self.seed if seed is None else seed,
            rank=rank,
            cpus=self.cpus,
            budget=self.budget,
            realtime=self.realtime,
        )


def _cpu_list(text: str) -> tuple[int, ...]:
    cpus: set[int] = set()
    for item in text.split("+"):
        lo, sep, hi = item.strip().partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if first < 0 or last < first:
            raise ValueError(f"bad CPU range {item!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def parse_spec(text: str, name: str = "noise spec") -> NoiseSpec | None:
    """Parse `text`; None means "no noise". Errors are ValueErrors that start with `name`."""

    def fail(why: str) -> ValueError:
        return ValueError(f"{name}={text!r}: {why} (expected e.g. '1kHz x 25us, poisson, seed=3' or 'off')")

    if text is None or text.strip().lower() in _OFF:
        return None
    head, *options = [part.strip() for part in re.split(r"[,;]", text)]
    match = _HEAD.match(head)
    if not match:
        raise fail(f"cannot read '<frequency> x <duration>' from {head!r}")
    rate, rate_unit, dur, dur_unit = match.groups()
    if rate_unit.lower() not in _RATE_UNITS:
        raise fail(f"unknown frequency unit {rate_unit!r}, use Hz, kHz or MHz")
    if dur_unit.lower() not in _TIME_UNITS:
        raise fail(f"unknown duration unit {dur_unit!r}, use s, ms, us or ns")
    frequency = float(rate) * _RATE_UNITS[rate_unit.lower()]
    duration = float(dur) / _TIME_UNITS[dur_unit.lower()]
    if frequency <= 0 or duration <= 0:
        raise fail("frequency and duration must be > 0")
    if frequency * duration >= 1.0:
        raise fail(f"frequency x duration = {frequency * duration:g} leaves no CPU to the rank (must be < 1)")
    fields: dict = {}
    for option in options:
        key, sep, value = (s.strip().lower() for s in option.partition("="))
        if not sep and key in PATTERNS:
            fields["pattern"] = key
        elif not sep and key == "realtime":
            fields["realtime"] = True
        elif sep and key == "seed":
            try:
                fields["seed"] = int(value)
            except ValueError:
                raise fail(f"seed must be an integer, got {value!r}") from None
        elif sep and key == "cpus":
            try:
                fields["cpus"] = _cpu_list(value)
            except ValueError:
                raise fail(f"cpus must look like 0-3+8, got {value!r}") from None
        elif sep and key == "budget" and value in ("cpu", "wall"):
            fields["budget"] = value
        elif key:
            raise fail(f"unknown option {option!r}")
    return NoiseSpec(frequency, duration, **fields)


def from_spec(text: str, rank: int = 0, seed: int | None = None, name: str = "noise spec") -> Detours | None:
    """An unstarted Detours for `rank` built from a spec string, or None for "off"."""
    spec = parse_spec(text, name)
    return spec.detours(rank, seed) if spec is not None else None


def rank_from_env(environ: Mapping[str, str] | None = None) -> int:
    """This process's world rank as told by the launcher (Open MPI, MPICH/Hydra, PMIx, Slurm, PALS), else 0."""
    environ = os.environ if environ is None else environ
    for var in RANK_VARIABLES:
        value = environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def from_env(
    var: str = ENV_VAR, rank: int | None = None, seed: int | None = None, environ: Mapping[str, str] | None = None
) -> Detours | None:
    """An unstarted Detours from the variable `var` (default ADAPTCOLL_NOISE), or None when unset/off.

    The rank defaults to the launcher's rank variables, so no MPI import is needed.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(var)
    if text is None or not text.strip():  # empty means unset
        return None
    return from_spec(text, rank_from_env(environ) if rank is None else rank, seed, name=var)
