"""python -m adaptcoll.trace DIR [-o run.json] [--png timeline.png] [--op N]: merge the per-rank trace
files that ADAPTCOLL_TRACE=DIR wrote into one Chrome/Perfetto trace (open it at ui.perfetto.dev) and
a matplotlib timeline, and print where each rank's time went. No MPI needed."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from .merge import TraceError, load, merge, summary
from .perfetto import to_trace_events, validate
from .timeline import draw

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.trace",
        description="Merge adaptcoll's per-rank trace files (ADAPTCOLL_TRACE=DIR) into a Chrome/Perfetto "
        "trace and a timeline picture, and print where each rank's time went.",
    )
    p.add_argument("directory", metavar="DIR", help="the directory ADAPTCOLL_TRACE named")
    p.add_argument("-o", "--output", metavar="FILE", help="write the trace-event JSON here (open in ui.perfetto.dev)")
    p.add_argument("--png", metavar="FILE", help="draw the timeline with matplotlib (the 'bench' extra)")
    p.add_argument("--op", type=int, default=None, metavar="N", help="only operation N (numbers as printed)")
    p.add_argument(
        "--measured-clocks",
        action="store_true",
        help="align every rank with its measured ping-pong offset, even ranks that share a clock (same kernel)",
    )
    p.add_argument("--title", default=None, help="title of the picture")
    p.add_argument("--no-arrows", action="store_true", help="leave the send-to-receive arrows out of the picture")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the tool; returns the exit status (2 with a one-line message for a directory it cannot use)."""
    args = _parser().parse_args(argv)
    try:
        timeline = merge(load(args.directory), args.op, args.measured_clocks)
        if args.output:
            doc = to_trace_events(timeline)
            problems = validate(doc)
            if problems:  # a bug in the merge, not in the user's input: say so, still write the file
                print(
                    f"adaptcoll.trace: the JSON has {len(problems)} format problems, first: {problems[0]}",
                    file=sys.stderr,
                )
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(doc, separators=(",", ":")))
        if args.png:
            draw(timeline, args.png, args.title, arrows=not args.no_arrows)
    except TraceError as exc:
        print(f"python -m adaptcoll.trace: error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(summary(timeline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
