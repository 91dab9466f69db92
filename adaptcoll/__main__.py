"""`python -m adaptcoll [options] <pyfile | -m mod | -c cmd | -> [args]`: run an unchanged mpi4py
program with adaptcoll's collectives, exactly as `python -m mpi4py` would run it.

adaptcoll.install() runs first, then mpi4py.run's own machinery runs the program (sys.argv, sys.path[0],
__main__), and an unhandled exception on any rank aborts the whole job instead of hanging it.
"""

from __future__ import annotations

import argparse
import atexit
import sys
from ast import literal_eval
from collections.abc import Sequence
from typing import Any, Optional

import mpi4py
from mpi4py.run import run_command_line, set_abort_status

from . import __version__
from .runtime import settings
from .runtime.counters import format_table

__all__ = ["main", "parse_args"]

_USAGE = """\
python -m adaptcoll [options] <pyfile> [arg] ...
   or: python -m adaptcoll [options] -m <mod> [arg] ...
   or: python -m adaptcoll [options] -c <cmd> [arg] ...
   or: python -m adaptcoll [options] - [arg] ..."""

_EPILOG = """\
SIZE is a byte count such as 65536, 64K or 1M. ALG is a tree kind (binomial, in_order_binomial, binary,
pipeline, chain, linear, knomial, topo, two_tree, multi_tree), optionally with parameters (knomial:radix=4), a
schedule file's weighted forests (forest:PATH), or 'native' to leave that collective to MPI. Options
override the ADAPTCOLL_* environment variables and must be the same on every rank. --stats prints to
stderr so the program's stdout is unchanged."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll", usage=_USAGE, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--algorithm", metavar="ALG", help="algorithm of all three collectives")
    p.add_argument("--segment-size", metavar="SIZE", help="segment size of all three collectives")
    for coll in settings.COLLECTIVES:
        p.add_argument(f"--{coll}-algorithm", metavar="ALG", help=f"algorithm of {coll}")
        p.add_argument(f"--{coll}-segment-size", metavar="SIZE", help=f"segment size of {coll}")
    p.add_argument(
        "--native-below", metavar="SIZE", help="messages smaller than this go to native MPI (all collectives)"
    )
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="any adaptcoll.configure() setting, e.g. --set reproducible=1 (repeatable)",
    )
    p.add_argument(
        "--stats",
        nargs="?",
        const="root",
        choices=("root", "all"),
        help="at exit print adaptcoll.stats_table() to stderr: rank 0's (default), or every rank's, "
        "gathered to rank 0 and printed in rank order with each line prefixed by its rank",
    )
    p.add_argument(
        "-rc",
        "--rc",
        metavar="KEY=VALUE,...",
        action="append",
        default=[],
        help="set mpi4py.rc.KEY=VALUE before MPI starts (as python -m mpi4py -rc)",
    )
    p.add_argument("--version", action="store_true", help="show adaptcoll's version and exit")
    return p


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(adaptcoll options, program and its arguments): options end at the first -m/-c/-/non-option."""
    argv = list(argv)
    takes_value = {"--algorithm", "--segment-size", "--native-below", "--set", "-rc", "--rc"} | {
        f"--{c}-{k}" for c in settings.COLLECTIVES for k in ("algorithm", "segment-size")
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-m", "-c", "-") or not arg.startswith("-"):
            break
        if arg == "--stats" and i + 1 < len(argv) and argv[i + 1] in ("root", "all"):
            i += 2
            continue
        i += 2 if arg in takes_value else 1
    return argv[:i], argv[i:]


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any], list[str]]:
    """(options, configure() keyword arguments, program command line); exits with usage on errors."""
    parser = _parser()
    own, program = _split(argv)
    opts = parser.parse_args(own)
    if opts.version:
        print(f"adaptcoll {__version__}")
        sys.exit(0)
    if not program:
        parser.error("no program given (a path, -m module, -c command or -)")
    if program[0] in ("-m", "-c") and len(program) < 2:
        parser.error(f"argument expected for {program[0]}")
    changes: dict[str, Any] = {}
    for coll in settings.COLLECTIVES:
        for key, general in (("algorithm", opts.algorithm), ("segment_size", opts.segment_size)):
            value = getattr(opts, f"{coll}_{key}") or general
            if value is not None:
                changes[f"{coll}_{key}"] = value
    if opts.native_below is not None:
        changes["native_below"] = opts.native_below
    for item in opts.set:
        key, eq, value = item.partition("=")
        if not eq:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        changes[key.strip().replace("-", "_")] = value
    try:  # validate before MPI starts, so a typo fails fast on every rank with a clear message
        with settings.configured(**changes):
            pass
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return opts, changes, program


def _rc(entries: Sequence[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for chunk in entries:
        for entry in chunk.split(","):
            key, _, val = entry.partition("=")
            if not key or not val:
                raise SystemExit(f"python -m adaptcoll: cannot parse rc option {entry!r}")
            try:
                values[key] = literal_eval(val)
            except (ValueError, SyntaxError):
                values[key] = val
    return values


_failed: list[bool] = []  # set when the program raised: then no rank may wait for the others at exit


def _print_stats(mode: str, world: Any) -> None:
    """--stats at exit, on stderr: rank 0's table ("root"), or every rank's gathered to rank 0 and
    printed there in rank order under one header, each line prefixed with its rank ("all")."""
    rank, size = world.Get_rank(), world.Get_size()
    table = format_table()
    if mode == "root":
        if rank == 0:
            sys.stderr.write(f"adaptcoll stats (rank 0):\n{table}\n")
            sys.stderr.flush()
        return
    if _failed:  # the job is about to abort: a gather could wait forever for a rank that never exits
        tables = {rank: table}
        header = f"adaptcoll stats (rank {rank} only: the program raised)"
    else:
        gathered = world.gather(table, root=0)
        if rank != 0:
            return
        tables = dict(enumerate(gathered))
        header = f"adaptcoll stats of every rank ({size} ranks, in rank order)"
    lines = [header + ":"]
    for r, text in sorted(tables.items()):
        lines.extend(f"[rank {r}] {line}" for line in text.splitlines())
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point of `python -m adaptcoll`."""
    opts, changes, program = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.rc:
        mpi4py.rc(**_rc(opts.rc))
    settings.configure(**changes)
    # Imported here, not at the top: importing mpi4py.MPI initializes MPI, which must wait for -rc.
    from mpi4py import MPI

    from .dropin import install

    install()
    if opts.stats:
        atexit.register(_print_stats, opts.stats, MPI.Intracomm(MPI.COMM_WORLD))
    try:
        run_command_line(program)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _failed.append(True)
        set_abort_status(exc)
        raise
    except KeyboardInterrupt as exc:
        _failed.append(True)
        set_abort_status(exc)
        raise
    except BaseException:
        _failed.append(True)
        set_abort_status(1)
        raise


if __name__ == "__main__":
    main()
