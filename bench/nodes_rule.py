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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.simulate.lockstep import baseline_names, check_applicable, estimated_messages
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams, load_params
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import BEST_MAX_MESSAGES, run_once

POINTS = ("bcast:4M", "bcast:16M", "bcast:64M", "reduce:4M", "reduce:16M", "reduce:64M")
POINTS += ("allreduce:4M", "allreduce:16M", "allreduce:64M")
CANDIDATES = ("two_tree:256K", "two_tree:128K", "in_order_binomial:256K", "pipeline:512K")


def _time(job: Job, params: Any, impl: str, seed: int) -> float:
    prepared = prepare(job, params.ranks_per_node) if impl == "adaptcoll" else None
    return run_once(job, params, impl, None, seed, 0, prepared=prepared)[0].time_s


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
    best_name, best_s = "", float("inf")
    for name in baseline_names(collective):
        try:
            check_applicable(name, collective, ranks, base_job.count, per_node)
        except ValueError:
            continue
        if estimated_messages(name, collective, ranks, base_job.count, per_node) > args.max_messages:
            continue
        t = _time(base_job, params, name, args.seed)
        if t < best_s:
            best_name, best_s = name, t
    choice = prepare(base_job, per_node).choice
    rule_s = _time(base_job, params, "adaptcoll", args.seed) if choice.serve else best_s
    rule_label = choice.label() if choice.serve else "native"
    cands: dict[str, float] = {}
    for text in args.candidates.split(","):
        algorithm, _, seg = text.partition(":")
        cfg = settings.Settings(max_segments=0)
        job = Job(collective, ranks, nbytes, parse_size(seg), algorithm, cfg)
        cands[text] = _time(job, params, "adaptcoll", args.seed)
    return {
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
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-messages", type=int, default=BEST_MAX_MESSAGES)
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
