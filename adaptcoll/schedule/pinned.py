"""Pinned pairs for nodes behind two NICs: two trees of equal weight, tree t entering every node through
the node's NIC t, so that each NIC carries one tree in and (in the one tree a node forwards across
nodes) one tree out: every NIC direction holds a single stream of half the message, the link bound of
such nodes, with no two trees' segments sharing a NIC while the pipelines fill.

Between nodes the two trees are binary and complementary (a node other than the root's has children
in one tree at most, as in two_tree). A node's first child is sent by the tree's entry rank through its
own NIC, the second by a rank behind the other NIC after one hop inside the node, so the second costs
an intra hop more; the node-level trees are laid by time with those costs (the earliest free slot takes
the next node), which makes them deeper on the cheap side, like Fibonacci trees. Inside a node the
remaining ranks are reached breadth-first from the ranks that hold the segment, each rank sending at
most twice per pair of segments over both trees (the busiest rank's messages are what the CPU pays),
the root three times. Needs nodes whose ranks split over exactly two NICs, at least two ranks behind
each. Linear time in the ranks (a heap over the nodes). No MPI.
"""

from __future__ import annotations

import heapq

from .hierarchy import Hierarchy
from .network import Network, SynthesisError

__all__ = ["pinned", "sides"]

Children = tuple[tuple[int, ...], ...]

HOP_OUT, HOP_RELAYED, HOP_INSIDE = 1.0, 1.5, 0.5
"""Relative costs the node-level trees are laid by: a child sent by the entry through its NIC, one sent
by a rank behind the other NIC (an intra hop first), and the root handing a tree to its other side."""
BUDGET = 2
"""Sends per rank per pair of segments (one of each tree) inside a node; the root may send one more."""


def sides(net: Network, h: Hierarchy) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """Per node, its ranks behind each of its two NICs (the side holding the node's first rank first),
    or None when some node does not have exactly two, each with at least two ranks."""
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for ranks in h.nodes:
        by_way: dict[tuple[tuple[str, ...], tuple[str, ...]], list[int]] = {}
        for r in ranks:
            by_way.setdefault((net.attachment(r, True), net.attachment(r, False)), []).append(r)
        if len(by_way) != 2 or min(len(v) for v in by_way.values()) < 2:
            return None
        a, b = sorted(by_way.values(), key=min)
        out.append((tuple(a), tuple(b)))
    return out


def _shape(count: int, start: float) -> tuple[list[int], list[int]]:
    """A binary tree over positions 0..count-1 under a root (-1) that has one child, laid by time: each
    position takes the earliest free slot (first child HOP_OUT, second HOP_RELAYED after its parent);
    at most count // 2 positions get children (so that a complementary tree exists). Returns each
    position's parent and slot (0: first child, 1: second)."""
    heap: list[tuple[float, int, int, int]] = [(start + HOP_OUT, 0, -1, 0)]
    parent, slot, order = [0] * count, [0] * count, 1
    inner: set[int] = set()
    cap = count // 2
    for p in range(count):
        while True:
            t, _, par, which = heapq.heappop(heap)
            if par < 0 or par in inner or len(inner) < cap:
                break
        if par >= 0:
            inner.add(par)
        parent[p], slot[p] = par, which
        heapq.heappush(heap, (t + HOP_OUT, order, p, 0))
        heapq.heappush(heap, (t + HOP_RELAYED, order + 1, p, 1))
        order += 2
    return parent, slot


def _split(parent: list[int], count: int) -> tuple[list[int], list[int]]:
    """The positions with children and those without, each in position order."""
    inner = set(parent) - {-1}
    return sorted(inner), [p for p in range(count) if p not in inner]


def _node_trees(nodes: int, rnode: int) -> tuple[list[list[int]], list[list[int]]]:
    """Children per node (first child, then second) of the two node-level trees from `rnode`; a node
    other than `rnode` has children in one of them at most."""
    others = [n for n in range(nodes) if n != rnode]
    m = len(others)
    trees = []
    par_a, slot_a = _shape(m, 0.0)
    par_b, slot_b = _shape(m, HOP_INSIDE)
    inner_a, leaves_a = _split(par_a, m)
    inner_b, leaves_b = _split(par_b, m)
    label_a = others
    label_b = [0] * m  # B's inner positions take A's leaves, then the rest
    for p, n in zip(inner_b + leaves_b, [label_a[p] for p in leaves_a + inner_a]):
        label_b[p] = n
    for par, slot, label in ((par_a, slot_a, label_a), (par_b, slot_b, label_b)):
        kids: list[list[int | None]] = [[None, None] for _ in range(nodes)]
        for p in range(m):
            kids[rnode if par[p] < 0 else label[par[p]]][slot[p]] = label[p]
        trees.append([[c for c in k if c is not None] for k in kids])
    return trees[0], trees[1]


def pinned(net: Network, h: Hierarchy, root: int) -> list[tuple[float, Children]]:
    """The pair of trees from `root` (see the module docstring); SynthesisError where the nodes do not
    split over two NICs."""
    way = sides(net, h)
    if way is None:
        raise SynthesisError("pinned trees need nodes whose ranks split over exactly two NICs, two or more behind each")
    rnode = h.node_of[root]
    node_kids = _node_trees(len(h.nodes), rnode)
    root_side = 0 if root in way[rnode][0] else 1
    kids: list[list[list[int]]] = [[[] for _ in range(net.ranks)] for _ in range(2)]

    def entry(t: int, node: int) -> int:  # where tree t enters `node`: the first rank behind NIC t
        return root if (node == rnode and t == root_side) else way[node][t][0]

    for node, ranks in enumerate(h.nodes):
        sent = {r: 0 for r in ranks}
        if node == rnode:
            sent[root] = -1  # the root may send one more
        reserved = [{r: 0 for r in ranks} for _ in (0, 1)]  # sends a tree still owes a rank's budget
        holders: list[list[tuple[int, int]]] = [[], []]  # per tree: (depth, rank) holding its segments here
        for t in (0, 1):  # the edges across nodes first: entry -> first child, relay -> second
            k, e = kids[t], entry(t, node)
            if node == rnode and t != root_side:
                k[root].append(e)
                sent[root] += 1
                holders[t].append((0, root))
            holders[t].append((len(holders[t]), e))
            remote = node_kids[t][node]
            if remote:
                k[e].append(entry(t, remote[0]))
                sent[e] += 1
            if len(remote) > 1:
                taken = {q for _, q in holders[t]} | {entry(1 - t, node)}
                relay = next(r for r in way[node][1 - t] if r not in taken)
                k[e].append(relay)
                k[relay].append(entry(t, remote[1]))
                sent[e] += 1
                sent[relay] += 1
                reserved[t][relay] += 1  # and it passes the segment on inside the node
                holders[t].append((holders[t][-1][0] + 1, relay))
            reserved[t][e] += max(0, BUDGET - len(k[e]))  # an entry spends its budget in its own tree
        # then the rest of the node, tree by tree, the tree without children across nodes first:
        # breadth-first, the shallowest holder with budget left (what the other tree still owes it
        # counted) sends next; receivers with budget left first, so that they can pass it on
        for t in sorted((0, 1), key=lambda t: (bool(node_kids[t][node]) and node != rnode, t != root_side)):
            k, other = kids[t], reserved[1 - t]
            got = {q for _, q in holders[t]}
            room = {r: BUDGET - sent[r] - other[r] for r in ranks}  # sends left, kept up to date below
            rest = sorted((r for r in ranks if r not in got), key=lambda r: (-room[r], r))
            for r in rest:
                able = [(d, -room[q], q) for d, q in holders[t] if room[q] > 0]
                d, _, q = min(able) if able else min((d, -room[q], q) for d, q in holders[t])
                room[q] -= 1
                k[q].append(r)
                sent[q] += 1
                reserved[t][q] = max(0, reserved[t][q] - 1)
                holders[t].append((d + 1, r))
    return [(0.5, tuple(tuple(c) for c in k)) for k in kids]
