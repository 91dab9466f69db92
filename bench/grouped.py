"""Grouped Allreduce of real gradient sets (issue 21): one native Allreduce per array, a hand-packed
buffer (pack, one native Allreduce, unpack; its copies count), and adaptcoll's `Allreduce_multi`,
interleaved per step (A B C A B C ..., a native Barrier before each), on every rank.

    flock -x /tmp/adaptcoll-machine.lock mpiexec -n 2 -bind-to core python bench/grouped.py \\
        --set resnet50 --iters 20 --json bench/out/grouped_resnet50_1.json
    python bench/grouped.py --summarize bench/out/grouped_resnet50_*.json    # medians over launches
    mpiexec -n 2 -bind-to core python bench/grouped.py --device cupy --set resnet50 --iters 20 \
        --json bench/out/grouped_cupy_resnet50_2.json                        # CuPy arrays (a GPU)

Sets (bench/gradient_sets/*.json, float32): resnet50 (161 arrays, 25.6 M parameters), bert_base (199,
109.5 M), latency_1000 (1000 arrays of 256 B - 4 KiB). Implementations (`--impl`, repeatable):
`per_array`, `packed`, `grouped` (adaptcoll defaults), `grouped_init` (Allreduce_multi_init, Start +
Wait), or `grouped:KEY=VALUE[;KEY=VALUE]` (adaptcoll settings, e.g. `multi_bucket_size=16M`).
`--device cupy`: the same sets as CuPy arrays on CuPy's current device (ranks share one GPU unless
CUDA_VISIBLE_DEVICES differs per rank), where `per_array` stages each array by hand and `packed`
concatenates on the device and stages that one buffer (`make_device_impls`); every step ends with a
device synchronize. `--max-arrays N`: the set's first N arrays only (tests). Not in place: each
rank's fixed gradients (sendbufs) are reduced into recvbufs. The first step of every
implementation is checked against per-array native MPI. Per step the time is the slowest rank's;
the JSON keeps every step and the median; `--summarize` gives, per implementation, the median over
launches of the per-launch medians and of the per-launch ratios per_array/impl and packed/impl.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load_set(name: str) -> list[int]:
    """Element counts of the arrays of a gradient set."""
    with open(os.path.join(HERE, "gradient_sets", f"{name}.json")) as f:
        doc = json.load(f)
    return [int(np.prod(s["shape"])) for s in doc["shapes"]]


def _with_grouped(
    names: list[str],
    per_array: Callable[[], None],
    packed: Callable[[], None],
    sends: list[Any],
    recvs: list[Any],
    comm: Any,
    finish: Callable[[], None],
) -> dict[str, Callable[[], None]]:
    """The implementations named: the two native ones given, and adaptcoll's grouped calls (`grouped`,
    `grouped:k=v;...` under those settings, `grouped_init`), each step ending with `finish()`."""
    from mpi4py import MPI

    import adaptcoll

    impls: dict[str, Callable[[], None]] = {}
    for name in names:
        if name == "per_array":
            impls[name] = per_array
        elif name == "packed":
            impls[name] = packed
        elif name == "grouped_init":
            preq = comm.Allreduce_multi_init(sends, recvs, MPI.SUM)

            def persistent(preq: Any = preq) -> None:
                preq.Start()
                preq.Wait()
                finish()

            impls[name] = persistent
        elif name == "grouped" or name.startswith("grouped:"):
            kw = dict(kv.split("=", 1) for kv in name.partition(":")[2].split(";") if kv)

            def grouped(kw: dict[str, str] = kw) -> None:
                with adaptcoll.configured(**kw):
                    comm.Allreduce_multi(sends, recvs, MPI.SUM)
                finish()

            impls[name] = grouped
        else:
            raise SystemExit(f"unknown implementation {name!r}")
    return impls


def make_device_impls(
    names: list[str], sends: list[Any], recvs: list[Any], comm: Any, native: Any
) -> dict[str, Callable[[], None]]:
    """The implementations on CuPy arrays, for an MPI that is not CUDA-aware (what a user writes): every
    step ends with a device synchronize. `per_array` stages each array by hand (asnumpy, native
    Allreduce in place on the host copy, `.set` back); `packed` concatenates on the device, stages the
    one buffer, and copies back into the arrays with slices on the device; the grouped ones pass the
    CuPy arrays to adaptcoll."""
    import cupy
    from mpi4py import MPI

    device = cupy.cuda.Device()
    bounds = np.cumsum([0] + [a.size for a in sends]).tolist()
    spans = list(itertools.pairwise(bounds))

    def per_array() -> None:
        for s, r in zip(sends, recvs):
            host = cupy.asnumpy(s)
            native.Allreduce(MPI.IN_PLACE, host, MPI.SUM)
            r.set(host)
        device.synchronize()

    def packed() -> None:
        flat = cupy.concatenate([s.ravel() for s in sends])
        host = cupy.asnumpy(flat)
        native.Allreduce(MPI.IN_PLACE, host, MPI.SUM)
        flat.set(host)
        for r, (lo, hi) in zip(recvs, spans):
            r[...] = flat[lo:hi].reshape(r.shape)
        device.synchronize()

    return _with_grouped(names, per_array, packed, sends, recvs, comm, device.synchronize)


def make_impls(
    names: list[str], sends: list[np.ndarray], recvs: list[np.ndarray], comm: Any, native: Any
) -> dict[str, Callable[[], None]]:
    from mpi4py import MPI

    total = sum(a.size for a in sends)
    packbuf = np.empty(total, np.float32)
    bounds = np.cumsum([0] + [a.size for a in sends]).tolist()
    spans = list(itertools.pairwise(bounds))

    def per_array() -> None:
        for s, r in zip(sends, recvs):
            native.Allreduce(s, r, MPI.SUM)

    def packed() -> None:
        np.concatenate([s.reshape(-1) for s in sends], out=packbuf)
        native.Allreduce(MPI.IN_PLACE, packbuf, MPI.SUM)
        for r, (lo, hi) in zip(recvs, spans):
            r.reshape(-1)[...] = packbuf[lo:hi]

    return _with_grouped(names, per_array, packed, sends, recvs, comm, lambda: None)


def run(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import adaptcoll

    world = MPI.COMM_WORLD
    comm = adaptcoll.Intracomm(world.Dup())
    native = world.Dup()
    counts = load_set(args.set)[: args.max_arrays or None]
    rng = np.random.default_rng(world.rank + 1)
    sends = [rng.standard_normal(n, dtype=np.float32) for n in counts]
    recvs = [np.zeros(n, np.float32) for n in counts]
    refs = [np.empty(n, np.float32) for n in counts]
    for s, r in zip(sends, refs):
        native.Allreduce(s, r, MPI.SUM)
    host = args.device == "host"
    if host:
        impls = make_impls(args.impl, sends, recvs, comm, native)
        sync: Callable[[], None] = lambda: None  # noqa: E731
    else:
        import cupy

        sends, recvs = [cupy.asarray(s) for s in sends], [cupy.asarray(r) for r in recvs]
        sync = cupy.cuda.Device().synchronize
        sync()
        impls = make_device_impls(args.impl, sends, recvs, comm, native)
    times: dict[str, list[float]] = {k: [] for k in impls}
    adaptcoll.reset_stats()
    for it in range(args.warmup + args.iters):
        for name, fn in impls.items():
            for r in recvs:
                r.fill(0)
            sync()
            world.Barrier()
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
            if it == 0:
                got = recvs if host else [cupy.asnumpy(r) for r in recvs]
                bad = [i for i, (a, b) in enumerate(zip(got, refs)) if not np.allclose(a, b, rtol=1e-5, atol=1e-5)]
                bad_all = world.allreduce(len(bad))
                if bad_all:
                    raise SystemExit(f"{name}: {bad_all} arrays differ from native (rank {world.rank}: {bad[:5]})")
            if it >= args.warmup:
                times[name].append(t)
    slowest = {k: np.max(world.gather(np.array(v), root=0) or [np.zeros(1)], axis=0) for k, v in times.items()}
    stats = adaptcoll.stats()
    if world.rank == 0:
        out = {
            "set": args.set,
            "device": args.device,
            "ranks": world.size,
            "arrays": len(counts),
            "bytes": 4 * sum(counts),
            "impls": {k: {"median_s": float(np.median(v)), "samples_s": v.tolist()} for k, v in slowest.items()},
            "stats": stats,
        }
        base = out["impls"].get("per_array", {}).get("median_s")
        for k, v in out["impls"].items():
            ratio = f"{base / v['median_s']:.2f}x per-array" if base else ""
            print(f"{args.set:14s} {k:32s} {v['median_s'] * 1e3:9.3f} ms  {ratio}")
        print(adaptcoll.stats_table(), file=sys.stderr)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    comm.Free()
    native.Free()


def summarize(files: list[str]) -> None:
    """Median over launches of per-launch medians and of per-launch ratios."""
    runs = []
    for path in files:
        with open(path) as f:
            runs.append(json.load(f))
    by_set: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        name = r["set"] if r.get("device", "host") == "host" else f"{r['set']} ({r['device']}, {r['ranks']} ranks)"
        by_set.setdefault(name, []).append(r)
    print("| set | implementation | step (ms) | per-array native / it | hand-packed native / it | launches |")
    print("|---|---|---:|---:|---:|---:|")
    for name, rs in by_set.items():
        for impl in rs[0]["impls"]:
            med = statistics.median(r["impls"][impl]["median_s"] for r in rs) * 1e3
            cells = []
            for base in ("per_array", "packed"):
                ratios = [r["impls"][base]["median_s"] / r["impls"][impl]["median_s"] for r in rs if base in r["impls"]]
                cells.append(
                    f"{statistics.median(ratios):.2f} ({'/'.join(f'{x:.2f}' for x in ratios)})" if ratios else ""
                )
            print(f"| {name} | {impl} | {med:.2f} | {cells[0]} | {cells[1]} | {len(rs)} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="resnet50", choices=["resnet50", "bert_base", "latency_1000"])
    p.add_argument("--impl", action="append", help="per_array, packed, grouped, grouped_init, grouped:K=V;...")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--device", choices=["host", "cupy"], default="host", help="host NumPy or CuPy arrays")
    p.add_argument("--max-arrays", type=int, default=0, help="only the set's first N arrays (tests)")
    p.add_argument("--summarize", nargs="+", metavar="JSON")
    args = p.parse_args()
    if args.summarize:
        return summarize(args.summarize)
    args.impl = args.impl or ["per_array", "packed", "grouped", "grouped_init"]
    run(args)


if __name__ == "__main__":
    main()
