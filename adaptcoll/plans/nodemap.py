"""Which shared-memory node each rank of a communicator is on, and the trees between node leaders.

Plain data (no MPI), like `adaptcoll.trees`: `adaptcoll.state.shm` builds a `NodeMap` from MPI (real
shared-memory domains, refined by the declared ADAPTCOLL_TOPOLOGY nodes), the simulator and the
tests build one from a list of node ids. The node level of a collective runs inside each node over
shared slots; between nodes one rank per node, its leader, runs the tree protocols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dealing import Link, tree_links
from .trees import SHAPES, Tree, build, parse_algorithm

__all__ = ["NodeMap", "inner_shape", "uses_shm"]


def uses_shm(algorithm: str) -> bool:
    """Whether an algorithm setting asks for the shared-memory node level (`shm`, `topo:...intra=shm`)."""
    kind, _, params = algorithm.partition(":")
    kind = kind.strip()
    if kind == "shm":
        return True
    return kind == "topo" and any(p.replace(" ", "") == "intra=shm" for p in params.split(","))


def inner_shape(algorithm: str) -> tuple[str, dict[str, Any]]:
    """The tree shape between node leaders for an algorithm setting that uses the node level:
    `shm` -> binomial; `topo:...,inner=X,intra=shm` -> X (binomial by default)."""
    if algorithm.partition(":")[0].strip() == "shm":
        return "binomial", {}
    _, params = parse_algorithm(algorithm)
    shape = str(params.get("inner", "binomial"))
    shape_kind, shape_params = parse_algorithm(shape)
    if shape_kind not in SHAPES:
        raise ValueError(f"inner shape {shape!r} must be one of {', '.join(SHAPES)}")
    return shape_kind, shape_params


class NodeMap:
    """Node index per rank (nodes numbered by their lowest rank), each node's ranks ascending."""

    __slots__ = ("ids", "nodes", "_local")

    def __init__(self, ids: Sequence[int]) -> None:
        renumber: dict[int, int] = {}
        for node in ids:
            renumber.setdefault(node, len(renumber))
        self.ids = tuple(renumber[node] for node in ids)
        members: list[list[int]] = [[] for _ in renumber]
        for rank, node in enumerate(self.ids):
            members[node].append(rank)
        self.nodes = tuple(tuple(m) for m in members)
        self._local = tuple(self.nodes[node].index(rank) for rank, node in enumerate(self.ids))

    @property
    def size(self) -> int:
        """Ranks in the communicator."""
        return len(self.ids)

    @property
    def count(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    @property
    def largest(self) -> int:
        """Ranks on the most populated node (what the slot memory is sized for)."""
        return max(len(m) for m in self.nodes)

    def members(self, rank: int) -> tuple[int, ...]:
        """The ranks on `rank`'s node, ascending (a rank's place in it is its node rank)."""
        return self.nodes[self.ids[rank]]

    def local_rank(self, rank: int) -> int:
        """`rank`'s index among the ranks of its node."""
        return self._local[rank]

    def leader(self, node: int, root: int = -1) -> int:
        """The rank that speaks for `node` between nodes: the root if it is there, else its lowest rank."""
        members = self.nodes[node]
        return root if root >= 0 and self.ids[root] == node else members[0]

    def leaders(self, root: int = -1) -> tuple[int, ...]:
        """Every node's leader, by node index."""
        return tuple(self.leader(node, root) for node in range(self.count))

    def inter_trees(self, shape: str, params: dict[str, Any], roots: Sequence[int]) -> tuple[Tree, ...]:
        """Trees over node indices (one per root node index), of `shape` with `params`."""
        return tuple(build(shape, self.count, r, **params) for r in roots)

    def inter_links(self, tree_set: Sequence[Tree], rank: int, nseg: int, root: int = -1) -> list[Link]:
        """`rank`'s links in trees over node indices, translated to ranks (leaders), segments dealt
        round-robin over the trees; empty unless `rank` leads its node and there are several nodes."""
        node = self.ids[rank]
        if self.count < 2 or self.leader(node, root) != rank:
            return []
        leaders = self.leaders(root)
        out = []
        for link in tree_links(tree_set, node, nseg):
            parent = None if link.parent is None else leaders[link.parent]
            out.append(Link(parent, tuple(leaders[c] for c in link.children), link.segs))
        return out

    def __repr__(self) -> str:
        return f"NodeMap({self.count} nodes: {', '.join(str(len(m)) for m in self.nodes)} ranks)"
