"""The merged timeline drawn with matplotlib (optional: the `bench` extra): ranks on the y axis, each
with lanes for receives, sends and the rank's own work (folds, idle sweeps), coloured by phase; a bar
is labelled with its segment and peer ("3 \u21902": segment 3 from rank 2).

Unlike the Perfetto JSON, which must nest the slices of a rank, the picture draws every transfer at its
true extent, packing overlapping ones into extra lanes: a receive is light from its post until its
sender posted the matching send (waiting for the peer) and solid while the data moves.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from .merge import Slice, Timeline, TraceError

__all__ = ["COLOURS", "draw"]

COLOURS = {
    "recv": "#4C72B0",
    "recv posted": "#C5D3EA",
    "send": "#DD8452",
    "forward": "#B5541B",
    "fold": "#55A868",
    "idle": "#B8B8B8",
}
"""Colour of each phase."""


def _lanes(items: list[Slice], begin: Any) -> list[list[Slice]]:
    """Pack intervals into as few lanes as possible (first lane free at the interval's start)."""
    lanes: list[list[Slice]] = []
    ends: list[int] = []
    for s in sorted(items, key=begin):
        b = begin(s)
        for i, e in enumerate(ends):
            if e <= b:
                lanes[i].append(s)
                ends[i] = s.end
                break
        else:
            lanes.append([s])
            ends.append(s.end)
    return lanes


def draw(timeline: Timeline, path: str | Path, title: Optional[str] = None, arrows: bool = True) -> None:
    """Write the timeline as an image (PNG, or any format matplotlib infers from the suffix)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise TraceError(
            "--png needs matplotlib, which is not installed: pip install 'adaptcoll[bench]' (or matplotlib)"
        ) from None
    by_rank: dict[int, dict[str, list[Slice]]] = defaultdict(lambda: defaultdict(list))
    for s in timeline.slices:
        by_rank[s.rank]["work" if s.cat in ("fold", "idle") else s.cat].append(s)
    rows: list[tuple[int, str, list[Slice]]] = []  # (rank, lane kind, slices), top to bottom
    for rank in timeline.ranks:
        lanes = by_rank[rank]
        rows += [(rank, "recv", lane) for lane in _lanes(lanes["recv"], lambda s: s.posted)]
        rows += [(rank, "send", lane) for lane in _lanes(lanes["send"], lambda s: s.start)]
        rows.append((rank, "work", lanes["work"]))
    span = max((s.end for s in timeline.slices), default=1) or 1
    scale, unit = (1e-6, "ms") if span > 2e6 else (1e-3, "us")
    fig_h = 1.2 + 0.24 * len(rows) + 0.2 * len(timeline.ranks)
    fig, ax = plt.subplots(figsize=(14, fig_h))
    row_y = _row_ys(rows)
    for i, (rank, _, lane) in enumerate(rows):
        if i and rank != rows[i - 1][0]:
            ax.axhline(row_y[i] - 0.8, color="#DDDDDD", linewidth=0.6)
        for s in lane:
            _bar(ax, s, row_y[i], scale, span)
    if arrows:
        _arrows(ax, timeline, rows, row_y, scale)
    ticks = row_y
    labels = [f"rank {rank} {kind if kind != 'work' else 'fold/idle'}" for rank, kind, _ in rows]
    y = (row_y[-1] + 1.0) if row_y else 1.0
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(y - 0.4, -0.6)
    ax.set_xlim(0, span * scale * 1.01)
    ax.set_xlabel(f"time ({unit}, clocks aligned to rank {timeline.ranks[0] if timeline.ranks else 0})")
    ax.grid(axis="x", color="#EEEEEE", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title or "; ".join(o.label for o in timeline.operations[:3]), fontsize=10)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in COLOURS.items()],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.9 / fig_h - 0.02),
        ncol=len(COLOURS),
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _bar(ax: Any, s: Slice, y: float, scale: float, span: int) -> None:
    h = 0.8
    if s.cat == "recv":
        if s.posted < s.start:
            ax.broken_barh(
                [(s.posted * scale, (s.start - s.posted) * scale)], (y - h / 2, h), color=COLOURS["recv posted"]
            )
        colour = COLOURS["recv"]
    elif s.cat == "send":
        colour = COLOURS["forward" if s.forwarded else "send"]
    else:
        colour = COLOURS[s.cat]
    begin = s.posted if s.cat == "send" else s.start
    ax.broken_barh([(begin * scale, max(s.end - begin, 0) * scale)], (y - h / 2, h), color=colour, linewidth=0)
    if s.seg >= 0 and (s.end - begin) > span / 60:
        label = str(s.seg) + {"recv": f" \u2190{s.peer}", "send": f" \u2192{s.peer}"}.get(s.cat, "")
        ax.text((begin + s.end) / 2 * scale, y, label, ha="center", va="center", fontsize=6, color="white")


def _arrows(
    ax: Any, timeline: Timeline, rows: list[tuple[int, str, list[Slice]]], row_y: list[float], scale: float
) -> None:
    """A faint arrow from each send's post to the end of its matching receive."""
    lane_y = {id(s): y for y, (_, _, lane) in zip(row_y, rows) for s in lane}
    sends = {s.flow: s for s in timeline.slices if s.cat == "send" and s.flow >= 0}
    for r in timeline.slices:
        if r.cat != "recv" or r.flow < 0 or r.flow not in sends:
            continue
        s = sends[r.flow]
        ax.annotate(
            "",
            xy=(r.end * scale, lane_y[id(r)]),
            xytext=(s.posted * scale, lane_y[id(s)]),
            arrowprops={"arrowstyle": "->", "color": "#555555", "alpha": 0.25, "linewidth": 0.5},
        )


def _row_ys(rows: list[tuple[int, str, list[Slice]]]) -> list[float]:
    """The y of each row: one unit per lane, a gap between ranks."""
    out: list[float] = []
    y, previous = 0.0, None
    for rank, _, _ in rows:
        if previous is not None and rank != previous:
            y += 0.6
        previous = rank
        out.append(y)
        y += 1.0
    return out
