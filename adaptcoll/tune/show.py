"""`python -m adaptcoll.tune show FILE [--plot PNG]`: print a tuning table, and optionally plot the
measured ratio native/adaptcoll against message size per collective with the chosen configuration
marked (matplotlib, the `bench` extra). No MPI here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from ..runtime.settings import BLOCK_COLLECTIVES
from .config import format_bytes
from .table import COLLECTIVES, Entry, Table, TableError, parse

__all__ = ["format_table", "plot", "main"]


def _groups(table: Table) -> dict[tuple[str, str, int, int, int], list[Entry]]:
    out: dict[tuple[str, str, int, int, int], list[Entry]] = {}
    for e in sorted(table.entries, key=lambda e: e.key):
        out.setdefault((e.collective, e.memory, e.comm_size, e.nodes, e.ranks_per_node), []).append(e)
    return out


def format_table(table: Table, origin: str = "") -> str:
    """The table as text: one block per (collective, memory, communicator), one line per size."""
    tool = table.tool
    lines = [
        f"tuning table {origin}".rstrip(),
        f"  MPI: {table.mpi_library}; host {table.machine.get('host', '?')}, {table.machine.get('cpus', '?')} CPUs;"
        f" created {table.created or '?'}; budget {tool.get('budget_s', '?')} s, took {tool.get('elapsed_s', '?')} s",
        "  ratio = native time / best adaptcoll configuration's time (median of per-iteration ratios, > 1:"
        " adaptcoll faster), their p25-p75, and the 95% confidence interval of the median",
    ]
    for (coll, memory, size, nodes, rpn), entries in _groups(table).items():
        whole = " (bytes: the whole array)" if coll in BLOCK_COLLECTIVES else ""
        lines.append(f"\n{coll} ({memory} memory), {size} ranks, {nodes} node(s), {rpn} ranks per node{whole}")
        lines.append(
            f"  {'bytes':>6}  {'choice':<9}  {'ratio':>5}  {'p25-p75':<11}  {'95% CI':<11}  {'n':>4}  "
            "best configuration"
        )
        for e in entries:
            choice = "adaptcoll" if e.serve else "native"
            spread = f"{e.p25:.2f}-{e.p75:.2f}"
            ci = f"{e.ci_low:.2f}-{e.ci_high:.2f}"
            lines.append(
                f"  {format_bytes(e.bytes):>6}  {choice:<9}  {e.ratio:>5.2f}  {spread:<11}  {ci:<11}  {e.samples:>4}  "
                f"{e.config.label(coll)}"
            )
    return "\n".join(lines)


def plot(table: Table, out: str) -> None:
    """Ratio vs size per collective (log x), filled markers where adaptcoll was chosen, labelled with its
    configuration; hollow where native was chosen. Needs matplotlib (the `bench` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "python -m adaptcoll.tune show --plot needs matplotlib: pip install 'adaptcoll[bench]'"
        ) from None
    groups = _groups(table)
    collectives = sorted({k[0] for k in groups}, key=COLLECTIVES.index)
    fig, axes = plt.subplots(1, max(1, len(collectives)), figsize=(6 * max(1, len(collectives)), 4.5), squeeze=False)
    for ax, coll in zip(axes[0], collectives):
        for (c, memory, size, nodes, _), entries in groups.items():
            if c != coll:
                continue
            xs = [e.bytes for e in entries]
            ys = [e.ratio for e in entries]
            (line,) = ax.plot(xs, ys, "-", alpha=0.6, label=f"{size} ranks, {nodes} node(s), {memory}")
            for e in entries:
                ax.plot([e.bytes, e.bytes], [e.p25, e.p75], "-", color=line.get_color(), alpha=0.4)
                face = line.get_color() if e.serve else "none"
                ax.plot(e.bytes, e.ratio, "o", mfc=face, mec=line.get_color())
                if e.serve:
                    ax.annotate(
                        e.config.label(coll),
                        (e.bytes, e.ratio),
                        fontsize=6,
                        rotation=30,
                        xytext=(3, 4),
                        textcoords="offset points",
                    )
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("native / adaptcoll (best configuration)")
        ax.set_title(f"{coll}: filled = adaptcoll chosen, hollow = native")
        ax.legend(fontsize=7)
    fig.suptitle(f"adaptcoll tuning table, {table.mpi_library}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `python -m adaptcoll.tune show`."""
    p = argparse.ArgumentParser(prog="python -m adaptcoll.tune show", description="Print a tuning table.")
    p.add_argument("file", help="the table (JSON)")
    p.add_argument("--plot", metavar="PNG", default=None, help="also draw ratio vs size per collective to PNG")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        table = parse(Path(args.file).read_bytes(), args.file)
    except OSError as exc:
        print(f"{args.file}: cannot read ({exc.strerror or exc})", file=sys.stderr)
        return 2
    except TableError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(format_table(table, args.file))
    if args.plot:
        plot(table, args.plot)
        print(f"plot written to {args.plot}")
    return 0
