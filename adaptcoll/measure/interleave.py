"""The interleaved timing loop: every implementation runs once per iteration (A B A B ...), each call
after a barrier, settings switched outside the timed region, so that all implementations see the same
machine state (noise, other jobs, thermal state) and their samples can be paired. The order changes from
one iteration to the next (`orders`: a balanced Latin square), so each implementation is timed in every
position and right after each of the others equally often: in a fixed order the implementation listed
last read 0.03-0.10 faster than an identical one listed before it (bench/RESULTS.md, "2 ranks' Bcast
served whole")."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

__all__ = [
    "Impl",
    "SettingsSwitch",
    "first_blocking_calls",
    "warmup",
    "orders",
    "time_blocking",
    "routes",
    "route_of",
]


@dataclass
class Impl:
    """A runnable implementation: kind "native" (MPI's collective on its communicator), "adaptcoll"
    (with `settings` applied around each call) or "staged" (device buffers, hand-written host staging)."""

    label: str
    kind: str
    comm: Any
    settings: Any = None
    overrides: dict[str, Any] = field(default_factory=dict)


class SettingsSwitch:
    """Applies an implementation's adaptcoll settings only when they differ from those in force."""

    def __init__(self, adaptcoll: Any) -> None:
        self.adaptcoll = adaptcoll
        self.current: Any = None

    def apply(self, impl: Impl) -> None:
        """Put `impl`'s settings in force (as captured: its explicit fields win, the rest is tuned)."""
        if impl.settings is None or impl.settings is self.current:
            return
        self.adaptcoll.runtime.settings.use(impl.settings)
        self.current = impl.settings


def first_blocking_calls(adaptcoll: Any, comm: Any, MPI: Any) -> None:
    """One tiny served blocking call of each collective: what only a blocking call sets up (the shm node
    level: nonblocking calls never block, so before it they use the point-to-point trees) is set up now."""
    one = np.zeros(1)
    with adaptcoll.configured(native_below=0):
        comm.Bcast(one, 0)
        comm.Reduce(MPI.IN_PLACE if comm.Get_rank() == 0 else one, one, MPI.SUM, 0)
        comm.Allreduce(MPI.IN_PLACE, one, MPI.SUM)


def warmup(
    calls: Sequence[Callable[[], Any]],
    impls: Sequence[Impl],
    switch: SettingsSwitch,
    barrier: Callable[[], Any],
    count: int,
    nonblocking: bool,
) -> np.ndarray:
    """Run `count` interleaved warm-up rounds; returns this rank's mean seconds per call per impl."""
    clock = time.perf_counter
    spent = np.zeros(len(impls))
    for _ in range(count):
        for k, impl in enumerate(impls):
            switch.apply(impl)
            barrier()
            t0 = clock()
            r = calls[k]()
            if nonblocking:
                r.Wait()
            spent[k] += clock() - t0
    return spent / max(count, 1)


def orders(n: int) -> list[list[int]]:
    """A balanced Latin square of the indices 0..n-1 (Williams' design): every index in every position,
    and right after every other index, equally often over the rows (n rows for even n, 2n for odd n,
    whose second half is the first reversed)."""
    base = [0]
    for j in range(1, n):
        base.append((j + 1) // 2 if j % 2 else n - j // 2)
    rows = [[(b + i) % n for b in base] for i in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 and n > 1 else rows


def time_blocking(
    calls: Sequence[Callable[[], Any]],
    impls: Sequence[Impl],
    switch: SettingsSwitch,
    barrier: Callable[[], Any],
    iters: int,
    progress_cb: Callable[[int], None],
    delay: Optional[Callable[[int], None]] = None,
) -> np.ndarray:
    """times[impl, iteration] in seconds on this rank, implementations interleaved per iteration in the
    order of `orders(len(impls))`'s row `iteration % rows` (`delay(iteration)` runs after the barrier,
    before the clock starts: injected skew)."""
    n = len(impls)
    times = np.zeros((n, iters))
    clock = time.perf_counter
    square = orders(n)
    for it in range(iters):
        for k in square[it % len(square)]:
            switch.apply(impls[k])
            barrier()
            if delay is not None:
                delay(it)
            t0 = clock()
            calls[k]()
            times[k, it] = clock() - t0
        progress_cb(1)
    return times


def route_of(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> str:
    """Who served the calls between two `adaptcoll.stats()` snapshots: "adaptcoll", "native: <reasons>"
    (adaptcoll handed them to native MPI, e.g. below its thresholds), "mixed: ..." or "none"."""
    served = 0
    reasons: dict[str, int] = {}
    for name, row in after.items():
        if name == "notes" or "adaptcoll" not in row:
            continue
        old = before.get(name, {"adaptcoll": 0, "native_reasons": {}})
        served += row["adaptcoll"] - old["adaptcoll"]
        for reason, n in row["native_reasons"].items():
            more = n - old["native_reasons"].get(reason, 0)
            if more:
                reasons[reason] = reasons.get(reason, 0) + more
    why = ", ".join(sorted(reasons))
    if served and reasons:
        return f"mixed: adaptcoll and native ({why})"
    if reasons:
        return f"native: {why}"
    return "adaptcoll" if served else "none"


def routes(
    calls: Sequence[Callable[[], Any]],
    impls: Sequence[Impl],
    switch: SettingsSwitch,
    adaptcoll: Any,
    nonblocking: bool,
) -> list[str]:
    """Per implementation, who serves this (collective, size): one untimed call each, judged from the
    `adaptcoll.stats()` delta it leaves (every rank makes the same calls in the same order)."""
    out = []
    for call, impl in zip(calls, impls):
        if impl.kind != "adaptcoll":
            out.append(impl.kind)
            continue
        switch.apply(impl)
        before = adaptcoll.stats()
        request = call()
        if nonblocking:
            request.Wait()
        out.append(route_of(before, adaptcoll.stats()))
    return out
