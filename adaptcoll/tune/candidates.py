"""The tuner's candidate configurations: one registry (`FAMILIES`) and one function (`candidates`).

A family is an algorithm setting with the segment shapes (segment size, segment cap) and Allreduce
root counts to try. A new algorithm is tuned by adding a family here; families whose algorithm this
build does not know (not in `settings.ALGORITHMS`) are skipped, so entries for algorithms being added
elsewhere can wait here. `signature` tells which candidates would run exactly the same messages for
a given communicator and message size (same trees, same segments), so the tuner times only one.
Allgather / Reduce-scatter have one family, the ring with `BLOCK_SHAPES` (their message size is the
whole array, cut into p blocks). No MPI here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..plans.blocks import plan_block_segments
from ..plans.segments import plan_segments
from ..plans.trees import KINDS, build_all, parse_algorithm
from ..runtime import settings
from .config import ServeConfig

__all__ = ["Family", "SHAPES", "BLOCK_SHAPES", "FAMILIES", "candidates", "signature", "itemsize_of"]

K, M = 1 << 10, 1 << 20

SHAPES: tuple[tuple[int, int], ...] = (
    (512 * K, 4),  # the shipped shape: few large segments (best when ranks share cores)
    (512 * K, 16),
    (256 * K, 0),  # no cap: ADAPT-style pipelines (best with a core per rank)
    (512 * K, 0),
    (2 * M, 0),
)
"""(segment size, max_segments) pairs tried by default."""
BLOCK_SHAPES: tuple[tuple[int, int], ...] = (
    (512 * K, 0),  # pipelined blocks
    (4 * M, 0),  # what an explicit threshold serves with under the shipped rule (defaults.RING)
    (32 * M, 0),  # one segment per block up to 32 MiB blocks (the rule's choice at 2 ranks)
)
"""The ring's (segment size, max_segments) tried for Allgather / Reduce-scatter (a segment never
exceeds a block, so at small sizes they are one run and timed once)."""


@dataclass(frozen=True)
class Family:
    """Candidates: `algorithm` x `shapes` x `roots` (roots only for Allreduce), for `collectives`,
    on communicators of at least `min_ranks` ranks."""

    algorithm: str
    collectives: tuple[str, ...] = settings.COLLECTIVES
    shapes: tuple[tuple[int, int], ...] = SHAPES
    roots: tuple[int, ...] = (0,)
    min_ranks: int = 2


FAMILIES: list[Family] = [
    Family("binomial", roots=(0, 1)),
    Family("pipeline"),
    Family("two_tree"),
    Family("binary", min_ranks=4),
    Family("knomial:radix=4", min_ranks=5),
    # Algorithms other work adds; tuned as soon as this build knows them (settings.ALGORITHMS).
    Family("ring", ("allreduce",), shapes=((512 * K, 0),)),
    Family("rabenseifner", ("allreduce",), shapes=((512 * K, 0),)),
    Family("shm", shapes=((512 * K, 0),)),
    Family("ring", settings.BLOCK_COLLECTIVES, shapes=BLOCK_SHAPES),
]
"""The registry of candidate families (order = preference among equal signatures)."""


def candidates(collective: str, comm_size: int, families: list[Family] | None = None) -> list[ServeConfig]:
    """Every candidate configuration for `collective` on `comm_size` ranks, registry order."""
    out: list[ServeConfig] = []
    for fam in FAMILIES if families is None else families:
        if collective not in fam.collectives or comm_size < fam.min_ranks:
            continue
        if fam.algorithm.partition(":")[0] not in settings.ALGORITHMS + settings.ALLREDUCE_ONLY:
            continue
        for segment, cap in fam.shapes:
            for roots in fam.roots if collective == "allreduce" else (0,):
                config = ServeConfig(fam.algorithm, segment, cap, roots)
                if config not in out:
                    out.append(config)
    return out


def itemsize_of(collective: str, dtype_itemsize: int) -> int:
    """Element size a collective's segments are cut in (Bcast cuts bytes)."""
    return 1 if collective == "bcast" else dtype_itemsize


def _tree_shape(algorithm: str, size: int, roots: tuple[int, ...]) -> Any:
    if algorithm.partition(":")[0].strip() not in KINDS:
        return algorithm  # not a tree (ring, rabenseifner, shm): never merged with another
    kind, params = parse_algorithm(algorithm)
    if kind == "topo":
        return algorithm  # needs the topology: never merged with another
    shape = []
    for root in roots:
        for tree in build_all(kind, size, root, **params):
            shape.append(tuple((tree.parent(r), tree.children(r)) for r in range(size)))
    return tuple(shape) if len(set(shape)) > 1 else tuple(shape[:1])  # identical trees: one tree


def signature(config: ServeConfig, collective: str, comm_size: int, nbytes: int, itemsize: int) -> Any:
    """What the candidate sends for this message: its trees and its segment plan (equal = same run)."""
    itemsize = itemsize_of(collective, itemsize)
    count = max(1, nbytes // itemsize)
    if collective in settings.BLOCK_COLLECTIVES:  # p blocks of the whole array, as make_buffers cuts them
        counts = (max(1, count // comm_size),) * comm_size
        blocks = plan_block_segments(counts, itemsize, config.segment_size, 1 << 30, config.max_segments)
        return (config.algorithm, blocks.seg_count)
    segment = max(itemsize, config.segment_size // itemsize * itemsize)
    plan = plan_segments(count, itemsize, segment, 0, 1 << 30, config.max_segments)
    if collective == "allreduce":
        n = min(comm_size, config.roots or comm_size)
        roots = tuple(k * comm_size // n for k in range(n))
    else:
        roots = (0,)
    return (_tree_shape(config.algorithm, comm_size, roots), plan.nseg, min(plan.seg_count, count))
