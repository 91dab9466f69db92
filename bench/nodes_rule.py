"""The shipped rule for small communicators spread over several nodes, simulated.

The 3-63-rank cases of the shipped rule were measured on one node (the 16-core node, shared memory
between all ranks). A job of that size usually spans nodes, whose ranks share the node's link. For each
(ranks, ranks per node) with two nodes or more, collective and size: the call as the rule makes it, each
candidate configuration (`--candidates`, no segment cap), and every lock-step baseline the simulator has
(the best of them stands for native MPI), quiet, built-in parameters with `ranks_per_node` set (a node's
ranks share one 10 GB/s link; messages inside a node are shared-memory copies). Ratio = best lock-step /
time (> 1: faster than native's best).

    python bench/nodes_rule.py --json bench/results/simulate/nodes_rule.json      # ~10 min CPU
    python bench/nodes_rule.py --ranks 32 --per-node 8 --only bcast:16M            # one row
    python bench/nodes_rule.py --params bench/results/simulate/params_pair.json    # another link model

`--baselines A,B` runs only those lock-step baselines (the rows then say which ran: `baselines`).
`--candidate ALGORITHM@SEGMENT[@ROOTS]` (repeatable) adds one whose algorithm may hold commas, e.g.
`--candidate "topo:inner=two_tree,intra=binomial@64K@32"`. With `ADAPTCOLL_ENGINE=compiled` in the
environment the rule column is the compiled engine's rule (pair it with a compiled engine's parameters,
`--params bench/results/simulate/params_scale_compiled.json`). `--noise "100Hz x 250us" --samples 3`
adds, per configuration, the median of the draws under that noise (`rule_noisy_s` for the rule,
`noisy_s` for the candidates, `best_noisy_s` for the best baseline under noise).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from typing import Any

from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.simulate.lockstep import baseline_names, check_applicable, estimated_messages
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams, load_params
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import BEST_MAX_MESSAGES, run_once

POINTS = ("bcast:4M", "bcast:16M", "bcast:64M", "reduce:4M", "reduce:16M", "reduce:64M")
POINTS += ("allreduce:4M", "allreduce:16M", "allreduce:64M")
CANDIDATES = ("two_tree:256K", "two_tree:128K", "in_order_binomial:256K", "pipeline:512K")


def _time(job: Job, params: Any, impl: str, seed: int, noise: Any = None, samples: int = 0) -> float:
    """Quiet time (s), or with `noise` the median over `samples` draws."""
    prepared = prepare(job, params.ranks_per_node) if impl == "adaptcoll" else None
    if noise is None:
        return run_once(job, params, impl, None, seed, 0, prepared=prepared)[0].time_s
    draws = [run_once(job, params, impl, noise, seed, k, prepared=prepared)[0].time_s for k in range(samples)]
    return statistics.median(draws)


def _candidates(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    """(label, algorithm, segment, roots) of --candidates and each --candidate."""
    out = []
    for text in args.candidates.split(",") if args.candidates else []:
        algorithm, _, seg = text.partition(":")
        out.append((text, algorithm, parse_size(seg), 0))
    for text in getattr(args, "candidate", None) or []:
        algorithm, seg, *rest = text.split("@")
        out.append((text, algorithm, parse_size(seg), int(rest[0]) if rest else 0))
    return out


def row(
    collective: str,
    nbytes: int,
    ranks: int,
    per_node: int,
    args: argparse.Namespace,
    base: CostParams = DEFAULT_PARAMS,
) -> dict[str, Any]:
    """The rule's time, each candidate's, the best lock-step baseline's, and the ratios (`base`: the
    simulator's parameters, `ranks_per_node` replaced)."""
    params = dataclasses.replace(base, ranks_per_node=per_node)
    base_job = Job(collective, ranks, nbytes, 0, "", settings.current())
    noise = parse_noise([args.noise]) if getattr(args, "noise", None) else None
    best_name, best_s, noisy_best = "", float("inf"), float("inf")
    only = [n for n in args.baselines.split(",") if n] if getattr(args, "baselines", None) else None
    for name in baseline_names(collective):
        if only is not None and name not in only:
            continue
        try:
            check_applicable(name, collective, ranks, base_job.count, per_node)
        except ValueError:
            continue
        if estimated_messages(name, collective, ranks, base_job.count, per_node) > args.max_messages:
            continue
        t = _time(base_job, params, name, args.seed)
        if t < best_s:
            best_name, best_s = name, t
        if noise is not None:
            noisy_best = min(noisy_best, _time(base_job, params, name, args.seed, noise, args.samples))
    choice = prepare(base_job, per_node).choice
    rule_s = _time(base_job, params, "adaptcoll", args.seed) if choice.serve else best_s
    rule_label = choice.label() if choice.serve else "native"
    rule_noisy = None
    if noise is not None:
        rule_noisy = (
            _time(base_job, params, "adaptcoll", args.seed, noise, args.samples) if choice.serve else noisy_best
        )
    cands: dict[str, float] = {}
    noisy: dict[str, float] = {}
    for label, algorithm, seg, roots in _candidates(args):
        cfg = settings.Settings(max_segments=0, allreduce_roots=roots)
        job = Job(collective, ranks, nbytes, seg, algorithm, cfg)
        cands[label] = _time(job, params, "adaptcoll", args.seed)
        if noise is not None:
            noisy[label] = _time(job, params, "adaptcoll", args.seed, noise, args.samples)
    out = {
        "collective": collective,
        "size": nbytes,
        "ranks": ranks,
        "per_node": per_node,
        "rule": rule_label,
        "rule_s": rule_s,
        "best": best_name,
        "best_s": best_s,
        "candidates_s": cands,
    }
    if only is not None:
        out["baselines"] = only
    if noise is not None:
        out.update(
            noise=args.noise, samples=args.samples, best_noisy_s=noisy_best, rule_noisy_s=rule_noisy, noisy_s=noisy
        )
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """Per row: best lock-step ms, then best / time for the rule and each candidate."""
    if not rows:
        return ""
    names = list(rows[0]["candidates_s"])
    head = "| call | ranks x per node | best lock-step ms | rule | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (4 + len(names))]
    for r in rows:
        size = f"{r['size'] >> 20}M"
        cells = [f"{r['best_s'] / t:.2f}" for t in r["candidates_s"].values()]
        if "noisy_s" in r:
            cells = [f"{c} ({r['best_noisy_s'] / t:.2f})" for c, t in zip(cells, r["noisy_s"].values())]
        rule = f"{r['best_s'] / r['rule_s']:.2f} ({r['rule'].split(' (')[0]})"
        lines.append(
            f"| {r['collective']} {size} | {r['ranks']} x {r['per_node']} | {r['best_s'] * 1e3:.2f} {r['best']} "
            f"| {rule} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="4,8,16,32,48", help="communicator sizes")
    p.add_argument("--per-node", default="1,4,8,16", help="ranks per node (only where there are >= 2 nodes)")
    p.add_argument("--only", action="append", help=f"collective:size points (default: {', '.join(POINTS)})")
    p.add_argument("--candidates", default=",".join(CANDIDATES), help="algorithm:segment configurations, no cap")
    p.add_argument("--candidate", action="append", help="ALGORITHM@SEGMENT[@ROOTS] (repeatable; commas allowed)")
    p.add_argument("--noise", help="a noise condition, e.g. '100Hz x 250us' (adds the median of --samples draws)")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-messages", type=int, default=BEST_MAX_MESSAGES)
    p.add_argument(
        "--baselines",
        help="only these lock-step baselines (comma-separated; default: every applicable one), e.g. at 64K ranks "
        "the ones that were the best at 1K-16K",
    )
    p.add_argument("--params", help="parameters file (default: built-in; its ranks_per_node is replaced)")
    p.add_argument("--json", help="write the rows")
    args = p.parse_args(argv)
    base = load_params(args.params) if args.params else DEFAULT_PARAMS
    rows = []
    for point in args.only or list(POINTS):
        collective, _, size = point.partition(":")
        for ranks in (int(t) for t in args.ranks.split(",")):
            for per_node in (int(t) for t in args.per_node.split(",")):
                if per_node >= ranks:
                    continue
                rows.append(row(collective, parse_size(size), ranks, per_node, args, base))
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"argv": sys.argv[1:], "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
