"""Communication trees as plain data: each rank's parent and ordered children.

Trees are pure functions of (kind, size, root, params); `build` validates and caches them. Shapes are
built on virtual ranks v = (rank - root) % size, except "topo": the tree at root r != 0 is the checked
tree at root 0 relabelled, made in O(1) on its lists (`_RotatedTree`). No MPI here.
Print one with `python -m adaptcoll.trees --kind binomial --size 8` (the command: `adaptcoll/trees.py`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

from .topology import Topology

__all__ = [
    "KINDS",
    "SHAPES",
    "Tree",
    "build",
    "build_all",
    "multi_tree_count",
    "parse_algorithm",
    "check_params",
    "parse_value",
    "to_dot",
]

_DEFAULTS: dict[str, dict[str, Any]] = {
    "binomial": {},
    "in_order_binomial": {},
    "binary": {"fanout": 2},
    "pipeline": {},
    "chain": {"chains": 4},
    "linear": {"fanout": 32},
    "knomial": {"radix": 4},
    "topo": {"levels": (), "inner": "binomial", "intra": "binomial"},
    "two_tree": {"which": 0},
    "multi_tree": {"fanout": 4, "which": 0},
}
KINDS: tuple[str, ...] = tuple(_DEFAULTS)
"""Every tree kind `build` accepts."""
SHAPES: tuple[str, ...] = tuple(k for k in KINDS if k not in ("topo", "two_tree", "multi_tree"))
"""Kinds usable as the `inner`/`intra` shapes of a "topo" tree (`inner` may also be "two_tree": a pair of
topo trees, see build_all)."""
_INT_MIN = {
    ("binary", "fanout"): 1,
    ("chain", "chains"): 1,
    ("linear", "fanout"): 1,
    ("knomial", "radix"): 2,
    ("multi_tree", "fanout"): 2,
    ("multi_tree", "which"): 0,
}

Params = tuple[tuple[str, Any], ...]
Children = list[list[int]]


# ---------------------------------------------------------------- the Tree value


class Tree:
    """A spanning tree over ranks 0..size-1 rooted at `root`; immutable, hashable by its build arguments."""

    __slots__ = ("kind", "size", "root", "params", "depth", "max_fanout", "_parents", "_children", "_labels")

    def __init__(
        self, kind: str, size: int, root: int, params: Params, children: Children, labels: tuple[str, ...] | None = None
    ) -> None:
        self.kind, self.size, self.root, self.params = kind, size, root, params
        self._children = tuple(tuple(c) for c in children)
        self._labels = labels
        self._parents, self.depth = _check_spanning(size, root, self._children)
        self.max_fanout = max(len(c) for c in self._children)

    def parent(self, rank: int) -> int | None:
        """The rank `rank` receives from (None at the root)."""
        parent = self._parents[self._rank(rank)]
        return None if parent < 0 else parent

    def children(self, rank: int) -> tuple[int, ...]:
        """Children of `rank` in the order the parent serves them."""
        return self._children[self._rank(rank)]

    def subtree(self, rank: int) -> tuple[int, ...]:
        """All ranks of `rank`'s subtree in depth-first pre-order (rank first, children in order)."""
        out, stack = [], [self._rank(rank)]
        while stack:
            r = stack.pop()
            out.append(r)
            stack.extend(reversed(self._children[r]))
        return tuple(out)

    def is_rank_ordered(self) -> bool:
        """True if every subtree of r is the range [r, r+len) and r's children ascend with consecutive subtrees.

        This is what a non-commutative reduction needs: folding children in order keeps rank order.
        It implies root == 0 (e.g. in_order_binomial, knomial and pipeline rooted at 0).
        """
        if self.root != 0:
            return False
        sizes = [1] * self.size
        for r in reversed(self._bfs_order()):
            p = self._parents[r]
            if p >= 0:
                sizes[p] += sizes[r]
        for r in range(self.size):
            expect = r + 1
            for c in self._children[r]:
                if c != expect:
                    return False
                expect += sizes[c]
        return True

    def to_dot(self) -> str:
        """Graphviz DOT: edges labelled with the child's serving position; topo groups drawn as clusters."""
        return to_dot((self,))

    def __str__(self) -> str:
        lines = [self.header(), self._label(self.root)]
        kids = self._children[self.root]
        stack = [(c, "", i == len(kids) - 1) for i, c in reversed(list(enumerate(kids)))]
        while stack:
            r, prefix, last = stack.pop()
            lines.append(prefix + ("`-- " if last else "|-- ") + self._label(r))
            kids = self._children[r]
            deeper = prefix + ("    " if last else "|   ")
            stack.extend((c, deeper, i == len(kids) - 1) for i, c in reversed(list(enumerate(kids))))
        return "\n".join(lines)

    def header(self) -> str:
        """One line: kind, params, size, root, depth and maximum fan-out."""
        shown = ", ".join(f"{k}={_show(v)}" for k, v in self.params)
        kind = f"{self.kind}({shown})" if shown else self.kind
        return f"{kind} size={self.size} root={self.root} depth={self.depth} max_fanout={self.max_fanout}"

    def __repr__(self) -> str:
        return f"<Tree {self.header()}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tree) and self._key() == other._key() and self._children == other._children

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, int, int, Params]:
        return (self.kind, self.size, self.root, self.params)

    def _rank(self, rank: int) -> int:
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank!r} out of range for a tree of size {self.size}")
        return rank

    def _label(self, rank: int) -> str:
        return f"{rank} {self._labels[rank]}" if self._labels else str(rank)

    def _bfs_order(self) -> list[int]:
        order = [self.root]
        for r in order:
            order.extend(self._children[r])
        return order


class _RotatedTree(Tree):
    """A tree of a rotation-built kind rooted at `root` != 0, sharing the validated tree of the same
    kind, size and params rooted at 0 (`shape`): rank r sits where rank (r - root) % size sits there,
    exactly as `build` rotates. Making one is O(1) instead of O(size), so the trees of many roots
    (Allreduce with a root per rank, Bcasts from every rank in turn at thousands of ranks) cost time and
    memory only for the ranks asked about; the full lists are made only where something reads them all
    (printing, comparing, subtrees)."""

    __slots__ = ("_shape", "_made")

    def __init__(self, shape: Tree, root: int) -> None:  # (Tree.__init__ would build and check the lists)
        self.kind, self.size, self.root, self.params = shape.kind, shape.size, root, shape.params
        self.depth, self.max_fanout, self._labels = shape.depth, shape.max_fanout, None
        self._shape = shape
        self._made: tuple[tuple[tuple[int, ...], ...], tuple[int, ...]] | None = None

    def parent(self, rank: int) -> int | None:
        size, root = self.size, self.root
        parent = self._shape._parents[(self._rank(rank) - root) % size]
        return None if parent < 0 else (parent + root) % size

    def children(self, rank: int) -> tuple[int, ...]:
        size, root = self.size, self.root
        return tuple((c + root) % size for c in self._shape._children[(self._rank(rank) - root) % size])

    def _lists(self) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        if self._made is None:
            size, root, shape = self.size, self.root, self._shape
            at = [(r - root) % size for r in range(size)]
            children = tuple(tuple((c + root) % size for c in shape._children[v]) for v in at)
            parents = tuple(-1 if shape._parents[v] < 0 else (shape._parents[v] + root) % size for v in at)
            self._made = (children, parents)
        return self._made

    @property  # (read-only: the base's slot is never set on a rotated tree)
    def _children(self) -> tuple[tuple[int, ...], ...]:  # type: ignore[override]
        return self._lists()[0]

    @property
    def _parents(self) -> tuple[int, ...]:  # type: ignore[override]
        return self._lists()[1]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_RotatedTree, (self._shape, self.root))


LAZY_TOPO_FROM = 1024
"""From this many ranks a `topo` tree answers `parent` / `children` per rank from its levels (`_TopoTree`)
instead of being built whole at each root (about 30-60 ms and a few MB a pair at 16K ranks)."""


@functools.lru_cache(maxsize=8)
def _topo_groups(size: int, levels: tuple[tuple[int, ...], ...]) -> tuple[Any, ...]:
    """What `_topo` splits the ranks into, whatever the root: per level, each rank's group key, its index
    in its group, each group's sorted members, each parent group's child groups by lowest rank and each
    group's position among them."""
    key: list[list[Any]] = []
    index: list[list[int]] = []
    members: list[dict[Any, list[int]]] = []
    children: list[dict[Any, list[Any]]] = []
    places: list[dict[Any, int]] = []  # a group's position among its parent group's child groups
    above: list[Any] = [()] * size
    for ids in levels:
        mine = [(above[r], ids[r]) for r in range(size)]
        groups: dict[Any, list[int]] = {}
        for r in range(size):
            groups.setdefault(mine[r], []).append(r)
        kids: dict[Any, list[Any]] = {}
        for k in groups:  # (insertion order: by lowest rank, as _topo's split within each parent group)
            kids.setdefault(k[0], []).append(k)
        place = {k: i for ordered in kids.values() for i, k in enumerate(ordered)}
        at = [0] * size
        for g in groups.values():
            for i, r in enumerate(g):
                at[r] = i
        key.append(mine)
        index.append(at)
        members.append(groups)
        children.append(kids)
        places.append(place)
        above = mine
    return key, index, members, children, places


class _TopoLinks:
    """How `_topo` links one rank, asked per rank: walking the levels from the top, the group leaders
    at the root's position (modulo each group's size) linked by `inner` among the child groups of the
    leader's group, `intra` innermost, outer-level edges first. O(levels) a rank after the groups are
    split (`_topo_groups`, once per size and levels), so a tree of many ranks need not be built whole."""

    __slots__ = ("size", "root", "levels", "_inner", "_intra", "_shapes", "_groups")

    def __init__(self, size: int, root: int, levels: tuple[tuple[int, ...], ...], inner: str, intra: str) -> None:
        self.size, self.root, self.levels = size, root, levels
        self._inner, self._intra = parse_algorithm(inner), parse_algorithm(intra)
        self._shapes: dict[tuple[bool, int], Tree] = {}
        self._groups: tuple[Any, ...] | None = None  # (_topo_groups' lookup hashes the levels: once per tree)

    def _shape(self, innermost: bool, n: int) -> Tree:
        """The inner (or intra) shape over n virtual ranks rooted at 0."""
        shape = self._shapes.get((innermost, n))
        if shape is None:
            kind, params = self._intra if innermost else self._inner
            shape = self._shapes[innermost, n] = build(kind, n, 0, **params)
        return shape

    def neighbours(self, x: int) -> tuple[int | None, tuple[int, ...]]:
        """(parent or None, children in serving order) of rank `x`."""
        if self._groups is None:
            self._groups = _topo_groups(self.size, self.levels)
        key, index, members, children, places = self._groups
        leader, group, parent = self.root, (), None
        kids: list[int] = []
        for lv in range(len(self.levels)):
            ordered = children[lv][group]
            k = len(ordered)
            first, pos = places[lv][key[lv][leader]], index[lv][leader]

            def led(i: int, lv: int = lv, ordered: list[Any] = ordered, first: int = first, pos: int = pos) -> int:
                g = members[lv][ordered[(first + i) % len(ordered)]]  # the i-th group's leader, rotated order
                return int(g[pos % len(g)])

            j = (places[lv][key[lv][x]] - first) % k
            mine = led(j)
            if mine == x and k > 1:
                shape = self._shape(False, k)
                if j:
                    parent = led(shape._parents[j])
                kids.extend(led(c) for c in shape._children[j])
            group, leader = key[lv][x], mine
        if self.levels:
            last = len(self.levels) - 1
            g, at, vx = members[last][group], index[last][leader], index[last][x]
        else:
            g, at, vx = range(self.size), leader, x
        m = len(g)
        vx = (vx - at) % m
        if m > 1:
            shape = self._shape(True, m)
            if vx:
                parent = g[(shape._parents[vx] + at) % m]
            kids.extend(g[(c + at) % m] for c in shape._children[vx])
        return parent, tuple(kids)


class _TopoTree(Tree):
    """A `topo` tree of many ranks (LAZY_TOPO_FROM): `parent` and `children` asked per rank of its
    `_TopoLinks` instead of the tree being built whole at each root; the full lists (and the spanning
    check) only where something reads them all."""

    __slots__ = ("_links", "_names", "_whole", "_last")

    def __init__(self, size: int, root: int, params: Params, levels: tuple[tuple[int, ...], ...], names: Any) -> None:
        args = dict(params)
        self.kind, self.size, self.root, self.params = "topo", size, root, params
        self._links = _TopoLinks(size, root, levels, args["inner"], args["intra"])
        self._names = names
        self._whole: Tree | None = None
        self._last: tuple[int, tuple[int | None, tuple[int, ...]]] | None = None

    def parent(self, rank: int) -> int | None:
        return self._asked(rank)[0]

    def children(self, rank: int) -> tuple[int, ...]:
        return self._asked(rank)[1]

    def _asked(self, rank: int) -> tuple[int | None, tuple[int, ...]]:
        """`rank`'s neighbours, the last rank's kept (a link asks its parent, then its children)."""
        last = self._last
        if last is None or last[0] != rank:
            last = self._last = (rank, self._links.neighbours(self._rank(rank)))
        return last[1]

    def _tree(self) -> Tree:
        if self._whole is None:
            links, size = self._links, self.size
            children = [list(links.neighbours(x)[1]) for x in range(size)]
            labels = _topo_labels(links.levels, self._names, size)
            self._whole = Tree("topo", size, self.root, self.params, children, labels)
        return self._whole

    @property
    def _children(self) -> tuple[tuple[int, ...], ...]:  # type: ignore[override]
        return self._tree()._children

    @property
    def _parents(self) -> tuple[int, ...]:  # type: ignore[override]
        return self._tree()._parents

    @property
    def _labels(self) -> tuple[str, ...] | None:  # type: ignore[override]
        return self._tree()._labels

    @property
    def depth(self) -> int:  # type: ignore[override]
        return self._tree().depth

    @property
    def max_fanout(self) -> int:  # type: ignore[override]
        return self._tree().max_fanout

    def __reduce__(self) -> tuple[Any, ...]:
        return (_TopoTree, (self.size, self.root, self.params, self._links.levels, self._names))


def _topo_labels(levels: tuple[tuple[int, ...], ...], names: Any, size: int) -> tuple[str, ...] | None:
    if not levels:
        return None
    return tuple("[" + " ".join(f"{n}={lv[r]}" for n, lv in zip(names, levels)) + "]" for r in range(size))


def _check_spanning(size: int, root: int, children: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], int]:
    """Parents (-1 at root) and depth of `children`, checking in O(size) that it is a spanning tree at root."""
    if len(children) != size:
        raise RuntimeError(f"tree builder bug: {len(children)} child lists for size {size}")
    parents = [-2] * size
    parents[root] = -1
    for p, kids in enumerate(children):
        for c in kids:
            if not 0 <= c < size or c == root or parents[c] != -2:
                raise RuntimeError(
                    f"tree builder bug: rank {c} (child of {p}) is out of range, the root or has two parents"
                )
            parents[c] = p
    level, depth, seen = [root], 0, 1
    while True:
        level = [c for r in level for c in children[r]]
        if not level:
            break
        depth += 1
        seen += len(level)
    if seen != size:
        raise RuntimeError(f"tree builder bug: only {seen} of {size} ranks reachable from root {root}")
    return tuple(parents), depth


def _show(value: Any) -> str:
    if isinstance(value, Topology):
        return str(value)
    if isinstance(value, tuple):
        return f"<{len(value)} levels>"
    return str(value)


# ---------------------------------------------------------------- shapes on virtual ranks (root = 0)


def _binomial(n: int) -> Children:
    """ADAPT/Open MPI bmtree: parent = v without its highest bit; children v + mask, mask increasing."""
    kids: Children = [[] for _ in range(n)]
    for v in range(1, n):
        kids[v ^ (1 << (v.bit_length() - 1))].append(v)
    return kids


def _in_order_binomial(n: int) -> Children:
    """Parent = v without its lowest bit, so each subtree is the contiguous range [v, v + lowbit(v))."""
    kids: Children = [[] for _ in range(n)]
    for v in range(1, n):
        kids[v & (v - 1)].append(v)
    return kids


def _knomial(n: int, radix: int) -> Children:
    """Parent = v minus its lowest non-zero base-radix digit; children ascend (contiguous subtrees)."""
    kids: Children = [[] for _ in range(n)]
    for v in range(1, n):
        weight = 1
        while (v // weight) % radix == 0:
            weight *= radix
        kids[v - ((v // weight) % radix) * weight].append(v)
    return kids


def _ompi_kary(n: int, fanout: int) -> Children:
    """Open MPI's k-ary tree (ADAPT binary/linear): level L has k**L ranks; v's children are v + k**L * j."""
    kids: Children = [[] for _ in range(n)]
    start, width = 0, 1
    while start < n:
        for v in range(start, min(start + width, n)):
            for j in range(1, fanout + 1):
                if v + width * j >= n:
                    break
                kids[v].append(v + width * j)
        start += width
        width *= fanout
    return kids


def _pipeline(n: int) -> Children:
    return [[v + 1] if v + 1 < n else [] for v in range(n)]


def _chain(n: int, chains: int) -> Children:
    """`chains` near-equal chains of consecutive ranks hanging from the root (longer chains first)."""
    kids: Children = [[] for _ in range(n)]
    if n < 2:
        return kids
    count = min(chains, n - 1)
    base, extra = divmod(n - 1, count)
    start = 1
    for i in range(count):
        length = base + (1 if i < extra else 0)
        kids[0].append(start)
        for v in range(start, start + length - 1):
            kids[v].append(v + 1)
        start += length
    return kids


def _in_order_binary(m: int) -> tuple[int, Children]:
    """NCCL's in-order binary tree on positions 1..m (index 0 unused): odd positions are the leaves."""
    kids: Children = [[] for _ in range(m + 1)]
    for p in range(2, m + 1, 2):
        half = (p & -p) >> 1
        kids[p].append(p - half)
        while half and p + half > m:
            half >>= 1
        if half:
            kids[p].append(p + half)
    top = 1 << (m.bit_length() - 1)
    return top, kids


def _two_tree(n: int, which: int) -> Children:
    """Root 0 above NCCL's double binary tree on virtual ranks 1..n-1: tree 1 mirrored or shifted by one.

    Tree 0 is the in-order binary tree (odd positions are leaves); tree 1 moves the rank at position p
    to m+1-p (m = n-1 even) or p % m + 1 (m odd), so ranks interior in tree 0 are leaves in tree 1.
    """
    kids: Children = [[] for _ in range(n)]
    m = n - 1
    if m < 1:
        return kids
    top, pos_kids = _in_order_binary(m)
    if which == 0:
        rank_at = list(range(m + 1))
    else:  # position q of tree 1 holds the rank that sits at sigma^-1(q) in tree 0
        sigma = [0] + [(m + 1 - p) if m % 2 == 0 else (p % m + 1) for p in range(1, m + 1)]
        rank_at = [0] * (m + 1)
        for p in range(1, m + 1):
            rank_at[sigma[p]] = p
    kids[0].append(rank_at[top])
    for q in range(1, m + 1):
        kids[rank_at[q]] = [rank_at[c] for c in pos_kids[q]]
    return kids


def multi_tree_count(n: int, fanout: int) -> int:
    """How many trees `multi_tree` builds on n ranks: `fanout`, at most n - 1 (fewer than 3 ranks: 1)."""
    if n < 3:
        return 1
    return max(2, min(fanout, n - 1))


@functools.lru_cache(maxsize=8)
def _multi_trees(n: int, k: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The children lists of all K trees of `multi_tree` on n virtual ranks (root 0), see `_multi_tree`;
    built together (the short classes' overflow is shared out over all trees) and cached, as build_all
    asks for them one at a time (a few entries: at 64K ranks each holds K x n lists)."""
    s = (n - 1) % k
    classes = [[r for r in range(1, n) if (r - 1) % k == j] for j in range(k)]
    # with s >= 2 the trees of the short classes (j >= s) lack one interior rank: their last s - 1 ranks
    # are adopted by the last ranks of the long classes (j < s), which forward s - 1 children in their own
    # tree and so have K - s + 1 to spare (s (K - s + 1) >= (K - s)(s - 1) always)
    hosts = [c[-1] for c in classes[:s]] if s >= 2 else []
    spare = {h: k - (s - 1) for h in hosts}
    out: list[tuple[tuple[int, ...], ...]] = []
    for j in range(k):
        mine = classes[j]
        first = [h for h in hosts if (h - 1) % k != j]  # hosts early among the leaves: never overflow
        taken = set(mine) | set(first)
        order = mine + first + [r for r in range(1, n) if r not in taken]
        kids: list[list[int]] = [[] for _ in range(n)]
        kids[0].append(order[0])
        heap = min(len(order), len(mine) * k + 1)  # the positions the K-ary heap holds
        for pos in range(len(order)):
            if k * pos + 1 >= heap:  # no children from here on
                break
            kids[order[pos]] = [order[c] for c in range(k * pos + 1, min(k * pos + k + 1, heap))]
        for rank in order[heap:]:  # the short class's overflow: to the host with the most to spare
            host = max(hosts, key=lambda h: (spare[h], -h))
            spare[host] -= 1
            kids[host].append(rank)
        out.append(tuple(tuple(c) for c in kids))
    return tuple(out)


def _multi_tree(n: int, fanout: int, which: int) -> Children:
    """Tree `which` of `multi_tree`: K = multi_tree_count trees from root 0, each carrying 1/K of the
    message. Tree j's interior ranks are those with (r - 1) % K == j, first in a complete K-ary heap over
    ranks 1..n-1 whose other positions are the leaves. Where (n - 1) mod K > 1 the shorter classes cannot
    fill their heaps; their last few ranks hang from the longer classes' last ranks, which have children
    to spare. So every rank sends at most K children's shares in all (bandwidth-optimal, as two_tree for
    K = 2) and the trees are about log_K(n) deep, which bounds how many detours one root-to-leaf path
    meets (bench/RESULTS.md, "Slack under noise: more trees, shallower")."""
    k = multi_tree_count(n, fanout)
    if not 0 <= which < k:
        raise ValueError(f"multi_tree on {n} ranks with fanout {fanout} has {k} trees; which must be in 0..{k - 1}")
    if n < 2:
        return [[] for _ in range(n)]
    if n < 3:
        return [[1], []]
    return [list(c) for c in _multi_trees(n, k)[which]]


def _shape(kind: str, n: int, params: dict[str, Any]) -> Children:
    """Children lists of a single-tree shape on virtual ranks 0..n-1 rooted at 0."""
    if kind == "binomial":
        return _binomial(n)
    if kind == "in_order_binomial":
        return _in_order_binomial(n)
    if kind == "binary":
        return _ompi_kary(n, params["fanout"])
    if kind == "linear":
        return _ompi_kary(n, params["fanout"])
    if kind == "pipeline":
        return _pipeline(n)
    if kind == "chain":
        return _chain(n, params["chains"])
    if kind == "knomial":
        return _knomial(n, params["radix"])
    if kind == "two_tree":
        return _two_tree(n, params["which"])
    if kind == "multi_tree":
        return _multi_tree(n, params["fanout"], params["which"])
    raise AssertionError(kind)


def _topo(size: int, root: int, levels: tuple[tuple[int, ...], ...], inner: str, intra: str) -> Children:
    """Hierarchical tree: at each level link group leaders with `inner`, then recurse; `intra` innermost.

    Groups in a parent group are ordered by lowest rank, rotated so the leader's own group comes first;
    a group's leader is the root if it holds it, else its member at the position the leader has in its
    own group (modulo the group's size): its lowest rank for a root that is its group's lowest, and
    trees rooted at different ranks of a node (Allreduce's roots) are led by different ranks of every
    node, which shares out the leaders' folding and sending. Outer-level edges come first.
    """
    links = _TopoLinks(size, root, levels, inner, intra)
    return [list(links.neighbours(x)[1]) for x in range(size)]


# ---------------------------------------------------------------- validation, caching, public API


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r}") from None


def _check_kind(kind: Any, allowed: Sequence[str] = KINDS) -> str:
    if kind not in allowed:
        raise ValueError(f"unknown tree kind {kind!r}; valid kinds: {', '.join(allowed)}")
    return kind


def _normalize_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with defaults filled in and values checked; ValueError names the valid choices."""
    valid = _DEFAULTS[kind]
    for name in params:
        if name not in valid:
            choices = ", ".join(valid) or "none"
            raise ValueError(f"unknown parameter {name!r} for tree kind {kind!r}; valid parameters: {choices}")
    out = {**valid, **params}
    for (k, name), low in _INT_MIN.items():
        if k == kind:
            out[name] = _int(f"{kind} parameter {name}", out[name])
            if out[name] < low:
                raise ValueError(f"{kind} parameter {name} must be an int >= {low}, got {out[name]!r}")
    if kind == "two_tree" and out["which"] not in (0, 1):
        raise ValueError(f"two_tree parameter which must be 0 or 1, got {out['which']!r}")
    if kind == "topo":
        for name in ("inner", "intra"):
            if not isinstance(out[name], str):
                raise ValueError(f"topo parameter {name} must be a shape string such as 'knomial:radix=4'")
            try:
                shape, shape_params = parse_algorithm(out[name])
                _check_kind(shape, SHAPES + ("two_tree",) if name == "inner" else SHAPES)
                _normalize_params(shape, shape_params)
            except ValueError as exc:
                raise ValueError(f"topo parameter {name}={out[name]!r}: {exc}") from None
    return out


def check_params(kind: str, params: dict[str, Any]) -> None:
    """Validate a tree kind and its parameters as a setting gives them (`parse_algorithm`'s output), with
    no size yet: ValueError naming the valid kinds or parameters. `topo` levels come from the topology
    (ADAPTCOLL_TOPOLOGY or discovery), not from the algorithm string."""
    _check_kind(kind)
    if kind == "topo" and "levels" in params:
        raise ValueError(
            "topo levels come from ADAPTCOLL_TOPOLOGY or discovery, not from the algorithm; "
            "valid parameters here: inner, intra"
        )
    _normalize_params(kind, params)


def _topo_levels(levels: Any, size: int) -> tuple[tuple[int, ...], ...]:
    """Per-level group ids from a Topology or a sequence of per-rank id sequences, checked against size."""
    if isinstance(levels, Topology):  # its ids were made ints when it was made: O(1) per root, not O(size)
        out = levels.levels
    else:
        if isinstance(levels, (str, bytes)):
            raise ValueError(
                "topo parameter levels must be a Topology or a tuple of per-level group-id tuples, "
                "not a string (use adaptcoll.plans.topology.parse)"
            )
        try:
            out = tuple(tuple(_int("group id", g) for g in level) for level in levels)
        except TypeError:
            raise ValueError(
                "topo parameter levels must be a Topology or a tuple of per-level group-id tuples"
            ) from None
    for i, level in enumerate(out):
        if len(level) != size:
            raise ValueError(f"topo levels[{i}] has {len(level)} group ids but the tree has {size} ranks")
    return out


def build(kind: str = "binomial", size: int = 1, root: int = 0, **params: Any) -> Tree:
    """The validated, cached tree of `kind` over `size` ranks rooted at `root` (two_tree: tree `which`=0)."""
    _check_kind(kind)
    size = _int("size", size)
    root = _int("root", root)
    if size < 1:
        raise ValueError(f"tree size must be >= 1, got {size}")
    if not 0 <= root < size:
        raise ValueError(f"root must be in 0..{size - 1}, got {root}")
    full = _normalize_params(kind, params)
    if kind == "topo":
        levels = full["levels"]
        if not isinstance(levels, Topology):
            full["levels"] = _topo_levels(levels, size)
        elif levels.size not in (None, size):
            raise ValueError(f"topo levels has {levels.size} group ids per level but the tree has {size} ranks")
    return _build_cached(kind, size, root, tuple(sorted(full.items())))


@functools.lru_cache(maxsize=256)
def _build_cached(kind: str, size: int, root: int, params: Params) -> Tree:
    args = dict(params)
    labels = None
    if kind == "topo":
        levels = _topo_levels(args["levels"], size)
        names = args["levels"].names if isinstance(args["levels"], Topology) else [f"L{i}" for i in range(len(levels))]
        if size >= LAZY_TOPO_FROM:
            return _TopoTree(size, root, params, levels, names)
        children = _topo(size, root, levels, args["inner"], args["intra"])
        labels = _topo_labels(levels, names, size)
    elif root:  # the tree rooted at 0, rotated (built and checked once per kind, size and params)
        return _RotatedTree(_build_cached(kind, size, 0, params), root)
    else:
        children = _shape(kind, size, args)
    return Tree(kind, size, root, params, children, labels)


def build_all(kind: str = "binomial", size: int = 1, root: int = 0, **params: Any) -> tuple[Tree, ...]:
    """(tree,) for single-tree kinds; (tree 0, tree 1) for "two_tree" and for "topo" with inner="two_tree";
    "multi_tree": its K trees (multi_tree_count); `which` may not be given then."""
    if kind == "multi_tree":
        if "which" in params:
            raise ValueError("build_all('multi_tree') returns every tree; do not pass which")
        fanout = _normalize_params(kind, dict(params))["fanout"]
        count = multi_tree_count(_int("size", size), fanout)
        return tuple(build(kind, size, root, which=w, **params) for w in range(count))
    if kind == "two_tree":
        if "which" in params:
            raise ValueError("build_all('two_tree') returns both trees; do not pass which")
        return tuple(build(kind, size, root, which=w, **params) for w in (0, 1))
    if kind == "topo" and _two_tree_inner(params.get("inner", "")):
        if "which" in parse_algorithm(params["inner"])[1]:
            raise ValueError("build_all('topo', inner='two_tree') returns both trees; do not pass which")
        return tuple(build(kind, size, root, **{**params, "inner": f"two_tree:which={w}"}) for w in (0, 1))
    return (build(kind, size, root, **params),)


def _two_tree_inner(inner: Any) -> bool:
    """A topo tree's `inner` is two_tree: build_all gives the pair (each level between group leaders
    linked by tree 0, resp. tree 1, of the two trees; the groups' insides alike in both)."""
    return isinstance(inner, str) and inner.partition(":")[0].strip() == "two_tree"


def parse_value(text: str) -> Any:
    """A tree parameter's value as written: an int where it parses as one, else the text."""
    try:
        return int(text)
    except ValueError:
        return text


def parse_algorithm(spec: str) -> tuple[str, dict[str, Any]]:
    """Split a setting "kind[:name=value,...]" such as "knomial:radix=4" into (kind, params); ints parsed."""
    if not isinstance(spec, str):
        raise ValueError(f"tree algorithm must be a string like 'knomial:radix=4', got {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    kind = _check_kind(kind.strip())
    params: dict[str, Any] = {}
    if rest.strip():
        for item in rest.split(","):
            name, eq, value = item.partition("=")
            name = name.strip()
            if not eq or not name:
                raise ValueError(
                    f"bad tree parameter {item!r} in {spec!r}; expected kind[:name=value,...], e.g. 'knomial:radix=4'"
                )
            if name not in _DEFAULTS[kind]:
                choices = ", ".join(_DEFAULTS[kind]) or "none"
                raise ValueError(f"unknown parameter {name!r} for tree kind {kind!r}; valid parameters: {choices}")
            params[name] = parse_value(value.strip())
    return kind, params


# ---------------------------------------------------------------- DOT rendering

_COLORS = ("black", "red3", "blue3", "darkgreen")


def to_dot(trees: Sequence[Tree]) -> str:
    """One DOT digraph for `trees` over the same ranks (several trees: one edge colour/style per tree)."""
    first = trees[0]
    title = " / ".join(t.header() for t in trees)
    lines = [
        f'digraph "{first.kind}_P{first.size}_root{first.root}" {{',
        f'  graph [label="{title}", labelloc=t, fontsize=11];',
        "  node [shape=circle, fontsize=10];",
        f"  {first.root} [style=filled, fillcolor=gold];",
    ]
    levels: tuple[tuple[int, ...], ...] = ()
    if first.kind == "topo":
        levels = _topo_levels(dict(first.params)["levels"], first.size)
        lines.extend(_clusters(list(range(first.size)), levels, 0, "  ", dict(first.params)["levels"]))
    for index, tree in enumerate(trees):
        style = ""
        if len(trees) > 1:
            style = f", color={_COLORS[index % len(_COLORS)]}" + (", style=dashed" if index else "")
        for p in range(tree.size):
            for pos, c in enumerate(tree.children(p), 1):
                extra = style
                crossed = next((i for i, lv in enumerate(levels) if lv[p] != lv[c]), None)
                if crossed is not None:
                    extra += f", color={_COLORS[1 + crossed % 3]}, penwidth=2"
                lines.append(f'  {p} -> {c} [label="{pos}"{extra}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _clusters(
    members: list[int], levels: tuple[tuple[int, ...], ...], level: int, indent: str, topology: Any, prefix: str = "c"
) -> list[str]:
    if level == len(levels):
        return [indent + "; ".join(map(str, members)) + ";"] if members else []
    names = topology.names if isinstance(topology, Topology) else [f"L{i}" for i in range(len(levels))]
    split: dict[int, list[int]] = {}
    for r in members:
        split.setdefault(levels[level][r], []).append(r)
    out = []
    for gid, group in split.items():
        name = f"{prefix}_{gid}"
        out.append(f'{indent}subgraph cluster_{name} {{ label="{names[level]} {gid}";')
        out.extend(_clusters(group, levels, level + 1, indent + "  ", topology, name))
        out.append(indent + "}")
    return out
