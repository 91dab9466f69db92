"""Question: what does `python -m adaptcoll` cost mpi4py's own OSU Bcast demo, run unchanged?
Answer: bench/RESULTS.md, "The native route per buffer form (issue 23, defect 5)".

mpi4py's own `demo/osu_bcast.py` (`comm.Bcast([buf, size, MPI.BYTE], 0)` on an mmap), run unchanged
under plain `python` and under `python -m adaptcoll`, whole launches interleaved (A B A B ...).

Per size: the median latency of each over the launches, the difference adaptcoll - mpi4py (us) and the
ratio. The demo comes from the installed mpi4py's sdist (`--demo PATH`, or the sdist that
tests/mpi4py_suite.py fetches and caches).

Usage: python bench/studies/osu_demo.py [--ranks 2] [--launches 5] [--demo PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _demo_path(given: str | None) -> Path:
    if given:
        return Path(given)
    sys.path.insert(0, str(ROOT / "tests"))
    import mpi4py_suite  # the fetch-and-cache helper of the mpi4py suite check

    return mpi4py_suite.sdist_dir().parent / "demo" / "osu_bcast.py"


def _launch(ranks: int, demo: Path, adaptcoll: bool) -> dict[int, float]:
    """{size: latency us} of one launch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTCOLL_")}
    program = [sys.executable, "-m", "adaptcoll", str(demo)] if adaptcoll else [sys.executable, str(demo)]
    run = subprocess.run(
        ["mpiexec", "-n", str(ranks), "-bind-to", "core", *program],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode != 0:
        raise SystemExit(f"launch failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    out = {}
    for line in run.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            out[int(parts[0])] = float(parts[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--launches", type=int, default=5, help="launches of each, interleaved (default 5)")
    parser.add_argument("--demo", help="path of osu_bcast.py (default: from the cached mpi4py sdist)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    demo = _demo_path(args.demo)
    plain: dict[int, list[float]] = {}
    ours: dict[int, list[float]] = {}
    for _ in range(args.launches):
        for size, value in _launch(args.ranks, demo, False).items():
            plain.setdefault(size, []).append(value)
        for size, value in _launch(args.ranks, demo, True).items():
            ours.setdefault(size, []).append(value)
    rows = []
    for size in sorted(plain):
        p, a = statistics.median(plain[size]), statistics.median(ours[size])
        rows.append({"size": size, "mpi4py_us": p, "adaptcoll_us": a, "diff_us": a - p, "ratio": a / p if p else 0.0})
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"# osu_bcast.py, {args.ranks} ranks, median of {args.launches} interleaved launches each")
    print(f"{'size':>9}{'mpi4py us':>11}{'adaptcoll us':>14}{'+us':>8}{'ratio':>8}")
    for r in rows:
        print(f"{r['size']:>9}{r['mpi4py_us']:>11.2f}{r['adaptcoll_us']:>14.2f}{r['diff_us']:>8.2f}{r['ratio']:>8.3f}")


if __name__ == "__main__":
    main()
