"""`python -m adaptcoll.tune`: measure native MPI against adaptcoll's candidate configurations on this
machine and write a tuning table; `python -m adaptcoll.tune show FILE [--plot PNG]` prints one.

    mpiexec -n 16 python -m adaptcoll.tune                       # 4K..64M, all five, ~5 minutes
    mpiexec -n 4 python -m adaptcoll.tune --sizes 1M..64M --collectives reduce --budget 60 -o t.json
    python -m adaptcoll.tune show ~/.cache/adaptcoll/tuning-*.json --plot tuning.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from ..runtime import settings
from .show import main as show_main
from .table import COLLECTIVES

__all__ = [
    "DEFAULT_SIZES",
    "BUDGET_PER_COLLECTIVE",
    "parse_sizes",
    "parse_collectives",
    "default_budget",
    "build_parser",
    "main",
]

DEFAULT_SIZES = "4K..64M"
BUDGET_PER_COLLECTIVE = 60.0
"""The default budget: this many seconds per collective measured (all five: 300 s)."""


def default_budget(collectives: Sequence[str]) -> float:
    """The sweep's default time budget for these collectives."""
    return BUDGET_PER_COLLECTIVE * len(collectives)


def parse_sizes(text: str) -> list[int]:
    """'4K..256M' (powers of 4 from 4K), '4K..256M:2' (powers of 2), or a list '4K,1M,16M' -> bytes."""
    text = text.strip()
    if ".." in text:
        span, _, step_text = text.partition(":")
        lo_text, _, hi_text = span.partition("..")
        lo, hi = settings.parse_size(lo_text, "--sizes"), settings.parse_size(hi_text, "--sizes")
        step = int(step_text) if step_text else 4
        if lo < 1 or hi < lo or step not in (2, 4):
            raise ValueError(f"--sizes {text!r}: expected LOW..HIGH[:2|:4] with 1 <= LOW <= HIGH")
        out, size = [], lo
        while size <= hi:
            out.append(size)
            size *= step
        return out
    sizes = sorted({settings.parse_size(t, "--sizes") for t in text.split(",") if t.strip()})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"--sizes {text!r}: expected sizes >= 1 byte")
    return sizes


def parse_collectives(text: str) -> list[str]:
    """'allgather,bcast' -> ['bcast', 'allgather'] (validated, in the order of table.COLLECTIVES)."""
    wanted = {t.strip().lower() for t in text.split(",") if t.strip()}
    bad = wanted - set(COLLECTIVES)
    if bad or not wanted:
        raise ValueError(f"--collectives {text!r}: choose from {', '.join(COLLECTIVES)}")
    return [c for c in COLLECTIVES if c in wanted]


def build_parser() -> argparse.ArgumentParser:
    """The tuner's command line."""
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.tune",
        description="Measure native MPI against adaptcoll's configurations and write a tuning table "
        "(run under mpiexec). 'python -m adaptcoll.tune show FILE [--plot PNG]' prints a table.",
    )
    p.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        help=f"LOW..HIGH (powers of 4; ':2' for 2) or a list (default {DEFAULT_SIZES})",
    )
    p.add_argument(
        "--collectives",
        default=",".join(COLLECTIVES),
        help=f"comma-separated subset of {','.join(COLLECTIVES)} (reduce_scatter: Reduce_scatter_block and "
        "Reduce_scatter; their size is the whole array)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"time for the whole sweep (default {BUDGET_PER_COLLECTIVE:g} per collective)",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="table to write (default: this machine's cache file, see README)",
    )
    p.add_argument(
        "--no-merge", action="store_true", help="replace FILE instead of merging with the entries it already has"
    )
    p.add_argument("--dtype", default="float32", help="element type of Reduce/Allreduce (default float32, MPI.SUM)")
    p.add_argument(
        "--min-gain",
        type=float,
        default=1.03,
        help="choose adaptcoll only if its median ratio native/adaptcoll is at least this (default 1.03)",
    )
    p.add_argument(
        "--min-ci",
        type=float,
        default=1.0,
        help="...and the low end of the 95%% confidence interval of that median at least this (default 1.0)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: `show` prints a table (no MPI), anything else tunes (under mpiexec)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "show":
        return show_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes)
        collectives = parse_collectives(args.collectives)
        if args.budget is None:
            args.budget = default_budget(collectives)
        if args.budget <= 0:
            raise ValueError("--budget: must be > 0 seconds")
    except ValueError as exc:
        parser.error(str(exc))
    # Imported here: importing mpi4py.MPI initializes MPI, which `show` and argument errors must not do.
    from .sweep import run

    return run(args, argv, sizes, collectives)


if __name__ == "__main__":
    sys.exit(main())
