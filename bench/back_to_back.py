"""Back-to-back calls (no barrier between them), native MPI against adaptcoll settings, interleaved
block by block: each block runs K calls of one implementation and is timed as a whole (max over ranks),
blocks of the implementations alternate (A B A B ...), so a program that calls a collective in a loop
is what is measured. Per implementation: median per-call time of the blocks; ratio native/impl.

    mpiexec -n 2 -bind-to core python bench/back_to_back.py -c allreduce --sizes 1M,16M \
        --impl 'allreduce_algorithm=shm;allreduce_native_below=0' --blocks 15 --calls 10
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

try:
    import adaptcoll
except ImportError:  # a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import adaptcoll
from adaptcoll.measure import first_blocking_calls, make_buffers, parse_overrides, parse_size, pin_malloc, starter


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-c", "--collectives", default="bcast,reduce,allreduce")
    p.add_argument("--sizes", default="1M,16M")
    p.add_argument("--impl", action="append", default=[], help="adaptcoll settings KEY=VALUE;... (repeatable)")
    p.add_argument("--blocks", type=int, default=15)
    p.add_argument("--calls", type=int, default=10, help="calls per block")
    p.add_argument(
        "--malloc", choices=("pinned", "as-is"), default="pinned", help="glibc malloc (see adaptcoll.measure)"
    )
    args = p.parse_args()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if args.malloc == "pinned":
        pin_malloc()
    impls = [("native", world.Dup(), None)]
    for text in args.impl or [""]:
        with adaptcoll.configured(**dict(parse_overrides(text, f"--impl {text!r}"))) as chosen:
            comm = adaptcoll.Intracomm(world.Dup())
            first_blocking_calls(adaptcoll, comm, MPI)
        impls.append((f"adaptcoll:{text}" if text else "adaptcoll", comm, chosen))
    for coll in args.collectives.split(","):
        for size in (parse_size(t) for t in args.sizes.split(",")):
            bufs = make_buffers(coll, size)
            calls = [starter(coll, c, bufs, 0, MPI) for _, c, _ in impls]
            times = np.zeros((len(impls), args.blocks))
            for b in range(-1, args.blocks):  # block -1: warm-up
                for k, (_, _, chosen) in enumerate(impls):
                    if chosen is not None:
                        adaptcoll.runtime.settings.use(chosen)
                    world.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        calls[k]()
                    if b >= 0:
                        times[k, b] = (time.perf_counter() - t0) / args.calls
            worst = np.max(np.stack(world.allgather(times)), axis=0) * 1e6
            if world.Get_rank() == 0:
                med = np.median(worst, axis=1)
                for k, (label, _, _) in enumerate(impls):
                    ratio = np.median(worst[0] / worst[k])
                    print(f"{coll:<10}{size:>10}  {label:<60}{med[k]:>10.1f} us  ratio {ratio:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
