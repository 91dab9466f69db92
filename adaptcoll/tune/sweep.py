"""The tuner's sweep (every rank, under mpiexec): every (size, collective) point measured in turn
within the time budget, then rank 0 writes the tuning table. Started by `python -m adaptcoll.tune`
(adaptcoll.tune.cli), which parses the arguments before MPI starts.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import __version__
from ..comm import Intracomm
from ..runtime.settings import BLOCK_COLLECTIVES
from .candidates import candidates
from .choose import comm_tuning
from .config import format_bytes
from .exchange import mpi_library
from .files import cache_file, host_name
from .measure import Options, Point, entry_from, measure_point
from .table import Entry, Table, write

__all__ = ["run"]


class _Progress:
    """A progress bar on rank 0: rich's if installed, else plain lines on stderr."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.started = time.perf_counter()
        self._rich: Any = None
        self._task: Any = None
        if not enabled:
            return
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        self._rich = Progress(
            TextColumn("{task.description:<44}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            transient=False,
        )
        self._rich.start()
        self._task = self._rich.add_task("tuning", total=total)

    def step(self, label: str, result: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, advance=1, description=label)
            if result:
                self._rich.console.print(result)
            return
        elapsed = time.perf_counter() - self.started
        sys.stderr.write(f"[{self.done:>3}/{self.total}] {elapsed:6.1f}s {result or label}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


def run(args: argparse.Namespace, argv: Sequence[str], sizes: list[int], collectives: list[str]) -> int:
    """The measurement (every rank); rank 0 writes the table (args: the CLI's). Returns the exit code.
    An exception on any rank (a table that cannot be written, ...) aborts the whole job, never hangs it."""
    try:
        return _run(args, argv, sizes, collectives)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        if MPI.COMM_WORLD.Get_size() > 1:
            MPI.COMM_WORLD.Abort(1)
        raise


def _run(args: argparse.Namespace, argv: Sequence[str], sizes: list[int], collectives: list[str]) -> int:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    options = Options(min_gain=args.min_gain, min_ci=args.min_ci, dtype=args.dtype)
    comm = Intracomm(world)
    facts = comm_tuning(comm).facts
    itemsize = np.dtype(args.dtype).itemsize
    points = [
        Point(coll, nbytes, candidates(coll, size))
        for nbytes in sizes
        for coll in collectives
        if coll == "bcast" or (nbytes % itemsize == 0 and (coll not in BLOCK_COLLECTIVES or nbytes >= itemsize * size))
    ]  # Allgather / Reduce-scatter: a whole array of at least one element per rank
    width = max(len(c) for c in collectives)
    progress = _Progress(len(points), rank == 0 and not args.quiet)
    started = time.perf_counter()
    entries: list[Entry] = []
    try:
        for k, point in enumerate(points):
            elapsed = world.bcast(time.perf_counter() - started, root=0)
            share = max(0.0, 0.95 * args.budget - elapsed) / (len(points) - k)  # 5% for what estimates miss
            outcomes, _ = measure_point(world, comm, point, share, options)
            entry = entry_from(point, outcomes, facts.size, facts.nodes, facts.ranks_per_node, options)
            entries.append(entry)
            verdict = "adaptcoll" if entry.serve else "native"
            progress.step(
                f"{point.collective} {format_bytes(point.nbytes)}",
                f"{point.collective:<{width}} {format_bytes(point.nbytes):>5}: {verdict:<9} ratio {entry.ratio:.2f} "
                f"[CI {entry.ci_low:.2f}-{entry.ci_high:.2f}] best {entry.config.label(point.collective)} "
                f"({len(outcomes)} candidates)",
            )
    finally:
        progress.close()
    elapsed = time.perf_counter() - started
    if rank == 0:
        library = mpi_library()
        table = Table(
            library,
            tuple(entries),
            {"host": host_name(), "mpi_library": library, "cpus": os.cpu_count(), "python": platform.python_version()},
            time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            {
                "adaptcoll": __version__,
                "command": ["python", "-m", "adaptcoll.tune", *argv],
                "ranks": size,
                "ranks_per_core": facts.ranks_per_core,
                "budget_s": args.budget,
                "elapsed_s": round(elapsed, 1),
                "dtype": args.dtype,
                "min_gain": args.min_gain,
                "min_ci": args.min_ci,
            },
        )
        path = Path(args.output).expanduser() if args.output else cache_file(library)
        note = write(path, table, not args.no_merge)
        print(f"adaptcoll tuning table written to {path}{note} after {elapsed:.0f} s", flush=True)
    world.Barrier()
    return 0
