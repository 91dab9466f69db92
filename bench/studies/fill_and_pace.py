"""Question: where does a simulated Bcast spend its time, in the pipeline's fill or in its pace?
Answer: bench/RESULTS.md, "Where the time goes at 4096 ranks; windows; the link model and the rule's
evidence (issue 22, third session of 2026-11-26)".

The fill and the pace of one simulated Bcast, from one traced run.

For one Bcast from rank 0 over a described network (`--topology`, adaptcoll.topology/1) it prints the time, when
the first segment reaches the ranks (median and last: the fill), the rank that finishes last and how far
apart its segments arrive, the CPU each rank pays per message (`o` + `engine`) and the messages of the
busiest rank. For a forest schedule (`--algorithm forest:FILE`) it follows every tree from the root down
to that last rank and gives, per edge, when the first and the last segment crossed it and the pace
between them (a pace that grows with depth is a pipeline drifting behind its root). Windows and other
settings come from the environment (ADAPTCOLL_BCAST_SEND_WINDOW, ...), as for `adaptcoll.simulate`.

    python -m adaptcoll.schedule describe nic --nodes 512 --ranks-per-node 8 --nics 2 -o nic512.json
    python -m adaptcoll.schedule --topology nic512.json --collective bcast --method pinned -o pin512.json
    python bench/studies/fill_and_pace.py --topology nic512.json --algorithm forest:pin512.json --segment 512K
    python bench/studies/fill_and_pace.py ... --params bench/results/simulate/params_pair.json --segment 768K
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import sys
from dataclasses import dataclass

from adaptcoll.plans import forests
from adaptcoll.plans import schedule_file as forest_file
from adaptcoll.runtime import settings
from adaptcoll.runtime.settings import parse_size
from adaptcoll.schedule import describe
from adaptcoll.simulate.params import DEFAULT_PARAMS, CostParams, load_params
from adaptcoll.simulate.programs import Job
from adaptcoll.simulate.routes import Routes
from adaptcoll.simulate.run import run_once
from adaptcoll.simulate.world import TraceLog

__all__ = ["Edge", "Report", "analyse", "main"]


@dataclass(frozen=True)
class Edge:
    """One parent -> child edge of a tree: when its first and last segment crossed (start, end; s)."""

    tree: int
    src: int
    dst: int
    first: tuple[float, float]
    last: tuple[float, float]
    segments: int

    @property
    def pace_s(self) -> float:
        """Time between the starts of consecutive segments on this edge, on average."""
        return (self.last[0] - self.first[0]) / (self.segments - 1) if self.segments > 1 else 0.0


@dataclass(frozen=True)
class Report:
    """What one traced run says about fill and pace (times in seconds)."""

    time_s: float
    first_median_s: float
    first_last_s: float
    last_rank: int
    last_gap_median_s: float
    per_message_cpu_s: float
    busiest_messages: int
    paths: tuple[tuple[Edge, ...], ...]


def _trees(algorithm: str) -> list[tuple[tuple[int, ...], ...]]:
    """The children lists of a forest file's trees (root 0's forest), or [] for a fixed shape."""
    if not forests.is_forest(algorithm):
        return []
    return [t.children for t in forest_file.load(forests.path_of(algorithm)).forest(0).trees]


def analyse(
    d: describe.Description, algorithm: str, size: int, segment: int, params: CostParams = DEFAULT_PARAMS
) -> Report:
    """Run the Bcast from root 0 once, traced, and read its fill and pace (see the module docstring)."""
    job = Job(
        "bcast",
        d.ranks,
        size,
        segment,
        algorithm,
        dataclasses.replace(settings.current(), max_segments=0, topology=d.node_spec()),
    )
    trace = TraceLog()
    stats, _, _ = run_once(job, params, "adaptcoll", None, 1, 0, trace=trace, topology=Routes(d))
    arrivals: dict[int, list[float]] = {}
    counts = [0] * d.ranks
    for dst, _src, _tag, _n, _t0, t1, _ in trace.recvs:
        arrivals.setdefault(dst, []).append(t1)
        counts[dst] += 1
    crossings: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for src, dst, _tag, _n, t0, t1, _ in trace.sends:
        crossings.setdefault((src, dst), []).append((t0, t1))
        counts[src] += 1
    firsts = [min(ts) for ts in arrivals.values()]
    last_rank = max(arrivals, key=lambda r: max(arrivals[r]))
    got = sorted(arrivals[last_rank])
    gaps = [b - a for a, b in itertools.pairwise(got)] or [0.0]
    paths = []
    for t, children in enumerate(_trees(algorithm)):
        parent = {c: p for p, cs in enumerate(children) for c in cs}
        chain = [last_rank]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        edges = []
        for a, b in itertools.pairwise(chain[::-1]):
            xs = sorted(crossings[(a, b)])
            edges.append(Edge(t, a, b, xs[0], xs[-1], len(xs)))
        paths.append(tuple(edges))
    return Report(
        stats.time_s,
        statistics.median(firsts),
        max(firsts),
        last_rank,
        statistics.median(gaps),
        params.o + params.engine,
        max(counts),
        tuple(paths),
    )


def render(report: Report, ranks_per_node: int = 0) -> str:
    """The report as text (microseconds); `ranks_per_node` > 0 adds each edge's nodes."""
    us = 1e6
    lines = [
        f"time {report.time_s * us:,.1f} us",
        f"fill: first segment at the median rank {report.first_median_s * us:,.1f} us, at the last "
        f"{report.first_last_s * us:,.1f} us",
        f"last rank {report.last_rank}: segments {report.last_gap_median_s * us:.1f} us apart (median)",
        f"CPU per message {report.per_message_cpu_s * us:.1f} us; busiest rank {report.busiest_messages} messages "
        f"({report.busiest_messages * report.per_message_cpu_s * us:,.0f} us)",
    ]
    for path in report.paths:
        lines.append(f"tree {path[0].tree}: {len(path)} hops from the root to rank {report.last_rank}")
        for e in path:
            where = f" (node {e.src // ranks_per_node} -> {e.dst // ranks_per_node})" if ranks_per_node else ""
            lines.append(
                f"  {e.src:>6} -> {e.dst:<6}{where} first {e.first[0] * us:8.1f}-{e.first[1] * us:8.1f}"
                f"  last {e.last[0] * us:8.1f}-{e.last[1] * us:8.1f}  pace {e.pace_s * us:5.1f} us"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topology", required=True, help="a described network (adaptcoll.topology/1)")
    p.add_argument("--algorithm", required=True, help="forest:FILE or a tree kind (two_tree, ...)")
    p.add_argument("--size", default="16M")
    p.add_argument("--segment", default="512K")
    p.add_argument("--params", help="simulator parameters file (default: built-in)")
    args = p.parse_args(argv)
    d = describe.load(args.topology)
    params = load_params(args.params) if args.params else DEFAULT_PARAMS
    report = analyse(d, args.algorithm, parse_size(args.size), parse_size(args.segment), params)
    sizes = {len(g) for g in d.nodes} if d.nodes else set()
    print(render(report, sizes.pop() if len(sizes) == 1 else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
