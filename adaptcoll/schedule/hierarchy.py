"""The node / group structure of a description and its symmetry: which switches belong to one node,
which nodes hang off the same outside switches (a group, e.g. a leaf), and whether all nodes and all
groups are wired identically (so one representative per class of ranks stands for the class).

A switch is private to node i when the ranks and private switches it links to all belong to node i
(and there is at least one): a bus, a NIC, a socket switch. A node's outside switches are the other
switches its ranks and private switches link to; nodes with the same outside switches form a group.
Nodes are identical when their links, written with ranks as local indices and private switches by the
local ranks they touch, are the same list (and no link joins two nodes directly); groups are identical
when they hold as many nodes and their outside switches have the same links leaving the group. No MPI.
"""

from __future__ import annotations

from dataclasses import dataclass

from .describe import Description, Vertex

__all__ = ["Hierarchy", "hierarchy"]


@dataclass(frozen=True)
class Hierarchy:
    """Nodes (rank lists), their private switches, groups of nodes, and whether they are all alike."""

    nodes: tuple[tuple[int, ...], ...]
    node_of: tuple[int, ...]
    private: dict[str, int]
    groups: tuple[tuple[int, ...], ...]
    group_of: tuple[int, ...]
    symmetric: bool

    def node_vertices(self, node: int) -> set[Vertex]:
        """The ranks and private switches of `node`."""
        return {*self.nodes[node], *(s for s, n in self.private.items() if n == node)}

    def rank_class(self, rank: int, root: int) -> tuple[int, int]:
        """(0 same node as root, 1 same group, 2 other group; index of `rank` in its node): ranks with the
        same class are exchanged by a symmetry that fixes the root when `symmetric`."""
        node, rnode = self.node_of[rank], self.node_of[root]
        relation = 0 if node == rnode else 1 if self.group_of[node] == self.group_of[rnode] else 2
        return relation, self.nodes[node].index(rank)


def _neighbours(d: Description) -> dict[Vertex, set[Vertex]]:
    near: dict[Vertex, set[Vertex]] = {v: set() for v in d.vertices()}
    for ln in d.links:
        near[ln.src].add(ln.dst)
        near[ln.dst].add(ln.src)
    return near


def hierarchy(d: Description) -> Hierarchy:
    """Nodes (`d.nodes`, else one per rank), private switches, groups and the symmetry check."""
    nodes = d.nodes or tuple((r,) for r in range(d.ranks))
    node_of = d.node_of()
    near = _neighbours(d)
    private: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for s in d.switches:
            if s in private:
                continue
            owners = {
                node_of[v] if isinstance(v, int) else private[v] for v in near[s] if isinstance(v, int) or v in private
            }
            if len(owners) == 1:
                private[s] = owners.pop()
                changed = True
    outside: list[frozenset[Vertex]] = []
    for i, members in enumerate(nodes):
        inner: set[Vertex] = {*members, *(s for s, n in private.items() if n == i)}
        outside.append(frozenset(w for v in inner for w in near[v] if w not in inner and not isinstance(w, int)))
    keys: dict[frozenset[Vertex], list[int]] = {}
    for i, key in enumerate(outside):
        keys.setdefault(key, []).append(i)
    groups = tuple(tuple(g) for g in keys.values())
    group_of = [0] * len(nodes)
    for g, members in enumerate(groups):
        for n in members:
            group_of[n] = g
    h = Hierarchy(tuple(nodes), node_of, private, groups, tuple(group_of), False)
    return Hierarchy(h.nodes, h.node_of, private, groups, h.group_of, _alike(d, h, outside))


def _alike(d: Description, h: Hierarchy, outside: list[frozenset[Vertex]]) -> bool:
    """Whether all nodes, and all groups, are wired identically (see the module docstring)."""
    if len({len(m) for m in h.nodes}) > 1 or len({len(g) for g in h.groups}) > 1:
        return False
    local = {r: i for members in h.nodes for i, r in enumerate(members)}
    near = _neighbours(d)
    role: dict[Vertex, tuple[object, ...]] = {r: ("r", local[r]) for r in range(d.ranks)}
    for s in h.private:
        role[s] = ("p", tuple(sorted(local[v] for v in near[s] if isinstance(v, int))))
    node_links: list[list[tuple[object, ...]]] = [[] for _ in h.nodes]
    group_links: list[list[tuple[object, ...]]] = [[] for _ in h.groups]
    for ln in d.links:
        ends = [h.node_of[v] if isinstance(v, int) else h.private.get(v) for v in (ln.src, ln.dst)]
        if ends[0] is not None and ends[1] is not None and ends[0] != ends[1]:
            return False  # nodes wired to each other directly: no node/group symmetry to read
        mine = ends[0] if ends[0] is not None else ends[1]
        if mine is not None:
            sig = tuple(role.get(v, ("x",)) for v in (ln.src, ln.dst))
            node_links[mine].append((*sig, ln.bandwidth, ln.latency))
            continue
        for end, far in ((ln.src, ln.dst), (ln.dst, ln.src)):
            for g, members in enumerate(h.groups):
                if end in outside[members[0]] and far not in outside[members[0]]:
                    group_links[g].append((end == ln.src, ln.bandwidth, ln.latency))
    same_nodes = len({tuple(sorted(map(repr, x))) for x in node_links}) <= 1
    same_groups = len({tuple(sorted(x)) for x in group_links}) <= 1
    return same_nodes and same_groups
