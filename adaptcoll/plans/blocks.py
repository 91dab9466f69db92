"""Block plans: a message made of p blocks (one per rank, any lengths), each cut into whole segments.

Allgather, Reduce_scatter_block and Reduce_scatter move whole blocks (rank r's contribution, rank r's
result), so every segment lies inside one block: block b (elements [displ_b, displ_b + count_b)) is cut
into ceil(count_b / seg_count) segments, the last one shorter. Segments are numbered block by block;
segment j of block b travels with tag offset j x p + b (`tag_offsets`) of a `SegmentPlan` holding p x
(the most segments of a block) tags (`tag_plan`), so that a tag means the same piece of the same block
on every rank: when ranks disagree about a block's length, a receive meets a message of another size
(MessageSizeError on every rank) rather than a piece of another block. The communicator's tag sequence
and the engine treat such an operation like any other. Plain data, no MPI.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from .segments import SegmentPlan

__all__ = ["BlockSegments", "block_segments", "plan_block_segments", "tag_plan"]


class BlockSegments(NamedTuple):
    """Segments of a message of contiguous blocks: `bounds[s]` = element range [lo, hi) of segment s,
    `first[b]` = the first segment of block b (`first[p]` = the number of segments), `displs[b]` =
    where block b starts, `counts[b]` its length."""

    bounds: tuple[tuple[int, int], ...]
    first: tuple[int, ...]
    displs: tuple[int, ...]
    counts: tuple[int, ...]
    seg_count: int
    tag_offsets: tuple[int, ...]
    """Segment j of block b travels with tag offset j x p + b (see the module docstring)."""
    ntags: int
    """Tags the operation holds: p x the most segments of one block (at least one)."""

    @property
    def nseg(self) -> int:
        """The number of segments (empty blocks have none)."""
        return self.first[-1]

    def segments(self, b: int) -> range:
        """The segments of block b."""
        return range(self.first[b], self.first[b + 1])


@functools.lru_cache(maxsize=256)
def block_segments(counts: tuple[int, ...], seg_count: int) -> BlockSegments:
    """Blocks of `counts` elements laid end to end, each cut into segments of `seg_count` elements."""
    if seg_count < 1:
        raise ValueError("seg_count must be >= 1")
    bounds: list[tuple[int, int]] = []
    first: list[int] = []
    displs: list[int] = []
    offsets: list[int] = []
    p = len(counts)
    lo = 0
    for b, n in enumerate(counts):
        first.append(len(bounds))
        displs.append(lo)
        bounds.extend((a, min(a + seg_count, lo + n)) for a in range(lo, lo + n, seg_count))
        offsets.extend(j * p + b for j in range(len(bounds) - first[-1]))
        lo += n
    first.append(len(bounds))
    most = max((first[b + 1] - first[b] for b in range(p)), default=0)
    return BlockSegments(
        tuple(bounds), tuple(first), tuple(displs), tuple(counts), seg_count, tuple(offsets), max(1, most * p)
    )


def plan_block_segments(
    counts: Sequence[int], itemsize: int, segment_bytes: int, tag_space: int, max_segments: int = 0
) -> BlockSegments:
    """Blocks of `counts` elements in segments of about `segment_bytes` bytes (whole elements, at least
    one), grown until a block has at most `max_segments` segments (0: no cap) and the tags (p x the
    most segments of a block) fit in `tag_space`."""
    if tag_space < len(counts):
        raise ValueError(f"tag_space {tag_space} is smaller than the {len(counts)} blocks")
    largest = max(counts, default=0)
    seg = max(1, min(segment_bytes // max(1, itemsize), largest))  # no segment larger than a block
    if max_segments > 0 and largest:
        seg = max(seg, -(-largest // max_segments))
    while max(-(-n // seg) for n in counts) * len(counts) > tag_space:
        seg = max(seg + 1, seg * 2)
    return block_segments(tuple(int(n) for n in counts), seg)


def tag_plan(blocks: BlockSegments, tag_base: int, tag_space: int) -> SegmentPlan:
    """A SegmentPlan holding the tags of `blocks` (`ntags` segments of `seg_count` elements, as if every
    block had the most segments and every segment were full: only its tags and sizes are used)."""
    return SegmentPlan(blocks.ntags * blocks.seg_count, blocks.seg_count, tag_base % tag_space, tag_space, 1)
