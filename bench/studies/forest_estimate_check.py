"""Question: how close is the schedule tool's time estimate to the simulator, and does its pick do well there?
Answer: bench/RESULTS.md, "The tool's CPU-aware choice (issue 22, continued)" (re-run in "Send order,
NIC-first entries, ... (issue 22, 2026-11-26)").

The schedule tool's time estimate (adaptcoll.schedule.cost) against the simulator, on small versions of
issue 22's topologies: fixed shapes (as the library runs them) and synthesized forests, each collective,
several segment sizes; per row the simulated and estimated ms and their ratio, then per call which
candidate the estimate picks (3 % margin for forests) and how it does in the simulator (docs/schedules.md).

    python bench/studies/forest_estimate_check.py            # ~3 min CPU
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from adaptcoll.plans import schedule_file as forest_file
from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.schedule import shapes
from adaptcoll.schedule.choose import fixed_trees
from adaptcoll.schedule.cost import estimate
from adaptcoll.schedule.network import Network
from adaptcoll.schedule.synthesize import synthesize
from adaptcoll.simulate.params import DEFAULT_PARAMS
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import run_once

TOPOLOGIES = {
    "dgx1": shapes.dgx1,
    "nic2-16": lambda: shapes.nic_nodes(16, 8, nics=2),
    "fat-32": lambda: shapes.fat_tree(32, 8, 4.0),
}
CALLS = (("bcast", "16M"), ("reduce", "4M"), ("allreduce", "4M"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topology", action="append", choices=sorted(TOPOLOGIES))
    p.add_argument("--segments", default="64K,128K,256K,1M")
    p.add_argument("--trees", default="2,4,8")
    args = p.parse_args(argv)
    segments = [parse_size(t) for t in args.segments.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.topology or list(TOPOLOGIES):
            d = TOPOLOGIES[key]()
            net, routes = Network(d), Routes(d)
            cfg = settings.Settings(max_segments=0, topology=d.node_spec())
            for collective, size_text in CALLS:
                size = parse_size(size_text)
                most = -(-size // min(segments))
                cands: dict[str, tuple[bool, list, tuple[int, ...]]] = {}
                for shape in ("two_tree", "binomial"):
                    got = fixed_trees(d, shape, 0, collective, limit=most)
                    assert got is not None
                    cands[shape] = (True, got[0], got[1])
                for k in (int(t) for t in args.trees.split(",")):
                    r = synthesize(d, collective, 0, trees=k, fanout=2)
                    kids = [(t.weight, t.children) for t in r.schedule.forests[0].trees]
                    cands[f"forest K={k}"] = (False, kids, (0,) * len(kids))
                rows = []
                for name, (fixed, kids, roots) in cands.items():
                    forests: dict[int, list] = {}
                    for (w, k2), root in zip(kids, roots):
                        forests.setdefault(root, []).append({"weight": w, "children": [list(c) for c in k2]})
                    raw = {
                        "format": forest_file.FORMAT,
                        "collective": collective,
                        "ranks": d.ranks,
                        "forests": [{"root": root, "trees": ts} for root, ts in forests.items()],
                    }
                    path = Path(tmp) / f"{key}-{collective}-{name.replace(' ', '')}.json"
                    path.write_text(forest_file.dumps(forest_file.from_dict(raw)))
                    for seg in segments:
                        e = estimate(net, kids, roots, collective, size, seg)
                        job = Job(collective, d.ranks, size, seg, f"forest:{path}", cfg)
                        sim = run_once(job, DEFAULT_PARAMS, "adaptcoll", topology=routes)[0].time_s
                        rows.append((name, fixed, seg, sim, e))
                        print(
                            f"{key} {collective} {size_text} {name:12s} {seg >> 10:5d}K sim {sim * 1e3:7.3f} ms "
                            f"est {e.total_s * 1e3:7.3f} ms ({e.total_s / sim:.2f}; links {e.link_s * 1e3:.3f} "
                            f"CPU {e.cpu_s * 1e3:.3f} fill {e.fill_s * 1e3:.3f}, {e.binds} bind)",
                            flush=True,
                        )
                best_fixed = min((r for r in rows if r[1]), key=lambda r: r[4].total_s)
                best_forest = min((r for r in rows if not r[1]), key=lambda r: r[4].total_s)
                pick = best_forest if best_forest[4].total_s < 0.97 * best_fixed[4].total_s else best_fixed
                sim_fixed = min(r[3] for r in rows if r[1])
                sim_best = min(rows, key=lambda r: r[3])
                print(
                    f"{key} {collective} {size_text}: the estimate picks {pick[0]} at {pick[2] >> 10}K: "
                    f"simulated {pick[3] * 1e3:.3f} ms, best fixed {sim_fixed * 1e3:.3f} ms "
                    f"(ratio {pick[3] / sim_fixed:.2f}); simulated best {sim_best[0]} at {sim_best[2] >> 10}K "
                    f"{sim_best[3] * 1e3:.3f} ms",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
