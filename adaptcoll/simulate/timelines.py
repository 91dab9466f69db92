"""Detour timelines: when each simulated rank's CPU (or link) is taken away, and how that stretches work.

A timeline is a per-rank stream of non-overlapping detours [start, end) in increasing order, drawn
from counter-based random numbers (`adaptcoll.noise.unit_random`), so a (seed, rank) pair always gives
the same detours and no per-rank generator state is kept beyond a cursor. `advance(rank, t, w)` is the
time at which `w` seconds of work started at `t` are done when the resource is unavailable during
detours; calls for one rank must come with non-decreasing `t` (the simulator guarantees it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Union

from ..noise.skew import unit_random

__all__ = [
    "Timeline",
    "Periodic",
    "Poisson",
    "Replay",
    "FixedFraction",
    "read_trace",
]

_INF = math.inf


class Timeline:
    """Base class: a per-rank detour stream; subclasses define `_detour(rank, k)`.

    Per rank the head is the first detour not yet known to lie wholly before the latest query, and
    detours generated beyond it wait in `_ahead`, so a query never consumes a detour that a later
    query (with a later or equal start) may still overlap. Queries for one rank must come with
    non-decreasing start times `t`.
    """

    noise_fraction: float = 0.0
    label: str = "timeline"

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self._reset()

    def _reset(self) -> None:
        size = self.size
        self._k = [0] * size
        self._last = [-_INF] * size  # end of the last detour generated
        self._hs = [-_INF] * size  # the head detour
        self._he = [-_INF] * size
        self._ahead: dict[int, list[tuple[float, float]]] = {}

    def _detour(self, rank: int, k: int) -> tuple[float, float]:
        """The k-th detour (k = 0, 1, ...) of `rank` as scheduled (it may overlap the one before)."""
        raise NotImplementedError

    def _generate(self, rank: int) -> tuple[float, float]:
        k = self._k[rank]
        s, e = self._detour(rank, k)
        last = self._last[rank]
        if s < last:  # never overlap the previous detour: queue behind it
            e += last - s
            s = last
        self._k[rank] = k + 1
        self._last[rank] = e
        return s, e

    def _drop_head(self, rank: int) -> tuple[float, float]:
        ahead = self._ahead.get(rank)
        if ahead:
            s, e = ahead.pop(0)
        else:
            s, e = self._generate(rank)
        self._hs[rank], self._he[rank] = s, e
        return s, e

    def advance(self, rank: int, t: float, w: float) -> float:
        """When `w` seconds of work begun at `t` are done on `rank` (waiting out detours on the way).

        With w == 0: `t`, or the end of the detour `t` falls in.
        """
        s, e = self._hs[rank], self._he[rank]
        while e <= t:
            s, e = self._drop_head(rank)
        ahead: list[tuple[float, float]] | None = None
        j = 0
        while True:
            if t >= s:
                t = e
            elif t + w <= s:
                return t + w
            else:
                w -= s - t
                t = e
            if ahead is None:
                ahead = self._ahead.setdefault(rank, [])
            if j == len(ahead):
                ahead.append(self._generate(rank))
            s, e = ahead[j]
            j += 1

    def _rank_state(self, rank: int) -> list[float]:
        """What `_generate` changes for one rank (saved and restored around `detours`)."""
        return [self._k[rank], self._last[rank]]

    def _set_rank_state(self, rank: int, state: list[float]) -> None:
        self._k[rank], self._last[rank] = int(state[0]), state[1]

    def detours(self, rank: int, t0: float, t1: float) -> list[tuple[float, float]]:
        """The detours of `rank` overlapping [t0, t1), generated afresh (for traces and tests)."""
        saved = self._rank_state(rank)
        self._set_rank_state(rank, [0, -_INF] + saved[2:])
        out: list[tuple[float, float]] = []
        try:
            while True:
                s, e = self._generate(rank)
                if s >= t1:
                    return out
                if e > t0:
                    out.append((s, e))
        finally:
            self._set_rank_state(rank, saved)


class Periodic(Timeline):
    """Detours of `duration` every 1/frequency seconds with a random phase per (seed, rank).

    The schedule runs from before time 0 (k starts at -1), so a run may begin inside a detour, as a
    collective called at a random moment of a periodic noise source does.
    """

    def __init__(self, size: int, seed: int, frequency_hz: float, duration_s: float) -> None:
        super().__init__(size, seed)
        self.period = 1.0 / frequency_hz
        self.duration = duration_s
        self.noise_fraction = frequency_hz * duration_s
        self.label = f"periodic {frequency_hz:g} Hz x {duration_s * 1e6:g} us"
        self._phases: dict[int, float] = {}

    def _detour(self, rank: int, k: int) -> tuple[float, float]:
        phase = self._phases.get(rank)
        if phase is None:  # one hash per rank, not per detour (a 1K-rank run draws millions of detours)
            phase = self._phases[rank] = unit_random(self.seed, rank, 0x5045) * self.period
        s = phase + (k - 1) * self.period
        return s, s + self.duration


class Poisson(Timeline):
    """Detours of `duration` at exponential gaps (rate `frequency_hz`) from a random point in time."""

    def __init__(self, size: int, seed: int, frequency_hz: float, duration_s: float) -> None:
        super().__init__(size, seed)
        self.rate = frequency_hz
        self.duration = duration_s
        self.noise_fraction = frequency_hz * duration_s
        self.label = f"poisson {frequency_hz:g} Hz x {duration_s * 1e6:g} us"

    def _reset(self) -> None:
        super()._reset()
        self._deadline = [0.0] * self.size

    def _rank_state(self, rank: int) -> list[float]:
        return [*super()._rank_state(rank), self._deadline[rank]]

    def _set_rank_state(self, rank: int, state: list[float]) -> None:
        super()._set_rank_state(rank, state)
        if len(state) > 2:
            self._deadline[rank] = state[2]

    def _detour(self, rank: int, k: int) -> tuple[float, float]:
        # Deadlines form a Poisson process on the whole time line: the last one before time 0 lies an
        # exponential gap back (memoryless), each later one an exponential gap after the one before.
        # A detour whose deadline falls inside the previous detour waits for it (as the injector's).
        gap = -math.log1p(-unit_random(self.seed, rank, 0x504F, k)) / self.rate
        deadline = -gap if k == 0 else self._deadline[rank] + gap
        self._deadline[rank] = deadline
        return deadline, deadline + self.duration


class Replay(Timeline):
    """A measured detour trace replayed cyclically on every rank from a random offset per (seed, rank)."""

    def __init__(self, size: int, seed: int, starts: Sequence[float], durations: Sequence[float], span: float) -> None:
        super().__init__(size, seed)
        if not starts:
            raise ValueError("a noise trace needs at least one detour")
        self.starts = list(starts)
        self.durations = list(durations)
        self.span = span
        self.noise_fraction = sum(durations) / span
        self.label = f"trace of {len(starts)} detours over {span * 1e3:g} ms"
        self._offsets: dict[int, float] = {}

    def _detour(self, rank: int, k: int) -> tuple[float, float]:
        n = len(self.starts)
        offset = self._offsets.get(rank)
        if offset is None:
            offset = self._offsets[rank] = unit_random(self.seed, rank, 0x5452) * self.span
        cycle, i = divmod(k, n)
        s = self.starts[i] + (cycle - 1) * self.span - offset
        return s, s + self.durations[i]


class FixedFraction(Timeline):
    """The limit of very frequent, very short detours: every piece of work takes 1/(1 - fraction) longer."""

    def __init__(self, size: int, seed: int, fraction: float) -> None:
        super().__init__(size, seed)
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"noise fraction must be in [0, 1), got {fraction!r}")
        self.noise_fraction = fraction
        self.label = f"fixed fraction {fraction:g}"
        self._stretch = 1.0 / (1.0 - fraction)

    def _reset(self) -> None:
        pass  # no detour stream to keep

    def advance(self, rank: int, t: float, w: float) -> float:
        return t + w * self._stretch

    def detours(self, rank: int, t0: float, t1: float) -> list[tuple[float, float]]:
        return []


_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def read_trace(path: Union[str, Path]) -> tuple[list[float], list[float], float]:
    """Read a noise trace file: (detour starts, durations, span), in seconds, starts from 0.

    Format: text, `#` starts a comment, `# unit: ns|us|ms|s` sets the unit (default us). Two numbers
    per line are one detour, `start duration` (selfish-detour style). One number per line is one
    fixed-work-quantum time (FWQ style): each quantum's excess over the fastest is a detour at the
    end of that quantum. `# span: X` sets the trace length for two-column files (default: the end
    of the last detour).
    """
    where = f"noise trace {str(path)!r}"
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    unit = 1e-6
    span = None
    rows: list[list[float]] = []
    for n, line in enumerate(lines, 1):
        text, _, comment = line.partition("#")
        key, sep, value = (s.strip() for s in comment.partition(":"))
        if sep and key.lower() == "unit":
            if value not in _UNITS:
                raise ValueError(f"{where}, line {n}: unit must be one of {', '.join(_UNITS)}, got {value!r}")
            unit = _UNITS[value]
        elif sep and key.lower() == "span":
            span = _number(value, where, n)
        fields = text.split()
        if not fields:
            continue
        if len(fields) > 2 or (rows and len(fields) != len(rows[0])):
            raise ValueError(f"{where}, line {n}: expected 'start duration' or one quantum time per line")
        rows.append([_number(f, where, n) for f in fields])
    if not rows:
        raise ValueError(f"{where}: no data lines")
    if len(rows[0]) == 2:
        pairs = sorted((r[0] * unit, r[1] * unit) for r in rows)
        t0 = pairs[0][0]
        starts = [s - t0 for s, _ in pairs]
        durations = [d for _, d in pairs]
        end = max(s + d for s, d in zip(starts, durations))
        total = end if span is None else span * unit
        if total <= 0 or total < end:
            raise ValueError(f"{where}: span must cover every detour (needs >= {end / unit:g})")
        return starts, durations, total
    quanta = [r[0] * unit for r in rows]
    fastest = min(quanta)
    if fastest <= 0:
        raise ValueError(f"{where}: quantum times must be > 0")
    starts, durations, t = [], [], 0.0
    for q in quanta:
        if q > fastest:
            starts.append(t + fastest)
            durations.append(q - fastest)
        t += q
    if not starts:
        raise ValueError(f"{where}: every quantum took the same time: no detours to replay")
    return starts, durations, t


def _number(text: str, where: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}, line {line}: not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}, line {line}: expected a finite number >= 0, got {text!r}")
    return value
