"""Per-segment tracing of adaptcoll's collectives, and the tool that turns traces into timelines.

`ADAPTCOLL_TRACE=DIR` (or `adaptcoll.configure(trace=DIR)`, the same on all ranks) makes every rank
record, per operation, each segment event with a monotonic timestamp into `DIR/rankNNNNN.adtrace`
(`record`, `format`). `python -m adaptcoll.trace DIR -o run.json [--png timeline.png]` merges the
ranks into the Chrome/Perfetto trace-event format (`perfetto`) and draws a matplotlib timeline
(`timeline`). Importing this package does not import MPI (`attach` and `clock` do, and only the
decision layer imports them).
"""

from __future__ import annotations

from .record import flush

__all__ = ["flush"]
