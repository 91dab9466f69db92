"""Small CuPy calls below the device threshold: adaptcoll's fast path for small device arrays
(adaptcoll.device.small) against the same calls through the full decision and the path a user writes by
hand for an MPI that is not CUDA-aware (cupy.asnumpy -> native MPI on host memory -> ndarray.set).

    mpiexec -n 2 -bind-to core python bench/device_small.py --json bench/out/device_small.json

Per (collective, size) the implementations are interleaved call by call (their order rotates each
iteration): barrier, timed call, device synchronization, for each alike; the sample of an iteration is
the maximum over ranks; medians (and p90) of `--iters` iterations after `--warmup`. `decided` is
adaptcoll with the fast path switched off for its calls (`small.ARRAY_TYPE[0] = None`), i.e. the route
before the fast path. Results are checked against the hand path once per implementation, and stats()
must show every adaptcoll call counted "native (staged): below native_below" (exit 1 otherwise).
Without CuPy or a GPU it exits 2 and says why. Not part of the adaptcoll package.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
    import adaptcoll
except ImportError:  # a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import adaptcoll
from mpi4py import MPI

from adaptcoll.device import small

STAGED_BELOW = "native (staged): below native_below"
IMPLS = ("adaptcoll", "decided", "hand")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def calls(cupy: Any, comm: Any, world: MPI.Intracomm, collective: str, n: int) -> dict[str, Callable[[], Any]]:
    """The three implementations of one call on float32 buffers of n elements (each its own buffers)."""
    rank = world.Get_rank()
    made: dict[str, Callable[[], Any]] = {}
    for impl in IMPLS:
        x = cupy.arange(n, dtype="f4") + rank
        y = cupy.zeros(n, "f4")
        if impl == "hand":
            made[impl] = _hand(cupy, world, collective, x, y, n, rank)
        elif collective == "bcast":
            made[impl] = lambda x=x: comm.Bcast(x, 0)
        elif collective == "reduce":
            made[impl] = lambda x=x, y=y: comm.Reduce(x, y, MPI.SUM, 0)
        else:
            made[impl] = lambda x=x, y=y: comm.Allreduce(x, y, MPI.SUM)
        made[impl].out = x if collective == "bcast" else y  # type: ignore[attr-defined]
    return made


def _hand(cupy: Any, world: MPI.Intracomm, collective: str, x: Any, y: Any, n: int, rank: int) -> Callable[[], Any]:
    if collective == "bcast":

        def run() -> None:
            h = cupy.asnumpy(x) if rank == 0 else np.empty(n, "f4")
            world.Bcast(h, 0)
            if rank:
                x.set(h)

    elif collective == "reduce":

        def run() -> None:
            o = np.empty(n, "f4") if rank == 0 else None
            world.Reduce(cupy.asnumpy(x), o, MPI.SUM, 0)
            if rank == 0:
                y.set(o)

    else:

        def run() -> None:
            o = np.empty(n, "f4")
            world.Allreduce(cupy.asnumpy(x), o, MPI.SUM)
            y.set(o)

    run.out = x if collective == "bcast" else y  # type: ignore[attr-defined]
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--collectives", default="bcast,reduce,allreduce")
    parser.add_argument("--sizes", default="4K,64K,1M", help="message sizes (bytes, K, M), below the device threshold")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args(argv)
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as why:  # no CuPy, or no GPU
        print(f"device_small: needs CuPy and a GPU ({type(why).__name__}: {why})", file=sys.stderr)
        return 2
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    comm = adaptcoll.Intracomm(world.Dup())
    warm = cupy.zeros(4, "f4")
    comm.Allreduce(MPI.IN_PLACE, warm)  # sets the communicator's tuning up, enables the fast path
    sizes = [parse_size(s) for s in opts.sizes.split(",")]
    results: list[dict[str, Any]] = []
    failed = False
    for collective in opts.collectives.split(","):
        name = {"bcast": "Bcast", "reduce": "Reduce", "allreduce": "Allreduce"}[collective]
        for nbytes in sizes:
            made = calls(cupy, comm, world, collective, nbytes // 4)
            samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
            adaptcoll.reset_stats()
            for i in range(opts.warmup + opts.iters):
                for k in range(len(IMPLS)):
                    impl = IMPLS[(i + k) % len(IMPLS)]
                    saved = small.ARRAY_TYPE[0]
                    if impl == "decided":
                        small.ARRAY_TYPE[0] = None
                    world.Barrier()
                    t = time.perf_counter()
                    made[impl]()
                    cupy.cuda.runtime.deviceSynchronize()
                    elapsed = time.perf_counter() - t
                    small.ARRAY_TYPE[0] = saved
                    if i >= opts.warmup:
                        samples[impl].append(elapsed)
            counted = adaptcoll.stats().get(name, {}).get("native_reasons", {})
            want = 2 * (opts.warmup + opts.iters)
            if counted != {STAGED_BELOW: want}:
                print(
                    f"rank {rank}: {name} {nbytes}: counted {counted}, want {{{STAGED_BELOW!r}: {want}}}",
                    file=sys.stderr,
                )
                failed = True
            ref = cupy.asnumpy(made["hand"].out)  # type: ignore[attr-defined]
            for impl in ("adaptcoll", "decided") if rank == 0 or collective != "reduce" else ():
                if not np.array_equal(cupy.asnumpy(made[impl].out), ref):  # type: ignore[attr-defined]
                    print(f"rank {rank}: {name} {nbytes} {impl}: result differs from the hand path", file=sys.stderr)
                    failed = True
            gathered = world.gather(samples, 0)
            if rank == 0:
                row: dict[str, Any] = {"collective": name, "bytes": nbytes}
                for impl in IMPLS:
                    worst = np.max([g[impl] for g in gathered], axis=0) * 1e6
                    row[impl] = {"median_us": float(np.median(worst)), "p90_us": float(np.percentile(worst, 90))}
                row["hand_over_adaptcoll"] = row["hand"]["median_us"] / row["adaptcoll"]["median_us"]
                row["decided_over_adaptcoll"] = row["decided"]["median_us"] / row["adaptcoll"]["median_us"]
                results.append(row)
                print(
                    f"{name:<10}{nbytes:>9}  adaptcoll {row['adaptcoll']['median_us']:8.1f} us  decided "
                    f"{row['decided']['median_us']:8.1f} us  hand {row['hand']['median_us']:8.1f} us  "
                    f"hand/adaptcoll {row['hand_over_adaptcoll']:.2f}",
                    flush=True,
                )
    failed = world.allreduce(failed, MPI.LOR)
    if rank == 0 and opts.json is not None:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "ranks": world.Get_size(),
            "mpi": MPI.Get_library_version().splitlines()[0],
            "cupy": cupy.__version__,
            "device": _device_name(cupy),
            "host": platform.node(),
            "iters": opts.iters,
            "warmup": opts.warmup,
        }
        opts.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 1 if failed else 0


def _device_name(cupy: Any) -> str:
    try:
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
