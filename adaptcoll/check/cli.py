"""`mpiexec -n N python -m adaptcoll.check [--quick|--full] [--device cupy] [--json FILE] [--png FILE]`:
is adaptcoll correct with this MPI, and faster than it, on this machine? Environment, correctness
against native MPI (every served collective, form and route, the error paths), then speed (native vs
adaptcoll interleaved, with confidence intervals), a verdict per cell and one recommendation.

Exit status: 0 when every correctness check passed, 1 when one failed (the speed part never fails the
run), 2 for bad options; an unexpected error on any rank aborts the whole job."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from ..measure import Progress, import_cupy, malloc_env, parse_overrides, parse_size, pin_malloc
from .cases import DEVICE_COLLECTIVES, cases
from .correctness import Runner, run_cases
from .environment import gather_environment
from .misuse import run_misuse
from .plot import require_matplotlib, write_png
from .report import format_report, recommendation
from .speed import FULL, QUICK, SpeedPlan, device_reference, make_impls, run_speed

__all__ = ["build_parser", "main", "run"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.check",
        description="Check adaptcoll against this machine's MPI: correctness, then speed, then a recommendation. "
        "Launch it like your program: mpiexec -n N python -m adaptcoll.check",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a few cases and sizes (default; ~1 min at 2 ranks)")
    mode.add_argument("--full", action="store_true", help="every algorithm, type, op, form; 7 sizes (~10 min)")
    p.add_argument(
        "--device", choices=("host", "cupy"), default="host", help="cupy: also check and time CuPy device arrays"
    )
    p.add_argument("--only", choices=("correctness", "speed"), help="run one part only")
    p.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="KEY=VALUE[;...]",
        help="also time adaptcoll with these settings, e.g. 'algorithm=shm' (repeatable)",
    )
    p.add_argument("--sizes", metavar="LIST", help="speed: these message sizes instead, e.g. 256K,1M,4M")
    p.add_argument(
        "--collectives", metavar="LIST", help="speed: these collectives instead (bcast,reduce,allreduce,iallreduce)"
    )
    p.add_argument("--json", metavar="FILE", help="write the whole report as JSON")
    p.add_argument("--png", metavar="FILE", help="plot the speed ratios (needs matplotlib)")
    p.add_argument(
        "--malloc",
        choices=("pinned", "as-is"),
        default="pinned",
        help="pinned (default): glibc keeps freed memory, so native MPI's per-call temporaries are not "
        "page-faulted in again (its fastest state); as-is: leave the process's state",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _plan(args: argparse.Namespace) -> SpeedPlan:
    """The speed plan of the mode, with --sizes / --collectives applied (ValueError if bad)."""
    plan = FULL if args.full else QUICK
    if args.sizes:
        sizes = tuple(parse_size(t) for t in args.sizes.split(","))
        if any(s < 4 or s % 4 for s in sizes):
            raise ValueError(f"--sizes {args.sizes!r}: every size must be a positive multiple of 4 bytes")
        plan = dataclasses.replace(plan, sizes=sizes)
    if args.collectives:
        names = tuple(t.strip().lower() for t in args.collectives.split(",") if t.strip())
        bad = [n for n in names if n not in ("bcast", "reduce", "allreduce", "iallreduce")]
        if bad or not names:
            raise ValueError(f"--collectives {args.collectives!r}: choose from bcast, reduce, allreduce, iallreduce")
        plan = dataclasses.replace(plan, collectives=names)
    return plan


def _extra_impls(texts: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """(label, overrides) of each --impl, validated against adaptcoll's settings (no MPI needed)."""
    import adaptcoll

    out = []
    for text in texts:
        overrides = dict(parse_overrides(text, f"--impl {text!r}"))
        if not overrides:
            raise ValueError(f"--impl {text!r}: no settings")
        with adaptcoll.configured(**overrides):
            pass
        out.append((f"adaptcoll:{text}", overrides))
    return out


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The check proper (every rank); returns the exit status."""
    from mpi4py import MPI  # here, not at the top: bad options are reported before MPI starts

    import adaptcoll

    started = time.perf_counter()
    world = MPI.COMM_WORLD
    rank, nranks = world.Get_rank(), world.Get_size()
    full = bool(args.full)
    cupy = import_cupy() if args.device == "cupy" else None
    extra = _extra_impls(args.impl)
    env = gather_environment(world, MPI, adaptcoll, cupy is not None)
    doc: dict[str, Any] = {
        "tool": "adaptcoll.check",
        "command": [sys.executable, "-m", "adaptcoll.check", *argv],
        "mode": "full" if full else "quick",
        "device": args.device,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": env,
    }
    plan = _plan(args)
    do_correct = args.only in (None, "correctness")
    do_speed = args.only in (None, "speed")
    case_list = list(cases(nranks, full)) if do_correct else []
    device_cases = [c for c in case_list if c.collective in DEVICE_COLLECTIVES] if cupy is not None else []
    speed_cells = len(plan.collectives) * len(plan.sizes) * (1 + (cupy is not None)) if do_speed else 0
    progress = Progress(len(case_list) + len(device_cases) + 20 * speed_cells, rank == 0 and not args.quiet)
    if do_correct:
        with adaptcoll.configured(watchdog=60.0, watchdog_abort=True):  # a hang ends the job with a report
            results = []
            comm = adaptcoll.Intracomm(world.Dup())
            try:
                runner = Runner(world, comm, MPI, adaptcoll)
                results += run_cases(runner, (c for c in case_list), lambda r: progress.advance(1, "correctness"))
                if cupy is not None:
                    runner = Runner(world, comm, MPI, adaptcoll, cupy)
                    device = (c for c in case_list if c.form != "pickle" and c.collective in DEVICE_COLLECTIVES)
                    results += run_cases(runner, device, lambda r: progress.advance(1, "correctness (device)"))
            finally:
                comm.Free()
            misuse = run_misuse(world, MPI, adaptcoll)
        failed = sum(1 for r in results if not r.passed) + sum(1 for m in misuse if not m.passed)
        doc["correctness"] = {
            "passed": failed == 0,
            "failed": failed,
            "total": len(results) + len(misuse),
            "passed_cases": len(results) + len(misuse) - failed,
            "cases": [r.to_json() for r in results],
            "misuse": [m.to_json() for m in misuse],
        }
    if do_speed:
        doc["malloc"] = pin_malloc() if args.malloc == "pinned" else "as-is"
        doc["malloc_env"] = malloc_env()
        adaptcoll.reset_stats()
        impls = make_impls(world, MPI, adaptcoll, bool(env["tuning"].get("table")), extra)
        advance = lambda amount, label: progress.advance(20 * amount, label)  # noqa: E731
        cells = run_speed(world, MPI, adaptcoll, impls, plan, advance)
        if cupy is not None:
            reference = device_reference(world, MPI)
            assert reference is not None
            cells += run_speed(world, MPI, adaptcoll, [reference, *impls[1:]], plan, advance, cupy)
        doc["speed"] = cells
        for impl in impls:
            impl.comm.Free()
    progress.close()
    doc["elapsed_s"] = time.perf_counter() - started
    doc["recommendation"] = recommendation(doc)
    if rank == 0:
        print(format_report(doc), flush=True)
        if args.json:
            path = Path(args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1, default=str))
        if args.png and doc.get("speed"):
            write_png(doc, args.png)
    corr = doc.get("correctness")
    return 1 if corr is not None and not corr["passed"] else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse the command line, run, and turn an unexpected error on any rank into an abort of the job."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # everything that can be checked before MPI starts, so a typo costs no launch
        _extra_impls(args.impl)
        _plan(args)
        if args.png:
            require_matplotlib()
        if args.device == "cupy":
            import_cupy()
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    try:
        return run(args, argv)
    except Exception:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
        return 1
