"""A picture of a forest: one panel per tree (at most 8), laid out by depth. Up to 64 ranks the
panels show ranks; beyond, the node graph of each tree (an edge per tree edge between two nodes).
Needs matplotlib (the `bench` extra); without it `PlotError` says so. No MPI.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Union

from ..plans.schedule_file import Forest
from .describe import Description

__all__ = ["PlotError", "draw", "RANK_LIMIT"]

RANK_LIMIT = 64
"""Above this many ranks the picture shows nodes instead of ranks."""
_PANELS = 8


class PlotError(RuntimeError):
    """The picture cannot be drawn (matplotlib missing)."""


def _layers(children: Sequence[Sequence[int]], root: int) -> list[list[int]]:
    layers, level = [], [root]
    while level:
        layers.append(level)
        level = [c for v in level for c in children[v]]
    return layers


def _node_tree(children: Sequence[Sequence[int]], root: int, node_of: Sequence[int]) -> tuple[list[list[int]], int]:
    """The tree's node graph: node a -> node b once per tree edge from a rank of a to a rank of b."""
    kids: list[list[int]] = [[] for _ in range(max(node_of) + 1)]
    seen = {node_of[root]}
    for v in (x for layer in _layers(children, root) for x in layer):
        for c in children[v]:
            a, b = node_of[v], node_of[c]
            if a != b and b not in seen:
                kids[a].append(b)
                seen.add(b)
    return kids, node_of[root]


def draw(forest: Forest, d: Description, path: Union[str, Path], title: str = "") -> None:
    """Write a PNG of `forest` (for the network `d`) to `path`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("--png needs matplotlib: pip install 'adaptcoll[bench]'") from None
    by_node = d.ranks > RANK_LIMIT
    trees = forest.trees[:_PANELS]
    cols = min(4, len(trees))
    rows = -(-len(trees) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for k, (tree, ax) in enumerate(zip(trees, axes.flat)):
        children, root = (
            _node_tree(tree.children, forest.root, d.node_of()) if by_node else (tree.children, forest.root)
        )
        layers = _layers(children, root)
        where = {
            v: ((i + 1) / (len(layer) + 1), -depth) for depth, layer in enumerate(layers) for i, v in enumerate(layer)
        }
        for v, kids in enumerate(children):
            for c in kids:
                if v in where and c in where:
                    (x0, y0), (x1, y1) = where[v], where[c]
                    ax.plot([x0, x1], [y0, y1], color=f"C{k % 10}", linewidth=0.8, alpha=0.8)
        xs, ys = zip(*where.values())
        ax.scatter(xs, ys, s=12 if len(where) > 64 else 90, color="white", edgecolors="black", zorder=3)
        if len(where) <= 64:
            for v, (x, y) in where.items():
                ax.annotate(str(v), (x, y), ha="center", va="center", fontsize=6, zorder=4)
        unit = "nodes" if by_node else "ranks"
        ax.set_title(f"tree {k}: weight {tree.weight:.3f}, depth {len(layers) - 1} ({unit})", fontsize=8)
    more = f" (first {_PANELS} of {len(forest.trees)} trees)" if len(forest.trees) > _PANELS else ""
    fig.suptitle((title or d.name) + more, fontsize=10)
    fig.tight_layout()
    fig.savefig(str(path), dpi=80)
    plt.close(fig)
