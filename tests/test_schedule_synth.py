"""Schedule synthesis (adaptcoll.schedule: shapes, bound, synthesize, cli): bounds against min-cuts
computed by hand, writers' graphs, forests that span and never beat the bound, symmetry against the
full computation, and the command line end to end. No MPI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adaptcoll.plans import schedule_file as forest
from adaptcoll.plans.topology import parse as parse_topology
from adaptcoll.schedule import describe, shapes
from adaptcoll.schedule.bound import bound
from adaptcoll.schedule.describe import Description, Link
from adaptcoll.schedule.hierarchy import hierarchy
from adaptcoll.schedule.network import Network, SynthesisError
from adaptcoll.schedule.synthesize import critical_first, synthesize

REPO = Path(__file__).resolve().parents[1]


def _both(a, b, bw):
    return [Link(a, b, bw), Link(b, a, bw)]


def _ring(n: int, bw: float) -> Description:
    return Description(n, tuple(ln for r in range(n) for ln in _both(r, (r + 1) % n, bw)), name=f"ring {n}")


# ---------------------------------------------------------------- bounds computed by hand


def test_bound_two_ranks_asymmetric() -> None:
    d = Description(2, (Link(0, 1, 10.0), Link(1, 0, 4.0)))
    assert bound(d, "bcast", 0).rate == 10.0
    assert bound(d, "reduce", 0).rate == 4.0  # the only way up is the 4 B/s link
    assert bound(d, "allreduce", 0).rate == 4.0  # min(10, 4, (10 + 4) / 2)


def test_bound_star_through_a_switch() -> None:
    # rank 1 hangs off the switch with 5 up and 3 down: the broadcast reaches it at 3, its data leaves at 5
    links = (*_both(0, "s", 10.0), Link(1, "s", 5.0), Link("s", 1, 3.0), *_both(2, "s", 8.0))
    d = Description(3, links, ("s",))
    assert bound(d, "bcast", 0).rate == 3.0
    assert bound(d, "reduce", 0).rate == 5.0
    assert bound(d, "bcast", 2).rate == 3.0  # 2 -> 1 is held to 3 by s -> 1 as well
    assert bound(d, "reduce", 1).rate == 3.0  # everything enters 1 through s -> 1
    assert bound(d, "reduce", 2).rate == 5.0  # rank 1's data leaves at 5


def test_bound_ranks_relay() -> None:
    # 0 reaches 1 directly (5) and through rank 2 (5 then 5): max-flow 10; the same to 2
    links = (*_both(0, 1, 5.0), *_both(0, 2, 5.0), *_both(1, 2, 5.0))
    d = Description(3, links)
    assert bound(d, "bcast", 0).rate == 10.0
    # allreduce: every rank alone sends 10 out, 3 parts: 30 / (2 * 2) = 7.5
    assert bound(d, "allreduce", 0).rate == 7.5


def test_bound_two_nodes_behind_nics() -> None:
    links = (
        *(ln for r in (0, 1) for ln in _both(r, "nic0", 25.0)),
        *(ln for r in (2, 3) for ln in _both(r, "nic1", 25.0)),
        Link("nic0", "nic1", 12.5),
        Link("nic1", "nic0", 10.0),
    )
    d = Description(4, links, ("nic0", "nic1"), ((0, 1), (2, 3)))
    assert bound(d, "bcast", 0).rate == 12.5
    assert bound(d, "reduce", 0).rate == 10.0
    # every node: 2 parts, out of the parts 12.5 + 10 -> 22.5 / 2
    assert bound(d, "allreduce", 0).rate == 10.0


def test_bound_ring_and_flat_switch() -> None:
    ring = _ring(4, 3.0)
    assert bound(ring, "bcast", 1).rate == 6.0  # both ways round
    assert bound(ring, "allreduce", 1).rate == pytest.approx(4 * 6.0 / (2 * 3))  # 4 ranks alone, 6 out each
    flat = shapes.flat_switch(5, bandwidth=2.0)
    assert bound(flat, "bcast", 0).rate == 2.0
    assert bound(flat, "allreduce", 0).rate == pytest.approx(2.0 * 5 / (2 * 4))


def test_bound_shared_link() -> None:
    """A link every message crosses (flat switch with a shared backplane / one node's memory): the
    min-cut says 10 per rank, but ranks relay and switches do not copy, so each of the n-1 receivers'
    bytes crosses the shared link once (bcast), each sender's once (reduce), both for allreduce."""
    d = shapes.flat_switch(6, bandwidth=10.0, latency=0.0, shared_bandwidth=20.0)
    assert (d.switches, len(d.links)) == (("in", "out"), 13)
    for collective, crossings in (("bcast", 5), ("reduce", 5), ("allreduce", 10)):
        b = bound(d, collective, 2)
        assert b.rate == pytest.approx(20.0 / crossings) and "shared link in -> out" in b.limited_by
    # wide enough, the shared link no longer binds: the min-cut (a rank's own link) does
    wide = shapes.flat_switch(6, bandwidth=10.0, shared_bandwidth=60.0)
    assert bound(wide, "bcast", 0).rate == 10.0 and "min cut" in bound(wide, "bcast", 0).limited_by
    # no forest beats it, and the estimate's link time is that bound for trees of single edges
    got = synthesize(d, "bcast", 2, trees=2)
    assert got.rate <= got.bound.rate * (1 + 1e-9)
    with pytest.raises(describe.DescriptionError):
        shapes.flat_switch(4, shared_bandwidth=-1.0)


def test_shared_link_bound_leaves_balanced_switches_alone() -> None:
    """Writers whose switches forward what they receive keep the min-cut bound (nothing to check)."""
    from adaptcoll.schedule.bound import shared_link_bound

    for d in (shapes.flat_switch(5), shapes.nic_nodes(3, 4, nics=2), shapes.fat_tree(8, 2, nodes_per_leaf=4)):
        assert shared_link_bound(d, 0, "allreduce").rate == float("inf")


@pytest.mark.parametrize(
    "d",
    [
        shapes.fat_tree(8, 3, oversubscription=4, nodes_per_leaf=4, spines=2),
        shapes.nic_nodes(4, 4, nics=2),
        shapes.from_topology(parse_topology("nodes=3,sockets=2", 12), [10e9, 20e9, 40e9]),
    ],
    ids=["fat-tree", "nic", "discovered"],
)
def test_symmetry_classes_match_every_rank(d: Description) -> None:
    assert hierarchy(d).symmetric
    for collective in ("bcast", "reduce", "allreduce"):
        for root in (0, d.ranks - 2):
            fast, full = bound(d, collective, root), bound(d, collective, root, symmetric=False)
            assert fast.rate == pytest.approx(full.rate)
            assert fast.flows < full.flows


def test_symmetry_refused_where_nodes_differ() -> None:
    d = shapes.fat_tree(6, 2, nodes_per_leaf=4)  # a leaf of 4 nodes and one of 2
    assert not hierarchy(d).symmetric
    assert not hierarchy(_ring(5, 1.0)).symmetric  # ranks linked directly: nothing to read


# ---------------------------------------------------------------- writers


def test_writers_counts_and_capacities() -> None:
    flat = shapes.flat_switch(5, bandwidth=7.0)
    assert (flat.ranks, flat.switches, len(flat.links)) == (5, ("switch",), 10)
    assert {ln.bandwidth for ln in flat.links} == {7.0}

    nic = shapes.nic_nodes(3, 4, nics=2, nic_bandwidth=25e9, intra_bandwidth=100e9, pcie_bandwidth=32e9)
    assert nic.ranks == 12 and len(nic.switches) == 3 * 3 + 1 and len(nic.links) == 12 * 4 + 3 * 2 * 2
    assert nic.nodes == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    to_nic = {ln.src: ln.dst for ln in nic.links if isinstance(ln.src, int) and "nic" in str(ln.dst)}
    assert [to_nic[r] for r in range(4)] == ["n0.nic0", "n0.nic0", "n0.nic1", "n0.nic1"]
    assert sum(ln.bandwidth for ln in nic.links if ln.dst == "core") == 6 * 25e9

    ft = shapes.fat_tree(32, 2, oversubscription=4, nodes_per_leaf=16)
    leaves = [s for s in ft.switches if s.startswith("leaf")]
    spines = [s for s in ft.switches if s.startswith("spine")]
    assert (len(leaves), len(spines), ft.ranks) == (2, 4, 64)
    down = sum(ln.bandwidth for ln in ft.links if ln.src == "leaf0" and "nic" in str(ln.dst))
    up = sum(ln.bandwidth for ln in ft.links if ln.src == "leaf0" and ln.dst in spines)
    assert down == 16 * 25e9 and up == pytest.approx(down / 4)

    dgx = shapes.dgx1(nvlink_bandwidth=25e9)
    assert dgx.ranks == 8 and len(dgx.links) == 32 and sum(shapes.DGX1_NVLINKS.values()) == 24
    for gpu in range(8):
        assert sum(ln.bandwidth for ln in dgx.out_links(gpu)) == 6 * 25e9  # six NVLinks per GPU

    topo = shapes.from_topology(parse_topology("nodes=2,sockets=2", 8), [10.0, 20.0, 30.0])
    assert len(topo.switches) == 1 + 2 + 4 and len(topo.links) == 2 * (2 + 4 + 8)
    assert topo.nodes == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert sorted({ln.bandwidth for ln in topo.links}) == [10.0, 20.0, 30.0]
    assert describe.loads(describe.dumps(nic)) == nic


# ---------------------------------------------------------------- synthesis


def _check(result, d: Description, collective: str, root: int) -> None:
    sched = _round_trip(result.schedule)
    f = sched.forest(root)
    assert sched.collective == collective and sched.ranks == d.ranks
    for tree in f.tree_set("t"):  # spanning trees from the root (the format checks it when reading)
        assert tree.size == d.ranks and tree.root == root and len(tree.subtree(root)) == d.ranks
    assert result.rate <= result.bound.rate * (1 + 1e-9)
    assert Network(d).forest_rate([(t.weight, t.children) for t in f.trees], collective) == pytest.approx(result.rate)
    assert f.bound["rate"] == result.bound.rate and f.bound["forest_rate"] == result.rate


def _round_trip(s: forest.Schedule) -> forest.Schedule:
    return forest.loads(forest.dumps(s))


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_reaches_the_bound_where_it_must(collective: str) -> None:
    for d, root in ((shapes.flat_switch(6), 2), (_ring(5, 4.0), 0)):
        r = synthesize(d, collective, root, trees=6)
        _check(r, d, collective, root)
        assert r.gap < 1.0, (d.name, r.gap)


@pytest.mark.parametrize("collective", ["bcast", "reduce", "allreduce"])
def test_targets_small(collective: str) -> None:
    cases = (
        (shapes.fat_tree(32, 8, oversubscription=4), 0),
        (shapes.nic_nodes(32, 8, nics=2), 13),
        (shapes.dgx1(), 3),
    )
    for d, root in cases:
        r = synthesize(d, collective, root, trees=8)
        _check(r, d, collective, root)
        assert len(r.schedule.forests[0].trees) <= 8
        assert r.gap < 15.0, (d.name, r.gap)
        assert max(r.depths) <= 16


def test_uneven_and_switchless_shapes() -> None:
    uneven = shapes.fat_tree(6, 2, nodes_per_leaf=4)  # no symmetry: every rank's max-flow computed
    r = synthesize(uneven, "allreduce", 3, trees=4)
    _check(r, uneven, "allreduce", 3)
    assert r.gap < 15.0
    ring = _ring(24, 1.0)  # beyond the packing size of `auto`, but only neighbours have routes
    r = synthesize(ring, "bcast", 5, trees=4)
    _check(r, ring, "bcast", 5)
    assert r.method == "packing" and r.bound.rate == 2.0 and r.gap < 1.0
    one = synthesize(shapes.flat_switch(1), "reduce", 0)
    assert one.schedule.forest(0).trees[0].children == ((),)


def _height(children, rank: int) -> int:
    """Edges on the longest way down from `rank` (recursive: an oracle apart from critical_first's)."""
    return max((1 + _height(children, c) for c in children[rank]), default=0)


def test_bcast_children_in_critical_path_order() -> None:
    # a broadcast posts its sends in child order: the deepest subtree first; reduce trees keep theirs
    d = shapes.nic_nodes(16, 8, nics=2)
    for trees, fanout in ((2, 2), (4, 4), (8, 8)):
        got = synthesize(d, "bcast", 5, trees=trees, fanout=fanout).schedule.forest(5).trees
        for t in got:
            for kids in t.children:
                h = [_height(t.children, c) for c in kids]
                assert h == sorted(h, reverse=True)
    unordered = (((1, 2), (), (3,), ()), 0)  # 2 has the deeper subtree
    assert critical_first(*unordered) == ((2, 1), (), (3,), ())
    assert critical_first(((1, 2, 3), (), (), ()), 0) == ((1, 2, 3), (), (), ())  # ties keep their order


def test_nic_nodes_leave_through_every_nic_and_bus_fanout() -> None:
    # with 2 NICs a node, the rank that enters a node hands the tree straight to a rank behind the other NIC,
    # so every tree can leave the node through both NICs; bus_fanout bounds the children inside a node
    d = shapes.nic_nodes(16, 8, nics=2)
    net = Network(d)
    node_of = d.node_of()
    for bus in (2, 3, 0):
        r = synthesize(d, "bcast", 0, trees=4, fanout=4, bus_fanout=bus)
        _check(r, d, "bcast", 0)
        for t in r.schedule.forest(0).trees:
            parent = {c: p for p, kids in enumerate(t.children) for c in kids}
            for rank, kids in enumerate(t.children):
                inside = [c for c in kids if node_of[c] == node_of[rank]]
                assert len(inside) <= (bus or 4)
                entered = rank in parent and node_of[parent[rank]] != node_of[rank]
                if entered:  # an entry: one of its children inside the node sits behind the other NIC
                    assert any(net.attachment(c, True) != net.attachment(rank, True) for c in inside)
    with pytest.raises(SynthesisError, match="bus fanout must be"):
        synthesize(d, "bcast", 0, bus_fanout=1)


def test_unreachable_and_bad_options() -> None:
    d = Description(3, (*_both(0, 1, 1.0),))
    with pytest.raises(SynthesisError, match="not reachable"):
        synthesize(d, "bcast", 0)
    with pytest.raises(SynthesisError, match="root must be"):
        synthesize(shapes.flat_switch(4), "bcast", 4)
    with pytest.raises(SynthesisError, match="collective must be"):
        synthesize(shapes.flat_switch(4), "gather", 0)
    with pytest.raises(SynthesisError, match="trees must be"):
        synthesize(shapes.flat_switch(4), "bcast", 0, trees=0)


# ---------------------------------------------------------------- command line


def _tool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "adaptcoll.schedule", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_cli_end_to_end(tmp_path: Path) -> None:
    made = _tool(
        "describe", "nic", "--nodes", "4", "--ranks-per-node", "2", "--nics", "2", "-o", "t.json", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    assert describe.load(tmp_path / "t.json").ranks == 8
    run = _tool("--topology", "t.json", "--collective", "allreduce", "--root", "5", "-o", "s.json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "bound" in run.stdout and "below the bound" in run.stdout and "depths:" in run.stdout
    sched = forest.load(tmp_path / "s.json")
    assert sched.collective == "allreduce" and sched.forest(5).trees
    named = _tool(
        "synth", "--topology", "t.json", "--collective", "bcast", "--trees", "2", "-o", "b.json", cwd=tmp_path
    )
    assert named.returncode == 0 and len(forest.load(tmp_path / "b.json").forest(0).trees) <= 2
    b = _tool("bound", "--topology", "t.json", "--collective", "bcast", "--root", "0", cwd=tmp_path)
    assert b.returncode == 0 and "bound 50.00 GB/s" in b.stdout
    node = _tool("describe", "flat", "--ranks", "5", "--shared-bandwidth", "40e9", "-o", "m.json", cwd=tmp_path)
    assert node.returncode == 0, node.stderr
    b = _tool("bound", "--topology", "m.json", "--collective", "bcast", cwd=tmp_path)
    assert b.returncode == 0 and "bound 10.00 GB/s" in b.stdout and "shared link in -> out" in b.stdout


def test_cli_errors(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(describe.dumps(shapes.flat_switch(4)))
    bad = _tool("--topology", "t.json", "--collective", "gather", "-o", "s.json", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    bad = _tool("--topology", "t.json", "--collective", "bcast", "--root", "9", "-o", "s.json", cwd=tmp_path)
    assert bad.returncode == 2 and "--root must be a rank 0..3" in bad.stderr
    bad = _tool("describe", "fat-tree", "--nodes", "4", "-o", "x.json", cwd=tmp_path)
    assert bad.returncode == 2 and "--ranks-per-node" in bad.stderr
    (tmp_path / "broken.json").write_text(json.dumps({"format": "nope"}))
    bad = _tool("--topology", "broken.json", "--collective", "bcast", "-o", "s.json", cwd=tmp_path)
    assert bad.returncode == 1 and "format" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "s.json").exists()


def test_cli_png(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(describe.dumps(shapes.dgx1()))
    run = _tool("--topology", "t.json", "--collective", "bcast", "-o", "s.json", "--png", "f.png", cwd=tmp_path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert run.returncode == 1 and "--png needs matplotlib" in run.stderr
    else:
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert forest.load(tmp_path / "s.json").forest(0).trees  # the schedule is written either way


# ---------------------------------------------------------------- pinned pairs (nodes behind two NICs)


def _node_children(trees, node_of):
    """Per tree, the nodes that send to another node."""
    return [{node_of[p] for p, ks in enumerate(kids) for c in ks if node_of[c] != node_of[p]} for _, kids in trees]


@pytest.mark.parametrize("nodes,k,root", [(32, 8, 0), (32, 8, 37), (9, 4, 5), (2, 4, 7), (1, 6, 3), (17, 6, 16)])
def test_pinned_pair_one_stream_per_nic_direction(nodes: int, k: int, root: int) -> None:
    from adaptcoll.schedule.pinned import pinned, sides

    d = shapes.nic_nodes(nodes, k, nics=2)
    net, h = Network(d), hierarchy(d)
    way = sides(net, h)
    assert way is not None and all(len(a) == len(b) == k // 2 for a, b in way)
    trees = pinned(net, h, root)
    assert [w for w, _ in trees] == [0.5, 0.5]
    # a schedule file checks that each tree spans every rank once from the root
    forest.from_dict(
        {
            "format": forest.FORMAT,
            "collective": "bcast",
            "ranks": d.ranks,
            "forests": [{"root": root, "trees": [{"weight": w, "children": [list(c) for c in t]} for w, t in trees]}],
        },
        "<pinned>",
    )
    if nodes > 1:  # at the bound: half the message through each NIC
        assert net.forest_rate(trees, "bcast") == pytest.approx(bound(d, "bcast", root).rate)
    nic_links = [i for i, ln in enumerate(net.links) if "core" in (ln.src, ln.dst)]
    both = sum(net.tree_load(kids, "bcast") for _, kids in trees)
    assert both[nic_links].max() <= 1.0 + 1e-9  # one stream (one tree) per NIC direction, both trees counted
    for t, (_, kids) in enumerate(trees):
        for node, (side_a, side_b) in enumerate(way):  # tree t enters every node by NIC t, and only there
            entry_side = (side_a, side_b)[t]
            incoming = [c for p, ks in enumerate(kids) for c in ks if d.node_of()[c] == node != d.node_of()[p]]
            assert all(c in entry_side for c in incoming) and len(incoming) == (node != h.node_of[root])
    senders = _node_children(trees, h.node_of)
    assert not (senders[0] & senders[1]) - {h.node_of[root]}  # complementary between nodes
    sends = [sum(len(kids[r]) for _, kids in trees) for r in range(d.ranks)]
    assert max(s for r, s in enumerate(sends) if r != root) <= 2 and sends[root] <= 3


def test_pinned_pair_needs_two_nics_and_is_offered_by_the_choice() -> None:
    from adaptcoll.schedule.choose import choose
    from adaptcoll.schedule.pinned import sides

    for d in (shapes.nic_nodes(4, 4, nics=1), shapes.flat_switch(8), shapes.nic_nodes(4, 2, nics=2)):
        assert sides(Network(d), hierarchy(d)) is None
        with pytest.raises(SynthesisError, match="two NICs"):
            synthesize(d, "bcast", 0, trees=2, method="pinned")
    d = shapes.nic_nodes(8, 4, nics=2)
    with pytest.raises(SynthesisError, match="two trees"):
        synthesize(d, "bcast", 0, trees=1, method="pinned")
    got = synthesize(d, "reduce", 3, trees=2, method="pinned")
    assert got.method == "pinned" and len(got.schedule.forests[0].trees) == 2
    c = choose(d, "bcast", 0, 16 << 20, segments=(512 << 10, 1 << 20), trees=(2,), fanouts=(2,))
    assert "forest K=2 (pinned)" in [x.name for x in c.candidates]
    assert "forest K=2 (pinned)" not in [x.name for x in choose(d, "bcast", 0, 1 << 20, trees=(1,)).candidates]
