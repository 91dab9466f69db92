"""Detour process: wakes at frequency f and burns d of CPU on the CPUs it is pinned to.

Run by `adaptcoll.noise.Detours` as a plain script (`python -I -S _detour_child.py ...`): it imports
only the standard library, never MPI or adaptcoll, so it cannot disturb the MPI job it sits beside.
Protocol: one JSON line on stdout when ready, then sleeps/spins until stdin reaches EOF (the parent
closed it or died), then prints one JSON line of statistics and exits.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when our parent dies; exit at once if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)  # wake at the deadline, not up to 50 us later
    except (OSError, AttributeError):  # not Linux: the getppid watchdog and stdin EOF remain
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def _try_realtime() -> bool:
    """Switch to SCHED_FIFO so detours preempt the rank like kernel noise does; False if not allowed."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return True
    except (OSError, AttributeError):
        return False


def _spin(duration: float, budget: str, cpu_mark: float) -> tuple[float, float]:
    """Busy-loop for one detour; return (wall seconds spun, CPU seconds charged to this detour).

    budget "cpu": spin until `duration` of CPU time has passed since `cpu_mark` (the end of the
    previous detour), so the wake-up cost of this process counts against d and the CPU it takes per
    detour is d even when the rank competes for the core. budget "wall": spin `duration` wall seconds.
    """
    wall0 = time.perf_counter()
    if budget == "cpu":
        cap = wall0 + 50.0 * duration + 0.05  # never spin forever if another process starves us
        end = cpu_mark + duration
        while time.thread_time() < end and time.perf_counter() < cap:
            pass
    else:
        end = wall0 + duration
        while time.perf_counter() < end:
            pass
    return time.perf_counter() - wall0, time.thread_time() - cpu_mark


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, report readiness, run the detour schedule until stdin closes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frequency", type=float, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--pattern", choices=("periodic", "poisson"), default="periodic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--cpus", default="")
    parser.add_argument("--budget", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--realtime", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)

    _die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the job; the parent stops us
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    realtime = bool(args.realtime) and _try_realtime()
    rng = random.Random(f"adaptcoll.noise:{args.seed}:{args.rank}")
    period = 1.0 / args.frequency
    stdin_fd = sys.stdin.fileno()

    out = sys.stdout
    out.write(
        json.dumps({"ready": True, "pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0)), "realtime": realtime})
        + "\n"
    )
    out.flush()

    count = skipped = 0
    sum_wall = sum_cpu = sum_late = max_late = 0.0
    min_wall = float("inf")
    max_wall = 0.0
    start = time.perf_counter()
    # Independent phases: a periodic rank starts at a random offset, a Poisson rank at a random gap.
    if args.pattern == "periodic":
        deadline = start + rng.random() * period
    else:
        deadline = start + rng.expovariate(args.frequency)
    stopping = False
    cpu_mark = cpu_start = time.thread_time()
    while not stopping:
        now = time.perf_counter()
        timeout = max(0.0, deadline - now)
        ready, _, _ = select.select([stdin_fd], [], [], timeout)
        if ready and not os.read(stdin_fd, 4096):
            break  # EOF: the parent asked us to stop or is gone
        if os.getppid() != args.parent_pid:
            break
        now = time.perf_counter()
        if now < deadline:
            continue  # woke early (data on stdin); sleep again to the same absolute deadline
        late = now - deadline
        if args.pattern == "periodic" and late > period:
            missed = int(late // period)
            skipped += missed
            deadline += missed * period
            late = now - deadline
        if args.budget == "wall":
            cpu_mark = time.thread_time()
        wall, cpu = _spin(args.duration, args.budget, cpu_mark)
        cpu_mark += cpu
        count += 1
        sum_wall += wall
        sum_cpu += cpu
        min_wall = min(min_wall, wall)
        max_wall = max(max_wall, wall)
        sum_late += late
        max_late = max(max_late, late)
        deadline += period if args.pattern == "periodic" else rng.expovariate(args.frequency)
    elapsed = time.perf_counter() - start
    cpu_total = time.thread_time() - cpu_start
    stats = {
        "detours": count,
        "skipped": skipped,
        "elapsed_s": elapsed,
        "sum_wall_s": sum_wall,
        "sum_cpu_s": sum_cpu,
        "cpu_total_s": cpu_total,
        "min_wall_s": min_wall if count else 0.0,
        "max_wall_s": max_wall,
        "mean_late_s": sum_late / count if count else 0.0,
        "max_late_s": max_late,
        "realtime": realtime,
    }
    try:
        out.write(json.dumps(stats) + "\n")
        out.flush()
    except (BrokenPipeError, OSError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
