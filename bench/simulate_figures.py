"""The simulated figures of bench/RESULTS.md and docs/noise.md ("Noise at scale (simulated)").

Each step writes its rows to bench/results/simulate/parts/ (so long steps can run one at a time, each
under the machine lock and ~10 minutes); `report` turns all parts into Markdown tables
(bench/results/simulate/*.md) and plots (bench/results/plots/simulate-*.png).

    python bench/simulate_figures.py validation            # (b) calibrate + validate against measurements
    python bench/simulate_figures.py amplification 8K      # (c) lock-step Bcast, 2.5 % noise, 2^4..2^20 ranks
    python bench/simulate_figures.py scale bcast adaptcoll 16,64,256,1K,4K,16K,64K,256K,1M
    python bench/simulate_figures.py scale allreduce rabenseifner 64K --only 1kHz   # one condition: split
    python bench/simulate_figures.py grid bcast 4096 adaptcoll binomial scatter_allgather
    python bench/simulate_figures.py report

Everything is simulated except the measurements read in `validation`; results depend only on the seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from adaptcoll.runtime.settings import configure, parse_size
from adaptcoll.simulate import plots
from adaptcoll.simulate.calibrate import calibrate, simulated_time, validate
from adaptcoll.simulate.measured import read_engine_cost, read_measurements, read_pingpong
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams, load_params, save_params
from adaptcoll.simulate.sweep import parse_rank_list, sweep

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "simulate"
PARTS = OUT / "parts"
PLOTS = ROOT / "results" / "plots"
MEASURED = Path("/work/shared/measurements/16core-2026-11-23")
SEED = 1

SIZES = {"bcast": 16 << 20, "reduce": 4 << 20, "allreduce": 4 << 20}
"""The sizes measured under noise at 16 ranks (docs/noise.md)."""
SCALE_NOISE = ["100Hz x 250us", "1kHz x 25us", "10kHz x 2.5us"]
"""(d): 2.5 % of every CPU, at three frequencies."""
AMPLIFICATION_NOISE = ["10Hz x 2.5ms", "100Hz x 250us", "1kHz x 25us", "10kHz x 2.5us"]


def samples_for(ranks: int) -> int:
    """Noise draws per point: the maximum over many ranks varies less, and costs more."""
    if ranks <= 1024:
        return 7
    if ranks <= 16384:
        return 3
    if ranks <= 65536:
        return 2
    return 1


def _save(name: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    PARTS.mkdir(parents=True, exist_ok=True)
    (PARTS / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PARTS / (name + '.json')} ({len(rows)} rows)", file=sys.stderr)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- (b) validation ------------------------------------------------------------------------------------
def step_validation() -> None:
    cpu = CostParams(transfer="cpu")
    OUT.mkdir(parents=True, exist_ok=True)
    # 16-core node: fit L, G and fold at 4 ranks (first guess of L and G from the ping-pong, o and engine
    # from engine_cost), then predict 8 and 16 ranks
    fit_rows = [m for m in read_measurements(MEASURED / "osu_dataset_n4.json") if _served(m)]
    params, info = calibrate(
        fit_rows,
        read_engine_cost(MEASURED / "engine_cost.txt"),
        read_pingpong(MEASURED / "pingpong.jsonl"),
        cpu,
        ("L", "G", "fold"),
    )
    source = {"osu": "osu_dataset_n4.json (1-64 MiB, adaptcoll rows)", "engine_cost": "engine_cost.txt"}
    save_params(OUT / "params_16core.json", params, source={**source, "pingpong": "pingpong.jsonl"}, fit=info)
    rows = []
    for n in (4, 8, 16):
        rows += validate([m for m in read_measurements(MEASURED / f"osu_dataset_n{n}.json") if _served(m)], params)
    _save("validation_16core", rows, {"params": params.to_dict(), "fit_rms_log_error": info["rms_log_error"]})
    # noise at 16 ranks: measured and simulated slowdowns (native = the lock-step model of calibrate.NATIVE_AS)
    quiet = {(m.collective, m.size, m.impl): m for m in read_measurements(MEASURED / "noise16_quiet.json")}
    noise_rows = []
    for name in ("noise16_1kHz_x_25us.json", "noise16_100Hz_x_250us.json", "noise16_10Hz_x_2_5ms.json"):
        for m in read_measurements(MEASURED / name):
            q = quiet[(m.collective, m.size, m.impl)]
            sim_q = simulated_time(q, params)
            draws = [simulated_time(m, params, 1, SEED + s) for s in range(40)]
            noise_rows.append(
                {
                    "noise": m.noise,
                    "collective": m.collective,
                    "size": m.size,
                    "impl": m.impl,
                    "measured_slowdown": m.median_us / q.median_us,
                    "simulated_slowdown": statistics.median(draws) / sim_q,
                    "simulated_mean_slowdown": statistics.fmean(draws) / sim_q,
                }
            )
            _progress(f"{m.noise} {m.collective} {m.size} {m.impl}: {noise_rows[-1]['simulated_slowdown']:.3f}")
    _save("noise_16core", noise_rows, {"params": params.to_dict(), "draws": 40})
    # this 2-core machine: fit L, G, fold at 2 ranks, predict 4 ranks (2 ranks per core)
    core = ROOT / "results" / "core_defaults.json"
    fit2 = [m for m in read_measurements(core) if m.ranks == 2 and _served(m)]
    params2, info2 = calibrate(fit2, read_engine_cost(OUT / "engine_cost_2core.txt"), None, cpu, ("L", "G", "fold"))
    save_params(OUT / "params_2core.json", params2, source={"osu": "core_defaults.json, 2 ranks"}, fit=info2)
    rows2 = validate([m for m in read_measurements(core) if _served(m)], params2)
    _save("validation_2core", rows2, {"params": params2.to_dict(), "fit_rms_log_error": info2["rms_log_error"]})
    # 4 ranks on 2 cores: each rank has half a core; the model has one CPU per rank, so give every CPU half
    # its speed ("fraction: 50%") to see whether the miss is that sharing
    shared = [dataclasses.replace(m, noise="fraction: 50%") for m in read_measurements(core) if m.ranks == 4]
    rows3 = validate([m for m in shared if _served(m)], params2, samples=1)
    _save("validation_2core_shared", rows3, {"params": params2.to_dict(), "noise": "fraction: 50%"})


def _served(m: Any) -> bool:
    """adaptcoll rows of 1-64 MiB the library served itself (not below its native threshold)."""
    if m.kind != "adaptcoll" or m.settings is None or not (1 << 20) <= m.size <= (64 << 20):
        return False
    return bool(m.size >= m.settings.threshold(m.collective))


# -- (c) amplification, (d) scale ---------------------------------------------------------------------
def step_amplification(size_text: str, ranks_text: str) -> None:
    size = parse_size(size_text)
    ranks = parse_rank_list(ranks_text)
    rows = sweep(
        "bcast", ranks, size, 512 << 10, AMPLIFICATION_NOISE, ["binomial"], DEFAULT_PARAMS,
        seed=SEED, samples=samples_for, adaptcoll=False, progress=_progress,
    )  # fmt: skip
    _save(f"amplification_{size_text}_{ranks_text.replace(',', '_')}", rows, {"params": DEFAULT_PARAMS.to_dict()})


def step_scale(
    collective: str,
    impl: str,
    ranks_text: str,
    params_file: str = "",
    changes: str = "",
    only: str = "",
    samples: int = 0,
) -> None:
    """One implementation over rank counts under the (d) noise; `changes` ('k=v;k=v') alters adaptcoll's
    settings (the rows then name them: 'adaptcoll:max_segments=0'); `only` keeps one of the (d) conditions
    (to split a long step: each part repeats the quiet run); `samples` > 0 replaces `samples_for`."""
    conditions = [c for c in SCALE_NOISE if not only or c.startswith(only + " ")]
    if not conditions:
        raise SystemExit(f"--only {only!r}: no condition of {SCALE_NOISE}")
    params = load_params(params_file) if params_file else DEFAULT_PARAMS
    ranks = parse_rank_list(ranks_text)
    baselines = [] if impl == "adaptcoll" else [impl]
    if changes:
        configure(**dict(item.split("=", 1) for item in changes.split(";")))
    rows = sweep(
        collective, ranks, SIZES[collective], 512 << 10, conditions, baselines, params,
        seed=SEED, samples=samples or samples_for, adaptcoll=impl == "adaptcoll", progress=_progress,
    )  # fmt: skip
    if changes:
        for row in rows:
            row["impl"] = f"adaptcoll:{changes}" if row["impl"] == "adaptcoll" else row["impl"]
    prefix = "scale" if not params_file else f"alt-{Path(params_file).stem}"  # other parameters: not in the report
    tag = changes.replace("=", "").replace(";", "-")
    name = f"{prefix}_{collective}_{impl}{'-' + tag if tag else ''}_{ranks_text.replace(',', '_')}"
    name += f"_{only}" if only else ""
    _save(name, rows, {"params": params.to_dict(), "settings": changes})


def grid_conditions() -> list[str]:
    """Detour frequency x length, every pair that leaves the rank some CPU (f x d < 1)."""
    freqs = ["10Hz", "100Hz", "1kHz", "10kHz"]
    lengths = ["2.5us", "25us", "250us", "2.5ms"]
    values = {"10Hz": 10, "100Hz": 100, "1kHz": 1e3, "10kHz": 1e4, "2.5us": 2.5e-6, "25us": 25e-6}
    values.update({"250us": 250e-6, "2.5ms": 2.5e-3})
    return [f"{f} x {d}" for f in freqs for d in lengths if values[f] * values[d] < 0.5]


def step_grid(collective: str, ranks: int, impls: list[str]) -> None:
    baselines = [i for i in impls if i != "adaptcoll"]
    rows = sweep(
        collective, [ranks], SIZES[collective], 512 << 10, grid_conditions(), baselines, DEFAULT_PARAMS,
        seed=SEED, samples=3, adaptcoll="adaptcoll" in impls, progress=_progress,
    )  # fmt: skip
    _save(f"grid_{collective}_{ranks}", rows, {"params": DEFAULT_PARAMS.to_dict()})


# -- report --------------------------------------------------------------------------------------------
def _load(prefix: str, exact: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(PARTS.glob(f"{prefix}.json" if exact else f"{prefix}*.json")):
        rows += json.loads(path.read_text())["rows"]
    return rows


def _ranks(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}K" if n >= 1024 else str(n)


def _validation_md(rows: list[dict[str, Any]], title: str) -> str:
    lines = [f"### {title}", "", "| ranks | collective | rows | median abs error | max abs error | within 25% |"]
    lines.append("|---:|---|---:|---:|---:|---:|")
    groups: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in rows:
        groups[(r["ranks"], r["collective"])].append(abs(r["error_pct"]))
    for (n, c), errs in sorted(groups.items()):
        lines.append(
            f"| {n} | {c} | {len(errs)} | {statistics.median(errs):.0f}% | {max(errs):.0f}% | "
            f"{sum(e <= 25 for e in errs)}/{len(errs)} |"
        )
    lines += ["", "| ranks | collective | size | implementation | measured us | simulated us | error |"]
    lines.append("|---|---|---|---|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["ranks"], r["collective"], r["impl"], r["size"])):
        lines.append(
            f"| {r['ranks']} | {r['collective']} | {r['size'] >> 20}M | {r['impl']} | {r['measured_us']:,.0f} | "
            f"{r['simulated_us']:,.0f} | {r['error_pct']:+.0f}% |"
        )
    return "\n".join(lines) + "\n"


def _scale_md(rows: list[dict[str, Any]]) -> str:
    lines = []
    for c in ("bcast", "reduce", "allreduce"):
        sel = [r for r in rows if r["collective"] == c]
        if not sel:
            continue
        impls = sorted({r["impl"] for r in sel}, key=lambda i: (i != "adaptcoll", i))
        lines += [f"### {c} {SIZES[c] >> 20} MiB (slowdown = noisy median / quiet; quiet time in us)", ""]
        lines.append("| ranks | noise | " + " | ".join(impls) + " |")
        lines.append("|---:|---|" + "---:|" * len(impls))
        cells = {(r["ranks"], r["noise"], r["impl"]): r for r in sel}
        for n in sorted({r["ranks"] for r in sel}):
            for cond in SCALE_NOISE:
                vals = []
                for impl in impls:
                    r = cells.get((n, cond, impl))
                    vals.append(f"x{r['slowdown']:.3f} ({r['quiet_us']:,.0f})" if r else "")
                lines.append(f"| {_ranks(n)} | {cond} | " + " | ".join(vals) + " |")
        lines.append("")
    return "\n".join(lines)


def _adapt_vs_lockstep_md(rows: list[dict[str, Any]]) -> str:
    """(d) in one table: per collective, 1K/16K/64K ranks x the three 2.5 % conditions, slowdown of adaptcoll
    and of each lock-step baseline, with the quiet times (each slowdown is against its own quiet time), and the
    noisy median time of adaptcoll over that of the fastest lock-step baseline (< 1: adaptcoll is faster)."""
    lines = []
    for c in ("bcast", "reduce", "allreduce"):
        sel = [r for r in rows if r["collective"] == c and r["ranks"] in (1024, 16384, 65536)]
        if not sel:
            continue
        impls = sorted({r["impl"] for r in sel}, key=lambda i: (i != "adaptcoll", i))
        cells = {(r["ranks"], r["noise"], r["impl"]): r for r in sel}
        lines += [f"**{c} {SIZES[c] >> 20} MiB**", ""]
        head = " | ".join(impls)
        lines.append(f"| ranks | quiet us: {', '.join(impls)} | noise | {head} | adaptcoll time / best lock-step |")
        lines.append("|---:|---|---|" + "---:|" * (len(impls) + 1))
        for n in sorted({r["ranks"] for r in sel}):
            quiet = ", ".join(
                f"{cells[(n, SCALE_NOISE[0], i)]['quiet_us']:,.0f}" if (n, SCALE_NOISE[0], i) in cells else "-"
                for i in impls
            )
            for k, cond in enumerate(SCALE_NOISE):
                vals = [f"x{cells[(n, cond, i)]['slowdown']:.3f}" if (n, cond, i) in cells else "-" for i in impls]
                ours = cells.get((n, cond, "adaptcoll"))
                theirs = [cells[(n, cond, i)]["median_us"] for i in impls if i != "adaptcoll" and (n, cond, i) in cells]
                vals.append(f"{ours['median_us'] / min(theirs):.2f}" if ours and theirs else "-")
                lines.append(
                    f"| {_ranks(n) if k == 0 else ''} | {quiet if k == 0 else ''} | {cond} | " + " | ".join(vals) + " |"
                )
        lines.append("")
    return "\n".join(lines)


def step_report() -> None:
    PLOTS.mkdir(parents=True, exist_ok=True)
    out = []
    for name, title in (
        ("validation_16core", "16-core node"),
        ("validation_2core", "this 2-core VM"),
        ("validation_2core_shared", "this 2-core VM, 4 ranks with every CPU at half speed"),
    ):
        rows = _load(name, exact=True)
        if rows:
            (OUT / f"{name}.md").write_text(_validation_md(rows, f"Simulated vs measured, {title}"))
            plots.plot_validation(rows, PLOTS / f"simulate-{name}.png", f"simulated vs measured, {title}")
            out.append(f"{name}: {len(rows)} rows")
    noise = _load("noise_16core")
    if noise:
        lines = ["| noise | collective | size | impl | measured slowdown | simulated median | simulated mean |"]
        lines.append("|---|---|---|---|---:|---:|---:|")
        for r in noise:
            lines.append(
                f"| {r['noise']} | {r['collective']} | {r['size'] >> 20}M | {r['impl']} | x{r['measured_slowdown']:.2f}"
                f" | x{r['simulated_slowdown']:.2f} | x{r['simulated_mean_slowdown']:.2f} |"
            )
        (OUT / "noise_16core.md").write_text("\n".join(lines) + "\n")
    for size in ("8K", "16M"):
        amp = _load(f"amplification_{size}_")
        if amp:
            plots.plot_vs_ranks(amp, PLOTS / f"simulate-amplification-{size}.png",
                                f"lock-step binomial Bcast {size}: 2.5% CPU noise, rarer+longer vs ranks")  # fmt: skip
            cells = {(r["ranks"], r["noise"]): r["slowdown"] for r in amp}
            ranks = sorted({r["ranks"] for r in amp})
            lines = ["| noise (2.5%) | " + " | ".join(_ranks(n) for n in ranks) + " |", "|---|" + "---:|" * len(ranks)]
            for cond in AMPLIFICATION_NOISE:
                lines.append(
                    f"| {cond} | " + " | ".join(f"x{cells.get((n, cond), float('nan')):.3f}" for n in ranks) + " |"
                )
            (OUT / f"amplification_{size}.md").write_text("\n".join(lines) + "\n")
    for path in sorted(PARTS.glob("grid_*.json")):
        grid = json.loads(path.read_text())["rows"]
        plots.plot_grid(grid, PLOTS / f"simulate-{path.stem.replace('_', '-')}.png")
        impls = sorted({r["impl"] for r in grid}, key=lambda i: (i != "adaptcoll", i))
        cells = {(r["noise"], r["impl"]): r["slowdown"] for r in grid}
        lines = ["| detours | fraction | " + " | ".join(impls) + " |", "|---|---:|" + "---:|" * len(impls)]
        for cond in grid_conditions():
            frac = next((r["noise_fraction"] for r in grid if r["noise"] == cond), float("nan"))
            vals = " | ".join(f"x{cells.get((cond, i), float('nan')):.3f}" for i in impls)
            lines.append(f"| {cond} | {frac:.2%} | {vals} |")
        (OUT / f"{path.stem}.md").write_text("\n".join(lines) + "\n")
    scale = _load("scale_")
    if scale:
        (OUT / "scale.md").write_text(_scale_md(scale))
        (OUT / "adapt_vs_lockstep.md").write_text(_adapt_vs_lockstep_md(scale))
        for c in ("bcast", "reduce", "allreduce"):
            sel = [r for r in scale if r["collective"] == c]
            if sel:
                plots.plot_vs_ranks(sel, PLOTS / f"simulate-scale-{c}.png")
                bars = [r for r in sel if r["ranks"] in (1024, 16384, 65536)]
                if bars:
                    plots.plot_bars(bars, PLOTS / f"simulate-adapt-vs-lockstep-{c}.png")
    print("\n".join(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("validation")
    amp = sub.add_parser("amplification")
    amp.add_argument("size", help="8K or 16M")
    amp.add_argument("ranks", nargs="?", default="16:1M:4")
    sc = sub.add_parser("scale")
    sc.add_argument("collective", choices=sorted(SIZES))
    sc.add_argument("impl", help="adaptcoll or a baseline name")
    sc.add_argument("ranks")
    sc.add_argument("--params", default="")
    sc.add_argument("--settings", default="", help="adaptcoll settings for this step, e.g. max_segments=0")
    sc.add_argument("--only", default="", help="one noise frequency of the step (100Hz, 1kHz or 10kHz)")
    sc.add_argument("--samples", type=int, default=0, help="noise draws per point (default: by rank count)")
    gr = sub.add_parser("grid")
    gr.add_argument("collective", choices=sorted(SIZES))
    gr.add_argument("ranks", type=int)
    gr.add_argument("impls", nargs="+")
    sub.add_parser("report")
    args = parser.parse_args()
    if args.step == "validation":
        step_validation()
    elif args.step == "amplification":
        step_amplification(args.size, args.ranks)
    elif args.step == "scale":
        step_scale(args.collective, args.impl, args.ranks, args.params, args.settings, args.only, args.samples)
    elif args.step == "grid":
        step_grid(args.collective, args.ranks, args.impls)
    else:
        step_report()


if __name__ == "__main__":
    main()
