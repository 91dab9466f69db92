"""Segment plans: whole elements per segment, the tag-space and max_segments caps, tags per segment."""

from __future__ import annotations

from adaptcoll.plans.segments import plan_segments


def test_plan_rounds_to_whole_elements_and_respects_tag_space():
    p = plan_segments(count=100, itemsize=8, segment_bytes=20, tag_base=0, tag_space=1000)
    assert p.seg_count == 2 and p.nseg == 50
    p = plan_segments(count=10, itemsize=16, segment_bytes=1, tag_base=0, tag_space=1000)
    assert p.seg_count == 1  # at least one element
    p = plan_segments(count=1000, itemsize=1, segment_bytes=1, tag_base=7, tag_space=9)
    assert p.nseg <= 9 and sum(p.bounds(s)[1] - p.bounds(s)[0] for s in range(p.nseg)) == 1000
    assert len({p.tag(s) for s in range(p.nseg)}) == p.nseg
    assert plan_segments(0, 8, 64, 3, 10).nseg == 0


def test_max_segments_grows_segments():
    p = plan_segments(count=1000, itemsize=4, segment_bytes=40, tag_base=0, tag_space=1 << 15, max_segments=4)
    assert p.nseg == 4 and p.seg_count == 250
    p = plan_segments(count=1000, itemsize=4, segment_bytes=40, tag_base=0, tag_space=1 << 15, max_segments=0)
    assert p.nseg == 100
    assert p.bounds(p.nseg - 1) == (990, 1000)
