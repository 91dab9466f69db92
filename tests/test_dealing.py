"""Dealing segments over trees (adaptcoll.plans.dealing): a link only for a tree that carries segments, and
Allreduce's trees of a root per rank built only as far as the segments reach, with the same links on every
rank as dealing over every tree."""

from __future__ import annotations

import pytest

from adaptcoll.plans.dealing import deal, spread_root_trees, tree_links
from adaptcoll.plans.trees import build_all

KINDS = ("binomial", "two_tree", "pipeline")


def _every_root(kind: str, size: int, roots: int):
    count = min(size, roots or size)
    return tuple(t for k in range(count) for t in build_all(kind, size, (k * size) // count))


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_trees_that_carry_segments_are_built_and_linked(kind: str) -> None:
    for size in range(1, 18):
        for roots in (0, 1, 3):
            full = _every_root(kind, size, roots)
            for nseg in sorted({0, 1, 2, 3, size - 1, size, 2 * size + 1}):
                built: list[int] = []

                def trees_at(root: int, built: list[int] = built, size: int = size):
                    built.append(root)
                    return build_all(kind, size, root)

                part = spread_root_trees(size, roots, trees_at, nseg)
                assert part == full[: max(nseg, 1)]  # the trees that carry segments (one at least)
                per_root = len(build_all(kind, size, 0))
                assert len(built) == min(len(full) // per_root, max(1, -(-nseg // per_root))), (size, roots, nseg)
                for rank in range(size):
                    links = tree_links(part, rank, nseg)
                    want = [
                        (t.parent(rank), tuple(t.children(rank)), list(s))
                        for t, s in zip(full, deal(len(full), nseg))
                        if s
                    ]
                    got = [(link.parent, link.children, list(link.segs)) for link in links]
                    if not nseg:  # an empty message: the first tree's link, with nothing to carry
                        want = [(full[0].parent(rank), tuple(full[0].children(rank)), [])]
                    assert got == want, (kind, size, roots, nseg, rank)


def test_without_a_segment_count_every_root_is_built() -> None:
    assert spread_root_trees(7, 0, lambda r: build_all("binomial", 7, r)) == _every_root("binomial", 7, 0)
    assert [t.root for t in spread_root_trees(8, 3, lambda r: build_all("binomial", 8, r))] == [0, 2, 5]


def test_a_tree_dealt_nothing_gets_no_link_and_an_empty_message_keeps_one() -> None:
    trees = build_all("two_tree", 6, 0)  # two trees, one segment: the second carries nothing
    links = tree_links(trees, 3, 1)
    assert [list(link.segs) for link in links] == [[0]]
    assert (links[0].parent, links[0].children) == (trees[0].parent(3), tuple(trees[0].children(3)))
    empty = tree_links(trees, 3, 0)  # no segment at all: the first tree's link, so there is a protocol to end
    assert len(empty) == 1 and list(empty[0].segs) == []
    assert tree_links((), 0, 0) == []


def test_a_communicator_keeps_a_bounded_number_of_tree_sets() -> None:
    """CommState's tree cache drops the least recently used set past TREE_CACHE (a topo tree is built
    whole per root, so Bcasts from every rank in turn must not keep one per root)."""
    from mpi4py import MPI

    from adaptcoll.state import comm_state as cs

    comm = MPI.COMM_SELF.Dup()
    try:
        st = cs.comm_state(comm)
        first = st.trees("knomial:radix=2", 0)
        for radix in range(3, cs.TREE_CACHE + 10):
            st.trees(f"knomial:radix={radix}", 0)
            assert st.trees("knomial:radix=2", 0) is first  # used again: kept
        assert len(st._trees) == cs.TREE_CACHE
        assert ("knomial:radix=3", 0, False) not in st._trees  # the least recently used went first
        assert st.trees("knomial:radix=3", 0) == build_all("knomial", 1, 0, radix=3)  # rebuilt alike
    finally:
        cs.release_state(comm)
        comm.Free()
