"""The shipped rule against the best lock-step algorithm at scale, simulated (issue 19's table).

For each (collective, size, ranks): the call as the shipped rule makes it (`adaptcoll.simulate` without a
segment) and every lock-step baseline the simulator has for the collective, quiet and under each noise
condition (median of `--samples` draws, seed `--seed`). "best" is the fastest baseline, chosen separately
quiet and under each noise. Where the rule hands the call to native MPI, the rule's time is the best
baseline's (a lower bound on what native costs: MPI may run a slower algorithm) and the row says native.
Baselines are skipped where they have no schedule (an Open MPI rule's pick the simulator does not model)
or would send more than `--max-messages` messages (ring-type ones send ~ranks^2, Open MPI's pipelines
ranks x segments), as `--baseline best` does; `--baselines` restricts the set (e.g. Open MPI's only).

    python bench/scale_table.py --ranks 1K,16K --json bench/results/simulate/scale_table.json
    python bench/scale_table.py --only bcast:16M --ranks 1K          # one row
    ADAPTCOLL_ENGINE=compiled python bench/scale_table.py --params bench/results/simulate/params_scale_compiled.json \
        --per-node 32 --ranks 1K                                      # the compiled engine's rule, 32 per node
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from typing import Any

from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.simulate.lockstep import baseline_names, check_applicable, estimated_messages
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import DEFAULT_PARAMS, load_params
from adaptcoll.simulate.programs import Job, prepare
from adaptcoll.simulate.run import BEST_MAX_MESSAGES, run_once
from adaptcoll.simulate.sweep import parse_rank_list

POINTS = (
    "bcast:16M",
    "reduce:4M",
    "allreduce:4M",
    "reduce:16M",
    "allreduce:16M",
    "bcast:1M",
    "reduce:1M",
    "allreduce:1M",
    "bcast:64K",
)
NOISES = ("100Hz x 250us", "1kHz x 25us")


def _times(job: Job, params: Any, impl: str, noises: list[Any], seed: int, samples: int, prepared: Any) -> list[float]:
    """[quiet, median under noise 1, median under noise 2, ...] in seconds."""
    out = [run_once(job, params, impl, None, seed, 0, prepared=prepared)[0].time_s]
    for noise in noises:
        draws = [run_once(job, params, impl, noise, seed, s, prepared=prepared)[0].time_s for s in range(samples)]
        out.append(statistics.median(draws))
    return out


def row(collective: str, nbytes: int, ranks: int, args: argparse.Namespace, params: Any) -> dict[str, Any]:
    """One row: the rule's times, every baseline's, the best per condition, and the ratios."""
    noises = [parse_noise([text]) for text in args.noise]
    job = Job(collective, ranks, nbytes, 0, "", settings.current())
    prepared = prepare(job, params.ranks_per_node)
    baselines: dict[str, list[float]] = {}
    skipped: dict[str, str] = {}
    for name in baseline_names(collective):
        if args.baselines and name not in args.baselines:
            continue
        try:
            check_applicable(name, collective, ranks, job.count, params.ranks_per_node)
        except ValueError as exc:
            skipped[name] = str(exc)
            continue
        est = estimated_messages(name, collective, ranks, job.count, params.ranks_per_node)
        if args.max_messages and est > args.max_messages:
            skipped[name] = f"about {est:,} messages > {args.max_messages:,}"
            continue
        baselines[name] = _times(job, params, name, noises, args.seed, args.samples, None)
    conditions = ["quiet", *args.noise]
    best = [min(baselines, key=lambda n: baselines[n][i]) for i in range(len(conditions))]
    best_t = [baselines[b][i] for i, b in enumerate(best)]
    if prepared.choice.serve:
        rule = _times(job, params, "adaptcoll", noises, args.seed, args.samples, prepared)
        label = prepared.choice.label()
    else:
        rule, label = list(best_t), "native (" + prepared.choice.source + ")"
    return {
        "collective": collective,
        "size": nbytes,
        "ranks": ranks,
        "per_node": params.ranks_per_node,
        "rule": label,
        "serve": prepared.choice.serve,
        "conditions": conditions,
        "rule_s": rule,
        "baselines_s": baselines,
        "skipped": skipped,
        "best": best,
        "best_s": best_t,
        "ratio": [r / b for r, b in zip(rule, best_t)],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: per row, rule and best lock-step per condition (ms) and rule / best."""
    if not rows:
        return ""
    conds = rows[0]["conditions"]
    head = "| collective | ranks | rule | " + " | ".join(f"{c}: rule / best ms (ratio, best)" for c in conds) + " |"
    lines = [head, "|" + "---|" * (3 + len(conds))]
    for r in rows:
        cells = [
            f"{r['rule_s'][i] * 1e3:.2f} / {r['best_s'][i] * 1e3:.2f} ({r['ratio'][i]:.2f}, {r['best'][i]})"
            for i in range(len(conds))
        ]
        size = f"{r['size'] >> 20}M" if r["size"] >= 1 << 20 else f"{r['size'] >> 10}K"
        ranks = f"{r['ranks']:,}" + (f" x {r['per_node']}" if r.get("per_node", 1) > 1 else "")
        lines.append(f"| {r['collective']} {size} | {ranks} | {r['rule']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="1K,16K", help="rank counts, e.g. 1K,16K,64K")
    p.add_argument("--only", action="append", default=[], help="collective:size points (default: issue 19's)")
    p.add_argument("--noise", action="append", default=[], help=f"noise conditions (default: {', '.join(NOISES)})")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--max-messages",
        type=int,
        default=BEST_MAX_MESSAGES,
        help=f"skip baselines estimated to send more messages (default {BEST_MAX_MESSAGES:,}; 0: no limit)",
    )
    p.add_argument("--baselines", help="comma-separated baseline names (default: every one)")
    p.add_argument("--params", help="parameters file (default: built-in)")
    p.add_argument("--per-node", type=int, default=0, help="ranks per node (default: the parameters')")
    p.add_argument("--json", help="write the rows")
    args = p.parse_args()
    args.noise = args.noise or list(NOISES)
    args.baselines = set(args.baselines.split(",")) if args.baselines else set()
    params = load_params(args.params) if args.params else DEFAULT_PARAMS
    if args.per_node:
        params = dataclasses.replace(params, ranks_per_node=args.per_node)
    rows = []
    for ranks in parse_rank_list(args.ranks):
        for point in args.only or POINTS:
            collective, _, size = point.partition(":")
            t0 = time.process_time()
            rows.append(row(collective, parse_size(size, "--only"), ranks, args, params))
            print(f"[{point} at {ranks} ranks: {time.process_time() - t0:.0f} s CPU]", file=sys.stderr, flush=True)
    print(markdown(rows), end="")
    if args.json:
        meta = {"params": params.to_dict(), "seed": args.seed, "samples": args.samples, "argv": sys.argv[1:]}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
