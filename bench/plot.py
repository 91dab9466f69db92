"""PNG plots from a sweep.py summary JSON or one bench/osu.py --json launch (needs matplotlib: the
project's `bench` extra, `pip install "adaptcoll[bench]"`).

    python bench/plot.py bench/results/core.json --out bench/results/plots            # latency + ratio lines
    python bench/plot.py bench/results/noise.json --out bench/results/plots --kind bars  # variants side by side
    python bench/plot.py out/osu-bcast.json --out plots                                 # one osu.py launch

lines: one PNG per (variant, collective, ranks): median latency vs size per implementation (p95 dashed)
and, below, native/impl ratios (>1: the implementation beats native). bars: one PNG per (collective,
ranks) with a panel per size: median per variant and implementation, p95 as a thin line on top.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_lines", "plot_bars", "rows_of", "main"]

MISSING_MATPLOTLIB = (
    'plot.py needs matplotlib, which adaptcoll\'s `bench` extra installs: pip install "adaptcoll[bench]" '
    '(from a checkout: pip install -e ".[bench]"), or pip install matplotlib'
)


def rows_of(doc: dict[str, Any], variant: str) -> list[dict[str, Any]]:
    """Plot rows of a document: a sweep.py summary's `rows`, or one osu.py launch's `results` summarized
    the way sweep.py summarizes launches (this launch is the only one; `variant` names it)."""
    if "rows" in doc:
        return list(doc["rows"])
    if "results" in doc and "ranks" in doc:
        spec = importlib.util.spec_from_file_location("_bench_sweep", Path(__file__).with_name("sweep.py"))
        assert spec is not None and spec.loader is not None
        sweep = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = sweep  # its dataclasses look their module up
        spec.loader.exec_module(sweep)
        return list(sweep.aggregate([(variant, doc)]))
    raise ValueError(
        "expected a bench/sweep.py summary (with 'rows') or a bench/osu.py --json document (with 'results')"
    )


def _size_label(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def _short(impl: str) -> str:
    """Legend label: 'adaptcoll:algorithm=two_tree;segment_size=64K' -> 'ac two_tree,segment=64K'."""
    if not impl.startswith("adaptcoll:"):
        return impl
    parts = []
    for item in impl.split(":", 1)[1].split(";"):
        key, _, value = item.partition("=")
        parts.append(value if key.endswith("algorithm") else f"{key.replace('_size', '')}={value}")
    return "ac " + ",".join(parts)


def _groups(rows: Sequence[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def plot_lines(rows: Sequence[dict[str, Any]], out_dir: Path, prefix: str) -> list[Path]:
    """Latency-vs-size and ratio plots; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for (variant, coll, ranks), rs in _groups(rows, ("variant", "collective", "ranks")).items():
        impls = sorted({r["impl"] for r in rs}, key=lambda i: (i != "native", i))
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
        for n, impl in enumerate(impls):
            pts = sorted((r for r in rs if r["impl"] == impl), key=lambda r: r["size"])
            xs = [r["size"] for r in pts]
            color = f"C{n}"
            top.plot(xs, [r["median_us"] for r in pts], "o-", color=color, label=f"{_short(impl)} median")
            went_native = [r for r in pts if r.get("route") not in (None, "adaptcoll", "native")]
            if went_native:  # adaptcoll rows native MPI served (below its thresholds): not its protocols
                top.plot(
                    [r["size"] for r in went_native],
                    [r["median_us"] for r in went_native],
                    "x",
                    color="k",
                    ms=9,
                    label=f"{_short(impl)}: native MPI served",
                )
            top.plot(xs, [r["p95_us"] for r in pts], "--", color=color, alpha=0.6, label=f"{_short(impl)} p95")
            if impl != "native" and any(r.get("ratio") for r in pts):
                bottom.plot(
                    xs, [r.get("ratio") or float("nan") for r in pts], "o-", color=color, label=f"native/{_short(impl)}"
                )
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_ylabel("latency (us), max over ranks")
        top.set_title(f"{variant}: {coll}, {ranks} ranks (median over launches)")
        top.legend(fontsize=7, ncol=2)
        top.grid(True, which="both", alpha=0.3)
        bottom.axhline(1.0, color="k", lw=0.8)
        bottom.set_ylabel("native / impl")
        bottom.set_xlabel("message size (bytes)")
        bottom.grid(True, alpha=0.3)
        if bottom.lines[1:]:
            bottom.legend(fontsize=7)
        sizes = sorted({r["size"] for r in rs})
        bottom.set_xticks(sizes)
        bottom.set_xticklabels([_size_label(s) for s in sizes], rotation=45, fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{prefix}{_slug(variant)}-{coll}-n{ranks}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def plot_bars(rows: Sequence[dict[str, Any]], out_dir: Path, prefix: str) -> list[Path]:
    """Variants side by side per size: one PNG per (collective, ranks); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for (coll, ranks), rs in _groups(rows, ("collective", "ranks")).items():
        sizes = sorted({r["size"] for r in rs})
        variants = list(dict.fromkeys(r["variant"] for r in rs))
        impls = sorted({r["impl"] for r in rs}, key=lambda i: (i != "native", i))
        fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 4.6), squeeze=False)
        width = 0.8 / len(impls)
        for ax, size in zip(axes[0], sizes):
            for n, impl in enumerate(impls):
                xs, meds, p95s = [], [], []
                for v, variant in enumerate(variants):
                    hit = [r for r in rs if (r["variant"], r["impl"], r["size"]) == (variant, impl, size)]
                    if hit:
                        xs.append(v + (n - (len(impls) - 1) / 2) * width)
                        meds.append(hit[0]["median_us"])
                        p95s.append(hit[0]["p95_us"])
                ax.bar(xs, meds, width, color=f"C{n}", label=_short(impl))
                ax.vlines(xs, meds, p95s, color="k", lw=1)
                ax.plot(xs, p95s, "k_", ms=8)
            ax.set_xticks(range(len(variants)))
            ax.set_xticklabels(variants, rotation=40, ha="right", fontsize=7)
            ax.set_title(f"{coll} {_size_label(size)}, {ranks} ranks")
            ax.set_ylabel("median latency (us); line: p95")
            ax.grid(True, axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{prefix}{coll}-n{ranks}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0])
    p.add_argument("summary", help="sweep.py --json summary or osu.py --json output")
    p.add_argument("--out", default="bench/results/plots", help="folder for the PNGs")
    p.add_argument("--kind", choices=("lines", "bars"), default="lines")
    p.add_argument("--prefix", default=None, help="file name prefix (default: the summary's stem + '-')")
    args = p.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(MISSING_MATPLOTLIB, file=sys.stderr)
        return 2
    doc = json.loads(Path(args.summary).read_text())
    try:
        rows = rows_of(doc, Path(args.summary).stem)
    except ValueError as exc:
        p.error(f"{args.summary}: {exc}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prefix = args.prefix if args.prefix is not None else Path(args.summary).stem + "-"
    draw = plot_bars if args.kind == "bars" else plot_lines
    for path in draw(rows, out, prefix):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
