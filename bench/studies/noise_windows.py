"""Do larger send / receive windows give a pipelined Bcast slack under noise? (issue 37, simulated)

Runs the compiled engine's rule's shape at 1K ranks, one per node (Bcast 16M on six trees of fanout 6, 32 KiB
segments; change with ALGORITHM SEGMENT), quiet and the median of 3 draws under 100 Hz x 250 us, for
several (send, receive) window pairs, and prints each against the best lock-step's times at that point
(scatter + allgather, 3.43 / 4.27 ms, bench/RESULTS.md "More trees for the noisy column"). On the C
core each configuration takes seconds.

    python bench/studies/noise_windows.py [ALGORITHM SEGMENT_BYTES]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from adaptcoll.runtime import settings
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import load_params
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.run import run_once

PARAMS = Path(__file__).parents[1] / "results" / "simulate" / "params_scale_compiled.json"
BEST_QUIET, BEST_NOISY = 3.43e-3, 4.27e-3
WINDOWS = ((2, 3), (1, 3), (2, 6), (4, 6), (2, 12), (4, 12), (8, 16))


def main() -> None:
    algorithm = sys.argv[1] if len(sys.argv) > 1 else "multi_tree:fanout=6"
    segment = int(sys.argv[2]) if len(sys.argv) > 2 else 32 << 10
    params = load_params(PARAMS)
    noise = parse_noise(["100Hz x 250us"])
    for send, recv in WINDOWS:
        env = {
            "ADAPTCOLL_ENGINE": "compiled",
            "ADAPTCOLL_MAX_SEGMENTS": "0",
            "ADAPTCOLL_BCAST_SEND_WINDOW": str(send),
            "ADAPTCOLL_BCAST_RECV_WINDOW": str(recv),
        }
        job = Job("bcast", 1024, 16 << 20, segment, algorithm, settings=settings.from_environ(env))
        quiet = run_once(job, params)[0].time_s
        noisy = statistics.median(run_once(job, params, "adaptcoll", noise, 1, s)[0].time_s for s in range(3))
        print(
            f"{algorithm} {segment >> 10}K, windows {send}/{recv}: quiet {quiet * 1e3:.3f} ms, "
            f"noisy {noisy * 1e3:.3f} ms (+{(noisy - quiet) * 1e3:.2f}); / best lock-step "
            f"{quiet / BEST_QUIET:.3f} quiet, {noisy / BEST_NOISY:.3f} noisy",
            flush=True,
        )


if __name__ == "__main__":
    main()
