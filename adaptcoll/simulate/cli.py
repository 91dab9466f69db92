"""The command line: `python -m adaptcoll.simulate [calibrate|validate|sweep] ...` (see docs/simulate.md).

Without a subcommand it simulates one call:

    python -m adaptcoll.simulate --collective bcast|reduce|allreduce --ranks N --size BYTES --segment BYTES
        [--algorithm TREE] [--noise SPEC]... [--baseline NAME]... [--params FILE] [--seed S]
        [--samples K] [--json FILE] [--trace FILE] [--topology FILE [--sharing S]]

Sizes and rank counts take K/M/G suffixes (binary). The JSON holds simulated results only, so two
runs with one seed write identical files; wall-clock speed goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from ..runtime.settings import parse_size
from ..schedule import describe
from . import fastcore, measured
from .calibrate import TIE, calibrate, sign_agreement, validate
from .lockstep import BASELINES
from .noise_setup import parse_noise
from .params import DEFAULT_PARAMS, PARAM_DOCS, CostParams, load_params, save_params
from .plots import plot_auto, plot_validation
from .programs import COLLECTIVES, Job, prepare
from .routes import SHARING, Routes
from .run import ADAPTCOLL, BEST, BEST_MAX_MESSAGES, best_lockstep, compare, run_once
from .sweep import parse_rank_list, rows_csv, sweep, write_rows_json
from .trace import trace_events, write_trace
from .world import TraceLog

__all__ = ["main"]

SUBCOMMANDS = ("calibrate", "validate", "sweep")


_FITTABLE = tuple(k for k in PARAM_DOCS if k not in ("eager", "transfer", "links", "copy_order"))
"""Fields calibrate can fit: the numbers (eager is a threshold, and the names are choices, not fits)."""


def _size(name: str) -> Any:
    return lambda text: parse_size(text, name)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", metavar="FILE", help="parameters file (default: built-in, see docs/simulate.md)")
    p.add_argument(
        "--ranks-per-node",
        type=int,
        default=0,
        metavar="K",
        help="ranks sharing each node's link (overrides the parameters' ranks_per_node; topo trees follow the nodes)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (noise phases, gaps, skew)")


def _baseline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME",
        choices=[*sorted(BASELINES), BEST],
        help="lock-step baseline (repeatable); 'best': every applicable one and the fastest",
    )
    p.add_argument(
        "--best-max-messages",
        type=int,
        default=BEST_MAX_MESSAGES,
        metavar="N",
        help=f"'best' skips baselines estimated to send more messages (default {BEST_MAX_MESSAGES:,}; 0: no limit)",
    )


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.simulate",
        description="Simulate adaptcoll's real protocols (and lock-step baselines) at scale under noise. "
        "Subcommands: calibrate, validate, sweep (python -m adaptcoll.simulate SUBCOMMAND -h).",
    )
    p.add_argument("--collective", required=True, choices=COLLECTIVES)
    p.add_argument("--ranks", required=True, type=_size("--ranks"), help="simulated ranks, e.g. 65536 or 64K")
    p.add_argument("--size", required=True, type=_size("--size"), help="message bytes, e.g. 16M")
    p.add_argument(
        "--segment",
        default=0,
        type=_size("--segment"),
        help="segment bytes, e.g. 512K (default: what the shipped rule chooses for the call, with its algorithm)",
    )
    p.add_argument(
        "--algorithm",
        default="",
        help="tree ('binomial', 'knomial:radix=4', ...), a schedule's weighted forests ('forest:PATH'), protocol "
        "name (ring, rabenseifner) or the shared-memory node level ('shm', 'topo:intra=shm,inner=...'; with "
        "--ranks-per-node)",
    )
    p.add_argument("--noise", action="append", default=[], metavar="SPEC", help="noise component (repeatable)")
    _baseline_args(p)
    _common(p)
    p.add_argument("--samples", type=int, default=1, help="noise draws per implementation (default 1)")
    p.add_argument("--json", metavar="FILE", help="write the results (deterministic for one seed)")
    p.add_argument("--trace", metavar="FILE", help="Perfetto trace of adaptcoll's run (the first noisy draw)")
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="a described network (adaptcoll.topology/1) whose links, switches and routes carry the messages "
        "(its ranks must equal --ranks); default: one link per node, no network core",
    )
    p.add_argument(
        "--sharing",
        choices=SHARING,
        default="maxmin",
        help="how messages share a --topology's links: max-min fair rates (default) or 'bottleneck', each at "
        "its equal share of its most crowded link (the earlier model)",
    )
    p.add_argument(
        "--core",
        choices=fastcore.CORES,
        default=None,
        help="where adaptcoll's protocols run: 'c' (the compiled engine's tree protocols on the C event core), "
        "'python' (the library's Python protocols on the Python core) or 'auto' (C where it applies; the "
        "default, or ADAPTCOLL_SIM_CORE). Both give the same results; C is 12-27x faster",
    )
    return p


def _args_params(args: argparse.Namespace) -> CostParams:
    """The parameters a subcommand's --params and --ranks-per-node (where it has one) give."""
    return _params(args.params, getattr(args, "ranks_per_node", 0))


def _params(path: Optional[str], ranks_per_node: int = 0) -> CostParams:
    params = load_params(path) if path else DEFAULT_PARAMS
    if ranks_per_node < 0:
        raise ValueError(f"--ranks-per-node must be >= 1, got {ranks_per_node}")
    return dataclasses.replace(params, ranks_per_node=ranks_per_node) if ranks_per_node else params


def _fmt_us(us: float) -> str:
    return f"{us:,.1f}"


def _print_report(report: dict[str, Any]) -> None:
    job = report["job"]
    segment = f"segment {job['segment']:,} B" if job["segment"] else "configuration of the shipped rule"
    print(
        f"{job['collective']} of {job['size']:,} bytes over {job['ranks']:,} ranks, {segment}, "
        f"algorithm {job['algorithm']}"
    )
    topo = report.get("topology")
    if topo:
        print(
            f"network: {topo['name'] or topo.get('file', 'described')} ({topo['switches']:,} switches, "
            f"{topo['links']:,} links; routes through switches, links shared "
            f"{'max-min fairly' if topo.get('sharing', 'maxmin') == 'maxmin' else 'by the bottleneck model'})"
        )
    if report["noise"]:
        print(
            f"noise: {' + '.join(report['noise'])} (CPU fraction {report['noise_fraction']:.4g}); "
            f"{report['samples']} draw(s), seed {report['seed']}"
        )
    print(f"{'implementation':<32}{'quiet us':>14}{'noisy median us':>18}{'slowdown':>10}{'messages':>12}")
    for r in report["results"]:
        noisy = _fmt_us(r["median_us"]) if "median_us" in r else "-"
        slow = f"{r['slowdown']:.3f}" if "slowdown" in r else "-"
        print(f"{r['impl']:<32}{_fmt_us(r['quiet_us']):>14}{noisy:>18}{slow:>10}{r['messages']:>12,}")
        if r["impl"] == ADAPTCOLL:
            print(f"  {r['segments']} segment(s) of {r['segment_bytes']:,} B on {r['trees']} tree(s): {r['choice']}")
            node = r.get("node_level")
            if node:
                print(
                    f"  node level: {node['nodes']:,} node(s) of up to {node['largest_node']} ranks, "
                    f"{node['slots']} slots of {node['slot_bytes']:,} B per rank; trees between node leaders"
                )
    best = report.get("best")
    if best:
        rows = {r["impl"]: r for r in report["results"]}
        q = best["quiet_best"]
        line = f"best lock-step: quiet {q} ({_fmt_us(rows['lockstep:' + q]['quiet_us'])} us)"
        if best["noisy_best"]:
            n = best["noisy_best"]
            line += f", noisy median {n} ({_fmt_us(rows['lockstep:' + n]['median_us'])} us)"
        print(line)
        for name, why in best["skipped"].items():
            print(f"  skipped {name}: {why}")


def run_main(argv: Sequence[str]) -> int:
    args = _run_parser().parse_args(argv)
    if args.core:
        os.environ["ADAPTCOLL_SIM_CORE"] = args.core  # (every run of this process, baselines' best included)
    params = _args_params(args)
    noise = parse_noise(args.noise)
    job = Job(args.collective, args.ranks, args.size, args.segment, args.algorithm)
    routes = None
    if args.topology:
        described = describe.load(args.topology)
        routes = Routes(described, args.sharing)
        routes.check_size(job.size)
        if not job.settings.topology:  # its nodes, as discovery would find them: `topo` trees and the rule
            job = dataclasses.replace(job, settings=dataclasses.replace(job.settings, topology=described.node_spec()))
    wall0 = time.perf_counter()
    cache: dict[Any, Any] = {}
    best = None
    if BEST in args.baseline:
        limit = args.best_max_messages or None
        best = best_lockstep(job, params, noise, args.seed, args.samples, limit, None, cache, routes)
    have = {r["impl"] for r in best["results"]} if best else set()
    names = tuple(b for b in args.baseline if b != BEST and f"lockstep:{b}" not in have)
    report = compare(job, params, noise, names, args.seed, args.samples, True, cache, routes)
    if routes is not None:
        report["topology"]["file"] = args.topology
    if best is not None:
        report["results"] += best["results"]
        report["best"] = {k: best[k] for k in ("quiet_best", "noisy_best", "skipped")}
    wall = time.perf_counter() - wall0
    _print_report(report)
    events = sum(r["events"] * (1 + (report["samples"] or 0)) for r in report["results"])
    print(f"[{events:,} events simulated in {wall:.1f} s wall; {fastcore.USE.summary()}]", file=sys.stderr)
    if routes is not None:
        print(f"[{routes.cached:,} routes, {routes.dijkstras:,} switch Dijkstras]", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    if args.trace:
        log = TraceLog()
        noisy = None if noise.quiet else noise
        stats, world, _ = run_once(
            job,
            params,
            ADAPTCOLL,
            noisy,
            args.seed,
            0,
            trace=log,
            prepared=prepare(job, params.ranks_per_node),
            topology=routes,
        )
        events_list = trace_events(log, job.size, lambda tag: tag, world.cpu_noise, stats.time_s)
        write_trace(args.trace, events_list, {"job": report["job"], "noise": report["noise"], "seed": args.seed})
        print(f"trace: {len(events_list):,} events in {args.trace} (open in https://ui.perfetto.dev)")
    return 0


# -- calibrate / validate -----------------------------------------------------------------------------
def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--osu", action="append", required=True, metavar="FILE", help="bench/osu.py JSON or sweep summary")
    p.add_argument("--ranks", default="", help="only these rank counts, e.g. 2,4")
    p.add_argument("--min-size", type=_size("--min-size"), default=1 << 20, help="smallest size used (default 1M)")
    p.add_argument("--max-size", type=_size("--max-size"), default=64 << 20, help="largest size used (default 64M)")


def _rows(args: argparse.Namespace, impl: str) -> list[measured.Measurement]:
    ranks = set(parse_rank_list(args.ranks)) if args.ranks else None
    rows = []
    for path in args.osu:
        for m in measured.read_measurements(path):
            if ranks is not None and m.ranks not in ranks:
                continue
            if not args.min_size <= m.size <= args.max_size:
                continue
            if impl != "all" and m.kind != impl:
                continue
            if m.kind == "adaptcoll" and m.settings is not None and m.size < m.settings.threshold(m.collective):
                continue  # the library handed this call to native MPI: not adaptcoll's protocol
            rows.append(m)
    if not rows:
        raise ValueError("no measurement matched the filters (--ranks, --min-size, --max-size, --impl)")
    return rows


def _table(rows: Sequence[dict[str, Any]], noise: bool) -> str:
    head = "| collective | ranks | size | implementation | model |" + (" noise |" if noise else "")
    head += " measured us | simulated us | error |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["collective"], str(r["ranks"]), f"{r['size'] >> 20}M", r["impl"], r.get("model", "adaptcoll")]
        if noise:
            cells.append(r.get("noise") or "quiet")
        cells += [_fmt_us(r["measured_us"]), _fmt_us(r["simulated_us"]), f"{r['error_pct']:+.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def calibrate_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.simulate calibrate",
        description="Fit the simulator's parameters to bench/osu.py (and bench/engine_cost.py) output of this "
        "machine; writes a parameters file for --params.",
    )
    _filters(p)
    p.add_argument("--engine-cost", metavar="FILE", help="output of mpiexec -n 2 python bench/engine_cost.py --mpi")
    p.add_argument(
        "--engine",
        choices=("python", "compiled"),
        default="python",
        help="which engine's per-message costs to take from --engine-cost (o = its bare loop per message, engine = "
        "what adaptcoll adds per segment event); default python",
    )
    p.add_argument("--pingpong", metavar="FILE", help="ping-pong JSON lines (ranks, bytes, one_way_us): first guess")
    p.add_argument(
        "--pair-order", metavar="FILE", help="bench/pair_order.py --json output: sets links (pair or fair) from it"
    )
    p.add_argument(
        "--fit",
        default="",
        help="fields to fit (default L,G,fold; none: keep --params with --engine-cost's o and engine; from: "
        f"{', '.join(_FITTABLE)})",
    )
    p.add_argument("--params", metavar="FILE", help='starting values (e.g. {"transfer": "cpu"}); default built-in')
    p.add_argument("--out", required=True, metavar="FILE", help="parameters file to write")
    args = p.parse_args(argv)
    rows = _rows(args, "adaptcoll")
    engine = measured.read_engine_cost(args.engine_cost, args.engine) if args.engine_cost else None
    pingpong = measured.read_pingpong(args.pingpong) if args.pingpong else None
    pair_order = measured.read_pair_order(args.pair_order) if args.pair_order else None
    fields: Optional[list[str]] = [f.strip() for f in args.fit.split(",") if f.strip()] or None
    if fields == ["none"]:  # keep the starting values (and --engine-cost's o and engine): errors only
        fields = []
    for f in fields or ():
        if f not in _FITTABLE:
            raise ValueError(f"--fit: cannot fit {f!r}; choose from {', '.join(_FITTABLE)}")
    params, info = calibrate(rows, engine, pingpong, _args_params(args), fields, pair_order)
    source = {
        "osu": list(args.osu),
        "engine_cost": args.engine_cost,
        "engine": args.engine,
        "start": args.params,
        "pingpong": args.pingpong,
        "pair_order": args.pair_order,
        "ranks": sorted({m.ranks for m in rows}),
        "sizes": [args.min_size, args.max_size],
    }
    save_params(args.out, params, source=source, fit=info)
    print(_table(info["rows"], False))
    print(
        f"\nfitted {', '.join(info['fields'])} in {info['iterations']} iterations, rms log error "
        f"{info['rms_log_error']:.3f}; wrote {args.out}"
    )
    for name in PARAM_DOCS:
        value = getattr(params, name)
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"  {name:>9} = {shown}   ({PARAM_DOCS[name]})")
    return 0


def validate_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.simulate validate",
        description="Simulated vs measured times of measured rows (noisy rows under their noise spec).",
    )
    _filters(p)
    _common(p)
    p.add_argument("--impl", choices=("adaptcoll", "native", "all"), default="adaptcoll")
    p.add_argument("--samples", type=int, default=5, help="noise draws per noisy row (default 5)")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--plot", metavar="PNG")
    args = p.parse_args(argv)
    rows = validate(_rows(args, args.impl), _args_params(args), args.samples, args.seed)
    noisy = any(r["noise"] for r in rows)
    table = _table(rows, noisy)
    errors = sorted(abs(r["error_pct"]) for r in rows)
    within = sum(e <= 25 for e in errors)
    summary = (
        f"{len(rows)} rows: median |error| {statistics.median(errors):.1f}%, max {errors[-1]:.1f}%, {within} within 25%"
    )
    signs = sign_agreement(rows)
    if signs["pairs"]:
        summary += (
            f"; adaptcoll faster or slower than native as measured in {signs['right']} of {signs['pairs']} pairs"
            f" ({signs['ties']} measured ties within {TIE:.0%}, {signs['ties_right']} of them right)"
        )
    print(table + "\n\n" + summary)
    if args.json:
        doc = {"rows": rows, "summary": summary, "signs": signs}
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n\n" + summary + "\n")
    if args.plot:
        plot_validation(rows, args.plot)
    return 0


def sweep_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m adaptcoll.simulate sweep",
        description="Slowdown under noise over rank counts and noise conditions; JSON/CSV table and a plot.",
    )
    p.add_argument("--collective", required=True, choices=COLLECTIVES)
    p.add_argument("--ranks", required=True, help="e.g. 16:1M (doubling), 1K,16K,64K")
    p.add_argument("--size", required=True, type=_size("--size"))
    p.add_argument("--segment", default=0, type=_size("--segment"), help="default: the shipped rule's choice")
    p.add_argument("--algorithm", default="")
    p.add_argument("--noise", action="append", default=[], metavar="CONDITION", help="one condition (repeatable)")
    _baseline_args(p)
    p.add_argument("--no-adaptcoll", action="store_true", help="baselines only")
    _common(p)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--csv", metavar="FILE")
    p.add_argument("--plot", metavar="PNG", help="vs ranks (several rank counts) or frequency x length grid")
    args = p.parse_args(argv)
    if not args.noise:
        raise ValueError("sweep needs at least one --noise condition")
    rows = sweep(
        args.collective,
        parse_rank_list(args.ranks),
        args.size,
        args.segment,
        args.noise,
        args.baseline,
        _args_params(args),
        args.algorithm,
        args.seed,
        args.samples,
        not args.no_adaptcoll,
        best_max_messages=args.best_max_messages or None,
        progress=lambda line: print(line, file=sys.stderr),
    )
    text = rows_csv(rows)
    print(text, end="")
    if args.csv:
        Path(args.csv).write_text(text)
    if args.json:
        meta = {"params": _args_params(args).to_dict(), "seed": args.seed, "argv": list(argv)}
        write_rows_json(args.json, rows, meta)
    if args.plot:
        plot_auto(rows, args.plot)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `python -m adaptcoll.simulate`."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in SUBCOMMANDS:
            return {"calibrate": calibrate_main, "validate": validate_main, "sweep": sweep_main}[args[0]](args[1:])
        return run_main(args)
    except ValueError as exc:
        print(f"adaptcoll.simulate: error: {exc}", file=sys.stderr)
        return 2
