"""PNG plots of sweep rows (matplotlib, the `bench` extra; imported only when a plot is drawn).

- `plot_vs_ranks`: slowdown under noise against ranks (log2 axis), one line per implementation and
  noise condition;
- `plot_grid`: slowdown over a detour frequency x detour length grid at one rank count, one panel
  per implementation;
- `plot_bars`: slowdown per (ranks, noise) group, one bar per implementation;
- `plot_validation`: simulated against measured times.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

from ..noise.spec import parse_spec
from .sweep import split_condition

__all__ = ["plot_vs_ranks", "plot_grid", "plot_bars", "plot_validation", "plot_auto"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the install
        raise RuntimeError("plots need matplotlib: pip install 'adaptcoll[bench]'") from None
    return plt


def _size_label(nbytes: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def _ranks_label(n: int) -> str:
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def _noise_order(condition: str) -> tuple[float, str]:
    """Conditions in order of detour frequency (rarest first), others after, by name."""
    try:
        spec = parse_spec(split_condition(condition)[0])
    except ValueError:
        spec = None
    return (spec.frequency_hz if spec is not None else float("inf"), condition)


def plot_vs_ranks(rows: Sequence[dict[str, Any]], path: Union[str, Path], title: str = "") -> None:
    """Slowdown (noisy median / quiet) against ranks, one line per (implementation, noise)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    keys = sorted(
        {(r["impl"], r["noise"]) for r in rows}, key=lambda k: (_noise_order(k[1]), k[0] != "adaptcoll", k[0])
    )
    for impl, noise in keys:
        pts = sorted((r["ranks"], r["slowdown"]) for r in rows if r["impl"] == impl and r["noise"] == noise)
        style = "-" if impl == "adaptcoll" else "--"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3, label=f"{impl}, {noise}")
    ax.set_xscale("log", base=2)
    slowdowns = [r["slowdown"] for r in rows if r["slowdown"] > 0]
    if slowdowns and max(slowdowns) > 10 * min(slowdowns):
        ax.set_yscale("log")  # rare long detours on small messages: x1 .. x100 on one axis
    ax.set_xlabel("ranks")
    ax.set_ylabel("slowdown (noisy median / quiet)")
    first = rows[0]
    ax.set_title(title or f"{first['collective']} {_size_label(first['size'])}: slowdown under noise")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_grid(rows: Sequence[dict[str, Any]], path: Union[str, Path], title: str = "") -> None:
    """Slowdown over detour frequency x length (conditions must be detour specs), one panel per implementation."""
    plt = _pyplot()
    impls = sorted({r["impl"] for r in rows}, key=lambda i: (i != "adaptcoll", i))
    cells: dict[tuple[str, float, float], float] = {}
    for r in rows:
        spec = parse_spec(split_condition(r["noise"])[0])
        if spec is None:
            continue
        cells[(r["impl"], spec.frequency_hz, spec.duration_s)] = r["slowdown"]
    freqs = sorted({k[1] for k in cells})
    durs = sorted({k[2] for k in cells})
    fig, axes = plt.subplots(1, len(impls), figsize=(3.6 * len(impls) + 1.5, 4.0), squeeze=False, layout="constrained")
    vmax = max(cells.values()) if cells else 1.0
    for ax, impl in zip(axes[0], impls):
        grid = [[cells.get((impl, f, d), float("nan")) for f in freqs] for d in durs]
        im = ax.imshow(grid, origin="lower", cmap="viridis", vmin=1.0, vmax=vmax, aspect="auto")
        for i, line in enumerate(grid):
            for j, v in enumerate(line):
                if v == v:
                    ax.text(
                        j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < vmax * 0.7 else "k"
                    )
        ax.set_xticks(range(len(freqs)), [f"{f:g}" for f in freqs], fontsize=7)
        ax.set_yticks(range(len(durs)), [f"{d * 1e6:g}" for d in durs], fontsize=7)
        ax.set_xlabel("detour frequency (Hz)")
        if ax is axes[0][0]:
            ax.set_ylabel("detour length (us)")
        ax.set_title(impl, fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), label="slowdown")
    first = rows[0]
    fig.suptitle(title or f"{first['collective']} {_size_label(first['size'])}, {first['ranks']} ranks", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_bars(rows: Sequence[dict[str, Any]], path: Union[str, Path], title: str = "") -> None:
    """Grouped bars: slowdown per (ranks, noise) group, one bar per implementation."""
    plt = _pyplot()
    groups = sorted({(r["ranks"], r["noise"]) for r in rows}, key=lambda g: (g[0], _noise_order(g[1])))
    impls = sorted({r["impl"] for r in rows}, key=lambda i: (i != "adaptcoll", i))
    value = {(r["ranks"], r["noise"], r["impl"]): r["slowdown"] for r in rows}
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * len(groups) + 2), 4.6))
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        xs = [i + (k - (len(impls) - 1) / 2) * width for i in range(len(groups))]
        heights = [value.get((n, c, impl), float("nan")) - 1.0 for n, c in groups]
        bars = ax.bar(xs, heights, width, bottom=1.0, label=impl)  # bars start at x1.0: no slowdown
        ax.bar_label(bars, [f"{h + 1:.3f}" for h in heights], fontsize=5, rotation=90, padding=2)
    ax.set_xticks(range(len(groups)), [f"{_ranks_label(n)}\n{c}" for n, c in groups], fontsize=7)
    ax.axhline(1.0, color="k", lw=0.6)
    ax.margins(y=0.15)
    ax.set_ylabel("slowdown (noisy median / quiet)")
    first = rows[0]
    ax.set_title(title or f"{first['collective']} {_size_label(first['size'])}: adaptcoll vs lock-step under noise")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_validation(rows: Sequence[dict[str, Any]], path: Union[str, Path], title: str = "") -> None:
    """Simulated against measured times (log-log), the 25% band shaded."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.8, 5.2))
    marks = {"bcast": "o", "reduce": "s", "allreduce": "^"}
    ranks = sorted({r["ranks"] for r in rows})
    colours = {n: f"C{i}" for i, n in enumerate(ranks)}
    for r in rows:
        ax.scatter(
            r["measured_us"], r["simulated_us"], marker=marks.get(r["collective"], "o"), s=16, alpha=0.8,
            c=colours[r["ranks"]],
        )  # fmt: skip
    lo = min(min(r["measured_us"], r["simulated_us"]) for r in rows) * 0.7
    hi = max(max(r["measured_us"], r["simulated_us"]) for r in rows) * 1.4
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="g", alpha=0.1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured median (us)")
    ax.set_ylabel("simulated (us)")
    for name, m in marks.items():
        ax.scatter([], [], marker=m, c="gray", label=name)
    for n in ranks:
        ax.scatter([], [], marker="o", c=colours[n], label=f"{n} ranks")
    ax.legend(fontsize=8)
    ax.set_title(title or "simulated vs measured (band: +-25%)", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_auto(rows: Sequence[dict[str, Any]], path: Union[str, Path], title: str = "") -> None:
    """vs-ranks when the rows span several rank counts, else the frequency x length grid."""
    if len({r["ranks"] for r in rows}) > 1:
        plot_vs_ranks(rows, path, title)
    else:
        plot_grid(rows, path, title)
