"""`python -m adaptcoll.trees`: print a communication tree (`adaptcoll.plans.trees`) as indented text
with its depth and maximum fan-out, or as Graphviz DOT. Runs without MPI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .plans.topology import parse as parse_topology
from .plans.trees import KINDS, build, build_all, parse_value, to_dot

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m adaptcoll.trees",
        description=("Print a communication tree as indented text with its depth and maximum fan-out, or as DOT."),
    )
    parser.add_argument("--kind", choices=KINDS, default="binomial", help="tree kind (default binomial)")
    parser.add_argument("--size", type=int, required=True, help="number of ranks")
    parser.add_argument("--root", type=int, default=0, help="root rank (default 0)")
    parser.add_argument("--topology", help="topo levels, e.g. 'nodes=4,sockets=2' or 'node=0,0,1,1'")
    parser.add_argument("--inner", help="topo: shape linking group leaders, e.g. chain or 'knomial:radix=8'")
    parser.add_argument("--intra", help="topo: shape inside the innermost groups")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="extra tree parameter, repeatable, e.g. --param radix=8",
    )
    parser.add_argument("--dot", action="store_true", help="write Graphviz DOT instead of text")
    parser.add_argument("--output", help="write to this file instead of stdout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The tree viewer command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    params: dict[str, Any] = {}
    for item in args.param:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            parser.error(f"--param expects K=V, got {item!r}")
        params[name.strip()] = parse_value(value.strip())
    topo_only = {"topology": args.topology, "inner": args.inner, "intra": args.intra}
    if args.kind != "topo":
        given = [f"--{k}" for k, v in topo_only.items() if v is not None]
        if given:
            parser.error(f"{', '.join(given)} only apply to --kind topo")
    try:
        if args.kind == "topo":
            if args.topology is not None:
                params["levels"] = parse_topology(args.topology, args.size)
            params.update({k: v for k, v in (("inner", args.inner), ("intra", args.intra)) if v is not None})
        trees = (
            (build(args.kind, args.size, args.root, **params),)
            if "which" in params
            else build_all(args.kind, args.size, args.root, **params)
        )
    except ValueError as exc:
        parser.error(str(exc))
    text = to_dot(trees) if args.dot else "\n\n".join(map(str, trees)) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
