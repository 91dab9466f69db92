"""Tree shapes: spanning-tree properties for every kind, ADAPT's P=8 examples, topo and two-tree rules, viewer."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptcoll import trees as trees_command
from adaptcoll.plans import trees
from adaptcoll.plans.topology import Topology, parse

FAST = settings(max_examples=60, deadline=None)


def check_spanning(t: trees.Tree) -> None:
    """Independent check through the public API: parent/children agree, every rank reaches the root."""
    n = t.size
    assert t.parent(t.root) is None
    depth = 0
    for r in range(n):
        for c in t.children(r):
            assert t.parent(c) == r
        if r != t.root:
            assert r in t.children(t.parent(r))
        hops, x = 0, r
        while x != t.root:
            x = t.parent(x)
            hops += 1
            assert hops < n, "cycle"
        depth = max(depth, hops)
    assert sum(len(t.children(r)) for r in range(n)) == n - 1
    assert t.depth == depth
    assert t.max_fanout == max(len(t.children(r)) for r in range(n))
    assert sorted(t.subtree(t.root)) == list(range(n))


def children_map(t: trees.Tree) -> dict[int, list[int]]:
    return {r: list(t.children(r)) for r in range(t.size) if t.children(r)}


def build_any(kind: str, size: int, root: int, draw_param: int) -> trees.Tree:
    params = {
        "binary": {"fanout": 1 + draw_param % 5},
        "chain": {"chains": 1 + draw_param % 7},
        "linear": {"fanout": 1 + draw_param % 40},
        "knomial": {"radix": 2 + draw_param % 7},
        "two_tree": {"which": draw_param % 2},
    }.get(kind, {})
    if kind == "topo":
        params = {
            "levels": parse(f"nodes={1 + draw_param % 5},sockets=2", size),
            "inner": trees.SHAPES[draw_param % len(trees.SHAPES)],
        }
    return trees.build(kind, size, root, **params)


@FAST
@given(st.sampled_from(trees.KINDS), st.integers(1, 300), st.data(), st.integers(0, 1000))
def test_every_kind_is_a_spanning_tree(kind: str, size: int, data, param: int) -> None:
    root = data.draw(st.integers(0, size - 1))
    t = build_any(kind, size, root, param)
    assert (t.kind, t.size, t.root) == (kind, size, root)
    check_spanning(t)


@pytest.mark.parametrize("kind", trees.KINDS)
def test_small_sizes_all_roots(kind: str) -> None:
    for size in range(1, 18):
        for root in range(size):
            check_spanning(build_any(kind, size, root, size))


EXAMPLES_P8 = {
    ("binomial", ()): {0: [1, 2, 4], 1: [3, 5], 2: [6], 3: [7]},
    ("in_order_binomial", ()): {0: [1, 2, 4], 2: [3], 4: [5, 6], 6: [7]},
    ("binary", ()): {0: [1, 2], 1: [3, 5], 2: [4, 6], 3: [7]},  # ADAPT's (Open MPI build_tree) order
    ("pipeline", ()): {r: [r + 1] for r in range(7)},
    ("chain", ()): {0: [1, 3, 5, 7], 1: [2], 3: [4], 5: [6]},
    ("linear", ()): {0: [1, 2, 3, 4, 5, 6, 7]},
    ("knomial", ()): {0: [1, 2, 3, 4], 4: [5, 6, 7]},
    ("knomial", (("radix", 2),)): {0: [1, 2, 4], 2: [3], 4: [5, 6], 6: [7]},
    ("binary", (("fanout", 3),)): {0: [1, 2, 3], 1: [4, 7], 2: [5], 3: [6]},
    ("linear", (("fanout", 3),)): {0: [1, 2, 3], 1: [4, 7], 2: [5], 3: [6]},
    ("chain", (("chains", 3),)): {0: [1, 4, 6], 1: [2], 2: [3], 4: [5], 6: [7]},
}


@pytest.mark.parametrize("kind,params", list(EXAMPLES_P8))
def test_p8_examples(kind: str, params: tuple) -> None:
    assert children_map(trees.build(kind, 8, 0, **dict(params))) == EXAMPLES_P8[kind, params]


def test_root_shifts_virtual_ranks() -> None:
    t = trees.build("binomial", 8, 3)
    assert children_map(t) == {3: [4, 5, 7], 4: [6, 0], 5: [1], 6: [2]}
    assert t.parent(3) is None and t.parent(2) == 6


@pytest.mark.parametrize("kind", [k for k in trees.KINDS if k != "topo"])
def test_a_rotated_tree_is_the_root_0_tree_relabelled_and_shares_it(kind: str) -> None:
    """Every kind but topo is built on virtual ranks: the tree at root r is the tree at root 0 with rank v
    relabelled (v + r) % size. It is made in O(1) on the root-0 tree's lists (what a root per rank at
    thousands of ranks needs) and behaves as a tree built whole: neighbours, lists, text, equality."""
    import pickle

    for size in (1, 2, 5, 16, 33):
        zero = build_any(kind, size, 0, size)
        for root in range(size):
            t = build_any(kind, size, root, size)
            want = trees.Tree(
                kind,
                size,
                root,
                zero.params,
                [[(c + root) % size for c in zero.children((r - root) % size)] for r in range(size)],
            )
            assert [(t.parent(r), t.children(r)) for r in range(size)] == [
                (want.parent(r), want.children(r)) for r in range(size)
            ]
            assert t == want and hash(t) == hash(want) and str(t) == str(want)
            assert (t.depth, t.max_fanout) == (want.depth, want.max_fanout)
            assert [t.subtree(r) for r in range(size)] == [want.subtree(r) for r in range(size)]
            assert t.is_rank_ordered() == want.is_rank_ordered()
            assert pickle.loads(pickle.dumps(t)) == t
            if root:
                assert t._shape is zero  # shared, not rebuilt
    n = 1 << 16
    big = trees.build("binomial", n, 12345)  # virtual rank 1 (rank 12346): children 1 + 2, 1 + 4, 1 + 8, ...
    assert big.parent(12345) is None and big.parent(12346) == 12345 and big.parent(12344) == 12345 - 1 - (1 << 15) + n
    assert big.children(12346) == tuple(12345 + 1 + (1 << k) for k in range(1, 16)) and big.depth == 16


def test_linear_hangs_extra_ranks_below_first_level_round_robin() -> None:
    t = trees.build("linear", 40, 0)
    assert t.children(0) == tuple(range(1, 33))
    assert [t.parent(r) for r in range(33, 40)] == list(range(1, 8))
    assert t.depth == 2
    big = trees.build("linear", 1 + 32 + 32 * 32, 0)
    assert big.depth == 2 and big.max_fanout == 32


def test_chain_lengths_even_and_binary_fanout_one_is_pipeline() -> None:
    for size in range(2, 40):
        for chains in range(1, 9):
            t = trees.build("chain", size, 0, chains=chains)
            lengths = [len(t.subtree(c)) for c in t.children(0)]
            assert len(lengths) == min(chains, size - 1) and max(lengths) - min(lengths) <= 1
            assert all(len(t.children(r)) <= 1 for r in range(1, size))
        assert children_map(trees.build("binary", size, 0, fanout=1)) == children_map(trees.build("pipeline", size, 0))


def reference_rank_ordered(t: trees.Tree) -> bool:
    """Brute force: each subtree is [r, r+len) and children ascend with consecutive subtrees after r."""
    for r in range(t.size):
        sub = sorted(t.subtree(r))
        if sub != list(range(r, r + len(sub))):
            return False
        expect = r + 1
        for c in t.children(r):
            if c != expect:
                return False
            expect += len(t.subtree(c))
    return True


def test_is_rank_ordered() -> None:
    for size in range(1, 70):
        for kind in ("in_order_binomial", "knomial", "pipeline"):
            assert trees.build(kind, size, 0).is_rank_ordered()
        for kind in trees.KINDS:
            for root in {0, size // 2, size - 1}:
                t = build_any(kind, size, root, size)
                assert t.is_rank_ordered() == reference_rank_ordered(t), (kind, size, root)
    assert not trees.build("binomial", 4, 0).is_rank_ordered()
    assert not trees.build("in_order_binomial", 8, 1).is_rank_ordered()


def test_knomial_radix_two_equals_in_order_binomial() -> None:
    for size in range(1, 100):
        assert children_map(trees.build("knomial", size, 0, radix=2)) == children_map(
            trees.build("in_order_binomial", size, 0)
        )


# ---------------------------------------------------------------- topo


def group_keys(levels: tuple[tuple[int, ...], ...], level: int, rank: int) -> tuple[int, ...]:
    return tuple(levels[i][rank] for i in range(level + 1))


def reference_topo(size: int, root: int, levels: tuple[tuple[int, ...], ...], inner: str, intra: str) -> list[list]:
    """The whole-tree builder adaptcoll had until 2026-12-07, kept as the reference the per-rank links
    (trees._TopoLinks, which every topo tree now uses) must equal.

    Hierarchical tree: at each level link group leaders with `inner`, then recurse; `intra` innermost.

    Groups in a parent group are ordered by lowest rank, rotated so the leader's own group comes first;
    a group's leader is the root if it holds it, else its member at the position the leader has in its
    own group (modulo the group's size): its lowest rank for a root that is its group's lowest, and
    trees rooted at different ranks of a node (Allreduce's roots) are led by different ranks of every
    node, which shares out the leaders' folding and sending. Outer-level edges come first.
    """
    inner_kind, inner_params = trees.parse_algorithm(inner)
    intra_kind, intra_params = trees.parse_algorithm(intra)
    inner_params = trees._normalize_params(inner_kind, inner_params)
    intra_params = trees._normalize_params(intra_kind, intra_params)
    kids: list[list[int]] = [[] for _ in range(size)]

    def link(order: list[int], kind: str, params: dict[str, Any]) -> None:
        for v, vkids in enumerate(trees._shape(kind, len(order), params)):
            kids[order[v]].extend(order[c] for c in vkids)

    work = [(list(range(size)), root, 0)]
    while work:
        members, leader, level = work.pop()
        if level == len(levels):
            at = members.index(leader)
            link(members[at:] + members[:at], intra_kind, intra_params)
            continue
        split: dict[int, list[int]] = {}
        for r in members:
            split.setdefault(levels[level][r], []).append(r)
        groups = list(split.values())
        at = next(i for i, g in enumerate(groups) if leader in g)
        groups = groups[at:] + groups[:at]
        pos = groups[0].index(leader)  # the other groups are led by their member at the leader's position
        leaders = [leader] + [g[pos % len(g)] for g in groups[1:]]
        link(leaders, inner_kind, inner_params)
        work.extend((g, lead, level + 1) for g, lead in zip(groups, leaders))
    return kids


def check_topo(t: trees.Tree, levels: tuple[tuple[int, ...], ...]) -> None:
    check_spanning(t)
    for level in range(len(levels)):
        groups: dict[tuple, list[int]] = {}
        for r in range(t.size):
            groups.setdefault(group_keys(levels, level, r), []).append(r)
        for members in groups.values():
            inside = set(members)
            entries = [r for r in members if r != t.root and t.parent(r) not in inside]
            if t.root in inside:
                assert entries == []
            else:  # entered exactly once (at its leader)
                assert len(entries) == 1
    for r in range(t.size):  # outer-level edges first in every child order
        crossing = [
            next((i for i in range(len(levels)) if levels[i][r] != levels[i][c]), len(levels)) for c in t.children(r)
        ]
        assert crossing == sorted(crossing)


@FAST
@given(st.integers(1, 120), st.data())
def test_topo_crosses_each_group_boundary_once(size: int, data) -> None:
    nlevels = data.draw(st.integers(0, 3))
    levels = tuple(tuple(data.draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))) for _ in range(nlevels))
    root = data.draw(st.integers(0, size - 1))
    inner = data.draw(st.sampled_from(trees.SHAPES))
    intra = data.draw(st.sampled_from(trees.SHAPES))
    t = trees.build("topo", size, root, levels=levels, inner=inner, intra=intra)
    check_topo(t, levels)


@FAST
@given(st.integers(2, 60), st.data())
def test_topo_groups_are_led_at_the_roots_position(size: int, data) -> None:
    """One level: a group without the root is entered at its member at the root's position in its own
    group (modulo the group's size), so trees rooted at different ranks of a node have different leaders."""
    ids = tuple(data.draw(st.lists(st.integers(0, 4), min_size=size, max_size=size)))
    root = data.draw(st.integers(0, size - 1))
    inner = data.draw(st.sampled_from(trees.SHAPES + ("two_tree:which=0", "two_tree:which=1")))
    t = trees.build("topo", size, root, levels=(ids,), inner=inner)
    members = {g: [r for r in range(size) if ids[r] == g] for g in set(ids)}
    pos = members[ids[root]].index(root)
    for g, group in members.items():
        if g != ids[root]:
            entry = [r for r in group if ids[t.parent(r)] != g]
            assert entry == [group[pos % len(group)]]


@FAST
@given(st.integers(1, 90), st.data())
def test_topo_with_two_tree_between_groups_is_a_pair(size: int, data) -> None:
    """inner=two_tree: build_all gives two topo trees, each hierarchical; between the groups' leaders no
    leader sends in both (the two trees' complementarity), inside the groups they are alike."""
    nlevels = data.draw(st.integers(1, 2))
    levels = tuple(tuple(data.draw(st.lists(st.integers(0, 5), min_size=size, max_size=size))) for _ in range(nlevels))
    root = data.draw(st.integers(0, size - 1))
    intra = data.draw(st.sampled_from(trees.SHAPES))
    pair = trees.build_all("topo", size, root, levels=levels, inner="two_tree", intra=intra)
    assert len(pair) == 2
    assert pair[0] is trees.build("topo", size, root, levels=levels, inner="two_tree:which=0", intra=intra)
    for t in pair:
        check_topo(t, levels)
    outer = levels[0]
    for r in range(size):
        if r == root:
            continue
        crossing = [[c for c in t.children(r) if outer[c] != outer[r]] for t in pair]
        assert not (crossing[0] and crossing[1]), r
        inside = [[c for c in t.children(r) if all(lv[c] == lv[r] for lv in levels)] for t in pair]
        assert inside[0] == inside[1]
    with pytest.raises(ValueError, match="do not pass which"):
        trees.build_all("topo", size, root, levels=levels, inner="two_tree:which=1")
    with pytest.raises(ValueError, match="intra="):
        trees.build("topo", size, root, levels=levels, intra="two_tree")


def test_topo_uneven_nodes_root_in_every_group() -> None:
    topo = parse("nodes=3,sockets=2", 11)
    assert [len(g) for g in topo.groups(0)] == [4, 4, 3]
    for root in range(11):
        for inner in ("chain", "binomial", "linear", "knomial:radix=3"):
            t = trees.build("topo", 11, root, levels=topo, inner=inner)
            check_topo(t, topo.levels)
            assert t.params == tuple(sorted({"levels": topo, "inner": inner, "intra": "binomial"}.items()))
    t = trees.build("topo", 16, 3, levels=parse("nodes=4", 16), inner="pipeline")
    # the other nodes are led by their rank at the root's position (3 of 0..3): 7, 11, 15
    assert t.children(3)[:1] == (7,) and t.children(7)[:1] == (11,) and t.children(11)[:1] == (15,)


def test_topo_without_levels_is_the_intra_shape_rotated() -> None:
    for shape in trees.SHAPES:
        t = trees.build("topo", 13, 5, intra=shape)
        assert children_map(t) == children_map(trees.build(shape, 13, 5))


# ---------------------------------------------------------------- two trees


@FAST
@given(st.integers(1, 300), st.data())
def test_two_trees_complementary(size: int, data) -> None:
    root = data.draw(st.integers(0, size - 1))
    t1, t2 = trees.build_all("two_tree", size, root)
    for t in (t1, t2):
        check_spanning(t)
        assert t.root == root
        assert len(t.children(root)) == min(1, size - 1)
        assert t.depth <= math.ceil(math.log2(size)) + 1
    for r in range(size):
        if r != root:
            assert not (t1.children(r) and t2.children(r)), r
    assert trees.build("two_tree", size, root) is t1


@FAST
@given(st.integers(1, 400), st.integers(2, 9), st.data())
def test_multi_trees_each_rank_sends_the_message_once_at_most(size: int, fanout: int, data) -> None:
    """multi_tree: K = fanout trees (at most n - 1), every rank but the root with at most K children over
    all of them (it sends at most the whole message once: each tree carries 1/K), interior in one tree
    only where (n - 1) mod K <= 1; the root feeds each tree once; depth about log_K(n); which may not be
    passed to build_all, and must name one of the K trees."""
    root = data.draw(st.integers(0, size - 1))
    built = trees.build_all("multi_tree", size, root, fanout=fanout)
    k = len(built)
    assert k == trees.multi_tree_count(size, fanout)
    if size >= 3:
        assert k == min(fanout, size - 1)
    interior: dict[int, int] = {}
    load: dict[int, int] = {}
    for t in built:
        check_spanning(t)
        assert t.root == root and len(t.children(root)) == min(1, size - 1)
        if size >= 3:
            assert t.depth <= math.ceil(math.log(size, k)) + 2
        for r in range(size):
            if r != root and t.children(r):
                assert len(t.children(r)) <= k
                interior[r] = interior.get(r, 0) + 1
                load[r] = load.get(r, 0) + len(t.children(r))
    assert all(v <= k for v in load.values()), load
    if size >= 3 and (size - 1) % k <= 1:
        assert all(v == 1 for v in interior.values()), interior
    with pytest.raises(ValueError, match="do not pass which"):
        trees.build_all("multi_tree", size, root, which=0)
    with pytest.raises(ValueError, match=r"which must be in 0\.\."):
        trees.build("multi_tree", size, root, fanout=fanout, which=k)


def test_multi_tree_keeps_its_count_where_the_classes_are_uneven() -> None:
    """At 16K ranks (16383 = 3 x 43 x 127) eight trees are eight: the short classes' last ranks hang from
    the long classes' last ranks, and nobody forwards more than the whole message."""
    built = trees.build_all("multi_tree", 16384, 0, fanout=8)
    assert len(built) == 8
    load = [sum(len(t.children(r)) for t in built) for r in range(16384)]
    assert load[0] == 8 and max(load[1:]) == 8
    assert max(t.depth for t in built) <= 6  # log_8(16384) = 4.7, plus the adopted ranks' level


def test_multi_tree_parameters_are_checked() -> None:
    assert trees.multi_tree_count(256, 4) == 4 and trees.multi_tree_count(2, 4) == 1
    assert trees.multi_tree_count(4, 8) == 3 and trees.multi_tree_count(1024, 7) == 7
    with pytest.raises(ValueError, match="multi_tree parameter fanout must be an int >= 2"):
        trees.build("multi_tree", 8, 0, fanout=1)
    with pytest.raises(ValueError, match="unknown parameter 'radix' for tree kind 'multi_tree'"):
        trees.check_params("multi_tree", {"radix": 3})
    assert "multi_tree" not in trees.SHAPES


def test_build_all_single_tree_kinds() -> None:
    for kind in trees.SHAPES:
        assert trees.build_all(kind, 9, 2) == (trees.build(kind, 9, 2),)


# ---------------------------------------------------------------- API details, caching, errors


def test_cache_and_hashable_params() -> None:
    a = trees.build("knomial", 50, 7)
    assert trees.build("knomial", 50, 7, radix=4) is a
    assert a.params == (("radix", 4),)
    topo = parse("nodes=2", 10)
    same = Topology(topo.levels, topo.names)
    assert trees.build("topo", 10, 0, levels=topo) is trees.build("topo", 10, 0, levels=same)
    assert trees.build("topo", 10, 0, levels=[list(topo.levels[0])]) is trees.build("topo", 10, 0, levels=topo.levels)


def test_subtree_preorder() -> None:
    t = trees.build("binomial", 8, 0)
    assert t.subtree(0) == (0, 1, 3, 7, 5, 2, 6, 4)
    assert t.subtree(1) == (1, 3, 7, 5) and t.subtree(4) == (4,)


def test_text_and_dot_rendering() -> None:
    t = trees.build("binomial", 8, 0)
    text = str(t)
    assert text.splitlines()[0] == "binomial size=8 root=0 depth=3 max_fanout=3"
    assert sorted(int(re.search(r"(\d+)$", line).group(1)) for line in text.splitlines()[1:]) == list(range(8))
    edges = set(re.findall(r"(\d+) -> (\d+)", t.to_dot()))
    assert edges == {(str(p), str(c)) for p in range(8) for c in t.children(p)}


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: trees.build("nope", 8), "valid kinds: binomial, in_order_binomial"),
        (lambda: trees.build("binomial", 8, radix=2), "valid parameters: none"),
        (lambda: trees.build("knomial", 8, radix=1), "radix must be an int >= 2"),
        (lambda: trees.build("knomial", 8, rdx=3), "valid parameters: radix"),
        (lambda: trees.build("binary", 8, fanout=0), "fanout must be an int >= 1"),
        (lambda: trees.build("linear", 8, fanout="x"), "fanout must be an int"),
        (lambda: trees.build("chain", 8, chains=0), "chains must be an int >= 1"),
        (lambda: trees.build("binomial", 0), "size must be >= 1"),
        (lambda: trees.build("binomial", 8, 8), r"root must be in 0\.\.7"),
        (lambda: trees.build("binomial", 8, -1), r"root must be in 0\.\.7"),
        (lambda: trees.build("binomial", 2.5), "size must be an int"),
        (lambda: trees.build("binomial", 8, True), "root must be an int"),
        (lambda: trees.build("two_tree", 8, which=2), "which must be 0 or 1"),
        (lambda: trees.build_all("two_tree", 8, which=1), "do not pass which"),
        (lambda: trees.build("topo", 8, intra="two_tree"), "valid kinds: binomial.*knomial$"),
        (lambda: trees.build("topo", 8, inner="two_tree:which=2"), "which must be 0 or 1"),
        (lambda: trees.build("topo", 8, intra="knomial:radix=1"), "topo parameter intra"),
        (lambda: trees.build("topo", 8, levels=((0, 1),)), "has 2 group ids but the tree has 8"),
        (lambda: trees.build("topo", 8, levels="nodes=2"), "not a string"),
        (lambda: trees.build("topo", 8, levels=parse("nodes=2", 6)), "has 6 group ids"),
        (lambda: trees.parse_algorithm("knomial:radix"), "expected kind"),
        (lambda: trees.parse_algorithm("chain:fanout=2"), "valid parameters: chains"),
        (lambda: trees.parse_algorithm("tree"), "valid kinds"),
        (lambda: trees.build("binomial", 8).parent(8), "out of range"),
    ],
)
def test_bad_input_messages(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_parse_algorithm() -> None:
    assert trees.parse_algorithm("knomial:radix=4") == ("knomial", {"radix": 4})
    assert trees.parse_algorithm(" binomial ") == ("binomial", {})
    assert trees.parse_algorithm("topo:inner=knomial:radix=8,intra=chain") == (
        "topo",
        {"inner": "knomial:radix=8", "intra": "chain"},
    )
    kind, params = trees.parse_algorithm("chain:chains=2")
    assert trees.build(kind, 5, 0, **params).children(0) == (1, 3)


# ---------------------------------------------------------------- the viewer


def viewer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adaptcoll.trees", *args], capture_output=True, text=True, timeout=60)


def test_viewer_text_every_kind(capsys) -> None:
    for kind in trees.KINDS:  # in-process: each subprocess start costs about a second here
        assert trees_command.main(["--kind", kind, "--size", "8", "--root", "2"]) == 0
        expect = trees.build_all(kind, 8, 2)
        out = capsys.readouterr().out
        assert out == "\n\n".join(map(str, expect)) + "\n"
        assert f"depth={expect[0].depth} max_fanout={expect[0].max_fanout}" in out


def test_viewer_subprocess_text_and_dot(tmp_path) -> None:
    out = viewer("--kind", "topo", "--size", "16", "--root", "3", "--topology", "nodes=4", "--inner", "chain")
    assert out.returncode == 0, out.stderr
    t = trees.build("topo", 16, 3, levels=parse("nodes=4", 16), inner="chain")
    assert out.stdout == str(t) + "\n"
    assert out.stdout.startswith("topo(inner=chain, intra=binomial, levels=Topology(4 nodes)) size=16 root=3 depth=")
    dot_file = tmp_path / "t.dot"
    out = viewer("--kind", "knomial", "--size", "20", "--param", "radix=3", "--dot", "--output", str(dot_file))
    assert out.returncode == 0 and out.stdout == ""
    t = trees.build("knomial", 20, 0, radix=3)
    assert dot_file.read_text() == t.to_dot()
    assert set(re.findall(r"(\d+) -> (\d+)", t.to_dot())) == {
        (str(p), str(c)) for p in range(20) for c in t.children(p)
    }
    out = viewer("--kind", "knomial", "--size", "8", "--param", "radix=1")
    assert out.returncode == 2 and "radix must be" in out.stderr and "Traceback" not in out.stderr


def test_viewer_two_tree_dot(capsys) -> None:
    assert trees_command.main(["--kind", "two_tree", "--size", "6", "--dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph") and out.count("->") == 2 * 5 and out.count("style=dashed") == 5


@pytest.mark.parametrize(
    "args,message",
    [
        (["--kind", "foo", "--size", "8"], "invalid choice"),
        (["--size", "x"], "invalid int value"),
        (["--size", "8", "--root", "9"], "root must be in"),
        (["--kind", "knomial", "--size", "8", "--param", "radix=1"], "radix must be"),
        (["--kind", "knomial", "--size", "8", "--param", "radix"], "expects K=V"),
        (["--kind", "binomial", "--size", "8", "--inner", "chain"], "only apply to --kind topo"),
        (["--kind", "topo", "--size", "8", "--topology", "nodes=x"], "ADAPTCOLL_TOPOLOGY"),
    ],
)
def test_viewer_bad_arguments(args: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        trees_command.main(args)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_docs_example_runs() -> None:
    """The first Python block of docs/trees.md runs as written (it once called build() wrongly)."""
    import contextlib
    import io
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "trees.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(block.group(1), "docs/trees.md", "exec"), {})


@FAST
@given(st.integers(1, 70), st.data())
def test_a_topo_tree_answered_per_rank_is_the_tree_built_whole(size: int, data) -> None:
    """From LAZY_TOPO_FROM ranks a topo tree answers parent / children per rank from its levels instead of
    being built whole per root: the same neighbours, in the same order, as the tree built whole."""
    nlevels = data.draw(st.integers(0, 3))
    levels = tuple(tuple(data.draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))) for _ in range(nlevels))
    root = data.draw(st.integers(0, size - 1))
    inner = data.draw(st.sampled_from(trees.SHAPES + ("two_tree:which=0", "two_tree:which=1")))
    intra = data.draw(st.sampled_from(trees.SHAPES))
    whole = trees.build("topo", size, root, levels=levels, inner=inner, intra=intra)
    lazy = trees._TopoTree(size, root, whole.params, levels, [f"L{i}" for i in range(nlevels)])
    assert [(lazy.parent(r), lazy.children(r)) for r in range(size)] == [
        (whole.parent(r), whole.children(r)) for r in range(size)
    ]
    assert [list(whole.children(r)) for r in range(size)] == reference_topo(size, root, levels, inner, intra)
    assert (lazy.depth, lazy.max_fanout, str(lazy)) == (whole.depth, whole.max_fanout, str(whole))
    assert lazy == whole


def test_a_topo_tree_at_many_ranks_is_answered_per_rank() -> None:
    size = trees.LAZY_TOPO_FROM * 2
    topo = parse("nodes=16,sockets=2", size)
    t = trees.build("topo", size, 777, levels=topo, inner="two_tree:which=1")
    assert isinstance(t, trees._TopoTree)
    sample = range(0, size, 97)
    whole = reference_topo(size, 777, topo.levels, "two_tree:which=1", "binomial")
    assert [t.children(r) for r in sample] == [tuple(whole[r]) for r in sample]
    check_spanning(t)
