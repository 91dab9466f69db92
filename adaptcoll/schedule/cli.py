"""`python -m adaptcoll.schedule`: synthesize a forest for a described topology, print its bound, or
write the description of a common shape. docs/schedules.md shows every use.

    python -m adaptcoll.schedule --topology FILE --collective bcast --root 0 [--trees 8] -o OUT [--png P]
    python -m adaptcoll.schedule synth ...            (the same, named)
    python -m adaptcoll.schedule --topology FILE --collective reduce --size 4M --cpu -o OUT
                                                      (CPU-aware: forests and fixed shapes, segment chosen)
    python -m adaptcoll.schedule bound --topology FILE --collective allreduce --root 0
    python -m adaptcoll.schedule describe fat-tree --nodes 256 --ranks-per-node 8 --oversubscription 4 -o ft.json

Bad options exit 2 (argparse's rule); a description or schedule that cannot be used exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ..plans.schedule_file import COLLECTIVES, ScheduleError
from ..plans.schedule_file import dumps as dump_schedule
from ..plans.topology import parse as parse_topology
from ..runtime.settings import parse_size
from . import describe, shapes
from .bound import bound
from .choose import FIXED, SEGMENTS, Choice, choose
from .cost import CpuCosts, cpu_costs, estimate
from .describe import DescriptionError
from .network import Network, SynthesisError
from .plot import PlotError, draw
from .synthesize import METHODS, synthesize

__all__ = ["main"]

_PROG = "python -m adaptcoll.schedule"


def _gbs(rate: float) -> str:
    return f"{rate / 1e9:.2f} GB/s"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", required=True, metavar="FILE", help="topology description (adaptcoll.topology/1)")
    p.add_argument("--collective", required=True, choices=COLLECTIVES)
    p.add_argument("--root", type=int, default=0, metavar="R", help="root rank (default 0)")
    p.add_argument("--no-symmetry", action="store_true", help="compute a max-flow for every rank (no classes)")


def _synth_parser(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--trees", type=int, default=8, metavar="K", help="at most K trees (default 8)")
    p.add_argument("--fanout", type=int, default=0, metavar="F", help="children per inner member (0: K, min 2)")
    p.add_argument(
        "--bus-fanout", type=int, default=0, metavar="B", help="children per inner rank inside a node (0: F)"
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="construction (default auto: the better rate of packing and layered; pinned: nodes behind two NICs)",
    )
    p.add_argument("-o", "--output", required=True, metavar="SCHEDULE", help="schedule file to write")
    p.add_argument("--png", metavar="PNG", help="also draw the trees (needs matplotlib)")
    p.add_argument(
        "--size", metavar="M", help="message size (e.g. 16M): also print the time estimate (links, CPU, fill)"
    )
    p.add_argument("--segment", metavar="S", default="256K", help="segment size of the estimate without --cpu (256K)")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="choose by the estimate among forests (--try-trees x --try-fanouts) and fixed shapes, each at its "
        "best segment (--segments); needs --size",
    )
    p.add_argument("--try-trees", default="2,4,8", metavar="K,..", help="--cpu: forest sizes to try (2,4,8)")
    p.add_argument("--try-fanouts", default="2,0", metavar="F,..", help="--cpu: fanouts to try, 0: K (2,0)")
    p.add_argument(
        "--try-bus-fanouts",
        default="0,2,3",
        metavar="B,..",
        help="--cpu: fanouts inside a node to try, 0: the fanout (0,2,3)",
    )
    p.add_argument("--segments", metavar="S,..", help="--cpu: segment sizes to try (16K..2M)")
    p.add_argument(
        "--fixed", default=",".join(FIXED), metavar="SHAPE,..", help=f"--cpu: fixed shapes ({','.join(FIXED)})"
    )
    p.add_argument("--margin", type=float, default=0.03, help="--cpu: a forest must beat the best fixed shape by this")
    p.add_argument("--params", metavar="FILE", help="simulator parameters file (JSON) for o, engine, fold, eager")


def _describe_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("shape", choices=(*shapes.SHAPES, "topo"), help="which shape (topo: a discovered Topology spec)")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--ranks", type=int, help="flat: ranks; topo: communicator size")
    p.add_argument("--nodes", type=int, help="nic, fat-tree: number of nodes")
    p.add_argument("--ranks-per-node", type=int, help="nic, fat-tree: ranks per node")
    p.add_argument("--nics", type=int, default=1, help="nic: NICs per node, 1 or 2 (default 1)")
    p.add_argument("--oversubscription", type=float, default=4.0, help="fat-tree: downlink:uplink (default 4)")
    p.add_argument("--nodes-per-leaf", type=int, default=16, help="fat-tree: nodes per leaf switch (default 16)")
    p.add_argument("--spines", type=int, default=0, help="fat-tree: spines (0: nodes-per-leaf / oversubscription)")
    p.add_argument("--bandwidth", type=float, help="flat: rank link; nic, fat-tree: NIC link; dgx1: per NVLink (B/s)")
    p.add_argument("--latency", type=float, help="the same link's latency (s)")
    p.add_argument(
        "--shared-bandwidth",
        type=float,
        help="flat: one link every message crosses (B/s): a switch's backplane, or one node's memory",
    )
    p.add_argument("--intra-bandwidth", type=float, help="nic, fat-tree: rank <-> node bus (B/s)")
    p.add_argument("--pcie-bandwidth", type=float, help="nic, fat-tree: rank <-> its NIC (B/s)")
    p.add_argument("--spec", help="topo: an ADAPTCOLL_TOPOLOGY spec, e.g. 'nodes=4,sockets=2'")
    p.add_argument("--bandwidths", help="topo: comma list, network first then one per level (B/s)")


def _describe(args: argparse.Namespace, p: argparse.ArgumentParser) -> describe.Description:
    kw: dict[str, float] = {}

    def need(*names: str) -> None:
        missing = [n for n in names if getattr(args, n) is None]
        if missing:
            p.error(f"describe {args.shape} needs " + ", ".join("--" + n.replace("_", "-") for n in missing))

    if args.shape == "flat":
        need("ranks")
        pairs = (("bandwidth", args.bandwidth), ("latency", args.latency), ("shared_bandwidth", args.shared_bandwidth))
        kw = {k: v for k, v in pairs if v is not None}
        return shapes.flat_switch(args.ranks, **kw)
    if args.shape in ("nic", "fat-tree"):
        need("nodes", "ranks_per_node")
        for key, value in (
            ("nic_bandwidth", args.bandwidth),
            ("nic_latency", args.latency),
            ("intra_bandwidth", args.intra_bandwidth),
            ("pcie_bandwidth", args.pcie_bandwidth),
        ):
            if value is not None:
                kw[key] = value
        if args.shape == "nic":
            return shapes.nic_nodes(args.nodes, args.ranks_per_node, args.nics, **kw)
        return shapes.fat_tree(
            args.nodes, args.ranks_per_node, args.oversubscription, args.nodes_per_leaf, args.spines, **kw
        )
    if args.shape == "dgx1":
        kw = {
            k: v for k, v in (("nvlink_bandwidth", args.bandwidth), ("nvlink_latency", args.latency)) if v is not None
        }
        return shapes.dgx1(**kw)
    need("spec", "ranks", "bandwidths")
    try:
        topo = parse_topology(args.spec, args.ranks)
        widths = [float(x) for x in args.bandwidths.split(",")]
    except ValueError as exc:
        p.error(str(exc))
    return shapes.from_topology(topo, widths, ranks=args.ranks)


def _load(path: str) -> describe.Description:
    try:
        return describe.load(path)
    except OSError as exc:
        raise DescriptionError(f"cannot read {path}: {exc.strerror}") from None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _sizes(text: str, what: str, p: argparse.ArgumentParser) -> list[int]:
    try:
        out = [parse_size(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        p.error(f"{what}: {exc}")
    if not out or min(out) < 1:
        p.error(f"{what} must be sizes >= 1 byte, got {text!r}")
    return out


def _ints(text: str, what: str, p: argparse.ArgumentParser) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        p.error(f"{what} must be comma-separated whole numbers, got {text!r}")


def _cpu(args: argparse.Namespace) -> CpuCosts:
    if not args.params:
        return cpu_costs()
    try:
        with open(args.params) as f:
            raw = json.load(f)
        return cpu_costs(raw)
    except (ValueError, TypeError) as exc:
        raise DescriptionError(f"parameters {args.params}: {exc}") from None


def _print_choice(c: Choice, collective: str) -> None:
    b, e = c.bound, c.chosen.estimate
    print(
        f"bound: links {_ms(c.size / b.rate)} ({_gbs(b.rate)}, {b.limited_by}); "
        f"CPU {_ms(c.cpu_floor_s)} (the average rank at {e.segment >> 10} KiB segments)"
    )
    if collective != "bcast" and c.any_floor_s > 0:
        print(
            f"any schedule: >= {_ms(c.any_floor_s)}, {c.any_floor_s * b.rate / c.size:.1f} x the link bound "
            "(the average rank's CPU in one segment: it folds n-1 of n contributions of every byte)"
        )
    for cand in sorted(c.candidates, key=lambda x: x.estimate.total_s):
        x = cand.estimate
        mark = "*" if cand is c.chosen else " "
        print(
            f" {mark} {cand.name:32s} {_ms(x.total_s):>11s}  seg {x.segment >> 10:5d}K  links {_ms(x.link_s)}  "
            f"CPU {_ms(x.cpu_s)}  fill {_ms(x.fill_s)}  depth {x.depth}"
        )
    kind = "fixed shape " if c.chosen.fixed else ""
    vs = ""
    if c.best_fixed is not None and c.best_forest is not None:
        ratio = c.best_forest.estimate.total_s / c.best_fixed.estimate.total_s
        vs = f"; best forest / best fixed shape {ratio:.2f} (margin {c.margin:.0%})"
    print(
        f"chosen: {kind}{c.chosen.name}, segment {e.segment >> 10} KiB, estimate {_ms(e.total_s)} "
        f"({e.binds} bind: links {_ms(e.link_s)}, CPU {_ms(e.cpu_s)} on rank {e.busiest_rank}, fill {_ms(e.fill_s)})"
        + vs
    )
    print(f"run it with ADAPTCOLL_{collective.upper()}_ALGORITHM=forest:FILE and a {e.segment >> 10} KiB segment")


def _choose(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    if not args.size:
        p.error("--cpu needs --size")
    size = _sizes(args.size, "--size", p)[0]
    segments = _sizes(args.segments, "--segments", p) if args.segments else list(SEGMENTS)
    trees = _ints(args.try_trees, "--try-trees", p)
    fanouts = _ints(args.try_fanouts, "--try-fanouts", p)
    bus_fanouts = _ints(args.try_bus_fanouts, "--try-bus-fanouts", p)
    if not trees or min(trees) < 1 or any(f < 0 or f == 1 for f in [*fanouts, *bus_fanouts]):
        p.error("--try-trees must be >= 1 and --try-fanouts, --try-bus-fanouts 0 or >= 2")
    fixed = [s for s in args.fixed.split(",") if s]
    bad = [s for s in fixed if s not in FIXED]
    if bad:
        p.error(f"--fixed: unknown shapes {bad} (known: {', '.join(FIXED)})")
    if not 0 <= args.margin < 1:
        p.error(f"--margin must be in [0, 1), got {args.margin}")
    d = _load(args.topology)
    if not 0 <= args.root < d.ranks:
        p.error(f"--root must be a rank 0..{d.ranks - 1}, got {args.root}")
    c = choose(
        d,
        args.collective,
        args.root,
        size,
        segments,
        trees,
        fanouts,
        fixed,
        _cpu(args),
        args.margin,
        not args.no_symmetry,
        bus_fanouts=bus_fanouts,
    )
    schedule = c.schedule(args.collective, args.root, d)
    with open(args.output, "w") as out:
        out.write(dump_schedule(schedule))
    print(f"topology: {d.name or args.topology} ({d.ranks} ranks, {len(d.switches)} switches, {len(d.links)} links)")
    print(f"{args.collective} of {size} bytes from root {args.root}")
    _print_choice(c, args.collective)
    print(f"choice: {c.seconds:.2f} s")
    print(f"wrote {args.output}")
    if args.png:
        draw(schedule.forests[0], d, args.png, f"{d.name}: {args.collective} from {args.root}, {c.chosen.name}")
        print(f"wrote {args.png}")
    return 0


def _synth(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    if args.cpu:
        return _choose(args, p)
    if args.trees < 1:
        p.error(f"--trees must be >= 1, got {args.trees}")
    if args.fanout < 0 or args.fanout == 1:
        p.error(f"--fanout must be 0 or >= 2, got {args.fanout}")
    if args.bus_fanout < 0 or args.bus_fanout == 1:
        p.error(f"--bus-fanout must be 0 or >= 2, got {args.bus_fanout}")
    d = _load(args.topology)
    if not 0 <= args.root < d.ranks:
        p.error(f"--root must be a rank 0..{d.ranks - 1}, got {args.root}")
    r = synthesize(
        d, args.collective, args.root, args.trees, args.fanout, args.method, not args.no_symmetry, args.bus_fanout
    )
    f = r.schedule.forests[0]
    with open(args.output, "w") as out:
        out.write(dump_schedule(r.schedule))
    depths = " ".join(map(str, r.depths))
    print(f"topology: {d.name or args.topology} ({d.ranks} ranks, {len(d.switches)} switches, {len(d.links)} links)")
    b = r.bound
    print(f"{args.collective} from root {args.root}: bound {_gbs(b.rate)} ({b.limited_by}, {b.flows} max-flows)")
    print(f"forest: {len(f.trees)} trees ({r.method}), rate {_gbs(r.rate)}, {r.gap:.1f} % below the bound")
    print(f"depths: {depths} (max {max(r.depths)})")
    if args.size:
        size = _sizes(args.size, "--size", p)[0]
        seg = _sizes(args.segment, "--segment", p)[0]
        trees = [(t.weight, t.children) for t in f.trees]
        e = estimate(Network(d), trees, args.root, args.collective, size, seg, _cpu(args))
        print(
            f"estimate for {size} bytes in {e.segment >> 10} KiB segments: {_ms(e.total_s)} ({e.binds} bind: "
            f"links {_ms(e.link_s)} (bound {_ms(size / b.rate)}), CPU {_ms(e.cpu_s)} on rank {e.busiest_rank}, "
            f"fill {_ms(e.fill_s)})"
        )
    print(f"synthesis: {r.seconds:.2f} s")
    print(f"wrote {args.output}")
    if args.png:
        draw(f, d, args.png, f"{d.name}: {args.collective} from {args.root}, {_gbs(r.rate)} of {_gbs(r.bound.rate)}")
        print(f"wrote {args.png}")
    return 0


def _bound(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    d = _load(args.topology)
    if not 0 <= args.root < d.ranks:
        p.error(f"--root must be a rank 0..{d.ranks - 1}, got {args.root}")
    b = bound(d, args.collective, args.root, not args.no_symmetry)
    print(f"{args.collective} from root {args.root}: bound {_gbs(b.rate)} ({b.limited_by}, {b.flows} max-flows)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; returns the exit status (argparse exits 2 itself on bad options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in ("synth", "bound", "describe") else "synth"
    if argv and argv[0] == command:
        argv = argv[1:]
    p = argparse.ArgumentParser(
        prog=f"{_PROG} {command}" if command != "synth" else _PROG, description=__doc__.split("\n")[0]
    )
    {"synth": _synth_parser, "bound": _common, "describe": _describe_parser}[command](p)
    args = p.parse_args(argv)
    try:
        if command == "describe":
            try:
                d = _describe(args, p)
            except DescriptionError as exc:
                p.error(str(exc))
            describe.save(args.output, d)
            print(f"wrote {args.output}: {d.name} ({d.ranks} ranks, {len(d.switches)} switches, {len(d.links)} links)")
            return 0
        return (_synth if command == "synth" else _bound)(args, p)
    except (DescriptionError, ScheduleError, SynthesisError, PlotError, OSError) as exc:
        print(f"{_PROG}: error: {exc}", file=sys.stderr)
        return 1
