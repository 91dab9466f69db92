"""Layered forests for many nodes: K trees built level by level (groups of nodes, nodes of a group,
ranks of a node), each level a bounded-fanout tree whose inner members are the least used so far.

The structure mirrors the network's symmetry (`hierarchy`): a tree enters every group once and every
node once, so an oversubscribed uplink or a NIC carries each tree's share about once. What spreads the
load is the choice of inner members: every tree picks, at every level, the members that have sent the
least over all trees so far (their NIC / uplink is the least loaded), so each member is inner in about
one tree in K and sends about K edges in all (the ideal of K trees of equal weight). The root's own
node and group are entered by every tree, so there the root hands each tree to one member only.
Fanout bounds the depth: about log_fanout(members) per level (a node's own ranks may have another
fanout, `bus_fanout`). Inside a node the entry's first children are one rank behind each of the node's
other NICs, so that a tree leaves the node through every NIC one hop after it enters. Linear time in the
ranks. No MPI.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .hierarchy import Hierarchy
from .network import Network

__all__ = ["layered"]

Children = tuple[tuple[int, ...], ...]


def _grow(
    head: int,
    members: Sequence[int],
    count: list[int],
    fanout: int,
    budget: int,
    fixed: bool,
    first: Sequence[int] = (),
) -> list[tuple[int, int]]:
    """Edges of a tree from `head` over `members` (head excluded): the least-counted members come first
    and are the inner ones, each with up to `fanout` children and never past `budget` edges over all trees;
    when every member in the tree is at its budget, the least-counted of them take one more child each in
    turn (spread thin rather than a chain). A `fixed` head (the same in every tree) has one child.
    `first`: members placed ahead of that order (the head's first children).
    `count[m]` (edges m sent so far) is updated."""
    order = [*first, *sorted((m for m in members if m not in first), key=lambda m: count[m])]
    edges: list[tuple[int, int]] = []
    queue = [head]
    at, nxt = 0, 0

    def adopt(parent: int, take: int) -> None:
        nonlocal nxt
        for child in order[nxt : nxt + take]:
            edges.append((parent, child))
            count[parent] += 1
            queue.append(child)
        nxt += take

    while nxt < len(order) and at < len(queue):
        parent = queue[at]
        at += 1
        adopt(parent, 1 if (fixed and parent == head) else max(0, min(fanout, budget - count[parent])))
    while nxt < len(order):  # over budget: one more child each, least counted first, pass after pass
        for parent in sorted([q for q in queue if not (fixed and q == head)] or queue, key=lambda q: count[q]):
            adopt(parent, 1)
            if nxt >= len(order):
                break
    return edges


def _cost(net: Network, load: np.ndarray, u: int, v: int, collective: str, share: float) -> tuple[float, float]:
    """(highest, summed) link utilization on the links edge u->v loads once it carries `share`."""
    top = net.capacity.max()  # utilizations scaled to ~1 so that rounding only merges float noise
    route = net.edge_route(u, v, collective)
    utils = [(load[link] + share * frac) * top / net.capacity[link] for link, frac in route]
    return round(max(utils), 9), round(sum(utils), 9)


class _Builder:
    """The counters shared by all trees (what each group, node and rank has sent or received so far)."""

    def __init__(
        self, net: Network, h: Hierarchy, root: int, collective: str, trees: int, fanout: int, bus_fanout: int
    ) -> None:
        self.net, self.h, self.root, self.collective = net, h, root, collective
        self.fanout, self.bus_fanout, self.budget, self.share = fanout, bus_fanout, trees, 1.0 / trees
        self.rnode = h.node_of[root]
        self.rgroup = h.group_of[self.rnode]
        self.group_sent = [0] * len(h.groups)
        self.node_sent = [0] * len(h.nodes)
        self.rank_sent = [0] * net.ranks  # edges to other nodes
        self.bus_sent = [0] * net.ranks  # edges inside the node
        self.entered = [0] * net.ranks
        self.load = np.zeros(len(net.links))  # per link, edges between nodes so far
        self.kids: list[list[int]] = []
        self.depth: list[int] = []
        self.node_entry: dict[int, int] = {}

    def inside(self, node: int, entry: int) -> None:
        """The node's ranks, reached from `entry`."""
        self.node_entry[node] = entry
        others = [r for r in self.h.nodes[node] if r != entry]
        ways: dict[tuple[str, ...], int] = {}  # the least used rank behind each of the node's other NICs
        for r in sorted(others, key=lambda r: self.bus_sent[r]):
            ways.setdefault(self.net.attachment(r, True), r)
        ways.pop(self.net.attachment(entry, True), None)
        first = list(ways.values()) if len(ways) < len(others) else []
        for a, b in _grow(entry, others, self.bus_sent, self.bus_fanout, self.budget, node == self.rnode, first):
            self.kids[a].append(b)
            self.depth[b] = self.depth[a] + 1

    def send(self, src_node: int, dst_node: int) -> None:
        """A rank of src_node sends to a rank of dst_node, both picked for the least loaded route (then
        the least entered, the shallowest); the entry then reaches its node."""
        h, depth, net = self.h, self.depth, self.net
        near = [r for r in h.nodes[src_node] if r != self.root] or [self.root]
        first = min(near, key=lambda r: self.rank_sent[r])
        # one candidate per way into the node (the least entered rank behind each NIC), then the cheapest
        ways: dict[tuple[str, ...], int] = {}
        for r in sorted(h.nodes[dst_node], key=lambda r: self.entered[r]):
            ways.setdefault(net.attachment(r, False), r)
        entry = min(
            ways.values(),
            key=lambda r: (*_cost(net, self.load, first, r, self.collective, self.share), self.entered[r]),
        )
        starts: dict[tuple[str, ...], list[int]] = {}
        for r in near:
            starts.setdefault(net.attachment(r, True), []).append(r)
        shallow = [min(rs, key=lambda r: (depth[r], self.rank_sent[r])) for rs in starts.values()]
        sender = min(
            shallow,
            key=lambda r: (
                *_cost(self.net, self.load, r, entry, self.collective, self.share),
                depth[r],
                self.rank_sent[r],
            ),
        )
        self.net.add_edge_load(self.load, sender, entry, self.collective, self.share)
        self.kids[sender].append(entry)
        depth[entry] = depth[sender] + 1
        self.rank_sent[sender] += 1
        self.entered[entry] += 1
        self.inside(dst_node, entry)

    def tree(self) -> Children:
        """The next tree."""
        h, rgroup, rnode = self.h, self.rgroup, self.rnode
        self.kids = [[] for _ in range(self.net.ranks)]
        self.depth = [0] * self.net.ranks
        self.node_entry = {}
        self.inside(rnode, self.root)
        group_head = {rgroup: rnode}
        others = [g for g in range(len(h.groups)) if g != rgroup]
        children_of: dict[int, list[int]] = {}
        for a, b in _grow(rgroup, others, self.group_sent, self.fanout, self.budget, True):
            children_of.setdefault(a, []).append(b)
        todo = [rgroup]
        while todo:
            g = todo.pop(0)
            head = group_head[g]
            members = h.groups[g]
            for a, b in _grow(
                head, [m for m in members if m != head], self.node_sent, self.fanout, self.budget, g == rgroup
            ):
                self.send(a, b)
            senders = [m for m in members if m != rnode] or [rnode]  # the root's node sends once a tree
            top = min(self.depth[self.node_entry[m]] for m in senders)
            for child in children_of.get(g, []):
                entry_node = min(h.groups[child], key=lambda m: self.node_sent[m])
                sender_node = min(  # shallow nodes with budget left first, then the least used
                    senders,
                    key=lambda m: (
                        self.node_sent[m] >= self.budget,
                        self.depth[self.node_entry[m]] > top + 1,
                        self.node_sent[m],
                    ),
                )
                self.node_sent[sender_node] += 1
                group_head[child] = entry_node
                self.send(sender_node, entry_node)
                todo.append(child)
        return tuple(tuple(k) for k in self.kids)


def layered(
    net: Network, h: Hierarchy, root: int, collective: str, trees: int, fanout: int, bus_fanout: int = 0
) -> list[tuple[float, Children]]:
    """`trees` trees of equal weight from `root` for `collective` (see the module docstring); a member
    sends at most `trees` edges per level over all trees unless a tree cannot go on otherwise.
    `bus_fanout`: children per inner rank inside a node (0: `fanout`)."""
    build = _Builder(net, h, root, collective, trees, fanout, bus_fanout or fanout)
    return [(1.0 / trees, build.tree()) for _ in range(trees)]
