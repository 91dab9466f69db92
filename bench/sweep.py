"""Repeat whole bench/osu.py launches and summarize them: per (variant, collective, ranks, size, impl) the
median over launches of the per-launch medians, the same for p95, and native/impl ratios (>1: impl faster).

    python bench/sweep.py --ranks 2,4 --launches 3 --name quick -- -c bcast -m 4K:1M --budget 1
    python bench/sweep.py --experiment bench/experiments/core.json --markdown bench/results/core.md
    python bench/sweep.py --summarize bench/out/core/*.json --markdown table.md   # no new launches
    python bench/sweep.py --summarize bench/results/core.json --json ... # re-aggregate a sweep's launches

Every launch runs under a timeout (MPIEXEC_TIMEOUT for Hydra/Open MPI, plus our own kill of the whole
process session a little later); a failed or hung launch is reported and retried once.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import runpy
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "Run",
    "Experiment",
    "LaunchRecord",
    "load_experiment",
    "launch_command",
    "run_launch",
    "aggregate",
    "format_markdown",
    "format_size",
    "main",
]

BENCH = Path(__file__).resolve().parent
OSU = BENCH / "osu.py"


@dataclass(frozen=True)
class Run:
    """One osu.py configuration of an experiment (its name labels the rows it produces)."""

    name: str
    args: tuple[str, ...]
    ranks: tuple[int, ...] = ()  # empty: the experiment's ranks
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Experiment:
    """Runs x rank counts x launches, with launch options."""

    name: str
    runs: tuple[Run, ...]
    ranks: tuple[int, ...] = (2, 4)
    launches: int = 3
    timeout_s: float = 600.0
    description: str = ""
    mpiexec: tuple[str, ...] = ("mpiexec",)
    launcher_args: tuple[str, ...] = ("-bind-to", "core")
    python: str = sys.executable


def _experiment_from_dict(raw: dict[str, Any]) -> Experiment:
    runs = tuple(
        Run(
            r["name"],
            tuple(r["args"]),
            tuple(r.get("ranks", ())),
            tuple(sorted((k, str(v)) for k, v in r.get("env", {}).items())),
        )
        for r in raw["runs"]
    )
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"experiment {raw.get('name')!r}: run names must be unique")
    kwargs: dict[str, Any] = {}
    for key in ("ranks", "mpiexec", "launcher_args"):
        if key in raw:
            kwargs[key] = tuple(raw[key])
    for key in ("launches", "timeout_s", "description", "python"):
        if key in raw:
            kwargs[key] = raw[key]
    return Experiment(raw["name"], runs, **kwargs)


def load_experiment(path: str | Path) -> Experiment:
    """An experiment from a JSON file, or a Python file defining EXPERIMENT = {...} (same keys)."""
    path = Path(path)
    if path.suffix == ".py":
        raw = runpy.run_path(str(path))["EXPERIMENT"]
    else:
        raw = json.loads(path.read_text())
    return _experiment_from_dict(raw)


@dataclass
class LaunchRecord:
    """What happened to one launch (after its retry, if any)."""

    variant: str
    ranks: int
    index: int
    json_path: str
    command: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    attempts: int = 0
    timed_out: list[bool] = field(default_factory=list)
    ok: bool = False
    error: str = ""


def launch_command(exp: Experiment, run: Run, ranks: int, json_path: Path) -> list[str]:
    """mpiexec -n N <launcher args> python bench/osu.py <args> --json FILE --quiet."""
    return [
        *exp.mpiexec,
        "-n",
        str(ranks),
        *exp.launcher_args,
        exp.python,
        str(OSU),
        *run.args,
        "--json",
        str(json_path),
        "--quiet",
    ]


def _session_pids(sid: int) -> list[int]:
    """Processes (still) in session `sid`: the ones our launch started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def _kill_session(proc: subprocess.Popen) -> None:
    """Terminate, then kill, every process of the launch's session (mpiexec, proxies, ranks)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in _session_pids(proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            continue
        if not _session_pids(proc.pid):
            return


def run_launch(
    command: Sequence[str], timeout_s: float, log_path: Path, env: dict[str, str] | None = None, grace_s: float = 15.0
) -> tuple[int | None, bool, float]:
    """Run one launch in its own session; (returncode or None, timed out?, seconds). Leaves nothing behind.

    The launcher gets MPIEXEC_TIMEOUT=timeout_s; if it is still alive grace_s later, its session is killed."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["MPIEXEC_TIMEOUT"] = str(max(1, math.ceil(timeout_s)))  # Hydra and Open MPI end the job themselves
    start = time.perf_counter()
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(command) + "\n")
        log.flush()
        proc = subprocess.Popen(
            list(command), stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
        timed_out = False
        try:
            code: int | None = proc.wait(timeout=timeout_s + grace_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = None
        finally:
            if proc.poll() is None or _session_pids(proc.pid):
                _kill_session(proc)
    seconds = time.perf_counter() - start
    if code is not None and seconds >= timeout_s - 1 and code != 0:
        timed_out = True  # MPIEXEC_TIMEOUT fired
    return code, timed_out, seconds


def run_experiment(exp: Experiment, out_dir: Path, only: Sequence[str] = (), quiet: bool = False) -> list[LaunchRecord]:
    """All launches of an experiment (launch-major order: each pass runs every configuration once)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(run, ranks) for run in exp.runs if not only or run.name in only for ranks in (run.ranks or exp.ranks)]
    records: list[LaunchRecord] = []
    total = len(jobs) * exp.launches
    for index in range(exp.launches):
        for run, ranks in jobs:
            stem = f"{run.name}-n{ranks}-l{index}"
            path = out_dir / f"{stem}.json"
            cmd = launch_command(exp, run, ranks, path)
            rec = LaunchRecord(run.name, ranks, index, str(path), cmd)
            for attempt in (1, 2):
                if path.exists():
                    path.unlink()
                code, hung, secs = run_launch(cmd, exp.timeout_s, out_dir / f"{stem}.log", dict(run.env))
                rec.attempts, rec.returncode, rec.seconds = attempt, code, rec.seconds + secs
                rec.timed_out.append(hung)
                rec.ok = code == 0 and path.exists()
                if rec.ok:
                    break
                tail = (out_dir / f"{stem}.log").read_text()[-600:]
                rec.error = f"{'timed out' if hung else f'exit code {code}'} after {secs:.0f} s; log tail:\n{tail}"
                print(f"[sweep] launch {stem} attempt {attempt} failed: {rec.error}", file=sys.stderr, flush=True)
            records.append(rec)
            if not quiet:
                print(
                    f"[sweep] {len(records)}/{total} {stem}: {'ok' if rec.ok else 'FAILED'} ({rec.seconds:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    return records


# -- aggregation (pure functions, no MPI) --------------------------------------------------------


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def aggregate(launches: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows per (variant, collective, ranks, size, impl) over launches of (variant, osu.py JSON document).

    route: who served the implementation's calls ("adaptcoll", "native: <reason>" when adaptcoll handed
    them to native MPI, e.g. below its thresholds), as osu.py recorded it; "mixed: ..." if launches differ.

    median_us / p95_us / p99_us: median over launches of each launch's median / p95 / p99 (of the
    per-iteration max-over-ranks times); ratio: native median_us / this impl's median_us in the same group;
    launch_ratio: median over launches of the ratio within each launch (native and impl interleaved there,
    so each launch's ratio compares like with like even when launches differ a lot).
    """
    groups: dict[tuple[str, str, int, int, str], list[dict[str, Any]]] = {}
    launch_ratios: dict[tuple[str, str, int, int, str], list[float]] = {}
    for variant, doc in launches:
        native_here = {(r["collective"], r["size"]): r["median_us"] for r in doc["results"] if r["impl"] == "native"}
        settings = {i["label"]: i.get("settings") for i in doc.get("impls", []) if i.get("kind") == "adaptcoll"}
        for r in doc["results"]:
            if "route" not in r and settings.get(r["impl"]):  # a launch from before osu.py recorded routes
                r = {**r, "route": _route_from_settings(settings[r["impl"]], r["collective"], int(r["size"]))}
            key = (variant, r["collective"], int(doc["ranks"]), int(r["size"]), r["impl"])
            groups.setdefault(key, []).append(r)
            base = native_here.get((r["collective"], r["size"]))
            if base is not None and r["median_us"] > 0:  # same launch, interleaved: same conditions
                launch_ratios.setdefault(key, []).append(base / r["median_us"])
    rows = []
    for (variant, coll, ranks, size, impl), rs in sorted(groups.items()):
        meds = [r["median_us"] for r in rs]
        row: dict[str, Any] = {
            "variant": variant,
            "collective": coll,
            "ranks": ranks,
            "size": size,
            "impl": impl,
            "launches": len(rs),
            "median_us": _median(meds),
            "p95_us": _median(r["p95_us"] for r in rs),
            "p99_us": _median(r["p99_us"] for r in rs),
            "min_median_us": min(meds),
            "max_median_us": max(meds),
            "osu_avg_us": _median(r["osu_avg_us"] for r in rs),
        }
        routes = sorted({r["route"] for r in rs if r.get("route")})
        row["route"] = routes[0] if len(routes) == 1 else ("mixed: " + "; ".join(routes) if routes else None)
        ratios = launch_ratios.get((variant, coll, ranks, size, impl))
        row["launch_ratio"] = _median(ratios) if ratios else None
        row["launch_ratios"] = ratios or []
        if "overlap_pct" in rs[0]:
            row["overlap_pct"] = _median(r["overlap_pct"] for r in rs)
            row["pure_median_us"] = _median(r["pure_median_us"] for r in rs)
        rows.append(row)
    native = {(r["variant"], r["collective"], r["ranks"], r["size"]): r for r in rows if r["impl"] == "native"}
    for r in rows:
        base = native.get((r["variant"], r["collective"], r["ranks"], r["size"]))
        r["ratio"] = base["median_us"] / r["median_us"] if base is not None and r["median_us"] > 0 else None
        r["ratio_p95"] = base["p95_us"] / r["p95_us"] if base is not None and r["p95_us"] > 0 else None
    return rows


def _route_from_settings(settings: dict[str, Any], collective: str, size: int) -> str | None:
    """ "native: below native_below" if `size` is below the threshold the launch's settings put on
    `collective` (its own *_native_below, else native_below); None when the settings do not tell."""
    base = collective[1:] if collective.startswith("i") else collective
    own, general = settings.get(f"{base}_native_below", -1), settings.get("native_below")
    threshold = general if own is None or own < 0 else own
    if threshold is None:
        return None
    return "native: below native_below" if size < threshold else None


def format_size(size: int) -> str:
    """4096 -> '4K', 1048576 -> '1M', 100 -> '100'."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def format_markdown(rows: Sequence[dict[str, Any]], title: str = "") -> str:
    """One Markdown table per (variant, collective, ranks): size, then per impl median and p95 (us),
    then for every non-native impl native/impl ratios of the medians, of the p95s, and the median of the
    per-launch ratios. A median marked † is an adaptcoll row that native MPI served (the note under the
    table says why), so it is not a measurement of adaptcoll's protocols."""
    out = [f"## {title}", ""] if title else []
    tables: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        tables.setdefault((r["variant"], r["collective"], r["ranks"]), []).append(r)
    for (variant, coll, ranks), rs in tables.items():
        impls = sorted(dict.fromkeys(r["impl"] for r in rs), key=lambda i: i != "native")  # native first
        others = [i for i in impls if i != "native"]
        has_native = "native" in impls
        launches = sorted({r["launches"] for r in rs})
        out.append(
            f"### {variant}: {coll}, {ranks} ranks (median over {'/'.join(map(str, launches))} launches; times in us)"
        )
        if any("overlap_pct" in r for r in rs):
            out += [
                "",
                "median/p95/ratios: OSU's Overall time (I-call, dummy compute as long as that "
                "implementation's pure comm., Wait); pure comm.: I-call + Wait alone.",
            ]
        out.append("")
        nonblocking = any("overlap_pct" in r for r in rs)
        head = ["size"]
        for i in impls:
            head += [f"{i} median", f"{i} p95"]
            if nonblocking:
                head += [f"{i} pure comm. median", f"{i} overlap %"]
        if has_native:
            for i in others:
                head += [f"native/{i}", f"p95 native/{i}", f"per-launch native/{i}"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        by_size: dict[int, dict[str, dict[str, Any]]] = {}
        for r in rs:
            by_size.setdefault(r["size"], {})[r["impl"]] = r
        notes: dict[tuple[str, str], list[str]] = {}
        for size in sorted(by_size):
            cells = [format_size(size)]
            for i in impls:
                r = by_size[size].get(i)
                mark = ""
                if r and r.get("route") not in (None, "adaptcoll", "native"):
                    mark = " †"
                    notes.setdefault((i, r["route"]), []).append(format_size(size))
                cells += [(_fmt(r["median_us"]) + mark) if r else "-", _fmt(r["p95_us"]) if r else "-"]
                if nonblocking:
                    cells += [_fmt(r.get("pure_median_us")) if r else "-", _fmt(r.get("overlap_pct")) if r else "-"]
            if has_native:
                for i in others:
                    r = by_size[size].get(i)
                    cells += [
                        _fmt(r["ratio"], 2) if r else "-",
                        _fmt(r["ratio_p95"], 2) if r else "-",
                        _fmt(r["launch_ratio"], 2) if r else "-",
                    ]
            out.append("| " + " | ".join(cells) + " |")
        if notes:
            out.append("")
            for (i, route), sizes in notes.items():
                out.append(f"† {i} went to native MPI at {', '.join(sizes)} ({route}): not adaptcoll's protocols.")
        out.append("")
    return "\n".join(out)


def load_launch_jsons(paths: Sequence[str | Path]) -> list[tuple[str, dict[str, Any]]]:
    """(variant, document) pairs from osu.py JSON files named '<variant>-n<ranks>-l<index>.json'
    (other names: the variant is the file's stem)."""
    out = []
    for p in paths:
        p = Path(p)
        doc = json.loads(p.read_text())
        if "results" not in doc:
            continue
        stem = p.stem
        variant = stem.rsplit("-n", 1)[0] if "-n" in stem and stem.rsplit("-n", 1)[1].split("-l")[0].isdigit() else stem
        out.append((variant, doc))
    return out


def _write_outputs(
    rows: list[dict[str, Any]], records: list[LaunchRecord], args: argparse.Namespace, title: str, extra: dict[str, Any]
) -> None:
    md = format_markdown(rows, title)
    print(md)
    failures = [asdict(r) for r in records if not r.ok]
    if failures:
        print(f"\n{len(failures)} launch(es) failed after a retry:", file=sys.stderr)
        for f in failures:
            print(f"  {f['variant']} n={f['ranks']} #{f['index']}: {f['error'][:200]}", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        command = shlex.join([Path(sys.executable).name, *sys.argv])
        Path(args.markdown).write_text(f"<!-- generated by: {command} -->\n\n{md}\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": [sys.executable, *sys.argv],
            "rows": rows,
            "launches": [asdict(r) for r in records],
            "failures": failures,
            **extra,
        }
        Path(args.json).write_text(json.dumps(doc, indent=1))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sweep.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--experiment", help="experiment file (JSON, or .py defining EXPERIMENT)")
    p.add_argument("--only", action="append", default=[], help="run only these run names of the experiment")
    p.add_argument("--summarize", nargs="+", metavar="JSON", help="aggregate existing osu.py JSON files only")
    p.add_argument("--name", default="sweep", help="variant name for an ad-hoc sweep (osu args after --)")
    p.add_argument("--ranks", default=None, help="comma-separated rank counts (default: experiment's, or 2,4)")
    p.add_argument("--launches", type=int, default=None, help="launches per configuration (default 3)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per launch (default 600)")
    p.add_argument("--mpiexec", default=None, help="launcher command (default 'mpiexec')")
    p.add_argument("--launcher-args", default=None, help="launcher flags (default '-bind-to core')")
    p.add_argument("--python", default=None, help="Python that runs osu.py (default this one)")
    p.add_argument("--out", default=None, help="folder for launch JSONs and logs (default bench/out/<name>)")
    p.add_argument("--json", default=None, help="write the summary (rows, launches, failures) as JSON")
    p.add_argument("--markdown", default=None, help="write the summary tables as Markdown")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("osu_args", nargs=argparse.REMAINDER, help="-- then bench/osu.py arguments (ad-hoc sweep)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.summarize:  # osu.py JSONs, or earlier sweep summaries (their launches are re-read and kept)
        paths: list[str] = []
        records: list[LaunchRecord] = []
        extra: dict[str, Any] = {"inputs": args.summarize}
        for name in args.summarize:
            doc = json.loads(Path(name).read_text())
            if "launches" in doc and "rows" in doc:
                records += [LaunchRecord(**r) for r in doc["launches"]]
                paths += [r["json_path"] for r in doc["launches"] if r["ok"]]
                extra.update(
                    {k: doc[k] for k in ("experiment", "description", "mpi_library", "launch_commands") if k in doc}
                )
            else:
                paths.append(name)
        rows = aggregate(load_launch_jsons(paths))
        title = f"{extra.get('experiment', '')}: {extra.get('description', '')}".strip(": ")
        _write_outputs(rows, records, args, title, extra)
        return 0
    if args.experiment:
        exp = load_experiment(args.experiment)
    else:
        osu_args = args.osu_args[1:] if args.osu_args[:1] == ["--"] else args.osu_args
        if not osu_args:
            raise SystemExit("sweep.py: give --experiment FILE, --summarize FILES, or -- <osu.py arguments>")
        exp = Experiment(args.name, (Run(args.name, tuple(osu_args)),))
    changes: dict[str, Any] = {}
    if args.ranks:
        changes["ranks"] = tuple(int(r) for r in args.ranks.split(","))
        changes["runs"] = tuple(replace(r, ranks=()) for r in exp.runs)  # the command line wins
    if args.launches is not None:
        changes["launches"] = args.launches
    if args.timeout is not None:
        changes["timeout_s"] = args.timeout
    if args.mpiexec is not None:
        changes["mpiexec"] = tuple(shlex.split(args.mpiexec))
    if args.launcher_args is not None:
        changes["launcher_args"] = tuple(shlex.split(args.launcher_args))
    if args.python is not None:
        changes["python"] = args.python
    exp = replace(exp, **changes)
    out_dir = Path(args.out) if args.out else BENCH / "out" / exp.name
    started = time.time()
    records = run_experiment(exp, out_dir, args.only, args.quiet)
    docs = [(r.variant, json.loads(Path(r.json_path).read_text())) for r in records if r.ok]
    rows = aggregate(docs)
    meta = {
        "experiment": exp.name,
        "description": exp.description,
        "wall_s": time.time() - started,
        "mpi_library": docs[0][1]["mpi_library"] if docs else None,
        "launch_commands": sorted({shlex.join(r.command[:-3]) for r in records}),
    }
    _write_outputs(rows, records, args, f"{exp.name}: {exp.description}".rstrip(": "), meta)
    return 0 if all(r.ok for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
