"""Quiet and noisy together: per simulated point, every configuration's ratio to the best lock-step
baseline quiet and under noise, ordered by the worse of the two (issue 37: the targets hold for both
columns, and the scale cases pick per band the configuration whose worse ratio is the lowest).

Reads `bench/nodes_rule.py --noise ... --json` files; rows of one point from several files are merged
(the same seed gives the same baseline times, so the least quiet and the least noisy baseline time of
any file at that point are used for every configuration there). The rule's own row is shown as `rule: LABEL`.

    python bench/worse_of_two.py bench/results/simulate/compiled_rule/trees_*.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

__all__ = ["merge", "main"]

Point = tuple[str, int, int, int]


def merge(
    paths: list[Path],
) -> tuple[dict[Point, tuple[str, float, float]], dict[Point, dict[str, tuple[float, float]]]]:
    """(best baseline per point as (name, quiet s, noisy s), configurations per point as label -> (quiet s,
    noisy s)); rows without noisy times are left out."""
    best: dict[Point, tuple[str, float, float]] = {}
    configs: dict[Point, dict[str, tuple[float, float]]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            if row.get("best_noisy_s") is None:
                continue
            point = (row["collective"], row["size"], row["ranks"], row["per_node"])
            if math.isfinite(row["best_s"]):
                name, quiet, noisy = best.get(point, ("", math.inf, math.inf))
                if row["best_s"] < quiet:
                    name, quiet = row["best"], row["best_s"]
                best[point] = (name, quiet, min(noisy, row["best_noisy_s"]))
            found = configs.setdefault(point, {})
            if row.get("rule_noisy_s") is not None and row["rule"] != "native":
                found["rule: " + row["rule"].split(" (")[0]] = (row["rule_s"], row["rule_noisy_s"])
            for label, seconds in row["candidates_s"].items():
                found[label] = (seconds, row["noisy_s"][label])
    return best, configs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    args = p.parse_args(argv)
    best, configs = merge(args.files)
    for point in sorted(configs):
        collective, size, ranks, per_node = point
        if point not in best:
            continue
        name, quiet, noisy = best[point]
        print(
            f"\n{collective} {size >> 20 or size >> 10}{'M' if size >> 20 else 'K'} at {ranks} x {per_node}: "
            f"best lock-step {name} {quiet * 1e3:.3f} / {noisy * 1e3:.3f} ms (quiet / noisy)"
        )
        print("| configuration | ms quiet / noisy | / best quiet | / best noisy | worse |")
        print("|---|---|---|---|---|")
        rows = sorted(configs[point].items(), key=lambda kv: max(kv[1][0] / quiet, kv[1][1] / noisy))
        for label, (q, n) in rows:
            print(
                f"| {label} | {q * 1e3:.3f} / {n * 1e3:.3f} | {q / quiet:.3f} | {n / noisy:.3f} | "
                f"{max(q / quiet, n / noisy):.3f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
