"""Golden outputs of adaptcoll.simulate: a fixed set of jobs whose results must not change, bit for bit.

Each job is run as `python -m adaptcoll.simulate ... --json` runs it (`run.compare`, the same JSON
dump), under fixed settings (not the environment's), and every run's per-rank start and finish
times, counts and (for a few jobs) its full trace and data-mode results are digested as well, so a
change in the order of any two events shows. Used to check that speed work on the simulator changes
nothing:

    python bench/simulate_golden.py --write DIR      # the JSON outputs, one file per job
    python bench/simulate_golden.py --check DIR      # run again, compare byte for byte with DIR
    python bench/simulate_golden.py --digests        # {job: sha256} (tests/simulate_golden.json)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Optional

from adaptcoll.runtime import settings
from adaptcoll.simulate.noise_setup import parse_noise
from adaptcoll.simulate.params import CostParams, params_from_dict
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.run import compare, run_once
from adaptcoll.simulate.world import TraceLog

__all__ = ["GoldenJob", "JOBS", "run_job", "outputs", "digests"]

POISSON = "1kHz x 25us, poisson"
PERIODIC = "100Hz x 250us"


class GoldenJob:
    """One CLI-like call: collective, ranks, size, segment, algorithm, baselines, params, noise, samples."""

    def __init__(
        self,
        name: str,
        collective: str,
        ranks: int,
        size: int,
        segment: int,
        algorithm: str = "",
        baselines: tuple[str, ...] = (),
        params: Optional[dict[str, Any]] = None,
        noise: tuple[str, ...] = (),
        samples: int = 2,
        max_segments: int = 0,
        detail: str = "",
    ) -> None:
        self.name = name
        self.job = Job(collective, ranks, size, segment, algorithm, settings.Settings(max_segments=max_segments))
        self.baselines = baselines
        self.params: CostParams = params_from_dict(params or {}, name)
        self.noise = noise
        self.samples = samples
        self.detail = detail  # "trace": a traced run; "data": a data-mode run (results checked)


K, M = 1 << 10, 1 << 20
FIFO = {"links": "fifo"}
JOBS: tuple[GoldenJob, ...] = (
    GoldenJob("bcast-two_tree-1024", "bcast", 1024, 4 * M, 256 * K, "two_tree", ("binomial", "scatter_allgather"),
              noise=(POISSON,)),
    GoldenJob("bcast-binomial-512-fifo", "bcast", 512, 1 * M, 64 * K, "binomial", ("scatter_ring_allgather",),
              FIFO, (PERIODIC,)),
    GoldenJob("bcast-pipeline-64-rpn8", "bcast", 64, 2 * M, 128 * K, "pipeline", ("binomial",),
              {"ranks_per_node": 8}, (POISSON,), detail="trace"),
    GoldenJob("bcast-two_tree-200-gap", "bcast", 200, 2 * M, 64 * K, "two_tree", ("scatter_allgather",),
              {"g": 1.5e-6}, (PERIODIC, "net: 1kHz x 10us")),
    GoldenJob("bcast-eager-64", "bcast", 64, 64 * K, 4 * K, "binomial", ("binomial",), None, (POISSON,),
              detail="data"),
    GoldenJob("reduce-binomial-256", "reduce", 256, 4 * M, 256 * K, "binomial", ("binomial",), noise=(POISSON,)),
    GoldenJob("reduce-two_tree-128-fifo-cpu", "reduce", 128, 2 * M, 128 * K, "two_tree", ("binomial",),
              {"links": "fifo", "transfer": "cpu"}, (PERIODIC,), detail="trace"),
    GoldenJob("reduce-pipeline-16-rpn4", "reduce", 16, 1 * M, 32 * K, "pipeline", ("binomial",),
              {"ranks_per_node": 4}, (PERIODIC,), detail="data"),
    GoldenJob("allreduce-binomial-256", "allreduce", 256, 4 * M, 256 * K, "binomial", ("rabenseifner", "ring"),
              noise=(PERIODIC,)),
    GoldenJob("allreduce-two_tree-100-cpu", "allreduce", 100, 1 * M, 64 * K, "two_tree", ("rabenseifner", "ring"),
              {"transfer": "cpu"}, (POISSON,)),
    GoldenJob("allreduce-pipeline-64-fifo-rpn4", "allreduce", 64, 2 * M, 128 * K, "pipeline",
              ("rabenseifner", "ring"), {"links": "fifo", "ranks_per_node": 4}, (POISSON, "skew: uniform:20us")),
    GoldenJob("allreduce-binomial-32-eager", "allreduce", 32, 256 * K, 16 * K, "binomial", ("ring",), FIFO,
              ("fraction: 2.5%",), detail="data"),
    GoldenJob("bcast-two_tree-1024-capped", "bcast", 1024, 8 * M, 512 * K, "two_tree", (), None, (PERIODIC,),
              max_segments=4),
)  # fmt: skip


def _sha(obj: Any) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()


def _run_detail(g: GoldenJob, impl: str, noisy: bool) -> dict[str, Any]:
    """Per-rank times and counts of one run (the first noisy draw or the quiet run)."""
    noise = parse_noise(list(g.noise)) if noisy else None
    trace = TraceLog() if g.detail == "trace" and impl == "adaptcoll" else None
    data = g.detail == "data"
    stats, world, bufs = run_once(g.job, g.params, impl, noise, 0, 0, data=data, trace=trace)
    if data:
        bufs.check(g.job.root)
    out: dict[str, Any] = {
        "stats": repr(stats),
        "started": _sha(world.started),
        "finished": _sha(world.finished),
        "now": repr(world.now),
        "unmatched": world.unmatched,
    }
    if trace is not None:
        out["trace"] = _sha((trace.sends, trace.recvs, trace.folds))
    return out


def run_job(g: GoldenJob) -> str:
    """The job's output text: the CLI's JSON report plus a digest of per-rank details."""
    report = compare(g.job, g.params, parse_noise(list(g.noise)), g.baselines, 0, g.samples)
    details = {}
    for impl in ("adaptcoll", *g.baselines):
        for noisy in (False, True):
            details[f"{impl}/{'noisy' if noisy else 'quiet'}"] = _run_detail(g, impl, noisy)
    report["golden_details"] = details
    return json.dumps(report, indent=1, sort_keys=True) + "\n"


def outputs(names: Optional[set[str]] = None) -> dict[str, str]:
    """{job name: output text} for every job (or those named)."""
    return {g.name: run_job(g) for g in JOBS if names is None or g.name in names}


def digests(texts: dict[str, str]) -> dict[str, str]:
    """{job name: sha256 of its output text}."""
    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="DIR", help="write one JSON file per job into DIR")
    parser.add_argument("--check", metavar="DIR", help="compare with the files in DIR (exit 1 on a difference)")
    parser.add_argument("--digests", action="store_true", help="print {job: sha256} as JSON")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this job (repeatable)")
    args = parser.parse_args()
    texts = outputs(set(args.only) if args.only else None)
    status = 0
    if args.write:
        out = Path(args.write)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (out / f"{name}.json").write_text(text)
    if args.check:
        for name, text in texts.items():
            want = (Path(args.check) / f"{name}.json").read_text()
            same = want == text
            status |= not same
            print(f"{'same' if same else 'DIFFERENT'}: {name}")
    if args.digests:
        print(json.dumps(digests(texts), indent=1, sort_keys=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
