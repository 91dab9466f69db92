"""OSU-style latency benchmark for Bcast/Reduce/Allreduce and Ibcast/Ireduce/Iallreduce, native MPI vs
adaptcoll, with the implementations interleaved call by call in one launch so that both see the same
machine state (noise, other jobs, thermal state).

    mpiexec -n 4 python bench/osu.py -c bcast -m 4K:16M --impl native --impl adaptcoll
    mpiexec -n 4 python bench/osu.py -c iallreduce -m 1M -f --impl native \
        --impl "adaptcoll:allreduce_algorithm=chain;allreduce_segment_size=64K" --json bench/out/x.json
    mpiexec -n 4 python bench/osu.py --device cupy -c bcast,reduce,allreduce --sizes 4K,1M,16M \
        --impl adaptcoll --impl staged

`--device cupy` times CuPy buffers (blocking collectives): `adaptcoll`, `staged` (what a user writes by
hand for an MPI that is not CUDA-aware: cupy.asnumpy -> native MPI on host memory -> copy back), and
`native` on the device buffers, which is refused unless MPI is CUDA-aware (it would dereference device
pointers). Each timed call ends with a device synchronization, for every implementation alike.

Every implementation times the same buffers (with a buffer pair each, where the pairs' pages landed
moved MPI's own Bcast by up to 1.4x at 4-16 MiB: `--impl native --impl native`, an A/A check, shows such
effects). Per iteration and implementation: native barrier, then the timed call; per-rank times are gathered
after the timing loop. The tables use OSU's definitions (Avg = mean over ranks of each rank's mean,
Min/Max = min/max over ranks of those means); the JSON keeps every per-iteration max-over-ranks
sample with median, p95 and p99. Not part of the adaptcoll package: a script with importable helpers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:
    import adaptcoll  # noqa: F401
except ImportError:  # a source checkout that is not installed (e.g. the Open MPI venv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from adaptcoll.measure import (
    Buffers,
    Impl,
    Progress,
    SettingsSwitch,
    first_blocking_calls,
    make_buffers,
    malloc_env,
    parse_overrides,
    parse_size,
    parse_size_range,
    percentile,
    pin_malloc,
    route_of,
    routes,
    sizes_between,
    starter,
    summarize_samples,
    time_blocking,
    warmup,
)
from adaptcoll.measure import device_call as _measure_device_call
from adaptcoll.measure import dtype_for as _measure_dtype_for
from adaptcoll.measure import import_cupy as import_cupy_for_bench
from adaptcoll.measure import to_device as _to_device

__all__ = [
    "COLLECTIVES",
    "NONBLOCKING",
    "ImplSpec",
    "SkewSpec",
    "parse_size",
    "parse_size_range",
    "sizes_between",
    "parse_impl",
    "parse_skew",
    "default_iterations",
    "overlap_percent",
    "percentile",
    "summarize_samples",
    "format_table",
    "route_of",
    "build_parser",
    "check_device_args",
    "main",
]

COLLECTIVES = ("bcast", "reduce", "allreduce", "ibcast", "ireduce", "iallreduce")
DEVICES = ("host", "cupy")
NONBLOCKING = frozenset({"ibcast", "ireduce", "iallreduce"})
LARGE_MESSAGE_SIZE = 8192  # OSU: above this, the "large" iteration counts apply
OSU_ITERATIONS = (1000, 100)  # (small, large)
OSU_WARMUP = (100, 10)


# -- argument parsing (no MPI) -------------------------------------------------------------------


def default_iterations(size: int, iterations: int | None, warmup: int | None) -> tuple[int, int]:
    """(iterations, warm-up) for a message size: OSU's 1000/100, or 100/10 above 8 KiB, unless given."""
    large = size > LARGE_MESSAGE_SIZE
    iters = iterations if iterations is not None else OSU_ITERATIONS[large]
    skip = warmup if warmup is not None else OSU_WARMUP[large]
    return iters, skip


@dataclass(frozen=True)
class ImplSpec:
    """One implementation to time: native MPI, adaptcoll with setting overrides, or (device buffers) the
    hand-written host-staged path (label = as given)."""

    label: str
    kind: str  # "native" | "adaptcoll" | "staged"
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def overrides(self) -> dict[str, str]:
        return dict(self.settings)


def parse_impl(text: str) -> ImplSpec:
    """'native', 'adaptcoll' or 'adaptcoll:KEY=VALUE[;KEY=VALUE]'. KEY 'algorithm'/'segment_size'
    without a collective prefix sets it for bcast, reduce and allreduce alike."""
    label = text.strip()
    kind, sep, rest = label.partition(":")
    kind = kind.strip()
    if kind in ("native", "staged"):
        if sep:
            raise ValueError(f"--impl {text!r}: {kind} takes no settings")
        return ImplSpec(label, kind)
    if kind != "adaptcoll":
        raise ValueError(
            f"--impl {text!r}: expected native, adaptcoll, adaptcoll:KEY=VALUE[;KEY=VALUE] or (--device cupy) staged"
        )
    pairs = parse_overrides(rest, f"--impl {text!r}")
    return ImplSpec(label, "adaptcoll", pairs)


def numbered_repeats(specs: Sequence[ImplSpec]) -> list[ImplSpec]:
    """`specs` with a repeated `native` numbered (native, native#2, ...): `--impl native --impl native`
    is an A/A check, which times MPI against itself (what spread a ratio shows where nothing differs).
    Any other implementation given twice is an error."""
    out: list[ImplSpec] = []
    seen: dict[str, int] = {}
    for spec in specs:
        n = seen[spec.label] = seen.get(spec.label, 0) + 1
        if n > 1:
            if spec.kind != "native":
                raise ValueError(f"--impl {spec.label!r} given twice (only native may repeat: an A/A check)")
            spec = dataclasses.replace(spec, label=f"{spec.label}#{n}")
        out.append(spec)
    return out


@dataclass(frozen=True)
class SkewSpec:
    """Arrival skew: --skew 'DIST:SCALE[,p=PROB][,ranks=I+J][,seed=N][,mode=spin|sleep]'."""

    distribution: str
    scale_s: float
    probability: float = 1.0
    slow_ranks: tuple[int, ...] = ()
    seed: int = 0
    mode: str = "spin"


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _parse_seconds(text: str) -> float:
    t = text.strip().lower()
    for unit in ("ms", "us", "ns", "s"):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * _TIME_UNITS[unit]
    raise ValueError(f"bad duration {text!r}: expected e.g. 100us, 2.5ms, 0.01s")


def parse_skew(text: str) -> SkewSpec | None:
    """Parse --skew ('off'/'' -> None); e.g. 'uniform:200us', 'fixed:1ms,ranks=1+3,mode=sleep'."""
    if text is None or text.strip().lower() in ("", "off", "none", "0"):
        return None
    head, *options = [part.strip() for part in text.split(",")]
    dist, sep, scale = head.partition(":")
    dist = dist.strip().lower()
    if not sep or dist not in ("uniform", "exponential", "fixed"):
        raise ValueError(f"--skew {text!r}: expected DIST:SCALE with DIST uniform, exponential or fixed")
    fields: dict[str, Any] = {}
    for option in options:
        key, eq, value = (s.strip().lower() for s in option.partition("="))
        if not eq:
            raise ValueError(f"--skew {text!r}: options are key=value, got {option!r}")
        if key in ("p", "probability"):
            fields["probability"] = float(value)
        elif key == "ranks":
            fields["slow_ranks"] = tuple(sorted({int(r) for r in value.split("+")}))
        elif key == "seed":
            fields["seed"] = int(value)
        elif key == "mode" and value in ("spin", "sleep"):
            fields["mode"] = value
        else:
            raise ValueError(f"--skew {text!r}: unknown option {option!r}")
    return SkewSpec(dist, _parse_seconds(scale), **fields)


def parse_rank_list(text: str) -> tuple[int, ...] | None:
    """'all' -> None; '1+3' or '1,3' -> (1, 3)."""
    if text.strip().lower() in ("", "all"):
        return None
    return tuple(sorted({int(r) for r in text.replace(",", "+").split("+")}))


def build_parser() -> argparse.ArgumentParser:
    """The command line (OSU flags plus --impl, --json, --noise, --skew, ...)."""
    p = argparse.ArgumentParser(
        prog="osu.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "-c", "--collective", default="bcast", help=f"comma-separated list of: {', '.join(COLLECTIVES)} (default bcast)"
    )
    p.add_argument(
        "-m",
        "--message-size",
        default="1:1M",
        metavar="[MIN:]MAX",
        help="message sizes in bytes, powers of two from MIN to MAX (default 1:1M)",
    )
    p.add_argument(
        "--sizes",
        default=None,
        metavar="LIST",
        help="explicit comma-separated sizes instead of -m, e.g. 4K,1M,16M (not in OSU)",
    )
    p.add_argument(
        "-i",
        "--iterations",
        type=int,
        default=None,
        help="timed iterations per size (default OSU: 1000, or 100 above 8 KiB)",
    )
    p.add_argument(
        "-x",
        "--warmup",
        type=int,
        default=None,
        help="warm-up iterations per size (default OSU: 100, or 10 above 8 KiB)",
    )
    p.add_argument("-f", "--full", action="store_true", help="add Min/Max Latency(us) and Iterations columns")
    p.add_argument(
        "-t",
        "--num-test-calls",
        type=int,
        default=100,
        help="I-forms: Test calls spread over the dummy compute (default 100; OSU's default is 0)",
    )
    p.add_argument(
        "--idle-compute",
        action="store_true",
        help="I-forms: the dummy compute sleeps instead of spinning, as a rank waiting for a GPU kernel or for "
        "I/O, whose CPU is free (not in OSU)",
    )
    p.add_argument("--root", type=int, default=0, help="root of Bcast/Reduce (default 0)")
    p.add_argument(
        "--dtype", default="float32", help="NumPy element type of Reduce/Allreduce buffers (default float32, as OSU)"
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="host",
        help="where the buffers live: host (NumPy, default) or cupy (CuPy arrays on the current GPU; blocking "
        "collectives; impls adaptcoll, staged, and native only with a CUDA-aware MPI)",
    )
    p.add_argument(
        "--impl",
        action="append",
        default=None,
        help="native | adaptcoll | adaptcoll:KEY=VALUE[;KEY=VALUE] | staged (--device cupy) (repeatable; default "
        "native and adaptcoll, with --device cupy adaptcoll and staged)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="cap the time per size: fewer iterations (never below --min-iterations) when the "
        "warm-up says the full count would take longer (not in OSU)",
    )
    p.add_argument("--min-iterations", type=int, default=10)
    p.add_argument("--json", default=None, metavar="FILE", help="write every sample and summary to FILE")
    p.add_argument(
        "--noise",
        default=None,
        metavar="SPEC",
        help="detour noise around each size's warm-up and timed loop, e.g. '1kHz x 25us, poisson' "
        "(adaptcoll.noise spec)",
    )
    p.add_argument(
        "--noise-ranks",
        default="all",
        metavar="RANKS",
        help="ranks that get detours: all, or a list such as 1+3 (default all)",
    )
    p.add_argument(
        "--skew",
        default=None,
        metavar="SPEC",
        help="arrival skew before each timed call: DIST:SCALE[,p=P][,ranks=1+3][,seed=N]"
        "[,mode=spin|sleep], DIST uniform|exponential|fixed",
    )
    p.add_argument(
        "--net-noise",
        default=None,
        metavar="BYTES",
        help="background exchanges of BYTES between rank pairs (i, i+P/2) around each timed loop",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for noise phases and skew")
    p.add_argument(
        "--malloc",
        choices=("as-is", "pinned"),
        default="as-is",
        help="as-is (default): glibc as the environment left it (MPICH's Reduce and Allreduce then refault their "
        "message-sized temporaries at each call from 16-32 MiB); pinned: as `python -m adaptcoll.check` pins it "
        "(trim threshold 1 GiB, no mmapped blocks). The JSON records which, and the MALLOC_* variables",
    )
    p.add_argument("--no-check", action="store_true", help="skip the per-size result check against native")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--trace",
        default=None,
        metavar="DIR",
        help="trace one timed iteration of each adaptcoll implementation, collective and size into DIR "
        "(then: python -m adaptcoll.trace DIR -o run.json --png timeline.png)",
    )
    p.add_argument(
        "--trace-iteration",
        type=int,
        default=0,
        metavar="N",
        help="the timed iteration --trace records, counted from 0 after the warm-up (default 0; I-forms: of "
        "the pure-communication loop; the last one if there are fewer)",
    )
    return p


def parse_collectives(text: str) -> list[str]:
    """'bcast,ireduce' -> ['bcast', 'ireduce'] (validated, order kept, duplicates dropped)."""
    out: list[str] = []
    for name in text.lower().replace(" ", "").split(","):
        if not name:
            continue
        if name not in COLLECTIVES:
            raise ValueError(f"unknown collective {name!r}; choose from {', '.join(COLLECTIVES)}")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("no collective given")
    return out


# -- statistics and output (no MPI) ---------------------------------------------------------------


def overlap_percent(overall_us: float, compute_us: float, test_us: float, pure_us: float) -> float:
    """OSU's overlap: max(0, 100 - (overall - (compute - test)) / pure * 100)."""
    if pure_us <= 0:
        return 0.0
    return max(0.0, 100.0 - (overall_us - (compute_us - test_us)) / pure_us * 100.0)


def _route_note(row: dict[str, Any]) -> str:
    """'  (native: below native_below)' for an adaptcoll row that native MPI served, else ''."""
    route = row.get("route")
    return f"  ({route})" if route not in (None, "adaptcoll", "native") else ""


def format_table(collective: str, impl_label: str, rows: Sequence[dict[str, Any]], full: bool, ranks: int) -> str:
    """One OSU-style table for one (collective, implementation); rows of an adaptcoll implementation that
    native MPI served (below a native threshold, ...) end with the route, e.g. "(native: below native_below)"."""
    name = {
        "bcast": "Broadcast",
        "reduce": "Reduce",
        "allreduce": "Allreduce",
        "ibcast": "Non-blocking Broadcast",
        "ireduce": "Non-blocking Reduce",
        "iallreduce": "Non-blocking Allreduce",
    }[collective]
    lines = [
        f"# OSU MPI {name} Latency Test (adaptcoll bench/osu.py)",
        f"# Implementation: {impl_label}",
        f"# Ranks: {ranks}",
    ]
    if collective in NONBLOCKING:
        head = f"{'# Size':<10}{'Overall(us)':>17}{'Compute(us)':>17}{'Pure Comm.(us)':>20}{'Overlap(%)':>17}"
        if full:
            head += f"{'Min Latency(us)':>17}{'Max Latency(us)':>17}{'Iterations':>12}"
        lines.append(head)
        for r in rows:
            line = (
                f"{r['size']:<10}{r['overall_us']:>17.2f}{r['compute_us']:>17.2f}{r['pure_us']:>20.2f}"
                f"{r['overlap_pct']:>17.2f}"
            )
            if full:
                line += f"{r['osu_min_us']:>17.2f}{r['osu_max_us']:>17.2f}{r['iterations']:>12}"
            lines.append(line + _route_note(r))
    else:
        head = f"{'# Size':<10}{'Avg Latency(us)':>17}"
        if full:
            head += f"{'Min Latency(us)':>17}{'Max Latency(us)':>17}{'Iterations':>12}"
        lines.append(head)
        for r in rows:
            line = f"{r['size']:<10}{r['osu_avg_us']:>17.2f}"
            if full:
                line += f"{r['osu_min_us']:>17.2f}{r['osu_max_us']:>17.2f}{r['iterations']:>12}"
            lines.append(line + _route_note(r))
    return "\n".join(lines)


# -- MPI part ------------------------------------------------------------------------------------


def _import_adaptcoll() -> Any:
    try:
        import adaptcoll
    except ImportError:  # a source checkout that is not installed (e.g. the Open MPI venv)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import adaptcoll
    return adaptcoll


REDUCE_DTYPE = np.dtype(np.float32)
"""Element type of the reductions' buffers: float32 as OSU, or --dtype."""


def _dtype_for(collective: str) -> np.dtype:
    return _measure_dtype_for(collective, REDUCE_DTYPE)


def _make_buffers(collective: str, size: int) -> Buffers:
    return make_buffers(collective, size, REDUCE_DTYPE)


def _device_call(
    impl: Impl, collective: str, bufs: Buffers, root: int, MPI: Any, cupy: Any, world: Any
) -> Callable[[], Any]:
    """One implementation's call on device buffers, ending with a device synchronization."""
    return _measure_device_call(impl.kind, impl.comm, collective, bufs, root, MPI, cupy, world)


def check_device_args(args: argparse.Namespace) -> None:
    """Flag combinations --device cupy cannot time (ValueError); needs no MPI and no GPU."""
    specs = [parse_impl(t) for t in (args.impl or [])]
    if args.device == "host":
        if any(s.kind == "staged" for s in specs):
            raise ValueError("--impl staged times device buffers: add --device cupy")
        return
    blocking_only = [c for c in parse_collectives(args.collective) if c in NONBLOCKING]
    if blocking_only:
        raise ValueError(f"--device cupy times the blocking collectives only, not {', '.join(blocking_only)}")
    if args.noise or args.skew or args.net_noise:
        raise ValueError("--device cupy runs without --noise/--skew/--net-noise")


def _check_results(
    collective: str,
    size: int,
    impls: list[Impl],
    root: int,
    MPI: Any,
    world: Any,
    switch: SettingsSwitch,
    cupy: Any = None,
) -> str | None:
    """Run each implementation once on rank-dependent data and compare with native MPI's result (on host
    buffers; with `cupy`, the implementations run on device copies of the same data).

    Returns None if all agree on every rank, else a message (the same on all ranks)."""
    rank, nranks = world.Get_rank(), world.Get_size()
    dt = _dtype_for(collective)
    count = size // dt.itemsize
    if collective.endswith("bcast"):

        def fresh() -> np.ndarray:
            if rank == root:
                return ((np.arange(count, dtype=np.int64) * 7 + size) % 251).astype(dt)
            return np.full(count, 0xEE, dtype=dt)
    else:
        base = ((np.arange(count, dtype=np.int64) + 3 * rank) % 17).astype(dt)  # small ints: exact sums

        def fresh() -> np.ndarray:
            return base.copy()

    def run(comm: Any) -> np.ndarray:
        buf = fresh()
        out = np.zeros(count, dtype=dt) + (np.nan if dt.kind == "f" else 0x5A)  # only the reductions use it
        if collective == "bcast":
            comm.Bcast(buf, root)
            return buf
        if collective == "ibcast":
            comm.Ibcast(buf, root).Wait()
            return buf
        if collective == "reduce":
            comm.Reduce(buf, out, MPI.SUM, root)
        elif collective == "ireduce":
            comm.Ireduce(buf, out, MPI.SUM, root).Wait()
        elif collective == "allreduce":
            comm.Allreduce(buf, out, MPI.SUM)
        else:
            comm.Iallreduce(buf, out, MPI.SUM).Wait()
        return out

    def run_on_device(impl: Impl) -> np.ndarray:
        bufs = Buffers(cupy.asarray(fresh()), cupy.asarray(np.zeros(count, dtype=dt)))
        _device_call(impl, collective, bufs, root, MPI, cupy, world)()
        return cupy.asnumpy(bufs.send if collective == "bcast" else bufs.recv)

    expected = run(world)
    meaningful = not collective.endswith("reduce") or collective.endswith("allreduce") or rank == root
    problems = []
    for impl in impls:
        if impl.kind == "native" and cupy is None:
            continue
        switch.apply(impl)
        got = run_on_device(impl) if cupy is not None else run(impl.comm)
        bad = int(np.count_nonzero(got != expected)) if meaningful else 0
        first = int(np.flatnonzero(got != expected)[0]) if bad else -1
        detail = (rank, bad, first, float(got[first]) if bad else 0.0, float(expected[first]) if bad else 0.0)
        everyone = world.allgather(detail)
        wrong = [d for d in everyone if d[1]]
        if wrong:
            r, n, i, g, e = wrong[0]
            problems.append(
                f"RESULT MISMATCH: {collective} size {size} B impl {impl.label!r}: "
                f"{len(wrong)} of {nranks} ranks differ from native MPI (rank {r}: {n} of {count} "
                f"elements, first at index {i}: got {g}, expected {e})"
            )
    return "\n".join(problems) or None


class Noise:
    """The noise injectors of one launch (detours, skew, network noise), the same for every implementation."""

    def __init__(self, args: argparse.Namespace, world: Any) -> None:
        self.rank = world.Get_rank()
        self.world = world
        self.detour_spec = None
        self.detours: Any = None
        self.detour_stats: list[dict[str, Any]] = []
        noisy = parse_rank_list(args.noise_ranks)
        if args.noise:
            from adaptcoll.noise import parse_spec

            spec = parse_spec(args.noise, "--noise")
            if spec is not None and (noisy is None or self.rank in noisy):
                self.detour_spec = spec
        self.skew: Any = None
        skew = parse_skew(args.skew) if args.skew else None
        if skew is not None:
            from adaptcoll.noise import Skew

            self.skew = Skew(
                skew.distribution,
                skew.scale_s,
                skew.probability,
                skew.seed or args.seed,
                self.rank,
                skew.slow_ranks,
                skew.mode,
            )
        self.net_bytes = parse_size(args.net_noise) if args.net_noise else 0
        self.net: Any = None
        self.net_stats: list[dict[str, Any]] = []
        self.seed = args.seed

    def start(self, label: str) -> None:
        if self.detour_spec is not None:
            self.detours = self.detour_spec.detours(self.rank, self.seed)
            self.detours.start()
        if self.net_bytes:
            from adaptcoll.noise import NetworkNoise

            self.net = NetworkNoise(self.world, None, self.net_bytes).start()
        self._label = label

    def stop(self) -> None:
        if self.detours is not None:
            stats = self.detours.stop()
            if stats is not None:
                row = dataclasses.asdict(stats)
                row.update(
                    at=self._label,
                    achieved_frequency_hz=stats.achieved_frequency_hz,
                    noise_fraction=stats.noise_fraction,
                    cpus=self.detours.child_cpus,
                )
                self.detour_stats.append(row)
            self.detours = None
        if self.net is not None:
            st = self.net.stop()
            self.net_stats.append({"at": self._label, **dataclasses.asdict(st), "bandwidth_Bps": st.bandwidth_Bps})
            self.net = None

    def delay(self, iteration: int) -> None:
        if self.skew is not None:
            self.skew.delay(iteration)


def _spin_until(end: float) -> None:
    clock = time.perf_counter
    while clock() < end:
        pass


def _sleep_until(end: float) -> None:
    left = end - time.perf_counter()
    if left > 0:
        time.sleep(left)


def _dummy_compute(seconds: float, request: Any, num_tests: int, idle: bool = False) -> float:
    """OSU's dummy_compute: busy for `seconds` (wall), calling request.Test() `num_tests` times spread
    over it; returns the seconds spent inside Test. `idle`: sleep instead of spinning (--idle-compute)."""
    clock = time.perf_counter
    wait = _sleep_until if idle else _spin_until
    start = clock()
    end = start + seconds
    test_time = 0.0
    if num_tests <= 0:
        wait(end)
        return 0.0
    step = seconds / num_tests
    for k in range(1, num_tests + 1):
        wait(start + k * step)
        t = clock()
        request.Test()
        test_time += clock() - t
    wait(end)
    return test_time


def _traced_calls(
    calls: list[Callable[[], Any]], impls: list[Impl], args: argparse.Namespace, iters: int, adaptcoll: Any
) -> list[Callable[[], Any]]:
    """--trace: the adaptcoll calls, each tracing its --trace-iteration-th call (tracing is decided when a
    call starts, so an I-form's Wait is traced too). That sample includes the tracing cost and, on the
    first traced call, the clock-offset measurement: one sample, the medians hardly move."""
    if not args.trace or adaptcoll is None:
        return calls
    chosen = min(args.trace_iteration, iters - 1)

    def traced(call: Callable[[], Any]) -> Callable[[], Any]:
        count = [0]

        def run() -> Any:
            count[0] += 1
            if count[0] - 1 != chosen:
                return call()
            with adaptcoll.configured(trace=args.trace):
                return call()

        return run

    return [traced(c) if impl.kind == "adaptcoll" else c for c, impl in zip(calls, impls)]


def _time_pure_nonblocking(
    starts: list[Callable[[], Any]],
    impls: list[Impl],
    switch: SettingsSwitch,
    barrier: Callable,
    iters: int,
    noise: Noise,
    progress_cb: Callable[[int], None],
) -> np.ndarray:
    """Pure communication time of the I-forms: start + Wait, timed like the blocking calls."""
    waits = [lambda start=start: start().Wait() for start in starts]
    return time_blocking(waits, impls, switch, barrier, iters, progress_cb, noise.delay)


def _time_overlap(
    starts: list[Callable[[], Any]],
    impls: list[Impl],
    switch: SettingsSwitch,
    barrier: Callable,
    iters: int,
    compute_s: Sequence[float],
    num_tests: int,
    noise: Noise,
    progress_cb: Callable[[int], None],
    idle: bool = False,
) -> np.ndarray:
    """[4, impl, iteration]: overall, compute (incl. tests), test, wait seconds on this rank."""
    n = len(impls)
    out = np.zeros((4, n, iters))
    clock = time.perf_counter
    for it in range(iters):
        for k in range(n):
            switch.apply(impls[k])
            barrier()
            noise.delay(it)
            t0 = clock()
            req = starts[k]()
            tc = clock()
            test = _dummy_compute(compute_s[k], req, num_tests, idle)
            tw = clock()
            req.Wait()
            t1 = clock()
            out[:, k, it] = (t1 - t0, tw - tc, test, t1 - tw)
        progress_cb(1)
    return out


def _osu_row(per_rank_means_us: np.ndarray) -> dict[str, float]:
    return {
        "osu_avg_us": float(per_rank_means_us.mean()),
        "osu_min_us": float(per_rank_means_us.min()),
        "osu_max_us": float(per_rank_means_us.max()),
    }


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The benchmark proper (every rank). Returns the exit code."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, nranks = world.Get_rank(), world.Get_size()
    malloc = pin_malloc() if args.malloc == "pinned" else "as-is"  # before any buffer is made
    collectives = parse_collectives(args.collective)
    lo, hi = parse_size_range(args.message_size)
    cupy = import_cupy_for_bench() if args.device == "cupy" else None
    default_impls = ["adaptcoll", "staged"] if cupy is not None else ["native", "adaptcoll"]
    specs = numbered_repeats([parse_impl(t) for t in (args.impl or default_impls)])
    if not 0 <= args.root < nranks:
        raise ValueError(f"--root {args.root} out of range for {nranks} ranks")
    need_adaptcoll = any(s.kind == "adaptcoll" for s in specs) or args.noise or args.skew or args.net_noise
    adaptcoll = _import_adaptcoll() if need_adaptcoll else None
    if cupy is not None and any(s.kind == "native" for s in specs):
        from adaptcoll.device import mpi_cuda_aware

        aware, why = mpi_cuda_aware(world)
        if not aware:
            if rank == 0:
                print(
                    f"osu.py: --impl native refused with --device cupy: this MPI is not CUDA-aware ({why}), so it "
                    "would dereference device pointers; time --impl staged (the host-staged path) instead, or set "
                    "ADAPTCOLL_CUDA_AWARE=1 if the MPI is CUDA-aware",
                    file=sys.stderr,
                    flush=True,
                )
            world.Barrier()  # the message is out before any rank exits (a rank's exit aborts the job)
            return 2
    impls: list[Impl] = []
    for s in specs:
        if s.kind in ("native", "staged"):
            impls.append(Impl(s.label, s.kind, world, overrides=s.overrides))
        else:
            with adaptcoll.configured(**s.overrides) as cfg:
                # a communicator per implementation: settings read once per communicator (the topology,
                # the shm slots, the tuning) then differ between implementations as their settings say
                impls.append(Impl(s.label, s.kind, adaptcoll.Intracomm(world.Dup()), cfg, s.overrides))
                first_blocking_calls(adaptcoll, impls[-1].comm, MPI)
    if adaptcoll is not None:
        adaptcoll.reset_stats()
    switch = SettingsSwitch(adaptcoll)
    noise = Noise(args, world)
    barrier = world.Barrier
    plan = []  # (collective, size, iterations, warmup)
    explicit = [parse_size(t) for t in args.sizes.split(",")] if args.sizes else None
    for coll in collectives:
        smallest = _dtype_for(coll).itemsize
        for size in explicit if explicit is not None else sizes_between(lo, hi, smallest):
            if size < smallest or size % smallest:
                raise ValueError(f"--sizes: {size} B is not a whole number of {coll} elements")
            iters, skip = default_iterations(size, args.iterations, args.warmup)
            plan.append((coll, size, iters, skip))
    progress = Progress(sum(it + sk for _, _, it, sk in plan) * len(impls), rank == 0 and not args.quiet)
    results: list[dict[str, Any]] = []
    rows_by_table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for coll, size, iters, skip in plan:
        nonblocking = coll in NONBLOCKING
        # every implementation on the *same* buffers: with a pair each, `--impl native --impl native` (an
        # A/A check) gave 1.26-1.42x at Bcast 4M-16M on 2 ranks, from where the pairs' huge pages landed
        shared = _make_buffers(coll, size)
        if cupy is not None:
            shared = _to_device(shared, cupy)
            calls = [_device_call(impl, coll, shared, args.root, MPI, cupy, world) for impl in impls]
        else:
            calls = [starter(coll, impl.comm, shared, args.root, MPI) for impl in impls]
        if not args.no_check:
            problem = _check_results(coll, size, impls, args.root, MPI, world, switch, cupy)
            if problem:
                progress.close()
                if rank == 0:
                    print(problem, file=sys.stderr, flush=True)
                return 3
        served_by = routes(calls, impls, switch, adaptcoll, nonblocking) if adaptcoll is not None else []
        noise.start(f"{coll}:{size}")
        try:
            label = f"{coll} {size} B"
            first = warmup(calls, impls, switch, barrier, 1 if skip else 0, nonblocking)
            if args.budget is not None:  # one interleaved round's cost, agreed by all ranks
                per_round = max(world.allreduce(float(first.sum()), op=MPI.MAX), 1e-9)
                skip = min(skip, max(1, int(0.1 * args.budget / per_round)))
                iters = max(min(iters, args.min_iterations), min(iters, int(args.budget / per_round)))
            warmup(calls, impls, switch, barrier, max(skip - 1, 0), nonblocking)
            tick = lambda k: progress.advance(k * len(impls), label)  # noqa: E731, B023
            progress.advance(skip * len(impls), label)
            if nonblocking:
                timed = _traced_calls(calls, impls, args, iters, adaptcoll)
                pure = _time_pure_nonblocking(timed, impls, switch, barrier, iters, noise, lambda k: None)
                compute_s = pure.mean(axis=1)  # each rank computes for its own pure latency, as OSU
                over = _time_overlap(
                    calls, impls, switch, barrier, iters, compute_s, args.num_test_calls, noise, tick, args.idle_compute
                )
                local = np.concatenate([pure[None], over])  # [5, impl, iter]
            else:
                timed = _traced_calls(calls, impls, args, iters, adaptcoll)
                local = time_blocking(timed, impls, switch, barrier, iters, tick, noise.delay)[None]  # [1, impl, iter]
        finally:
            noise.stop()
        gathered = world.gather(local, root=0)
        if rank != 0:
            continue
        allr = np.stack(gathered) * 1e6  # [rank, kind, impl, iter] in us
        for k, impl in enumerate(impls):
            if nonblocking:
                pure_r, over_r, comp_r, test_r, wait_r = (allr[:, j, k, :] for j in range(5))
                samples = over_r.max(axis=0)
                row = {
                    "overall_us": float(over_r.mean()),
                    "compute_us": float(comp_r.mean()),
                    "pure_us": float(pure_r.mean()),
                    "test_us": float(test_r.mean()),
                    "wait_us": float(wait_r.mean()),
                }
                row["overlap_pct"] = overlap_percent(
                    row["overall_us"], row["compute_us"], row["test_us"], row["pure_us"]
                )
                row.update(_osu_row(over_r.mean(axis=1)))
                row["pure_samples_us"] = pure_r.max(axis=0).tolist()
                row["pure_median_us"] = float(np.median(pure_r.max(axis=0)))
            else:
                t = allr[:, 0, k, :]
                samples = t.max(axis=0)
                row = _osu_row(t.mean(axis=1))
            row.update(
                collective=coll,
                size=size,
                impl=impl.label,
                route=served_by[k] if served_by else "native",
                iterations=iters,
                warmup=skip,
                **summarize_samples(samples),
                samples_us=samples.tolist(),
            )
            results.append(row)
            rows_by_table.setdefault((coll, impl.label), []).append(row)
    progress.close()
    all_stats = world.gather(adaptcoll.stats() if adaptcoll is not None else {}, root=0)
    detour_stats = world.gather(noise.detour_stats, root=0)
    net_stats = world.gather(noise.net_stats, root=0)
    if rank == 0:
        for coll in collectives:
            for impl in impls:
                rows = rows_by_table.get((coll, impl.label), [])
                print(format_table(coll, impl.label, rows, args.full, nranks))
                print()
        if args.trace:
            print(
                f"# traced timed iteration {args.trace_iteration} into {args.trace} "
                f"(merge: python -m adaptcoll.trace {args.trace})"
            )
        sys.stdout.flush()
        if args.json:
            doc = {
                "tool": "bench/osu.py",
                "command": [sys.executable, str(Path(__file__)), *argv],
                "argv": list(argv),
                "mpi_library": MPI.Get_library_version().strip(),
                "mpi_version": list(MPI.Get_version()),
                "mpi4py": __import__("mpi4py").__version__,
                "adaptcoll": getattr(adaptcoll, "__version__", None),
                "ranks": nranks,
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "malloc": {
                    "mode": malloc,
                    "env": malloc_env(),
                },
                "options": {k: v for k, v in vars(args).items() if k != "impl"},
                "impls": [
                    {
                        "label": i.label,
                        "kind": i.kind,
                        "overrides": i.overrides,
                        "settings": dataclasses.asdict(i.settings) if i.settings is not None else None,
                    }
                    for i in impls
                ],
                "results": results,
                "adaptcoll_stats": all_stats,
                "noise": {
                    "detours": args.noise,
                    "noise_ranks": args.noise_ranks,
                    "skew": args.skew,
                    "net_noise": args.net_noise,
                    "detour_stats": detour_stats,
                    "net_stats": net_stats,
                },
            }
            path = Path(args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            tmp.replace(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run, and turn any error on any rank into a clean exit of the whole job."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # validate the plain flags before MPI starts, so a typo costs no launch
        parse_collectives(args.collective)
        parse_size_range(args.message_size)
        [parse_impl(t) for t in (args.impl or [])]
        parse_skew(args.skew) if args.skew else None
        parse_rank_list(args.noise_ranks)
        [parse_size(t) for t in args.sizes.split(",")] if args.sizes else None
        if args.net_noise:
            parse_size(args.net_noise)
        if args.trace_iteration < 0:
            raise ValueError("--trace-iteration must be >= 0")
        check_device_args(args)
        if args.device == "cupy":
            import_cupy_for_bench()
        global REDUCE_DTYPE
        REDUCE_DTYPE = np.dtype(args.dtype)
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


if __name__ == "__main__":
    sys.exit(main())
