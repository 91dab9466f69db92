"""Question: is adaptcoll's loss to lock-step on described networks the link-sharing model or the tree's placement?
Answer: bench/RESULTS.md, "The tool's CPU-aware choice (issue 22, continued)", the caveat on the network
model.

adaptcoll's binomial Bcast 16 MiB against the lock-step binomial on a flat switch and on small fat trees,
simulated with max-min fair link sharing (the simulator's model) and with the earlier bottleneck model
(each message at its equal share of its most crowded link): how much of adaptcoll's loss on described
networks is its all-at-once sends under fair sharing (the flat switch, where both models agree for these
sends), how much was the bottleneck model's departure from max-min fairness (the fat trees: little), and
how much is the tree's placement: adaptcoll's `binomial` (Open MPI's bmtree, children v + 2^k above v's
highest bit) has every rank of a node send across the node's NIC at once, `in_order_binomial` (each
subtree a contiguous range of ranks, as MPICH's) only one rank per node.

    python bench/studies/topology_sharing_check.py        # ~1 min
"""

from __future__ import annotations

from adaptcoll.runtime import settings
from adaptcoll.schedule import shapes
from adaptcoll.simulate.params import DEFAULT_PARAMS
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import SHARING, Routes
from adaptcoll.simulate.run import run_once

M, K = 1 << 20, 1 << 10


def main() -> None:
    for name, d in (
        ("flat switch, 256 ranks", shapes.flat_switch(256)),
        ("fat tree 32 x 8, 4:1", shapes.fat_tree(32, 8, 4.0)),
        ("fat tree 32 x 8, 1:1", shapes.fat_tree(32, 8, 1.0)),
    ):
        for sharing in SHARING:
            routes = Routes(d, sharing)
            parts = []
            for tree in ("binomial", "in_order_binomial"):
                cells = []
                for segment, cap, label in ((16 * M, 1, "1 segment"), (256 * K, 0, "64 segments")):
                    job = Job("bcast", d.ranks, 16 * M, segment, tree, settings.Settings(max_segments=cap))
                    ms = run_once(job, DEFAULT_PARAMS, "adaptcoll", topology=routes)[0].time_s * 1e3
                    cells.append(f"{label} {ms:.2f}")
                parts.append(f"adaptcoll {tree} {', '.join(cells)} ms")
            job = Job("bcast", d.ranks, 16 * M, 256 * K, "binomial", settings.Settings())
            lockstep = run_once(job, DEFAULT_PARAMS, "binomial", topology=routes)[0].time_s * 1e3
            print(f"{name}, {sharing}: {'; '.join(parts)}; lock-step binomial {lockstep:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
