"""Writers of common network shapes as `Description`s, and a reader of what `topo` discovery finds.

Defaults (bytes/s, seconds; every figure can be overridden, also from the CLI):
  flat switch     rank <-> switch 25e9 (200 Gb/s), 1e-6.
  NIC nodes       rank <-> node bus 100e9 / 2e-7 (intra-node: shared memory or NVLink class),
                  rank <-> its NIC 32e9 / 5e-7 (PCIe gen4 x16), NIC <-> core switch 25e9 / 1e-6;
                  ranks split evenly over the node's 1 or 2 NICs (first half on NIC 0).
  fat tree        nodes as above with one NIC each; NIC <-> leaf 25e9 / 1e-6; 16 nodes per leaf;
                  leaf <-> each spine (nodes_per_leaf * nic / (oversubscription * spines)) / 1e-6,
                  spines = nodes_per_leaf / oversubscription, so a leaf's uplinks carry 1/ratio of
                  its downlinks.
  DGX-1           NVLink 2 (V100): 25e9 per link and direction, 7e-7; pair link counts below.
All links are full duplex (both directions, same figures). No MPI here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..plans.topology import Topology
from .describe import Description, DescriptionError, Link, Vertex

__all__ = ["SHAPES", "DGX1_NVLINKS", "flat_switch", "nic_nodes", "fat_tree", "dgx1", "from_topology"]

DGX1_NVLINKS: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}  # fmt: skip
"""NVLinks per GPU pair of the DGX-1 (V100) hybrid cube-mesh: each GPU has 6 NVLinks; the two quads
(0-3, 4-7) are fully connected and GPU i links to i+4; 8 pairs are doubled. This is the `nvidia-smi topo
-m` matrix of a DGX-1V (NV1 / NV2 entries), the graph of the DGX-1 system architecture white paper
(WP-08437-001, section 3.1: a cube whose 12 edges are NVLinks, some doubled, plus the diagonals of two
faces, 24 links) and of the Blink paper's DGX-1V figure."""


def _both(a: Vertex, b: Vertex, bandwidth: float, latency: float) -> list[Link]:
    return [Link(a, b, bandwidth, latency), Link(b, a, bandwidth, latency)]


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise DescriptionError(f"{name} must be a number > 0, got {value!r}")


def _count(name: str, value: int, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise DescriptionError(f"{name} must be a whole number >= {low}, got {value!r}")


def flat_switch(
    ranks: int, bandwidth: float = 25e9, latency: float = 1e-6, shared_bandwidth: float = 0.0
) -> Description:
    """`ranks` ranks, each with a full-duplex link to one switch. `shared_bandwidth` > 0: every message
    also crosses one link of that bandwidth shared by all (the switch is two, `in` -> `out`): a switch's
    backplane, or, for the cores of one node, the node's memory, which every copy between them shares
    (a 16-core node measured as about 37 GB/s: docs/schedules.md, "One node")."""
    _count("ranks", ranks)
    _positive("bandwidth", bandwidth)
    if shared_bandwidth == 0:
        links = [ln for r in range(ranks) for ln in _both(r, "switch", bandwidth, latency)]
        return Description(ranks, tuple(links), ("switch",), name=f"flat switch, {ranks} ranks")
    _positive("shared_bandwidth", shared_bandwidth)
    links = [Link(r, "in", bandwidth, latency) for r in range(ranks)]
    links += [Link("out", r, bandwidth, latency) for r in range(ranks)]
    links.append(Link("in", "out", shared_bandwidth, 0.0))
    name = f"flat switch, {ranks} ranks, {shared_bandwidth / 1e9:g} GB/s shared"
    return Description(ranks, tuple(links), ("in", "out"), name=name)


def _node(
    i: int,
    first: int,
    ranks_per_node: int,
    nics: int,
    intra: tuple[float, float],
    pcie: tuple[float, float],
) -> tuple[list[str], list[Link], list[str]]:
    """Switches, links and NIC names of node i (ranks first..first+k-1): a bus and 1-2 NICs."""
    bus = f"n{i}.bus"
    nic_names = [f"n{i}.nic{j}" for j in range(nics)]
    links: list[Link] = []
    for local in range(ranks_per_node):
        rank = first + local
        links += _both(rank, bus, *intra)
        links += _both(rank, nic_names[local * nics // ranks_per_node], *pcie)
    return [bus, *nic_names], links, nic_names


def nic_nodes(
    nodes: int,
    ranks_per_node: int,
    nics: int = 1,
    nic_bandwidth: float = 25e9,
    nic_latency: float = 1e-6,
    intra_bandwidth: float = 100e9,
    intra_latency: float = 2e-7,
    pcie_bandwidth: float = 32e9,
    pcie_latency: float = 5e-7,
) -> Description:
    """`nodes` nodes of `ranks_per_node` ranks (a node bus inside), each behind `nics` NICs on one core switch."""
    _count("nodes", nodes)
    _count("ranks_per_node", ranks_per_node)
    if nics not in (1, 2) or nics > ranks_per_node:
        raise DescriptionError(f"nics must be 1 or 2 (and at most ranks_per_node), got {nics!r}")
    for name, value in (("nic_bandwidth", nic_bandwidth), ("intra_bandwidth", intra_bandwidth)):
        _positive(name, value)
    _positive("pcie_bandwidth", pcie_bandwidth)
    switches: list[str] = []
    links: list[Link] = []
    for i in range(nodes):
        sw, ls, nic_names = _node(
            i,
            i * ranks_per_node,
            ranks_per_node,
            nics,
            (intra_bandwidth, intra_latency),
            (pcie_bandwidth, pcie_latency),
        )
        switches += sw
        links += ls
        for nic in nic_names:
            links += _both(nic, "core", nic_bandwidth, nic_latency)
    groups = tuple(tuple(range(i * ranks_per_node, (i + 1) * ranks_per_node)) for i in range(nodes))
    return Description(
        nodes * ranks_per_node,
        tuple(links),
        (*switches, "core"),
        groups,
        name=f"{nodes} nodes x {ranks_per_node} ranks, {nics} NIC{'s' if nics > 1 else ''} per node",
    )


def fat_tree(
    nodes: int,
    ranks_per_node: int,
    oversubscription: float = 4.0,
    nodes_per_leaf: int = 16,
    spines: int = 0,
    nic_bandwidth: float = 25e9,
    nic_latency: float = 1e-6,
    intra_bandwidth: float = 100e9,
    intra_latency: float = 2e-7,
    pcie_bandwidth: float = 32e9,
    pcie_latency: float = 5e-7,
) -> Description:
    """A 2-level fat tree: nodes (bus + one NIC) under leaf switches, every leaf linked to every spine;
    a leaf's uplinks carry 1/`oversubscription` of its downlinks (`spines` 0: nodes_per_leaf / ratio)."""
    _count("nodes", nodes)
    _count("ranks_per_node", ranks_per_node)
    _count("nodes_per_leaf", nodes_per_leaf)
    _positive("oversubscription", oversubscription)
    _count("spines", spines, 0)
    _positive("nic_bandwidth", nic_bandwidth)
    spines = spines or max(1, round(nodes_per_leaf / oversubscription))
    leaves = -(-nodes // nodes_per_leaf)
    uplink = nodes_per_leaf * nic_bandwidth / (oversubscription * spines)
    switches: list[str] = []
    links: list[Link] = []
    for i in range(nodes):
        sw, ls, nic_names = _node(
            i, i * ranks_per_node, ranks_per_node, 1, (intra_bandwidth, intra_latency), (pcie_bandwidth, pcie_latency)
        )
        switches += sw
        links += ls + _both(nic_names[0], f"leaf{i // nodes_per_leaf}", nic_bandwidth, nic_latency)
    for leaf in range(leaves):
        for s in range(spines):
            links += _both(f"leaf{leaf}", f"spine{s}", uplink, nic_latency)
    switches += [f"leaf{x}" for x in range(leaves)] + [f"spine{s}" for s in range(spines)]
    groups = tuple(tuple(range(i * ranks_per_node, (i + 1) * ranks_per_node)) for i in range(nodes))
    return Description(
        nodes * ranks_per_node,
        tuple(links),
        tuple(switches),
        groups,
        name=f"fat tree {oversubscription:g}:1, {nodes} nodes x {ranks_per_node} ranks, {nodes_per_leaf} per leaf",
    )


def dgx1(nvlink_bandwidth: float = 25e9, nvlink_latency: float = 7e-7) -> Description:
    """The 8 GPUs of a DGX-1 (V100) and their NVLinks (`DGX1_NVLINKS`), one link per pair with the sum."""
    _positive("nvlink_bandwidth", nvlink_bandwidth)
    links = [ln for (a, b), n in DGX1_NVLINKS.items() for ln in _both(a, b, n * nvlink_bandwidth, nvlink_latency)]
    return Description(8, tuple(links), (), (tuple(range(8)),), name="DGX-1 hybrid cube-mesh (NVLink)")


def from_topology(
    topology: Topology, bandwidths: Sequence[float], latencies: Sequence[float] | None = None, ranks: int = 0
) -> Description:
    """A description of what `topo` discovery found: one switch per group at each level under one "top"
    switch. `bandwidths[0]` links each outermost group (node) to "top", `bandwidths[i]` each level-i group
    to its enclosing group, `bandwidths[-1]` each rank to its innermost group (len = levels + 1). With no
    levels (`ranks` then gives the size), a flat switch."""
    depth = len(topology.levels)
    if len(bandwidths) != depth + 1:
        raise DescriptionError(
            f"need {depth + 1} bandwidths (network, then one per level {topology.names}), got {len(bandwidths)}"
        )
    latencies = list(latencies) if latencies is not None else [1e-6] + [2e-7] * depth
    if len(latencies) != depth + 1:
        raise DescriptionError(f"need {depth + 1} latencies, got {len(latencies)}")
    for i, b in enumerate(bandwidths):
        _positive(f"bandwidths[{i}]", b)
    if depth == 0:
        return flat_switch(ranks, bandwidths[0], latencies[0])
    size = topology.size or 0
    names: dict[tuple[int, ...], str] = {}
    links: list[Link] = []
    for level in range(depth):
        for members in topology.groups(level):
            key = topology.group_key(members[0], level)
            name = names[key] = f"{topology.names[level]}{len([k for k in names if len(k) == level + 1])}"
            up = "top" if level == 0 else names[key[:-1]]
            links += _both(name, up, bandwidths[level], latencies[level])
    for rank in range(size):
        links += _both(rank, names[topology.group_key(rank, depth - 1)], bandwidths[depth], latencies[depth])
    switches = ("top", *names.values())
    nodes = topology.groups(0)
    return Description(size, tuple(links), switches, nodes, name=f"discovered {topology}")


SHAPES = ("flat", "nic", "fat-tree", "dgx1")
"""Shape names the CLI's `describe` subcommand writes."""
