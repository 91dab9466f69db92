"""A rank's place in a set of trees and the segment positions dealt to each tree: plain data, the same
on every rank (no MPI), used by the decision, the node map, the tracer and the simulator."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import NamedTuple, Optional, Union

from .trees import Tree

__all__ = ["Weight", "Link", "tree_links", "tree_weights", "deal", "spread_root_trees"]

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
    """This rank's place in each tree that carries segments, with the segments dealt over the trees
    (`deal`): round-robin, or in proportion to `weights` (default: the trees' own, `tree_weights`).

    A tree dealt no segment (fewer segments than trees: an Allreduce with a root per rank and a short
    message) sends nothing, so it gets no link, and no protocol is started for it: the same on every
    rank, since the dealing is. If no tree carries a segment (an empty message), the first tree's link
    is kept, so the operation still has one protocol to complete."""
    if weights is None:
        weights = tree_weights(tree_set)
    dealt = deal(len(tree_set), nseg, weights)
    links = [Link(tree.parent(rank), tuple(tree.children(rank)), segs) for tree, segs in zip(tree_set, dealt) if segs]
    if not links and tree_set:
        tree = tree_set[0]
        links.append(Link(tree.parent(rank), tuple(tree.children(rank)), dealt[0]))
    return links


def spread_root_trees(
    size: int, roots: int, trees_at: Callable[[int], Sequence[Tree]], nseg: Optional[int] = None
) -> tuple[Tree, ...]:
    """The trees of `roots` roots spread evenly over `size` ranks (root k at k * size // count; 0: one
    root per rank), in root order, `trees_at(root)` each: Allreduce's trees, over which its segments are
    dealt round-robin.

    With `nseg`, only the first `nseg` trees are built (at least one): with more trees than segments
    round-robin gives segment s to tree s and the rest nothing, so dealing over the first `nseg` alone is
    the same (and a root per rank at thousands of ranks does not build thousands of trees for a short
    message)."""
    count = min(size, roots or size)
    keep = None if nseg is None else max(nseg, 1)
    found: list[Tree] = []
    for k in range(count):
        if keep is not None and len(found) >= keep:
            break
        found.extend(trees_at((k * size) // count))
    return tuple(found[:keep]) if keep is not None and len(found) > keep else tuple(found)


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
