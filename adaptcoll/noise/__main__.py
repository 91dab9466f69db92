"""Command line: run a command under detour noise, calibrate the injector, or check a spec.

    python -m adaptcoll.noise run --spec "1kHz x 25us, poisson" -- python bench/osu.py ...
    python -m adaptcoll.noise calibrate -f 100 -d 2ms
    python -m adaptcoll.noise parse "10Hz x 2.5ms"

`run` is meant to sit between the MPI launcher and the rank (`srun python -m adaptcoll.noise run
... -- python app.py`): it never initializes MPI itself (importing adaptcoll does not import
mpi4py.MPI), starts a Detours process pinned to the CPUs the launcher bound it to, runs the command
with every file descriptor and variable of the launcher (so the command is the MPI rank), forwards
SIGINT/SIGTERM (and SIGKILLs a command still running --kill-after seconds after a SIGTERM), then prints
the detour statistics to stderr and exits with the command's status. The command dies with the
wrapper, even if the wrapper is SIGKILLed: PR_SET_PDEATHSIG in the command (Linux), else a watchdog
process on the wrapper's pid. It refuses to start (exit status 1) if it finds MPI initialized in its
own process under a launcher (something imported mpi4py.MPI into the wrapper: the rank could not join).
`python -c SAFE_PYTHON_C run ...` (the job scripts' form) does the same without even running
adaptcoll/__init__.py.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Optional

from .calibrate import calibrate
from .spec import ENV_VAR, RANK_VARIABLES, parse_spec, rank_from_env

__all__ = ["main", "SAFE_PYTHON_C", "WATCHDOG"]

SAFE_PYTHON_C = (
    "import importlib.util, sys, types; spec = importlib.util.find_spec('adaptcoll'); "
    "pkg = types.ModuleType('adaptcoll'); pkg.__path__ = list(spec.submodule_search_locations); "
    "sys.modules['adaptcoll'] = pkg; from adaptcoll.noise.__main__ import main; "
    "raise SystemExit(main())"
)
"""`python -c SAFE_PYTHON_C run ...` loads adaptcoll.noise without running adaptcoll/__init__.py. Not
needed to keep MPI out of the wrapper (importing adaptcoll does not import mpi4py.MPI); the job
scripts use it so that the wrapper imports nothing but adaptcoll.noise."""

WATCHDOG = (
    "import os, signal, sys, time\n"
    "wrapper, child = int(sys.argv[1]), int(sys.argv[2])\n"
    "def alive(pid):\n"
    "    try:\n"
    "        os.kill(pid, 0)\n"
    "    except ProcessLookupError:\n"
    "        return False\n"
    "    except PermissionError:\n"
    "        pass\n"
    "    return True\n"
    "while alive(child):\n"
    "    if os.getppid() != wrapper or not alive(wrapper):\n"
    "        os.kill(child, signal.SIGKILL)\n"
    "        break\n"
    "    time.sleep(0.2)\n"
)
"""`python -I -S -c WATCHDOG WRAPPER_PID CHILD_PID`: SIGKILLs the child once the wrapper is gone (used where
PR_SET_PDEATHSIG is not available)."""

_PR_SET_PDEATHSIG = 1


def _mpi_initialized_here() -> bool:
    """True if this wrapper process has initialized MPI (then the wrapped rank could not)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return bool(mpi is not None and mpi.Is_initialized())


def _prctl() -> Optional[Callable[..., int]]:
    """libc's prctl (Linux), resolved before fork; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with(wrapper: int, prctl: Optional[Callable[..., int]]) -> Callable[[], None]:
    """The command's preexec_fn: SIGKILL it when the wrapper dies (and at once if it already has)."""

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != wrapper:  # the wrapper died before the death signal was armed
            os._exit(128 + signal.SIGKILL)

    return preexec


def _run(args: argparse.Namespace) -> int:
    if _mpi_initialized_here() and any(v in os.environ for v in RANK_VARIABLES):
        raise SystemExit(
            "adaptcoll.noise run: MPI is initialized in the wrapper process (something imported "
            "mpi4py.MPI before the wrapper ran), so the wrapped rank could not join the job. Start the "
            f"wrapper as: python -m adaptcoll.noise run ..., or python -c '{SAFE_PYTHON_C}' run ..."
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
    prctl = _prctl()
    proc = subprocess.Popen(  # keep the launcher's PMI descriptors; die with this wrapper
        command, close_fds=False, preexec_fn=_die_with(os.getpid(), prctl)
    )
    watchdog = None
    if prctl is None:
        watchdog = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHDOG, str(os.getpid()), str(proc.pid)])
    timers: list[threading.Timer] = []

    def forward(signum: int, frame: object) -> None:
        proc.send_signal(signum)
        if signum == signal.SIGTERM and args.kill_after > 0 and not timers:
            timer = threading.Timer(args.kill_after, _kill_if_running, (proc,))
            timer.daemon = True
            timer.start()
            timers.append(timer)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for timer in timers:
            timer.cancel()
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait()
        stats = detours.stop() if detours is not None else None
    if stats is not None and detours is not None and not args.quiet:
        print(f"adaptcoll.noise rank {rank} cpus {detours.child_cpus}: {stats.summary()}", file=sys.stderr)
    return code if code >= 0 else 128 - code


def _kill_if_running(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()


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
    run.add_argument(
        "--kill-after",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="SIGKILL the command this long after forwarding a SIGTERM it did not exit on (0: never; default 10)",
    )
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
