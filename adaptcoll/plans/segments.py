"""Segment plans: how one message is cut into segments, and which tag each segment travels with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["SegmentPlan", "plan_segments", "plan_blocks"]


class SegmentPlan(NamedTuple):
    """`count` elements cut into segments of `seg_count` elements (the last one may be shorter).
    (A NamedTuple, not a frozen dataclass: every start makes one, and this is 5x cheaper to make.)

    Segment s travels with tag `(tag_base + s) % tag_space`. Within one operation every segment has
    its own tag (nseg <= tag_space), so segments may complete in any order; a tag is reused by a later
    operation only after the one holding it has finished (CommState.take_tags enforces it).
    An operation whose segments cross one link more than once (the ring allreduce) holds
    `tags_per_segment` tags per segment: `tag(s)` for s < ntags.
    """

    count: int  # type: ignore[assignment]  # (shadows tuple.count, which nothing here uses)
    seg_count: int
    tag_base: int = 0
    tag_space: int = 1 << 15
    tags_per_segment: int = 1

    @property
    def nseg(self) -> int:
        """Number of segments (0 for an empty message)."""
        return -(-self.count // self.seg_count) if self.count else 0

    @property
    def ntags(self) -> int:
        """Tags the operation holds (at least one, even for an empty message)."""
        return max(1, self.nseg * self.tags_per_segment)

    def bounds(self, s: int) -> tuple[int, int]:
        """Element range [lo, hi) of segment s."""
        lo = s * self.seg_count
        return lo, min(lo + self.seg_count, self.count)

    def tag(self, s: int) -> int:
        """The tag of segment s."""
        return (self.tag_base + s) % self.tag_space

    def tags(self, offsets: Sequence[int]) -> list[int]:
        """`[tag(o) for o in offsets]`, for protocols that lay out their messages once and reuse the layout."""
        base, space = self.tag_base, self.tag_space
        if base + self.ntags <= space:
            return [base + o for o in offsets]
        return [(base + o) % space for o in offsets]


def plan_segments(
    count: int, itemsize: int, segment_bytes: int, tag_base: int, tag_space: int, max_segments: int = 0
) -> SegmentPlan:
    """Plan `count` elements of `itemsize` bytes in segments of about `segment_bytes` bytes.

    Segments hold whole elements (at least one). Segments grow when the message would otherwise need
    more than `max_segments` (if set) or more segments than there are tags (nseg <= tag_space always):
    the operation still works, with larger segments.
    """
    if tag_space < 1:
        raise ValueError("tag_space must be >= 1")
    seg_count = max(1, segment_bytes // max(1, itemsize))
    cap = min(tag_space, max_segments) if max_segments > 0 else tag_space
    if count and -(-count // seg_count) > cap:
        seg_count = -(-count // cap)
    return SegmentPlan(count=count, seg_count=seg_count, tag_base=tag_base % tag_space, tag_space=tag_space)


def plan_blocks(
    count: int,
    itemsize: int,
    segment_bytes: int,
    blocks: int,
    tag_base: int,
    tag_space: int,
    max_segments: int = 0,
    tags_per_segment: int = 1,
) -> SegmentPlan:
    """A plan whose segments tile `blocks` blocks: block b is segments [b*nseg//blocks, (b+1)*nseg//blocks).

    For the bandwidth-optimal allreduces (ring, recursive halving), where each rank owns a block: about
    k segments of about `segment_bytes` per block (at most `max_segments` if set), so block boundaries
    fall on segment boundaries and blocks differ by at most one segment (a message of fewer segments
    than blocks leaves some empty). Segments grow when nseg * tags_per_segment would exceed the tag space.
    """
    if blocks < 1 or tags_per_segment < 1:
        raise ValueError("blocks and tags_per_segment must be >= 1")
    max_nseg = tag_space // tags_per_segment
    if max_nseg < 1:
        raise ValueError(f"tag_space {tag_space} holds fewer than the {tags_per_segment} tags one segment needs")
    if count == 0:
        return SegmentPlan(0, 1, tag_base % tag_space, tag_space, tags_per_segment)
    per_block = -(-count // blocks)
    k = -(-per_block // max(1, segment_bytes // max(1, itemsize)))
    if max_segments > 0:
        k = min(k, max_segments)
    k = max(1, min(k, max_nseg // blocks))
    seg_count = -(-count // (blocks * k))
    if -(-count // seg_count) > max_nseg:
        seg_count = -(-count // max_nseg)
    return SegmentPlan(count, seg_count, tag_base % tag_space, tag_space, tags_per_segment)
