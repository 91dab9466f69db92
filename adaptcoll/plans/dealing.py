"""A rank's place in a set of trees and the segment positions dealt to each tree: plain data, the same
on every rank (no MPI), used by the decision, the node map, the tracer and the simulator."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple, Optional, Union

from .trees import Tree

__all__ = ["Weight", "Link", "tree_links", "tree_weights", "deal"]

Weight = Union[float, Fraction]
"""A tree's dealing weight: any positive number (a schedule's float, or an exact fraction)."""


class Link(NamedTuple):
    """This rank's parent and children in one tree, and the segment positions that tree carries."""

    parent: Optional[int]
    children: tuple[int, ...]
    segs: Sequence[int]


def tree_links(
    tree_set: Sequence[Tree], rank: int, nseg: int, weights: Optional[Sequence[Weight]] = None
) -> list[Link]:
    """This rank's place in each tree, with the segments dealt over the trees (`deal`): round-robin,
    or in proportion to `weights` (default: the trees' own, `tree_weights`)."""
    if weights is None:
        weights = tree_weights(tree_set)
    dealt = deal(len(tree_set), nseg, weights)
    return [Link(tree.parent(rank), tuple(tree.children(rank)), segs) for tree, segs in zip(tree_set, dealt)]


def tree_weights(tree_set: Sequence[Tree]) -> Optional[tuple[Fraction, ...]]:
    """The dealing weights of trees that carry a "weight" parameter (a schedule's forest trees, see
    adaptcoll.plans.schedule_file), None for the fixed shapes (round-robin). Trees of several roots (Allreduce
    over several forests): each root's trees together carry an equal part, shared in proportion to
    their weights; a tree without a weight counts 1."""
    raw = [dict(t.params).get("weight") for t in tree_set]
    if all(w is None for w in raw):
        return None
    exact = [Fraction(1) if w is None else Fraction(w) for w in raw]
    totals: dict[int, Fraction] = {}
    for t, w in zip(tree_set, exact):
        totals[t.root] = totals.get(t.root, Fraction(0)) + w
    return tuple(w / totals[t.root] / len(totals) for t, w in zip(tree_set, exact))


def deal(ntrees: int, nseg: int, weights: Optional[Sequence[Weight]] = None) -> list[Sequence[int]]:
    """Segment positions 0..nseg-1 dealt over `ntrees` trees; the same on every rank.

    No weights, or equal ones: round-robin (position s to tree s % ntrees). Else each tree gets its
    largest-remainder quota of the positions (within one of nseg x its share of the weights, ties to
    the lower tree), and the positions are interleaved by smooth weighted round-robin over the quotas,
    so each tree's segments spread over the whole message and every pipeline starts at once. With equal
    weights that is round-robin again. Exact arithmetic (weights as fractions), so no rank rounds apart.
    """
    if weights is not None and len(weights) != ntrees:
        raise ValueError(f"{len(weights)} weights for {ntrees} trees")
    exact = None if weights is None else tuple(Fraction(w) for w in weights)
    if exact is not None and any(w <= 0 for w in exact):
        raise ValueError(f"tree weights must be > 0, got {list(weights or ())}")
    if exact is None or len(set(exact)) <= 1:
        return [range(k, nseg, ntrees) for k in range(ntrees)]
    return [list(p) for p in _weighted(exact, nseg)]


@functools.lru_cache(maxsize=256)
def _weighted(weights: tuple[Fraction, ...], nseg: int) -> tuple[tuple[int, ...], ...]:
    """`deal` for unequal weights (cached: every call of a prepared operation deals alike)."""
    scale = math.lcm(*(w.denominator for w in weights))
    ints = [int(w * scale) for w in weights]
    total = sum(ints)
    quota = [nseg * w // total for w in ints]
    order = sorted(range(len(ints)), key=lambda k: (-(nseg * ints[k] % total), k))
    for k in order[: nseg - sum(quota)]:
        quota[k] += 1
    current = [0] * len(ints)
    out: list[list[int]] = [[] for _ in ints]
    for s in range(nseg):
        best = 0
        for k, q in enumerate(quota):
            current[k] += q
            if current[k] > current[best]:
                best = k
        current[best] -= nseg
        out[best].append(s)
    return tuple(tuple(p) for p in out)
