"""adaptcoll's binomial Bcast 16 MiB against the lock-step binomial on a flat switch and on small fat trees,
simulated: how much of adaptcoll's loss on described networks is its all-at-once sends under fair sharing
(the flat switch, where the path model is exact) and how much the path model's departure from max-min
fairness (the fat trees). bench/RESULTS.md, issue 22.

    python bench/topology_sharing_check.py        # ~1 min
"""

from __future__ import annotations

from adaptcoll import settings
from adaptcoll.schedule import shapes
from adaptcoll.simulate.params import DEFAULT_PARAMS
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import run_once

M, K = 1 << 20, 1 << 10


def main() -> None:
    for name, d in (
        ("flat switch, 256 ranks", shapes.flat_switch(256)),
        ("fat tree 32 x 8, 4:1", shapes.fat_tree(32, 8, 4.0)),
        ("fat tree 32 x 8, 1:1", shapes.fat_tree(32, 8, 1.0)),
    ):
        routes = Routes(d)
        cells = []
        for segment, cap, label in ((16 * M, 1, "1 segment"), (256 * K, 0, "64 segments")):
            job = Job("bcast", d.ranks, 16 * M, segment, "binomial", settings.Settings(max_segments=cap))
            cells.append(f"{label} {run_once(job, DEFAULT_PARAMS, 'adaptcoll', topology=routes)[0].time_s * 1e3:.2f}")
        job = Job("bcast", d.ranks, 16 * M, 256 * K, "binomial", settings.Settings())
        lockstep = run_once(job, DEFAULT_PARAMS, "binomial", topology=routes)[0].time_s * 1e3
        print(f"{name}: adaptcoll binomial {', '.join(cells)} ms; lock-step binomial {lockstep:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
