"""Running simulations: one run of one implementation, and the quiet-vs-noisy comparison the CLI reports.

An implementation is "adaptcoll" (the library's protocols under the job's settings) or the name of a
lock-step baseline. A run's time is what bench/osu.py reports for one iteration: the maximum over
ranks of (finish - own start). Noisy samples use independent noise draws (seed, sample); the report
gives the quiet time, every sample, their median and mean, and slowdown = noisy median / quiet.
Reports hold simulated quantities only (no wall-clock, no dates), so one seed gives identical output.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any, Optional

from . import fastcore
from .lockstep import baseline_names, baseline_starter, check_applicable, estimated_messages
from .noise_setup import NoiseSetup, mix_seed
from .params import CostParams
from .programs import Buffers, Job, Prepared, make_buffers, prepare, runs_trees
from .routes import Routes
from .world import TraceLog, World

__all__ = ["ADAPTCOLL", "BEST", "BEST_MAX_MESSAGES", "RunStats", "run_once", "compare", "impl_label", "best_lockstep"]

ADAPTCOLL = "adaptcoll"
BEST = "best"
"""`--baseline best`: every applicable lock-step baseline, and the fastest (see best_lockstep)."""
BEST_MAX_MESSAGES = 4_000_000
"""`best` skips baselines estimated to send more messages than this (ring-type ones cost size^2, pipelines
size x segments): about a minute of simulation per run on this VM on the Python core, 5-20 s on the C core
(not raised with it: `best`'s choice of baselines is the same on both cores)."""


@dataclass(frozen=True)
class RunStats:
    """One simulated run: its time (s) and how much happened."""

    time_s: float
    messages: int
    bytes: int
    events: int
    callbacks: int


def impl_label(impl: str) -> str:
    """'adaptcoll' or 'lockstep:<baseline>' (how results name an implementation)."""
    return impl if impl == ADAPTCOLL else f"lockstep:{impl}"


def run_once(
    job: Job,
    params: CostParams,
    impl: str = ADAPTCOLL,
    noise: Optional[NoiseSetup] = None,
    seed: int = 0,
    sample: int = 0,
    data: bool = False,
    record: bool = False,
    trace: Optional[TraceLog] = None,
    prepared: Optional[Prepared] = None,
    topology: Optional[Routes] = None,
    core: str = "",
) -> tuple[RunStats, Any, Buffers]:
    """Simulate `job` once with `impl` under `noise` (draw `sample` of `seed`); returns (stats, world, buffers).

    `topology`: the routes of a described network (`Routes(describe.load(FILE))`, reusable across runs)
    whose links carry the messages instead of one link per node. `core`: 'auto', 'python' or 'c'
    (default: ADAPTCOLL_SIM_CORE, else auto): adaptcoll's tree protocols and the lock-step baselines
    run on the C core (`fastcore`) where it applies and is built, and the world returned is then a
    `fastcore.CoreRun`."""
    native = impl != ADAPTCOLL
    size = job.size
    cpu_tl = net_tl = None
    starts = None
    if noise is not None and not noise.quiet:
        draw = mix_seed(seed, sample)
        cpu_tl = noise.cpu_timeline(size, draw)
        net_tl = noise.net_timeline(size, draw)
        starts = noise.start_times(size, seed, sample)
    core = core or fastcore.core_setting()
    if core not in fastcore.CORES:
        raise ValueError(f"core must be one of {', '.join(fastcore.CORES)}, got {core!r}")
    why = "ADAPTCOLL_SIM_CORE=python"
    if core != "python":
        if not native:
            prepared = prepared or prepare(job, params.ranks_per_node)
        # (callers pass adaptcoll's set-up with every implementation of a comparison: a baseline ignores it)
        tree = None if native else prepared
        ran, why = _on_c_core(job, params, impl, tree, cpu_tl, net_tl, starts, data, record, trace, topology)
        if ran is not None:
            fastcore.USE.c += 1
            return _stats(ran), ran, make_buffers(job.collective, size, job.count, job.root, False, seed)
        if core == "c":
            raise fastcore.CoreUnavailable(f"adaptcoll: the simulator's C core cannot run this: {why}")
    fastcore.USE.python += 1
    fastcore.USE.why = why
    world = World(
        size,
        params,
        itemsize=job.itemsize,
        event_cost=0.0 if native else params.engine,
        post_cost=params.native_o if native else params.o,
        start_cost=0.0 if native else params.call,
        cpu_noise=cpu_tl,
        net_noise=net_tl,
        data=data,
        record=record,
        trace=trace,
        topology=topology,
    )
    bufs = make_buffers(job.collective, size, job.count, job.root, data, seed)
    if native:
        starter = baseline_starter(impl, job, world, bufs)
    else:
        starter = (prepared or prepare(job, params.ranks_per_node)).starter(world, bufs)
    for r in range(size):
        world.start(r, starts[r] if starts else 0.0, starter(r))
    world.run()
    return _stats(world), world, bufs


def _stats(world: Any) -> RunStats:
    """A finished run's RunStats (a World or a fastcore.CoreRun): the slowest rank's finish - start."""
    elapsed = max(f - s for f, s in zip(world.finished, world.started))
    return RunStats(elapsed, world.messages, world.bytes, world.events, world.callbacks)


def _on_c_core(
    job: Job,
    params: CostParams,
    impl: str,
    prepared: Optional[Prepared],
    cpu_tl: Any,
    net_tl: Any,
    starts: Optional[list[float]],
    data: bool,
    record: bool,
    trace: Optional[TraceLog],
    topology: Optional[Routes],
) -> tuple[Optional[fastcore.CoreRun], str]:
    """The run on the C core, or (None, why it cannot run there). `prepared`: adaptcoll's set-up, None
    for the lock-step baseline `impl`."""
    why = fastcore.unsupported(job, params, prepared, cpu_tl, data, record, trace, topology)
    if not why and prepared is not None and not runs_trees(prepared):
        why = f"protocol {prepared.protocol!r} runs on the Python core (the C core runs the trees)"
    if not why and fastcore.library() is None:
        why = fastcore.status()
    if why:
        return None, why
    if prepared is not None:
        return fastcore.run(job, params, prepared, cpu_tl, net_tl, starts, topology), ""
    try:
        return fastcore.run_lockstep(impl, job, params, cpu_tl, net_tl, starts, topology), ""
    except fastcore.NotFlat as exc:
        return None, str(exc)


def _summary(quiet: RunStats, noisy: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "quiet_us": quiet.time_s * 1e6,
        "messages": quiet.messages,
        "bytes": quiet.bytes,
        "events": quiet.events,
        "callbacks": quiet.callbacks,
    }
    if noisy:
        med = statistics.median(noisy)
        mean = statistics.fmean(noisy)
        out.update(
            noisy_us=[t * 1e6 for t in noisy],
            median_us=med * 1e6,
            mean_us=mean * 1e6,
            max_us=max(noisy) * 1e6,
            slowdown=med / quiet.time_s,
            slowdown_mean=mean / quiet.time_s,
        )
    return out


def compare(
    job: Job,
    params: CostParams,
    noise: NoiseSetup,
    baselines: tuple[str, ...] = (),
    seed: int = 0,
    samples: int = 1,
    adaptcoll: bool = True,
    quiet_cache: Optional[dict[Any, RunStats]] = None,
    topology: Optional[Routes] = None,
) -> dict[str, Any]:
    """Quiet and noisy runs of adaptcoll and each baseline; the report the CLI prints and writes.

    `quiet_cache` keeps quiet runs (deterministic) across calls that share a job, e.g. in a sweep.
    `topology`: a described network's routes (see run_once); the report then has "topology".
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if topology is not None:
        topology.check_size(job.size)
    prepared = prepare(job, params.ranks_per_node) if adaptcoll else None
    rows = []
    impls = ([ADAPTCOLL] if adaptcoll else []) + list(baselines)
    for impl in impls:
        key: tuple[Any, ...] = (job, params, impl) if topology is None else (job, params, impl, topology)
        quiet = quiet_cache.get(key) if quiet_cache is not None else None
        if quiet is None:
            quiet = run_once(job, params, impl, None, seed, 0, prepared=prepared, topology=topology)[0]
            if quiet_cache is not None:
                quiet_cache[key] = quiet
        noisy = []
        if not noise.quiet:
            noisy = [
                run_once(job, params, impl, noise, seed, s, prepared=prepared, topology=topology)[0].time_s
                for s in range(samples)
            ]
        row = {"impl": impl_label(impl), **_summary(quiet, noisy)}
        if impl == ADAPTCOLL and prepared is not None:
            row.update(
                protocol=prepared.protocol,
                segments=prepared.plan.nseg,
                segment_bytes=prepared.plan.seg_count * job.itemsize,
                trees=len(prepared.trees),
                library_goes_native=not prepared.choice.serve,
                choice=prepared.choice.label(),
            )
            if prepared.node is not None:
                row["node_level"] = prepared.node.describe()
        rows.append(row)
    report: dict[str, Any] = {
        "tool": "adaptcoll.simulate",
        "format": 1,
        "job": {
            "collective": job.collective,
            "ranks": job.size,
            "size": job.nbytes,
            "segment": job.segment,
            "algorithm": prepared.protocol if prepared is not None else job.algorithm_setting,
            "root": job.root,
            "settings": _settings_dict(job),
        },
        "params": params.to_dict(node_level=prepared is not None and prepared.node is not None),
        "noise": list(noise.texts),
        "noise_fraction": noise.cpu_fraction,
        "seed": seed,
        "samples": samples if not noise.quiet else 0,
        "results": rows,
    }
    if topology is not None:
        report["topology"] = topology.summary()
    return report


def _settings_dict(job: Job) -> dict[str, Any]:
    return dataclasses.asdict(job.settings)


def best_lockstep(
    job: Job,
    params: CostParams,
    noise: NoiseSetup,
    seed: int = 0,
    samples: int = 1,
    max_messages: Optional[int] = BEST_MAX_MESSAGES,
    names: Optional[tuple[str, ...]] = None,
    quiet_cache: Optional[dict[Any, RunStats]] = None,
    topology: Optional[Routes] = None,
) -> dict[str, Any]:
    """Every applicable lock-step baseline for `job` (or `names`) and the fastest, quiet and noisy apart.

    Returns {"results": rows as `compare` gives them (impl "lockstep:NAME"), "skipped": {name: reason}
    (no schedule at this point, an Open MPI rule's pick not modelled, or more than `max_messages`
    estimated messages; None: no limit), "quiet_best": name with the smallest quiet time,
    "noisy_best": name with the smallest noisy median (None without noise)}. Ties go to the first name.
    `topology`: a described network's routes (see run_once).
    """
    run: list[str] = []
    skipped: dict[str, str] = {}
    for name in names if names is not None else tuple(baseline_names(job.collective)):
        try:
            check_applicable(name, job.collective, job.size, job.count, params.ranks_per_node)
        except ValueError as exc:
            skipped[name] = str(exc)
            continue
        est = estimated_messages(name, job.collective, job.size, job.count, params.ranks_per_node)
        if max_messages is not None and est > max_messages:
            skipped[name] = f"about {est:,} messages > {max_messages:,} (impractical to simulate)"
            continue
        run.append(name)
    if not run:
        raise ValueError(f"no lock-step baseline to run for {job.collective} at {job.size} ranks: {skipped}")
    report = compare(job, params, noise, tuple(run), seed, samples, False, quiet_cache, topology)
    rows = report["results"]
    quiet_best = min(zip(run, rows), key=lambda nr: nr[1]["quiet_us"])[0]
    noisy_best = None if noise.quiet else min(zip(run, rows), key=lambda nr: nr[1]["median_us"])[0]
    return {**report, "results": rows, "skipped": skipped, "quiet_best": quiet_best, "noisy_best": noisy_best}
