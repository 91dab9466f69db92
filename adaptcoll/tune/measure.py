"""The tuner's measurement: native MPI against candidate configurations, interleaved call by call in
one launch (as bench/osu.py: a barrier before each call, per-call time = max over ranks), pruned by
successive halving so that a whole sweep fits a time budget.

For one (collective, size): every distinct candidate (`candidates.signature`) runs once untimed
(set-up) and once timed (cost estimate); then rounds of k interleaved iterations (native and every
surviving candidate, in an order rotated each iteration) give per-iteration ratios native/candidate;
after each round the better half (by median ratio) survives, until one is left. Every count and
every pruning decision is computed from numbers all ranks share (times reduced with MAX, budget
clocks broadcast from rank 0), so the ranks never disagree about what to run next.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from mpi4py import MPI

from ..measure import make_buffers, median_ci, starter
from ..measure.interleave import orders
from ..runtime import settings
from .candidates import signature
from .config import ServeConfig
from .table import Entry

__all__ = ["Point", "Outcome", "Options", "median_ci", "measure_point", "entry_from"]  # median_ci: from measure

_MPI_METHODS = {
    "bcast": MPI.Intracomm.Bcast,
    "reduce": MPI.Intracomm.Reduce,
    "allreduce": MPI.Intracomm.Allreduce,
    "allgather": MPI.Intracomm.Allgather,
    "reduce_scatter": MPI.Intracomm.Reduce_scatter_block,
}


@dataclass(frozen=True)
class Options:
    """Knobs of the measurement (defaults are the CLI's)."""

    min_gain: float = 1.03
    """adaptcoll is chosen only if its median ratio native/adaptcoll is at least this..."""
    min_ci: float = 1.0
    """...and the lower end of the 95% confidence interval of that median at least this."""
    min_iterations: int = 3
    max_iterations: int = 60
    dtype: str = "float32"


@dataclass
class Point:
    """One (collective, message size) to measure, with the candidates to try."""

    collective: str
    nbytes: int
    configs: list[ServeConfig]


@dataclass
class Outcome:
    """What one candidate measured: per-iteration ratios native/candidate, and when it was pruned."""

    config: ServeConfig
    ratios: list[float] = field(default_factory=list)
    seconds: float = 0.0
    pruned_after: Optional[int] = None  # round index, None = survived to the end

    def median(self) -> float:
        return float(np.median(self.ratios)) if self.ratios else 0.0

    def quartiles(self) -> tuple[float, float]:
        if not self.ratios:
            return 0.0, 0.0
        p25, p75 = np.percentile(self.ratios, [25, 75])
        return float(p25), float(p75)

    def median_ci(self) -> tuple[float, float]:
        """The distribution-free 95% confidence interval of the median (order statistics)."""
        return median_ci(self.ratios)

    def to_json(self, collective: str) -> dict[str, Any]:
        p25, p75 = self.quartiles()
        lo, hi = self.median_ci()
        return {
            "config": self.config.to_json(),
            "label": self.config.label(collective),
            "ratio": round(self.median(), 4),
            "p25": round(p25, 4),
            "p75": round(p75, 4),
            "ci_low": round(lo, 4),
            "ci_high": round(hi, 4),
            "samples": len(self.ratios),
            "pruned_after_round": self.pruned_after,
        }


def _native(collective: str, world: MPI.Intracomm, send: np.ndarray, recv: np.ndarray) -> Callable[[], Any]:
    method: Any = _MPI_METHODS[collective]
    if collective == "bcast":
        return lambda: method(world, send, 0)
    if collective == "reduce":
        return lambda: method(world, send, recv, MPI.SUM, 0)
    if collective == "allgather":
        return lambda: method(world, send, recv)
    return lambda: method(world, send, recv, MPI.SUM)


class _Runner:
    """Runs interleaved rounds of native and candidates; returns max-over-ranks times (all ranks)."""

    def __init__(self, world: MPI.Intracomm, comm: Any, point: Point, configs: list[ServeConfig], dtype: str) -> None:
        self.world = world
        bufs = make_buffers(point.collective, point.nbytes, dtype, world.Get_size())
        self.calls = [_native(point.collective, world, bufs.send, bufs.recv)]
        self.settings: list[Optional[settings.Settings]] = [None]
        base = settings.current()
        for config in configs:
            overrides = config.overrides(point.collective)
            overrides[f"{point.collective}_native_below"] = 0
            with settings.configured(**overrides) as chosen:
                self.settings.append(chosen)
            # Each candidate on its own communicator object (the same handle and state): its remembered
            # decision stays valid while the others' settings run in between, instead of being made
            # afresh at every call (bench/RESULTS.md, "check and bench/osu.py time in a balanced order").
            own = type(comm)(comm)
            self.calls.append(starter(point.collective, own, bufs, 0, MPI))
        settings.use(base)
        self.base = base

    def round(self, members: list[int], iterations: int) -> np.ndarray:
        """times[len(members), iterations] (seconds, max over ranks) of the calls `members` (0 = native),
        their order rotated per iteration by `orders` (each first, and right after each other, equally
        often: a fixed order biased a comparison by 0.03-0.10, bench/RESULTS.md)."""
        local = np.zeros((len(members), iterations))
        barrier, clock, use = self.world.Barrier, time.perf_counter, settings.use
        rows = orders(len(members))
        try:
            for it in range(iterations):
                for j in rows[it % len(rows)]:
                    chosen = self.settings[members[j]]
                    if chosen is not None:
                        use(chosen)
                    call = self.calls[members[j]]
                    barrier()
                    t0 = clock()
                    call()
                    local[j, it] = clock() - t0
        finally:
            use(self.base)
        out = np.empty_like(local)
        self.world.Allreduce(local, out, op=MPI.MAX)
        return out


def measure_point(
    world: MPI.Intracomm, comm: Any, point: Point, budget_s: float, options: Options
) -> tuple[list[Outcome], float]:
    """Measure one point within about `budget_s` seconds; (outcomes in candidate order, seconds spent).

    The seconds are summed from the shared max-over-ranks times (plus a barrier estimate), so every
    rank computes the same value.
    """
    itemsize = np.dtype(options.dtype).itemsize
    distinct: dict[Any, int] = {}
    configs: list[ServeConfig] = []
    for config in point.configs:
        sig = signature(config, point.collective, world.Get_size(), point.nbytes, itemsize)
        if sig not in distinct:
            distinct[sig] = len(configs)
            configs.append(config)
    runner = _Runner(world, comm, point, configs, options.dtype)
    everyone = list(range(len(configs) + 1))
    runner.round(everyone, 1)  # set-up: trees, pools, first touch
    first = runner.round(everyone, 1)[:, 0]
    spent = 2 * float(first.sum())
    cost = {j: float(first[j]) for j in everyone}
    outcomes = [Outcome(c) for c in configs]
    survivors = list(range(1, len(configs) + 1))
    remaining = budget_s - spent
    # Too many candidates for even one short round: keep the fastest by the single timed call.
    while len(survivors) > 1:
        rounds = math.ceil(math.log2(len(survivors))) + 1
        per_round = options.min_iterations * (cost[0] + sum(cost[j] for j in survivors))
        if per_round * rounds <= remaining:
            break
        slowest = max(survivors, key=lambda j: (cost[j], j))
        survivors.remove(slowest)
        outcomes[slowest - 1].pruned_after = -1
    round_index = 0
    while survivors:
        rounds = math.ceil(math.log2(len(survivors))) + 1 if len(survivors) > 1 else 1
        per_iteration = cost[0] + sum(cost[j] for j in survivors)
        iterations = int(max(0.0, budget_s - spent) / rounds / max(per_iteration, 1e-9))
        iterations = max(options.min_iterations, min(options.max_iterations, iterations))
        members = [0, *survivors]
        times = runner.round(members, iterations)
        spent += float(times.sum())
        native = times[0]
        cost[0] = float(np.median(native))
        for row, j in enumerate(survivors, start=1):
            outcomes[j - 1].ratios.extend((native / np.maximum(times[row], 1e-12)).tolist())
            outcomes[j - 1].seconds += float(times[row].sum())
            cost[j] = float(np.median(times[row]))
        if len(survivors) == 1:
            break
        ranked = sorted(survivors, key=lambda j: (-outcomes[j - 1].median(), j))
        keep = ranked[: math.ceil(len(ranked) / 2)]
        for j in ranked[len(keep) :]:
            outcomes[j - 1].pruned_after = round_index
        survivors = keep
        round_index += 1
    return outcomes, spent


def entry_from(
    point: Point, outcomes: list[Outcome], comm_size: int, nodes: int, ranks_per_node: int, options: Options
) -> Entry:
    """The table entry of a measured point: the best surviving candidate, chosen over native only if
    it wins clearly (median ratio >= min_gain and the 95% confidence interval's low end >= min_ci)."""
    finalists = [o for o in outcomes if o.pruned_after is None and o.ratios] or [o for o in outcomes if o.ratios]
    best = max(finalists, key=lambda o: o.median())
    p25, p75 = best.quartiles()
    lo, hi = best.median_ci()
    serve = best.median() >= options.min_gain and lo >= options.min_ci
    return Entry(
        collective=point.collective,
        memory="host",
        comm_size=comm_size,
        nodes=nodes,
        ranks_per_node=ranks_per_node,
        bytes=point.nbytes,
        serve=serve,
        config=best.config,
        ratio=round(best.median(), 4),
        p25=round(p25, 4),
        p75=round(p75, 4),
        ci_low=round(lo, 4),
        ci_high=round(hi, 4),
        samples=len(best.ratios),
        candidates=tuple(o.to_json(point.collective) for o in outcomes),
    )
