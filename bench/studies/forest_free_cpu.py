"""Question: do the synthesized forests beat two_tree where only the links bind?
Answer: bench/RESULTS.md, "Synthesized forests against the fixed shapes on described networks (issue 22,
simulated)".

Forests against two_tree with the simulator's CPU costs as built in and with free CPU, on small
versions of issue 22's topologies.

    python bench/studies/forest_free_cpu.py            # ~1 min
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from adaptcoll.plans import schedule_file as forest_file
from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.schedule import shapes
from adaptcoll.schedule.synthesize import synthesize
from adaptcoll.simulate.params import DEFAULT_PARAMS
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import run_once

FREE = dataclasses.replace(DEFAULT_PARAMS, o=0.0, engine=0.0, fold=0.0)
"""Built-in parameters without CPU costs per message, per callback and per folded byte."""
TOPOLOGIES = {
    "dgx1": shapes.dgx1,
    "nic2 32x8": lambda: shapes.nic_nodes(32, 8, nics=2),
    "fat 32x8 4:1": lambda: shapes.fat_tree(32, 8, 4.0),
}
SEGMENTS = ("256K", "1M")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for key, make in TOPOLOGIES.items():
            d = make()
            routes = Routes(d)
            cfg = settings.Settings(max_segments=0, topology=d.node_spec())
            for collective, size in (("bcast", "16M"), ("reduce", "4M")):
                nbytes = parse_size(size)
                got = synthesize(d, collective, 0, trees=8, fanout=2)
                path = Path(tmp) / f"{key.split()[0]}-{collective}.json"  # one path per schedule: loads are cached
                path.write_text(forest_file.dumps(got.schedule))
                cells = []
                for params, tag in ((DEFAULT_PARAMS, "built-in"), (FREE, "free CPU")):
                    best = {}
                    for name, algorithm in (("forest", f"forest:{path}"), ("two_tree", "two_tree")):
                        best[name] = min(
                            run_once(
                                Job(collective, d.ranks, nbytes, parse_size(seg), algorithm, cfg),
                                params,
                                "adaptcoll",
                                topology=routes,
                            )[0].time_s
                            * 1e3
                            for seg in SEGMENTS
                        )
                    ratio = best["forest"] / best["two_tree"]
                    cells.append(f"{tag}: forest {best['forest']:.2f} two_tree {best['two_tree']:.2f} ({ratio:.2f})")
                bound = nbytes / got.bound.rate * 1e3
                print(f"{key} {collective} {size}: bound {bound:.2f} ms; " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
