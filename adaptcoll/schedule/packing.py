"""Blink-style packing of spanning trees by multiplicative weights (Garg-Koenemann), for small networks.

Every link has a length y (1/bandwidth at first). Each round takes the cheapest spanning arborescence
of the rank graph from the root (networkx's `minimum_spanning_arborescence`, Edmonds' algorithm) whose
edge u->v costs the lengths of the links its route uses (both routes for allreduce), credits it with
the rate it could carry alone, and multiplies the length of every link it loads by (1 + eps * use).
The credited trees approach the best fractional packing over these routes; the K heaviest are kept and
their weights settled again by the same rule restricted to them (Blink's rounding). No MPI.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from .network import Network, SynthesisError

__all__ = ["pack", "settle"]

Children = tuple[tuple[int, ...], ...]


def _children(arb: nx.DiGraph, ranks: int) -> Children:
    kids: list[list[int]] = [[] for _ in range(ranks)]
    for u, v in sorted(arb.edges()):
        kids[u].append(v)
    return tuple(tuple(k) for k in kids)


def _greedy(
    net: Network,
    g: nx.DiGraph,
    routes: dict[tuple[int, int], tuple[tuple[int, float], ...]],
    trees: int,
    collective: str,
) -> list[Children]:
    """K arborescences taken one by one, each the cheapest under lengths 1 / residual capacity, each
    taking what it can carry from the residual capacities."""
    residual = net.capacity.copy()
    out: list[Children] = []
    floor = net.capacity * 1e-3  # a full link costs 1000x an idle one (wider ranges upset Edmonds' floats)
    for _ in range(trees):
        y = 1.0 / np.maximum(residual, floor)
        y /= y.min()
        for (u, v), route in routes.items():
            g.add_edge(u, v, weight=sum(y[link] * frac for link, frac in route))
        try:
            arb = nx.minimum_spanning_arborescence(g, attr="weight", preserve_attrs=False)
        except nx.NetworkXException:
            break  # the multiplicative-weights trees remain candidates
        kids = _children(arb, net.ranks)
        load = net.tree_load(kids, collective)
        used = load > 0
        carry = float(np.min(np.maximum(residual[used], 0.0) / load[used]))
        residual -= carry * load
        out.append(kids)
    return out


def settle(utils: np.ndarray, rounds: int = 3000, eps: float = 0.05) -> np.ndarray:
    """Weights for the rows of `utils` (per-link load / bandwidth of each tree carrying everything) that
    maximize the mixture's rate, by multiplicative weights restricted to these trees."""
    y = np.ones(utils.shape[1])
    weights = np.zeros(utils.shape[0])
    peak = utils.max(axis=1)
    for _ in range(rounds):
        k = int(np.argmin(utils @ y))
        weights[k] += 1.0 / peak[k]
        y *= 1.0 + eps * utils[k] / peak[k]
        y /= y.max()
    return weights


def pack(
    net: Network, root: int, collective: str, trees: int, rounds: int = 0, eps: float = 0.1
) -> list[tuple[float, Children]]:
    """At most `trees` weighted spanning trees from `root` (weights sum to 1)."""
    n = net.ranks
    pairs = [(u, v) for u in range(n) for v in range(n) if u != v and v != root and net.reachable(u, v)]
    if collective != "bcast":
        pairs = [(u, v) for u, v in pairs if net.reachable(v, u)]
    routes = {p: net.edge_route(p[0], p[1], collective) for p in pairs}
    rounds = rounds or (300 if n <= 8 else 100)
    y = 1.0 / net.capacity
    found: dict[Children, float] = {}
    util_of: dict[Children, np.ndarray] = {}
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for _ in range(rounds):
        for (u, v), route in routes.items():
            g.add_edge(u, v, weight=sum(y[link] * frac for link, frac in route))
        try:
            arb = nx.minimum_spanning_arborescence(g, attr="weight", preserve_attrs=False)
        except nx.NetworkXException:
            if found:
                break  # lengths too far apart for Edmonds' floats: keep the trees found so far
            raise SynthesisError(f"no spanning tree reaches every rank from root {root} over the links") from None
        kids = _children(arb, n)
        util = util_of.get(kids)
        if util is None:
            util = util_of[kids] = net.tree_load(kids, collective) / net.capacity
        peak = float(util.max())
        found[kids] = found.get(kids, 0.0) + 1.0 / peak
        y = y * (1.0 + eps * util / peak)
        y /= y.max()
    # Rounding: the heaviest trees and a greedy packing on residual capacities compete for the K places.
    greedy = _greedy(net, g, routes, trees, collective)
    for kids in greedy:
        if kids not in util_of:
            util_of[kids] = net.tree_load(kids, collective) / net.capacity
    pool = list(dict.fromkeys(greedy + sorted(found, key=lambda k: -found[k])[: 2 * trees]))
    weights = settle(np.array([util_of[k] for k in pool]))
    best = [pool[i] for i in np.argsort(-weights)[:trees] if weights[i] > 0]
    utils = np.array([util_of[k] for k in best])
    weights = settle(utils)
    keep = [(float(w), k) for w, k in zip(weights, best) if w > 0]
    total = sum(w for w, _ in keep)
    return [(w / total, k) for w, k in keep]
