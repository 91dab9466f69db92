"""Speed of adaptcoll.simulate on a described network: a 2-level fat tree, Bcast 16 MiB on two_tree.

The fat tree (`fat_tree` below, a small writer of this script's own: adaptcoll.schedule's shapes have
the documented ones): `nodes` nodes of `per_node` ranks; each rank has a link both ways to its node's
switch (`intra` B/s, 0.5 us), each node switch one to its leaf (`nic` B/s, 1 us), `per_leaf` nodes per
leaf, and each leaf `uplinks` links to as many spines whose total is the leaf's downlinks over
`oversubscription` (1 us). Routes between leaves spread over the spines by ECMP (adaptcoll.simulate.routes).

    python bench/simulate_topology.py                      # 256 nodes x 8 ranks, 4:1, 64 segments
    python bench/simulate_topology.py --nodes 512 --save fat.json   # 4096 ranks; write the description

Times are process CPU seconds; take the machine lock (flock -x) for figures you report.
"""

from __future__ import annotations

import argparse
import time

from adaptcoll.runtime import settings
from adaptcoll.schedule.describe import Description, Link, save
from adaptcoll.simulate.params import DEFAULT_PARAMS
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import run_once


def fat_tree(
    nodes: int,
    per_node: int,
    per_leaf: int = 16,
    oversubscription: float = 4.0,
    uplinks: int = 4,
    nic: float = 25e9,
    intra: float = 50e9,
) -> Description:
    """A 2-level fat tree: ranks -> node switch -> leaf -> spines (both directions)."""
    links: list[Link] = []
    switches: list[str] = []
    leaves = -(-nodes // per_leaf)
    spines = [f"spine{s}" for s in range(uplinks)]
    switches += spines
    up_bw = per_leaf * nic / oversubscription / uplinks
    for leaf in range(leaves):
        name = f"leaf{leaf}"
        switches.append(name)
        for spine in spines:
            links += [Link(name, spine, up_bw, 1e-6), Link(spine, name, up_bw, 1e-6)]
    for n in range(nodes):
        node = f"node{n}"
        switches.append(node)
        leaf = f"leaf{n // per_leaf}"
        links += [Link(node, leaf, nic, 1e-6), Link(leaf, node, nic, 1e-6)]
        for r in range(n * per_node, (n + 1) * per_node):
            links += [Link(r, node, intra, 5e-7), Link(node, r, intra, 5e-7)]
    groups = tuple(tuple(range(n * per_node, (n + 1) * per_node)) for n in range(nodes))
    name = f"fat tree {nodes}x{per_node}, {per_leaf} nodes per leaf, {oversubscription:g}:1"
    return Description(nodes * per_node, tuple(links), tuple(switches), groups, name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--segments", type=int, default=64, help="max_segments of the 16 MiB in 256 KiB segments")
    p.add_argument("--algorithm", default="two_tree")
    p.add_argument("--baseline", action="append", default=[], help="lock-step baselines to time too")
    p.add_argument("--default", action="store_true", help="also the run without a topology (per-rank links)")
    p.add_argument("--save", metavar="FILE", help="write the description (for --topology FILE)")
    args = p.parse_args()
    desc = fat_tree(args.nodes, args.per_node)
    if args.save:
        save(args.save, desc)
    size = desc.ranks
    job = Job("bcast", size, 16 << 20, 256 << 10, args.algorithm, settings.Settings(max_segments=args.segments))
    print(f"{desc.name}: {size} ranks, {len(desc.switches)} switches, {len(desc.links)} links")
    runs: list[tuple[str, str, bool]] = [("adaptcoll", "adaptcoll", True)]
    runs += [(f"lockstep:{b}", b, True) for b in args.baseline]
    if args.default:
        runs.append(("adaptcoll, no topology", "adaptcoll", False))
    for label, impl, topo in runs:
        routes = Routes(desc) if topo else None
        t0 = time.process_time()
        stats, _, _ = run_once(job, DEFAULT_PARAMS, impl, topology=routes)
        cpu = time.process_time() - t0
        extra = f", {routes.cached:,} routes, {routes.dijkstras} switch Dijkstras" if routes else ""
        print(
            f"{label:>24}: {cpu:7.2f} s CPU, {stats.events:>11,} events ({stats.events / cpu:>9,.0f}/s), "
            f"{stats.messages:>9,} messages; simulated {stats.time_s * 1e6:,.0f} us{extra}"
        )


if __name__ == "__main__":
    main()
