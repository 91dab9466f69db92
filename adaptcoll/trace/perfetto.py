"""The merged timeline as Chrome/Perfetto trace-event JSON, and a validator for that format.

Conventions (shared with the simulator's traces): a "traceEvents" list; "pid" 0, "tid" the rank, with
a "thread_name" metadata event "rank N"; one "X" complete event per transfer, fold and idle span ("ts"
and "dur" in microseconds, "cat" one of send/recv/fold/idle, args {"peer", "seg", "bytes"}); flow
events "s" (on the send) and "f" (on the receive, binding to the enclosing slice) sharing an "id".

Trace viewers require the slices of one thread to nest (Perfetto drops or misdraws the others), but
transfers in flight overlap (windows). So a slice that would overlap the one open before it without
nesting is clipped to start where that one ends (args "clipped_us" says by how much; "latency_us"
keeps the transfer's full duration, and the PNG timeline draws true extents). Folds and idle spans,
which happen between completions, nest inside transfers. Slices are also narrowed by a few ns per
nesting level, so rounding microseconds back to nanoseconds cannot break the nesting.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from typing import Any, Optional

from .merge import Slice, Timeline

__all__ = ["CATEGORIES", "to_trace_events", "validate"]

CATEGORIES = ("send", "recv", "fold", "idle")
_MARGIN_NS = 2


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _nested(slices: list[Slice]) -> list[tuple[Slice, int, int, int, int]]:
    """(slice, start, end, depth, clipped) with one rank's slices laid out to nest (see the module doc)."""
    heap = [(s.start, -s.end, i, s.start) for i, s in enumerate(slices)]
    heapq.heapify(heap)
    stack: list[int] = []  # ends of the open slices, innermost last
    out = []
    while heap:
        start, neg_end, i, original = heapq.heappop(heap)
        end = -neg_end
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:  # overlaps the innermost open slice without nesting: clip
            heapq.heappush(heap, (stack[-1], neg_end, i, original))
            continue
        out.append((slices[i], start, end, len(stack), start - original))
        stack.append(end)
    return out


def _narrowed(start: int, end: int, depth: int) -> tuple[int, int]:
    """Shrink by 2*depth ns at the start and 2*depth+2 at the end: children stay >= 2 ns inside their
    parent and siblings >= 2 ns apart, whatever the rounding (degenerate slices collapse to a point)."""
    a, b = start + _MARGIN_NS * depth, end - _MARGIN_NS * (depth + 1)
    if b < a:
        mid = (start + end) // 2
        return mid, mid
    return a, b


def to_trace_events(timeline: Timeline) -> dict[str, Any]:
    """The trace-event document of a merged timeline."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "adaptcoll"}}]
    for rank in timeline.ranks:
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": rank, "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": rank, "args": {"sort_index": rank}})
    by_rank: dict[int, list[Slice]] = defaultdict(list)
    for s in timeline.slices:
        by_rank[s.rank].append(s)
    flows: list[dict[str, Any]] = []
    for rank in sorted(by_rank):
        for s, start, end, depth, clipped in _nested(by_rank[rank]):
            a, b = _narrowed(start, end, depth)
            args: dict[str, Any] = {"peer": s.peer, "seg": s.seg, "bytes": s.nbytes, "op": s.op}
            if s.cat in ("send", "recv"):
                args["latency_us"] = _us(s.end - (s.posted if s.cat == "send" else s.start))
                if s.cat == "recv":
                    args["posted_us"] = _us(s.posted)
                if s.cat == "send":
                    args["forwarded"] = s.forwarded
            elif s.cat == "fold":
                args["dur_us"] = _us(s.end - s.start)
            else:
                args["sweeps"] = s.sweeps
            if clipped:
                args["clipped_us"] = _us(clipped)
            events.append(
                {
                    "ph": "X",
                    "name": s.name,
                    "cat": s.cat,
                    "pid": 0,
                    "tid": rank,
                    "ts": _us(a),
                    "dur": _us(b - a),
                    "args": args,
                }
            )
            if s.flow >= 0:  # at the slice's (narrowed) start: inside it, before any child
                phase = "s" if s.cat == "send" else "f"
                flow = {
                    "ph": phase,
                    "name": f"seg {s.seg}",
                    "cat": "flow",
                    "id": s.flow,
                    "pid": 0,
                    "tid": rank,
                    "ts": _us(a),
                }
                if phase == "f":
                    flow["bp"] = "e"
                flows.append(flow)
    events.extend(sorted(flows, key=lambda f: (f["id"], f["ph"] != "s")))
    other = {
        "tool": "python -m adaptcoll.trace",
        "clock": "aligned per rank to the lowest rank by ping-pong offsets (ns): see adaptcoll/trace/clock.py",
        "clock_offsets_ns": {str(r): {"offset": o, "error_bound": e} for r, (o, e) in sorted(timeline.offsets.items())},
        "operations": [
            {"index": o.index, "name": o.name, "bytes": o.nbytes, "segments": o.nseg, "ranks": list(o.members)}
            for o in timeline.operations
        ],
        "warnings": timeline.warnings,
    }
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


_REQUIRED = {
    "X": ("name", "ph", "ts", "dur", "pid", "tid"),
    "B": ("name", "ph", "ts", "pid", "tid"),
    "E": ("ph", "ts", "pid", "tid"),
    "b": ("name", "cat", "id", "ph", "ts", "pid"),
    "e": ("cat", "id", "ph", "ts", "pid"),
    "n": ("name", "cat", "id", "ph", "ts", "pid"),
    "s": ("name", "cat", "id", "ph", "ts", "pid", "tid"),
    "t": ("name", "cat", "id", "ph", "ts", "pid", "tid"),
    "f": ("name", "cat", "id", "ph", "ts", "pid", "tid"),
    "i": ("name", "ph", "ts", "pid"),
    "I": ("name", "ph", "ts", "pid"),
    "C": ("name", "ph", "ts", "pid", "args"),
    "M": ("name", "ph", "pid", "args"),
}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(doc: Any, conventions: bool = True) -> list[str]:
    """Problems with a trace-event document (an empty list if none).

    Checks the format: a "traceEvents" list; the keys each phase requires; finite numeric ts/dur, dur
    >= 0; B/E matched per thread; the complete and B/E slices of each thread properly nested (as
    Perfetto needs); flow ids with exactly one "s" and one "f", each inside a slice of its thread.
    With `conventions`, also adaptcoll's: "pid" 0, a "rank N" thread name per tid, X categories in
    CATEGORIES with args peer/seg/bytes, and flows from a send slice to a recv slice.
    """
    problems: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ['the document is not an object with a "traceEvents" list']
    spans: dict[tuple[Any, Any], list[tuple[int, int, str]]] = defaultdict(list)
    stacks: dict[tuple[Any, Any], list[tuple[str, int]]] = defaultdict(list)
    flows: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    names: dict[Any, str] = {}
    for n, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict):
            problems.append(f"event {n}: not an object")
            continue
        ph = ev.get("ph")
        if ph not in _REQUIRED:
            problems.append(f"event {n}: unknown phase {ph!r}")
            continue
        missing = [k for k in _REQUIRED[ph] if k not in ev]
        if missing:
            problems.append(f"event {n} ({ph}): missing {', '.join(missing)}")
            continue
        if "ts" in ev and not _number(ev["ts"]):
            problems.append(f"event {n} ({ph}): ts {ev['ts']!r} is not a finite number")
            continue
        thread = (ev.get("pid"), ev.get("tid"))
        if ph == "X":
            if not _number(ev["dur"]) or ev["dur"] < 0:
                problems.append(f"event {n} (X {ev['name']!r}): dur {ev['dur']!r} is not a number >= 0")
                continue
            start = round(ev["ts"] * 1000)
            spans[thread].append((start, start + round(ev["dur"] * 1000), str(ev.get("cat", ""))))
            if conventions:
                problems.extend(_convention_problems(n, ev))
        elif ph == "B":
            stacks[thread].append((ev["name"], round(ev["ts"] * 1000)))
        elif ph == "E":
            if not stacks[thread]:
                problems.append(f"event {n} (E): no open B on pid {thread[0]} tid {thread[1]}")
                continue
            name, start = stacks[thread].pop()
            end = round(ev["ts"] * 1000)
            if end < start:
                problems.append(f"event {n} (E): ends before its B {name!r} began")
            spans[thread].append((start, end, ""))
        elif ph in ("s", "t", "f"):
            flows[ev["id"]].append(ev)
        elif ph == "M" and ev["name"] == "thread_name":
            names[thread] = str(ev["args"].get("name", ""))
    for thread, stack in stacks.items():
        for name, _ in stack:
            problems.append(f"B {name!r} on pid {thread[0]} tid {thread[1]} never ends")
    nesting = {thread: _nesting(thread, items, problems) for thread, items in spans.items()}
    starts = {thread: [x[0] for x in ordered] for thread, ordered in nesting.items()}
    for fid, evs in flows.items():
        phases = sorted(e["ph"] for e in evs if e["ph"] != "t")
        if phases != ["f", "s"]:
            problems.append(f"flow {fid!r}: expected one 's' and one 'f', got {phases}")
            continue
        for e in evs:
            thread = (e["pid"], e["tid"])
            cat = _enclosing(nesting.get(thread, []), starts.get(thread, []), round(e["ts"] * 1000))
            if cat is None:
                problems.append(
                    f"flow {fid!r} ({e['ph']}): no slice on pid {thread[0]} tid {thread[1]} at ts {e['ts']}"
                )
            elif conventions and cat != ("send" if e["ph"] == "s" else "recv"):
                problems.append(f"flow {fid!r} ({e['ph']}): binds to a {cat!r} slice")
    if conventions:
        for thread in spans:
            if thread[0] != 0:
                problems.append(f"slices on pid {thread[0]}: adaptcoll traces use pid 0")
            if names.get(thread) != f"rank {thread[1]}":
                problems.append(f"tid {thread[1]}: thread_name should be 'rank {thread[1]}', got {names.get(thread)!r}")
    return problems


def _convention_problems(n: int, ev: dict[str, Any]) -> list[str]:
    out = []
    if ev.get("cat") not in CATEGORIES:
        out.append(f"event {n} (X {ev['name']!r}): cat {ev.get('cat')!r} is not one of {', '.join(CATEGORIES)}")
    args = ev.get("args")
    if not isinstance(args, dict) or any(k not in args for k in ("peer", "seg", "bytes")):
        out.append(f"event {n} (X {ev['name']!r}): args must hold peer, seg and bytes")
    return out


def _nesting(
    thread: tuple[Any, Any], items: list[tuple[int, int, str]], problems: list[str]
) -> list[tuple[int, int, str]]:
    """Check that one thread's slices nest; returns them sorted (parents before children)."""
    ordered = sorted(items, key=lambda x: (x[0], -x[1]))
    stack: list[tuple[int, int, str]] = []
    for item in ordered:
        while stack and stack[-1][1] <= item[0]:
            stack.pop()
        if stack and item[1] > stack[-1][1]:
            problems.append(
                f"pid {thread[0]} tid {thread[1]}: slice [{item[0]}, {item[1]}] ns overlaps "
                f"[{stack[-1][0]}, {stack[-1][1]}] ns without nesting"
            )
            continue
        stack.append(item)
    return ordered


def _enclosing(ordered: list[tuple[int, int, str]], starts: list[int], ts: int) -> Optional[str]:
    """The category of the innermost slice containing ts (start <= ts < end, or a point slice at ts).

    In properly nested slices sorted by (start, -end) that is the last one starting at or before ts
    that still contains it."""
    i = bisect.bisect_right(starts, ts) - 1
    while i >= 0:
        start, end, cat = ordered[i]
        if ts < end or start == end == ts:
            return cat
        i -= 1
    return None
