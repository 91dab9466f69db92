"""Speed of adaptcoll.simulate on one core: simulated events per second, and the 65 536-rank, 16-segment Bcast.

An "event" is one timestamped occurrence the simulator processes (a message ready, leaving, arriving;
a completion or start delivered to a rank's CPU); each runs the protocols' Python callbacks it
triggers. The adaptcoll rows therefore include the library's own protocol code; the lock-step rows
show the simulator core with cheap callbacks. Times are process CPU seconds (not wall), so other
load on the machine disturbs them less; take the lock anyway (flock -x) for figures you report.

    python bench/simulate_speed.py                 # the two figures
    python bench/simulate_speed.py --profile       # plus a cProfile of the 4096-rank run (top 25)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from adaptcoll.runtime import settings
from adaptcoll.simulate.params import DEFAULT_PARAMS
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.run import run_once


def timed(job: Job, impl: str = "adaptcoll") -> dict:
    """One quiet run: CPU seconds, events, messages and their rates."""
    t0 = time.process_time()
    stats, _, _ = run_once(job, DEFAULT_PARAMS, impl)
    cpu = time.process_time() - t0
    return {
        "impl": impl,
        "ranks": job.size,
        "segments": -(-job.nbytes // job.segment),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the 4096-rank adaptcoll Bcast")
    parser.add_argument("--skip-large", action="store_true", help="skip the 65 536-rank run")
    args = parser.parse_args()
    cfg = settings.Settings(max_segments=16)  # 8 MiB in 512 KiB segments: 16 segments
    small = Job("bcast", 4096, 8 << 20, 512 << 10, settings=cfg)
    for impl in ("adaptcoll", "scatter_allgather", "binomial"):
        show(timed(small, impl))
    show(timed(Job("allreduce", 4096, 8 << 20, 512 << 10, settings=cfg)))
    if not args.skip_large:
        show(timed(Job("bcast", 65536, 8 << 20, 512 << 10, settings=cfg)))
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run_once(small, DEFAULT_PARAMS)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
