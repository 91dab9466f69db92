"""Command line: run a command under detour noise, calibrate the injector, or check a spec.

    python -m adaptcoll.noise run --spec "1kHz x 25us, poisson" -- python bench/osu.py ...
    python -m adaptcoll.noise calibrate -f 100 -d 2ms
    python -m adaptcoll.noise parse "10Hz x 2.5ms"

`run` is meant to sit between the MPI launcher and the rank (`srun python -m adaptcoll.noise run
... -- python app.py`): it never initializes MPI itself, starts a Detours process pinned to the
CPUs the launcher bound it to, runs the command with every file descriptor and variable of the
launcher (so the command is the MPI rank), forwards SIGINT/SIGTERM, then prints the detour statistics
to stderr and exits with the command's status. The wrapper must not initialize MPI: while importing
`adaptcoll` imports mpi4py.MPI, start it as `python -c "$SAFE_PYTHON_C" run ...` (the jobscripts do).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from .calibrate import calibrate
from .spec import ENV_VAR, RANK_VARIABLES, parse_spec, rank_from_env

__all__ = ["main", "SAFE_PYTHON_C"]

SAFE_PYTHON_C = (
    "import importlib.util, sys, types; spec = importlib.util.find_spec('adaptcoll'); "
    "pkg = types.ModuleType('adaptcoll'); pkg.__path__ = list(spec.submodule_search_locations); "
    "sys.modules['adaptcoll'] = pkg; from adaptcoll.noise.__main__ import main; "
    "raise SystemExit(main())"
)
"""`python -c SAFE_PYTHON_C run ...` loads adaptcoll.noise without running adaptcoll/__init__.py (which
imports mpi4py.MPI), so the wrapper never touches MPI."""


def _mpi_initialized_here() -> bool:
    """True if this wrapper process has initialized MPI (then the wrapped rank could not)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return bool(mpi is not None and mpi.Is_initialized())


def _run(args: argparse.Namespace) -> int:
    if _mpi_initialized_here() and any(v in os.environ for v in RANK_VARIABLES):
        raise SystemExit(
            "adaptcoll.noise run: MPI was initialized in the wrapper (importing adaptcoll "
            "imported mpi4py.MPI), so the wrapped rank could not join the job. Start the "
            f"wrapper as: python -c '{SAFE_PYTHON_C}' run ..."
        )
    text = args.spec if args.spec is not None else os.environ.get(ENV_VAR, "")
    name = "--spec" if args.spec is not None else ENV_VAR
    spec = parse_spec(text, name)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("adaptcoll.noise run: no command given after --")
    rank = rank_from_env() if args.rank is None else args.rank
    detours = spec.detours(rank, args.seed) if spec is not None else None
    if detours is not None:
        detours.start()
    proc = subprocess.Popen(command, close_fds=False)  # keep the launcher's PMI descriptors
    forward = lambda signum, frame: proc.send_signal(signum)  # noqa: E731
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        stats = detours.stop() if detours is not None else None
    if stats is not None and detours is not None and not args.quiet:
        print(f"adaptcoll.noise rank {rank} cpus {detours.child_cpus}: {stats.summary()}", file=sys.stderr)
    return code if code >= 0 else 128 - code


def _seconds(text: str) -> float:
    spec = parse_spec(f"1Hz x {text}", "--duration")
    return spec.duration_s if spec is not None else 0.0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m adaptcoll.noise`."""
    parser = argparse.ArgumentParser(
        prog="python -m adaptcoll.noise", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run a command (an MPI rank) beside a detour process")
    run.add_argument("--spec", help=f"detour spec, default ${ENV_VAR}; 'off' runs without noise")
    run.add_argument("--rank", type=int, help="rank for the seed (default: from the launcher's variables)")
    run.add_argument("--seed", type=int, help="override the spec's seed")
    run.add_argument("--quiet", action="store_true", help="do not print detour statistics")
    run.add_argument("command", nargs=argparse.REMAINDER)
    cal = sub.add_parser("calibrate", help="FWQ slowdown vs 1/(1 - f*d) on one CPU")
    cal.add_argument("-f", "--frequency", type=float, default=100.0, help="Hz (default 100)")
    cal.add_argument("-d", "--duration", type=_seconds, default=2e-3, help="e.g. 2ms, 250us (default 2ms)")
    cal.add_argument("-p", "--pattern", choices=("periodic", "poisson"), default="periodic")
    cal.add_argument("--cpu", type=int)
    cal.add_argument("--seconds", type=float, default=1.0)
    cal.add_argument("--rounds", type=int, default=5)
    cal.add_argument("--realtime", action="store_true", help="detours at SCHED_FIFO (if permitted)")
    par = sub.add_parser("parse", help="check a spec and print what it means")
    par.add_argument("spec")
    args = parser.parse_args(argv)
    try:
        if args.action == "run":
            return _run(args)
        if args.action == "calibrate":
            result = calibrate(
                args.frequency,
                args.duration,
                args.pattern,
                cpu=args.cpu,
                seconds=args.seconds,
                rounds=args.rounds,
                realtime=args.realtime,
            )
            print(result.summary(), flush=True)
            print(result.stats.summary(), flush=True)
            return 0
        spec = parse_spec(args.spec, "spec")
        print("off" if spec is None else f"{spec} noise_fraction={spec.noise_fraction:g}")
        return 0
    except ValueError as exc:
        print(f"adaptcoll.noise: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
