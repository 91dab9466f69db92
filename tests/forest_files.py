"""Random weighted forests for tests: spanning trees with random parents, random child orders and
random weights, written as schedule files ("adaptcoll.schedule/1") that `forest:PATH` runs."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

__all__ = ["random_tree", "random_schedule", "write_schedule"]


def random_tree(size: int, root: int, rng: random.Random) -> list[list[int]]:
    """Children lists of a random spanning tree rooted at `root` (each rank hangs under a random rank
    placed before it; every rank's children in random order)."""
    order = [r for r in range(size) if r != root]
    rng.shuffle(order)
    placed, kids = [root], [[] for _ in range(size)]
    for r in order:
        kids[rng.choice(placed)].append(r)
        placed.append(r)
    for k in kids:
        rng.shuffle(k)
    return kids


def random_schedule(size: int, roots: list[int], rng: random.Random, trees: tuple[int, int] = (1, 4)) -> dict[str, Any]:
    """A schedule with one forest per root of `trees` (inclusive range) random trees of random weight."""
    forests = []
    for root in roots:
        n = rng.randint(*trees)
        forests.append(
            {
                "root": root,
                "trees": [
                    {"weight": round(rng.uniform(0.05, 1.0), 3), "children": random_tree(size, root, rng)}
                    for _ in range(n)
                ],
            }
        )
    return {"format": "adaptcoll.schedule/1", "collective": "bcast", "ranks": size, "forests": forests}


def write_schedule(path: Path, schedule: dict[str, Any]) -> str:
    """Write `schedule` to `path`; returns the algorithm setting that runs it."""
    path.write_text(json.dumps(schedule))
    return f"forest:{path}"
