"""Allgather and Reduce_scatter_block: adaptcoll's ring against native MPI, interleaved, over launches.

    flock -x /tmp/adaptcoll-machine.lock python bench/blocks.py --ranks 2 --launches 3 --sizes 64K:64M \\
        --budget 1.0 --impls served,rule --segments 32M \\
        --markdown bench/results/blocks_2ranks.md --json bench/results/blocks_2ranks.json

Each launch (`mpiexec -n RANKS -bind-to core`) runs, per collective and size (the whole array: the
Allgather's result, the Reduce-scatter's input; float64), the implementations interleaved in rounds
(every permutation in turn: A B C, A C B, B A C, ..., so that no implementation always follows the
same one),
every call after a barrier, on the same buffers: `native` (mpi4py's method called on the same
communicator object), `served` (adaptcoll's ring at every size, `ring:segment_size=...` per
`--segments`) and `rule` (adaptcoll with its defaults: the shipped rule). A call's time is the
slowest rank's. Per launch the median per implementation; over launches the median of those, and the
ratio native / implementation (> 1: faster than native).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("allgather", "reduce_scatter_block")


def parse_size(text: str) -> int:
    text = text.strip().upper()
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if unit > 1 else text) * unit


def sizes_between(spec: str) -> list[int]:
    """'64K:64M' -> 64K, 256K, ..., 64M (factors of 4); '1M,16M' -> those."""
    if ":" in spec:
        lo, hi = (parse_size(x) for x in spec.split(":"))
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= 4
        return out
    return [parse_size(x) for x in spec.split(",")]


def fmt(n: int) -> str:
    for suffix, unit in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


# -- one launch (every rank) ------------------------------------------------------------------------
def one_call(MPI: Any, comm: Any, c: Any, coll: str, send: Any, recv: Any) -> None:
    """One call of `coll`: on adaptcoll communicator `c`, or natively (c None: mpi4py's method on `comm`)."""
    if c is None:
        if coll == "allgather":
            MPI.Intracomm.Allgather(comm, send, recv)
        else:
            MPI.Intracomm.Reduce_scatter_block(comm, send, recv, MPI.SUM)
    elif coll == "allgather":
        c.Allgather(send, recv)
    else:
        c.Reduce_scatter_block(send, recv, MPI.SUM)


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    import adaptcoll

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world)
    p, rank = world.Get_size(), world.Get_rank()
    defaults = adaptcoll.runtime.settings.current()
    impls: list[tuple[str, Any, Any]] = [("native", None, None)]
    for name in args.impls.split(","):
        if name == "rule":
            impls.append(("rule", comm, defaults))
        elif name == "served":
            for seg in args.segments.split(","):
                alg = f"ring:segment_size={seg}"
                with adaptcoll.configured(
                    allgather_algorithm=alg, reduce_scatter_algorithm=alg, allgather_native_below=0,
                    reduce_scatter_native_below=0,
                ):  # fmt: skip
                    impls.append((f"served seg={seg}", comm, adaptcoll.runtime.settings.current()))
    orders = list(itertools.permutations(range(len(impls))))
    comm.Allreduce(MPI.IN_PLACE, np.zeros(1))  # sets the communicator's tuning up (first blocking call)
    rows = []
    for coll in args.collectives.split(","):
        for nbytes in sizes_between(args.sizes):
            count = nbytes // 8 // p * p
            send = np.arange(count if coll == "reduce_scatter_block" else count // p, dtype="f8") + rank
            recv = np.zeros(count if coll == "allgather" else count // p)

            spent: list[list[float]] = [[] for _ in impls]

            def round_once(record: bool, shift: int = 0, coll: str = coll, send: Any = send, recv: Any = recv,
                           spent: list[list[float]] = spent) -> None:  # fmt: skip
                for k in orders[shift % len(orders)]:  # every order in turn: no impl always follows the same one
                    _, c, st = impls[k]
                    if st is not None:
                        adaptcoll.runtime.settings.use(st)
                    world.Barrier()
                    t0 = time.perf_counter()
                    one_call(MPI, comm, c, coll, send, recv)
                    dt = time.perf_counter() - t0
                    if record:
                        spent[k].append(dt)
                adaptcoll.runtime.settings.use(defaults)

            for _ in range(args.warmup):
                round_once(False)
            t0 = time.perf_counter()
            round_once(True)
            per_round = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            rounds = max(args.min_rounds, min(args.max_rounds, int(args.budget / max(per_round, 1e-9))))
            for i in range(1, rounds):
                round_once(True, i)
            times = np.array(spent)
            slowest = np.empty_like(times)
            world.Allreduce(times, slowest, op=MPI.MAX)
            medians = {name: float(np.median(slowest[k])) for k, (name, _, _) in enumerate(impls)}
            rows.append({"collective": coll, "bytes": nbytes, "ranks": p, "rounds": rounds, "median_s": medians})
    if rank == 0:
        stats = adaptcoll.stats()
        Path(args.worker_out).write_text(json.dumps({"rows": rows, "stats": stats}, indent=1))


# -- the driver -------------------------------------------------------------------------------------
def launch(args: argparse.Namespace, out: str) -> None:
    cmd = [
        "mpiexec", "-n", str(args.ranks), "-bind-to", "core", sys.executable, str(Path(__file__)), "--worker",
        "--worker-out", out, "--sizes", args.sizes, "--collectives", args.collectives, "--impls", args.impls,
        "--segments", args.segments, "--budget", str(args.budget), "--warmup", str(args.warmup),
        "--min-rounds", str(args.min_rounds), "--max-rounds", str(args.max_rounds),
    ]  # fmt: skip
    env = dict(os.environ, MPIEXEC_TIMEOUT=str(args.timeout))
    subprocess.run(cmd, check=True, env=env, timeout=args.timeout + 30)


def aggregate(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (collective, bytes): per implementation the median over launches of the per-launch medians."""
    table: dict[tuple[str, int], dict[str, list[float]]] = {}
    ranks = 0
    for one in launches:
        for row in one["rows"]:
            ranks = row["ranks"]
            slot = table.setdefault((row["collective"], row["bytes"]), {})
            for name, t in row["median_s"].items():
                slot.setdefault(name, []).append(t)
    out = []
    for (coll, nbytes), impls in table.items():
        med = {name: statistics.median(v) for name, v in impls.items()}
        ratios = {name: med["native"] / t for name, t in med.items() if name != "native"}
        out.append({"collective": coll, "bytes": nbytes, "ranks": ranks, "median_s": med, "ratio": ratios,
                    "launch_medians_s": impls})  # fmt: skip
    return out


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    names = [n for n in rows[0]["median_s"] if n != "native"]
    head = "| collective | size | native ms | " + " | ".join(f"{n} ms | ratio" for n in names) + " |"
    lines = [f"`{command}`", "", "Medians over launches of per-launch medians (slowest rank per call); ratio = "
             "native / adaptcoll (> 1: adaptcoll faster).", "", head, "|" + "---|" * (3 + 2 * len(names))]  # fmt: skip
    for row in rows:
        med = row["median_s"]
        cells = " | ".join(f"{med[n] * 1e3:.3f} | {row['ratio'][n]:.2f}" for n in names)
        lines.append(f"| {row['collective']} | {fmt(row['bytes'])} | {med['native'] * 1e3:.3f} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--sizes", default="64K:64M")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--impls", default="served,rule", help="served and/or rule (native is always run)")
    ap.add_argument("--segments", default="1M", help="segment sizes of the served ring, comma-separated")
    ap.add_argument("--budget", type=float, default=0.6, help="seconds per (collective, size) per launch")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-rounds", type=int, default=10)
    ap.add_argument("--max-rounds", type=int, default=400)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return
    launches = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.launches):
            out = os.path.join(tmp, f"launch{k}.json")
            launch(args, out)
            launches.append(json.loads(Path(out).read_text()))
            print(f"launch {k + 1}/{args.launches} done", file=sys.stderr)
    rows = aggregate(launches)
    command = "python bench/blocks.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(rows, command)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "rows": rows, "launches": launches}, indent=1))


if __name__ == "__main__":
    main()
