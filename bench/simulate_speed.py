"""Speed of adaptcoll.simulate on one core: simulated events per second, and the 65 536-rank Bcasts.

An "event" is one timestamped occurrence the simulator processes (a message ready, leaving, arriving;
a completion or start delivered to a rank's CPU; a message's share of a link recomputed); on the
Python core each runs the protocols' Python callbacks it triggers, on the C core (simcore.c) the
compiled engine's C protocols (or the lock-step steps). Most rows are run on both cores (the same
results, checked here). Times are process CPU seconds
(not wall), so other load on the machine disturbs them less; take the lock anyway (flock -x) for
figures you report.

    python bench/simulate_speed.py                 # every row (the 65 536-rank Python row: minutes)
    python bench/simulate_speed.py --skip-large    # without the 65 536-rank rows
    python bench/simulate_speed.py --issue         # plus issue 37's 65 536-rank runs (C core): two
                                                   # Bcast 16M of adaptcoll, four lock-step baselines
    python bench/simulate_speed.py --profile       # plus a cProfile of the 4096-rank run (Python core)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from adaptcoll.runtime import settings
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams, load_params
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import run_once

COMPILED_PARAMS = Path(__file__).parent / "results" / "simulate" / "params_scale_compiled.json"


def timed(job: Job, impl: str = "adaptcoll", core: str = "", params: CostParams = DEFAULT_PARAMS) -> dict:
    """One quiet run: CPU seconds, events, messages and their rates."""
    prepared = prepare(job, params.ranks_per_node) if impl == "adaptcoll" else None
    t0 = time.process_time()
    stats, _, _ = run_once(job, params, impl, prepared=prepared, core=core)
    cpu = time.process_time() - t0
    return {
        "impl": impl + (f" ({core})" if core else ""),
        "stats": stats,
        "ranks": job.size,
        "segments": str(prepared.plan.nseg) if prepared else "-",  # (a baseline's are its own)
        "cpu_s": cpu,
        "events": stats.events,
        "callbacks": stats.callbacks,
        "messages": stats.messages,
        "events_per_s": stats.events / cpu,
        "messages_per_s": stats.messages / cpu,
        "simulated_us": stats.time_s * 1e6,
    }


def show(row: dict) -> None:
    print(
        f"{row['impl']:>22} {row['ranks']:>7} ranks x {row['segments']:>3} segments: {row['cpu_s']:7.2f} s CPU, "
        f"{row['events']:>10,} events ({row['events_per_s']:>9,.0f}/s), {row['messages']:>9,} messages "
        f"({row['messages_per_s']:>8,.0f}/s), {row['callbacks']:>10,} callbacks; "
        f"simulated {row['simulated_us']:,.0f} us"
    )


def both_cores(job: Job, params: CostParams = DEFAULT_PARAMS, impl: str = "adaptcoll") -> None:
    """One run on the Python core and on the C core: the rows, their ratio, and the same results."""
    py, c = timed(job, impl, core="python", params=params), timed(job, impl, core="c", params=params)
    show(py)
    show(c)
    same = "the same results" if py["stats"] == c["stats"] else f"DIFFERENT results: {py['stats']} / {c['stats']}"
    print(f"{'':>22} C core {py['cpu_s'] / c['cpu_s']:.1f}x faster; {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the 4096-rank adaptcoll Bcast")
    parser.add_argument("--skip-large", action="store_true", help="skip the 65 536-rank runs")
    parser.add_argument("--issue", action="store_true", help="issue 37's 65 536-rank Bcast 16M runs on the C core")
    args = parser.parse_args()
    cfg = settings.Settings(max_segments=16)  # 8 MiB in 512 KiB segments: 16 segments
    small = Job("bcast", 4096, 8 << 20, 512 << 10, settings=cfg)
    both_cores(small)
    for impl in ("scatter_allgather", "binomial"):
        both_cores(small, impl=impl)
    both_cores(Job("allreduce", 4096, 8 << 20, 512 << 10, settings=cfg))
    if not args.skip_large:
        both_cores(Job("bcast", 65536, 8 << 20, 512 << 10, settings=cfg))
    if args.issue:
        # the issue's 64-segment run (521 s of CPU on the Python core, 2026-11-25) ...
        uncapped = settings.Settings(max_segments=0)
        show(timed(Job("bcast", 65536, 16 << 20, 256 << 10, "two_tree", settings=uncapped), core="c"))
        # ... and the shipped rule's choice for the compiled engine (256 segments of 64 KiB, two_tree)
        compiled = settings.from_environ({"ADAPTCOLL_ENGINE": "compiled"})
        rule = Job("bcast", 65536, 16 << 20, 0, settings=compiled)
        show(timed(rule, core="c", params=load_params(COMPILED_PARAMS)))
        # ... and the lock-step baselines its scale tables divide by, on the C core
        for collective, nbytes, impl in (
            ("bcast", 16 << 20, "scatter_allgather"),
            ("bcast", 1 << 20, "scatter_allgather"),
            ("reduce", 4 << 20, "reduce_scatter_gather"),
            ("allreduce", 4 << 20, "rabenseifner"),
        ):
            show(timed(Job(collective, 65536, nbytes, 0, settings=compiled), impl, core="c"))
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run_once(small, DEFAULT_PARAMS, core="python")
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
