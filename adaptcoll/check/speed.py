"""The speed part of the check: native MPI against adaptcoll (the settings in force; also the shipped
rule alone when a tuning table is in use, and any extra settings asked for), interleaved call by call
with adaptcoll.measure's loop, per collective and size; each cell's per-iteration ratios
native/adaptcoll (max over ranks of each) give a median, its 95% CI and a verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..measure import (
    Impl,
    SettingsSwitch,
    device_call,
    first_blocking_calls,
    make_buffers,
    paired_ratios,
    routes,
    starter,
    to_device,
    verdict,
    warmup,
)
from ..measure import time_blocking as _time_blocking

__all__ = ["SpeedPlan", "QUICK", "FULL", "make_impls", "run_speed"]


@dataclass(frozen=True)
class SpeedPlan:
    """Collectives, sizes and the time budget of one cell (every implementation together)."""

    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    budget_s: float
    min_iterations: int
    max_iterations: int


K, M = 1 << 10, 1 << 20
QUICK = SpeedPlan(("bcast", "reduce", "allreduce"), (64 * K, 1 * M, 16 * M), 0.7, 10, 200)
FULL = SpeedPlan(
    ("bcast", "reduce", "allreduce", "iallreduce"),
    (4 * K, 64 * K, 256 * K, 1 * M, 4 * M, 16 * M, 64 * M),
    2.5,
    15,
    400,
)
DEVICE_COLLECTIVES = ("bcast", "reduce", "allreduce")


def make_impls(
    world: Any, MPI: Any, adaptcoll: Any, table_in_use: bool, extra: Sequence[tuple[str, dict[str, Any]]]
) -> list[Impl]:
    """native (a plain duplicate of `world`), adaptcoll as configured, the shipped rule alone if a
    tuning table is in use, and each extra (label, settings) - each on its own duplicate communicator
    (settings such as the shm node level are read once per communicator)."""
    impls = [Impl("native", "native", world.Dup())]
    wanted: list[tuple[str, dict[str, Any]]] = [("adaptcoll (table)" if table_in_use else "adaptcoll", {})]
    if table_in_use:
        wanted.append(("adaptcoll (shipped rule)", {"tuning": "off"}))
    wanted.extend(extra)
    for label, overrides in wanted:
        with adaptcoll.configured(**overrides) as chosen:
            comm = adaptcoll.Intracomm(world.Dup())
            first_blocking_calls(adaptcoll, comm, MPI)
        impls.append(Impl(label, "adaptcoll", comm, chosen, dict(overrides)))
    return impls


def _calls(
    collective: str, size: int, impls: Sequence[Impl], world: Any, MPI: Any, cupy: Any
) -> list[Callable[[], Any]]:
    """Every implementation's call on the *same* buffers: with a buffer pair each, MPICH's Reduce at 64 KiB
    took 37-43 us or 70 us depending on where the pair landed (bench/RESULTS.md, issue 20), which made
    identical native calls differ by 1.9x between implementations."""
    bufs = make_buffers(collective, size)
    if cupy is not None:
        bufs = to_device(bufs, cupy)
        return [device_call(i.kind, i.comm, collective, bufs, 0, MPI, cupy, world) for i in impls]
    return [starter(collective, i.comm, bufs, 0, MPI) for i in impls]


def run_speed(
    world: Any,
    MPI: Any,
    adaptcoll: Any,
    impls: list[Impl],
    plan: SpeedPlan,
    progress: Callable[[float, str], None],
    cupy: Any = None,
) -> list[dict[str, Any]]:
    """Every cell of the plan (collective x size x adaptcoll implementation), the same list on every
    rank: times in us (medians of the per-iteration max over ranks), ratio native/adaptcoll with its
    95% CI, verdict and route."""
    switch = SettingsSwitch(adaptcoll)
    barrier = world.Barrier
    cells: list[dict[str, Any]] = []
    collectives = [c for c in plan.collectives if cupy is None or c in DEVICE_COLLECTIVES]
    for collective in collectives:
        nonblocking = collective.startswith("i")
        for size in plan.sizes:
            label = f"{collective} {size} B" + (" device" if cupy is not None else "")
            calls = _calls(collective, size, impls, world, MPI, cupy)
            timed = [(lambda c=c: c().Wait()) for c in calls] if nonblocking else calls
            served_by = routes(calls, impls, switch, adaptcoll, nonblocking)
            first = warmup(calls, impls, switch, barrier, 1, nonblocking)
            per_round = max(world.allreduce(float(first.sum()), op=MPI.MAX), 1e-9)
            iters = int(min(plan.max_iterations, max(plan.min_iterations, plan.budget_s / per_round)))
            warmup(calls, impls, switch, barrier, max(1, min(5, iters // 10)), nonblocking)
            local = _time_blocking(timed, impls, switch, barrier, iters, lambda k: None)
            worst = np.max(np.stack(world.allgather(local)), axis=0) * 1e6  # [impl, iter] us, max over ranks
            progress(1.0, label)
            native = worst[0]
            for k in range(1, len(impls)):
                v = verdict(paired_ratios(native.tolist(), worst[k].tolist()))
                cells.append(
                    {
                        "collective": collective,
                        "size": size,
                        "device": cupy is not None,
                        "impl": impls[k].label,
                        "reference": impls[0].label,
                        "route": served_by[k],
                        "iterations": iters,
                        "reference_us": float(np.median(native)),
                        "adaptcoll_us": float(np.median(worst[k])),
                        "ratio": v.ratio,
                        "ci_low": v.ci_low,
                        "ci_high": v.ci_high,
                        "verdict": v.word,
                    }
                )
    return cells


def device_reference(world: Any, MPI: Any) -> Optional[Impl]:
    """The reference of the device cells: native MPI on device buffers if MPI is CUDA-aware, else the
    host staging a user writes by hand (cupy.asnumpy -> native collective -> copy back)."""
    from ..device import mpi_cuda_aware

    aware, _ = mpi_cuda_aware(world)
    return Impl("native", "native", world.Dup()) if aware else Impl("staged by hand", "staged", world)
