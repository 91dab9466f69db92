"""Perfetto / Chrome trace-event JSON of a simulated run, in the conventions of adaptcoll's real-run traces.

One process (pid 0) with one track per rank (tid = rank, named "rank N" by a thread_name metadata
event). Complete ("X") events with `ts`/`dur` in microseconds: cat "send" (the message on the
sender's link), "recv" (the message on the receiver's link), "fold" (a reduction on the CPU) and
"idle" (a noise detour: the CPU is taken away); args {"peer", "seg", "bytes"} (-1 where none).
Flow events "s" (at the send) and "f" (at the end of the matching receive) share an "id", so
Perfetto draws an arrow per message. Open the file at https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

from .timelines import Timeline
from .world import TraceLog

__all__ = ["trace_events", "write_trace"]


def trace_events(
    log: TraceLog,
    size: int,
    seg_of: Callable[[int], int],
    cpu_noise: Optional[Timeline] = None,
    end_s: float = 0.0,
) -> list[dict[str, Any]]:
    """The trace events of a run: metadata, transfers, folds, detours up to `end_s`, flows."""
    us = 1e6
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "adaptcoll.simulate"}},
    ]
    for r in range(size):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
    for src, dst, tag, nbytes, t0, t1, mid in log.sends:
        args = {"peer": dst, "seg": seg_of(tag), "bytes": nbytes}
        events.append(
            {"name": "send", "cat": "send", "ph": "X", "pid": 0, "tid": src, "ts": t0 * us, "dur": (t1 - t0) * us}
            | {"args": args}
        )
        events.append({"name": "message", "cat": "send", "ph": "s", "id": mid, "pid": 0, "tid": src, "ts": t0 * us})
    for dst, src, tag, nbytes, t0, t1, mid in log.recvs:
        args = {"peer": src, "seg": seg_of(tag), "bytes": nbytes}
        events.append(
            {"name": "recv", "cat": "recv", "ph": "X", "pid": 0, "tid": dst, "ts": t0 * us, "dur": (t1 - t0) * us}
            | {"args": args}
        )
        events.append(
            {"name": "message", "cat": "send", "ph": "f", "bp": "e", "id": mid, "pid": 0, "tid": dst, "ts": t1 * us}
        )
    for rank, tag, nbytes, t0, t1 in log.folds:
        args = {"peer": -1, "seg": seg_of(tag) if tag >= 0 else -1, "bytes": nbytes}
        events.append(
            {"name": "fold", "cat": "fold", "ph": "X", "pid": 0, "tid": rank, "ts": t0 * us, "dur": (t1 - t0) * us}
            | {"args": args}
        )
    if cpu_noise is not None and end_s > 0:
        for r in range(size):
            for t0, t1 in cpu_noise.detours(r, 0.0, end_s):
                lo = max(t0, 0.0)
                events.append(
                    {"name": "detour", "cat": "idle", "ph": "X", "pid": 0, "tid": r, "ts": lo * us}
                    | {"dur": (t1 - lo) * us, "args": {"peer": -1, "seg": -1, "bytes": 0}}
                )
    return events


def write_trace(path: Union[str, Path], events: list[dict[str, Any]], other: Optional[dict[str, Any]] = None) -> None:
    """Write a trace file: {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}."""
    doc = {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other or {}}
    Path(path).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
