"""How much do the several-ranks-per-node scale results depend on the node's memory? (issue 37)

The scale tables (`params_scale_compiled.json`, the built-in cluster) copy a message between two ranks of
one node at the link's rate, 10 GB/s, and any number of such copies run at once at that rate: a node of 32
ranks may move 320 GB/s. The one node measured (the 16-core node, `params_16core_contention.json`) sustains
about 22 GB/s in all, at 5.7 GB/s for one copy, and concurrent copies slow one another. This runs the
compiled rule's calls at R ranks x P per node and the best of the given lock-step baselines with the 16-core
node's memory model for the copies inside a node (`params_scale_compiled_node16core.json`), its node
bandwidth replaced by each of `--node-bw`, with and without its copy contention (links between nodes as in
the scale tables), and prints rule / best for each:

    ADAPTCOLL_ENGINE=compiled python bench/studies/node_memory.py [--ranks 1024] [--per-node 32]
        [--node-bw 22e9,50e9,100e9,200e9] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from adaptcoll.runtime import settings
from adaptcoll.simulate.params import load_params
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import run_once

PARAMS = Path(__file__).resolve().parents[1] / "results" / "simulate" / "params_scale_compiled_node16core.json"
POINTS = (
    ("bcast", 16 << 20, ("ompi_han", "mpich_smp", "scatter_ring_allgather", "scatter_allgather")),
    ("reduce", 4 << 20, ("reduce_scatter_gather", "mpich_smp", "ompi_han")),
    ("allreduce", 4 << 20, ("rabenseifner", "mpich_smp", "ompi_han")),
)
"""The issue's several-per-node cells and the baselines that were the best there under either memory model."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--per-node", type=int, default=32)
    p.add_argument("--node-bw", default="22e9,50e9,100e9,200e9", help="node memory bandwidths (bytes/s)")
    p.add_argument("--params", default=str(PARAMS))
    p.add_argument("--json", default="")
    args = p.parse_args()
    base = load_params(args.params)
    out = []
    for bw in (float(x) for x in args.node_bw.split(",")):
        for contention in (0.0, base.copy_contention):
            params = dataclasses.replace(base, node_bw=bw, copy_contention=contention, ranks_per_node=args.per_node)
            for collective, nbytes, baselines in POINTS:
                job = Job(collective, args.ranks, nbytes, 0, "", settings.current())
                prepared = prepare(job, args.per_node)
                rule = run_once(job, params, "adaptcoll", None, 1, 0, prepared=prepared)[0].time_s
                best_s, best = min((run_once(job, params, b, None, 1, 0)[0].time_s, b) for b in baselines)
                out.append(
                    {
                        "node_bw": bw,
                        "copy_contention": contention,
                        "collective": collective,
                        "size": nbytes,
                        "rule": prepared.choice.label(),
                        "rule_s": rule,
                        "best": best,
                        "best_s": best_s,
                    }
                )
                print(
                    f"node_bw {bw / 1e9:5.0f} GB/s, contention {contention:g}: {collective:9s} {nbytes >> 20:3d}M "
                    f"rule {rule * 1e3:7.2f} ms, best {best_s * 1e3:7.2f} ms ({best}), rule / best {rule / best_s:.2f}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": vars(args), "rows": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
