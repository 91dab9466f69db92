"""Synthesized forests against adaptcoll's fixed tree shapes on described networks, simulated (issue 22's table).

For each topology (the three of the issue, written by adaptcoll.schedule.shapes with their default
figures) and each call (Bcast 16 MiB, Reduce 4 MiB, Allreduce 4 MiB, float32 SUM, root 0): forests
synthesized for that collective (`--trees` K values, `--fanout`), each fixed shape (two_tree, binomial,
topo over the description's nodes) in each `--segments` size with no cap, and the shipped rule's own
choice, all run in `adaptcoll.simulate` over the described network (routes, per-link bandwidth and
latency, shared links). Each algorithm keeps its quietly fastest configuration, which then runs under
each noise (median of `--samples` draws, seed `--seed`). "best fixed" is the fastest fixed shape per
condition; the ratio is forest / best fixed (< 1: the forest is faster). The lock-step baselines run
too, for reference. The bound column is the message size over the topology's throughput bound (what
the tool prints): a floor no schedule reaches, pipeline fill, per-message CPU and folds come on top.

    python bench/forest_table.py --json bench/results/simulate/forest_table.json
    python bench/forest_table.py --topology dgx1 --only bcast:16M --samples 1      # one row, seconds
    python bench/forest_table.py --topology dgx1 --tool    # the forest is the tool's CPU-aware choice
                                                           # (python -m adaptcoll.schedule --cpu) at its segment
    python bench/forest_table.py --topology nic2-32 --tool --links pair   # one pair's messages in order
    python bench/forest_table.py --topology dgx1 --tool --params bench/results/simulate/params_scale_compiled.json
                                                           # the compiled engine's CPU costs, in both
    python bench/forest_table.py --topology nic2 --tool --fixed two_tree,binomial,topo ...  # without the rule's

With --tool the "forest" is whatever `adaptcoll.schedule.choose` picks from the same trees and segment
sizes (a synthesized forest, or a fixed shape written as a forest file when no forest beats it by 3 %),
run once at the segment size it chose (from `--tool-segments`); the fixed shapes get their best of
`--segments` and that segment size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from adaptcoll.plans import schedule_file as forest_file
from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.schedule import shapes
from adaptcoll.schedule.choose import SEGMENTS, choose
from adaptcoll.schedule.cost import cpu_costs
from adaptcoll.schedule.synthesize import synthesize
from adaptcoll.simulate.lockstep import baseline_names, check_applicable, estimated_messages
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams, load_params
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import BEST_MAX_MESSAGES, run_once

TOPOLOGIES = {
    "fat-tree": ("fat tree 4:1, 256 nodes x 8", lambda: shapes.fat_tree(256, 8, 4.0)),
    "nic2": ("512 nodes x 8, 2 NICs", lambda: shapes.nic_nodes(512, 8, nics=2)),
    "dgx1": ("DGX-1 NVLink (8 GPUs)", shapes.dgx1),
    "fat-tree-32": ("fat tree 4:1, 32 nodes x 8", lambda: shapes.fat_tree(32, 8, 4.0)),
    "nic2-32": ("32 nodes x 8, 2 NICs", lambda: shapes.nic_nodes(32, 8, nics=2)),
}
POINTS = ("bcast:16M", "reduce:4M", "allreduce:4M")
FIXED = ("two_tree", "binomial", "topo", "rule")


def _params(args: argparse.Namespace) -> CostParams:
    """The simulator's parameters (built-in, or `--params`), with `--links` (fair unless given)."""
    path = getattr(args, "params", None)
    base = load_params(path) if path else DEFAULT_PARAMS
    return dataclasses.replace(base, links=getattr(args, "links", "fair"))


def _times(
    job: Job,
    routes: Routes,
    noises: list[Any],
    seed: int,
    samples: int,
    impl: str = "adaptcoll",
    params: CostParams = DEFAULT_PARAMS,
) -> list[float]:
    """[quiet, median under each noise] in seconds, for `impl` (adaptcoll or a lock-step baseline) running `job`."""
    prepared = prepare(job) if impl == "adaptcoll" else None
    out = [run_once(job, params, impl, None, seed, 0, prepared=prepared, topology=routes)[0].time_s]
    for noise in noises:
        draws = [
            run_once(job, params, impl, noise, seed, s, prepared=prepared, topology=routes)[0].time_s
            for s in range(samples)
        ]
        out.append(statistics.median(draws))
    return out


def _quiet(job: Job, routes: Routes, seed: int, params: CostParams = DEFAULT_PARAMS) -> float:
    return run_once(job, params, "adaptcoll", None, seed, 0, prepared=prepare(job), topology=routes)[0].time_s


def row(key: str, point: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One row: each algorithm at its quietly fastest configuration (forest: trees K x segment; fixed
    shapes: segment), then those configurations under noise; the best fixed shape per condition."""
    label, make = TOPOLOGIES[key]
    d = make()
    collective, _, size_text = point.partition(":")
    nbytes = parse_size(size_text)
    noises = [parse_noise([text]) for text in args.noise]
    routes = Routes(d)
    params = _params(args)
    node_spec = d.node_spec()
    segments = [parse_size(t) for t in args.segments.split(",")]
    jobs: dict[str, list[tuple[str, Job]]] = {}  # algorithm -> [(configuration label, job)]
    synth: dict[int, Any] = {}
    tool = None
    if getattr(args, "tool", False):
        fanouts = [int(t) for t in args.tool_fanouts.split(",")]
        tool_segments = [parse_size(t) for t in args.tool_segments.split(",")]
        trees = [int(t) for t in args.trees.split(",")]
        tool = choose(d, collective, 0, nbytes, tool_segments, trees, fanouts, cpu=cpu_costs(params))
        path = workdir / f"{key}-{collective}-tool.json"
        path.write_text(forest_file.dumps(tool.schedule(collective, 0, d)))
        seg = tool.chosen.estimate.segment
        if seg not in segments:  # the fixed shapes get the tool's segment too: no win by segment size alone
            segments.append(seg)
        job = Job(
            collective, d.ranks, nbytes, seg, f"forest:{path}", settings.Settings(max_segments=0, topology=node_spec)
        )
        jobs["forest"] = [(f"tool: {tool.chosen.name} seg={seg >> 10}K", job)]
        print(f"[{key} {point} tool: {tool.chosen.name} in {tool.seconds:.1f} s]", file=sys.stderr, flush=True)
    for k in (int(t) for t in args.trees.split(",")) if tool is None else ():
        t0 = time.perf_counter()
        got = synthesize(d, collective, 0, trees=k, fanout=args.fanout)
        synth[k] = (got, time.perf_counter() - t0)
        path = workdir / f"{key}-{collective}-{k}.json"
        path.write_text(forest_file.dumps(got.schedule))
        cfg = settings.Settings(max_segments=0, topology=node_spec)
        for seg in segments:
            job = Job(collective, d.ranks, nbytes, seg, f"forest:{path}", cfg)
            jobs.setdefault("forest", []).append((f"K={k} seg={seg >> 10}K", job))
    rule_note = ""
    for name in getattr(args, "fixed", ",".join(FIXED)).split(","):
        if name == "topo" and not node_spec:
            continue
        if name == "rule":
            rule_cfg = settings.Settings(topology=node_spec, engine=settings.current().engine)  # ADAPTCOLL_ENGINE
            job = Job(collective, d.ranks, nbytes, 0, "", rule_cfg)
            choice = prepare(job).choice
            rule_note = choice.label() if choice.serve else "native (" + choice.source + ")"
            if choice.serve:  # native MPI: the lock-step baselines below stand for it
                jobs["rule"] = [(rule_note, job)]
            continue
        cfg = settings.Settings(max_segments=0, topology=node_spec)
        jobs[name] = [(f"seg={seg >> 10}K", Job(collective, d.ranks, nbytes, seg, name, cfg)) for seg in segments]
    times: dict[str, list[float]] = {}
    configs: dict[str, str] = {}
    searched: dict[str, dict[str, float]] = {}
    for name, candidates in jobs.items():
        t1 = time.process_time()
        quiet = {cfg_label: _quiet(job, routes, args.seed, params) for cfg_label, job in candidates}
        searched[name] = quiet
        configs[name] = min(quiet, key=quiet.__getitem__)
        job = dict(candidates)[configs[name]]
        times[name] = [quiet[configs[name]], *_times(job, routes, noises, args.seed, args.samples, params=params)[1:]]
        print(f"[{key} {point} {name}: {time.process_time() - t1:.0f} s CPU]", file=sys.stderr, flush=True)
    if tool is None:
        best_k = int(configs["forest"].split()[0][2:])
        synth_best, synth_s = synth[best_k]
        bound_rate, forest_rate = synth_best.bound.rate, synth_best.rate
        ntrees, depth = len(synth_best.schedule.forests[0].trees), max(synth_best.depths)
        estimates: dict[str, Any] = {}
    else:
        synth_s, bound_rate, forest_rate = tool.seconds, tool.bound.rate, tool.chosen.rate
        ntrees, depth = len(tool.chosen.trees), tool.chosen.estimate.depth
        estimates = {c.name: c.estimate.as_dict() for c in tool.candidates}
        estimates["chosen"] = tool.chosen.name  # type: ignore[assignment]
    segment = segments[0]
    conditions = ["quiet", *args.noise]
    best = [min((n for n in times if n != "forest"), key=lambda n, i=i: times[n][i]) for i in range(len(conditions))]
    lockstep: dict[str, list[float]] = {}
    plain = Job(collective, d.ranks, nbytes, segment, "binomial", settings.Settings())
    rpn = params.ranks_per_node
    for name in baseline_names(collective) if args.lockstep else ():
        try:
            check_applicable(name, collective, d.ranks, plain.count, rpn)
        except ValueError:
            continue
        if args.max_messages and estimated_messages(name, collective, d.ranks, plain.count, rpn) > args.max_messages:
            continue
        t1 = time.process_time()
        lockstep[name] = _times(plain, routes, noises, args.seed, args.samples, name, params)
        print(f"[{key} {point} lock-step {name}: {time.process_time() - t1:.0f} s CPU]", file=sys.stderr, flush=True)
    lbest = [min(lockstep, key=lambda n, i=i: lockstep[n][i]) for i in range(len(conditions))] if lockstep else []
    return {
        "topology": label,
        "ranks": d.ranks,
        "collective": collective,
        "size": nbytes,
        "conditions": conditions,
        "bound_rate": bound_rate,
        "forest_rate": forest_rate,
        "bound_s": nbytes / bound_rate,
        "trees": ntrees,
        "depth": depth,
        "synthesis_s": synth_s,
        "tool_estimates": estimates,
        "configs": configs,
        "searched_quiet_s": searched,
        "rule": rule_note,
        "times_s": times,
        "best_fixed": best,
        "lockstep_s": lockstep,
        "best_lockstep": lbest,
        "ratio": [times["forest"][i] / times[best[i]][i] for i in range(len(conditions))],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: per row, the bound, the forest and the best fixed shape per condition, and the ratios."""
    conds = rows[0]["conditions"] if rows else []
    head = "| topology | call | bound ms | " + " | ".join(f"{c}: forest / best fixed ms (ratio, best)" for c in conds)
    head += " | best lock-step ms (quiet; noisy) | every shape, quiet ms |"
    lines = [head, "|" + "---|" * (5 + len(conds))]
    for r in rows:
        cells = []
        for i in range(len(conds)):
            f, b = r["times_s"]["forest"][i], r["times_s"][r["best_fixed"][i]][i]
            cells.append(f"{f * 1e3:.2f} / {b * 1e3:.2f} ({r['ratio'][i]:.2f}, {r['best_fixed'][i]})")
        every = ", ".join(f"{n} ({r['configs'][n]}) {t[0] * 1e3:.2f}" for n, t in r["times_s"].items())
        if "rule" not in r["times_s"]:
            every += f"; rule: {r['rule']}"
        lb = r["best_lockstep"]
        lock = "; ".join(f"{r['lockstep_s'][n][i] * 1e3:.2f} {n}" for i, n in enumerate(lb)) or "-"
        call = f"{r['collective']} {r['size'] >> 20}M"
        lines.append(
            f"| {r['topology']} ({r['ranks']:,}) | {call} | {r['bound_s'] * 1e3:.2f} | {' | '.join(cells)} "
            f"| {lock} | {every} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topology", action="append", choices=sorted(TOPOLOGIES), help="default: all three")
    p.add_argument("--only", action="append", help=f"collective:size points (default: {', '.join(POINTS)})")
    p.add_argument("--noise", action="append", default=[], help="noise conditions (default: 100Hz x 250us)")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--links",
        choices=("fair", "pair"),
        default="fair",
        help="the simulator's link sharing: fair (built-in) or pair (one sender-receiver pair's messages in order)",
    )
    p.add_argument(
        "--params",
        help="a parameters file (default: built-in), e.g. bench/results/simulate/params_scale_compiled.json: "
        "the simulator and the tool's CPU-aware choice both use its CPU costs",
    )
    p.add_argument("--trees", default="2,4,8", help="forests of at most K trees to try (comma-separated)")
    p.add_argument("--fanout", type=int, default=2, help="the synthesis' fanout bound (0: K)")
    p.add_argument(
        "--segments",
        default="256K,384K,512K,768K,1M",
        help="segment sizes to try for the forest and the fixed shapes (the fixed shapes' best is often between "
        "powers of two: two_tree's Bcast 16M at 4096 ranks, 1.58 ms at 384K against 1.68 at 512K)",
    )
    p.add_argument("--no-lockstep", dest="lockstep", action="store_false", help="leave out the lock-step baselines")
    p.add_argument(
        "--fixed",
        default=",".join(FIXED),
        help="the fixed shapes to run (default all: two_tree,binomial,topo,rule; the rule's own configuration can "
        "take hours on the largest networks under max-min sharing: 512 x 8 behind 2 NICs, Bcast 16M, the rule's "
        "six trees of 32 KiB segments)",
    )
    p.add_argument(
        "--max-messages",
        type=int,
        default=BEST_MAX_MESSAGES,
        help=f"skip lock-step baselines estimated to send more messages (default {BEST_MAX_MESSAGES:,}; 0: no limit)",
    )
    p.add_argument("--tool", action="store_true", help="the forest is the tool's CPU-aware choice (choose.py)")
    p.add_argument("--tool-fanouts", default="2,0", help="--tool: fanouts the choice tries (0: K)")
    p.add_argument(
        "--tool-segments",
        default=",".join(f"{s >> 10}K" for s in SEGMENTS),
        help="--tool: segment sizes the choice tries (the fixed shapes also run at the one it picks)",
    )
    p.add_argument("--json", help="write the rows")
    args = p.parse_args(argv)
    unknown = sorted(set(args.fixed.split(",")) - set(FIXED))
    if unknown:
        p.error(f"--fixed: unknown shape(s) {', '.join(unknown)}; choose from {', '.join(FIXED)}")
    args.noise = args.noise or ["100Hz x 250us"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.topology or list(TOPOLOGIES):
            for point in args.only or list(POINTS):
                rows.append(row(key, point, args, Path(tmp)))
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows))
    if args.json:
        meta = {
            "argv": sys.argv[1:],
            "seed": args.seed,
            "samples": args.samples,
            "params": args.params or "built-in",
            "links": args.links,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
