"""Calibration and validation against measurements of the machine at hand.

`calibrate` takes the per-event costs from bench/engine_cost.py (engine = what adaptcoll adds per
segment event, o = the bare mpi4py loop's cost per message), optionally a first guess of L and G
from a ping-pong, and the link model from bench/pair_order.py (`links_from_pair_order`), then fits the
remaining parameters (by default L, G and fold) so that simulated
adaptcoll Bcast/Reduce/Allreduce times match bench/osu.py medians: Levenberg-Marquardt on the log
of the parameters, minimizing the squared log error, with the simulator itself as the model (each
measured row is simulated with the settings it ran under). `validate` compares simulated with
measured times (noisy rows simulated under their run's noise spec) and states the error per row.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from .lockstep import mpich_choice
from .measured import EngineCost, Measurement
from .noise_setup import parse_noise
from .params import CostParams
from .programs import Job
from .run import ADAPTCOLL, run_once

__all__ = [
    "DEFAULT_FIT",
    "NATIVE_AS",
    "native_algorithm",
    "simulated_time",
    "fit_params",
    "calibrate",
    "validate",
    "sign_agreement",
    "TIE",
    "pingpong_guess",
    "links_from_pair_order",
]

DEFAULT_FIT = ("L", "G", "fold")
"""Fitted when engine_cost.py output gives engine and o; without it, engine and o are fitted as well."""

NATIVE_AS = {"bcast": "scatter_ring_allgather", "reduce": "reduce_scatter_gather", "allreduce": "rabenseifner"}
"""MPICH's long-message algorithms (see `native_algorithm` for the choice by size and ranks)."""


def native_algorithm(collective: str, ranks: int, nbytes: int) -> str:
    """The lock-step baseline that models a 'native' row: what MPICH 5 runs for it on one node
    (`lockstep.mpich_choice`). (Until 2026-11-27 every native row was modelled by its long-message
    algorithm, and Reduce by binomial as a stand-in.)"""
    return mpich_choice(collective, ranks, nbytes)


def _job(m: Measurement) -> Job:
    cfg = m.settings
    if cfg is None:
        return Job(m.collective, m.ranks, m.size, 1)
    return Job(m.collective, m.ranks, m.size, cfg.segment_size(m.collective), settings=cfg)


def simulated_time(m: Measurement, params: CostParams, samples: int = 1, seed: int = 0, noisy: bool = True) -> float:
    """Simulated seconds for a measured row (the median over `samples` noise draws when it ran under noise)."""
    job = _job(m)
    impl = ADAPTCOLL if m.kind == "adaptcoll" else native_algorithm(m.collective, m.ranks, m.size)
    noise = parse_noise([m.noise]) if (noisy and m.noise) else None
    if noise is None or noise.quiet:
        return run_once(job, params, impl)[0].time_s
    return statistics.median(run_once(job, params, impl, noise, seed, s)[0].time_s for s in range(samples))


def pingpong_guess(rows: Sequence[tuple[int, int, float]], native_o: float) -> tuple[float, float]:
    """(L, G) from ping-pong one-way times of 64 KiB..4 MiB at the smallest rank count: t = native_o + 2L + bytes G."""
    smallest = min(r[0] for r in rows)
    pts = [(b, t * 1e-6) for n, b, t in rows if n == smallest and (64 << 10) <= b <= (4 << 20)]
    if len(pts) < 2:
        raise ValueError("ping-pong: need at least two sizes between 64 KiB and 4 MiB")
    x = np.array([p[0] for p in pts], float)
    y = np.array([p[1] for p in pts], float)
    slope, intercept = np.polyfit(x, y, 1)
    return max(1e-7, (intercept - native_o) / 2), max(1e-13, float(slope))


PAIR_IN_ORDER, PAIR_TOGETHER, PAIR_FROM = 0.75, 0.9, 64 << 10
"""bench/pair_order.py's first / second (median over sizes >= PAIR_FROM bytes): at most PAIR_IN_ORDER, one
pair's messages go one after the other ("pair"; MPICH 5.0.2 on one node: 0.43-0.52); at least
PAIR_TOGETHER, they share the way and arrive together ("fair"; Open MPI 5.0.11 on one node: 0.99-1.01)."""


def links_from_pair_order(rows: Sequence[tuple[int, float, float]]) -> str:
    """The `links` policy two messages between one pair show (rows: bytes, first s, second s): "pair" when
    the first arrives after about half the time of both, "fair" when both arrive at the end; ValueError
    in between or without a row of PAIR_FROM bytes or more (small messages go eagerly, in order anyway).
    One pair cannot tell "pair" from "fifo" (which also serializes different pairs): "pair" is taken."""
    ratios = [first / second for size, first, second in rows if size >= PAIR_FROM and second > 0]
    if not ratios:
        raise ValueError(f"pair order: no row of {PAIR_FROM >> 10} KiB or more to decide the link model from")
    ratio = statistics.median(ratios)
    if ratio <= PAIR_IN_ORDER:
        return "pair"
    if ratio >= PAIR_TOGETHER:
        return "fair"
    raise ValueError(
        f"pair order: the first of two messages completes at {ratio:.2f} of the second, neither in order "
        f"(<= {PAIR_IN_ORDER}) nor together (>= {PAIR_TOGETHER}); set links in --params by hand"
    )


def fit_params(
    rows: Sequence[Measurement],
    start: CostParams,
    fields: Sequence[str] = DEFAULT_FIT,
    max_iter: int = 60,
) -> tuple[CostParams, dict[str, Any]]:
    """Fit `fields` of `start` to the adaptcoll rows (least squares on log time); returns (params, fit info)."""
    rows = [m for m in rows if m.kind == "adaptcoll"]
    if not rows:
        raise ValueError("calibration needs adaptcoll rows (bench/osu.py with --impl adaptcoll...)")
    for f in fields:
        if getattr(start, f) <= 0:
            raise ValueError(f"cannot fit field {f!r} from a starting value of 0")
    measured = np.log([m.median_us * 1e-6 for m in rows])

    def params_at(theta: np.ndarray) -> CostParams:
        values: dict[str, Any] = {f: float(math.exp(t)) for f, t in zip(fields, theta)}
        return dataclasses.replace(start, **values)

    def residuals(theta: np.ndarray) -> np.ndarray:
        p = params_at(theta)
        return np.log([simulated_time(m, p, noisy=False) for m in rows]) - measured

    theta = np.log([getattr(start, f) for f in fields])
    r = residuals(theta)
    cost = float(r @ r)
    # The simulated times are piecewise linear in the parameters, with small jumps where two events swap
    # order; central differences over +-2 % see the trend instead of a jump.
    lam, step, iterations = 1e-3, 0.02, 0
    for iterations in range(1, max_iter + 1 if fields else 1):  # noqa: B007 - reported below
        jac = np.empty((len(rows), len(fields)))
        for j in range(len(fields)):
            up, down = theta.copy(), theta.copy()
            up[j] += step
            down[j] -= step
            jac[:, j] = (residuals(up) - residuals(down)) / (2 * step)
        a, g = jac.T @ jac, jac.T @ r
        improved = False
        for _ in range(10):
            delta = np.linalg.solve(a + lam * np.diag(np.diag(a)) + 1e-12 * np.eye(len(fields)), -g)
            r_new = residuals(theta + delta)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                improved = True
                break
            lam *= 4
        if not improved:
            if step < 1e-4:
                break
            step, lam = step / 10, 1e-3  # near the optimum: finer differences
            continue
        theta, r, gain = theta + delta, r_new, cost - cost_new
        cost = cost_new
        lam = max(lam / 3, 1e-9)
        if gain < 1e-12 * max(cost, 1e-300) or float(np.max(np.abs(delta))) < 1e-9:
            if step < 1e-4:
                break
            step, lam = step / 10, 1e-3
    fitted = params_at(theta)
    errors = [math.expm1(x) * 100 for x in r]
    info = {
        "fields": list(fields),
        "iterations": iterations,
        "rms_log_error": math.sqrt(cost / len(rows)),
        "rows": [
            {
                "collective": m.collective,
                "ranks": m.ranks,
                "size": m.size,
                "impl": m.impl,
                "measured_us": m.median_us,
                "simulated_us": m.median_us * (1 + e / 100),
                "error_pct": e,
            }
            for m, e in zip(rows, errors)
        ],
    }
    return fitted, info


def calibrate(
    rows: Sequence[Measurement],
    engine: Optional[EngineCost] = None,
    pingpong: Optional[Sequence[tuple[int, int, float]]] = None,
    start: CostParams = CostParams(),
    fields: Optional[Sequence[str]] = None,
    pair_order: Optional[Sequence[tuple[int, float, float]]] = None,
) -> tuple[CostParams, dict[str, Any]]:
    """Parameters for the machine the rows were measured on (see the module docstring); (params, fit info).
    `pair_order`: bench/pair_order.py rows; their link model replaces `start`'s. `fields` empty (not None):
    fit nothing, keep `start` with the engine costs, and report the errors the rows give."""
    base = start
    if pair_order is not None:
        base = dataclasses.replace(base, links=links_from_pair_order(pair_order))
    if engine is not None:
        base = dataclasses.replace(base, engine=engine.adds_us * 1e-6, o=engine.bare_us * 1e-6)
    if pingpong:
        guess_l, guess_g = pingpong_guess(pingpong, base.native_o)
        base = dataclasses.replace(base, L=guess_l, G=guess_g)
    if fields is not None and not fields:  # nothing to fit: the starting values, with the errors they give
        return fit_params([m for m in rows if not m.noise], base, ())
    chosen = tuple(fields) if fields else (DEFAULT_FIT if engine is not None else DEFAULT_FIT + ("engine", "o"))
    quiet = [m for m in rows if not m.noise]
    return fit_params(quiet, base, chosen)


def validate(rows: Sequence[Measurement], params: CostParams, samples: int = 5, seed: int = 0) -> list[dict[str, Any]]:
    """Measured vs simulated per row (error = simulated / measured - 1), noisy rows under their noise."""
    out = []
    for m in rows:
        sim = simulated_time(m, params, samples, seed)
        out.append(
            {
                "collective": m.collective,
                "ranks": m.ranks,
                "size": m.size,
                "impl": m.impl,
                "model": "adaptcoll"
                if m.kind == "adaptcoll"
                else f"lockstep:{native_algorithm(m.collective, m.ranks, m.size)}",
                "noise": m.noise or "",
                "measured_us": m.median_us,
                "simulated_us": sim * 1e6,
                "error_pct": (sim * 1e6 / m.median_us - 1) * 100,
                "source": m.source,
            }
        )
    return out


TIE = 0.10
"""A measured adaptcoll/native ratio within this of 1 is a tie (sign_agreement counts such pairs apart)."""


def sign_agreement(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the simulator says which is faster, adaptcoll or native, where the measurement does: every
    adaptcoll row of `validate`'s output paired with the native row of the same collective, ranks, size
    and noise; a pair is right when native / adaptcoll is on the same side of 1 measured and simulated.
    Returns {"pairs", "right", "ties" (measured within TIE of 1), "ties_right", "wrong": [the wrong pairs
    as (collective, ranks, size, impl, measured ratio, simulated ratio)]}."""
    native = {(r["collective"], r["ranks"], r["size"], r["noise"]): r for r in rows if r["model"] != "adaptcoll"}
    pairs = right = ties = ties_right = 0
    wrong: list[tuple[str, int, int, str, float, float]] = []
    for r in rows:
        n = native.get((r["collective"], r["ranks"], r["size"], r["noise"]))
        if r["model"] != "adaptcoll" or n is None:
            continue
        measured = n["measured_us"] / r["measured_us"]
        simulated = n["simulated_us"] / r["simulated_us"]
        ok = (measured > 1) == (simulated > 1)
        tie = abs(measured - 1) <= TIE
        pairs += 1
        right += ok
        ties += tie
        ties_right += ok and tie
        if not ok:
            wrong.append((r["collective"], r["ranks"], r["size"], r["impl"], round(measured, 3), round(simulated, 3)))
    return {"pairs": pairs, "right": right, "ties": ties, "ties_right": ties_right, "wrong": wrong}
