"""Sweeps over ranks and noise conditions: the tables behind the figures (JSON rows, CSV).

One row per (ranks, noise condition, implementation) with the quiet time, the noisy samples' median
and mean, and the slowdowns. Rank lists are written `16,64,1K` or as ranges `16:1M` (x2 steps) and
`16:1M:4` (x4 steps). A noise condition may combine components with ` & ` (e.g.
`100Hz x 250us & skew: uniform:1ms`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from ..runtime.settings import parse_size
from .noise_setup import parse_noise
from .params import CostParams
from .programs import Job
from .run import BEST, BEST_MAX_MESSAGES, best_lockstep, compare

__all__ = ["parse_rank_list", "split_condition", "sweep", "write_rows_json", "rows_csv", "ROW_FIELDS"]

ROW_FIELDS = (
    "collective",
    "ranks",
    "size",
    "segment",
    "algorithm",
    "noise",
    "noise_fraction",
    "impl",
    "samples",
    "quiet_us",
    "median_us",
    "mean_us",
    "slowdown",
    "slowdown_mean",
    "messages",
    "best_quiet",
    "best_noisy",
)
"""CSV columns. best_quiet / best_noisy: on `lockstep:best` rows (`--baseline best`), the baselines with the
smallest quiet time and the smallest noisy median (the row's quiet_us is the first's, median_us,
mean_us and slowdowns the second's)."""


def parse_rank_list(text: str) -> list[int]:
    """'16,64,1K' or '16:1M' (doubling) or '16:1M:4' (x4 steps) -> rank counts."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        pieces = part.split(":")
        if len(pieces) == 1:
            out.append(parse_size(pieces[0], "--ranks"))
            continue
        if len(pieces) > 3:
            raise ValueError(f"--ranks: expected FIRST:LAST[:FACTOR], got {part!r}")
        first, last = parse_size(pieces[0], "--ranks"), parse_size(pieces[1], "--ranks")
        factor = int(pieces[2]) if len(pieces) == 3 else 2
        if first < 1 or last < first or factor < 2:
            raise ValueError(f"--ranks: {part!r} needs 1 <= FIRST <= LAST and FACTOR >= 2")
        n = first
        while n <= last:
            out.append(n)
            n *= factor
    if not out or min(out) < 1:
        raise ValueError(f"--ranks: expected rank counts >= 1, got {text!r}")
    return out


def split_condition(text: str) -> list[str]:
    """The components of one sweep noise condition ('A & B')."""
    return [p.strip() for p in text.split("&") if p.strip()]


def sweep(
    collective: str,
    ranks: Sequence[int],
    size: int,
    segment: int,
    conditions: Sequence[str],
    baselines: Sequence[str],
    params: CostParams,
    algorithm: str = "",
    seed: int = 0,
    samples: Union[int, Callable[[int], int]] = 3,
    adaptcoll: bool = True,
    progress: Optional[Callable[[str], None]] = None,
    best_max_messages: Optional[int] = BEST_MAX_MESSAGES,
) -> list[dict[str, Any]]:
    """Rows for every (ranks, condition, implementation); `samples` may depend on the rank count.

    A baseline named "best" runs every applicable lock-step baseline (run.best_lockstep) and adds a
    `lockstep:best` row naming the winners; the skipped ones go to `progress`."""
    want_best = BEST in baselines
    baselines = [b for b in baselines if b != BEST]
    rows: list[dict[str, Any]] = []
    quiet: dict[Any, Any] = {}
    for n in ranks:
        for cond in conditions:
            noise = parse_noise(split_condition(cond))
            job = Job(collective, n, size, segment, algorithm)
            k = samples(n) if callable(samples) else samples
            report = compare(job, params, noise, tuple(baselines), seed, k, adaptcoll, quiet)
            results = list(report["results"])
            if want_best:
                have = {r["impl"] for r in results}
                best = best_lockstep(job, params, noise, seed, k, best_max_messages, None, quiet)
                results += [r for r in best["results"] if r["impl"] not in have]
                by = {r["impl"]: r for r in results}
                qb, nb = best["quiet_best"], best["noisy_best"] or best["quiet_best"]
                qrow, nrow = by[f"lockstep:{qb}"], by[f"lockstep:{nb}"]
                results.append(
                    {
                        **{f: nrow[f] for f in ("median_us", "mean_us", "slowdown", "slowdown_mean") if f in nrow},
                        "impl": "lockstep:best",
                        "quiet_us": qrow["quiet_us"],
                        "messages": qrow["messages"],
                        "best_quiet": qb,
                        "best_noisy": best["noisy_best"],
                    }
                )
                if progress is not None:
                    for name, why in best["skipped"].items():
                        progress(f"{collective} {n} ranks: best skipped {name}: {why}")
            for res in results:
                row = {
                    "collective": collective,
                    "ranks": n,
                    "size": size,
                    "segment": segment,
                    "algorithm": job.algorithm_setting,
                    "noise": cond,
                    "noise_fraction": report["noise_fraction"],
                    "impl": res["impl"],
                    "samples": report["samples"],
                    "quiet_us": res["quiet_us"],
                    "median_us": res.get("median_us", res["quiet_us"]),
                    "mean_us": res.get("mean_us", res["quiet_us"]),
                    "slowdown": res.get("slowdown", 1.0),
                    "slowdown_mean": res.get("slowdown_mean", 1.0),
                    "messages": res["messages"],
                    "best_quiet": res.get("best_quiet"),
                    "best_noisy": res.get("best_noisy"),
                }
                rows.append(row)
                if progress is not None:
                    progress(
                        f"{collective} {n} ranks, {cond or 'quiet'}: {row['impl']} quiet {row['quiet_us']:.1f} us, "
                        f"slowdown {row['slowdown']:.3f}"
                    )
    return rows


def write_rows_json(path: Union[str, Path], rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Rows and what produced them, deterministic (sorted keys, no dates)."""
    doc = {"tool": "adaptcoll.simulate sweep", "format": 1, **meta, "rows": list(rows)}
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def rows_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text (ROW_FIELDS columns)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=ROW_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return out.getvalue()
