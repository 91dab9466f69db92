"""When does a receiver copy, and what copy rate then fits the 16-core node? A grid over the simulator's
`copy_order` ('ready': a shared-memory copy is booked as soon as its message is ready, ahead of completions
that come meanwhile; 'poll': only once the receiver's CPU is free and no completion waits) and the copy
fields `G`, `node_bw`, `large_cost` and `copy_contention` (and adaptcoll's fixed cost per call, `call`), on
the 16-core node's rows (1-64 MiB, 4 / 8 / 16 ranks): median |error| of native MPICH's and of the shipped
rule's rows, and in how many adaptcoll/native pairs the simulator says which is faster as measured (the
wrong pairs, measured ties apart).

    python bench/studies/copy_order_fit.py [--params bench/results/simulate/params_16core_fault.json]
        [--orders ready,poll] [--G 1.8e-10,2.0e-10,2.1e-10,2.2e-10] [--node-bw 18e9,20e9,22e9]
        [--large-cost 1.2,1.3] [--contention 0,0.2] [--call 0,40e-6] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from pathlib import Path

from fault_fit import rows_16core, score  # the same data and scores (bench/studies is this script's path)

from adaptcoll.simulate.calibrate import TIE
from adaptcoll.simulate.params import load_params


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", default="bench/results/simulate/params_16core_fault.json")
    p.add_argument("--orders", default="ready,poll")
    p.add_argument("--G", default="1.8e-10,2.0e-10,2.1e-10,2.2e-10", help="s per byte")
    p.add_argument("--node-bw", default="18e9,20e9,22e9", help="bytes per s")
    p.add_argument("--large-cost", default="1.2,1.3")
    p.add_argument("--contention", default="0", help="copy_contention exponents")
    p.add_argument("--call", default="0", help="adaptcoll's CPU per call and rank before its protocol starts (s)")
    p.add_argument("--json", default="")
    args = p.parse_args()
    base = load_params(args.params)
    data = rows_16core()
    out = []
    head = (
        "| copy_order | G (s/B) | node_bw GB/s | large_cost | contention | call us | native 4 / 8 / 16 | "
        "rule 4 / 8 / 16 | signs 4 / 8 / 16 |"
    )
    print(head + " signs | wrong, not ties |")
    print("|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|")
    axes = (args.G, args.node_bw, args.large_cost, args.contention, args.call)
    grid = itertools.product(args.orders.split(","), *(_floats(axis) for axis in axes))
    for order, g, bw, large, c, call in grid:
        trial = dataclasses.replace(
            base, copy_order=order, G=g, node_bw=bw, large_cost=large, copy_contention=c, call=call
        )
        fit = score(trial, data)
        clear = sum(abs(w[4] - 1) > TIE for w in fit["wrong"])
        print(
            f"| {order} | {g:.3g} | {bw / 1e9:g} | {large:g} | {c:g} | {call * 1e6:g} | "
            f"{' / '.join(f'{x:.1f}' for x in fit['native'])} | "
            f"{' / '.join(f'{x:.1f}' for x in fit['rule'])} | {' / '.join(map(str, fit['signs']))} | "
            f"{sum(fit['signs'])} | {clear} |",
            flush=True,
        )
        row = {"copy_order": order, "G": g, "node_bw": bw, "large_cost": large, "copy_contention": c, "call": call}
        out.append({**row, **fit})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
